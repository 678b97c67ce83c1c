"""Review r47 (mutation testing by hand): the YAML policy language's loading, schema and lint,
and the command line's contract for ``policy lint`` / ``policy explain``.

Each test names, in its docstring, the hand-made mutant it kills (what the mutant did) and the
rule it pins. Every test runs the real loader, linter and command line in process.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentgate._yaml import load_yaml
from agentgate.cli.main import main
from agentgate.errors import PolicyError
from agentgate.keys import SigningKey
from agentgate.policy import lint, parse_policy

ROOT = "did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm"
BOT = "did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj"
ALICE = "did:key:z6MkkNV2MQswkwEnXrUkeM7T8qYE3qWB163VBePnsLBSTAru"
BOB = "did:key:z6MkkmdixGr7Dcufmp29f1wKWZGR2CEXVSxu9VvkPUs5H2M2"

HEAD = f"""\
version: 1
trust_anchors:
  root: {{did: {ROOT}}}
principals:
  bot: {{kind: agent, did: {BOT}, roles: [worker]}}
  alice: {{kind: human, did: {ALICE}}}
  bob: {{kind: human, did: {BOB}}}
tools:
  payments.refund:
    args:
      amount: {{type: number, required: true}}
"""

WORKER = """\
roles:
  worker:
    capabilities: [{resource: "tool:payments.refund", constraints: {amount: {le: 100}}}]
    ttl_s: 600
