"""A tool's ``audit: false`` against what docs/lint.md said it does.

Review R63: docs/policy-reference.md says ``audit: false`` "switches nothing off: every call is
audited", and so it is; docs/lint.md's ``tool_not_audited`` entry said the tool's calls "would
leave no evidence of who allowed them", as if the switch worked. The entry now says it does not.
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


def test_a_tool_marked_audit_false_is_audited_all_the_same(tmp_path: Path) -> None:
    """Review R63: ``audit: false`` is the lint error ``tool_not_audited``, the tool's allowed
    call is recorded in the audit log all the same, and docs/lint.md says the switch switches
    nothing off."""
    for name in ("ops-root", "bot"):
        save_key(SigningKey.generate(), tmp_path / "keys", name)
    path = tmp_path / "p.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            version: 1
            trust_anchors:
              ops-root: {key: keys/ops-root.pub}
            principals:
              bot: {kind: agent, key: keys/bot.pub, roles: [bot]}
            tools:
              tickets.read:
                args: {ticket_id: {type: string, required: true}}
                audit: false
            roles:
              bot:
                kind: agent
                capabilities:
                  - resource: tool:tickets.read
                ttl_s: 3600
            """
        )
    )
    assert [f.code for f in lint(load_policy(path))] == ["tool_not_audited"]
    gate = Gate.open(str(path), store=str(tmp_path / "store.db"))
    try:
        bot = gate.issue(
            load_signing_key(tmp_path / "keys" / "ops-root.key"),
            name="bot",
            key=load_signing_key(tmp_path / "keys" / "bot.key"),
            role="bot",
        )
        allowed = gate.authorize(bot, Call.tool("tickets.read", {"ticket_id": "T-1"}))
    finally:
        gate.close()
    assert allowed.verdict == "allow" and allowed.audit_index is not None
    text = (ROOT / "docs" / "lint.md").read_text(encoding="utf-8")
    said = " ".join(text.split("### `tool_not_audited`", 1)[1].split("\n#", 1)[0].split())
    assert "switches nothing off" in said, said
    assert "would leave no evidence" not in said, said
