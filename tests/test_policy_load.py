"""Loading policies (agentgate/policy/_load.py): every error, a broken reference included, is
refused at its line and explained; the examples are valid; no policy means deny-all."""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.capabilities import Call
from agentgate.errors import PolicyError
from agentgate.keys import SigningKey, save_key
from agentgate.policy import Outcome, Policy, PolicyIndex, json_schema_text, lint, load_policy, parse_policy

POLICIES = Path(__file__).resolve().parents[1] / "policies"
EXAMPLES = ["support.yaml", "research_team.yaml", "gpu_platform.yaml"]
DID = SigningKey(b"\x01" * 32).did


def _error(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="p.yaml")
    return info.value


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_load_and_reference_the_schema(name: str) -> None:
    policy = load_policy(POLICIES / name)
    assert policy.document.version == 1 and policy.digest
    first = (POLICIES / name).read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=./policy.schema.json"


def test_schema_file_is_in_sync_with_the_models() -> None:
    assert (POLICIES / "policy.schema.json").read_text() == json_schema_text()
    schema = json.loads(json_schema_text())
    assert schema["additionalProperties"] is False and schema["required"] == ["version"]
    role = schema["$defs"]["Role"]["properties"]
    assert {"capabilities", "budget", "ttl_s", "delegation", "inherits"} <= set(role)
    assert role["ttl_s"]["description"]


