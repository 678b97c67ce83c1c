"""``delegation.share_grant: true`` against what docs/lint.md and docs/policy-reference.md said
it does.

Review R63: policy-reference.md's table gave the field as "let sub-agents run on the delegator's
grant: a lint error", and lint.md's ``sub_agent_shares_grant`` entry said "sub-agents would run on
their parent's grant, with all of its authority". Nothing but lint reads the field: a nested agent
running on its delegator's identity is refused ``inherited_identity`` whatever it says. Both pages
now say the switch turns nothing on (as ``revocation: false`` switches nothing off).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey, load_signing_key, save_key
from agentgate.policy import load_policy
from agentgate.policy._lint import lint

ROOT = Path(__file__).resolve().parents[1]


def _said(page: str, after: str) -> str:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return " ".join(text.split(after, 1)[1].split("\n#", 1)[0].split("\n\n", 1)[0].split())


def test_share_grant_lets_no_sub_agent_run_on_its_delegators_grant(tmp_path: Path) -> None:
    """Review R63: with ``share_grant: true`` lint reports ``sub_agent_shares_grant``, and a
    nested agent presenting its supervisor's identity is refused ``inherited_identity`` all the
    same; the two pages say the field switches nothing on."""
    for name in ("ops-root", "supervisor"):
        save_key(SigningKey.generate(), tmp_path / "keys", name)
    path = tmp_path / "p.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            version: 1
            trust_anchors:
              ops-root: {key: keys/ops-root.pub}
            principals:
              supervisor: {kind: agent, key: keys/supervisor.pub, roles: [supervisor]}
            tools:
              web.search:
                args: {q: {type: string, required: true}}
            roles:
              supervisor:
                kind: agent
                capabilities:
                  - resource: tool:web.search
                ttl_s: 3600
                delegation:
                  max_depth: 1
                  max_ttl_s: 600
                  share_grant: true
                  capabilities:
                    - resource: tool:web.search
            """
        )
    )
    assert [f.code for f in lint(load_policy(path))] == ["sub_agent_shares_grant"]
    gate = Gate.open(str(path), store=str(tmp_path / "store.db"))
    try:
        supervisor = gate.issue(
            load_signing_key(tmp_path / "keys" / "ops-root.key"),
            name="supervisor",
            key=load_signing_key(tmp_path / "keys" / "supervisor.key"),
            role="supervisor",
        )
        call = Call.tool("web.search", {"q": "agentgate"})
        assert gate.authorize(supervisor, call, agent="supervisor").verdict == "allow"
        shared = gate.authorize(supervisor, call, agent="researcher")
    finally:
        gate.close()
    assert shared.verdict == "deny"
    assert [(f.kind.value, f.code) for f in shared.findings] == [
        ("implicit_trust_inheritance", "inherited_identity")
    ]
    for page, after in (
        ("lint.md", "### `sub_agent_shares_grant`"),
        ("policy-reference.md", "| `share_grant` |"),
    ):
        said = _said(page, after)
        assert "switches nothing on" in said, (page, said)
        assert "would run on their parent's grant" not in said, (page, said)
