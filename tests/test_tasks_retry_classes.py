"""Third review of the task scheduler and of ``keys new`` (F2). Real threads, loops and files.

- the configuration values accepted what cannot hold: ``retry_on`` classes no classifier
  returns (the retry silently never happened), NaN and infinite durations, a negative priority
  rank, ``True`` as a count, a string as a flag (``idempotent="false"`` made a payment tool
  repeatable after a timeout), a bare string as a class tuple, empty names, wrong value types;
- a policy could repeat a ``retry_on`` class, which the Gate then refused without a location;
- a rate so low that its next token is centuries away killed the shared rate timer thread
  (OverflowError), after which no rate-limited call of any tool was woken;
- a sync retry whose backoff is longer than a lock can wait raised OverflowError from ``submit``;
- ``save_key`` left NAME.key without NAME.pub when interrupted between the two (Ctrl-C), and
  replaced an existing NAME.pub (the identity a policy's ``key:`` file names).
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_tasks_idempotency import WAIT_S, _wait_until
from test_tasks_shared_limits import lookup_policy

from agentgate.audit.entry import not_printable
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import DeadlineExceeded, InputError, KeyFileError, PolicyError, SchedulingError
from agentgate.gate import Gate
from agentgate.keys import Keyring, PublicKey, SigningKey, load_public_key, load_signing_key, save_key
from agentgate.policy import parse_policy
from agentgate.store import open_store
from agentgate.store._sqlite import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.tasks import (
    DEFAULT_CLASSIFIER,
    ERROR_CLASSES,
    Attempt,
    BreakerPolicy,
    Classifier,
    PriorityClass,
    RateLimit,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    SharedLimits,
    SyncScheduler,
    TenantShare,
    TokenBucket,
    ToolCall,
    ToolLimits,
    always,
    by_attribute,
    by_type,
    from_function,
)
from agentgate.tasks._config import MAX_BACKOFF_S, MAX_RESET_TIMEOUT_S

INF, NAN = math.inf, math.nan


def _tool(*, idempotent: bool = False, **retry: Any) -> SchedulerConfig:
    return SchedulerConfig(tools={"t": ToolLimits(idempotent=idempotent, retry=RetryPolicy(**retry))})


# --- retry_on and trip_on against the classifier's classes --------------------------------------


def test_a_retry_on_class_no_classifier_returns_is_refused_naming_the_field_and_class() -> None:
    config = _tool(attempts=3, retry_on=("transient", "bogus"))
    with pytest.raises(InputError, match=r"tools\['t'\]\.retry\.retry_on: 'bogus'"):
        Scheduler(config)
    with pytest.raises(InputError, match=r"tools\['t'\]\.retry\.retry_on: 'bogus'"):
        SyncScheduler(config)
    default = SchedulerConfig(default_tool=ToolLimits(retry=RetryPolicy(retry_on=("timout",))))
    with pytest.raises(InputError, match=r"default_tool\.retry\.retry_on: 'timout'"):
        Scheduler(default)
    breaker = SchedulerConfig(breaker=BreakerPolicy(trip_on=("transient", "conection")))
    with pytest.raises(InputError, match=r"breaker\.trip_on: 'conection'"):
        Scheduler(breaker)


def test_the_built_in_classes_need_no_declaration() -> None:
    assert {"transient", "timeout", "connection", "error"} == ERROR_CLASSES
    assert DEFAULT_CLASSIFIER.classes == frozenset()  # it returns built-in classes only
    SyncScheduler(_tool(attempts=2, retry_on=tuple(sorted(ERROR_CLASSES)))).close()


class QuotaError(Exception):
    pass


class Flaky(Exception):
    error_class = "rate_limited"


def _fails_once(error: BaseException, calls: list[int]) -> Callable[[Attempt], str]:
    def tool(attempt: Attempt) -> str:
        calls.append(attempt.number)
        if attempt.number == 1:
            raise error
        return "done"

    return tool


@pytest.mark.parametrize(
    ("classifier", "error", "error_class"),
    [
        (by_type({QuotaError: "quota"}) | DEFAULT_CLASSIFIER, QuotaError(), "quota"),
        (by_attribute(classes=("rate_limited",)) | DEFAULT_CLASSIFIER, Flaky(), "rate_limited"),
        (
            from_function(lambda e: "quota" if isinstance(e, QuotaError) else None, classes=("quota",)),
            QuotaError(),
            "quota",
        ),
        (always("odd"), QuotaError(), "odd"),
    ],
)
def test_a_class_the_classifier_declares_may_be_retried_for_an_idempotent_tool(
    classifier: Classifier, error: BaseException, error_class: str
) -> None:
    assert error_class in classifier.classes
    calls: list[int] = []
    with SyncScheduler(
        _tool(idempotent=True, attempts=2, backoff_initial_s=0, backoff_max_s=0, retry_on=(error_class,)),
        classifier=classifier,
    ) as scheduler:
        assert scheduler.submit(ToolCall("t"), _fails_once(error, calls)) == "done"
    assert calls == [1, 2]


def test_an_undeclared_custom_class_is_refused_even_though_the_attribute_carries_it() -> None:
    # DEFAULT_CLASSIFIER reads error_class attributes but declares no class of its own.
    with pytest.raises(InputError, match=r"'rate_limited'.*Classifier\.classes"):
        Scheduler(_tool(retry_on=("rate_limited",)))


def test_a_subclass_declares_its_classes_and_chains_declare_the_union() -> None:
    class Mine(Classifier):
        classes = frozenset({"quota"})

        def __call__(self, error: BaseException) -> str | None:
            return "quota" if isinstance(error, QuotaError) else None

    chain = Mine() | by_type({KeyError: "missing"}) | DEFAULT_CLASSIFIER
    assert chain.classes == {"quota", "missing"}
    Scheduler(_tool(retry_on=("quota", "missing", "transient")), classifier=chain)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: by_attribute(classes="quota"), "string 'quota'"),
        (lambda: by_type({KeyError: ""}), "non-empty string"),
        (lambda: always(3), "non-empty string"),  # type: ignore[arg-type]
        (lambda: from_function(lambda e: None, classes=(None,)), "non-empty string"),
    ],
)
def test_a_declaration_that_is_not_class_names_is_an_input_error(make: Callable[[], Any], match: str) -> None:
    with pytest.raises(InputError, match=match):
        make()


def test_a_plain_function_as_classifier_is_an_input_error_not_an_attribute_error() -> None:
    with pytest.raises(InputError, match="from_function"):
        Scheduler(classifier=lambda e: "transient")  # type: ignore[arg-type]


# --- every field of every value --------------------------------------------------------------

BAD_VALUES: list[tuple[Callable[[], object], str]] = [
    (lambda: RetryPolicy(attempts=True), "retry.attempts must be an integer"),
    (lambda: RetryPolicy(attempts=2.5), "retry.attempts must be an integer"),  # type: ignore[arg-type]
    (lambda: RetryPolicy(attempts="3"), "retry.attempts must be an integer"),  # type: ignore[arg-type]
    (lambda: RetryPolicy(backoff_initial_s=NAN), "retry.backoff_initial_s must be a finite"),
    (lambda: RetryPolicy(backoff_initial_s=-1), "retry.backoff_initial_s must be >= 0"),
    (lambda: RetryPolicy(backoff_initial_s=True), "retry.backoff_initial_s must be a number"),
    (lambda: RetryPolicy(backoff_max_s=INF), "retry.backoff_max_s must be a finite"),
    (lambda: RetryPolicy(backoff_max_s=NAN), "retry.backoff_max_s must be a finite"),
    (lambda: RetryPolicy(multiplier=NAN), "retry.multiplier must be a finite"),
    (lambda: RetryPolicy(multiplier=INF), "retry.multiplier must be a finite"),
    (lambda: RetryPolicy(retry_on="transient"), "retry.retry_on must be a tuple"),  # type: ignore[arg-type]
    (lambda: RetryPolicy(retry_on=("",)), "retry.retry_on entry must be a non-empty string"),
    (lambda: RetryPolicy(retry_on=(1,)), "retry.retry_on entry must be a non-empty string"),  # type: ignore[arg-type]
    (lambda: RetryPolicy(retry_on=("timeout", "timeout")), "retry.retry_on repeats"),
    (lambda: RateLimit(per_second=INF), "rate.per_second must be a finite"),
    (lambda: RateLimit(per_second=NAN), "rate.per_second must be a finite"),
    (lambda: RateLimit(per_second=True), "rate.per_second must be a number"),
    (lambda: RateLimit(1, burst=True), "rate.burst must be an integer"),
    (lambda: RateLimit(1, burst=2.0), "rate.burst must be an integer"),  # type: ignore[arg-type]
    (lambda: ToolLimits(timeout_s=INF), "timeout_s must be a finite"),
    (lambda: ToolLimits(timeout_s=NAN), "timeout_s must be a finite"),
    (lambda: ToolLimits(timeout_s=0), "timeout_s must be > 0"),
    (lambda: ToolLimits(timeout_s=True), "timeout_s must be a number"),
    (lambda: ToolLimits(concurrency=True), "concurrency must be an integer"),
    (lambda: ToolLimits(concurrency=1.5), "concurrency must be an integer"),  # type: ignore[arg-type]
    (lambda: ToolLimits(idempotent="false"), "idempotent must be True or False"),  # type: ignore[arg-type]
    (lambda: ToolLimits(takes_idempotency_key=1), "takes_idempotency_key must be True or False"),  # type: ignore[arg-type]
    (lambda: ToolLimits(rate={"per_second": 1}), "rate must be a RateLimit"),  # type: ignore[arg-type]
    (lambda: ToolLimits(retry=None), "retry must be a RetryPolicy"),  # type: ignore[arg-type]
    (lambda: PriorityClass("batch", rank=-1), "'batch': rank must be >= 0"),
    (lambda: PriorityClass("batch", rank=True), "'batch': rank must be an integer"),
    (lambda: PriorityClass("batch", rank=0.5), "'batch': rank must be an integer"),  # type: ignore[arg-type]
    (lambda: PriorityClass("batch", weight=INF), "'batch': weight must be a finite"),
    (lambda: PriorityClass("batch", weight=NAN), "'batch': weight must be a finite"),
    (lambda: PriorityClass(""), "priority class name must be a non-empty string"),
    (lambda: PriorityClass(None), "priority class name must be a non-empty string"),  # type: ignore[arg-type]
    (lambda: TenantShare(weight=INF), "tenant weight must be a finite"),
    (lambda: TenantShare(weight=NAN), "tenant weight must be a finite"),
    (lambda: TenantShare(concurrency=True), "tenant concurrency must be an integer"),
    (lambda: TenantShare(max_queued=-1), "tenant max_queued must be >= 0"),
    (lambda: TenantShare(max_queued=INF), "tenant max_queued must be an integer"),  # type: ignore[arg-type]
    (lambda: BreakerPolicy(failure_threshold=True), "breaker.failure_threshold must be an integer"),
    (lambda: BreakerPolicy(reset_timeout_s=INF), "breaker.reset_timeout_s must be a finite"),
    (lambda: BreakerPolicy(reset_timeout_s=NAN), "breaker.reset_timeout_s must be a finite"),
    (lambda: BreakerPolicy(half_open_max_calls=0), "breaker.half_open_max_calls must be >= 1"),
    (lambda: BreakerPolicy(trip_on="timeout"), "breaker.trip_on must be a tuple"),  # type: ignore[arg-type]
    (lambda: BreakerPolicy(trip_on=("timeout", "timeout")), "breaker.trip_on repeats"),
    (lambda: SchedulerConfig(max_concurrency=True), "max_concurrency must be an integer"),
    (lambda: SchedulerConfig(principal_concurrency=0), "principal_concurrency must be >= 1"),
    (lambda: SchedulerConfig(max_queued=INF), "max_queued must be an integer"),  # type: ignore[arg-type]
    (lambda: SchedulerConfig(result_cache_size=True), "result_cache_size must be an integer"),
    (lambda: SchedulerConfig(lease_ttl_s=INF), "lease_ttl_s must be a finite"),
    (lambda: SchedulerConfig(lease_ttl_s=NAN), "lease_ttl_s must be a finite"),
    (lambda: SchedulerConfig(lease_ttl_s=1e12), "lease_ttl_s must be <="),
    (lambda: SchedulerConfig(tools={"": ToolLimits()}), "a tool name in tools must be a non-empty string"),
    (lambda: SchedulerConfig(tools={"t": {"concurrency": 2}}), r"tools\['t'\] must be a ToolLimits"),  # type: ignore[dict-item]
    (lambda: SchedulerConfig(tools=[("t", ToolLimits())]), "tools must be a Mapping"),  # type: ignore[arg-type]
    (lambda: SchedulerConfig(tenants={"acme": 2.0}), r"tenants\['acme'\] must be a TenantShare"),  # type: ignore[dict-item]
    (lambda: SchedulerConfig(tenants={"": TenantShare()}), "a tenant name in tenants"),
    (lambda: SchedulerConfig(tenant=None), "tenant must be a TenantShare"),  # type: ignore[arg-type]
    (lambda: SchedulerConfig(default_tool=None), "default_tool must be a ToolLimits"),  # type: ignore[arg-type]
    (lambda: SchedulerConfig(breaker=None), "breaker must be a BreakerPolicy"),  # type: ignore[arg-type]
    (lambda: SchedulerConfig(priority_classes=PriorityClass("default")), "priority_classes must be a tuple"),  # type: ignore[arg-type]
    (
        lambda: SchedulerConfig(priority_classes=("default",)),
        "a priority_classes entry must be a PriorityClass",
    ),  # type: ignore[arg-type]
    (
        lambda: SchedulerConfig(
            priority_classes=(PriorityClass("a"), PriorityClass("a")), default_priority="a"
        ),
        "priority class names repeat",
    ),
]


@pytest.mark.parametrize(("make", "match"), BAD_VALUES)
def test_every_bad_field_value_is_an_input_error_naming_the_field(
    make: Callable[[], object], match: str
) -> None:
    with pytest.raises(InputError, match=match):
        make()


def test_a_breaker_reset_timeout_is_at_most_a_day() -> None:
    """Review R55: ``BreakerPolicy(reset_timeout_s=1e300)`` was taken, and its open breaker told
    callers to retry after a 301-digit number of seconds. Rule: at most ``MAX_RESET_TIMEOUT_S``
    (a day, the backoff's bound); a day itself is taken."""
    assert MAX_RESET_TIMEOUT_S == MAX_BACKOFF_S == 86_400.0
    for too_long in (MAX_RESET_TIMEOUT_S + 1, 1e300):
        with pytest.raises(InputError, match=r"breaker.reset_timeout_s must be <= 86400, got"):
            BreakerPolicy(reset_timeout_s=too_long)
    assert BreakerPolicy(reset_timeout_s=MAX_RESET_TIMEOUT_S).reset_timeout_s == MAX_RESET_TIMEOUT_S


def test_lists_are_taken_as_tuples_so_a_config_cannot_change_after_it_is_checked() -> None:
    classes = [PriorityClass("default"), PriorityClass("batch", rank=1)]
    retry_on = ["transient"]
    config = SchedulerConfig(
        priority_classes=classes,  # type: ignore[arg-type]
        tools={"t": ToolLimits(retry=RetryPolicy(retry_on=retry_on))},  # type: ignore[arg-type]
    )
    classes.clear()
    retry_on.append("bogus")
    assert [c.name for c in config.priority_classes] == ["default", "batch"]
    assert config.tools["t"].retry.retry_on == ("transient",)
    Scheduler(config)  # the appended class did not reach it


def test_a_string_flag_no_longer_makes_a_payment_tool_repeatable_after_a_timeout() -> None:
    """Before: ``idempotent="false"`` was truthy, so a charge that timed out was charged again."""
    with pytest.raises(InputError, match="idempotent must be True or False, got a str"):
        ToolLimits(idempotent="false", retry=RetryPolicy(attempts=3, retry_on=("timeout",)))  # type: ignore[arg-type]


def test_a_policy_that_repeats_a_retry_on_class_is_refused_where_it_says_so() -> None:
    text = "version: 1\ntools:\n  t:\n    retry: {attempts: 3, retry_on: [transient, transient]}\n"
    with pytest.raises(PolicyError, match=r"<policy>:4:.*retry_on repeats an error class"):
        parse_policy(text)


# --- waits longer than a lock can wait ----------------------------------------------------------


async def test_a_rate_whose_next_token_is_centuries_away_does_not_kill_the_rate_timer() -> None:
    """Before: the timer thread died with OverflowError, so the other tool's call that waited for
    a token was never started and ran into its deadline."""
    config = SchedulerConfig(
        tools={"slow": ToolLimits(rate=RateLimit(1e-300)), "fast": ToolLimits(rate=RateLimit(20.0))}
    )
    scheduler = Scheduler(config)

    async def tool(attempt: Attempt) -> str:
        return attempt.call.tool

    try:
        assert await scheduler.submit(ToolCall("slow"), tool) == "slow"
        starved = asyncio.ensure_future(scheduler.submit(ToolCall("slow", deadline=time.time() + 5), tool))
        await asyncio.sleep(0.05)  # queued; the timer is armed for its token, 1e300 s away
        assert await scheduler.submit(ToolCall("fast"), tool) == "fast"
        second = await scheduler.submit(ToolCall("fast", deadline=time.time() + 5), tool)
        assert second == "fast"  # its token came 50 ms later, through the timer
        starved.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starved
        assert scheduler.shared._timer is not None and scheduler.shared._timer.is_alive()
    finally:
        await scheduler.aclose(drain=False)


def test_a_sync_retry_backoff_of_the_longest_allowed_waits_until_close() -> None:
    """Before: ``submit`` raised OverflowError from the wait of a backoff of 1e300 s (a backoff
    longer than a day is refused since review R54; the longest allowed still waits in steps)."""
    policy = RetryPolicy(
        attempts=2, backoff_initial_s=MAX_BACKOFF_S, backoff_max_s=MAX_BACKOFF_S, retry_on=("transient",)
    )
    scheduler = SyncScheduler(SchedulerConfig(tools={"t": ToolLimits(retry=policy)}))
    calls: list[int] = []
    outcome: list[BaseException | str] = []

    class Refused(Exception):
        error_class = "transient"

    def submit() -> None:
        try:
            outcome.append(scheduler.submit(ToolCall("t"), _fails_once(Refused(), calls)))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=submit)
    thread.start()
    deadline = time.monotonic() + 5
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    thread.join(0.2)
    assert calls == [1] and thread.is_alive() and not outcome  # backing off, not crashed
    scheduler.close()
    thread.join(5)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], SchedulingError | DeadlineExceeded), outcome


