"""Review R58: the one-line messages of ``agentgate grant``, ``approval sign`` and ``policy
explain`` name what they are about (the flag, the file, the cap), through the real entry point."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from _cli import cli

from agentgate.cli.main import main


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    monkeypatch.chdir(tmp_path)
    for name in ("root", "alice", "bob"):
        assert main(["keys", "new", name, "--dir", "k"]) == 0
    return tmp_path


ISSUE = ("grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub", "--ttl", "1h")


def test_an_allow_value_that_is_no_capability_is_named_with_the_flag_and_shortened(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R58: a too-long action in --allow was refused without naming the flag or the value.

    Rule: exit 2, one line naming ``--allow`` and the value, cut at 60 characters, for issue and
    delegate alike; the parser's own quote of the whole value is not repeated."""
    long_action = "tool:search.web#" + "x" * 201
    code, out, err = cli(capsys, *ISSUE, "--allow", "tool:search.*", "--allow", long_action)
    assert code == 2 and out == ""
    assert err == (
        f"agentgate: error: --allow {long_action[:60]!r}...: a capability's action "
        f"{'x' * 40!r}... is 201 characters long, more than 200\n"
    )
    assert not (env / "store.db").exists()  # nothing issued, nothing recorded
    code, _, err = cli(capsys, *ISSUE, "--allow", "tool:search.web?q=", "--out", "a.tok")
    assert code == 2 and err.count("\n") == 1
    assert err == (
        "agentgate: error: --allow 'tool:search.web?q=': clause 'q=': empty value "
        '(the empty string is written "")\n'
    )
    assert cli(capsys, *ISSUE, "--allow", "tool:search.*", "--out", "a.tok")[0] == 0
    delegate = ("grant", "delegate", "a.tok", "--as", "k/alice.key", "--to", "k/bob.pub", "--ttl", "5m")
    code, out, err = cli(capsys, *delegate, "--allow", "tool:" + "y" * 300)
    assert code == 2 and out == ""
    assert err.startswith(f"agentgate: error: --allow {'tool:' + 'y' * 55!r}...: resource name longer")


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ("[1, 2]", "the payload must be a JSON object: the interrupt payload or its 'request'"),
        ('{"request": {"id": "r1"}}', "the request has no 'call_hash'; pass the whole interrupt payload"),
        (
            '{"request": {"id": "r1", "call_hash": "h", "expires_at": "soon"}}',
            "the request's 'expires_at' must be a time in seconds since 1970",
        ),
        (
            '{"id": "r1", "call_hash": "h", "expires_at": 1, "resource": "tool:x", "action": "invoke", '
            '"args_digest": "d", "grant": "g"}',
            "the request has no 'call_id': it does not show the call it asks to approve",
        ),
    ],
)
def test_approval_sign_names_the_payload_file_it_read(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, payload: str, why: str
) -> None:
    """Review R58: approval sign's errors about the request said PAYLOAD, not the file read.

    Rule: exit 2, one line that starts with the file's name (``-`` for standard input), as the
    errors reading the file do, nothing on standard output."""
    (env / "asked.json").write_text(payload)
    code, out, err = cli(capsys, "approval", "sign", "asked.json", "--as", "k/bob.key")
    assert (code, out, err) == (2, "", f"agentgate: error: asked.json: {why}\n")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(payload.encode())))
    code, out, err = cli(capsys, "approval", "sign", "-", "--as", "k/bob.key")
    assert (code, out, err) == (2, "", f"agentgate: error: -: {why}\n")


SUPPORT = str(Path(__file__).resolve().parents[1] / "policies" / "support.yaml")