def test_schema_without_the_models_source_has_no_descriptions_and_no_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review R79: the field descriptions are read from the models' source when a schema is asked
    for; where it is not installed the schema comes without them, as Pydantic's
    ``use_attribute_docstrings`` gave it, not as a traceback of ``agentgate policy schema``."""

    def no_source(_: object) -> str:
        raise OSError("could not get source code")

    monkeypatch.setattr(inspect, "getsource", no_source)
    role = json.loads(json_schema_text())["$defs"]["Role"]["properties"]
    assert "ttl_s" in role and "description" not in role["ttl_s"]


def test_deny_all_denies_everything() -> None:
    index = PolicyIndex(Policy.deny_all())
    decision = index.evaluate(DID, Call.tool("tickets.read", {}))
    assert decision.outcome is Outcome.DENY and decision.reasons


def test_empty_file_is_an_error_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("\n# nothing\n")
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "p.yaml")
    assert "empty" in info.value.message and "deny everything" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("text", "where", "written"),
    [
        ("~\n", (1, 1), "'~'"),
        ("# policy\n  null  # none\n", (2, 3), "'null'"),
        ("--- Null\n", (1, 5), "'Null'"),
    ],
)
def test_a_policy_written_as_null_is_said_to_be_null_not_empty(
    tmp_path: Path, text: str, where: tuple[int, int], written: str
) -> None:
    """Review R54: a file holding only ``~`` (or ``null``) was called "the policy file is empty",
    which sends its author looking for a truncated file; it says what it holds, where."""
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "p.yaml")
    assert info.value.message == f"the policy is null ({written}), not a mapping"
    assert (info.value.line, info.value.column) == where


@pytest.mark.parametrize("text", ["", "# nothing\n", "---\n", "---\n...\n"])
def test_a_policy_with_no_value_at_all_is_empty(tmp_path: Path, text: str) -> None:
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "p.yaml")
    assert info.value.message == "the policy file is empty"


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "absent.yaml")
    assert info.value.file == str(tmp_path / "absent.yaml")


def test_unknown_field_points_at_the_key_and_suggests_the_name() -> None:
    error = _error("version: 1\nroles:\n  a:\n    capabilities: []\n    tll_s: 60\n")
    assert (error.line, error.column) == (5, 5)
    assert "roles.a.tll_s" in error.message and "'ttl_s'" in (error.hint or "")


def test_wrong_type_points_at_the_value() -> None:
    error = _error("version: 1\nsettings:\n  max_ttl_s: 'long'\n")
    assert (error.line, error.column) == (3, 14) and error.expected == "an integer"


def test_strings_are_not_coerced_into_booleans_or_numbers() -> None:
    assert _error("version: 1\nsettings:\n  revocation: 'false'\n").line == 3
    assert _error("version: 1\ntools:\n  t:\n    audit: 0\n").line == 4


def test_missing_required_field_names_it() -> None:
    error = _error("version: 1\nprincipals:\n  bot: {did: " + DID + "}\n")
    assert "principals.bot.kind is required" in error.message and error.line == 3


def test_unknown_reference_suggests_the_close_name() -> None:
    error = _error(
        f"version: 1\nprincipals:\n  bot: {{kind: agent, did: {DID}, roles: [suport]}}\nroles:\n  support: {{}}\n"
    )
    assert "'suport' is not declared in roles" in error.message and "'support'" in (error.hint or "")


def test_bad_constraint_operator_value_is_located() -> None:
    error = _error(
        "version: 1\nroles:\n  a:\n    capabilities:\n      - resource: tool:x\n        constraints: {n: {in: []}}\n"
    )
    assert error.line == 6 and "in" in error.message


def test_key_files_resolve_against_the_policy_or_key_dir(tmp_path: Path) -> None:
    key = SigningKey.generate()
    save_key(key, tmp_path / "keys", "bot")
    text = "version: 1\nprincipals:\n  bot: {kind: agent, key: keys/bot.pub}\n"
    (tmp_path / "p.yaml").write_text(text)
    assert load_policy(tmp_path / "p.yaml").principal_dids["bot"] == key.did
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    shutil.copy(tmp_path / "p.yaml", elsewhere / "p.yaml")
    with pytest.raises(PolicyError) as info:
        load_policy(elsewhere / "p.yaml")
    assert "does not exist" in info.value.message and info.value.line == 3
    assert load_policy(elsewhere / "p.yaml", key_dir=tmp_path).principal_dids["bot"] == key.did


def test_key_file_and_did_must_agree(tmp_path: Path) -> None:
    save_key(SigningKey.generate(), tmp_path, "bot")
    text = f"version: 1\nprincipals:\n  bot: {{kind: agent, key: bot.pub, did: {DID}}}\n"
    with pytest.raises(PolicyError, match="different keys"):
        parse_policy(text, source="p.yaml", base_dir=tmp_path)


def test_private_key_file_is_not_a_public_key(tmp_path: Path) -> None:
    save_key(SigningKey.generate(), tmp_path, "bot")
    text = "version: 1\nprincipals:\n  bot: {kind: agent, key: bot.key}\n"
    with pytest.raises(PolicyError, match=r"bot\.key"):
        parse_policy(text, source="p.yaml", base_dir=tmp_path)


def test_non_utf8_and_non_mapping_documents_are_refused() -> None:
    with pytest.raises(PolicyError, match="UTF-8"):
        parse_policy(b"version: 1\nname: \xff\n", source="p.yaml")
    assert "not a mapping" in _error("- version: 1\n").message


def test_policy_digest_is_the_file_hash(tmp_path: Path) -> None:
    import hashlib

    text = "version: 1\n"
    (tmp_path / "p.yaml").write_text(text)
    assert load_policy(tmp_path / "p.yaml").digest == hashlib.sha256(text.encode()).hexdigest()


_KEYS = st.sampled_from(
    [
        "version",
        "roles",
        "tools",
        "principals",
        "capabilities",
        "resource",
        "ttl_s",
        "args",
        "type",
        "kind",
        "le",
        "x",
    ]
)
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=8), st.just("tool:a.b"))
_TREES = st.recursive(
    _LEAVES,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_KEYS, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(tree=_TREES)
def test_any_structure_loads_or_raises_policy_error(tree: object) -> None:
    text = yaml.safe_dump({"version": 1, "roles": tree}) if isinstance(tree, dict) else yaml.safe_dump(tree)
    try:
        policy = parse_policy(text, source="fuzz.yaml")
    except PolicyError as exc:
        assert exc.file == "fuzz.yaml" and exc.message
    else:
        lint(policy)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("version: 1\n-[]{}&*!'\"#:ab,? \t|>")), max_size=60))
def test_any_text_loads_or_raises_policy_error(text: str) -> None:
    try:
        parse_policy(text, source="fuzz.yaml")
    except PolicyError as exc:
        assert exc.file == "fuzz.yaml"


# --- a policy with a trust anchor, an agent, two approvers and one tool -----------------------------


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
            "tools.'payments.refund'.rate",
            HEAD + "    rate:\n" + WORKER,
        ),
    ],
)
def test_a_limit_written_as_null_is_refused_at_its_line(where: str, text: str) -> None:
    """Kills: the ``_written_out`` validator dropped for Role.budget / Delegation.budget / Tool.rate.

    A limit key with nothing after it (a template variable never set) would lift the limit it
    names; it is refused with its location, never loaded as unlimited."""
    error = _error(text)
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
    error = _error(text)
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
    error = _error(text)
    assert "'carol' is not declared in principals" in str(error)
    assert error.line == HEAD.count("\n") + WORKER.count("\n") + 4


def test_an_approval_gate_without_approvers_is_refused() -> None:
    """Kills: ``approvers`` allowed empty (``min_length=0``).

    A gate with nobody to sign is refused at load, not loaded as a gate that blocks or skips."""
    text = HEAD + WORKER + "approvals:\n  big:\n    resource: tool:payments.refund\n    approvers: []\n"
    assert "approvals.big.approvers" in str(_error(text))


def test_an_approval_gate_on_a_non_canonical_resource_is_refused() -> None:
    """Kills: the check of an approval gate's ``resource`` pattern dropped.

    A gate on ``tool:Payments.refund`` would guard no call at all (the call's resource is
    canonical): the approval it reads as requiring would be silently skipped. Refused at load."""
    text = HEAD + WORKER + "approvals:\n  big:\n    resource: tool:Payments.refund\n    approvers: [alice]\n"
    error = _error(text)
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


# --- schema -------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["true", "1.0"])
def test_version_must_be_the_integer_one(version: str) -> None:
    """Kills: the version check reduced to ``version != 1`` (``True == 1 == 1.0``).

    ``version: true`` or ``1.0`` is not version 1: refused at the version line."""
    error = _error(HEAD.replace("version: 1", f"version: {version}") + WORKER)
    assert "unsupported or missing policy version" in str(error) and error.line == 1


def test_the_constraint_field_in_is_only_spelled_in() -> None:
    """Kills: ``populate_by_name=True`` on ConstraintSpec (the Python name ``in_`` accepted).

    The operator is ``in``; ``in_`` is an unknown field, refused, not a second spelling."""
    text = HEAD + WORKER.replace("{le: 100}", "{in_: [1, 2]}")
    assert "unknown field" in str(_error(text))


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
    error = _error(rule)
    assert "an operator needs a value" in str(error)
    assert error.line == HEAD.count("\n") + 3
    gate = (
        HEAD
        + WORKER
        + f"approvals:\n  big:\n    resource: tool:payments.refund\n    when: {{amount: {spec}}}\n"
        + "    approvers: [alice]\n"
    )
    assert "an operator needs a value" in str(_error(gate))


def test_an_unknown_field_is_located_at_its_key() -> None:
    """Kills: the unknown-field error located at the value's mark instead of the key's.

    The line and column point at the misspelt key itself (``ttl:``), where the fix is."""
    text = HEAD + "roles:\n  worker:\n    ttl: 600\n"
    error = _error(text)
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
    assert "exactly one of tenant, principal, role" in str(_error(HEAD + WORKER + "quotas:\n" + quota))


@pytest.mark.parametrize(
    ("subject", "section"),
    [("role: wrker", "roles"), ("principal: bott", "principals"), ("tenant: acme", "tenants")],
)
def test_a_quota_subject_must_be_declared(subject: str, section: str) -> None:
    """Kills: the check that a quota's tenant, principal or role is declared dropped.

    A quota on a misspelt subject would limit nobody while reading as a limit: refused at load."""
    text = HEAD + WORKER + f"quotas:\n  q: {{window_s: 60, limit: 5, {subject}}}\n"
    error = _error(text)
    assert f"is not declared in {section}" in str(error)
    assert error.line == HEAD.count("\n") + WORKER.count("\n") + 2


def test_a_quota_resource_pattern_must_be_a_capability_pattern() -> None:
    """Kills: the check of each quota's ``resources`` patterns dropped.

    ``tool:Payments.*`` (not canonical) would count no call at all: refused at its line."""
    text = HEAD + WORKER + "quotas:\n  q:\n    role: worker\n    window_s: 60\n    limit: 5\n"
    text += "    resources: ['tool:payments.*', 'tool:Payments.*']\n"
    error = _error(text)
    assert error.line == HEAD.count("\n") + WORKER.count("\n") + 6


def test_a_role_inheriting_an_undeclared_role_is_refused_at_its_line() -> None:
    """R47 (policy helper's l13, untested): the check that ``inherits`` names a declared role,
    removed, survived the suite: the typo would silently inherit nothing."""
    from agentgate.errors import PolicyError
    from agentgate.policy import parse_policy

    text = """version: 1
trust_anchors: {root: {did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}}
principals:
  bot: {kind: service, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [chat]}
roles:
  base: {capabilities: [{resource: "tool:search"}], ttl_s: 600}
  chat:
    inherits: [bsae]
    capabilities: [{resource: "tool:x"}]
    ttl_s: 600
"""
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, source="p.yaml")
    assert raised.value.line == 8 and "bsae" in str(raised.value)


def test_a_rules_constraints_are_shown_as_the_values_they_are() -> None:
    """Mutant: ``describe_constraint`` wrote values with ``str``: a prefix holding a quote closed
    its own quotes, so a rule read ``url starts with "https://ok/" and amount <= 100 ...`` in
    ``policy explain`` and in every decision's reason while nothing limited the amount (999999
    allowed); the text ``"1"`` read as the number 1 (``priority=1 does not satisfy priority = 1``).

    Rule: each value is written as JSON (text quoted and escaped, true and false as such), so a
    rule's label, explanation and reasons say exactly what it checks."""
    from agentgate.policy import explain

    prefix = 'https://ok/" and amount <= 100 and url starts with "https://ok/'
    text = f"""version: 1
principals:
  bot: {{kind: service, did: {BOT}, roles: [r]}}
tools:
  web.fetch: {{args: {{url: {{type: string}}, amount: {{type: integer}}, code: {{type: string}}}}}}
models:
  m: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  r:
    capabilities:
      - resource: tool:web.fetch
        constraints: {{url: {{prefix: {json.dumps(prefix)}}}, code: {{in: ["1", "2"]}}}}
      - resource: model:m
        constraints: {{priority: {{eq: "1"}}, stream: {{eq: true}}}}
    ttl_s: 60
"""
    index = PolicyIndex(parse_policy(text, source="p.yaml"))
    call = Call.tool("web.fetch", {"url": prefix + "x", "amount": 999999, "code": "1"})
    decision, said = explain(index, "bot", call)
    assert decision.allowed
    code, url = 'code in ["1", "2"]', f"url starts with {json.dumps(prefix)}"
    assert f"constraints checked: {code}; {url}\n" in said
    shown = f"{code} and {url}"
    assert decision.reasons == (f"allowed by role r rule 1: tool:web.fetch where {shown} (line 11)",)
    denied = index.evaluate("bot", Call.model("m", {"priority": 1, "stream": True}))
    assert denied.reasons == (
        'role r rule 2: model:m where priority = "1" and stream = true (line 13): '
        'priority=1 does not satisfy priority = "1"',
    )


