"""A tool that is not idempotent runs once (agentgate/store/once.py, as the Gate uses it): the same
call decided again is refused, after a restart too; a call that failed is refused without an answer
to give again, one that paused runs when its run resumes; the key is scoped to the caller's tenant;
a call whose process died while it ran is never run again on its own, and settling it by hand is
refused while it may still be running."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _raw_sqlite import opened
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.sqlite import SqliteSaver
from test_gate_run import Setup

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import CircuitOpen, InputError
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.once import SETTLE_MIN_AGE_S, settle

pytest_plugins = ("test_gate_run",)  # its ``setup`` fixture (the Gate of test_gate_run.Setup)

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
tools:
  pay:
    args: {{amount: {{type: integer, required: true}}}}
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:pay}}, {{resource: tool:lookup}}]
    budget: {{limit: 100, unit: calls}}
    ttl_s: 600
"""

PAY = Call.tool("pay", {"amount": 40})
RUN = "thread-1|tools:task-1"


def _policy_text(keys: dict[str, SigningKey]) -> str:
    return POLICY.format(root=keys["root"].did, agent=keys["agent"].did)


def _gate(path: Path, keys: dict[str, SigningKey]) -> Gate:
    return Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path))


def _new(tmp_path: Path) -> tuple[dict[str, SigningKey], Path, AgentIdentity]:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    path = tmp_path / "agentgate.db"
    with _gate(path, keys) as gate:
        identity = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    return keys, path, identity


def test_a_call_that_ran_is_refused_when_decided_again_also_after_a_restart(tmp_path: Path) -> None:
    keys, path, agent = _new(tmp_path)
    paid: list[int] = []
    with _gate(path, keys) as gate:
        first = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert first.allowed
        gate.run(first, lambda: paid.append(40), call_id="c1", run_id=RUN)
        again = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert not again.allowed
        assert f"already ran to completion (allowed by audit entry {first.audit_index})" in again.explain()
    with _gate(path, keys) as restarted:  # a resumed run after a restart asks for the same call
        after = restarted.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert not after.allowed and "already ran to completion" in after.explain()
        # Another call id, another run, or other arguments are other calls.
        assert restarted.authorize(agent, PAY, call_id="c2", run_id=RUN).allowed
        assert restarted.authorize(agent, PAY, call_id="c1", run_id="thread-2|tools:task-1").allowed
        assert restarted.authorize(agent, Call.tool("pay", {"amount": 41}), call_id="c1", run_id=RUN).allowed
        # The refusals are on the record, and nothing was reserved or run for them.
        refusals = [e for e in restarted.audit.entries() if e.kind == "deny"]
        assert len(refusals) == 2 and all("runs once" in e.reasons[0] for e in refusals)
        assert restarted.verify().ok
    assert paid == [40]


def test_an_idempotent_tool_and_a_call_without_an_id_are_decided_again(tmp_path: Path) -> None:
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        lookup = Call.tool("lookup", {"id": "o-1"})
        for _ in range(2):
            auth = gate.authorize(agent, lookup, call_id="c1", run_id=RUN)
            assert auth.allowed
            gate.run(auth, lambda: "found", call_id="c1", run_id=RUN)
        for _ in range(2):  # no call id: nothing names the call, so nothing can say it ran before
            auth = gate.authorize(agent, PAY)
            assert auth.allowed
            gate.run(auth, lambda: "paid")
        assert gate.store.query("SELECT COUNT(*) FROM agentgate_once") == [(0,)]