def test_policy_explain_shows_the_call_arguments_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R58: policy explain showed the call's arguments as a Python dict ({'a': 1}).

    Rule: the first line writes them as JSON, as --args takes them and as the rule's constraints
    are written (text quoted with ", true/false/null, escapes); what a terminal would not show
    as it is stays escaped (\\u202e)."""
    args = '{"order_id": "o-1 \\"quoted\\" \\u202e", "amount": 80, "currency": "EUR", "rush": true}'
    code = main(["policy", "explain", SUPPORT, "--as", "support-agent", "--tool", "payments.refund",
                 "--args", args])  # fmt: skip
    first = capsys.readouterr().out.splitlines()[0]
    assert code == 1  # 'rush' is not an argument the tool declares
    assert first == (
        'DENY: support-agent calling tool:payments.refund with {"order_id": "o-1 \\"quoted\\" \\u202e", '
        '"amount": 80, "currency": "EUR", "rush": true}'
    )


CAPPED_POLICY = """\
version: 1
settings:
  max_ttl_s: 3600
trust_anchors:
  root:
    key: k/root.pub
tools:
  search.web:
    args:
      q: {type: string}
roles:
  long:
    kind: agent
    capabilities:
      - resource: tool:search.web
    ttl_s: 86400
  unset:
    kind: agent
    capabilities:
      - resource: tool:search.web
  short:
    kind: agent
    capabilities:
      - resource: tool:search.web
    ttl_s: 600
principals:
  alice:
    kind: agent
    key: k/alice.pub
    roles: [long, unset, short]
  bob:
    kind: agent
    key: k/bob.pub
    roles: [short]
"""


def test_a_ttl_over_the_policy_max_ttl_s_names_the_setting_not_the_role(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R58: a --ttl over settings.max_ttl_s was said to exceed "the role's TTL".

    Rule: the message names what caps the grant: the policy's settings.max_ttl_s (with the
    role's own ttl_s, or that it sets none) where that is shorter, else the role's TTL."""
    (env / "pol.yaml").write_text(CAPPED_POLICY)
    base = ("grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub", "--policy", "pol.yaml")
    code, out, err = cli(capsys, *base, "--role", "long", "--ttl", "2h")
    assert (code, out) == (2, "")
    assert err == (
        "agentgate: error: --ttl 2h exceeds the policy's settings.max_ttl_s of 3600s, which caps "
        "every grant (role long's ttl_s of 86400s)\n"
    )
    code, _, err = cli(capsys, *base, "--role", "unset", "--ttl", "2h")
    assert code == 2 and err == (
        "agentgate: error: --ttl 2h exceeds the policy's settings.max_ttl_s of 3600s, which caps "
        "every grant (role unset sets no ttl_s)\n"
    )
    code, _, err = cli(capsys, *base, "--role", "short", "--ttl", "20m")
    assert code == 2 and err == "agentgate: error: --ttl 20m exceeds role short's TTL of 600s\n"
    assert cli(capsys, *base, "--role", "long", "--ttl", "1h", "--out", "a.tok")[0] == 0


def test_grant_issue_policy_role_refuses_a_role_its_holder_does_not_hold(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R58: grant issue --policy --role issued a role to a key the policy does not name, or
    whose principal does not hold it, where Gate.issue refuses: every call on it was then refused."""
    (env / "pol.yaml").write_text(CAPPED_POLICY)
    assert main(["keys", "new", "eve", "--dir", "k"]) == 0
    capsys.readouterr()
    base = ("grant", "issue", "--issuer", "k/root.key", "--policy", "pol.yaml")
    code, out, err = cli(capsys, *base, "--to", "k/bob.pub", "--role", "long", "--out", "b.tok")
    assert (code, out) == (2, "")
    assert err.startswith(
        "agentgate: error: --to k/bob.pub: principal bob does not hold role long (its roles: short)"
    )
    assert not (env / "b.tok").exists()
    code, _, err = cli(capsys, *base, "--to", "k/eve.pub", "--role", "short")
    assert code == 2 and "is not a principal of this policy" in err and "add it under principals" in err
    assert cli(capsys, *base, "--to", "k/bob.pub", "--role", "short", "--out", "b.tok")[0] == 0
    # A role held only through another that lives shorter: every call would be refused.
    (env / "inherits.yaml").write_text(
        "version: 1\ntrust_anchors:\n  root: {key: k/root.pub}\n"
        "principals:\n  senior: {kind: human, key: k/alice.pub, roles: [senior]}\n"
        "tools:\n  lookup: {args: {id: {type: string}}}\n"
        "roles:\n  clerk: {kind: human, capabilities: [{resource: tool:lookup}], ttl_s: 3600}\n"
        "  senior: {kind: human, inherits: [clerk], ttl_s: 60}\n"
    )
    held = ("grant", "issue", "--issuer", "k/root.key", "--policy", "inherits.yaml", "--to", "k/alice.pub")
    code, out, err = cli(capsys, *held, "--role", "clerk", "--out", "c.tok")
    assert (code, out) == (2, "") and err.startswith("agentgate: error: --role clerk: ")
    assert "lives 3600s, longer than the policy lets a grant to it live (60s" in err, err
    assert not (env / "c.tok").exists()
    assert cli(capsys, *held, "--role", "senior", "--out", "s.tok")[0] == 0


def test_grant_delegate_prints_its_deny_on_stderr_and_leaves_stdout_to_the_token(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R58 (the contract kept, documented): grant delegate's deny went to stderr where grant
    check's goes to stdout. docs/cli.md now says why: delegate's standard output is the child's
    token, so ``grant delegate ... > child.tok`` never writes a finding where a token belongs.

    Rule: exit 1, standard output empty, one line ``deny: kind code [field]: message`` on
    standard error, for a widening and for a parent revoked in the store alike."""
    assert cli(capsys, *ISSUE, "--allow", "tool:search.*", "--out", "a.tok")[0] == 0
    delegate = ("grant", "delegate", "a.tok", "--as", "k/alice.key", "--to", "k/bob.pub", "--ttl", "5m")
    code, out, err = cli(capsys, *delegate, "--allow", "tool:payments.refund")
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.startswith("deny: scope_creep capability_widened [capabilities]: child capability")
    assert cli(capsys, "grant", "revoke", "a.tok")[0] == 0
    code, out, err = cli(capsys, *delegate, "--allow", "tool:search.web")
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.startswith("deny: non_revocable_grant revoked: link 0 (")


@pytest.mark.parametrize(
    ("verb", "usage"),
    [
        (("policy", "explain"), "--as PRINCIPAL --tool NAME [--args JSON] [--json] FILE"),
        (("policy", "lint"), "[--json] FILE"),
        (("policy", "schema"), "[--out FILE]"),
        (("audit", "explain"), "[--store URL] [--key PUBFILE] [--trust PUBFILE|DID] INDEX"),
        (("audit", "prove"), "[--store URL] --out FILE INDEX"),
        (("broker", "leases"), "[--store URL] [--broker NAME] [--json]"),
    ],
)
def test_help_names_the_placeholders_docs_cli_uses(
    capsys: pytest.CaptureFixture[str], verb: tuple[str, str], usage: str
) -> None:
    """Review R58: --help wrote argparse's defaults (--tool TOOL, --args ARGS, file, index,
    --store STORE, --broker BROKER) where docs/cli.md writes NAME, JSON, FILE, INDEX, URL.

    Rule: each usage line uses the placeholders of the verb's synopsis in docs/cli.md."""
    code, out, _ = cli(capsys, *verb, "--help")
    assert code == 0
    assert usage in " ".join(out.split("\n\n")[0].split())
