"""Review R70: a JSON call the gateway answered 200 but charged its whole reservation (its
backend reported 0 prompt tokens, or a usage without ``prompt_tokens`` or ``completion_tokens``)
was passed on with the backend's usage block alone: the caller read a usage of 0 prompt tokens
(or none) while its budget was charged the reservation, and nothing in the answer said so. The
answer now carries ``X-Agentgate-Charged: reserved; <why>``. Real HTTP on 127.0.0.1, real Gate,
real SQLite store."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from test_dispatch_r68_usage_garbage import Reporting
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _gateway

GATEWAY_LOGGER = "agentgate.dispatch.gateway._app"  # the gateway's one logger (docs/gateway.md)
CHARGED_AS_RESERVED = {
    "zero-prompt": ({"prompt_tokens": 0, "completion_tokens": 2}, "the backend reported 0 prompt tokens"),
    "no-prompt-tokens": ({"completion_tokens": 2}, "no usage was reported"),
    "no-usage": (None, "no usage was reported"),
}


@pytest.mark.parametrize("case", list(CHARGED_AS_RESERVED))
def test_an_answer_charged_its_reservation_says_so(tmp_path: Path, case: str) -> None:
    """Review R70: the answer said nothing of the charge; it now names it and why, and the
    charge is the reservation, as the outcome says."""
    usage, why = CHARGED_AS_RESERVED[case]
    backend = Reporting(usage)
    try:
        with _gateway(tmp_path, backend) as env:
            before = env.spent()
            answer = env.post(_body())
            assert answer.status_code == 200, answer.text
            assert answer.headers.get("x-agentgate-charged") == f"reserved; {why}"
            [allow] = [
                e for e in env.gate.audit.entries() if e.kind == "allow" and e.resource.startswith("model:")
            ]
            assert env.spent() - before == allow.budget_delta > 2
            assert any("charged as reserved" in r for r in env.outcomes()[-1].reasons)
    finally:
        backend.close()


def test_an_answer_charged_its_usage_has_no_charged_header(tmp_path: Path) -> None:
    """Review R70: an answer charged at its reported usage carries no such header."""
    backend = Reporting({"prompt_tokens": 5, "completion_tokens": 2})
    try:
        with _gateway(tmp_path, backend) as env:
            answer = env.post(_body())
            assert answer.status_code == 200, answer.text
            assert "x-agentgate-charged" not in answer.headers
            assert not any("charged as reserved" in r for r in env.outcomes()[-1].reasons)
    finally:
        backend.close()


def test_a_usage_over_the_reservation_within_the_budget_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Review R70: a usage costing more than the call reserved (its prompt estimate ran short)
    but within the budget was charged, and only the outcome said so; the gateway's log now has
    one line naming the entry and the overrun."""
    backend = Reporting({"prompt_tokens": 100, "completion_tokens": 2})
    try:
        with _gateway(tmp_path, backend) as env, caplog.at_level(logging.WARNING, logger=GATEWAY_LOGGER):
            answer = env.post(_body())
            assert answer.status_code == 200, answer.text
            assert "x-agentgate-charged" not in answer.headers
            env.gate.flush()
            reasons = env.outcomes()[-1].reasons
            assert any("over the" in r and "reserved" in r for r in reasons), reasons
            assert not any("exhausted" in r for r in reasons), reasons
            index = answer.headers["x-agentgate-audit-index"]
            said = [
                r.getMessage()
                for r in caplog.records
                if r.name == GATEWAY_LOGGER and "the reported usage costs" in r.getMessage()
            ]
            assert len(said) == 1, said
            assert said[0].startswith(f"agentgate gateway: audit entry {index}: the reported usage costs ")
            assert " over the " in said[0] and said[0].endswith(" reserved")
    finally:
        backend.close()
