"""Retries: exact attempt counts, backoff bounds, the ambiguity rule, deadlines, idempotency reuse."""

from __future__ import annotations

import asyncio
import itertools
import random
import time

import httpx
import pytest

from agentgate.errors import DeadlineExceeded, InputError
from agentgate.tasks import (
    DEFAULT_CLASSIFIER,
    Attempt,
    BreakerPolicy,
    Classifier,
    Failure,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    ToolCall,
    ToolLimits,
    argument_digest,
    attempts_left,
    backoff_bound,
    full_jitter,
    retry_on_classes,
    rule_for,
    safe_to_repeat,
)


class Transient(Exception):
    error_class = "transient"


def flaky(failures: int, error: type[Exception] = Transient) -> tuple[list[Attempt], object]:
    """A tool that fails ``failures`` times, then returns the attempt number."""
    seen: list[Attempt] = []

    async def tool(attempt: Attempt) -> int:
        seen.append(attempt)
        if len(seen) <= failures:
            raise error(f"failure {len(seen)}")
        return attempt.number

    return seen, tool


FAST = RetryPolicy(attempts=4, backoff_initial_s=0.001, backoff_max_s=0.004, retry_on=("transient",))


async def test_retries_until_success_with_exact_attempt_count() -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(retry=FAST)}))
    seen, tool = flaky(2)
    assert await scheduler.submit(ToolCall("t"), tool) == 3  # type: ignore[arg-type]
    assert [a.number for a in seen] == [1, 2, 3]
    assert scheduler.metrics.count("retried", "t") == 2
    assert scheduler.dead_letters() == []
    await scheduler.aclose()


async def test_gives_up_after_the_last_attempt_and_records_a_dead_letter() -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(retry=FAST)}))
    seen, tool = flaky(10)
    call = ToolCall(
        "t", arguments={"x": 1}, run_id="r1", call_id="c1", authority_chain=("grant-a", "grant-b")
    )
    with pytest.raises(Transient, match="failure 4"):
        await scheduler.submit(call, tool)  # type: ignore[arg-type]
    assert len(seen) == 4
    [letter] = scheduler.dead_letters()
    assert letter.reason == "attempts_exhausted"
    assert letter.authority_chain == ("grant-a", "grant-b")
    assert [e.attempt for e in letter.errors] == [1, 2, 3, 4]
    assert {e.error_class for e in letter.errors} == {"transient"}
    assert letter.arguments_digest == argument_digest({"x": 1})
    assert letter.idempotency_key == call.idempotency_key()
    await scheduler.aclose()


async def test_error_classes_outside_retry_on_are_not_retried() -> None:
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(retry=FAST)}))
    seen, tool = flaky(10, ValueError)
    with pytest.raises(ValueError):
        await scheduler.submit(ToolCall("t"), tool)  # type: ignore[arg-type]
    assert len(seen) == 1
    assert scheduler.dead_letters()[0].reason == "not_retryable"
    await scheduler.aclose()


def test_backoff_is_full_jitter_within_exponential_bounds() -> None:
    policy = RetryPolicy(attempts=10, backoff_initial_s=0.5, backoff_max_s=4.0, multiplier=2.0)
    assert [backoff_bound(policy, n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    rng = random.Random(1)
    draws = [full_jitter(policy, n, rng) for n in range(1, 6) for _ in range(200)]
    for i, delay in enumerate(draws):
        assert 0 <= delay <= backoff_bound(policy, i // 200 + 1)
    # full jitter uses the whole range, not just its top
    assert min(draws[800:]) < 0.5 and max(draws[800:]) > 3.5


async def test_scheduler_waits_exactly_the_seeded_backoff() -> None:
    policy = RetryPolicy(attempts=4, backoff_initial_s=0.01, backoff_max_s=0.03, retry_on=("transient",))
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(retry=policy)}), rng=random.Random(42))
    expected_rng = random.Random(42)
    expected = [full_jitter(policy, n, expected_rng) for n in (1, 2, 3)]
    starts: list[float] = []

    async def tool(attempt: Attempt) -> None:
        starts.append(time.monotonic())
        raise Transient("again")

    with pytest.raises(Transient):
        await scheduler.submit(ToolCall("t"), tool)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(gaps) == 3
    for gap, delay in zip(gaps, expected, strict=True):
        assert gap >= delay - 0.001  # never earlier than the drawn backoff (the loop may be late)
    await scheduler.aclose()