def test_a_custom_class_is_ambiguous_so_a_tool_that_is_not_idempotent_is_not_repeated() -> None:
    """Before: only timeout, connection and error counted as ambiguous, so a custom class listed in
    ``retry_on`` repeated a payment whose service failed after charging."""
    classifier = by_type({QuotaError: "quota"}) | DEFAULT_CLASSIFIER
    calls: list[int] = []
    config = _tool(attempts=3, backoff_initial_s=0, backoff_max_s=0, retry_on=("quota",))
    with (
        SyncScheduler(config, classifier=classifier) as scheduler,
        pytest.raises(QuotaError),
    ):
        scheduler.submit(ToolCall("t"), _fails_once(QuotaError(), calls))
    assert calls == [1]
    assert scheduler.dead_letters()[-1].reason == "ambiguous_not_idempotent"
    # The same tool marked idempotent is repeated.
    idempotent = SchedulerConfig(tools={"t": ToolLimits(idempotent=True, retry=config.tools["t"].retry)})
    with SyncScheduler(idempotent, classifier=classifier) as scheduler:
        assert scheduler.submit(ToolCall("t"), _fails_once(QuotaError(), calls)) == "done"
    assert calls == [1, 1, 2]


# --- keys new: the pair appears whole or not at all ----------------------------------------------


