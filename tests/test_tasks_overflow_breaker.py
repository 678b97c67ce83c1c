"""Review R48, fourth second look: commit 54b4d1c (one shared overflow breaker past
``PER_NAME_STATE`` breaker keys; ``is_key_text`` widened to labels, assignments and punctuation).

Found, and fixed by the lead in the same session (each was a strict xfail; the name ``_other`` is
now reserved for tools and breaker keys, a named tool with a late ``breaker_key`` keeps its own
breaker, the ``CircuitOpen`` names the tool and the overflow, and ``is_key_text`` looks at every
word of the value, split at blanks, quotes and label punctuation, a did:key left out):
- agentgate/tasks/_limits.py: ``OVERFLOW_BREAKER`` is ``tool:_other``, the very key of a tool named
  ``_other``: a tool the config names ``_other`` (or one seen before the bound) shares the breaker
  invented tools open past the bound.
- agentgate/tasks/_limits.py: a call to a tool the config names, with an explicit ``breaker_key``
  first seen past the bound, runs under the overflow breaker: invented tools' failures refuse it.
- agentgate/tasks/_scheduler.py: the ``CircuitOpen`` of a call refused by the overflow breaker
  names only ``tool:_other``, neither the tool called nor that the breaker is a shared overflow.
- agentgate/keys.py: a key behind two labels (``export KEY=ed25519:SEED``), a quoted label (a JWK's
  ``"d": "..."`` line) or a label of two words (``Private key: SEED``) is still quoted in an error.
- agentgate/keys.py: ``.`` now stripped at the start too hides a plain relative path
  (``./keys/<long name>``) that names no file, and calls it a key.

Holds (passing): the overflow breaker's transitions published and adopted across processes
through the store, never reaching a named or earlier tool; its metrics label; a Gate's config
naming every policy tool, so no Gate call reaches the overflow; a did:key behind labels or
punctuation is still shown, and a refused flag value still names the flag and says no file.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from agentgate.errors import CircuitOpen, InputError, KeyFileError, PolicyError
from agentgate.gate._config import scheduler_config
from agentgate.keys import SigningKey, is_key_text, load_signing_key, refuse_key_text
from agentgate.policy import parse_policy
from agentgate.store import open_store
from agentgate.store.leases import SharedBreakers
from agentgate.tasks import Scheduler, SchedulerConfig, SyncScheduler, ToolCall
from agentgate.tasks._call import OVERFLOW_BREAKER
from agentgate.tasks._config import BreakerPolicy, ToolLimits
from agentgate.tasks._limits import PER_NAME_STATE, SharedLimits

_ONE_FAILURE = BreakerPolicy(failure_threshold=1, reset_timeout_s=3600)


def _boom(_attempt: object) -> str:
    raise ConnectionError("down")


def _flood(limits: SharedLimits, prefix: str = "made-up") -> None:
    for i in range(PER_NAME_STATE):
        limits.breaker_for(ToolCall(tool=f"{prefix}-{i}"))


# --- the overflow breaker's key is a tool's key ----------------------------------------------


def test_the_overflow_breakers_name_is_reserved_so_no_tool_shares_it() -> None:
    """Was a strict xfail (a tool named ``_other``, named by the config or seen before the flood,
    shared the overflow breaker ``tool:_other``): the name is now reserved, as the metrics'
    ``_other`` label already was, in the config, as a tool call's tool and as a breaker key."""
    with pytest.raises(InputError, match="_other"):
        SchedulerConfig(result_cache_size=0, tools={"_other": ToolLimits()})
    with pytest.raises(InputError, match="reserved"):
        ToolCall(tool="_other")
    with pytest.raises(InputError, match="reserved"):
        ToolCall(tool="x", breaker_key="tool:_other")


# --- an explicit breaker_key of a named tool past the bound -----------------------------------