def test_a_rule_for_another_action_than_its_kinds_is_shown_with_it() -> None:
    """Mutant: ``describe`` left out any of the actions invoke, generate and lease, not only the
    resource kind's own: a delegation entry ``tool:t`` for ``action: lease`` read "role r may
    delegate tool:t, which it does not hold" of a role that holds ``tool:t``, and a rule that
    never matches a tool call read as one that does.

    Rule: a rule's label shows its action unless it is the kind's default (invoke for a tool,
    generate for a model, lease for a GPU)."""
    text = f"""version: 1
principals:
  bot: {{kind: service, did: {BOT}, roles: [r]}}
tools:
  t: {{}}
models:
  m: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  r:
    capabilities:
      - resource: tool:t
      - resource: model:m
        action: invoke
      - resource: gpu:h100
    ttl_s: 60
    delegation:
      max_ttl_s: 30
      capabilities: [{{resource: tool:t, action: lease}}]
"""
    policy = parse_policy(text, source="p.yaml")
    assert [rule.label for rule in policy.rules["r"]] == [
        "role r rule 1: tool:t (line 11)",
        "role r rule 2: model:m (invoke) (line 12)",
        "role r rule 3: gpu:h100 (line 14)",
    ]
    (finding,) = (f for f in lint(policy) if f.code == "delegates_unheld_capability")
    assert finding.message == "role r may delegate tool:t (lease), which it does not hold"


