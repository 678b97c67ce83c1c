"""``once.settle`` quotes the key of a call it found (review R88, third regression pass).

Review R88 quoted the key of a call not found as ``quoted`` does (cut at 60 characters, control
characters escaped); a call found but not unsettled, or allowed too recently, still had its key
written as it is: a key of 100,000 characters in the store was written whole into the refusal,
and one holding a line break broke the refusal's line."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_once import PAY, RUN, _gate, _new

from agentgate.errors import SettlementRefused
from agentgate.gate import Gate
from agentgate.store.once import settle

LONG_KEY = "k\n" + "x" * 100_000


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[Gate, str]]:
    logging.disable(logging.CRITICAL)
    try:
        keys, path, agent = _new(tmp_path)
        with _gate(path, keys) as opened:
            auth = opened.authorize(agent, PAY, call_id="c1", run_id=RUN)
            opened.flush()
            assert auth.once_key is not None
            with opened.store.transaction() as tx:  # a key as another program might have stored it
                tx.execute("UPDATE agentgate_once SET key = ? WHERE key = ?", (LONG_KEY, auth.once_key))
            yield opened, LONG_KEY
    finally:
        logging.disable(logging.NOTSET)


def _refusal(gate: Gate, key: str, **kw: float) -> str:
    with pytest.raises(SettlementRefused) as caught:
        settle(gate.store, gate.audit, key, ran=False, by="ops", **kw)
    return str(caught.value)


def test_a_call_allowed_too_recently_is_refused_with_its_key_quoted(gate: tuple[Gate, str]) -> None:
    message = _refusal(*gate, min_age_s=3600)
    assert "may still be running" in message
    assert message.startswith("call 'k\\nxxx") and "\n" not in message and len(message) < 300


def test_a_settled_call_is_refused_with_its_key_quoted(gate: tuple[Gate, str]) -> None:
    opened, key = gate
    settle(opened.store, opened.audit, key, ran=False, by="ops", min_age_s=0)
    message = _refusal(opened, key, min_age_s=0)
    assert "not unsettled" in message
    assert message.startswith("call 'k\\nxxx") and "\n" not in message and len(message) < 300