def test_a_call_that_failed_is_not_run_again_but_one_never_started_is(tmp_path: Path) -> None:
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        failing = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)

        def timeout() -> None:
            raise TimeoutError("the payment service did not answer")

        with contextlib.suppress(TimeoutError):
            gate.run(failing, timeout, call_id="c1", run_id=RUN)
        refused = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert not refused.allowed and "already ran and failed" in refused.explain()

        # Refused by the scheduler before it started (its breaker opened by refused
        # connections): it may be decided again. (A tool that itself raises such a refusal,
        # from a nested call, has run: tests/test_gate_once_payments.py.)
        def refused_connection() -> None:
            raise ConnectionRefusedError("the payment service is down")

        for n in range(10):
            call_id = f"c{n + 2}"
            queued = gate.authorize(agent, PAY, call_id=call_id, run_id=RUN)
            try:
                gate.run(queued, refused_connection, call_id=call_id, run_id=RUN)
            except ConnectionRefusedError:
                continue  # it ran and failed: the breaker counts it
            except CircuitOpen:
                break  # the breaker open: refused before it started
        else:
            pytest.fail("the breaker never opened")
        assert gate.authorize(agent, PAY, call_id=call_id, run_id=RUN).allowed


def _on_both(store: Store, keys: dict[str, SigningKey]) -> Gate:
    return Gate(parse_policy(_policy_text(keys), source="once.yaml"), store)


def test_the_same_rule_holds_on_postgresql_and_sqlite(store: Store) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    gate = _on_both(store, keys)
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        first = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        gate.run(first, lambda: "paid", call_id="c1", run_id=RUN)
        assert not gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed
        assert gate.authorize(agent, PAY, call_id="c2", run_id=RUN).allowed  # and never run
        (lost,) = gate.once.unsettled()
        settle(gate.store, gate.audit, lost.key, ran=False, by="ops", min_age_s=0)
        assert gate.once.unsettled() == [] and gate.authorize(agent, PAY, call_id="c2", run_id=RUN).allowed
        assert gate.verify().ok
    finally:
        gate.close()