def test_an_error_quotes_at_most_a_hundred_characters_of_a_key() -> None:
    """Mutant: the location path of a schema error was written whole: an unknown field, or a
    role, named by an explicit key (``? KEY``) of a megabyte made a one-megabyte error line.

    Rule: each key of the path is quoted at most 100 characters long, saying how long it was."""
    long = "k" * 1_000_000
    for text in (f"version: 1\n? {long}\n: 1\n", f"version: 1\nroles:\n  ? {long}\n  : {{}}\n"):
        error = _error(text)
        assert len(str(error)) < 500 and "(1000000 characters)" in str(error) and error.line


@pytest.mark.parametrize(
    "body",
    [
        "roles:\n  r:\n    capabilities: [{{resource: tool:t, action: {long}}}]\n",
        "roles:\n  r:\n    capabilities: [{{resource: tool:t, constraints: {{? {long} : {{le: 1}}}}}}]\n",
        "principals: {{a: {{kind: human}}}}\napprovals:\n  g: {{resource: tool:t, approvers: [a], when: {{? {long} : {{}}}}}}\n",
    ],
)
def test_an_error_on_a_long_value_is_one_short_line_that_still_says_what_is_wrong(body: str) -> None:
    """Mutant: the references and capabilities were checked with messages that quote the value
    whole (``action 'k-k-...' is not a lower-case identifier``): a value, which has no length
    limit, or an argument name of a megabyte made a one-megabyte error line.

    Rule: a message longer than 300 characters keeps its start and its end (what is wrong) and
    says how much was left out between them. Since review R57 an action or argument name over
    200 characters is refused for its length, quoted by its first 40 characters."""
    error = _error("version: 1\n" + body.format(long="k-" * 500_000))
    assert len(str(error)) < 700 and error.line
    assert "characters left out" in str(error) or "is 1000000 characters long, more than 200" in str(error)
    assert (
        str(error)
        .split(" (expected")[0]
        .endswith(
            (
                "is 1000000 characters long, more than 200",
                "of operators ('eq', 'in', 'lt', 'le', 'gt', 'ge', 'prefix')",
            )
        )
    )


