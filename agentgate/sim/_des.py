"""Discrete-event replay of a trace against simulated engines, in simulated time.

A ``ReplayDispatcher`` (a router under test, wired by the caller) is asked where each request
goes when it arrives; it may send it to a backend, ask to be asked again later, or reject it. The
dispatcher learns what any router would learn in production and nothing more: its own dispatches,
first tokens and completions as they happen, and each engine's metrics (vLLM names) every
``scrape_interval`` seconds (on the grid ``k * scrape_interval``), except across a stretch where no
engine works until the next arrival: those metrics do not change, and it is scraped at the
stretch's first scrape time and its last one before the arrival only. Seeded and deterministic:
equal inputs give equal outcomes.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from agentgate._numbers import finite, is_number
from agentgate._shown import quoted, shown
from agentgate.errors import InputError
from agentgate.sim._engine import Engine, SimRequest, StepResult
from agentgate.sim.traces import TraceRequest


@dataclass(frozen=True, slots=True)
class Send:
    """Dispatch to this backend now."""

    backend: str


@dataclass(frozen=True, slots=True)
class Wait:
    """Ask again after this many seconds."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Reject:
    """Refuse the request (shed); it counts as a miss."""

    reason: str


Choice = Send | Wait | Reject


class ReplayDispatcher(Protocol):
    """What the replay needs from a router."""

    def route(self, request: TraceRequest, now: float) -> Choice: ...

    def first_token(self, backend: str, request: TraceRequest, now: float) -> None: ...

    def finished(self, backend: str, request: TraceRequest, now: float) -> None: ...

    def observe(self, backend: str, metrics: Mapping[str, float], now: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one request."""

    request: TraceRequest
    backend: str | None
    dispatched_at: float | None
    first_token_at: float | None
    finished_at: float | None
    cached_tokens: int
    rejected: str | None
    preemptions: int

    @property
    def ttft(self) -> float | None:
        """Arrival to first token (seconds), waiting in the router included."""
        return None if self.first_token_at is None else self.first_token_at - self.request.arrival

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        if self.finished_at is None or self.first_token_at is None or self.request.output_tokens < 2:
            return None
        return (self.finished_at - self.first_token_at) / (self.request.output_tokens - 1)

    @property
    def e2e(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.request.arrival


_STEP = 0

MIN_SCRAPE_INTERVAL_S = 0.001
"""The shortest ``scrape_interval`` ``replay`` takes (a millisecond, below any real scraper's and
below a step of the engine): each scrape is one turn of the replay's loop over every engine, so an
interval of 1e-20 s did not advance its clock at all past 0 (``now + 1e-20 == now``) and the
replay never returned (until review R83 only 0 and less were refused)."""


def _wait_s(seconds: object) -> float:
    """A ``Wait``'s seconds as a float: an integer too large for one is ``inf`` (it waits past any
    time), and what is no number is NaN, which no ``max_wait_s`` takes (waited too long)."""
    if not is_number(seconds):
        return math.nan
    try:
        return float(seconds)
    except OverflowError:
        return math.inf if seconds > 0 else -math.inf


def _index_past(index: int, now: float, interval: float) -> int:
    """``index``, or a later one whose scrape time is past ``now``: far from 0 (past ``2**53``
    intervals) consecutive indexes round to one time, and a scrape at one instant would follow
    itself for ever."""
    step = 1
    while index * interval <= now:
        index += step
        step *= 2
    return index


_COUNTS = (("prompt_tokens", None), ("output_tokens", 0), ("block_tokens", 1), ("priority", 0))
"""The integer fields of a ``TraceRequest`` and the least each takes, if any: a prompt under one
token, empty or negative, is the engine's to refuse, as a rejected outcome (``Engine.add``); an
output of 0 tokens is taken as one."""

MAX_TRACE_TOKENS = 2**53
"""The most tokens a ``TraceRequest``'s token counts (``prompt_tokens``, ``output_tokens``,
``block_tokens``) may give: the routers and the engine's latency model count tokens with floats,
which hold every integer up to ``2**53`` exactly, and an integer too large for a float was a bare
``OverflowError`` out of every router."""


def _check_request(position: int, r: object) -> None:
    """Raise ``InputError`` naming the request and the field for a ``TraceRequest`` that no
    replay could serve: an ``id`` that is not text, a token count, ``block_tokens`` or
    ``priority`` that is not an integer (a bool is none) of at least its ``_COUNTS`` least, a
    token count above ``MAX_TRACE_TOKENS`` (2**53), an
    ``arrival`` that is not a finite number of seconds (an integer too large for a float is none),
    ``hashes`` that are not a sequence of integers (a tuple, a list), a ``tenant`` that is not
    text, a ``session`` neither text nor ``None``, or an ``slo_ttft_s`` that is not a positive
    number of seconds (``inf``: no SLO; an integer too large for a float is none). Until review R87
    none was checked: a prompt of NaN tokens was queued and never prefilled (the replay never
    returned), one of 2.5 failed the engine's first step with a bare ``TypeError``, and an arrival
    of ``10**400`` was a bare ``OverflowError``; until review R87b ``hashes`` as a
    list, an ``slo_ttft_s`` of ``inf`` and a negative prompt (the engine's rejected outcome, as an
    empty one) were refused too, where replays had taken them before."""
    if not isinstance(r, TraceRequest):
        raise InputError(f"requests[{position}] must be a TraceRequest, not {shown(r)}")
    if not isinstance(r.id, str):
        raise InputError(f"requests[{position}]: id must be text, not {shown(r.id)}")
    where = f"request {quoted(r.id)}"
    if not finite(r.arrival):
        raise InputError(
            f"{where}: arrival must be a finite number of seconds, not {shown(r.arrival)} (it would never come)"
        )
    for name, least in _COUNTS:
        value = getattr(r, name)
        if isinstance(value, bool) or not isinstance(value, int) or (least is not None and value < least):
            more = "" if least is None else f" of {least} or more"
            raise InputError(f"{where}: {name} must be an integer{more}, not {shown(value)}")
        if name != "priority" and value > MAX_TRACE_TOKENS:
            # Until a regression review (round c) of R87 a prompt of 10**400 tokens reached the
            # router, whose first sum with a float was a bare OverflowError.
            raise InputError(
                f"{where}: {name} must be at most 2**53 ({MAX_TRACE_TOKENS:,}) tokens, not {shown(value)}"
            )
    if (
        not isinstance(r.hashes, Sequence)
        or isinstance(r.hashes, bytes | bytearray)
        or not all(isinstance(h, int) and not isinstance(h, bool) for h in r.hashes)
    ):
        raise InputError(
            f"{where}: hashes must be a sequence of integers (chain_hashes), not {shown(r.hashes)}"
        )
    if not isinstance(r.tenant, str):
        raise InputError(f"{where}: tenant must be text, not {shown(r.tenant)}")
    if r.session is not None and not isinstance(r.session, str):
        raise InputError(f"{where}: session must be text or None, not {shown(r.session)}")
    if not ((finite(r.slo_ttft_s) or r.slo_ttft_s == math.inf) and r.slo_ttft_s > 0):
        raise InputError(
            f"{where}: slo_ttft_s must be a positive number of seconds (inf: none), not {shown(r.slo_ttft_s)}"
        )


def replay(
    requests: Sequence[TraceRequest],
    engines: Mapping[str, Engine],
    dispatcher: ReplayDispatcher,
    *,
    scrape_interval: float = 0.5,
    max_wait_s: float = 600.0,
) -> list[Outcome]:
    """Replay ``requests`` (sorted by arrival) through ``dispatcher`` onto ``engines``.

    Every request ends with an outcome: served, or rejected by the dispatcher, or rejected after
    waiting longer than ``max_wait_s`` in the router, or rejected by the engine it was sent to
    (one that could never finish there: ``Engine.add``). Raises ``ValueError`` if the dispatcher
    names an unknown backend, and ``InputError``, replaying nothing, for a request with a field
    of the wrong type or range (``_check_request``: a prompt of NaN or 2.5 tokens), a ``scrape_interval`` that
    is not a number of seconds of at least ``MIN_SCRAPE_INTERVAL_S`` (``inf`` is, an integer too
    large for a float is not) or an arrival that is not a
    finite time (either would keep the replay from ever returning: it scraped at the same instant
    for ever, or waited for ever) or is so far that it is past any count of scrapes (1e308 s), a ``max_wait_s`` that is not a number of seconds, 0 or more
    (``inf``: a request waits as long as its router asks; until review R83 NaN rejected every
    request a router told to wait, as having waited too long),
    and for a router's ``Wait`` that asks for a request again past what scrapes count to, as for
    such an arrival (``Wait(inf)`` where ``max_wait_s`` is ``inf``: it would never be asked again;
    raised when the router answers, the replay stopping there), and for two requests with one ``id`` (requests and outcomes are kept by id: the replay failed
    with a ``KeyError`` midway, or gave the second's outcome for both), and for a request whose
    ``hashes`` are of other blocks than an engine's ``block_tokens`` (until review R66 an engine
    read them at its own size: a Mooncake trace's 512-token shared blocks were cached as 16 tokens
    each on a default engine), and for ``requests`` that are not a sequence (a generator) or
    ``engines`` that are not a mapping of names to ``Engine`` (until review R93 a bare
    ``TypeError`` or ``AttributeError``).
    """
    if not (
        (finite(scrape_interval) or scrape_interval == math.inf) and scrape_interval >= MIN_SCRAPE_INTERVAL_S
    ):
        # An integer too large for a float (10**400) is none: until review R87b the first count
        # of scrapes divided by it, a bare OverflowError. ``inf`` scrapes once, at 0.
        raise InputError(
            f"scrape_interval must be a number of seconds of at least {MIN_SCRAPE_INTERVAL_S:g} "
            f"(inf: once), not {quoted(scrape_interval, 40)}"
        )
    if not (is_number(max_wait_s) and max_wait_s >= 0):
        raise InputError(
            f"max_wait_s must be a number of seconds, 0 or more (inf: no limit), not {quoted(max_wait_s, 40)}"
        )
    if not isinstance(requests, Sequence):
        # A generator was used up by the checks below, then had no len() (until review R93).
        raise InputError(
            f"requests must be a sequence of TraceRequest (a list, a tuple), not {shown(requests)}"
        )
    if not isinstance(engines, Mapping):
        raise InputError(f"engines must be a mapping of backend names to Engine, not {shown(engines)}")
    for name, engine in engines.items():
        if not isinstance(engine, Engine):
            # Until review R93 a LatencyModel given for its Engine was a bare AttributeError midway.
            raise InputError(
                f"engines[{quoted(name, 60)}] must be an Engine (Engine(model, config) runs a "
                f"LatencyModel), not {shown(engine)}"
            )
    ids: set[str] = set()
    for position, r in enumerate(requests):
        _check_request(position, r)
        if not math.isfinite(4.0 * (r.arrival / scrape_interval)):
            # Scrapes are counted on a grid of ``scrape_interval`` (``_index_past`` may step to
            # twice the count): one this far (1e308 s at 0.5) is past any count of them (until a
            # regression review of R85 a bare OverflowError).
            raise InputError(
                f"request {r.id!r}: an arrival at {r.arrival!r} s is past what scrapes every "
                f"{scrape_interval!r} s count to"
            )
        if r.id in ids:
            raise InputError(f"request {r.id!r}: two requests of the trace have this id")
        ids.add(r.id)
        if r.hashes:
            for name, engine in engines.items():
                if engine.config.block_tokens != r.block_tokens:
                    raise InputError(
                        f"request {r.id!r}: its hashes are of {r.block_tokens}-token blocks, but backend "
                        f"{name!r} caches blocks of {engine.config.block_tokens} tokens "
                        f"(EngineConfig(block_tokens={r.block_tokens}) reads them as they are cut)"
                    )
    routes: list[tuple[float, int, TraceRequest]] = [(r.arrival, i, r) for i, r in enumerate(requests)]
    heapq.heapify(routes)
    seq = len(requests)
    events: list[tuple[float, int, int, str]] = []
    pending: dict[str, StepResult] = {}
    busy: dict[str, bool] = dict.fromkeys(engines, False)
    live: dict[str, tuple[TraceRequest, SimRequest, str, float]] = {}
    outcomes: dict[str, Outcome] = {}
    now = 0.0
    # The index of the next scrape, at ``scrapes * scrape_interval``: a grid, not a running sum,
    # so that a jump across an idle stretch still lands on a scrape time.
    scrapes = 0
    next_scrape = 0.0

    def start_step(name: str, t: float) -> None:
        nonlocal seq
        engine = engines[name]
        if not engine.has_work():
            busy[name] = False
            return
        horizon = min(routes[0][0] if routes else math.inf, next_scrape)
        result = engine.decode_run(t, horizon) if horizon > t else None
        if result is None:
            result = engine.step(t)
        pending[name] = result
        busy[name] = True
        seq += 1
        heapq.heappush(events, (t + result.duration, _STEP, seq, name))

    def finish_step(name: str, t: float) -> None:
        result = pending.pop(name)
        for sim in result.first_token:
            trace_req = live[sim.id][0]
            dispatcher.first_token(name, trace_req, t)
        for sim in result.finished:
            trace_req, _, backend, dispatched = live.pop(sim.id)
            dispatcher.finished(backend, trace_req, t)
            outcomes[sim.id] = Outcome(
                trace_req,
                backend,
                dispatched,
                sim.first_token_at,
                t,
                sim.cached_tokens,
                None,
                sim.preemptions,
            )
        start_step(name, t)

    while routes or events:
        t_route = routes[0][0] if routes else math.inf
        t_event = events[0][0] if events else math.inf
        if next_scrape <= min(t_route, t_event):
            now = next_scrape
            for name, engine in engines.items():
                dispatcher.observe(name, engine.metrics(), now)
            scrapes += 1
            if not events and math.isfinite(t_route):
                # No engine works until the next arrival: each scrape before it would read the
                # metrics this one read. Skip to the last one due before it (until review R85
                # every one was made, and an arrival far away kept the replay from returning).
                last = math.floor(t_route / scrape_interval)
                if last * scrape_interval > t_route:  # the division rounded up
                    last -= 1
                scrapes = max(scrapes, last)
            scrapes = _index_past(scrapes, now, scrape_interval)
            next_scrape = scrapes * scrape_interval
            continue
        if t_event <= t_route:
            now, _, _, name = heapq.heappop(events)
            finish_step(name, now)
            continue
        now, _, req = heapq.heappop(routes)
        choice = dispatcher.route(req, now)
        if isinstance(choice, Send):
            if choice.backend not in engines:
                raise ValueError(f"dispatcher chose unknown backend {choice.backend!r}")
            sim = SimRequest(req.id, req.prompt_tokens, req.output_tokens, req.hashes, arrival=req.arrival)
            try:
                engines[choice.backend].add(sim)
            except InputError as exc:
                # The engine refuses it at once, as vLLM does past max_model_len: rejected.
                dispatcher.finished(choice.backend, req, now)
                outcomes[req.id] = Outcome(req, choice.backend, now, None, None, 0, str(exc), 0)
                continue
            live[req.id] = (req, sim, choice.backend, now)
            if not busy[choice.backend]:
                start_step(choice.backend, now)
        elif isinstance(choice, Wait) and now + (wait := _wait_s(choice.seconds)) - req.arrival <= max_wait_s:
            again = now + max(wait, 1e-3)
            if not math.isfinite(4.0 * (again / scrape_interval)):
                # As for an arrival: a time past any count of scrapes (until review R90 a bare
                # OverflowError at 1e308 s, and Wait(inf) scraped one interval at a time for ever).
                raise InputError(
                    f"request {req.id!r}: the router's Wait({quoted(choice.seconds, 40)}) asks for it "
                    f"again at {again!r} s, past what scrapes every {scrape_interval!r} s count to"
                )
            seq += 1
            heapq.heappush(routes, (again, seq, req))
        else:
            reason = choice.reason if isinstance(choice, Reject) else "waited too long"
            outcomes[req.id] = Outcome(req, None, None, None, None, 0, reason, 0)
    return [outcomes[r.id] for r in requests]
