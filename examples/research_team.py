"""A research team under agentgate: a supervisor and two sub-agents, each on its own grant.

    .venv/bin/python examples/research_team.py        # what `make demo` runs; offline

- The supervisor holds a root grant for its role in policies/research_team.yaml. It searches (in
  parallel, under the tools' concurrency and rate limits), hands work to a researcher and a
  writer, and publishes the report, which needs a signed approval from dana (the run pauses with
  LangGraph's ``interrupt()`` and resumes with ``Command(resume=approval)``).
- Each sub-agent gets a fresh grant, attenuated to what the supervisor declares and the policy's
  delegation rule allows, bound to the sub-agent's own key, shorter-lived. What it tries beyond
  that is refused, and the model is told why.
- Model calls are dispatched to two simulated vLLM backends (agentgate.sim, real HTTP on
  127.0.0.1) through the dispatcher; the scripted model decides what is said, the backends serve
  the tokens, and the budget is charged with the usage they report. With
  ``AGENTGATE_OPENAI_BASE_URL`` set (see _common.py), the endpoint's model decides and serves
  instead: no simulated backends, and model calls are still decided as ``model:llama-3.1-8b``,
  the name the policy grants, whatever the endpoint calls its model.

The keys are made fresh for each run and the store lives in .agentgate/demo/research_team/.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# First, before the imports that take seconds: Ctrl-C from here on ends with one line.
import _interrupt  # noqa: F401

# isort: split

import asyncio
from collections import defaultdict
from datetime import timedelta
from typing import Any

from _common import (
    ROOT,
    EndpointClients,
    EndpointFailed,
    calls,
    chat_model,
    demo_dir,
    endpoint_settings,
    exit_with,
    fitted,
    fresh_keys,
    run_ending,
    sign_pending,
    summary,
)
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.gate import Gate
from agentgate.integrations.langgraph import create_gated_agent, delegation_tool
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

MODEL = "llama-3.1-8b"
ARXIV = [f"https://arxiv.org/abs/24{i:02d}.0{i}{i}17" for i in range(1, 7)]


class ToolBench:
    """Fake tools that take a little time and record how many of each ran at once."""

    def __init__(self) -> None:
        self.running: dict[str, int] = defaultdict(int)
        self.peaks: dict[str, int] = defaultdict(int)

    def tool(self, name: str, result: str, seconds: float = 0.05) -> BaseTool:
        async def run(**kwargs: Any) -> str:
            self.running[name] += 1
            self.peaks[name] = max(self.peaks[name], self.running[name])
            try:
                await asyncio.sleep(seconds)
            finally:
                self.running[name] -= 1
            return result.format(**kwargs)

        schemas = {
            "web.search": {"query": (str, ...), "max_results": (int, 5)},
            "web.fetch": {"url": (str, ...)},
            "docs.write": {"path": (str, ...), "content": (str, ...)},
            "docs.publish": {"path": (str, ...)},
        }
        from pydantic import create_model

        args = create_model(f"{name.replace('.', '_')}_args", **schemas[name])  # type: ignore[call-overload]
        return StructuredTool.from_function(coroutine=run, name=name, description=name, args_schema=args)


def agents(gate: Gate, keys: dict[str, Any], bench: ToolBench, clients: EndpointClients) -> Any:
    search = bench.tool("web.search", "5 results for '{query}'")
    fetch = bench.tool("web.fetch", "abstract of {url}", 0.1)
    write = bench.tool("docs.write", "wrote {path}")
    publish = bench.tool("docs.publish", "published {path}")

    researcher = create_gated_agent(
        gate,
        name="researcher",
        model_name=MODEL,
        model=chat_model(
            [
                calls(
                    *[("web.fetch", {"url": u}) for u in ARXIV],
                    ("web.fetch", {"url": "https://evil.example/x"}),
                ),
                calls(("docs.publish", {"path": "reports/final/leak.md"})),
            ],
            name=MODEL,
            served_by=gate,
            clients=clients,
        ),
        tools=[fetch, search, publish],
    )
    writer = create_gated_agent(
        gate,
        name="writer",
        model_name=MODEL,
        model=chat_model(
            [
                calls(
                    ("docs.write", {"path": "reports/drafts/summary.md", "content": "draft"}),
                    ("docs.write", {"path": "reports/final/summary.md", "content": "not mine to write"}),
                )
            ],
            name=MODEL,
            served_by=gate,
            clients=clients,
        ),
        tools=[write],
    )
    ask_researcher = delegation_tool(
        gate,
        name="researcher",
        agent=researcher,
        key=keys["researcher"],
        capabilities=[
            "tool:web.fetch?url^=https://arxiv.org/",
            "tool:web.search?max_results<=10",
            f"model:{MODEL}?max_tokens<=2048",
        ],
        ttl=timedelta(minutes=10),
        budget=1_000_000,
    )
    ask_writer = delegation_tool(
        gate,
        name="writer",
        agent=writer,
        key=keys["writer"],
        capabilities=["tool:docs.write?path^=reports/drafts/", f"model:{MODEL}?max_tokens<=2048"],
        ttl=timedelta(minutes=10),
        budget=1_000_000,
    )
    supervisor_turns = [
        calls(
            *[
                ("web.search", {"query": q, "max_results": 5})
                for q in ("kv cache", "prefix routing", "slo goodput")
            ],
            ("web.search", {"query": "everything", "max_results": 500}),
            ("ask_researcher", {"task": "read the six arXiv papers on prefix-aware routing"}),
            ("ask_writer", {"task": "draft a one-page summary"}),
        ),
        calls(
            ("docs.write", {"path": "reports/final/report.md", "content": "the report"}),
            ("docs.publish", {"path": "reports/final/report.md"}),
        ),
    ]
    return create_gated_agent(
        gate,
        name="supervisor",
        model_name=MODEL,
        model=chat_model(supervisor_turns, name=MODEL, served_by=gate, clients=clients),
        tools=[search, write, publish, ask_researcher, ask_writer],
        checkpointer=InMemorySaver(),
    )


async def main() -> int:
    """Run the team and print the summary; 1 where the endpoint failed a model call, else 0."""
    endpoint = endpoint_settings()  # a setting it cannot use ends the example before anything is made
    workdir = demo_dir("research_team")
    policy, keys = fresh_keys(ROOT / "policies" / "research_team.yaml", workdir)
    store = workdir / "agentgate.db"
    gate = Gate(policy, SQLiteStore(store))
    # Offline: two simulated backends behind the dispatcher. With an endpoint: the endpoint alone.
    servers = [] if endpoint else [SimServer(model_name=MODEL, time_scale=0.2).start() for _ in range(2)]
    clients = EndpointClients()  # this run's: closed as it ends, whichever event loop runs the next
    try:
        if servers:
            inventory = inventory_from_mapping(
                {
                    "backends": [
                        {
                            "name": f"sim-{i}",
                            "url": s.url,
                            "engine": "vllm",
                            "models": [MODEL],
                            "metrics_url": s.url + "/metrics",
                            "kv_capacity_tokens": 400_000,
                        }
                        for i, s in enumerate(servers)
                    ]
                }
            )
            gate.attach_dispatcher(Dispatcher(inventory, Router(inventory)))
        supervisor = gate.issue(
            keys["research-root"], name="supervisor", key=keys["supervisor"], role="supervisor"
        )
        bench = ToolBench()
        team = agents(gate, keys, bench, clients)
        config = {"configurable": {"thread_id": "research-1"}}

        print("agentgate demo: a supervisor and two sub-agents under policies/research_team.yaml")
        if endpoint:
            print(fitted(endpoint.describe(MODEL)))
        stopped = None
        try:
            state = await team.ainvoke(
                {"messages": [{"role": "user", "content": "Write the report."}]}, config, context=supervisor
            )
            # Several gated calls at once are several interrupts, each resumed by its id; later
            # turns may ask again: the run is resumed until none is pending.
            while pending := state.get("__interrupt__"):
                approvals = sign_pending(
                    gate,
                    pending,
                    keys["dana"],
                    lambda request: (
                        f"\nPaused for approval: {request['requester']} asks to run "
                        f"{request['resource']} {request['args']}\n  gate {request['gate']}; approvers "
                        f"{', '.join(request['approvers'])}; dana signs it."
                    ),
                )
                state = await team.ainvoke(Command(resume=approvals), config, context=supervisor)
            ending = f"Run finished: {run_ending(state['messages'])}"
        except EndpointFailed as failure:
            stopped = failure
            ending = f"Run stopped: {failure}"
        # What served the model calls, then how the run ended, then the summary.
        if servers:
            served = [s.served for s in servers]
            per_backend = ", ".join(f"sim-{i} {n}" for i, n in enumerate(served))
            print(f"Model calls served by the simulated GPU backends: {sum(served)} ({per_backend})")
            if min(served) == 0:
                print(
                    "  one run is one session (its thread id): the router keeps a session on the "
                    "backend\n  that holds its prefix cache while that backend meets the SLO "
                    "(docs/dispatch.md, Choose)"
                )
        print(fitted(ending))
        summary(
            gate,
            [supervisor],
            peaks=dict(bench.peaks),
            store=store,
            names={k.did: n for n, k in keys.items()},
        )
    finally:
        await clients.aclose()
        gate.close()
        for server in servers:
            server.stop()
    return 1 if stopped else 0


if __name__ == "__main__":
    exit_with(lambda: asyncio.run(main()))
