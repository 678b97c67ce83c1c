"""A support agent under agentgate: refunds behind an approval gate, and a grant revoked mid-run.

    .venv/bin/python examples/support_agent.py        # offline, scripted model

policies/support.yaml lets the agent refund up to 2000 (EUR or USD); above 500 one of the two
support leads must approve. The run shows:

- a refund of 2500: denied, and the model is told why (outside the grant's constraint);
- a refund of 800: the run pauses (``interrupt()``), the checkpoint is in SQLite, alice signs the
  approval, the run resumes (``Command(resume=...)``) and the refund runs;
- an operator revokes the agent's grant while it runs; its next call is refused.

Model calls are not gated here: this policy governs tools only (``gate_models=False``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# First, before the imports that take seconds: Ctrl-C from here on ends with one line.
import _interrupt  # noqa: F401

# isort: split

import sqlite3
from contextlib import closing
from typing import Any

from _common import (
    ROOT,
    WIDTH,
    EndpointClients,
    EndpointFailed,
    calls,
    chat_model,
    demo_dir,
    endpoint_settings,
    exit_with,
    fitted,
    fresh_keys,
    readable,
    run_ending,
    sign_pending,
    summary,
)
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from agentgate._shown import escaped
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import create_gated_agent
from agentgate.store import SQLiteStore

SCRIPT = [
    calls(("tickets.read", {"ticket_id": "T-1001"}), ("customers.lookup", {"email": "ana@example.com"})),
    calls(
        ("payments.refund", {"order_id": "O-77", "amount": 2500, "currency": "EUR"}),
        ("payments.refund", {"order_id": "O-78", "amount": 40, "currency": "EUR"}),
    ),
    calls(("payments.refund", {"order_id": "O-77", "amount": 800, "currency": "EUR", "reason": "damaged"})),
    calls(
        ("tickets.reply", {"ticket_id": "T-1001", "body": "Refunded 800 EUR for O-77 and 40 EUR for O-78."})
    ),
    calls(("payments.refund", {"order_id": "O-99", "amount": 1999, "currency": "EUR"})),
]


def tools(gate: Gate, agent: list[AgentIdentity]) -> list[BaseTool]:
    def read(ticket_id: str) -> str:
        return f"{ticket_id}: 'My order O-77 arrived broken, and O-78 was charged twice.'"

    def lookup(email: str) -> str:
        return f"{email}: orders O-77 (800 EUR), O-78 (40 EUR)"

    def refund(order_id: str, amount: float, currency: str, reason: str = "") -> str:
        return f"refunded {amount} {currency} on {order_id}"

    def reply(ticket_id: str, body: str) -> str:
        # Meanwhile, an operator sees the agent being steered toward an unknown order and
        # revokes its grant. Every later call of the running agent is refused.
        print("[operator] revoking support-agent's grant while it runs")
        gate.revoke(agent[0], by="operator", reason="suspicious refund pattern")
        return f"replied on {ticket_id}"

    return [
        StructuredTool.from_function(func=f, name=n, description=n)
        for f, n in (
            (read, "tickets.read"),
            (lookup, "customers.lookup"),
            (refund, "payments.refund"),
            (reply, "tickets.reply"),
        )
    ]


def main() -> int:
    """Run the agent and print the summary; 1 where the endpoint failed a model call, else 0."""
    endpoint = endpoint_settings()  # a setting it cannot use ends the example before anything is made
    workdir = demo_dir("support_agent")
    policy, keys = fresh_keys(ROOT / "policies" / "support.yaml", workdir)
    store = workdir / "agentgate.db"
    gate = Gate(policy, SQLiteStore(store))
    identity = gate.issue(
        keys["ops-root"], name="support-agent", key=keys["support-agent"], role="support-agent"
    )
    config: Any = {"configurable": {"thread_id": "ticket-T-1001"}}
    print("agentgate demo: a support agent under policies/support.yaml")
    if endpoint:
        print(fitted(endpoint.describe("support-model")))
    stopped = None
    clients = EndpointClients()  # this run's: closed as it ends
    try:
        # closing(): sqlite3's own with block commits and leaves the connection open
        with closing(sqlite3.connect(workdir / "checkpoints.sqlite", check_same_thread=False)) as conn:
            agent = create_gated_agent(
                gate,
                name="support-agent",
                model=chat_model(SCRIPT, name="support-model", clients=clients),
                tools=tools(gate, [identity]),
                checkpointer=SqliteSaver(conn),
                gate_models=False,
            )
            try:
                state = agent.invoke(
                    {"messages": [{"role": "user", "content": "Ticket T-1001"}]}, config, context=identity
                )
                # A model may ask for several gated calls at once (each its own interrupt, resumed
                # by its id) and for more in later turns: the run is resumed until none is pending.
                while pending := state.get("__interrupt__"):
                    approvals = sign_pending(
                        gate,
                        pending,
                        keys["alice"],
                        lambda request: (
                            f"Paused for approval: {request['requester']} asks to run {request['resource']}"
                            f"\n  {request['args']}\n  approvers {', '.join(request['approvers'])}; "
                            "alice signs it (the paused run is checkpointed in SQLite)."
                        ),
                    )
                    state = agent.invoke(Command(resume=approvals), config, context=identity)
            except EndpointFailed as failure:
                stopped = failure
                print(fitted(f"Run stopped: {failure}"))
                state = agent.get_state(config).values
        conn.close()
        if not stopped:
            print(fitted(f"Run finished: {run_ending(state['messages'])}"))
        print("\nWhat the model was told:")
        told = [message for message in state.get("messages", []) if message.type == "tool"]
        # A tool's name is the model's choice, even one no tool has: escaped as the summary's are.
        names = [escaped(message.name or "") for message in told]
        width = max(map(len, names), default=0)
        for message, name in zip(told, names, strict=True):
            start = f"  {message.status:<7} {name:<{width}}  "
            print(start + readable(str(message.content), WIDTH - len(start)))
        if not told:
            print("  (nothing: no tool call was answered)")
        summary(gate, [identity], store=store, names={k.did: n for n, k in keys.items()})
    finally:
        clients.close()
        gate.close()
    return 1 if stopped else 0


if __name__ == "__main__":
    exit_with(main)
