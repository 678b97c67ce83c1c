"""A LangGraph run paused for approval, every process object closed,
then a new Gate with a changed policy over the same store and checkpointer resumes it. Real
SQLite files and PostgreSQL (``postgres_url``), ``SqliteSaver``/``AsyncSqliteSaver`` and
``PostgresSaver``/``AsyncPostgresSaver``, ``invoke`` and ``ainvoke``, scripted chat models.

What holds: a quorum raised (1->2) keeps the request and its vote and asks for the vote it
lacks (``agentgate approval list`` shows 1/2); a quorum lowered (2->1) lets the call run, with a
vote given before the change or an approval signed before it, one ``approval_given`` per
counted yes; an approver removed is not counted and the new one is asked under the same request;
a gate removed lets the call run without asking (its old request stays listed until it expires,
as documented); a gate added asks only for calls decided after the change (a call that ran
before the pause, in an earlier step or in the paused step, is neither run again nor asked
for); two waiting calls resumed together are each decided by the new policy; a call the new
policy refuses (rule narrowed, principal removed, trust anchor rotated) is refused on resume with
a clear ToolMessage and never runs; a narrowed delegation rule refuses the resumed delegation;
a sub-agent resumed after a restart is asked again under its fresh grant and completes. No run
lets a traceback out, and every audit log verifies.

Fixed (agentgate/integrations/langgraph/): a refusal that every later call of the identity
gets too, because the new policy no longer trusts the chain's root (``untrusted_root``) or no
longer names the principal (also for a delegation), did not end the run: with
``gate_models=False`` the model was asked again and again for calls that could only be refused
(as the middleware already ends the run on a revoked or expired grant).

Fixed in session 13 (was a strict xfail): a sub-agent's pending approval is bound to its grant,
which ``delegation_tool`` kept only in its process; a run whose resumes reach another process each
time (a restart, another worker on the shared store) was asked again forever. ``Gate.delegate``'s
``call`` now finds the grant delegated for the same tool call in the store.

Fixed by the lead: a call refused by the current policy when its run resumed left the request it
was asked under pending (listed for a run that had ended, its ``approval_required`` entry never
answered): every refusal of a tool call with an id now closes the request open for it
(``Gate._close_asked``), and its ``deny`` refers to the request's entry. ``Gate.delegate`` handed on, and recorded as an allow, a grant from a chain
whose root is no longer a trust anchor; it is now an audited refusal (``untrusted_root``).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command

from agentgate.cli.main import main as cli
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey
from agentgate.policy import Policy, parse_policy
from agentgate.store import SQLiteStore

KEYS = {
    n: SigningKey.generate() for n in ("root", "root2", "supervisor", "researcher", "dana", "erin", "carol")
}
LOG_KEY = SigningKey.generate()
GO = {"messages": [{"role": "user", "content": "go"}]}
PUBLISH_GATE = {"resource": "tool:publish", "approvers": ["dana"], "quorum": 1, "expiry_s": 600}
DELEGABLE = [
    {"resource": "tool:search"},
    {"resource": "tool:publish", "constraints": {"path": {"prefix": "reports/"}}},
    {"resource": "model:scripted"},
]


def policy(
    *,
    anchor: str = "root",
    supervisor: bool = True,
    prefix: str = "reports/",
    delegable: list[dict[str, Any]] | None = None,
    gates: dict[str, dict[str, Any]] | None = None,
) -> Policy:
    """The team's policy, as JSON text (JSON is YAML), with the parts a scenario changes."""

    def person(name: str, role: str, kind: str = "human") -> dict[str, Any]:
        return {"kind": kind, "did": KEYS[name].did, "tenant": "lab", "roles": [role]}

    principals = {
        "researcher": person("researcher", "researcher", "agent"),
        **{n: person(n, "owner") for n in ("dana", "erin", "carol")},
    }
    if supervisor:
        principals["supervisor"] = person("supervisor", "supervisor", "agent")
    document = {
        "version": 1,
        "trust_anchors": {"root": {"did": KEYS[anchor].did}},
        "tenants": {"lab": {}},
        "principals": principals,
        "tools": {
            "search": {"args": {"query": {"type": "string", "required": True}}, "idempotent": True},
            "publish": {"args": {"path": {"type": "string", "required": True}}, "loggable": ["path"]},
        },
        "models": {"scripted": {"cost_per_mtok": {"input": 1, "output": 1}}},
        "roles": {
            "supervisor": {
                "kind": "agent",
                "capabilities": [
                    {"resource": "tool:search"},
                    {"resource": "tool:publish", "constraints": {"path": {"prefix": prefix}}},
                    {"resource": "model:scripted"},
                ],
                "budget": {"limit": 100_000_000, "unit": "usd_micros"},
                "ttl_s": 3600,
                "delegation": {
                    "max_depth": 1,
                    "max_ttl_s": 600,
                    "capabilities": DELEGABLE if delegable is None else delegable,
                },
            },
            "researcher": {
                "kind": "agent",
                "capabilities": [
                    {"resource": "tool:search"},
                    {"resource": "tool:publish"},
                    {"resource": "model:scripted"},
                ],
                "ttl_s": 1800,
            },
            "owner": {"kind": "human", "capabilities": [{"resource": "tool:publish"}], "ttl_s": 3600},
        },
        "approvals": {"publish": PUBLISH_GATE} if gates is None else gates,
    }
    return parse_policy(json.dumps(document, indent=1), source="team.json")


