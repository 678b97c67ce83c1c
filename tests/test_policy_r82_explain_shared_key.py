"""Review R82: two principals declared with one key (lint's ``principal_without_key``, an error;
the file loads) are one principal to the Gate: it judges every call signed with the key as the
one declared first. ``agentgate policy explain --as`` the second one's name answered by that
one's own roles: ALLOW (exit 0) for a call the Gate denies on its only key. It now answers as
the Gate judges, and says why."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.keys import SigningKey
from agentgate.policy import PolicyIndex, parse_policy


def _policy(did: str) -> str:
    return f"""version: 1
principals:
  alice: {{kind: agent, did: "{did}", roles: [reader]}}
  bob: {{kind: agent, did: "{did}", roles: [refunder]}}
  carol: {{kind: agent, did: "{SigningKey.generate().did}", roles: [refunder]}}
tools:
  payments.refund: {{args: {{amount: {{type: number}}}}}}
roles:
  reader: {{capabilities: [{{resource: "tool:payments.refund", constraints: {{amount: {{le: 10}}}}}}], ttl_s: 600}}
  refunder: {{capabilities: [{{resource: "tool:payments.refund", constraints: {{amount: {{le: 1000}}}}}}], ttl_s: 600}}
"""


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Path, str]:
    did = SigningKey.generate().did
    path = tmp_path / "shared.yaml"
    path.write_text(_policy(did))
    return path, did


def _explain(path: Path, who: str, amount: int, *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(
            [
                "policy",
                "explain",
                str(path),
                "--as",
                who,
                "--tool",
                "payments.refund",
                "--args",
                json.dumps({"amount": amount}),
                *extra,
            ]
        )
    return rc, out.getvalue()


def test_the_second_holder_of_a_key_is_explained_as_the_gate_judges_the_key(shared: tuple[Path, str]) -> None:
    path, did = shared
    gate_reads = PolicyIndex(parse_policy(path.read_text())).evaluate(
        did, Call.tool("payments.refund", {"amount": 500})
    )
    assert (gate_reads.outcome.value, gate_reads.principal) == ("deny", "alice")  # the Gate's verdict
    rc, text = _explain(path, "bob", 500)
    assert rc == 1 and text.startswith("DENY: alice calling tool:payments.refund"), text
    assert "bob's key is alice's too" in text and "principal_without_key" in text, text
    rc, text = _explain(path, "bob", 500, "--json")
    answer = json.loads(text)
    assert rc == 1 and (answer["decision"], answer["principal"]) == ("deny", "alice"), answer
    assert "bob's key is alice's too" in answer["reasons"][0], answer


def test_a_principal_with_its_own_key_and_the_first_holder_are_explained_as_before(
    shared: tuple[Path, str],
) -> None:
    path, _ = shared
    rc, text = _explain(path, "carol", 500)
    assert rc == 0 and text.startswith("ALLOW: carol calling") and "key is" not in text, text
    rc, text = _explain(path, "alice", 5)
    assert rc == 0 and text.startswith("ALLOW: alice calling") and "key is" not in text, text
