"""Wrong Python types at the Gate and its LangGraph integration, after the fix: what
tests/test_api_misuse.py does not pin down about the checks added to
``agentgate/gate/`` (``_approval.py``, ``_authorization.py``, the Gate's parts) and
``agentgate/integrations/langgraph/``.

What holds (each test over a real ``Gate`` on a real SQLite file, counting the audit log and the
store rows around each misuse):

- the error names the parameter that is wrong (``identity``, ``call``, ``call_id``, ``run_id``,
  ``anchor``, ``key``, ``budget``, ``capabilities``...) and writes nothing;
- an error message never quotes text given in the wrong place (a key's seed as ``ttl``, a seed as
  the anchor): only its type;
- ``Gate.authorize`` with an ``approval`` that is not an ``Approval`` (the dict ``Gate.approve``
  returns) is a recorded refusal naming ``approval``, and the open request is untouched: the same
  value read with ``Approval.parse`` is then allowed;
- ``Gate.run`` with an ``fn`` that cannot be called is an ``InputError`` that leaves the allow
  unused (a later ``run`` with a function runs it once);
- ``Gate.open`` with a store that is not a URL creates nothing on disk;
- ``GateMiddleware``/``gated_tool_node`` refuse an empty or non-text ``agent`` (``None`` would
  turn off the inherited-identity check) and a ``gate`` that is not a ``Gate``;
  ``delegation_tool`` refuses one string for ``capabilities`` and a budget that is no whole
  number when it is made, and still makes the tool from good terms.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentgate.capabilities import Call
from agentgate.errors import AgentGateError, CapabilityError, InputError
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  refund:
    args: {{amount: {{type: integer, required: true}}}}
    loggable: [amount]
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:refund
    budget: {{limit: 10000, unit: usd_micros}}
    ttl_s: 600
    delegation:
      max_depth: 1
      capabilities:
        - resource: tool:lookup
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: [lead]
"""

TABLES = ("agentgate_grants", "agentgate_revocations", "budget_reservations", "agentgate_once", "approvals")


class World:
    def __init__(self, path: Path) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "helper")}
        self.text = POLICY.format(**{n: k.did for n, k in self.keys.items()})
        self.policy = parse_policy(self.text, source="types.yaml")
        self.gate = Gate(self.policy, SQLiteStore(path / "agentgate.db"))
        self.agent = self.gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")

    def snapshot(self) -> tuple[int, ...]:
        self.gate.flush()
        counts = [self.gate.store.query(f"SELECT count(*) FROM {t}")[0][0] for t in TABLES]
        return (self.gate.audit.size(), *counts)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(tmp_path)
    yield made
    made.gate.close()


def _refused(world: World, misuse: Callable[[World], object], error: type[Exception] = InputError) -> str:
    """Run ``misuse``: it raises ``error`` and writes nothing; its message."""
    before = world.snapshot()
    with pytest.raises(error) as raised:
        misuse(world)
    assert world.snapshot() == before
    return str(raised.value)


def _delegate(w: World, **changes: Any) -> AgentIdentity:
    kwargs: dict[str, Any] = {
        "name": "sub",
        "key": w.keys["helper"],
        "capabilities": ["tool:lookup"],
        "ttl": timedelta(seconds=60),
        **changes,
    }
    return w.gate.delegate(w.agent, **kwargs)


LOOKUP = Call.tool("lookup", {"id": "1"})