CRASH = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from agentgate.authority import parse_chain
    from agentgate.capabilities import Call
    from agentgate.gate import AgentIdentity, Gate
    from agentgate.keys import load_signing_key
    from agentgate.policy import parse_policy
    from agentgate.store import SQLiteStore

    work = Path(sys.argv[1])
    gate = Gate(parse_policy((work / "policy.yaml").read_text(), source="once.yaml"),
                SQLiteStore(work / "agentgate.db"))
    agent = AgentIdentity("agent", load_signing_key(work / "agent.key"),
                          parse_chain((work / "chain.txt").read_text()))
    call = Call.tool("pay", {"amount": 40})
    auth = gate.authorize(agent, call, call_id="c1", run_id=sys.argv[2])
    assert auth.allowed
    def pay():
        (work / "paid").write_text("once")
        os._exit(9)  # the process dies while the tool runs: no outcome is ever written
    gate.run(auth, pay, call_id="c1", run_id=sys.argv[2])
    """
)


def test_a_call_whose_process_died_while_it_ran_is_not_run_again(tmp_path: Path) -> None:
    keys, path, agent = _new(tmp_path)
    (tmp_path / "policy.yaml").write_text(_policy_text(keys))
    (tmp_path / "chain.txt").write_text(agent.chain.token)
    save_key(keys["agent"], tmp_path, "agent")
    done = subprocess.run([sys.executable, "-c", CRASH, str(tmp_path), RUN], capture_output=True, timeout=120)
    assert done.returncode == 9, done.stderr.decode()
    assert (tmp_path / "paid").read_text() == "once"
    with _gate(path, keys) as restarted:
        refused = restarted.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert not refused.allowed
        assert "its outcome was never recorded" in refused.explain()
        assert "it may have had its effect" in refused.explain()
        assert restarted.ledger.remaining(agent.chain.root.id) == 99  # its reservation is held


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


@pytest.mark.parametrize("ran", [True, False])
def test_a_person_settles_a_call_whose_outcome_was_lost_and_it_is_audited(tmp_path: Path, ran: bool) -> None:
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:  # a call allowed whose process then died: no outcome
        assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed
        gate.flush()
    code, listed = _cli("tasks", "unsettled", "--json", "--store", str(path))
    assert code == 0
    (row,) = json.loads(listed)
    assert (row["state"], row["resource"], row["principal"]) == ("started", "tool:pay", agent.did)
    said = "--ran" if ran else "--not-run"
    code, out = _cli(
        "tasks",
        "settle",
        row["key"],
        said,
        "--by",
        "alice",
        "--reason",
        "checked",
        "--store",
        str(path),
        "--older-than",
        "0",
    )
    assert code == 0 and f"audit entry {row['allow_index']}" in out
    assert _cli("tasks", "unsettled", "--json", "--store", str(path)) == (0, "[]\n")
    assert main(["tasks", "settle", row["key"], "--ran", "--store", str(path)]) == 1  # settled stays so
    with _gate(path, keys) as gate:
        (settled,) = [e for e in gate.audit.entries() if e.kind == "outcome"]
        assert settled.ref == row["allow_index"] and settled.status == ("ok" if ran else "not_run")
        assert settled.reasons == (
            f"settled by hand by alice: {'it ran' if ran else 'it did not run'} (checked)",
        )
        # Ran: charged as reserved and never run again; not run: released, and it may run now.
        root = agent.chain.root.id
        assert (gate.ledger.spent(root), gate.ledger.remaining(root)) == ((1, 99) if ran else (0, 100))
        again = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert again.allowed is not ran
        assert gate.verify().ok


def test_settling_names_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        done = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        gate.run(done, lambda: "paid", call_id="c1", run_id=RUN)
        gate.flush()
        (key,) = [r[0] for r in gate.store.query("SELECT key FROM agentgate_once")]
    assert main(["tasks", "settle", key, "--not-run", "--store", str(path)]) == 1  # refused (review R59)
    assert "is ok, not unsettled" in capsys.readouterr().out
    assert main(["tasks", "settle", "f" * 64, "--ran", "--store", str(path)]) == 1
    assert "no call that must run once" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # --ran or --not-run, one of them
        main(["tasks", "settle", key, "--store", str(path)])


LANGGRAPH_CRASH = textwrap.dedent(
    """
    import os, sqlite3, sys
    from pathlib import Path
    from langchain_core.tools import StructuredTool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from agentgate.authority import parse_chain
    from agentgate.gate import AgentIdentity, Gate
    from agentgate.integrations.langgraph import create_gated_agent
    from agentgate.keys import load_signing_key
    from agentgate.policy import parse_policy
    from agentgate.store import SQLiteStore
    sys.path.insert(0, sys.argv[2])
    from test_gate_once import scripted_payer

    work = Path(sys.argv[1])
    gate = Gate(parse_policy((work / "policy.yaml").read_text(), source="once.yaml"),
                SQLiteStore(work / "agentgate.db"))
    agent = AgentIdentity("agent", load_signing_key(work / "agent.key"),
                          parse_chain((work / "chain.txt").read_text()))

    def pay(amount: int) -> str:
        (work / "paid").write_text(str(amount))
        os._exit(9)  # dies after the payment, before LangGraph saves the tool's result

    conn = sqlite3.connect(work / "checkpoints.sqlite", check_same_thread=False)
    graph = scripted_payer(gate, StructuredTool.from_function(pay, name="pay", description="pay"),
                           SqliteSaver(conn))
    # durability="sync": the model's step is checkpointed before the tool runs (with the default,
    # "async", the crash below sometimes came first, and the resumed run asked the model again:
    # another task, a new call; docs/langgraph.md).
    graph.invoke({"messages": [{"role": "user", "content": "pay 40"}]},
                 {"configurable": {"thread_id": "t-1"}}, context=agent, durability="sync")
    """
)


def scripted_payer(gate: Gate, pay: Any, saver: Any) -> Any:
    """The agent of the LangGraph crash test: it pays 40 (tool call id ``pay-1``), then stops."""
    model = ScriptedChatModel(
        turns=[AIMessage(content="", tool_calls=[{"name": "pay", "args": {"amount": 40}, "id": "pay-1"}])]
    )
    return create_gated_agent(
        gate, name="agent", model=model, tools=[pay], checkpointer=saver, gate_models=False
    )


def test_a_langgraph_run_resumed_after_a_crash_does_not_pay_twice(tmp_path: Path) -> None:
    keys, path, agent = _new(tmp_path)
    (tmp_path / "policy.yaml").write_text(_policy_text(keys))
    (tmp_path / "chain.txt").write_text(agent.chain.token)
    save_key(keys["agent"], tmp_path, "agent")
    tests = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, "-c", LANGGRAPH_CRASH, str(tmp_path), tests], capture_output=True, timeout=120
    )
    assert done.returncode == 9, done.stderr.decode()
    paid_again: list[int] = []

    def pay(amount: int) -> str:
        paid_again.append(amount)
        return "paid"

    tool = StructuredTool.from_function(pay, name="pay", description="pay")
    with (
        _gate(path, keys) as gate,
        opened(tmp_path / "checkpoints.sqlite", check_same_thread=False) as conn,
    ):
        graph = scripted_payer(gate, tool, SqliteSaver(conn))
        # The restarted process resumes the thread: LangGraph runs the tool node again, with the
        # same task and tool call id, since the crash came before it saved the tool's result.
        result = graph.invoke(None, {"configurable": {"thread_id": "t-1"}}, context=agent)
        (message,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert message.status == "error" and "outcome was never recorded" in str(message.content)
    assert paid_again == [] and (tmp_path / "paid").read_text() == "40"


def test_a_once_only_call_that_failed_is_refused_again_without_a_cached_answer_key(setup: Setup) -> None:
    """Kills: _refuse_ran_before handing out the once key for any earlier state (``ran = once``
    for ``error`` too). The key tells an integration the call completed and its kept answer may
    be given again: for a call that failed there is no answer to give."""
    call = Call.tool("refund", {"amount": 50})
    auth = setup.gate.authorize(setup.agent, call, call_id="c2", run_id="run-2")
    with pytest.raises(RuntimeError):
        setup.gate.run(
            auth, lambda: (_ for _ in ()).throw(RuntimeError("boom")), call_id="c2", run_id="run-2"
        )
    failed = setup.gate.authorize(setup.agent, call, call_id="c2", run_id="run-2")
    assert not failed.allowed and failed.once_key is None
    done = setup.gate.authorize(setup.agent, call, call_id="c3", run_id="run-2")
    setup.gate.run(done, lambda: "refunded", call_id="c3", run_id="run-2")
    ran = setup.gate.authorize(setup.agent, call, call_id="c3", run_id="run-2")
    assert not ran.allowed and ran.once_key == done.once_key  # the precondition: ``ok`` keeps it


class _Interrupt(Exception):
    """What a framework raises inside a tool to pause it for a person (LangGraph's interrupt())."""


def test_a_once_only_call_that_paused_runs_when_its_run_resumes(setup: Setup) -> None:
    """Kills: _once_state leaving a paused call in ``error`` (its ``paused`` state dropped). A
    non-idempotent tool that asks a person mid-call is run again from its start when the run
    resumes: recorded as failed, the resumed call would be refused for ever."""
    call = Call.tool("refund", {"amount": 50})
    auth = setup.gate.authorize(setup.agent, call, call_id="p1", run_id="run-p")
    assert auth.once_key is not None

    def ask() -> str:
        raise _Interrupt("confirm the refund?")

    with pytest.raises(_Interrupt):
        setup.gate.run(
            auth, ask, call_id="p1", run_id="run-p", paused=lambda exc: isinstance(exc, _Interrupt)
        )
    resumed = setup.gate.authorize(setup.agent, call, call_id="p1", run_id="run-p")
    assert resumed.allowed, resumed.explain()
    setup.gate.run(resumed, lambda: "refunded", call_id="p1", run_id="run-p")
    assert not setup.gate.authorize(setup.agent, call, call_id="p1", run_id="run-p").allowed  # ran: once


_TWO_TENANTS = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  team-a: {{}}
  team-b: {{}}
principals:
  agent-a: {{kind: agent, did: "{a}", tenant: team-a, roles: [worker]}}
  agent-b: {{kind: agent, did: "{b}", tenant: team-b, roles: [worker]}}
tools:
  refund:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:refund
    ttl_s: 600
    delegation:
      max_depth: 1
      capabilities:
        - resource: tool:refund
"""


def test_a_once_only_call_is_scoped_to_its_tenant_not_shared_with_anothers(tmp_path: Path) -> None:
    """Mutant n5: ``_once_key`` keying every once-only call under tenant "default". Rule: the key
    that marks a non-idempotent call as run is scoped to the caller's tenant: the same sub-agent
    key, delegated by agents of two tenants, making the same call under the same run and call
    ids, runs in each tenant; with one key for both, the second tenant's call would be refused as
    run before and handed the first tenant's key (its kept answer)."""
    keys = {n: SigningKey.generate() for n in ("root", "a", "b", "helper")}
    text = _TWO_TENANTS.format(**{n: k.did for n, k in keys.items()})
    with Gate(parse_policy(text, source="gate.yaml"), SQLiteStore(tmp_path / "agentgate.db")) as gate:
        helpers = []
        for name in ("a", "b"):
            agent = gate.issue(keys["root"], name=f"agent-{name}", key=keys[name], role="worker")
            helpers.append(
                gate.delegate(
                    agent,
                    name="helper",
                    key=keys["helper"],
                    capabilities=["tool:refund"],
                    ttl=timedelta(seconds=60),
                )
            )
        assert [gate.tenant_of(h) for h in helpers] == ["team-a", "team-b"]
        call = Call.tool("refund", {"amount": 5})
        first = gate.authorize(helpers[0], call, call_id="call-1", run_id="thread-1")
        assert first.allowed and first.once_key is not None, first.explain()
        gate.run(first, lambda: "refunded for team-a", call_id="call-1", run_id="thread-1")
        other = gate.authorize(helpers[1], call, call_id="call-1", run_id="thread-1")
        assert other.allowed, other.explain()
        assert other.once_key not in (None, first.once_key)
        # The precondition: in its own tenant the call is known to have run.
        again = gate.authorize(helpers[0], call, call_id="call-1", run_id="thread-1")
        assert not again.allowed and again.once_key == first.once_key


def test_a_call_settled_as_not_run_and_allowed_again_is_started_so_a_lost_outcome_never_reruns_it(
    tmp_path: Path,
) -> None:
    # o01: deciding a call again after it was settled ``not_run`` must mark it ``started`` anew.
    # Were its state left ``not_run``, a process that died while the re-allowed call ran would
    # leave it looking never run, and the next decision would run it a second time.
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    path = tmp_path / "agentgate.db"
    with _gate(path, keys) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed  # then the process died
        gate.flush()
        (lost,) = gate.once.unsettled()
        settle(gate.store, gate.audit, lost.key, ran=False, by="ops", reason="no charge seen", min_age_s=0)
        again = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert again.allowed  # settled as not run: it may run; and then this process dies too
    with _gate(path, keys) as restarted:
        third = restarted.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert not third.allowed and "its outcome was never recorded" in third.explain()
        (started,) = restarted.once.unsettled()
        assert (started.key, started.state, started.allow_index) == (lost.key, "started", again.audit_index)


def test_a_call_allowed_moments_ago_cannot_be_settled_as_not_run_so_it_never_runs_twice(
    tmp_path: Path,
) -> None:
    # o03: a ``started`` call allowed less than ``min_age_s`` ago may still be running; settling
    # it as not run would let it be decided and run a second time. It is refused, nothing written.
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    with _gate(tmp_path / "agentgate.db", keys) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        allowed = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert allowed.allowed  # and it is running now
        gate.flush()
        (running,) = gate.once.unsettled()
        entries = len(list(gate.audit.entries()))
        for min_age_s in (SETTLE_MIN_AGE_S, 60.0):
            with pytest.raises(InputError, match="may still be running"):
                settle(gate.store, gate.audit, running.key, ran=False, by="ops", min_age_s=min_age_s)
        assert gate.once.unsettled() == [running] and len(list(gate.audit.entries())) == entries
        refused = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        assert not refused.allowed and "its outcome was never recorded" in refused.explain()
