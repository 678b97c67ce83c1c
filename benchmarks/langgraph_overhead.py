"""What agentgate's LangGraph middleware costs: the same scripted agent run with and without it.

    .venv/bin/python benchmarks/langgraph_overhead.py [--quick] [--json]

The run: a supervisor makes 5 sequential tool calls and hands work to 3 sub-agents (each on a
fresh attenuated grant when gated), each of which makes 5 sequential tool calls: 20 tool calls,
3 delegations and 27 model calls (a scripted chat model: no network, no GPU). Seven variants run
interleaved in the same process, so they see the same machine (each round starts at another
variant; the heap is collected before each run, outside the timing):

- ``plain``: create_agent without agentgate (sub-agents invoked directly);
- ``passthrough``: as ``plain`` with a middleware whose hooks only call the handler, and the
  identity's context schema: what LangChain charges any gating middleware (the floor under
  ``tools`` and ``gated``);
- ``tools``: agentgate on tool calls only (``gate_models=False``), durable store;
- ``gated``: agentgate on tool and model calls, durable store (SQLite ``synchronous=FULL``,
  every decision and outcome fsynced before the call goes on);
- ``relaxed``: as ``gated`` with ``synchronous=NORMAL`` (what AGENTGATE_SQLITE_SYNCHRONOUS=NORMAL
  selects: a power loss may lose the last commits, a process crash does not);
- ``floor`` and ``floor_relaxed``: as ``passthrough``, with a middleware that only writes one
  hashed entry per call into SQLite (one autocommit ``INSERT``, ``synchronous=FULL`` and
  ``NORMAL``) before the call runs (``RecordOnly``): no policy, authority, budget or outcome. What
  any middleware that records each call in an embedded database before it runs costs at least
  here; a goal below it cannot be met by such a design on this machine.

Figures: median whole-run time of each, the ratios gated/plain and relaxed/plain (goals <= 1.25
and <= 1.10), passthrough/plain and the floors' ratios, the microseconds added per tool call ((tools - plain) / 20,
delegations included) and per model call ((gated - tools) / 27), ``Gate.authorize`` timed inside
relaxed runs against the same decisions alone (``in_run_vs_alone``: same work, more time between
LangGraph's steps; ``alone_cold``: the same decisions alone, each after a walk over a large
heap that leaves the CPU caches cold, as LangGraph's work between two calls does), the
middleware's own thread CPU per call inside relaxed runs, its handler excluded
(``middleware_in_runs``), and the parts of one call timed alone (``breakdown``). On a shared, loaded machine wall time is
dominated by waiting (fsync, CPU run queues), so the process's CPU time (all threads) is also
reported: a figure that load inflates much less.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's agentgate, not an installed one

import orjson
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool, StructuredTool
from langsmith import traceable

from agentgate.authority import Invocation
from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import (
    GateMiddleware,
    ScriptedChatModel,
    create_gated_agent,
    delegation_tool,
)
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store._sqlite import DURABLE_WAL_PAGES, _SQLiteTransaction

SUBAGENTS = ("alpha", "beta", "gamma")
CALLS_PER_AGENT = 5
TOOL_CALLS = CALLS_PER_AGENT * (1 + len(SUBAGENTS))
MODEL_CALLS = (CALLS_PER_AGENT + len(SUBAGENTS) + 1) + len(SUBAGENTS) * (CALLS_PER_AGENT + 1)
FLOORS = {"floor": "FULL", "floor_relaxed": "NORMAL"}
"""The ``RecordOnly`` variants and their SQLite ``synchronous`` settings: the floors under
``gated`` (durable) and ``relaxed``."""

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
{subagents}
tools:
  lookup:
    args: {{key: {{type: string, required: true}}}}
    idempotent: true
    concurrency: 8
models:
  scripted: {{cost_per_mtok: {{input: 100000, output: 200000}}}}
roles:
  boss:
    kind: agent
    capabilities: [{{resource: tool:lookup}}, {{resource: model:scripted}}]
    budget: {{limit: 1000000000000, unit: usd_micros}}
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      capabilities: [{{resource: tool:lookup}}, {{resource: model:scripted}}]
  worker:
    kind: agent
    capabilities: [{{resource: tool:lookup}}, {{resource: model:scripted}}]
    ttl_s: 600
"""