"""


def _refused(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="p.yaml")
    return info.value


def _codes(text: str) -> list[str]:
    return [f.code for f in lint(parse_policy(text, source="p.yaml"))]


# --- limits written as null are refused, never read as "no limit" ------------------------------


@pytest.mark.parametrize(
    ("where", "text"),
    [
        (
            "roles.worker.budget",
            HEAD + WORKER + "    budget:\n",
        ),
        (
            "roles.worker.delegation.budget",
            HEAD + WORKER + "    budget: {limit: 100}\n    delegation:\n      max_ttl_s: 60\n      budget:\n",
        ),
        (
            "tools.payments.refund.rate",
            HEAD + "    rate:\n" + WORKER,
        ),
    ],
)
def test_a_limit_written_as_null_is_refused_at_its_line(where: str, text: str) -> None:
    """Kills: the ``_written_out`` validator dropped for Role.budget / Delegation.budget / Tool.rate.

    A limit key with nothing after it (a template variable never set) would lift the limit it
    names; it is refused with its location, never loaded as unlimited."""
    error = _refused(text)
    assert where in str(error) and "null" in str(error)
    assert error.line is not None


# --- approval gates -------------------------------------------------------------------------------


def test_quorum_counts_distinct_approvers() -> None:
    """Kills: the quorum check counted ``approvers`` with repeats (``len(list)``, not ``len(set)``).

    ``approvers: [alice, alice]`` with ``quorum: 2`` is a gate no call could ever pass (one
    person signs once): refused at load, naming the quorum."""
    text = (
        HEAD
        + WORKER
        + "approvals:\n  big:\n    resource: tool:payments.refund\n    approvers: [alice, alice]\n    quorum: 2\n"
    )
    error = _refused(text)
    assert "quorum 2 is more than the 1 approvers named" in str(error)
    assert error.line == HEAD.count("\n") + WORKER.count("\n") + 5


def test_an_approver_must_be_a_declared_principal() -> None:
    """Kills: the check that every approver is a declared principal dropped.

    An approver the policy does not name (a typo) is refused at its line, never a gate whose
    quorum counts a name no key can sign for."""
    text = (
        HEAD
        + WORKER
        + "approvals:\n  big:\n    resource: tool:payments.refund\n    approvers: [alice, carol]\n"
    )
    error = _refused(text)
    assert "'carol' is not declared in principals" in str(error)
    assert error.line == HEAD.count("\n") + WORKER.count("\n") + 4


def test_an_approval_gate_without_approvers_is_refused() -> None:
    """Kills: ``approvers`` allowed empty (``min_length=0``).

    A gate with nobody to sign is refused at load, not loaded as a gate that blocks or skips."""
    text = HEAD + WORKER + "approvals:\n  big:\n    resource: tool:payments.refund\n    approvers: []\n"
    assert "approvals.big.approvers" in str(_refused(text))


def test_an_approval_gate_on_a_non_canonical_resource_is_refused() -> None:
    """Kills: the check of an approval gate's ``resource`` pattern dropped.

    A gate on ``tool:Payments.refund`` would guard no call at all (the call's resource is
    canonical): the approval it reads as requiring would be silently skipped. Refused at load."""
    text = HEAD + WORKER + "approvals:\n  big:\n    resource: tool:Payments.refund\n    approvers: [alice]\n"
    error = _refused(text)
    assert error.line == HEAD.count("\n") + WORKER.count("\n") + 3


# --- keys ---------------------------------------------------------------------------------------


def test_a_key_file_and_a_did_that_disagree_are_refused(tmp_path: Path) -> None:
    """Kills: the check that ``key:`` and ``did:`` name the same key dropped.

    A principal given both, naming two different keys, is refused; the key file never silently
    wins over the did a reviewer reads."""
    other = SigningKey.generate()
    (tmp_path / "bot.pub").write_text(other.did + "\n")
    text = HEAD.replace(f"did: {BOT}, roles", f"did: {BOT}, key: bot.pub, roles") + WORKER
    with pytest.raises(PolicyError, match="key file and did name different keys"):
        parse_policy(text, source="p.yaml", base_dir=tmp_path)


def test_the_digest_of_a_policy_naming_key_files_covers_the_keys(tmp_path: Path) -> None:
    """Kills: the policy hash of a policy that names key files reduced to the file's SHA-256.

    Same text, different key in ``bot.pub``: different ``policy_digest`` (docs/audit-format.md),
    so that an audit entry says which keys the policy trusted."""
    import hashlib

    text = HEAD.replace(f"did: {BOT}, roles", "key: bot.pub, roles") + WORKER
    digests = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "bot.pub").write_text(SigningKey.generate().did + "\n")
        digests.append(parse_policy(text, source="p.yaml", base_dir=folder).digest)
    assert digests[0] != digests[1]
    assert hashlib.sha256(text.encode()).hexdigest() not in digests


# --- YAML ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1: a\n", "true: a\n", "null: a\n", "? [a]\n: b\n"])
def test_non_string_keys_are_refused(text: str) -> None:
    """Kills: the key check reduced to ``isinstance(key_node, ScalarNode)`` (any scalar tag).

    ``1:``, ``true:`` and ``null:`` are not the text keys a reviewer reads; refused with a location."""
    with pytest.raises(PolicyError, match="mapping keys must be plain strings") as info:
        load_yaml(text, source="f.yaml")
    assert info.value.line == 1


@pytest.mark.parametrize(
    "text",
    [
        'a: !!timestamp "2026-01-31"\n',
        "a: !!binary aGk=\n",
        "a: !!set {x}\n",
        "a: !include [other.yaml]\n",
        "a: !!omap [{b: 1}]\n",
        "a: !!pairs [{b: 1}]\n",
    ],
)
def test_tags_outside_the_core_schema_are_refused(text: str) -> None:
    """Kills: the plain-timestamp shortcut widened to a quoted ``!!timestamp``, and the sequence
    tag check dropped (``!include [file]``, ``!!omap [...]`` built as a plain list).

    A tagged list or a tagged quoted date is refused with its location, never quietly built."""
    with pytest.raises(PolicyError, match="is not allowed"):
        load_yaml(text, source="f.yaml")


def test_aliases_that_expand_past_the_value_limit_are_refused() -> None:
    """Kills: the build-time value cap (``MAX_NODES`` values built) raised far above the limit.

    Fifteen aliases (under ``MAX_ALIASES``) in a 4 KB file, nested so that they expand to 61,000
    values: the parser's event count never sees the expansion, so only the build-time count can
    refuse it, before it is built whole."""
    items = ", ".join("1" for _ in range(1000))
    text = f"a: &a [{items}]\nb: &b [{', '.join(['*a'] * 10)}]\nc: [{', '.join(['*b'] * 5)}]\n"
    assert len(text) < 16 * 1024
    with pytest.raises(PolicyError, match="expands to more than 50000 values"):
        load_yaml(text, source="f.yaml")


def test_a_tagged_octal_string_stays_text() -> None:
    """Kills: the tag check of ``_text`` dropped (``!!str 0o17`` read as 15).

    ``!!str`` says text: the value stays the string the author wrote."""
    data, _ = load_yaml("a: !!str 0o17\nb: 0o17\nc: !!str 1e3\n", source="f.yaml")
    assert data == {"a": "0o17", "b": 15, "c": "1e3"}


@pytest.mark.parametrize("value", ["09", "-08", "0_9"])
def test_a_decimal_with_a_leading_zero_is_ambiguous(value: str) -> None:
    """Kills: the leading-zero refusal of ``_text`` dropped (``09`` then read as the float 9.0).

    ``09`` is text to PyYAML and 9 to YAML 1.2 (``le: 09`` in a constraint would silently become
    a number other readers disagree on): refused as ambiguous, with its location."""
    with pytest.raises(PolicyError, match="ambiguous number") as info:
        load_yaml(f"a: {value}\n", source="f.yaml")
    assert (info.value.line, info.value.column) == (1, 4)


# --- schema -------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["true", "1.0"])
def test_version_must_be_the_integer_one(version: str) -> None:
    """Kills: the version check reduced to ``version != 1`` (``True == 1 == 1.0``).

    ``version: true`` or ``1.0`` is not version 1: refused at the version line."""
    error = _refused(HEAD.replace("version: 1", f"version: {version}") + WORKER)
    assert "unsupported or missing policy version" in str(error) and error.line == 1


def test_the_constraint_field_in_is_only_spelled_in() -> None:
    """Kills: ``populate_by_name=True`` on ConstraintSpec (the Python name ``in_`` accepted).

    The operator is ``in``; ``in_`` is an unknown field, refused, not a second spelling."""
    text = HEAD + WORKER.replace("{le: 100}", "{in_: [1, 2]}")
    assert "unknown field" in str(_refused(text))


@pytest.mark.parametrize(
    "spec",
    [
        "{ge: , le: 100}",
        "{ge: null, le: 100}",
        "{eq: , in: [1, 2]}",
        "{prefix: , eq: x}",
    ],
)
def test_an_operator_written_as_null_is_refused(spec: str) -> None:
    """Kills: ConstraintSpec's ``_not_null`` validator dropped (a null operator silently left out).

    Operators are a conjunction: ``{ge: , le: 100}`` must not load as ``le: 100`` alone, a rule
    wider than its text; nor a gate's ``when`` as a gate that asks for less. Refused at its line."""
    rule = HEAD + WORKER.replace("{le: 100}", spec)
    error = _refused(rule)
    assert "an operator needs a value" in str(error)
    assert error.line == HEAD.count("\n") + 3
    gate = (
        HEAD
        + WORKER
        + f"approvals:\n  big:\n    resource: tool:payments.refund\n    when: {{amount: {spec}}}\n"
        + "    approvers: [alice]\n"
    )
    assert "an operator needs a value" in str(_refused(gate))