def _pair_state(directory: Path, name: str = "k") -> str:
    """ "none" or "pair" (a NAME.key and the NAME.pub of that key); anything else fails the test.
    A temporary file left behind fails it too."""
    names = sorted(p.name for p in directory.iterdir()) if directory.exists() else []
    assert not [n for n in names if n.startswith(".agentgate-")], names
    ours = [n for n in names if n in (f"{name}.key", f"{name}.pub")]
    if not ours:
        return "none"
    assert ours == [f"{name}.key", f"{name}.pub"], names
    assert load_public_key(directory / f"{name}.pub").did == load_signing_key(directory / f"{name}.key").did
    return "pair"


def test_save_key_interrupted_at_any_step_leaves_the_pair_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C at each file system step of ``save_key`` in turn. Before: a Ctrl-C while the .pub
    was written left NAME.key alone, and the next ``keys new`` refused because it existed."""
    steps = ("open", "fsync", "fchmod", "link", "replace", "rename")
    real = {step: getattr(os, step) for step in steps}
    seen = [0]
    interrupt_at = [0]

    def interrupting(step: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen[0] += 1
            if seen[0] == interrupt_at[0]:
                raise KeyboardInterrupt
            return real[step](*args, **kwargs)

        return call

    outcomes = []
    for n in range(1, 40):
        directory = tmp_path / f"d{n}"
        directory.mkdir()
        seen[0], interrupt_at[0] = 0, n
        for step in steps:
            monkeypatch.setattr(os, step, interrupting(step))
        try:
            save_key(SigningKey.generate(), directory, "k")
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        finally:
            for step in steps:
                monkeypatch.setattr(os, step, real[step])
        state = _pair_state(directory)
        outcomes.append((interrupted, state))
        if not interrupted:
            break
        assert state == "none", f"interrupted at step {n}: {state}"
    assert outcomes[-1] == (False, "pair") and len(outcomes) > 4, outcomes


def test_keys_new_over_a_key_without_its_pub_changes_nothing(tmp_path: Path) -> None:
    """The second link (NAME.key) fails: the NAME.pub linked just before is taken back."""
    first, _ = save_key(SigningKey.generate(), tmp_path, "k")
    (tmp_path / "k.pub").unlink()
    before = first.read_bytes()
    with pytest.raises(KeyFileError, match=r"k\.key already exists; refusing to overwrite a key"):
        save_key(SigningKey.generate(), tmp_path, "k")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.key"]
    assert first.read_bytes() == before


def test_keys_new_never_overwrites_an_existing_public_key(tmp_path: Path) -> None:
    """Before: NAME.pub was replaced, silently changing the identity a policy's ``key:`` names."""
    colleague = SigningKey.generate()
    (tmp_path / "bob.pub").write_text(colleague.did + "\n")
    with pytest.raises(KeyFileError, match=r"bob\.pub already exists; refusing to overwrite a public key"):
        save_key(SigningKey.generate(), tmp_path, "bob")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bob.pub"]
    assert load_public_key(tmp_path / "bob.pub").did == colleague.did