def test_an_unknown_reference_lists_at_most_twenty_of_the_names_it_may_be() -> None:
    """Mutant: an undeclared role was answered with every declared one: 5,000 roles made an
    error line of 40,000 characters. Rule: the first 20 names, sorted, and how many more."""
    roles = "".join(f"  r{i:04}: {{}}\n" for i in range(5000))
    error = _error(f"version: 1\nprincipals:\n  a: {{kind: human, roles: [nope]}}\nroles:\n{roles}")
    assert error.line == 3 and error.expected is not None
    assert error.expected == "one of: " + ", ".join(f"r{i:04}" for i in range(20)) + ", and 4980 more"


def _chain(n: int) -> str:
    """``n`` roles each inheriting the next, each with a rule on a tool of its own."""
    lines = ["version: 1", "tools:", *(f"  t{i}: {{}}" for i in range(n)), "roles:"]
    lines += [
        f"  r{i}: {{ttl_s: 60, inherits: [r{i + 1}], capabilities: [{{resource: tool:t{i}}}]}}"
        for i in range(n - 1)
    ]
    lines.append(f"  r{n - 1}: {{ttl_s: 60, capabilities: [{{resource: tool:t{n - 1}}}]}}")
    return "\n".join(lines) + "\n"


def test_a_role_holding_more_roles_than_the_limit_is_refused_at_its_inherits() -> None:
    """Review R51: lint reads every role's rules with those of the roles it inherits, so a chain
    1,500 roles deep (about 20 KB, far inside the node cap) took seconds to lint and grew with
    the square of its depth. A role holds at most MAX_ROLES_HELD roles, itself included."""
    from agentgate.policy._load import MAX_ROLES_HELD

    assert len(parse_policy(_chain(MAX_ROLES_HELD), source="p.yaml").role_closure("r0")) == MAX_ROLES_HELD
    error = _error(_chain(MAX_ROLES_HELD + 1))
    assert error.line == 4 + MAX_ROLES_HELD + 1  # r0, after the tools and "roles:"
    assert f"role r0 holds more than {MAX_ROLES_HELD} roles with those it inherits" in error.message
    # The deepest role holding too many is refused: a role inheriting it would be refused next.
    assert f"role r{1500 - MAX_ROLES_HELD - 1} holds more than" in _error(_chain(1500)).message