def test_an_unknown_field_is_located_at_its_key() -> None:
    """Kills: the unknown-field error located at the value's mark instead of the key's.

    The line and column point at the misspelt key itself (``ttl:``), where the fix is."""
    text = HEAD + "roles:\n  worker:\n    ttl: 600\n"
    error = _refused(text)
    assert "unknown field roles.worker.ttl" in str(error) and "ttl_s" in str(error)
    assert (error.line, error.column) == (HEAD.count("\n") + 3, 5)


@pytest.mark.parametrize(
    "quota",
    [
        "  q: {window_s: 60, limit: 5}\n",
        "  q: {window_s: 60, limit: 5, role: worker, principal: bot}\n",
    ],
)
def test_a_quota_names_exactly_one_subject(quota: str) -> None:
    """Kills: the quota's one-subject check relaxed to "at most one" (``> 1``) or dropped.

    A quota with no tenant, principal or role limits nobody: refused at load."""
    assert "exactly one of tenant, principal, role" in str(_refused(HEAD + WORKER + "quotas:\n" + quota))


@pytest.mark.parametrize(
    ("subject", "section"),
    [("role: wrker", "roles"), ("principal: bott", "principals"), ("tenant: acme", "tenants")],
)
def test_a_quota_subject_must_be_declared(subject: str, section: str) -> None:
    """Kills: the check that a quota's tenant, principal or role is declared dropped.

    A quota on a misspelt subject would limit nobody while reading as a limit: refused at load."""
    text = HEAD + WORKER + f"quotas:\n  q: {{window_s: 60, limit: 5, {subject}}}\n"
    error = _refused(text)
    assert f"is not declared in {section}" in str(error)
    assert error.line == HEAD.count("\n") + WORKER.count("\n") + 2