@pytest.mark.slow
def test_keys_new_racing_processes_leave_one_whole_pair(tmp_path: Path) -> None:
    """Three real ``agentgate keys new`` processes on one name: one wins, the others exit 2 with
    one line, and the pair on disk is the winner's."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = [sys.executable, "-m", "agentgate.cli.main", "keys", "new", "k", "--dir", str(tmp_path / "d")]
    processes = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    results = [(p.wait(60), *p.communicate()) for p in processes]
    winners = [out.strip() for code, out, _ in results if code == 0]
    assert len(winners) == 1, results
    for code, out, err in results:
        if code != 0:
            assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, err)
            assert "already exists" in err, err
    assert _pair_state(tmp_path / "d") == "pair"
    assert load_public_key(tmp_path / "d" / "k.pub").did == winners[0]


# --- ToolCall fields ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"tool": 5}, "tool name"),
        ({"tool": b"t"}, "tool name"),
        ({"tenant": None}, "tenant and principal must be strings"),
        ({"principal": 7}, "tenant and principal must be strings"),
        ({"run_id": 1, "call_id": "c"}, "got 1"),
        ({"run_id": "r", "call_id": 5}, "got 5"),
        ({"priority": 1}, "got 1"),
        ({"breaker_key": 3}, "got 3"),
        ({"arguments_digest": b"d"}, "got b'd'"),
        ({"authority_chain": "grant-hash"}, "authority_chain must be a tuple of ids"),
        ({"authority_chain": ("a", 2)}, "authority_chain holds ids"),
        ({"key_reaches_tool": "no"}, "key_reaches_tool must be True or False"),
        ({"pauses": True}, "pauses must be a function of an exception or None, got True"),
    ],
)
def test_a_tool_call_field_of_the_wrong_type_is_an_input_error_not_a_type_error(
    fields: dict[str, Any], match: str
) -> None:
    """Before: ints as run or call ids, or a non-string tool, raised TypeError from ``submit``;
    the others were taken as they came (see the next test for what a string chain did)."""
    fields = {"tool": "t", **fields}
    with pytest.raises(InputError, match=match):
        ToolCall(**fields)


async def test_a_chain_given_as_one_string_cannot_share_a_result_between_grants() -> None:
    """Before: ``authority_chain="grant-b1"`` scoped the idempotency key by its last character, so
    a call under grant b was handed the result of grant a's call without running."""
    scheduler = Scheduler()
    ran: list[object] = []

    async def tool(attempt: Attempt) -> object:
        ran.append(attempt.call.authority_chain)
        return attempt.call.authority_chain

    try:
        served = []
        for chain in ("grant-a1", "grant-b1", ["grant-a1"], ["grant-b1"]):
            try:
                call = ToolCall("t", run_id="r", call_id="c", authority_chain=chain)  # type: ignore[arg-type]
            except InputError:
                continue
            served.append(await scheduler.submit(call, tool))
        assert served == ran == [("grant-a1",), ("grant-b1",)]  # strings refused, lists taken as tuples
    finally:
        await scheduler.aclose()