def _one_tool(own: int, inherited: int) -> str:
    """Role ``r`` with ``own`` rules on ``tool:t`` (distinct bounds), inheriting ``base`` with
    ``inherited`` more."""
    rule = "      - {{resource: tool:t, constraints: {{n: {{le: {}}}}}}}"
    lines = ["version: 1", "tools:", "  t: {args: {n: {type: integer}}}", "roles:"]
    lines += ["  r:", "    ttl_s: 60", "    inherits: [base]", "    capabilities:"]
    lines += [rule.format(i) for i in range(own)]
    lines += ["  base:", "    ttl_s: 60", "    capabilities:"]
    lines += [rule.format(1000 + i) for i in range(inherited)] or ["      []"]
    return "\n".join(lines) + "\n"


def test_more_rules_on_one_resource_than_the_limit_are_refused_at_the_roles_first_rule() -> None:
    """Review R51: ``shadowed_rule`` compares a rule with every rule its role holds on the same
    pattern: 2,000 rules on one tool took 28 s to lint (and a decision on the tool reads them in
    turn). A role holds at most MAX_RULES_ON_ONE_RESOURCE rules on a pattern a rule of its own
    names, inherited ones included; the error names the role, the count and the pattern."""
    from agentgate.policy._load import MAX_RULES_ON_ONE_RESOURCE as most

    parse_policy(_one_tool(most, 0), source="p.yaml")
    parse_policy(_one_tool(most // 2, most - most // 2), source="p.yaml")
    for own, inherited in ((most + 1, 0), (1, most), (2000, 0)):
        error = _error(_one_tool(own, inherited))
        assert error.line == 9, (own, inherited)  # the role's first rule on the tool
        assert f"role r holds {own + inherited} rules on tool:t, its own and inherited ones" in error.message
        assert f"at most {most} rules" in str(error)


def _with_constraint(spec: str) -> str:
    return f"""version: 1
tools:
  fetch: {{args: {{url: {{type: string}}}}}}
principals:
  lead: {{kind: human, roles: []}}
roles:
  r:
    ttl_s: 60
    capabilities:
      - resource: tool:fetch
      - resource: tool:fetch
        constraints: {{url: {spec}}}
    delegation:
      capabilities:
        - resource: tool:fetch
          constraints: {{url: {spec}}}
approvals:
  g: {{resource: tool:fetch, approvers: [lead], when: {{url: {spec}}}}}
"""


def test_a_constraint_value_longer_than_the_limit_is_refused_naming_the_rule_and_argument() -> None:
    """Review R51: a policy could hold a megabyte ``prefix`` (or ``in`` value), and a rule's
    constraints are quoted in its label, in every reason and in every audit entry that names it.
    A text value is at most MAX_CONSTRAINT_TEXT characters, a constraint's values at most
    MAX_CONSTRAINT_CHARS together (as JSON); the error names the rule, the argument, the line."""
    from agentgate.policy._load import MAX_CONSTRAINT_CHARS, MAX_CONSTRAINT_TEXT

    at_most = "a" * MAX_CONSTRAINT_TEXT
    policy = parse_policy(_with_constraint(f"{{prefix: {at_most}}}"), source="p.yaml")
    assert policy.gate_conditions["g"][0][1].prefix == at_most
    for op, value in (("prefix", "a" * 2**20), ("eq", "b" * (MAX_CONSTRAINT_TEXT + 1))):
        error = _error(_with_constraint(f"{{{op}: {value}}}"))
        assert error.line == 12, error  # the first rule holding it
        assert (
            error.message == f"role r rule 2, argument url: its {op!r} value is {len(value)} characters long"
        )
    many = "[" + ", ".join(f"v{i:04}-" + "x" * 30 for i in range(1000)) + "]"
    error = _error(_with_constraint(f"{{in: {many}}}"))
    assert error.line == 12 and "role r rule 2, argument url: its values are" in error.message
    assert f"at most {MAX_CONSTRAINT_CHARS} characters" in str(error)
    # the delegation rule and the approval gate are bounded alike
    text = _with_constraint("{prefix: a}")
    long_prefix = "          constraints: {url: {prefix: " + "d" * 2000 + "}}"
    delegated = _error(text.replace("          constraints: {url: {prefix: a}}", long_prefix))
    assert delegated.message.startswith("role r delegation rule 1, argument url: its 'prefix' value")
    gate = _error(text.replace("when: {url: {prefix: a}}", "when: {url: {eq: " + "g" * 2000 + "}}"))
    assert gate.message == "approval gate g, argument url: its 'eq' value is 2000 characters long"


@pytest.mark.parametrize(
    "section", ["roles", "tenants", "principals", "quotas", "approvals", "trust_anchors"]
)
def test_a_name_refused_as_a_mapping_key_is_located_at_the_key(section: str) -> None:
    """Mutant (review r53): a refused name written as a key (``a b:``, a role name with a space)
    was located at its value, on the line below (4:5), a line that holds no name.

    Rule: the error points at the key the person must rename."""
    error = _error(f"version: 1\n{section}:\n  a b:\n    description: d\n")
    assert f"{section}.a b: 'a b' is not a valid name" in error.message
    assert (error.line, error.column) == (3, 3)


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('version: 1\n"tll\\n_s\\e[2J": 1\n', "unknown field 'tll\\n_s\\x1b[2J'"),
        ('version: 1\nsettings: {"a\\u202eb": 1}\n', "unknown field settings.'a\\u202eb'"),
        (
            "version: 1\nroles:\n  a:\n    capabilities:\n      - resource: tool:x.y\n"
            '        constraints: {"a\\u2028b": {lt: x}}\n',
            "roles.a.capabilities.0.constraints.'a\\u2028b'.lt: Input should be",
        ),
    ],
    ids=["line break and escape", "bidi override", "line separator"],
)
def test_a_key_that_is_not_printable_is_quoted_in_the_message(text: str, path: str) -> None:
    """Mutant (review r53): the location path of a schema error quoted the keys raw, so a key
    written ``"tll\\n_s"`` broke the one-line error in two, and an escape or a bidi override in a
    key reached the terminal of whoever printed it through the library.

    Rule: the error is one line of printable text that says what the key holds."""
    error = _error(text)
    assert path in error.message
    assert str(error).isprintable()


