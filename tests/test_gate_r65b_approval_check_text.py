"""What a refusal for a failing approval hook shows (review R65b).

``approval_check_failed`` quoted the hook's exception text into its message, and a finding's
message is a refusal's reason: what the caller is answered, what an audit entry keeps, and (from
the Gate) what a model is told. An exception text may carry internals (a store path, a URL with
its password, a SQL statement). The refusal now names the exception's type only; the operator
reads the whole error in the log (logger ``agentgate.authority``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from test_fourstates_r57_findings import BOB, NOW, ROOT

from agentgate.authority import ApprovalRequirement, Authority, GrantRepository, Invocation, issue
from agentgate.capabilities import Call
from agentgate.store import SQLiteStore

SECRET_URL = "postgresql://user:secret@host/db"
CALL = Call.tool("search.web", {"query": "q"})


class ApprovalsUnreachable(Exception):
    """A hook's own error, its text naming where it looked."""


def _leaky(call: Call, chain: object, invocation: object) -> ApprovalRequirement | None:
    raise ApprovalsUnreachable(f"could not connect to {SECRET_URL}: SELECT * FROM approvals")


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    return Authority(GrantRepository(SQLiteStore(tmp_path / "s.db")), ROOT.public, approvals=_leaky)


def test_a_failing_hooks_text_stays_out_of_the_refusal_and_reaches_the_log(
    authority: Authority, caplog: pytest.LogCaptureFixture
) -> None:
    """Review R65b: a hook raising with ``postgresql://user:secret@host/db`` in its text had it
    quoted in the refusal's reasons (and so its audit entry and, from the Gate, the model's tool
    error). The refusal names the exception's type and where to read it; the log keeps the text."""
    chain = issue(ROOT, BOB.did, ["tool:search.*"], ttl=3600, now=NOW)
    with caplog.at_level(logging.WARNING, logger="agentgate.authority"):
        decisions = (
            authority.decide(Invocation.sign(BOB, chain, CALL, now=NOW + 1), now=NOW + 1),
            authority.decide_held(BOB, chain, CALL, now=NOW + 1),
        )
    for decision in decisions:
        (finding,) = decision.findings
        assert finding.code == "approval_check_failed"
        told = " ".join((*decision.reasons, finding.message, finding.hint or ""))
        assert "secret" not in told and "SELECT" not in told
        assert "(ApprovalsUnreachable)" in finding.message
        assert "agentgate.authority" in finding.message
    logged = [r for r in caplog.records if r.name == "agentgate.authority"]
    assert len(logged) == 2
    assert all(r.exc_info is not None and SECRET_URL in str(r.exc_info[1]) for r in logged)


def test_an_answer_that_is_no_answer_is_still_named(authority: Authority) -> None:
    """Review R65b: agentgate's own text for a hook's answer that is neither ``None`` nor an
    ``ApprovalRequirement`` (the type it answered, review R56) is still shown: it holds nothing
    of the hook's."""
    chain = issue(ROOT, BOB.did, ["tool:search.*"], ttl=3600, now=NOW)
    answering = Authority(authority.repo, ROOT.public, approvals=lambda call, chain, inv: "alice")
    (finding,) = answering.decide_held(BOB, chain, CALL, now=NOW + 1).findings
    assert finding.code == "approval_check_failed"
    assert "(TypeError: it answered a str, not an ApprovalRequirement or None)" in finding.message


class Unprintable(Exception):
    """A hook's error whose text cannot be made."""

    def __str__(self) -> str:
        raise ValueError("no text")


def test_a_hook_error_without_text_is_still_a_refusal(authority: Authority) -> None:
    """Review R65b: a hook raising an exception whose ``str`` raises made the decision raise that
    error (the refusal's message quoted the text), where a failing approval check is a refusal."""

    def unprintable(call: Call, chain: object, invocation: object) -> ApprovalRequirement | None:
        raise Unprintable

    chain = issue(ROOT, BOB.did, ["tool:search.*"], ttl=3600, now=NOW)
    answering = Authority(authority.repo, ROOT.public, approvals=unprintable)
    (finding,) = answering.decide_held(BOB, chain, CALL, now=NOW + 1).findings
    assert finding.code == "approval_check_failed" and "(Unprintable)" in finding.message