def test_a_quota_resource_pattern_must_be_a_capability_pattern() -> None:
    """Kills: the check of each quota's ``resources`` patterns dropped.

    ``tool:Payments.*`` (not canonical) would count no call at all: refused at its line."""
    text = HEAD + WORKER + "quotas:\n  q:\n    role: worker\n    window_s: 60\n    limit: 5\n"
    text += "    resources: ['tool:payments.*', 'tool:Payments.*']\n"
    error = _refused(text)
    assert error.line == HEAD.count("\n") + WORKER.count("\n") + 6


# --- lint ---------------------------------------------------------------------------------------


def test_a_delegated_budget_in_another_unit_is_an_error() -> None:
    """Kills: ``delegated_budget_above_role`` comparing only the limits, not the units.

    A role with 1,000 micro-dollars that delegates 10 ``calls`` delegates a budget in a unit it
    does not hold: an error finding."""
    text = (
        HEAD
        + WORKER
        + (
            "    budget: {limit: 1000}\n    delegation:\n      max_ttl_s: 60\n"
            "      capabilities: [{resource: 'tool:payments.refund', constraints: {amount: {le: 10}}}]\n"
            "      budget: {limit: 10, unit: calls}\n"
        )
    )
    assert "delegated_budget_above_role" in _codes(text)


@pytest.mark.parametrize(("delegated", "flagged"), [(1000, False), (1001, True)])
def test_a_delegated_budget_one_above_the_role_is_an_error(delegated: int, flagged: bool) -> None:
    """Kills: ``delegated_budget_above_role`` comparing with an off-by-one (``> limit + 1``).

    A delegated budget equal to the role's is fine; one micro-dollar above it is scope creep."""
    text = (
        HEAD
        + WORKER
        + "    budget: {limit: 1000}\n    delegation:\n      max_ttl_s: 60\n"
        + "      capabilities: [{resource: 'tool:payments.refund', constraints: {amount: {le: 10}}}]\n"
        + f"      budget: {{limit: {delegated}}}\n"
    )
    assert ("delegated_budget_above_role" in _codes(text)) is flagged


@pytest.mark.parametrize(
    ("depth", "flagged"), [("", True), ("      max_depth: 1\n", True), ("      max_depth: 0\n", False)]
)
def test_a_delegation_one_step_deep_without_a_ttl_is_an_error(depth: str, flagged: bool) -> None:
    """Kills: ``delegation_without_ttl`` firing only from ``max_depth`` 2 (``> 1`` for ``> 0``).

    The default delegation (one step) with no ``max_ttl_s`` lets a sub-agent's grant live as long
    as the role's: an error; ``max_depth: 0`` delegates nothing and is not flagged."""
    text = HEAD + WORKER + "    delegation:\n" + depth + "      capabilities: []\n"
    assert ("delegation_without_ttl" in _codes(text)) is flagged


@pytest.mark.parametrize(("ttl", "flagged"), [(600, False), (601, True)])
def test_a_role_ttl_one_second_above_the_policy_max_is_an_error(ttl: int, flagged: bool) -> None:
    """Kills: ``ttl_above_policy_max`` comparing with an off-by-one (``> max + 1``).

    ``settings.max_ttl_s`` is the most any grant may live: one second more is an error."""
    text = HEAD + "settings: {max_ttl_s: 600}\n" + WORKER.replace("ttl_s: 600", f"ttl_s: {ttl}")
    assert ("ttl_above_policy_max" in _codes(text)) is flagged