# --- keys: what is not a did or a path -----------------------------------------------------------


@pytest.mark.parametrize("did", [None, 123, ["did:key:z6Mk"], {"did": "x"}])
def test_a_did_that_is_not_a_string_is_a_key_file_error_not_a_type_error(did: object) -> None:
    """Before: TypeError (``did[:80]`` of an int, an unhashable list in ``Keyring.get``), which
    callers catching ``KeyFileError`` (``Approval.verify``) let escape as a traceback."""
    with pytest.raises(KeyFileError, match="not an Ed25519 did:key"):
        PublicKey.from_did(did)  # type: ignore[arg-type]
    with pytest.raises(KeyFileError, match="not an Ed25519 did:key"):
        Keyring().get(did)  # type: ignore[arg-type]


def test_a_path_with_a_nul_byte_is_a_key_file_error_not_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="NUL byte"):
        load_signing_key(tmp_path / "a\0b.key")
    with pytest.raises(KeyFileError, match="NUL byte"):
        load_public_key(str(tmp_path / "a\0b.pub"))
    with pytest.raises(KeyFileError, match="NUL byte"):
        save_key(SigningKey.generate(), tmp_path / "d\0", "k")
    assert list(tmp_path.iterdir()) == []


# --- agentgate tasks: what tools and callers wrote is printed escaped ----------------------------