NAMED: dict[str, tuple[str, Callable[[World], object]]] = {
    "authorize-identity": ("identity", lambda w: w.gate.authorize(w.agent.chain, LOOKUP)),  # type: ignore[arg-type]
    "authorize-call": ("call", lambda w: w.gate.authorize(w.agent, "tool:lookup")),  # type: ignore[arg-type]
    "authorize-call_id": ("call_id", lambda w: w.gate.authorize(w.agent, LOOKUP, call_id=b"c")),  # type: ignore[arg-type]
    "authorize-run_id": ("run_id", lambda w: w.gate.authorize(w.agent, LOOKUP, call_id="c", run_id=1)),  # type: ignore[arg-type]
    "refuse_foreign-call": ("call", lambda w: w.gate.refuse_foreign(w.agent, {"resource": "tool:x"})),  # type: ignore[arg-type]
    "issue-anchor": (
        "anchor",
        lambda w: w.gate.issue(w.keys["root"].public, name="x", key=w.keys["helper"], role="worker"),  # type: ignore[arg-type]
    ),
    "issue-key": (
        "key",
        lambda w: w.gate.issue(w.keys["root"], name="x", key=w.keys["helper"].did, role="worker"),
    ),  # type: ignore[arg-type]
    "issue-role": ("role", lambda w: w.gate.issue(w.keys["root"], name="x", key=w.keys["helper"], role=None)),  # type: ignore[arg-type]
    "delegate-parent": ("parent", lambda w: _delegate_from(w, w.agent.chain)),
    "delegate-key": ("key", lambda w: _delegate(w, key=w.keys["helper"].public)),
    "delegate-budget-bool": ("budget", lambda w: _delegate(w, budget=True)),
    "delegate-budget-negative": ("budget", lambda w: _delegate(w, budget=-1)),
    "delegate-budget-float": ("budget", lambda w: _delegate(w, budget=1.5)),
    "delegate-name-empty": ("name", lambda w: _delegate(w, name="")),
    "revoke-reason": ("reason", lambda w: w.gate.revoke(w.agent, reason=5)),  # type: ignore[arg-type]
    "budget_usage": ("identity", lambda w: w.gate.budget_usage(w.agent.chain)),  # type: ignore[arg-type]
    "approve-approver": (
        "approver",
        lambda w: w.gate.approve({"id": "r", "call_hash": "h"}, w.keys["lead"].did),
    ),  # type: ignore[arg-type]
    "decline-reason": ("reason", lambda w: w.gate.decline(_asked(w), reason=None)),  # type: ignore[arg-type]
}


def _delegate_from(w: World, parent: object) -> AgentIdentity:
    return w.gate.delegate(
        parent,  # type: ignore[arg-type]
        name="sub",
        key=w.keys["helper"],
        capabilities=["tool:lookup"],
        ttl=timedelta(seconds=60),
    )


def _asked(w: World) -> Authorization:
    asked = w.gate.authorize(w.agent, Call.tool("refund", {"amount": 500}), call_id="c1")
    assert asked.needs_approval
    return asked


@pytest.mark.parametrize("case", list(NAMED), ids=list(NAMED))
def test_a_wrong_type_is_an_input_error_naming_the_parameter_and_writes_nothing(
    world: World, case: str
) -> None:
    name, misuse = NAMED[case]
    if case == "decline-reason":
        asked = _asked(world)  # its request is recorded before the misuse
        message = _refused(world, lambda w: w.gate.decline(asked, reason=None))  # type: ignore[arg-type]
    else:
        message = _refused(world, misuse)
    assert name in message


def test_an_error_message_quotes_no_text_given_in_the_wrong_place(world: World) -> None:
    seed = world.keys["helper"].seed.hex()
    for misuse in (
        lambda w: _delegate(w, ttl=seed),
        lambda w: _delegate(w, budget=seed),
        lambda w: w.gate.issue(seed, name="x", key=w.keys["helper"], role="worker"),  # type: ignore[arg-type]
        lambda w: w.gate.authorize(w.agent, LOOKUP, call_id="c", run_id=seed.encode()),  # type: ignore[arg-type]
    ):
        message = _refused(world, misuse)
        assert seed not in message and seed[:16] not in message


def test_an_approval_that_is_not_an_approval_is_a_recorded_refusal_that_leaves_the_request(
    world: World,
) -> None:
    call = Call.tool("refund", {"amount": 500})
    asked = world.gate.authorize(world.agent, call, call_id="c1")
    assert asked.needs_approval
    resume = world.gate.approve(asked.approval_payload(), world.keys["lead"])
    size = world.snapshot()[0]
    refused = world.gate.authorize(world.agent, call, call_id="c1", approval=resume)  # type: ignore[arg-type]
    assert refused.verdict == "deny" and refused.audit_index == size
    assert any("approval must be an Approval" in r for r in refused.reasons)
    assert world.snapshot()[0] == size + 1
    # The request was not consumed nor closed: the same resume value, read as an approval, holds.
    allowed = world.gate.authorize(world.agent, call, call_id="c1", approval=Approval.parse(resume))
    assert allowed.allowed
    assert world.gate.run(allowed, lambda: "refunded") == "refunded"


