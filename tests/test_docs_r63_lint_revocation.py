"""docs/lint.md's ``revocation_disabled`` entry against what the switch does.

Review R63: docs/policy-reference.md says that ``settings.revocation: false`` and a role's
``revocable: false`` are lint errors that switch nothing off (revocation is always checked), and
so they do: a grant issued under such a policy and revoked is refused ``revoked``. docs/lint.md
said the opposite ("a grant that cannot be revoked cannot be stopped when a key leaks"), as if the
switch worked. The entry now says what the finding is about: a policy that claims what agentgate
does not do.
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


def _entry(code: str) -> str:
    text = (ROOT / "docs" / "lint.md").read_text(encoding="utf-8")
    return text.split(f"### `{code}`", 1)[1].split("\n#", 1)[0]


def _policy(tmp_path: Path) -> Path:
    for name in ("ops-root", "support-agent"):
        save_key(SigningKey.generate(), tmp_path / "keys", name)
    path = tmp_path / "p.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            version: 1
            settings:
              revocation: false
            trust_anchors:
              ops-root: {key: keys/ops-root.pub}
            principals:
              support-agent: {kind: agent, key: keys/support-agent.pub, roles: [support-agent]}
            tools:
              tickets.read:
                args: {ticket_id: {type: string, required: true}}
            roles:
              support-agent:
                kind: agent
                capabilities:
                  - resource: tool:tickets.read
                ttl_s: 3600
                revocable: false
            """
        )
    )
    return path


def test_a_policy_that_switches_revocation_off_still_has_its_grants_revoked(tmp_path: Path) -> None:
    """Review R63: with ``revocation: false`` and ``revocable: false`` lint reports
    ``revocation_disabled`` twice, and a revoked grant under that policy is refused all the same,
    as docs/policy-reference.md says; docs/lint.md's entry says so instead of "cannot be stopped"."""
    path = _policy(tmp_path)
    codes = [(f.code, f.severity.value) for f in lint(load_policy(path))]
    assert codes == [("revocation_disabled", "error")] * 2
    gate = Gate.open(str(path), store=str(tmp_path / "store.db"))
    try:
        identity = gate.issue(
            load_signing_key(tmp_path / "keys" / "ops-root.key"),
            name="support-agent",
            key=load_signing_key(tmp_path / "keys" / "support-agent.key"),
            role="support-agent",
        )
        call = Call.tool("tickets.read", {"ticket_id": "T-1"})
        assert gate.authorize(identity, call).verdict == "allow"
        gate.revoke(identity)
        refused = gate.authorize(identity, call)
    finally:
        gate.close()
    assert refused.verdict == "deny"
    assert [(f.kind.value, f.code) for f in refused.findings] == [("non_revocable_grant", "revoked")]
    entry = " ".join(_entry("revocation_disabled").split())
    assert "switches nothing off" in entry, entry
    assert "cannot be stopped" not in entry, entry