class Remote(Exception):
    pass


async def test_tasks_tables_escape_what_tools_and_callers_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a tool's error message (a remote service's text), a tool, tenant or breaker key
    reached the terminal raw: escape sequences cleared the screen, a line break forged a row."""
    store = open_store(str(tmp_path / "s.db"))

    async def tool(attempt: Attempt) -> None:
        raise Remote("denied\x1b[2J\x1b[32m all good\u202e\rforged")

    config = SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1, trip_on=("error",)))
    scheduler = Scheduler(config, store=store)
    try:
        call = ToolCall("t\x1b[31m", tenant="acme\nforged", breaker_key="backend:\x1b]0;title\x07")
        with pytest.raises(Remote):
            await scheduler.submit(call, tool)
    finally:
        await scheduler.aclose()
        store.close()
    capsys.readouterr()
    for command in ("dead-letters", "breakers"):
        assert await asyncio.to_thread(main, ["tasks", command, "--store", str(tmp_path / "s.db")]) == 0
        out = capsys.readouterr().out
        assert not [c for c in out if c != "\n" and not_printable(c)], out
        assert len(out.splitlines()) == 2, out  # the header and one row
    assert await asyncio.to_thread(main, ["tasks", "dead-letters", "--store", str(tmp_path / "s.db")]) == 0
    assert "denied\\x1b[2J\\x1b[32m all good\\u202e forged" in capsys.readouterr().out


# --- what a failing tool or classifier hands the scheduler ---------------------------------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() of this error raises")


class Broken(Classifier):
    def __call__(self, error: BaseException) -> str | None:
        raise ValueError("classifier bug")


class NotAName(Classifier):
    def __call__(self, error: BaseException) -> str | None:
        return 5  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("classifier", "error", "message"),
    [
        (DEFAULT_CLASSIFIER, Unprintable(), "<Unprintable: str() raised>"),
        (Broken(), Remote("m"), "m"),
        (NotAName(), Remote("m"), "m"),
    ],
)
async def test_the_tools_error_reaches_its_caller_and_the_dead_letter(
    tmp_path: Path, classifier: Classifier, error: Exception, message: str
) -> None:
    """Before: an error whose ``str()`` raises, or a classifier that raises, replaced the tool's
    error with their own and left no dead letter; a classifier's non-string answer was recorded
    as the class."""
    store = open_store(str(tmp_path / "s.db"))
    scheduler = Scheduler(classifier=classifier, store=store)

    async def tool(attempt: Attempt) -> None:
        raise error

    try:
        with pytest.raises(type(error)) as raised:
            await scheduler.submit(ToolCall("t"), tool)
        assert raised.value is error
        [letter] = scheduler.dead_letters()
        assert letter.errors[0].message == message
        assert letter.errors[0].error_class == "error"  # a broken classifier's answer: the safe class
        await scheduler.aclose()
        [stored] = DeadLetterStore(store).recent()
        assert stored.errors[0].message == message
    finally:
        await scheduler.aclose()
        store.close()


@pytest.mark.parametrize("field", ["tool", "tenant", "principal", "run_id", "call_id", "breaker_key"])
def test_a_lone_surrogate_in_a_tool_call_is_an_input_error_not_a_unicode_error(field: str) -> None:
    """A JSON ``"\\udcff"`` escape in a model's tool call id yields a lone surrogate; before, the
    idempotency key (or the dead letter's write) raised UnicodeEncodeError inside ``submit``."""
    fields: dict[str, Any] = {"tool": "t", "run_id": "r", "call_id": "c", field: "x\udcff"}
    with pytest.raises(InputError, match="not valid Unicode"):
        ToolCall(**fields)
    with pytest.raises(InputError, match="not valid Unicode"):
        ToolCall("t", authority_chain=("grant\udcff",))
    assert (
        ToolCall("caf\u00e9", tenant="\u00e9", call_id="\U0001f600").idempotency_key() is None
    )  # valid Unicode is fine


# --- an async function given to the sync path ----------------------------------------------------


@pytest.mark.parametrize("with_store", [False, True])
def test_a_sync_scheduler_refuses_an_async_function_instead_of_returning_its_coroutine(
    tmp_path: Path, with_store: bool
) -> None:
    """Before: ``submit`` returned the un-awaited coroutine as the result: the tool never ran
    and the call counted as a success (RuntimeWarning: coroutine was never awaited)."""
    store = open_store(str(tmp_path / "s.db")) if with_store else None
    ran: list[int] = []

    async def tool(attempt: Attempt) -> str:
        ran.append(attempt.number)
        return "done"

    try:
        config = SchedulerConfig(breaker=BreakerPolicy(failure_threshold=1))
        with SyncScheduler(config, store=store) as scheduler:
            with pytest.raises(InputError, match="async function"):
                scheduler.submit(ToolCall("t"), tool)  # type: ignore[arg-type]
            core = scheduler.scheduler
            _wait_until(
                lambda: core.in_flight == 0 and not core._tasks, "the refused call let go of its slot"
            )
            assert core.breaker("tool:t").closed  # the refusal said nothing of the tool
            assert scheduler.submit(ToolCall("t"), lambda attempt: "sync") == "sync"  # nothing held
        assert ran == []
    finally:
        if store is not None:
            store.close()


def test_gate_run_of_an_async_function_records_an_error_not_a_success(tmp_path: Path) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    gate = Gate(parse_policy(lookup_policy(keys)), SQLiteStore(tmp_path / "g.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, Call.tool("lookup", {"id": "1"}))

        async def lookup() -> str:
            return "never"

        with pytest.raises(InputError, match="async function"):
            gate.run(auth, lookup)  # type: ignore[arg-type]
        gate.flush()
        outcome = [e for e in gate.audit.entries() if e.kind == "outcome"]
        assert [e.status for e in outcome] == ["error"]
    finally:
        gate.close()


# --- close and aclose timeouts ------------------------------------------------------------------


@pytest.mark.parametrize("timeout_s", [math.inf, 1e300])
def test_sync_close_with_an_unbounded_drain_timeout_drains_and_stops_its_thread(timeout_s: float) -> None:
    """Before: OverflowError from the drain wait, after the scheduler was marked closed: a second
    ``close()`` returned at once and the loop thread was never stopped."""
    scheduler = SyncScheduler()
    release = threading.Event()
    results: list[str] = []

    def tool(attempt: Attempt) -> str:
        release.wait(WAIT_S)
        return "done"

    caller = threading.Thread(target=lambda: results.append(scheduler.submit(ToolCall("t"), tool)))
    caller.start()
    _wait_until(lambda: scheduler.scheduler.in_flight == 1, "the call runs")
    closer = threading.Timer(0.1, release.set)
    closer.start()
    scheduler.close(timeout_s=timeout_s)
    caller.join(WAIT_S)
    closer.join()
    assert results == ["done"]  # drained, not cut short
    assert not scheduler._thread.is_alive()


@pytest.mark.parametrize("timeout_s", [math.nan, "1", True])
async def test_a_drain_timeout_that_is_not_a_number_closes_nothing(timeout_s: Any) -> None:
    scheduler = SyncScheduler()
    with pytest.raises(InputError, match="drain timeout_s"):
        scheduler.close(timeout_s=timeout_s)
    assert scheduler.submit(ToolCall("t"), lambda attempt: "still open") == "still open"
    scheduler.close()
    assert not scheduler._thread.is_alive()
    core = Scheduler()
    with pytest.raises(InputError, match="drain timeout_s"):
        await core.aclose(timeout_s=timeout_s)

    async def tool(attempt: Attempt) -> str:
        return "still open"

    assert await core.submit(ToolCall("t"), tool) == "still open"
    await core.aclose()


# --- public values built by hand ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "burst"), [(math.nan, 1), (math.inf, 1), (0, 1), (True, 1), (1.0, True), (1.0, 1.5), ("1", 1)]
)
def test_a_token_bucket_that_could_never_grant_or_always_grants_is_refused(rate: Any, burst: Any) -> None:
    """Before: a NaN rate was accepted (it never grants a token: its calls wait forever)."""
    with pytest.raises(InputError, match="token bucket"):
        TokenBucket(rate, burst)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Scheduler({"max_concurrency": 2}), "needs a SchedulerConfig, got dict"),  # type: ignore[arg-type]
        (lambda: Scheduler(limits=SchedulerConfig()), "must be a SharedLimits"),  # type: ignore[arg-type]
        (lambda: SyncScheduler({"max_concurrency": 2}), "needs a SchedulerConfig, got dict"),  # type: ignore[arg-type]
        (lambda: SharedLimits({"max_concurrency": 2}), "need a SchedulerConfig, got dict"),  # type: ignore[arg-type]
    ],
)
def test_a_scheduler_given_something_else_than_its_config_says_so(
    make: Callable[[], object], match: str
) -> None:
    """Before: AttributeError ('dict' object has no attribute 'check_error_classes' or 'tools')."""
    with pytest.raises(InputError, match=match):
        make()