@pytest.mark.parametrize("fn", [None, "lookup", 5], ids=["None", "str", "int"])
def test_run_with_a_function_that_cannot_be_called_leaves_the_allow_unused(world: World, fn: object) -> None:
    auth = world.gate.authorize(world.agent, LOOKUP)
    assert auth.allowed
    message = _refused(world, lambda w: w.gate.run(auth, fn))  # type: ignore[arg-type]
    assert "fn" in message
    ran: list[int] = []
    assert world.gate.run(auth, lambda: ran.append(1) or "ok") == "ok"
    assert ran == [1]


def test_gate_open_with_a_store_that_is_no_url_creates_nothing(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    place = tmp_path / "empty"
    place.mkdir()
    policy = place / "p.yaml"
    policy.write_text(world.text)
    monkeypatch.chdir(place)
    with pytest.raises(InputError, match="store"):
        Gate.open(policy, 5)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="key_dir"):
        Gate.open(policy, key_dir=5)  # type: ignore[arg-type]
    assert sorted(os.listdir(place)) == ["p.yaml"]


@pytest.mark.parametrize("wrong", ["store", "log_key", "scheduler"])
def test_gate_init_names_a_wrong_part(world: World, tmp_path: Path, wrong: str) -> None:
    kwargs: dict[str, Any] = {"log_key": None, "scheduler": None}
    store: object = SQLiteStore(tmp_path / "other.db")
    try:
        if wrong == "store":
            store = str(tmp_path / "other.db")
        else:
            kwargs[wrong] = world.keys["root"].public if wrong == "log_key" else {"max_queued": 5}
        with pytest.raises(InputError, match=wrong):
            Gate(world.policy, store, **kwargs)  # type: ignore[arg-type]
    finally:
        if isinstance(store, SQLiteStore):
            store.close()


# --- the LangGraph integration ----------------------------------------------------------------------


@pytest.mark.parametrize("agent", ["", 5, None, b"agent"], ids=["empty", "int", "None", "bytes"])
def test_the_middleware_and_the_tool_node_refuse_an_agent_that_is_no_name(
    world: World, agent: object
) -> None:
    from agentgate.integrations.langgraph import GateMiddleware, gated_tool_node

    with pytest.raises(InputError, match="agent"):
        GateMiddleware(world.gate, agent=agent)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="agent"):
        gated_tool_node(world.gate, [], agent=agent)  # type: ignore[arg-type]


def test_the_middleware_refuses_a_gate_or_agent_did_of_the_wrong_type(world: World) -> None:
    from agentgate.integrations.langgraph import GateMiddleware

    with pytest.raises(InputError, match="gate"):
        GateMiddleware(None, agent="agent")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="agent_did"):
        GateMiddleware(world.gate, agent="agent", agent_did=world.keys["agent"])  # type: ignore[arg-type]
    made = GateMiddleware(world.gate, agent="agent", agent_did=world.keys["agent"].did)
    assert made.name == "agentgate[agent]"


class _Agent:
    """Stands for a compiled sub-agent: never called here (only the tool's making is tested)."""

    def invoke(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("not called")

    async def ainvoke(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("not called")


@pytest.mark.parametrize(
    ("change", "error", "named"),
    [
        ({"capabilities": "tool:lookup"}, CapabilityError, "capabilities"),
        ({"capabilities": None}, CapabilityError, "capabilities"),
        ({"budget": 2.5}, InputError, "budget"),
        ({"name": ""}, InputError, "name"),
        ({"description": 5}, InputError, "description"),
    ],
    ids=["capabilities-str", "capabilities-None", "budget-float", "name-empty", "description-int"],
)
def test_delegation_tool_refuses_bad_terms_when_made(
    world: World, change: dict[str, Any], error: type[AgentGateError], named: str
) -> None:
    from agentgate.integrations.langgraph import delegation_tool

    kwargs: dict[str, Any] = {
        "name": "sub",
        "agent": _Agent(),
        "key": world.keys["helper"],
        "capabilities": ["tool:lookup"],
        "ttl": timedelta(seconds=30),
        **change,
    }
    before = world.snapshot()
    with pytest.raises(error, match=named):
        delegation_tool(world.gate, **kwargs)
    assert world.snapshot() == before


def test_delegation_tool_is_made_from_good_terms(world: World) -> None:
    from agentgate.integrations.langgraph import delegation_tool

    tool = delegation_tool(
        world.gate,
        name="sub",
        agent=_Agent(),
        key=world.keys["helper"],
        capabilities=("tool:lookup",),
        ttl=timedelta(seconds=30),
        budget=0,
    )
    assert tool.name == "ask_sub"