def _script(prefix: str, extra: list[dict[str, Any]] | None = None) -> list[AIMessage]:
    turns = [
        AIMessage(
            content="",
            tool_calls=[{"name": "lookup", "args": {"key": f"{prefix}{i}"}, "id": f"{prefix}-{i}"}],
        )
        for i in range(CALLS_PER_AGENT)
    ]
    turns += [AIMessage(content="", tool_calls=[call]) for call in extra or []]
    return turns


LOOKUPS = [0]
"""How many times a lookup tool has run: every timed run must run all of its tool calls (a
cached result served instead of running the tool would flatter the gated variants; it did, until
the idempotency scope was fixed: docs/langgraph.md)."""


def _lookup() -> BaseTool:
    def lookup(key: str) -> str:
        LOOKUPS[0] += 1
        return f"value of {key}"

    return StructuredTool.from_function(func=lookup, name="lookup", description="look a key up")


def _delegations() -> list[dict[str, Any]]:
    return [{"name": f"ask_{n}", "args": {"task": f"task for {n}"}, "id": f"ask-{n}"} for n in SUBAGENTS]


class PassThrough(AgentMiddleware[Any, Any, Any]):
    """A middleware that decides nothing: its hooks only call the handler."""

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request)


class RecordOnly(PassThrough):
    """The least a middleware that records every call before it runs can do: one entry (a few
    fields as sorted JSON, and its SHA-256 leaf hash, as an audit log keeps it) written by one
    autocommit ``INSERT`` into a SQLite file in WAL mode at ``synchronous`` (with SQLiteStore's
    checkpoint threshold when it syncs), then the handler. No policy, no authority, no budget, no outcome, no library code of
    agentgate: a floor under any gate that keeps its record in an embedded database, on this
    machine. Shared by the agents of a run, as the gate is."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        if synchronous == "FULL":  # as SQLiteStore checkpoints a store that syncs every commit
            self.db.execute(f"PRAGMA wal_autocheckpoint={DURABLE_WAL_PAGES}")
        self.db.execute("CREATE TABLE IF NOT EXISTS entries (idx INTEGER PRIMARY KEY, entry BLOB, leaf BLOB)")
        self.lock = threading.Lock()  # tool calls run in LangGraph's worker threads

    def _record(self, resource: str) -> None:
        entry = orjson.dumps({"resource": resource, "time": time.time_ns()}, option=orjson.OPT_SORT_KEYS)
        with self.lock:
            self.db.execute(
                "INSERT INTO entries (entry, leaf) VALUES (?, ?)",
                (entry, hashlib.sha256(b"\0" + entry).digest()),
            )

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        self._record("tool:" + request.tool_call["name"])
        return handler(request)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        self._record("model:scripted")
        return handler(request)

    def rows(self) -> int:
        """How many entries were written."""
        with self.lock:
            return int(self.db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    def close(self) -> None:
        self.db.close()


def build_plain(middleware: AgentMiddleware[Any, Any, Any] | None = None) -> Callable[[], Any]:
    """The run without agentgate: with ``middleware`` (and the identity's context schema) on
    every agent when given."""
    extra: dict[str, Any] = (
        {"middleware": [middleware], "context_schema": AgentIdentity} if middleware is not None else {}
    )
    tools: list[BaseTool] = [_lookup()]
    for name in SUBAGENTS:
        sub = create_agent(ScriptedChatModel(turns=_script(name)), [_lookup()], name=name, **extra)

        def ask(task: str, sub: Any = sub) -> str:
            return str(sub.invoke({"messages": [{"role": "user", "content": task}]})["messages"][-1].content)

        tools.append(StructuredTool.from_function(func=ask, name=f"ask_{name}", description=f"ask {name}"))
    boss = create_agent(ScriptedChatModel(turns=_script("boss", _delegations())), tools, name="boss", **extra)
    return lambda: boss.invoke({"messages": [{"role": "user", "content": "go"}]})


def _gate(path: Path, synchronous: str) -> tuple[Gate, dict[str, SigningKey], AgentIdentity]:
    """A gate over the benchmark's policy in a fresh SQLite file, and the supervisor's identity."""
    keys = {n: SigningKey.generate() for n in ("root", "boss", *SUBAGENTS)}
    subagents = "\n".join(f'  {n}: {{kind: agent, did: "{keys[n].did}", roles: [worker]}}' for n in SUBAGENTS)
    text = POLICY.format(root=keys["root"].did, boss=keys["boss"].did, subagents=subagents)
    gate = Gate(parse_policy(text, source="bench.yaml"), SQLiteStore(path, synchronous=synchronous))
    return gate, keys, gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")


def build_gated(workdir: Path, synchronous: str, gate_models: bool) -> tuple[Callable[[], Any], Gate]:
    gate, keys, boss_identity = _gate(workdir / f"{synchronous}-{gate_models}.db", synchronous)
    tools: list[BaseTool] = [_lookup()]
    for name in SUBAGENTS:
        sub = create_gated_agent(
            gate,
            name=name,
            model=ScriptedChatModel(turns=_script(name), model_name="scripted"),
            tools=[_lookup()],
            gate_models=gate_models,
        )
        tools.append(
            delegation_tool(
                gate,
                name=name,
                agent=sub,
                key=keys[name],
                capabilities=["tool:lookup", "model:scripted"],
                ttl=timedelta(minutes=5),
            )
        )
    boss = create_gated_agent(
        gate,
        name="boss",
        model=ScriptedChatModel(turns=_script("boss", _delegations()), model_name="scripted"),
        tools=tools,
        gate_models=gate_models,
    )
    return lambda: boss.invoke({"messages": [{"role": "user", "content": "go"}]}, context=boss_identity), gate


def commit_cost(workdir: Path, synchronous: str, n: int = 600) -> tuple[float, float]:
    """Median seconds of one small INSERT + COMMIT at this durability setting, on the same disk:
    while the fresh WAL file grows (its first 150 commits) and once it has started over (its last
    300; a durable store checkpoints every ``DURABLE_WAL_PAGES`` pages, docs/operations.md)."""
    store = SQLiteStore(workdir / f"floor-{synchronous}.db", synchronous=synchronous)
    store.ensure_schema("floor", {"sqlite": "CREATE TABLE IF NOT EXISTS floor (x BLOB)", "postgresql": ""})
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        with store.transaction() as tx:
            tx.execute("INSERT INTO floor (x) VALUES (?)", (b"x" * 200,))
        samples.append(time.perf_counter() - start)
    store.close()
    return statistics.median(samples[:150]), statistics.median(samples[-300:])


def _median_us(step: Callable[[int], object], n: int) -> float:
    samples = []
    for i in range(n):
        start = time.perf_counter()
        step(i)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


TOOL, MODEL = Call.tool("lookup", {"key": "k"}), Call.model("scripted", {"max_tokens": 1024})
"""The tool and model calls decided alone (outside agent runs), as the run's calls are."""


def _decide_alone(
    gate: Gate,
    identity: AgentIdentity,
    call_id: str,
    times: list[float] | None = None,
    before: Callable[[], object] | None = None,
) -> None:
    """One tool call and one model call as an agent run makes them, each authorized and run at
    once (a tight loop's step); each ``authorize``'s seconds appended to ``times`` when given;
    ``before`` called (untimed) before each."""
    if before is not None:
        before()
    start = time.perf_counter()
    auth = gate.authorize(identity, TOOL, agent="boss", call_id=call_id)
    if times is not None:
        times.append(time.perf_counter() - start)
    gate.run(auth, lambda: "v", call_id=call_id, run_id="alone")
    if before is not None:
        before()
    start = time.perf_counter()
    auth = gate.authorize(identity, MODEL, agent="boss", tokens=(100, 1024))
    if times is not None:
        times.append(time.perf_counter() - start)
    gate.run(auth, lambda: "x", spent=lambda _: (100, 20))


def breakdown(workdir: Path, n: int = 300) -> dict[str, float]:
    """Median microseconds of the parts of one gated call, each timed alone in this process.

    A decision is: decide with the agent's key in hand (``decide_held``: chain from the cache,
    holder, capability and revocation checked), record it (the outcome carried from the previous
    call, budget reserved, audit entry) in one transaction, and commit. For comparison, what a
    caller in another process pays instead of ``decide_held`` (the gateway's path): sign an
    invocation, then decide it (signature verified, nonce recorded). Timed alone, in a tight loop, these run faster than inside an agent
    run (warm caches, no other threads): the figures say where the time goes, not its total.
    """
    gate, _keys, identity = _gate(workdir / "parts.db", "NORMAL")
    parts: dict[str, float] = {}
    try:
        with gate.store.transaction() as tx, gate.grants.within(tx):
            parts["decide_held"] = _median_us(
                lambda _: gate.authority.decide_held(identity.key, identity.chain, TOOL), n
            )
        parts["remote_sign"] = _median_us(lambda _: Invocation.sign(identity.key, identity.chain, TOOL), n)
        signed = [Invocation.sign(identity.key, identity.chain, TOOL) for _ in range(n)]
        with gate.store.transaction() as tx, gate.grants.within(tx):
            parts["remote_decide"] = _median_us(lambda i: gate.authority.decide(signed[i]), n)

        def empty_transaction(_: int) -> None:
            with gate.store.transaction():
                pass

        parts["begin_commit_relaxed"] = _median_us(empty_transaction, n)

        def tool_call(i: int) -> None:
            auth = gate.authorize(identity, TOOL, agent="boss", call_id=f"t{i}")
            gate.run(auth, lambda: "v", call_id=f"t{i}", run_id="parts")

        def model_call(_: int) -> None:
            auth = gate.authorize(identity, MODEL, agent="boss", tokens=(100, 1024))
            gate.run(auth, lambda: "x", spent=lambda _: (100, 20))

        parts["tool_call_relaxed"] = _median_us(tool_call, n)
        parts["model_call_relaxed"] = _median_us(model_call, n)
    finally:
        gate.close()

    # What LangChain's create_agent adds around every wrap_* hook of any middleware: it wraps the
    # hook in LangSmith's @traceable, which does its bookkeeping even with tracing off.
    def hook(request: object, handler: Callable[[object], object]) -> object:
        return handler(request)

    traced = traceable(name="bench.wrap_tool_call")(hook)
    parts["langchain_hook_wrapper"] = _median_us(lambda i: traced(i, str), n) - _median_us(
        lambda i: hook(i, str), n
    )
    return {k: round(v, 1) for k, v in parts.items()}


def in_run_vs_alone(workdir: Path, rounds: int) -> dict[str, float]:
    """``Gate.authorize`` inside relaxed agent runs against the same decisions alone, in one
    process, a run and a tight loop of as many decisions alternating (median microseconds).

    Kept apart from the timed runs above (the timing wrapper is only installed here). The tight
    loop decides the benchmark's tool and model calls as ``breakdown`` does.
    """
    inside: list[float] = []
    original = Gate.authorize

    def timed(self: Gate, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            inside.append(time.perf_counter() - start)

    run, gate = build_gated(workdir, "NORMAL", True)
    alone_gate, _keys, identity = _gate(workdir / "alone.db", "NORMAL")
    alone: list[float] = []
    try:
        run()  # warm-up
        for r in range(rounds):
            with mock.patch.object(Gate, "authorize", timed):
                run()
            for i in range((TOOL_CALLS + MODEL_CALLS) // 2):
                _decide_alone(alone_gate, identity, f"t{r}-{i}", alone)
    finally:
        gate.close()
        alone_gate.close()
    return {
        "authorize_in_run_p50_us": round(statistics.median(inside) * 1e6, 1),
        "authorize_alone_p50_us": round(statistics.median(alone) * 1e6, 1),
        "in_run_over_alone": round(statistics.median(inside) / statistics.median(alone), 3),
    }


def alone_cold(workdir: Path, n: int) -> float:
    """Median microseconds of ``Gate.authorize`` for the tight loop's decisions (``_decide_alone``),
    each after a walk over 200,000 small dicts (tens of MB, more than the CPU caches hold):
    the same work as the tight loop, on caches as cold as LangGraph's work between two of an
    agent's calls leaves them. Apart from ``in_run_vs_alone`` (its heap is not alive there)."""
    gate, _keys, identity = _gate(workdir / "cold.db", "NORMAL")
    heap: list[dict[str, Any]] = [{"n": i, "s": str(i)} for i in range(200_000)]
    cold: list[float] = []
    try:
        for i in range(5):  # warm-up
            _decide_alone(gate, identity, f"w{i}")
        for i in range(n):
            _decide_alone(gate, identity, f"c{i}", cold, before=lambda: sum(item["n"] for item in heap))
    finally:
        gate.close()
    return statistics.median(cold) * 1e6


def middleware_in_runs(workdir: Path, rounds: int) -> dict[str, float]:
    """The middleware's own CPU per call inside relaxed agent runs: the thread CPU time
    (``time.thread_time``) of each ``GateMiddleware.wrap_tool_call`` / ``wrap_model_call``, the
    handler it calls (the tool, the model, a sub-agent's whole run) excluded: medians in
    microseconds, and milliseconds per run in all. Thread CPU, not wall time: it excludes what
    other threads and processes take from this one on a loaded machine (the gate waits for
    nothing inside a relaxed run). Kept apart from the timed runs (the timer is only installed
    here, before the agents are built: ``create_agent`` keeps the hooks it was given)."""
    samples: dict[str, list[float]] = {"tool": [], "model": []}
    excluded = threading.local()

    def timed(kind: str, hook: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, request: Any, handler: Callable[[Any], Any]) -> Any:
            def inner(req: Any) -> Any:
                start = time.thread_time()
                try:
                    return handler(req)
                finally:
                    excluded.seconds += time.thread_time() - start

            outer = getattr(excluded, "seconds", 0.0)  # a hook nested in another's handler
            excluded.seconds = 0.0
            start = time.thread_time()
            try:
                return hook(self, request, inner)
            finally:
                samples[kind].append(time.thread_time() - start - excluded.seconds)
                excluded.seconds = outer

        return wrapper

    with (
        mock.patch.object(GateMiddleware, "wrap_tool_call", timed("tool", GateMiddleware.wrap_tool_call)),
        mock.patch.object(GateMiddleware, "wrap_model_call", timed("model", GateMiddleware.wrap_model_call)),
    ):
        run, gate = build_gated(workdir, "NORMAL", True)
        try:
            run()  # warm-up
            for values in samples.values():
                values.clear()
            for _ in range(rounds):
                gc.collect()
                run()
        finally:
            gate.close()
    both = samples["tool"] + samples["model"]
    return {
        "middleware_cpu_p50_us": round(statistics.median(both) * 1e6, 1),
        "middleware_cpu_tool_p50_us": round(statistics.median(samples["tool"]) * 1e6, 1),
        "middleware_cpu_model_p50_us": round(statistics.median(samples["model"]) * 1e6, 1),
        "middleware_cpu_ms_per_run": round(sum(both) / rounds * 1e3, 2),
    }


def statements_per_decision(workdir: Path) -> dict[str, float]:
    """SQL statements (``Transaction.execute``, savepoints included) and store transactions
    (each one ``BEGIN`` and ``COMMIT``) per decision in one relaxed agent run, counted: a figure
    the machine's load cannot skew. Counted apart from the timed runs (the counters are only
    installed here)."""
    counts = {"statements": 0, "transactions": 0, "decisions": 0}
    execute, transaction, authorize = _SQLiteTransaction.execute, SQLiteStore.transaction, Gate.authorize

    def counted_execute(self: _SQLiteTransaction, sql: str, params: Any = ()) -> Any:
        counts["statements"] += 1
        return execute(self, sql, params)

    def counted_transaction(self: SQLiteStore, *, immediate: bool = True) -> Any:
        counts["transactions"] += 1
        return transaction(self, immediate=immediate)

    def counted_authorize(self: Gate, *args: Any, **kwargs: Any) -> Any:
        counts["decisions"] += 1
        return authorize(self, *args, **kwargs)

    run, gate = build_gated(workdir, "NORMAL", True)
    try:
        run()  # warm-up: sub-agent budget rows made, caches filled
        gate.flush()
        with (
            mock.patch.object(_SQLiteTransaction, "execute", counted_execute),
            mock.patch.object(SQLiteStore, "transaction", counted_transaction),
            mock.patch.object(Gate, "authorize", counted_authorize),
        ):
            run()
            gate.flush()
    finally:
        gate.close()
    decisions = max(1, counts["decisions"])
    return {
        "sql_statements_per_decision": round(counts["statements"] / decisions, 2),
        "transactions_per_decision": round(counts["transactions"] / decisions, 2),
    }


class _TimedCommits:
    """``SQLiteStore.transaction`` with the commit timed: each transaction's ``COMMIT`` (and the WAL
    checkpoint SQLite runs inside it past ``DURABLE_WAL_PAGES``, told by the database file's
    modification time) is recorded per store file."""

    def __init__(self) -> None:
        self.original = SQLiteStore.transaction
        self.commits: dict[str, list[float]] = {}
        self.checkpoints: dict[str, list[float]] = {}

    def __call__(self, store: SQLiteStore, *, immediate: bool = True) -> Any:
        timer = self

        class Timed:
            def __enter__(self) -> Any:
                self.inner = timer.original(store, immediate=immediate)
                return self.inner.__enter__()

            def __exit__(self, *exc: Any) -> Any:
                if exc[0] is not None:
                    return self.inner.__exit__(*exc)
                before = store.path.stat().st_mtime_ns
                start = time.perf_counter()
                self.inner.__exit__(None, None, None)
                took = time.perf_counter() - start
                checkpointed = store.path.stat().st_mtime_ns != before
                (timer.checkpoints if checkpointed else timer.commits).setdefault(store.path.name, []).append(
                    took
                )
                return False

        return Timed()


def durable_commits(workdir: Path, rounds: int) -> dict[str, float]:
    """The durable path inside agent runs: the commit of each transaction in durable runs against
    the same tool and model decisions committed alone (a tight loop on another durable store),
    alternating in one process (medians of the commits that ran no WAL checkpoint, microseconds);
    the transactions per decision in those runs (counted: delegations and the background outcome
    commits included); the commits per run that also ran a WAL checkpoint (counted) and the
    milliseconds per run they took in all. Kept apart from the timed runs (the timer is only
    installed here)."""
    decisions = [0]
    authorize = Gate.authorize

    def counted(self: Gate, *args: Any, **kwargs: Any) -> Any:
        decisions[0] += 1
        return authorize(self, *args, **kwargs)

    run, gate = build_gated(workdir, "FULL", True)
    alone_gate, _keys, identity = _gate(workdir / "alone-durable.db", "FULL")
    timer = _TimedCommits()

    def timed(store: SQLiteStore, *, immediate: bool = True) -> Any:
        return timer(store, immediate=immediate)

    try:
        run()  # warm-up
        with mock.patch.object(SQLiteStore, "transaction", timed):
            for r in range(rounds):
                with mock.patch.object(Gate, "authorize", counted):
                    run()
                for i in range((TOOL_CALLS + MODEL_CALLS) // 2):
                    _decide_alone(alone_gate, identity, f"d{r}-{i}")
    finally:
        gate.close()
        alone_gate.close()
    name = gate.store.path.name if isinstance(gate.store, SQLiteStore) else ""
    in_run, alone = timer.commits.get(name, [0.0]), timer.commits.get("alone-durable.db", [0.0])
    checkpoints = timer.checkpoints.get(name, [])
    return {
        "durable_commit_in_run_p50_us": round(statistics.median(in_run) * 1e6, 1),
        "durable_commit_alone_p50_us": round(statistics.median(alone) * 1e6, 1),
        "durable_transactions_per_decision": round(
            (len(in_run) + len(checkpoints)) / max(1, decisions[0]), 3
        ),
        "durable_checkpoints_per_run": round(len(checkpoints) / rounds, 2),
        "durable_checkpoint_ms_per_run": round(sum(checkpoints) / rounds * 1e3, 2),
    }


def _check(result: Any, label: str) -> None:
    statuses = [m.status for m in result["messages"] if m.type == "tool"]
    if statuses != ["success"] * (CALLS_PER_AGENT + len(SUBAGENTS)):
        raise SystemExit(f"benchmark run went wrong ({label}): {statuses}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few repetitions only")
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    args = parser.parse_args()
    repetitions = 5 if args.quick else 25
    with tempfile.TemporaryDirectory(prefix="agentgate-bench-") as tmp:
        workdir = Path(tmp)
        variants: dict[str, Callable[[], Any]] = {
            "plain": build_plain(),
            "passthrough": build_plain(PassThrough()),
        }
        floors = {label: RecordOnly(workdir / f"{label}.db", sync) for label, sync in FLOORS.items()}
        variants.update({label: build_plain(floor) for label, floor in floors.items()})
        gates: list[Gate] = []
        for label, synchronous, models in (
            ("tools", "FULL", False),
            ("gated", "FULL", True),
            ("relaxed", "NORMAL", True),
        ):
            run, gate = build_gated(workdir, synchronous, models)
            variants[label] = run
            gates.append(gate)
        try:
            for label, run in variants.items():  # warm-up, and a correctness check of each variant
                _check(run(), label)
            times: dict[str, list[float]] = {label: [] for label in variants}
            cpu: dict[str, list[float]] = {label: [] for label in variants}
            labels = list(variants)
            for round_ in range(repetitions):
                # Each round starts at another variant, so no variant always runs right after the
                # same one (whose garbage or cache state it would inherit); the heap is collected
                # before every run, outside the timing.
                shift = round_ % len(labels)
                for label in labels[shift:] + labels[:shift]:
                    run = variants[label]
                    gc.collect()
                    ran = LOOKUPS[0]
                    start, start_cpu = time.perf_counter(), time.process_time()
                    run()
                    times[label].append(time.perf_counter() - start)
                    cpu[label].append(time.process_time() - start_cpu)
                    if LOOKUPS[0] - ran != TOOL_CALLS:
                        raise SystemExit(
                            f"a {label} run ran {LOOKUPS[0] - ran} of its {TOOL_CALLS} tool calls"
                        )
        finally:
            for gate in gates:
                gate.close()
            # The calls each floor recorded per run (tool calls, delegations' calls of their tool,
            # model calls), from its table: warm-up included.
            recorded = floors["floor_relaxed"].rows() / (repetitions + 1)
            for floor in floors.values():
                floor.close()
    median = {label: statistics.median(t) for label, t in times.items()}
    median_cpu = {label: statistics.median(t) for label, t in cpu.items()}
    cpu_per_call_us = (median_cpu["gated"] - median_cpu["plain"]) / (TOOL_CALLS + MODEL_CALLS) * 1e6
    with tempfile.TemporaryDirectory(prefix="agentgate-bench-") as tmp:
        workdir = Path(tmp)
        commit_growing, commit_full = commit_cost(workdir, "FULL")
        commit_normal = commit_cost(workdir, "NORMAL")[1]
        parts = breakdown(workdir)
        in_run = in_run_vs_alone(workdir, 4 if args.quick else 12)
        in_run["authorize_alone_cold_p50_us"] = round(alone_cold(workdir, 50 if args.quick else 150), 1)
        in_run["in_run_over_alone_cold"] = round(
            in_run["authorize_in_run_p50_us"] / in_run["authorize_alone_cold_p50_us"], 3
        )
        middleware = middleware_in_runs(workdir, 5 if args.quick else 15)
        counted = statements_per_decision(workdir)
        durable = durable_commits(workdir, 4 if args.quick else 12)
    ratio_passthrough = median["passthrough"] / median["plain"]
    ratio_durable = median["gated"] / median["plain"]
    ratio_relaxed = median["relaxed"] / median["plain"]
    floor_ratio = {label: median[label] / median["plain"] for label in FLOORS}
    floor_added_us = (median["floor_relaxed"] - median["passthrough"]) / recorded * 1e6
    per_tool_us = (median["tools"] - median["plain"]) / TOOL_CALLS * 1e6
    per_model_us = (median["gated"] - median["tools"]) / MODEL_CALLS * 1e6
    print(
        f"LangGraph run: {TOOL_CALLS} tool calls, {len(SUBAGENTS)} sub-agents, {MODEL_CALLS} model calls; "
        f"{repetitions} runs each, interleaved"
    )
    print(f"{'variant':<14}{'median ms':>12}{'p90 ms':>10}{'x plain':>10}{'cpu ms':>10}{'cpu x':>8}")
    for label, t in times.items():
        p90 = sorted(t)[int(0.9 * (len(t) - 1))]
        print(
            f"{label:<14}{median[label] * 1e3:>12.2f}{p90 * 1e3:>10.2f}{median[label] / median['plain']:>10.3f}"
            f"{median_cpu[label] * 1e3:>10.2f}{median_cpu[label] / median_cpu['plain']:>8.3f}"
        )
    print(
        f"the floor of a middleware that records each call before it runs (one INSERT, nothing else): "
        f"durable {floor_ratio['floor']:.3f}x plain (goal for gated <= 1.25), relaxed "
        f"{floor_ratio['floor_relaxed']:.3f}x (goal for relaxed <= 1.10); relaxed, "
        f"{floor_added_us:.0f} us per recorded call over passthrough ({recorded:.0f} calls recorded per run)"
    )
    print(f"added per tool call (durable, incl. delegation): {per_tool_us:8.0f} us")
    print(f"added per model call (durable):                  {per_model_us:8.0f} us")
    print(f"CPU added per call (all threads, durable):       {cpu_per_call_us:8.0f} us")
    print(
        f"floor on this disk: one durable commit {commit_full * 1e6:.0f} us ({commit_growing * 1e6:.0f} us "
        f"while a fresh WAL grows), one relaxed commit {commit_normal * 1e6:.0f} us "
        "(a call costs one durable commit before it runs)"
    )
    print(
        f"Gate.authorize inside runs {in_run['authorize_in_run_p50_us']:.0f} us, alone "
        f"{in_run['authorize_alone_p50_us']:.0f} us (median): {in_run['in_run_over_alone']:.2f}x"
    )
    print(
        f"  alone after walking 200,000 dicts (cold caches): {in_run['authorize_alone_cold_p50_us']:.0f} us: "
        f"in runs {in_run['in_run_over_alone_cold']:.2f}x that"
    )
    print(
        f"middleware's own thread CPU per call in relaxed runs (handler excluded, median): "
        f"{middleware['middleware_cpu_p50_us']:.0f} us (tool {middleware['middleware_cpu_tool_p50_us']:.0f}, "
        f"model {middleware['middleware_cpu_model_p50_us']:.0f}); {middleware['middleware_cpu_ms_per_run']:.1f} ms per run"
    )
    print(
        f"per decision in a relaxed run (counted): {counted['sql_statements_per_decision']:.2f} SQL statements "
        f"besides BEGIN/COMMIT, {counted['transactions_per_decision']:.2f} transactions"
    )
    print(
        f"durable runs: commit {durable['durable_commit_in_run_p50_us']:.0f} us in runs, "
        f"{durable['durable_commit_alone_p50_us']:.0f} us for the same decisions alone (median); "
        f"{durable['durable_transactions_per_decision']:.3f} transactions per decision, "
        f"{durable['durable_checkpoints_per_run']:.2f} WAL checkpoints per run "
        f"({durable['durable_checkpoint_ms_per_run']:.2f} ms per run)"
    )
    print("where a call's time goes (each part timed alone, median us):")
    for part, value in parts.items():
        print(f"  {part:<28}{value:8.1f}")
    figures = {
        "plain_ms": round(median["plain"] * 1e3, 3),
        "tools_only_ms": round(median["tools"] * 1e3, 3),
        "gated_durable_ms": round(median["gated"] * 1e3, 3),
        "gated_relaxed_ms": round(median["relaxed"] * 1e3, 3),
        "ratio_passthrough": round(ratio_passthrough, 4),
        "cpu_ratio_passthrough": round(median_cpu["passthrough"] / median_cpu["plain"], 4),
        "ratio_durable": round(ratio_durable, 4),
        "ratio_relaxed": round(ratio_relaxed, 4),
        "floor_durable_ms": round(median["floor"] * 1e3, 3),
        "floor_relaxed_ms": round(median["floor_relaxed"] * 1e3, 3),
        "ratio_floor_durable": round(floor_ratio["floor"], 4),
        "ratio_floor_relaxed": round(floor_ratio["floor_relaxed"], 4),
        "floor_relaxed_us_per_call_over_passthrough": round(floor_added_us, 1),
        "floor_calls_recorded_per_run": round(recorded, 2),
        "us_per_tool_call": round(per_tool_us, 1),
        "us_per_model_call": round(per_model_us, 1),
        "cpu_ratio_durable": round(median_cpu["gated"] / median_cpu["plain"], 4),
        "cpu_us_added_per_call": round(cpu_per_call_us, 1),
        "durable_commit_us": round(commit_full * 1e6, 1),
        "durable_commit_growing_wal_us": round(commit_growing * 1e6, 1),
        "relaxed_commit_us": round(commit_normal * 1e6, 1),
        "tool_calls": TOOL_CALLS,
        "model_calls": MODEL_CALLS,
        "subagents": len(SUBAGENTS),
        "repetitions": repetitions,
        "parts_us": parts,
        **in_run,
        **middleware,
        **counted,
        **durable,
    }
    goals = {
        "ratio_durable": {"value": round(ratio_durable, 4), "limit": 1.25, "better": "lower"},
        "ratio_relaxed": {"value": round(ratio_relaxed, 4), "limit": 1.10, "better": "lower"},
    }
    print(json.dumps({"benchmark": "langgraph_overhead", "figures": figures, "goals": goals}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