def test_every_delegated_capability_is_checked() -> None:
    """Kills: the compiler keeping only the first of a delegation's capabilities.

    The second entry of ``delegation.capabilities`` (a tool the role does not hold) is found."""
    text = (
        HEAD
        + "  other.tool: {}\n"
        + WORKER
        + "    delegation:\n      max_ttl_s: 60\n      capabilities:\n"
        + "        - {resource: 'tool:payments.refund', constraints: {amount: {le: 10}}}\n"
        + "        - {resource: 'tool:other.tool'}\n"
    )
    assert "delegates_unheld_capability" in _codes(text)


def test_an_agent_role_is_every_role_an_agent_holds() -> None:
    """Kills: ``agent_roles`` built from each agent principal's first role only, and
    ``agent_inherits_role`` looking at ``kind: agent`` only.

    A role held by an agent (second in its list, no ``kind``) that grants ``tool:*`` and inherits
    is still an agent role: both findings are reported."""
    text = (
        HEAD.replace("roles: [worker]", "roles: [worker, wide]")
        + WORKER
        + "  base:\n    capabilities: []\n"
        + "  wide:\n    inherits: [base]\n    capabilities: [{resource: 'tool:*'}]\n    ttl_s: 60\n"
    )
    codes = _codes(text)
    assert "wildcard_capability_for_agent" in codes and "agent_inherits_role" in codes


def test_a_model_wildcard_for_an_agent_is_an_error() -> None:
    """Kills: the wildcard rule's error case narrowed to ``tool:*``.

    ``model:*`` held by an agent is every model: an error, as ``tool:*`` is."""
    text = (
        HEAD
        + "models:\n  m1: {cost_per_mtok: {input: 1, output: 1}}\n"
        + WORKER
        + "  wide:\n    kind: agent\n    capabilities: [{resource: 'model:*'}]\n    ttl_s: 60\n"
    )
    findings = [f for f in lint(parse_policy(text)) if f.code == "wildcard_capability_for_agent"]
    assert findings and findings[0].severity.value == "error"


def test_an_agent_holding_a_trust_anchor_key_is_an_error() -> None:
    """Kills: the check that an agent principal does not hold a trust anchor's key dropped.

    An agent with the root key can issue itself any root grant: ``principal_without_key``
    names the anchor, as an error."""
    text = HEAD.replace(f"did: {BOT}", f"did: {ROOT}") + WORKER
    findings = [f for f in lint(parse_policy(text)) if "holds the key of trust anchor root" in f.message]
    assert findings and findings[0].code == "principal_without_key"
    assert findings[0].severity.value == "error"


def test_findings_are_ordered_by_line() -> None:
    """Kills: ``lint`` returning findings in rule order instead of sorted by line.

    The report reads top to bottom with the file."""
    text = HEAD.replace("args:", "audit: false\n    args:") + "settings: {revocation: false}\n" + WORKER
    lines = [f.line or 0 for f in lint(parse_policy(text))]
    assert len(lines) >= 2 and lines == sorted(lines)


# --- the command line ---------------------------------------------------------------------------


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return str(path)


def test_lint_exits_1_for_a_single_error_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kills: ``policy lint`` exiting 1 only for more than one error (or skipping the first).

    One error finding is enough for exit 1 (docs/cli.md)."""
    path = _write(tmp_path, HEAD.replace("args:", "audit: false\n    args:") + WORKER)
    assert main(["policy", "lint", path, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in report["findings"] if f["severity"] == "error"] == ["tool_not_audited"]


def test_lint_json_of_an_unloadable_file_has_every_documented_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: the ``findings`` key dropped from ``lint --json`` for a file that does not load.

    The shape is ``{"file", "valid", "error", "findings"}`` with ``findings`` empty, on stdout,
    nothing on stderr, exit 2."""
    path = _write(tmp_path, "version: 1\nroles: {a: {ttl_s: 1}, a: {ttl_s: 2}}\n")
    assert main(["policy", "lint", path, "--json"]) == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["findings"] == [] and report["valid"] is False and report["file"] == path
    assert set(report["error"]) == {"message", "file", "line", "column", "expected", "hint"}
    assert captured.err == ""


