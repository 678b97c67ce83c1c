"""Review R88 (second fix): ``idempotency_key`` decides between the NUL-joined (v2) and the JSON
(v3) material by counting the NULs of the joined text, where R88's first fix scanned each part
with a generator first (every keyed submit and every ``Gate.run`` once-key paid up to twice the
time of a v2 key before R88).

What this cannot catch: the cost. It pins that the keys are the same as before, byte for byte,
recomputed as docs/tasks.md spells them, so the cheaper test changed no key.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from agentgate.tasks import idempotency_key

DIGEST = "0" * 64


def _v2(*parts: str) -> str:
    return hashlib.sha256("\0".join(("agentgate-idempotency-v2", *parts)).encode("utf-8")).hexdigest()


def _v3(*parts: str) -> str:
    material = json.dumps(["agentgate-idempotency-v3", *parts], ensure_ascii=False, separators=(", ", ": "))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def test_a_key_without_a_nul_is_the_nul_joined_one() -> None:
    key = idempotency_key("r1", "refund", "c1", DIGEST, tenant="acme", principal="bot", grant="g1")
    assert key == _v2("acme", "bot", "g1", "r1", "refund", "c1", DIGEST)


def test_empty_parts_add_no_nul_of_their_own() -> None:
    assert idempotency_key("", "", "", "", tenant="", principal="", grant="") == _v2(
        "", "", "", "", "", "", ""
    )


@pytest.mark.parametrize("where", range(7))
def test_a_nul_in_any_part_makes_the_json_key(where: int) -> None:
    parts = ["acme", "bot", "g1", "r1", "refund", "c1", DIGEST]
    parts[where] = "x\0é"
    tenant, principal, grant, run_id, tool, call_id, digest = parts
    key = idempotency_key(run_id, tool, call_id, digest, tenant=tenant, principal=principal, grant=grant)
    assert key == _v3(*parts)
    assert key != _v2(*parts)


def test_parts_that_join_alike_keep_apart() -> None:
    one = idempotency_key("r", "t", "c", DIGEST, tenant="acme", principal="ops\0bot", grant="")
    two = idempotency_key("r", "t", "c", DIGEST, tenant="acme\0ops", principal="bot", grant="")
    assert one != two