async def test_non_idempotent_tool_is_not_retried_after_a_timeout() -> None:
    retry_all = RetryPolicy(
        attempts=5, backoff_initial_s=0.001, retry_on=("transient", "timeout", "connection")
    )
    scheduler = Scheduler(SchedulerConfig(tools={"pay": ToolLimits(timeout_s=0.02, retry=retry_all)}))
    runs: list[int] = []

    async def pay(attempt: Attempt) -> None:
        runs.append(attempt.number)
        await asyncio.sleep(1)

    with pytest.raises(DeadlineExceeded):
        await scheduler.submit(ToolCall("pay", run_id="r", call_id="c"), pay)
    assert runs == [1]  # even though the policy lists "timeout" as retryable
    assert scheduler.dead_letters()[0].reason == "ambiguous_not_idempotent"

    async def pay_lost_connection(attempt: Attempt) -> None:
        runs.append(attempt.number)
        raise httpx.RemoteProtocolError("server disconnected")

    runs.clear()
    with pytest.raises(httpx.RemoteProtocolError):
        await scheduler.submit(ToolCall("pay"), pay_lost_connection)
    assert runs == [1]
    await scheduler.aclose()


async def test_ambiguous_failures_are_retried_for_idempotent_or_keyed_tools() -> None:
    retry_all = RetryPolicy(attempts=3, backoff_initial_s=0.001, retry_on=("timeout",))
    config = SchedulerConfig(
        tools={
            "read": ToolLimits(timeout_s=0.01, retry=retry_all, idempotent=True),
            "pay": ToolLimits(timeout_s=0.01, retry=retry_all, takes_idempotency_key=True),
        }
    )
    scheduler = Scheduler(config)
    keys: list[str | None] = []

    async def hang(attempt: Attempt) -> None:
        keys.append(attempt.idempotency_key)
        await asyncio.sleep(1)

    with pytest.raises(DeadlineExceeded):
        await scheduler.submit(ToolCall("read"), hang)
    assert len(keys) == 3
    keys.clear()
    call = ToolCall("pay", arguments={"amount": 5}, run_id="run-1", call_id="call-9")
    with pytest.raises(DeadlineExceeded):
        await scheduler.submit(call, hang)
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0] == call.idempotency_key()
    keys.clear()
    with pytest.raises(DeadlineExceeded):  # no run/call id: no key, so not safe to repeat
        await scheduler.submit(ToolCall("pay", arguments={"amount": 5}), hang)
    assert keys == [None]
    await scheduler.aclose()


async def test_deadline_cuts_retries() -> None:
    policy = RetryPolicy(attempts=100, backoff_initial_s=0.1, backoff_max_s=0.1, retry_on=("transient",))
    no_breaker = BreakerPolicy(failure_threshold=1000)
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(retry=policy)}, breaker=no_breaker))
    seen, tool = flaky(1000)
    # The last error when the next backoff would end past the deadline; DeadlineExceeded when a
    # busy machine overslept the backoff and the deadline passed before the retry could start.
    with pytest.raises((Transient, DeadlineExceeded)):
        await scheduler.submit(ToolCall("t", deadline=time.time() + 0.1), tool)  # type: ignore[arg-type]
    # Cut at the deadline (0.1 s): counted, not timed (100 attempts, each after a backoff of 0 to
    # 0.1 s, take ~5 s; a wall-clock bound could fail on a loaded machine that stalls the test).
    assert 1 <= len(seen) < 100
    assert scheduler.dead_letters()[0].reason == "deadline"
    await scheduler.aclose()


async def test_slot_is_released_during_backoff() -> None:
    policy = RetryPolicy(attempts=2, backoff_initial_s=0.2, backoff_max_s=0.2, retry_on=("transient",))
    scheduler = Scheduler(
        SchedulerConfig(tools={"t": ToolLimits(concurrency=1, retry=policy)}), rng=random.Random(3)
    )
    seen, tool = flaky(1)
    other_ran = asyncio.Event()

    async def other(attempt: Attempt) -> None:
        other_ran.set()

    retrying = asyncio.create_task(scheduler.submit(ToolCall("t"), tool))  # type: ignore[arg-type]
    while not seen:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.001)
    assert scheduler.in_flight == 0  # backing off, holding nothing
    await asyncio.wait_for(scheduler.submit(ToolCall("t"), other), timeout=0.1)
    assert other_ran.is_set()
    assert await retrying == 2
    await scheduler.aclose()