def test_a_missing_key_file_with_an_escape_in_its_name_is_named_quoted(tmp_path: Path) -> None:
    """Mutant (review r53): the path a missing key file was looked for at was quoted raw, so an
    escape sequence or a line break in ``key:`` reached the error's one line as it was.

    Rule: the error is one line of printable text that says what the path holds."""
    with pytest.raises(PolicyError) as info:
        parse_policy(
            'version: 1\nprincipals:\n  p:\n    kind: agent\n    key: "x\\e[2J.pub"\n',
            source="p.yaml",
            base_dir=tmp_path,
        )
    looked = str(tmp_path / "x\x1b[2J.pub")
    assert f"(looked at {looked!r})" in info.value.message
    assert str(info.value).isprintable() and info.value.line == 5


def test_the_policy_bound_on_a_backoff_is_the_schedulers() -> None:
    """Review R54: the scheduler refuses a backoff over a day (``MAX_BACKOFF_S``); the policy
    schema writes the same bound out (so that loading a policy imports no scheduler)."""
    from agentgate.policy import _schema
    from agentgate.tasks._config import MAX_BACKOFF_S

    assert _schema._MAX_BACKOFF_S == MAX_BACKOFF_S


_EXACT = f"""version: 1
principals:
  bot: {{kind: agent, did: "{DID}", roles: [r]}}
  alice: {{kind: human}}
tools:
  x: {{args: {{n: {{type: number}}}}, timeout_s: 30.000000000000000001}}
roles:
  r:
    kind: agent
    ttl_s: 600
    capabilities:
      - resource: tool:x
        constraints:
          n: {{BOUND}}
"""