def test_a_burst_too_large_for_a_float_is_refused_in_the_config_and_the_policy() -> None:
    """Before: accepted, then the first call of the tool raised OverflowError (a float bucket)."""
    RateLimit(1.0, burst=2**53)
    with pytest.raises(InputError, match=r"rate\.burst must be <="):
        RateLimit(1.0, burst=2**53 + 1)
    text = f"version: 1\ntools:\n  t:\n    rate: {{per_second: 1.0, burst: {10**400}}}\n"
    with pytest.raises(PolicyError, match=r"tools\.t\.rate\.burst"):
        parse_policy(text)


@pytest.mark.parametrize("ttl", [0.001, 0.5])
def test_a_lease_too_short_to_renew_is_refused(ttl: float) -> None:
    """Before: accepted; the lease expired while its call ran and a second scheduler on the same
    store started the tool too (two calls at once of a tool limited to one, measured)."""
    with pytest.raises(InputError, match=r"lease_ttl_s must be >= 1\.0"):
        SchedulerConfig(lease_ttl_s=ttl)


async def test_the_shortest_lease_still_holds_one_slot_across_schedulers(tmp_path: Path) -> None:
    config = SchedulerConfig(tools={"solo": ToolLimits(concurrency=1)}, lease_ttl_s=1.0)
    stores = [open_store(str(tmp_path / "s.db")) for _ in range(2)]
    first, second = (Scheduler(config, store=store) for store in stores)
    running, peak = [0], [0]

    async def tool(attempt: Attempt) -> None:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.4)  # longer than a third of the lease: held by renewals
        running[0] -= 1

    try:
        await asyncio.gather(*(s.submit(ToolCall("solo"), tool) for s in (first, second, first, second)))
    finally:
        await first.aclose()
        await second.aclose()
        for store in stores:
            store.close()
    assert peak[0] == 1