def calls(*wanted: tuple[str, dict[str, Any]], turn: int = 0) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": n, "args": a, "id": f"{n}-{turn}-{i}"} for i, (n, a) in enumerate(wanted)],
    )


PUBLISH = ("publish", {"path": "reports/final"})
SEARCH = ("search", {"query": "kv cache"})


@dataclass
class Rig:
    """One scenario's world: the store (SQLite file or PostgreSQL database), the checkpointer
    (``SqliteSaver`` / ``AsyncSqliteSaver`` or ``PostgresSaver`` / ``AsyncPostgresSaver``) and how
    the graph runs (``invoke`` or ``ainvoke``). Each ``run`` opens the saver and closes it, as
    one process would."""

    tmp: Path
    kind: str
    mode: str
    url: str | None = None
    ran: list[str] = field(default_factory=list)
    gate: Gate | None = None

    def start(self, pol: Policy) -> Gate:
        """A process started with ``pol`` over the same store (the previous one closed)."""
        if self.gate is not None:
            self.gate.close()
        if self.kind == "sqlite":
            store: Any = SQLiteStore(self.tmp / "ag.db")
        else:
            from agentgate.store._postgres import PostgresStore

            assert self.url is not None
            store = PostgresStore(self.url)
        self.gate = Gate(pol, store, log_key=LOG_KEY)
        return self.gate

    def close(self) -> None:
        if self.gate is not None:
            self.gate.close()
            self.gate = None

    def tools(self) -> list[BaseTool]:
        def search(query: str) -> str:
            self.ran.append(f"search:{query}")
            return f"results for {query}"

        def publish(path: str) -> str:
            self.ran.append(f"publish:{path}")
            return f"published {path}"

        return [
            StructuredTool.from_function(func=f, name=f.__name__, description=f.__name__)
            for f in (search, publish)
        ]

    def run(
        self, build: Callable[[Any], Any], value: Any, identity: AgentIdentity, thread: str = "t"
    ) -> dict[str, Any]:
        config = {"configurable": {"thread_id": thread}}
        if self.mode == "sync":
            if self.kind == "sqlite":
                conn = sqlite3.connect(self.tmp / "cp.sqlite", check_same_thread=False)
                try:
                    return build(SqliteSaver(conn)).invoke(value, config, context=identity)
                finally:
                    conn.close()
            from langgraph.checkpoint.postgres import PostgresSaver

            assert self.url is not None
            with PostgresSaver.from_conn_string(self.url) as saver:
                saver.setup()
                return build(saver).invoke(value, config, context=identity)

        async def go() -> dict[str, Any]:
            if self.kind == "sqlite":
                async with AsyncSqliteSaver.from_conn_string(str(self.tmp / "cp.sqlite")) as saver:
                    return await build(saver).ainvoke(value, config, context=identity)
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            assert self.url is not None
            async with AsyncPostgresSaver.from_conn_string(self.url) as saver:
                await saver.setup()
                return await build(saver).ainvoke(value, config, context=identity)

        return asyncio.run(go())

    def agent(self, turns: list[AIMessage], tools: list[BaseTool] | None = None) -> Callable[[Any], Any]:
        """The supervisor, built over the saver a run opens (``tools``: its own by default)."""

        def build(saver: Any) -> Any:
            assert self.gate is not None
            return create_gated_agent(
                self.gate,
                name="supervisor",
                model=ScriptedChatModel(turns=turns),
                tools=self.tools() if tools is None else tools,
                checkpointer=saver,
            )

        return build

    def ask_researcher(self) -> BaseTool:
        """The supervisor's delegation to the researcher (search, then a gated publish), made once
        per process as a service would: its grant per delegating tool call lives in it."""
        assert self.gate is not None
        researcher = create_gated_agent(
            self.gate,
            name="researcher",
            model=ScriptedChatModel(turns=[calls(SEARCH), calls(PUBLISH, turn=1)]),
            tools=self.tools(),
        )
        return delegation_tool(
            self.gate,
            name="researcher",
            agent=researcher,
            key=KEYS["researcher"],
            capabilities=["tool:search", "tool:publish?path^=reports/", "model:scripted"],
            ttl=timedelta(minutes=5),
        )

    def listed(self, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
        """``agentgate approval list --json`` over the store."""
        capsys.readouterr()
        where = str(self.tmp / "ag.db") if self.kind == "sqlite" else str(self.url)
        assert cli(["approval", "list", "--store", where, "--json"]) == 0
        return json.loads(capsys.readouterr().out)


RIGS = [
    ("sqlite", "sync"),
    ("sqlite", "async"),
    pytest.param(("postgresql", "sync"), marks=pytest.mark.postgres),
    pytest.param(("postgresql", "async"), marks=pytest.mark.postgres),
]
RIG_IDS = ["sqlite-invoke", "sqlite-ainvoke", "pg-invoke", "pg-ainvoke"]


def _rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    kind, mode = request.param
    url = request.getfixturevalue("postgres_url") if kind == "postgresql" else None
    made = Rig(tmp_path, kind, mode, url)
    yield made
    made.close()


@pytest.fixture(params=RIGS, ids=RIG_IDS)
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    """Every store and checkpointer, sync and async."""
    yield from _rig(request, tmp_path)


@pytest.fixture(params=[("sqlite", "sync"), ("sqlite", "async")], ids=RIG_IDS[:2])
def lite(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    """The embedded store and SQLite checkpointers, sync and async (for the scenarios whose
    store-specific part the ``rig`` tests already cover)."""
    yield from _rig(request, tmp_path)


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def gate_on(approvers: list[str], quorum: int = 1, resource: str = "tool:publish") -> dict[str, Any]:
    return {**PUBLISH_GATE, "resource": resource, "approvers": approvers, "quorum": quorum}


def begin(rig: Rig, old: Policy) -> AgentIdentity:
    """The first process, on ``old``: the supervisor's root grant."""
    gate = rig.start(old)
    return gate.issue(KEYS["root"], name="supervisor", key=KEYS["supervisor"], role="supervisor")


def paused(result: dict[str, Any]) -> dict[str, Any]:
    """The one approval the run waits for: its interrupt payload."""
    (pending,) = result["__interrupt__"]
    assert pending.value["agentgate"] == "approval_required"
    return pending.value


def sign(payload: dict[str, Any], who: str) -> dict[str, str]:
    return Approval.sign(payload, KEYS[who]).to_dict()


def finished(result: dict[str, Any]) -> AIMessage:
    """The run ended (no interrupt left) with the model's last word, and no message carries a
    traceback."""
    assert "__interrupt__" not in result
    assert not any("Traceback" in str(m.content) for m in result["messages"])
    last = result["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    return last


def states(rig: Rig) -> dict[str, str]:
    assert rig.gate is not None
    return {str(r[0]): str(r[1]) for r in rig.gate.store.query("SELECT id, state FROM approvals")}


def log(rig: Rig) -> list[Any]:
    assert rig.gate is not None
    rig.gate.flush()
    return list(rig.gate.audit.entries())


def verified(rig: Rig) -> None:
    assert rig.gate is not None
    report = rig.gate.verify()
    assert report.ok and report.first_bad_index is None


def every_request_answered(rig: Rig) -> bool:
    """Whether every ``approval_required`` entry of the log that asks (one with a ``ref`` records
    an approval that did not count, for the request it refers to) is referred to by a later entry."""
    entries = log(rig)
    asked = {i for i, e in enumerate(entries) if e.kind == "approval_required" and e.ref is None}
    return asked <= {e.ref for e in entries}


def dids(*names: str) -> str:
    return ",".join(sorted(KEYS[n].did for n in names))


PUBLISHER = [calls(PUBLISH)]


# --- the approval gate changed ------------------------------------------------------------------


def test_a_raised_quorum_asks_for_the_vote_it_now_lacks(rig: Rig, capsys: pytest.CaptureFixture[str]) -> None:
    identity = begin(rig, policy(gates={"publish": gate_on(["dana", "erin"])}))
    asked = paused(rig.run(rig.agent(PUBLISHER), GO, identity))
    before = sign(asked, "dana")  # signed under the old policy, when one approval was enough
    rig.start(policy(gates={"publish": gate_on(["dana", "erin"], quorum=2)}))

    again = paused(rig.run(rig.agent(PUBLISHER), Command(resume=before), identity))
    assert rig.ran == []  # one of two: not yet
    request = again["request"]
    assert request["id"] == asked["request"]["id"] and request["quorum"] == 2
    assert request["approved_by"] == [KEYS["dana"].did]
    [listed] = rig.listed(capsys)
    assert (listed["id"], listed["quorum"], listed["approved_by"]) == (request["id"], 2, [KEYS["dana"].did])

    done = finished(rig.run(rig.agent(PUBLISHER), Command(resume=sign(again, "erin")), identity))
    assert done.content == "Done." and rig.ran == ["publish:reports/final"]
    assert [m.status for m in tool_messages(rig.run(rig.agent(PUBLISHER), None, identity))] == ["success"]
    assert rig.ran == ["publish:reports/final"]  # the finished run, invoked again, runs nothing
    allowed = [e for e in log(rig) if e.kind == "allow" and e.resource == "tool:publish"]
    assert [e.approver for e in allowed] == [dids("dana", "erin")]
    assert states(rig) == {request["id"]: "consumed"} and rig.listed(capsys) == []
    assert every_request_answered(rig)
    verified(rig)


@pytest.mark.parametrize("voted", [False, True], ids=["no-vote-yet", "one-vote-before"])
def test_a_lowered_quorum_lets_the_call_run(
    rig: Rig, voted: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    identity = begin(rig, policy(gates={"publish": gate_on(["dana", "erin"], quorum=2)}))
    asked = paused(rig.run(rig.agent(PUBLISHER), GO, identity))
    if voted:  # dana's yes counted as one of two, and the run asked for the second
        asked = paused(rig.run(rig.agent(PUBLISHER), Command(resume=sign(asked, "dana")), identity))
        assert asked["request"]["approved_by"] == [KEYS["dana"].did]
    rig.start(policy(gates={"publish": gate_on(["dana", "erin"], quorum=1)}))
    # Without a vote: dana's approval made before the change. With one: erin's, made after it
    # (dana's own, replayed by LangGraph to the node, already completes the lowered quorum).
    answer = sign(asked, "erin" if voted else "dana")

    finished(rig.run(rig.agent(PUBLISHER), Command(resume=answer), identity))
    assert rig.ran == ["publish:reports/final"]
    assert set(states(rig).values()) == {"consumed"} and rig.listed(capsys) == []
    given = [e.approver for e in log(rig) if e.kind == "approval_given"]
    assert given == [KEYS["dana"].did]  # one counted yes, recorded once
    assert every_request_answered(rig)
    verified(rig)


def test_an_approver_removed_is_not_counted_and_the_new_one_is_asked(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    identity = begin(rig, policy())
    asked = paused(rig.run(rig.agent(PUBLISHER), GO, identity))
    before = sign(asked, "dana")
    rig.start(policy(gates={"publish": gate_on(["erin"])}))

    again = paused(rig.run(rig.agent(PUBLISHER), Command(resume=before), identity))
    assert rig.ran == [] and again["request"]["id"] == asked["request"]["id"]
    assert again["request"]["approvers"] == ["erin"]
    assert [row["id"] for row in rig.listed(capsys)] == [asked["request"]["id"]]

    finished(rig.run(rig.agent(PUBLISHER), Command(resume=sign(again, "erin")), identity))
    assert rig.ran == ["publish:reports/final"]
    allowed = [e for e in log(rig) if e.kind == "allow" and e.resource == "tool:publish"]
    assert [e.approver for e in allowed] == [KEYS["erin"].did]
    assert rig.listed(capsys) == [] and every_request_answered(rig)
    verified(rig)


def test_a_removed_gate_lets_the_call_run_without_asking(
    lite: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    identity = begin(lite, policy())
    asked = paused(lite.run(lite.agent(PUBLISHER), GO, identity))
    lite.start(policy(gates={}))
    finished(lite.run(lite.agent(PUBLISHER), Command(resume=sign(asked, "dana")), identity))
    assert lite.ran == ["publish:reports/final"]
    allowed = [e for e in log(lite) if e.kind == "allow" and e.resource == "tool:publish"]
    assert [e.approver for e in allowed] == [None]
    # As documented (docs/policy-reference.md, "Changing a policy"): the old request stays
    # listed until it expires; the approval was never used.
    assert [row["id"] for row in lite.listed(capsys)] == [asked["request"]["id"]]
    verified(lite)


def test_a_gate_added_asks_only_for_calls_decided_after_the_change(lite: Rig) -> None:
    """Under the old policy only publish is gated. A search that ran before the pause, in an
    earlier step or in the same step as the paused publish, is not run again nor asked for;
    a search the model asks for after the resume is asked for under the new gate."""
    turns = [
        calls(SEARCH),
        calls(PUBLISH, ("search", {"query": "same step"}), turn=1),
        calls(("search", {"query": "later"}), turn=2),
    ]
    identity = begin(lite, policy())
    asked = paused(lite.run(lite.agent(turns), GO, identity))
    assert lite.ran == ["search:kv cache", "search:same step"]
    lite.start(policy(gates={"publish": PUBLISH_GATE, "search": gate_on(["dana"], resource="tool:search")}))

    later = paused(lite.run(lite.agent(turns), Command(resume=sign(asked, "dana")), identity))
    assert later["request"]["resource"] == "tool:search" and later["request"]["call_id"] == "search-2-0"
    assert lite.ran == ["search:kv cache", "search:same step", "publish:reports/final"]
    finished(lite.run(lite.agent(turns), Command(resume=sign(later, "dana")), identity))
    assert lite.ran[-1] == "search:later" and len(lite.ran) == 4
    asked_for = [e.resource for e in log(lite) if e.kind == "approval_required"]
    assert asked_for == ["tool:publish", "tool:search"]
    assert every_request_answered(lite)
    verified(lite)


def test_two_waiting_calls_resumed_together_each_as_the_new_policy_says(lite: Rig) -> None:
    """Two gated publishes in one turn; the new policy allows only one of them (prefix
    ``reports/a``): one answer per interrupt, the allowed one runs, the other is refused."""
    turns = [calls(("publish", {"path": "reports/a"}), ("publish", {"path": "reports/b"}))]
    identity = begin(lite, policy())
    result = lite.run(lite.agent(turns), GO, identity)
    answers = {i.id: sign(i.value, "dana") for i in result["__interrupt__"]}
    assert len(answers) == 2
    lite.start(policy(prefix="reports/a"))

    done = lite.run(lite.agent(turns), Command(resume=answers), identity)
    finished(done)
    assert lite.ran == ["publish:reports/a"]
    by_id = {m.tool_call_id: m for m in tool_messages(done)}
    assert by_id["publish-0-0"].status == "success" and by_id["publish-0-1"].status == "error"
    assert 'does not satisfy path starts with "reports/a"' in str(by_id["publish-0-1"].content)
    verified(lite)


# --- the call itself no longer allowed -----------------------------------------------------------

REFUSING = {
    "rule-narrowed": (dict(prefix="drafts/"), 'does not satisfy path starts with "drafts/"'),
    "principal-removed": (dict(supervisor=False), "is not a principal of this policy"),
    "anchor-rotated": (dict(anchor="root2"), "authority_chain_opacity/untrusted_root"),
}


@pytest.mark.parametrize("change", list(REFUSING))
def test_a_call_the_new_policy_refuses_is_refused_on_resume(rig: Rig, change: str) -> None:
    changes, why = REFUSING[change]
    identity = begin(rig, policy())
    asked = paused(rig.run(rig.agent(PUBLISHER), GO, identity))
    rig.start(policy(**changes))

    done = rig.run(rig.agent(PUBLISHER), Command(resume=sign(asked, "dana")), identity)
    last = finished(done)
    assert rig.ran == []
    (refused,) = tool_messages(done)
    assert refused.status == "error" and why in str(refused.content)
    if change != "rule-narrowed":  # every later call of this identity is refused: the model too
        assert why in str(last.content)
    assert "consumed" not in states(rig).values()
    kinds = [(e.kind, e.resource) for e in log(rig)]
    assert ("deny", "tool:publish") in kinds and ("allow", "tool:publish") not in kinds
    verified(rig)


@pytest.mark.parametrize("change", list(REFUSING))
def test_a_call_refused_on_resume_leaves_no_request_pending(
    tmp_path: Path, change: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rig = Rig(tmp_path, "sqlite", "sync")
    try:
        identity = begin(rig, policy())
        asked = paused(rig.run(rig.agent(PUBLISHER), GO, identity))
        rig.start(policy(**REFUSING[change][0]))
        finished(rig.run(rig.agent(PUBLISHER), Command(resume=sign(asked, "dana")), identity))
        assert rig.ran == []
        assert rig.listed(capsys) == []
        assert every_request_answered(rig)
    finally:
        rig.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_call_refused_on_resume_after_a_revocation_answers_its_request(tmp_path: Path, mode: str) -> None:
    """Review R55: a run paused for approval whose grant was revoked meanwhile, then resumed
    with the approval, was refused with a ``deny`` that referred to nothing (the request, void,
    was not found open), and the request stayed ``pending`` in the table. The ``deny`` now refers
    to its ``approval_required`` entry and the request is closed."""
    rig = Rig(tmp_path, "sqlite", mode)
    try:
        identity = begin(rig, policy())
        asked = paused(rig.run(rig.agent(PUBLISHER), GO, identity))
        assert rig.gate is not None
        rig.gate.revoke(identity, reason="key leaked")
        done = rig.run(rig.agent(PUBLISHER), Command(resume=sign(asked, "dana")), identity)
        finished(done)
        assert rig.ran == []
        assert "revoked" in str(tool_messages(done)[0].content)
        assert every_request_answered(rig)
        assert set(states(rig).values()) == {"denied"}
        verified(rig)
    finally:
        rig.close()


# --- sub-agents ----------------------------------------------------------------------------------

DELEGATING = [calls(("ask_researcher", {"task": "find and publish"}))]


def test_a_narrowed_delegation_rule_refuses_the_resumed_delegation(rig: Rig) -> None:
    identity = begin(rig, policy())
    asked = paused(rig.run(rig.agent(DELEGATING, [rig.ask_researcher()]), GO, identity))
    assert asked["request"]["requester"] == "researcher" and rig.ran == ["search:kv cache"]
    rig.start(policy(delegable=[{"resource": "tool:search"}, {"resource": "model:scripted"}]))

    done = rig.run(
        rig.agent(DELEGATING, [rig.ask_researcher()]), Command(resume=sign(asked, "dana")), identity
    )
    finished(done)
    (refused,) = tool_messages(done)
    assert refused.status == "error" and "scope_creep/delegation_wider_than_policy" in str(refused.content)
    assert rig.ran == ["search:kv cache"]  # the publish never ran, nor did the search again
    assert [e.kind for e in log(rig) if e.resource == "agent:researcher"] == ["allow", "deny"]
    verified(rig)


def test_a_sub_agent_resumed_after_a_restart_keeps_its_grant_and_is_asked_under_the_new_policy(
    lite: Rig,
) -> None:
    """Documented (docs/langgraph.md, Approvals): after a restart the sub-agent resumes on the
    grant it was delegated (found in the store by its tool call), and its approval is asked for
    again only because the new policy names another approver, whose vote then lets it run."""
    identity = begin(lite, policy())
    asked = paused(lite.run(lite.agent(DELEGATING, [lite.ask_researcher()]), GO, identity))
    lite.start(policy(gates={"publish": gate_on(["erin"])}))
    ask = lite.ask_researcher()  # one per process

    again = paused(lite.run(lite.agent(DELEGATING, [ask]), Command(resume=sign(asked, "dana")), identity))
    assert again["request"]["requester"] == "researcher" and again["request"]["approvers"] == ["erin"]
    assert again["request"]["grant"] == asked["request"]["grant"] and lite.ran == ["search:kv cache"]
    done = lite.run(lite.agent(DELEGATING, [ask]), Command(resume=sign(again, "erin")), identity)
    finished(done)
    assert [m.status for m in tool_messages(done)] == ["success"]
    assert lite.ran == ["search:kv cache", "publish:reports/final"]
    verified(lite)


def test_a_sub_agent_resumed_by_another_process_each_time_completes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rig = Rig(tmp_path, "sqlite", "sync")
    try:
        identity = begin(rig, policy())
        asked = paused(rig.run(rig.agent(DELEGATING, [rig.ask_researcher()]), GO, identity))
        for _ in range(2):  # each answer reaches a process that did not ask
            rig.start(policy())
            result = rig.run(
                rig.agent(DELEGATING, [rig.ask_researcher()]), Command(resume=sign(asked, "dana")), identity
            )
            if "__interrupt__" not in result:
                break
            asked = paused(result)
        finished(result)
        assert rig.ran == ["search:kv cache", "publish:reports/final"]
        assert rig.listed(capsys) == []
    finally:
        rig.close()


@pytest.mark.parametrize("change", ["principal-removed", "anchor-rotated"])
def test_an_identity_the_new_policy_disowns_ends_the_run_with_ungated_models(lite: Rig, change: str) -> None:
    """With ``gate_models=False`` the model is not asked again after a refusal that every later
    call of the identity gets too (its principal removed, its root no longer a trust anchor), as
    for a revoked grant (docs/langgraph.md, Revocation): a real model would keep proposing calls
    that can only be refused."""
    turns = [calls(PUBLISH), calls(SEARCH, turn=1), calls(SEARCH, turn=2)]

    def build(saver: Any) -> Any:
        assert lite.gate is not None
        return create_gated_agent(
            lite.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=turns),
            tools=lite.tools(),
            checkpointer=saver,
            gate_models=False,
        )

    changes, why = REFUSING[change]
    identity = begin(lite, policy())
    asked = paused(lite.run(build, GO, identity))
    lite.start(policy(**changes))
    done = lite.run(build, Command(resume=sign(asked, "dana")), identity)
    last = finished(done)
    assert why in str(last.content) and lite.ran == []
    assert [m.name for m in tool_messages(done)] == ["publish"]  # the model was not asked for more
    assert [e.resource for e in log(lite) if e.kind == "deny"] == ["tool:publish"]
    verified(lite)


def supervisor_ungated(rig: Rig, turns: list[AIMessage], tools: list[BaseTool]) -> Callable[[Any], Any]:
    def build(saver: Any) -> Any:
        assert rig.gate is not None
        return create_gated_agent(
            rig.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=turns),
            tools=tools,
            checkpointer=saver,
            gate_models=False,
        )

    return build


def test_a_delegation_resumed_after_the_supervisor_was_removed_ends_the_run(lite: Rig) -> None:
    turns = [*DELEGATING, calls(("ask_researcher", {"task": "try again"}), turn=1)]
    identity = begin(lite, policy())
    asked = paused(lite.run(supervisor_ungated(lite, turns, [lite.ask_researcher()]), GO, identity))
    lite.start(policy(supervisor=False))
    build = supervisor_ungated(lite, turns, [lite.ask_researcher()])
    done = lite.run(build, Command(resume=sign(asked, "dana")), identity)
    last = finished(done)
    (refused,) = tool_messages(done)  # the model was not asked for a second delegation
    assert refused.status == "error" and "delegation_not_in_policy" in str(refused.content)
    assert "delegation_not_in_policy" in str(last.content) and lite.ran == ["search:kv cache"]
    assert [e.kind for e in log(lite) if e.resource == "agent:researcher"] == ["allow", "deny"]
    verified(lite)


def test_a_delegation_from_a_chain_whose_anchor_was_rotated_out_is_refused(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "sqlite", "sync")
    try:
        identity = begin(rig, policy())
        asked = paused(rig.run(rig.agent(DELEGATING, [rig.ask_researcher()]), GO, identity))
        rig.start(policy(anchor="root2"))
        done = rig.run(
            rig.agent(DELEGATING, [rig.ask_researcher()]), Command(resume=sign(asked, "dana")), identity
        )
        finished(done)
        assert rig.ran == ["search:kv cache"]
        assert [e.kind for e in log(rig) if e.resource == "agent:researcher"] == ["allow", "deny"]
    finally:
        rig.close()
