"""docs/policy-reference.md, "delegation": which principal's rules decide a sub-agent's call;
docs/cli.md: the canonical capability form refusals quote.

Review R72 followed the page as a newcomer and wrote a delegating policy that also declared the
sub-agent's key as a principal, with no roles: every call of the sub-agent was refused, also those
its grant covered, and neither the page nor lint said why. The page now says it; these tests hold
its two cases and the refusal it quotes.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from agentgate import Call, Gate, parse_capability
from agentgate.keys import SigningKey, save_key

ROOT = Path(__file__).resolve().parents[1]
PAGE = " ".join((ROOT / "docs" / "policy-reference.md").read_text(encoding="utf-8").split())

POLICY = """\
version: 1
trust_anchors:
  root: {key: keys/root.pub}
principals:
  lead: {kind: agent, key: keys/lead.pub, roles: [lead]}
WRITER
tools:
  docs.write:
    args: {path: {type: string, required: true}}
roles:
  lead:
    kind: agent
    capabilities:
      - resource: tool:docs.write
        constraints: {path: {prefix: "reports/"}}
    ttl_s: 3600
    delegation:
      max_ttl_s: 600
      capabilities:
        - resource: tool:docs.write
          constraints: {path: {prefix: "reports/drafts/"}}
"""


def _writer_call(tmp_path: Path, writer_line: str) -> tuple[str, tuple[str, ...]]:
    keys = {name: SigningKey.generate() for name in ("root", "lead", "writer")}
    for name, key in keys.items():
        save_key(key, tmp_path / "keys", name)
    (tmp_path / "p.yaml").write_text(POLICY.replace("WRITER", writer_line))
    gate = Gate.open(tmp_path / "p.yaml", tmp_path / "s.db")
    try:
        lead = gate.issue(keys["root"], name="lead", key=keys["lead"], role="lead")
        writer = gate.delegate(
            lead,
            name="writer",
            key=keys["writer"],
            capabilities=["tool:docs.write?path^=reports/drafts/"],
            ttl=timedelta(minutes=5),
        )
        auth = gate.authorize(writer, Call("tool:docs.write", "invoke", {"path": "reports/drafts/a.md"}))
        if auth.allowed:
            gate.abandon(auth)
        return auth.verdict, auth.reasons
    finally:
        gate.close()


def test_a_subagent_declared_with_no_roles_is_refused_what_its_grant_covers(tmp_path: Path) -> None:
    """Review R72: the sub-agent's key named by the policy makes its own roles decide; none, and
    the call its grant covers is refused with the reason the page quotes."""
    said = "no rule of writer's roles (none) names tool:docs.write"
    assert said in PAGE
    verdict, reasons = _writer_call(tmp_path, "  writer: {kind: agent, key: keys/writer.pub}")
    assert verdict == "deny"
    assert said in reasons


def test_a_subagent_the_policy_does_not_name_acts_for_the_root_holder(tmp_path: Path) -> None:
    """Review R72: a sub-agent whose key the policy does not name is decided by the roles of the
    principal its chain was first issued to, as the page says."""
    assert (
        "A sub-agent whose key the policy does not name acts for the principal its chain was first issued to"
        in PAGE
    )
    verdict, reasons = _writer_call(tmp_path, "")
    assert verdict == "allow"
    assert any(reason.startswith("allowed by role lead rule 1") for reason in reasons), reasons


def test_the_canonical_capability_form_is_what_docs_cli_says() -> None:
    """Review R72: a newcomer who delegated ``tool:docs.write?path^=reports/drafts/`` was refused
    in terms of ``path^=reports%2Fdrafts%2F``, a spelling docs/cli.md did not show (it said to
    percent-encode ``&``, ``|``, ``"`` and ``%`` only). The page now shows the canonical form."""
    cli = " ".join((ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split())
    for written, shown in [
        ("tool:docs.write?path^=reports/drafts/", "tool:docs.write?path^=reports%2Fdrafts%2F"),
        ("tool:x?a=r/d", 'tool:x?a="r%2Fd"'),
    ]:
        assert str(parse_capability(written)) == shown
        assert parse_capability(shown) == parse_capability(written)
        assert f"`{shown}`" in cli or shown.removeprefix("tool:x?") in cli