def test_explain_json_of_a_call_without_a_gate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Kills: ``quorum`` printed as 0 (not null) when no gate applies, and the text saying
    "approval: none needed" for a deny.

    No approval: ``approval``, ``quorum`` and ``approval_expiry_s`` are null, ``approvers`` empty;
    a denied call's text never says no approval is needed."""
    path = _write(tmp_path, HEAD + WORKER)
    base = ["policy", "explain", path, "--as", "bot", "--tool", "payments.refund", "--args"]
    assert main([*base, '{"amount": 5}', "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["approval"] is None and out["quorum"] is None and out["approval_expiry_s"] is None
    assert out["approvers"] == []
    assert main([*base, '{"amount": 500}']) == 1
    assert "approval: none needed" not in capsys.readouterr().out


def test_explain_of_a_non_canonical_tool_is_a_deny_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: a tool name that is not canonical exiting 2 (bad input) instead of 1 (deny).

    docs/cli.md: a tool name that is not canonical is a deny, exit 1."""
    path = _write(tmp_path, HEAD + WORKER)
    assert main(["policy", "explain", path, "--as", "bot", "--tool", "Payments.Refund"]) == 1
    assert capsys.readouterr().out.startswith("DENY: ")


def test_an_error_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kills: ``_one_line`` keeping the message's own line breaks, and an ``AgentGateError``
    exiting 1 instead of 2.

    A policy whose error quotes a multi-line key still gives exactly one ``agentgate: error:``
    line on stderr, exit 2."""
    path = _write(tmp_path, 'version: 1\n"x\\ny": 1\n')
    assert main(["policy", "explain", path, "--as", "bot", "--tool", "t"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentgate: error: ") and err.count("\n") == 1


# --- CAP and AMOUNT as the command line reads them ----------------------------------------------


@pytest.mark.parametrize(
    ("cap", "words"),
    [
        ("tool:payments.refund#", "'#' with no action"),
        ("tool:payments.refund?amount<=5&amount<=500", "given twice"),
        ('tool:payments.refund?currency="EUR', "encloses a whole value"),
        ("tool:payments.refund?currency=E%zz", "'%' starts a %XX escape"),
        ("tool:payments.refund?currency^=", "an empty prefix"),
    ],
)
def test_a_capability_outside_the_grammar_is_refused(cap: str, words: str) -> None:
    """Kills: parse_capability's refusals dropped one by one (an empty action read as the
    default, a repeated operator keeping the last (wider) bound, a stray quote or a bad escape
    read literally, an empty prefix matching every string).

    docs/cli.md (CAP): anything outside the grammar is refused rather than guessed."""
    from agentgate.capabilities import parse_capability
    from agentgate.errors import CapabilityError

    with pytest.raises(CapabilityError, match=re.escape(words)):
        parse_capability(cap)


def test_a_grant_issue_with_a_repeated_bound_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: a repeated operator in ``--allow`` keeping only the last bound, and an AMOUNT of
    ``500:`` read as 500 usd_micros.

    ``amount<=5&amount<=500`` would issue a grant ten times wider than its first clause: the
    command refuses it, exit 2, one error line, no token written; so is a budget with ``:`` and no
    unit."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    monkeypatch.chdir(tmp_path)
    for name in ("root", "alice"):
        assert main(["keys", "new", name, "--dir", "k"]) == 0
    capsys.readouterr()
    base = [
        "grant",
        "issue",
        "--issuer",
        "k/root.key",
        "--to",
        "k/alice.pub",
        "--ttl",
        "1h",
        "--out",
        "a.tok",
    ]
    assert main([*base, "--allow", "tool:payments.refund?amount<=5&amount<=500"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentgate: error: ") and err.count("\n") == 1 and "given twice" in err
    assert main([*base, "--allow", "tool:payments.refund", "--budget", "500:"]) == 2
    assert "name the unit" in capsys.readouterr().err
    assert not (tmp_path / "a.tok").exists()