def test_a_named_tool_with_a_late_breaker_key_is_not_refused_by_invented_tools() -> None:
    config = SchedulerConfig(result_cache_size=0, tools={"pay": ToolLimits()}, breaker=_ONE_FAILURE)
    with SyncScheduler(config) as sync:
        _flood(sync.scheduler.shared)
        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="late-0"), _boom)
        assert sync.submit(ToolCall(tool="pay", breaker_key="backend:gpu"), lambda _a: "ok") == "ok"


def test_a_breaker_key_seen_before_the_bound_keeps_its_own_breaker() -> None:
    """An explicit key used before the flood is never moved to the overflow; one given later by
    an invented tool is (and so shares the invented tools' state, not a named tool's)."""
    config = SchedulerConfig(result_cache_size=0, tools={"pay": ToolLimits()}, breaker=_ONE_FAILURE)
    with SyncScheduler(config) as sync:
        shared = sync.scheduler.shared
        early = shared.breaker_for(ToolCall(tool="x", breaker_key="backend:early"))
        _flood(shared)
        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="late-0"), _boom)
        assert shared.breaker_for(ToolCall(tool="y", breaker_key="backend:early")) is early
        assert sync.submit(ToolCall(tool="y", breaker_key="backend:early"), lambda _a: "ok") == "ok"
        assert sync.submit(ToolCall(tool="pay", breaker_key="tool:pay"), lambda _a: "ok") == "ok"
        with pytest.raises(CircuitOpen):
            sync.submit(ToolCall(tool="z", breaker_key="backend:late"), lambda _a: "ok")
        # One breaker per key: the overflow's key names one object only.
        assert (
            shared.breakers[OVERFLOW_BREAKER] is shared.breaker("tool:late-1") is shared.breaker("backend:x")
        )


# --- the CircuitOpen of an overflow call ------------------------------------------------------


def test_a_circuit_open_under_the_overflow_leaks_no_other_tool_name() -> None:
    with SyncScheduler(SchedulerConfig(result_cache_size=0, breaker=_ONE_FAILURE)) as sync:
        _flood(sync.scheduler.shared)
        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="tenant-a-secret-tool"), _boom)
        with pytest.raises(CircuitOpen) as raised:
            sync.submit(ToolCall(tool="late-1", tenant="b"), lambda _a: "ok")
    assert raised.value.key == OVERFLOW_BREAKER
    assert "tenant-a-secret-tool" not in str(raised.value)


def test_a_circuit_open_under_the_overflow_names_the_tool_called() -> None:
    with SyncScheduler(SchedulerConfig(result_cache_size=0, breaker=_ONE_FAILURE)) as sync:
        _flood(sync.scheduler.shared)
        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="late-0"), _boom)
        with pytest.raises(CircuitOpen) as raised:
            sync.submit(ToolCall(tool="late-1"), lambda _a: "ok")
    assert "late-1" in str(raised.value)


# --- across processes (two schedulers with their own limits on one store) and metrics ---------


async def _stored(path: Path, key: str, state: str) -> None:
    store = open_store(str(path))
    try:
        deadline = time.monotonic() + 10
        while (found := SharedBreakers(store).read(key)) is None or found.state != state:
            assert time.monotonic() < deadline, f"{key} never became {state}"
            await asyncio.sleep(0.01)
    finally:
        store.close()