async def test_completed_result_is_reused_not_rerun() -> None:
    scheduler = Scheduler(SchedulerConfig())
    runs: list[int] = []

    async def refund(attempt: Attempt) -> str:
        runs.append(attempt.number)
        await asyncio.sleep(0.01)
        return "refund-123"

    call = ToolCall("refund", arguments={"amount": 10}, run_id="run", call_id="tc-1")
    twins = await asyncio.gather(scheduler.submit(call, refund), scheduler.submit(call, refund))
    assert twins == ["refund-123", "refund-123"] and runs == [1]  # the twin joined the running call
    assert await scheduler.submit(call, refund) == "refund-123" and runs == [1]
    other = ToolCall("refund", arguments={"amount": 11}, run_id="run", call_id="tc-1")
    assert await scheduler.submit(other, refund) == "refund-123" and runs == [1, 1]  # other arguments
    assert await scheduler.submit(ToolCall("refund", arguments={"amount": 10}), refund) and len(runs) == 3
    assert scheduler.metrics.count("reused", "refund") == 2
    await scheduler.aclose()


def test_idempotency_key_derives_from_run_call_and_arguments() -> None:
    base = ToolCall("t", arguments={"a": 1, "b": [1, 2]}, run_id="r", call_id="c")
    same = ToolCall("t", arguments={"b": [1, 2], "a": 1}, run_id="r", call_id="c")
    assert base.idempotency_key() == same.idempotency_key()
    assert len(base.idempotency_key() or "") == 64
    for changed in (
        ToolCall("t", arguments={"a": 2, "b": [1, 2]}, run_id="r", call_id="c"),
        ToolCall("t", arguments={"a": 1, "b": [1, 2]}, run_id="r2", call_id="c"),
        ToolCall("t", arguments={"a": 1, "b": [1, 2]}, run_id="r", call_id="c2"),
        ToolCall("u", arguments={"a": 1, "b": [1, 2]}, run_id="r", call_id="c"),
    ):
        assert changed.idempotency_key() != base.idempotency_key()
    assert ToolCall("t", arguments={"a": 1}).idempotency_key() is None
    with pytest.raises(InputError, match="not JSON"):
        ToolCall("t", arguments={"a": object()}, run_id="r", call_id="c").idempotency_key()


def test_default_classifier() -> None:
    request = httpx.Request("POST", "http://127.0.0.1/")
    cases = {
        TimeoutError(): "timeout",
        ConnectionRefusedError(): "transient",
        ConnectionResetError(): "connection",
        httpx.ConnectError("refused", request=request): "transient",
        httpx.ReadTimeout("slow", request=request): "timeout",
        httpx.RemoteProtocolError("gone", request=request): "connection",
        Transient(): "transient",
        ValueError(): "error",
    }
    for status, expected in (
        (429, "transient"),
        (503, "transient"),
        (502, "connection"),
        (504, "timeout"),
        (400, "error"),
    ):
        response = httpx.Response(status, request=request)
        cases[httpx.HTTPStatusError("x", request=request, response=response)] = expected
    for error, expected in cases.items():
        assert DEFAULT_CLASSIFIER(error) == expected, error


def test_retry_rules_compose_and_name_the_objection() -> None:
    limits = ToolLimits(retry=RetryPolicy(attempts=3, retry_on=("transient", "timeout")))
    rule = retry_on_classes(("transient", "timeout")) & safe_to_repeat() & attempts_left(3)

    def failure(error_class: str, attempt: int, keyed: bool = False, lim: ToolLimits = limits) -> Failure:
        return Failure(RuntimeError(), error_class, attempt, lim, keyed)

    assert rule.objection(failure("transient", 1)) is None
    assert rule.objection(failure("transient", 3)) == "attempts_exhausted"
    assert rule.objection(failure("error", 1)) == "not_retryable"
    assert rule.objection(failure("timeout", 1)) == "ambiguous_not_idempotent"
    keyed = ToolLimits(retry=limits.retry, takes_idempotency_key=True)
    assert rule.objection(failure("timeout", 1, keyed=True, lim=keyed)) is None
    assert rule.objection(failure("timeout", 1, keyed=False, lim=keyed)) == "ambiguous_not_idempotent"
    assert rule_for(limits).objection(failure("timeout", 1)) == "ambiguous_not_idempotent"


def test_listing_error_in_retry_on_repeats_only_tools_safe_to_repeat() -> None:
    # A tool may raise after its effect (a payment service's 500 after the charge): "error" is as
    # ambiguous as a timeout, and no policy setting makes a second payment possible.
    listed = RetryPolicy(attempts=3, retry_on=("error",))
    rule = rule_for(ToolLimits(retry=listed))
    assert rule.objection(Failure(ValueError(), "error", 1, ToolLimits(retry=listed), False)) == (
        "ambiguous_not_idempotent"
    )
    safe = ToolLimits(retry=listed, idempotent=True)
    assert rule_for(safe).objection(Failure(ValueError(), "error", 1, safe, False)) is None
    keyed = ToolLimits(retry=listed, takes_idempotency_key=True)
    assert rule_for(keyed).objection(Failure(ValueError(), "error", 1, keyed, True)) is None