@pytest.mark.parametrize(
    ("bound", "column", "read_as"),
    [
        ("ge: 9007199254740993.0", 19, "9007199254740992.0"),
        ("ge: 9_007_199_254_740_993.0", 19, "9007199254740992.0"),
        ("le: 100.00000000000000001", 19, "100.0"),
        ("gt: 1e-400", 19, "0.0"),
        ("eq: !!float 9007199254740993", 19, "9007199254740992.0"),
        ("in: [1, 1e-400]", 23, "0.0"),
    ],
)
def test_a_constraint_number_no_float_holds_as_written_is_refused_at_the_number(
    tmp_path: Path, bound: str, column: int, read_as: str
) -> None:
    """Review R55: a bound with more digits than a float holds loaded rounded (ge: 9007199254740993.0
    as ge: 9007199254740992.0), and the policy allowed n = 2**53, which the bound as written excludes."""
    path = tmp_path / "p.yaml"
    path.write_text(_EXACT.replace("BOUND", bound))
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    error = info.value
    assert (error.file, error.line, error.column) == (str(path), 14, column)
    assert "role r rule 1, argument n" in error.message and "no float holds as written" in error.message
    assert f"(it would be read as {read_as})" in error.message
    assert (error.hint or "").startswith("write ")
    # Written exactly, as the integer, the bound excludes 2**53 and admits the next integer.
    path.write_text(_EXACT.replace("BOUND", "ge: 9007199254740993"))
    index = PolicyIndex(load_policy(path))
    assert index.evaluate("bot", Call.tool("x", {"n": 2**53})).outcome is Outcome.DENY
    assert index.evaluate("bot", Call.tool("x", {"n": 2**53 + 1})).outcome is Outcome.ALLOW


def test_a_constraint_number_in_a_pyyaml_sign_form_is_the_number_pyyaml_reads(tmp_path: Path) -> None:
    """Review R55: ``le: !!float -+1.5`` (PyYAML reads -1.5) was refused as a number no float holds
    as written, though -1.5 is one; it now loads as ``le: -1.5``, and a rounded one is still refused."""
    path = tmp_path / "p.yaml"
    path.write_text(_EXACT.replace("BOUND", "le: !!float -+1.5"))
    index = PolicyIndex(load_policy(path))
    assert index.evaluate("bot", Call.tool("x", {"n": -1.5})).outcome is Outcome.ALLOW
    assert index.evaluate("bot", Call.tool("x", {"n": -1.25})).outcome is Outcome.DENY
    path.write_text(_EXACT.replace("BOUND", "le: !!float -+9007199254740993.0"))
    with pytest.raises(PolicyError, match="no float holds as written"):
        load_policy(path)


@pytest.mark.parametrize(
    ("section", "line"),
    [
        (
            "approvals:\n  big:\n    resource: tool:x\n    approvers: [alice]\n    when: {n: {gt: 1e-400}}\n",
            19,
        ),
        (
            "    delegation:\n      capabilities:\n        - resource: tool:x\n"
            "          constraints: {n: {ge: 9007199254740993.0}}\n",
            18,
        ),
    ],
)
def test_an_approval_gate_or_delegation_number_no_float_holds_is_refused(section: str, line: int) -> None:
    """Review R55: an approval gate's when, and a delegation rule, held a number no float holds
    rounded, as a role's rule did (gt: 1e-400 as gt: 0.0)."""
    text = _EXACT.replace("BOUND", "ge: 0") + section
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="p.yaml")
    assert info.value.line == line and "no float holds as written" in info.value.message


def test_a_number_no_float_holds_loads_as_the_float_outside_constraints() -> None:
    # A timeout compares no call's argument: its 21 digits load as the float, as before.
    policy = parse_policy(_EXACT.replace("BOUND", "le: 0.1"), source="p.yaml")
    assert policy.document.tools["x"].timeout_s == 30.0


@pytest.mark.parametrize(
    ("bound", "value"),
    [
        ("le: 9.223372036854775808e18", 2.0**63),  # 2**63 in full; its shortest form is 9.223372036854776e18
        ("le: 9.223372036854775808e+18", 2.0**63),
        ("le: 0.1000000000000000055511151231257827021181583404541015625", 0.1),
    ],
)
def test_a_constraint_number_written_as_the_float_s_exact_value_loads(
    tmp_path: Path, bound: str, value: float
) -> None:
    """Review R56: le: 9.223372036854775808e18, exactly 2**63, was refused as a number no float holds."""
    path = tmp_path / "p.yaml"
    path.write_text(_EXACT.replace("BOUND", bound))
    index = PolicyIndex(load_policy(path))
    assert index.evaluate("bot", Call.tool("x", {"n": value})).outcome is Outcome.ALLOW
    above = value * (1 + 2**-52)
    assert index.evaluate("bot", Call.tool("x", {"n": above})).outcome is Outcome.DENY
    # One unit off in the last digit written is a number no float holds: still refused.
    path.write_text(_EXACT.replace("BOUND", bound.replace("808e", "807e").replace("625", "624")))
    with pytest.raises(PolicyError, match="no float holds as written"):
        load_policy(path)