def test_the_custom_classes_example_of_docs_tasks_runs_as_documented(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "tasks.md").read_text()
    block = text.split("**Custom classes.**", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/tasks.md", "exec"), namespace)
    assert namespace["scheduler"].config is namespace["config"]
    assert "tools['llm.call'].retry.retry_on: 'quota' is not" in capsys.readouterr().out


def test_check_error_classes_takes_names_not_one_string() -> None:
    config = _tool(retry_on=("q",))
    with pytest.raises(InputError, match="the string 'quota'"):
        config.check_error_classes("quota")  # its letters would include 'q'
    config.check_error_classes({"q"})


async def test_a_tools_own_nested_call_on_its_held_limit_runs_under_the_parents_slot() -> None:
    """docs/tasks.md, Limits: a call made by a running tool on a limit its parent holds runs under
    the parent's slot (it used to wait for it until its deadline); the limit still counts one."""
    scheduler = Scheduler(SchedulerConfig(max_concurrency=1))

    async def child(attempt: Attempt) -> str:
        assert scheduler.in_flight == 1  # the parent's slot, not a second one
        return "child ran"

    async def parent(attempt: Attempt) -> str:
        return await scheduler.submit(ToolCall("child", deadline=time.time() + 2.0), child)

    try:
        assert await scheduler.submit(ToolCall("parent"), parent) == "child ran"
    finally:
        await scheduler.aclose()