def test_a_retry_policy_whose_cap_is_below_its_first_backoff_is_refused() -> None:
    """Kills: ``RetryPolicy``'s ``backoff_max_s >= backoff_initial_s`` check dropped (a policy
    written with the two swapped was taken, silently capping every backoff below the first).
    Rule: a configuration mistake is an ``InputError`` naming the fields, never a silent guess."""
    from agentgate.errors import InputError
    from agentgate.tasks import RetryPolicy

    with pytest.raises(InputError, match=r"backoff_max_s \(1.0\) must be >= backoff_initial_s \(2.0\)"):
        RetryPolicy(attempts=3, backoff_initial_s=2.0, backoff_max_s=1.0)
    assert RetryPolicy(attempts=3, backoff_initial_s=1.0, backoff_max_s=1.0).backoff_max_s == 1.0


def test_a_backoff_longer_than_a_day_is_refused_naming_the_field() -> None:
    """Review R54: ``backoff_max_s=1e308`` was taken, and a retried call with no deadline waited
    that long. Rule: each backoff field is at most a day, refused by an ``InputError`` naming it."""
    from agentgate.errors import InputError
    from agentgate.tasks import RetryPolicy

    with pytest.raises(InputError, match=r"retry\.backoff_max_s must be <= 86400, got 1e\+308"):
        RetryPolicy(attempts=3, backoff_max_s=1e308)
    with pytest.raises(InputError, match=r"retry\.backoff_initial_s must be <= 86400, got 86401"):
        RetryPolicy(attempts=3, backoff_initial_s=86_401, backoff_max_s=86_401)
    assert RetryPolicy(attempts=3, backoff_initial_s=86_400, backoff_max_s=86_400).backoff_max_s == 86_400


# --- backoff past the deadline, a classifier that raises --------------------------------------


class Ambiguous(Exception):
    """No ``error_class``: what a tool raises after its effect may have happened."""


class TopOfRange(random.Random):
    """A random source whose every jitter draw is the top of its range (the longest backoff)."""

    def uniform(self, a: float, b: float) -> float:
        return b


class Broken(Classifier):
    def __call__(self, error: BaseException) -> str | None:
        raise ValueError("classifier bug")


async def test_a_retry_whose_backoff_ends_past_the_deadline_is_not_waited_for() -> None:
    """The backoff before the retry (2 s) ends past the call's deadline (in 0.5 s): the call gives
    up at once with the tool's own error and one attempt, reason ``deadline``. Kills: the
    deadline check on the backoff dropped (``_failed``: the call slept through the backoff, then
    was refused at admission with ``DeadlineExceeded`` instead of the tool's error)."""
    policy = RetryPolicy(attempts=5, backoff_initial_s=2.0, backoff_max_s=2.0, retry_on=("transient",))
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(retry=policy)}), rng=TopOfRange())
    attempts: list[int] = []

    async def tool(attempt: Attempt) -> None:
        attempts.append(attempt.number)
        raise Transient("upstream 503")

    with pytest.raises(Transient, match="upstream 503"):
        await scheduler.submit(ToolCall("t", deadline=time.time() + 0.5), tool)
    assert attempts == [1]
    [letter] = scheduler.dead_letters()
    assert letter.reason == "deadline"
    assert scheduler.metrics.count("retried", "t") == 0
    await scheduler.aclose()


async def test_a_classifier_that_raises_makes_the_failure_ambiguous_never_transient() -> None:
    """A classifier that raises must leave the failure in the safe class (``error``: ambiguous),
    so a non-idempotent tool is not repeated even though ``transient`` is retried. Kills: the
    fallback class of a raising classifier set to ``transient`` (``_failed``: a possibly-done
    payment repeated)."""
    policy = RetryPolicy(attempts=3, backoff_initial_s=0.001, backoff_max_s=0.001, retry_on=("transient",))
    scheduler = Scheduler(SchedulerConfig(tools={"pay": ToolLimits(retry=policy)}), classifier=Broken())
    attempts: list[int] = []

    async def pay(attempt: Attempt) -> None:
        attempts.append(attempt.number)
        raise Ambiguous("connection reset after the request was sent")

    with pytest.raises(Ambiguous):
        await scheduler.submit(ToolCall("pay"), pay)
    assert attempts == [1]
    [letter] = scheduler.dead_letters()
    assert [e.error_class for e in letter.errors] == ["error"]
    assert letter.reason == "not_retryable"
    await scheduler.aclose()