async def test_the_overflow_breaker_is_shared_across_processes_and_never_reaches_a_named_tool(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.db"
    stores = [open_store(str(path)), open_store(str(path))]
    config = SchedulerConfig(result_cache_size=0, tools={"pay": ToolLimits()}, breaker=_ONE_FAILURE)
    registry = CollectorRegistry()
    first = Scheduler(config, store=stores[0])
    second = Scheduler(config, store=stores[1], registry=registry)

    async def ok(_attempt: object) -> str:
        return "ok"

    async def down(_attempt: object) -> str:
        raise ConnectionError("down")

    try:
        for scheduler in (first, second):
            _flood(scheduler.shared)
        with pytest.raises(ConnectionError):
            await first.submit(ToolCall("late-0"), down)
        await _stored(path, OVERFLOW_BREAKER, "open")
        with pytest.raises(CircuitOpen):  # adopted: the second process's own overflow never failed
            await second.submit(ToolCall("late-1"), ok)
        assert await second.submit(ToolCall("pay"), ok) == "ok"
        assert await second.submit(ToolCall("made-up-0"), ok) == "ok"
        assert await first.submit(ToolCall("pay"), ok) == "ok"
        assert {b.key for b in SharedBreakers(stores[1]).all()} == {OVERFLOW_BREAKER}
        assert registry.get_sample_value("agentgate_tasks_breaker_state", {"key": OVERFLOW_BREAKER}) == 2
        assert registry.get_sample_value("agentgate_tasks_breaker_state", {"key": "tool:pay"}) in (0, None)
    finally:
        await first.aclose()
        await second.aclose()
        for store in stores:
            store.close()


# --- the Gate path ----------------------------------------------------------------------------


def test_a_gates_config_names_every_policy_tool_so_none_reaches_the_overflow() -> None:
    """A Gate passes only policy tools, all of them in its scheduler config (named: never the
    overflow, however many); a policy cannot name a tool ``_other`` (not canonical), so a Gate
    never meets the overflow key's collision with a tool's."""
    with pytest.raises(PolicyError):
        parse_policy("version: 1\ntools:\n  _other: {idempotent: true}\n")
    names = ["search", "pay.charge", "a-b_c"]
    policy = parse_policy(
        "version: 1\ntools:\n" + "".join(f"  {json.dumps(n)}: {{idempotent: true}}\n" for n in names)
    )
    config = scheduler_config(policy)
    assert set(config.tools) == set(names)
    limits = SharedLimits(
        SchedulerConfig(tools={**{f"t{i}": ToolLimits() for i in range(PER_NAME_STATE + 8)}, **config.tools})
    )
    try:
        made = [limits.breaker_for(ToolCall(tool=f"t{i}")) for i in range(PER_NAME_STATE + 8)]
        assert OVERFLOW_BREAKER not in limits.breakers
        assert len({id(b) for b in made}) == PER_NAME_STATE + 8
        for name in names:
            assert limits.breaker_for(ToolCall(tool=name)).key == "tool:" + name
    finally:
        limits.close()


# --- is_key_text ------------------------------------------------------------------------------

_SEED = base64.b64encode(bytes(range(7, 39))).decode()
_D = base64.urlsafe_b64encode(bytes(range(40, 72))).decode().rstrip("=")


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("export AGENTGATE_LOG_KEY=ed25519:" + _SEED, id="export-then-ed25519-label"),
        pytest.param('"d": "' + _D + '",', id="a-jwk-private-member-line"),
        pytest.param("Private key: " + _SEED, id="a-two-word-label"),
    ],
)
def test_a_key_behind_a_longer_label_is_not_printed(value: str) -> None:
    with pytest.raises(KeyFileError) as raised:
        load_signing_key(value)
    assert _SEED not in str(raised.value) and _D not in str(raised.value)


def test_a_dotted_relative_path_that_names_no_file_is_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = "./keys/agentgate-production-signing-key-ed25519"
    with pytest.raises(KeyFileError) as raised:
        load_signing_key(path)
    assert path.removeprefix("./") in str(raised.value)  # shown (as a Path writes it), not hidden


def test_a_refused_flag_value_still_names_the_flag_and_says_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for value in ("seed: " + _SEED, "export KEY=" + _SEED):  # a dotted path is shown (below)
        with pytest.raises(KeyFileError) as raised:
            refuse_key_text(value, "--signing-key")
        assert "--signing-key names no file" in str(raised.value)
        assert _SEED not in str(raised.value)


@pytest.mark.parametrize(
    "wrap",
    ["{}", '"{}",', "export AGENTGATE_ISSUER={}", "issuer: '{}';", "({})."],
)
def test_a_did_key_behind_a_label_or_punctuation_is_not_taken_for_a_key(wrap: str) -> None:
    did = SigningKey.generate().did
    assert not is_key_text(wrap.format(did))
