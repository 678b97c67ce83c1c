"""The public Python API used wrongly: what a script that calls agentgate with a
wrong type, an out-of-range value or a closed object gets back.

The contract (docs, ``agentgate/errors.py``): bad input gives a typed error from the agentgate
tree that says what was wrong; never a bare ``TypeError``/``AttributeError`` from deep inside,
never a partial write to the store or the audit log, never an allow. Every test here uses a real
``Gate`` over a real SQLite file and counts the audit entries and the store rows around each
misuse.

Found and fixed by the lead in review r38 (plain tests now):

- ``Gate.run`` ran whatever ``Authorization`` it was handed: one built by hand, a deny turned into
  an allow with ``dataclasses.replace``, or an allow of one call whose ``call`` was replaced by
  another (an ``ok`` outcome referring to a ``deny`` entry). An allow now carries the seal of the
  Gate that decided it (``_Once.sealed``), which ``Gate.run``/``arun``/``abandon`` compare.
- An ``AgentIdentity`` built with the agent's *public* key was allowed: ``Authority.decide_held``
  took any object with a ``did`` as the holder's key. It is now a deny
  (``implicit_trust_inheritance holder_key_missing``).
- ``Gate.issue`` accepted a name that is not text and recorded ``agent:None``; ``Gate.delegate``
  turned a zero or negative ``ttl`` into a live one-second grant; ``open_store`` took
  ``postgresql:/db`` or ``sqlite:agentgate.db`` as a file name. Each is now an error.

Also fixed in review r38, by two helpers (tests/test_api_types_core.py and
tests/test_api_types_gate.py hold their own tests); each was an ``xfail`` here:

- Wrong types at ``Gate``'s entry points end in a bare ``AttributeError``/``TypeError``: a
  ``PublicKey`` where a ``SigningKey`` goes (``issue``, ``delegate``, ``approve``),
  ``capabilities=None``, a ``Chain`` for the parent, a call that is a dict, the dict that
  ``Gate.approve`` returns passed as ``approval=``, an int ``call_id``/``run_id``, ``revoke(...,
  reason=None)``, an identity or authorization that is a string (nothing is written for these).
- A string where a list is expected (``capabilities="tool:x"``, ``Gate(trust_anchors=DID)``) is
  iterated character by character: a typed error, but about resource ``'t'`` or did ``'d'``.
- ``parse_policy``/``load_policy``/``PolicyIndex``/``Gate.open`` with ``None``, an int or a dict;
  ``Capability.of``/``Capability``/``covers`` with non-text; ``Call.model(None)`` (accepted as
  ``model:None``); ``SigningKey``/``load_signing_key``/``load_public_key``/``sign`` with non-bytes
  or ``None``; ``SyncScheduler.submit``/``Scheduler.submit`` with a call that is not a ``ToolCall``;
  ``ToolCall(arguments=[...])``; ``authority.issue`` with a ``PublicKey`` issuer or an int budget;
  ``verify_chain``/``Authority.decide`` with ``None`` or a NaN ``now``: bare errors.
- ``GateMiddleware(gate, agent=None)`` is accepted and switches off the inherited-identity check;
  ``delegation_tool`` accepts ``ttl=60``, a negative ttl, a ``PublicKey`` and ``gate=None`` and
  fails only when the supervisor calls it.

What holds (plain tests): a closed Gate refuses every call with ``StoreError`` (from several
threads too) and a second ``close`` is a no-op; bad ``tokens`` give ``InputError`` and write
nothing; arguments with non-text keys, NaN, bytes or objects are recorded refusals, never allows;
``revoke`` of ``None``/bytes/garbage is a ``TokenFormatError`` that writes nothing; an identity
from another Gate's policy is refused and audited; the scheduler refuses bad priorities and
naive, NaN or non-time deadlines; odd store URLs with ``://`` are ``StoreError``; and the
``assert`` statements on the decision path are not guards: under ``python -O`` a call with no
identity is still a recorded refusal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentgate.authority import Authority, GrantRepository, Invocation, issue, verify_chain
from agentgate.capabilities import Call, Capability, covers
from agentgate.errors import (
    AgentGateError,
    AuthorityError,
    CapabilityError,
    Denied,
    InputError,
    PolicyError,
    SchedulingError,
    StoreError,
    TokenFormatError,
)
from agentgate.gate import AgentIdentity, Authorization, Gate
from agentgate.keys import SigningKey, load_public_key, load_signing_key
from agentgate.policy import PolicyIndex, load_policy, parse_policy
from agentgate.store import SQLiteStore, open_store
from agentgate.tasks import Scheduler, SchedulerConfig, SyncScheduler, ToolCall

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}, note: {{type: string}}}}
    idempotent: true
  refund:
    args: {{amount: {{type: integer, required: true}}}}
    loggable: [amount]
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 2000000}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:refund
        constraints: {{amount: {{le: 1000}}}}
      - resource: model:small
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

TABLES = (
    "agentgate_grants",
    "agentgate_revocations",
    "budget_reservations",
    "agentgate_once",
    "approvals",
)
"""Store tables a misuse must leave untouched (the audit log is counted by its size)."""


class World:
    """A Gate over a real SQLite file, its keys, and one issued agent identity."""

    def __init__(self, path: Path) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "helper")}
        self.policy = parse_policy(
            POLICY.format(**{n: k.did for n, k in self.keys.items()}), source="api.yaml"
        )
        self.gate = Gate(self.policy, SQLiteStore(path / "agentgate.db"))
        self.agent = self.gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")

    def snapshot(self) -> tuple[int, ...]:
        """The audit log's size and the row count of each table in ``TABLES``."""
        self.gate.flush()
        counts = [self.gate.store.query(f"SELECT count(*) FROM {t}")[0][0] for t in TABLES]
        return (self.gate.audit.size(), *counts)

    def outcomes(self) -> list[Any]:
        self.gate.flush()
        return [e for e in self.gate.audit.entries() if e.kind == "outcome"]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(tmp_path)
    yield made
    made.gate.close()


def _typed_and_nothing_written(world: World, misuse: Callable[[World], object]) -> AgentGateError:
    """Run ``misuse``; it must raise an agentgate error and leave the audit log and store as they were."""
    before = world.snapshot()
    with pytest.raises(AgentGateError) as raised:
        misuse(world)
    assert world.snapshot() == before
    return raised.value


# --- never an allow: what Gate.run and the authority engine trust ----------------------------------


def _forged(world: World) -> Authorization:
    return Authorization("allow", Call.tool("refund", {"amount": 999_999}), world.agent, audit_index=0)


def _deny_made_allow(world: World) -> Authorization:
    denied = world.gate.authorize(world.agent, Call.tool("refund", {"amount": 5000}))
    assert denied.verdict == "deny"
    return dataclasses.replace(denied, verdict="allow")


def _allow_for_another_call(world: World) -> Authorization:
    allowed = world.gate.authorize(world.agent, Call.tool("lookup", {"id": "1"}))
    assert allowed.allowed
    return dataclasses.replace(allowed, call=Call.tool("refund", {"amount": 10**6}))


@pytest.mark.parametrize("make", [_forged, _deny_made_allow, _allow_for_another_call])
def test_gate_run_refuses_an_authorization_it_did_not_decide(
    world: World, make: Callable[[World], Authorization]
) -> None:
    auth = make(world)
    ran: list[str] = []
    before = len(world.outcomes())
    with pytest.raises(Denied):
        world.gate.run(auth, lambda: ran.append("refund"))
    assert ran == []
    assert len(world.outcomes()) == before  # no outcome recorded for a call that was never decided


def test_an_identity_with_only_the_public_key_is_never_allowed(world: World) -> None:
    ran: list[str] = []
    try:
        keyless = AgentIdentity("agent", world.keys["agent"].public, world.agent.chain)  # type: ignore[arg-type]
        auth = world.gate.authorize(keyless, Call.tool("lookup", {"id": "1"}))
        if auth.allowed:
            world.gate.run(auth, lambda: ran.append("lookup"))
    except AgentGateError:
        pass
    assert ran == []


def test_authority_decide_held_with_a_public_key_is_not_an_allow(tmp_path: Path) -> None:
    root, agent = SigningKey.generate(), SigningKey.generate()
    store = SQLiteStore(tmp_path / "a.db")
    try:
        engine = Authority(GrantRepository(store), [root.public])
        chain = issue(root, agent.public, ["tool:x"], ttl=60)
        assert engine.decide_held(agent, chain, Call.tool("x")).allowed  # the private key: allowed
        try:
            decision = engine.decide_held(agent.public, chain, Call.tool("x"))  # type: ignore[arg-type]
        except AgentGateError:
            return
        assert not decision.allowed
    finally:
        store.close()


# --- values accepted and written that are not what the parameter takes ------------------------------


@pytest.mark.parametrize(
    "extra",
    [{"name": None}, {"name": 5}, {"name": b"agent2"}, {"name": ""}, {"name": "x", "tenant": ["a", "b"]}],
    ids=["name-None", "name-int", "name-bytes", "name-empty", "tenant-list"],
)
def test_issue_refuses_a_name_or_tenant_that_is_not_text(world: World, extra: dict[str, Any]) -> None:
    kwargs: dict[str, Any] = {"name": "x", "key": world.keys["helper"], "role": "worker", **extra}
    error = _typed_and_nothing_written(world, lambda w: w.gate.issue(w.keys["root"], **kwargs))
    assert isinstance(error, InputError)


@pytest.mark.parametrize("verb", ["issue", "delegate"])
def test_a_name_that_is_not_valid_unicode_is_refused_naming_the_name(world: World, verb: str) -> None:
    """A name with a lone surrogate (a hostile model's text) failed only when the grant's purpose
    was signed (``TokenFormatError``: "value cannot be encoded canonically", not naming ``name``)
    or its audit entry encoded, after the grant's span had begun."""

    def misuse(w: World) -> object:
        if verb == "issue":
            return w.gate.issue(w.keys["root"], name="sub\ud800", key=w.keys["helper"], role="worker")
        return _delegate(w, name="sub\ud800")

    error = _typed_and_nothing_written(world, misuse)
    assert type(error) is InputError and "name must be valid Unicode text" in str(error)


@pytest.mark.parametrize("ttl", [timedelta(0), timedelta(seconds=-60)], ids=["zero", "negative"])
def test_delegate_refuses_a_ttl_that_is_not_positive(world: World, ttl: timedelta) -> None:
    error = _typed_and_nothing_written(
        world,
        lambda w: w.gate.delegate(
            w.agent, name="sub", key=w.keys["helper"], capabilities=["tool:lookup"], ttl=ttl
        ),
    )
    assert isinstance(error, InputError)


def test_delegate_with_a_positive_ttl_still_works(world: World) -> None:
    """The control for the test above: the same delegation with a ttl of a minute is made."""
    child = world.gate.delegate(
        world.agent,
        name="sub",
        key=world.keys["helper"],
        capabilities=["tool:lookup"],
        ttl=timedelta(minutes=1),
    )
    assert world.gate.authorize(child, Call.tool("lookup", {"id": "1"})).allowed


# --- wrong types at the Gate's entry points: bare errors ------------------------------------------------


def _delegate(w: World, **changes: Any) -> object:
    kwargs: dict[str, Any] = {
        "name": "sub",
        "key": w.keys["helper"],
        "capabilities": ["tool:lookup"],
        "ttl": timedelta(seconds=60),
    }
    parent = changes.pop("parent", w.agent)
    return w.gate.delegate(parent, **{**kwargs, **changes})


def _approved_as_dict(w: World) -> object:
    """The value ``Gate.approve`` returns (what a LangGraph resume carries), passed as ``approval=``."""
    asked = w.gate.authorize(w.agent, Call.tool("refund", {"amount": 500}), call_id="c1")
    assert asked.needs_approval
    approval = w.gate.approve(asked.approval_payload(), w.keys["lead"])
    return w.gate.authorize(w.agent, Call.tool("refund", {"amount": 500}), call_id="c1", approval=approval)  # type: ignore[arg-type]


GATE_MISUSES: dict[str, Callable[[World], object]] = {
    "issue-anchor-PublicKey": lambda w: w.gate.issue(
        w.keys["root"].public,  # type: ignore[arg-type]
        name="x",
        key=w.keys["helper"],
        role="worker",
    ),
    "issue-key-PublicKey": lambda w: w.gate.issue(
        w.keys["root"],
        name="x",
        key=w.keys["helper"].public,  # type: ignore[arg-type]
        role="worker",
    ),
    "issue-anchor-did": lambda w: w.gate.issue(
        w.keys["root"].did,  # type: ignore[arg-type]
        name="x",
        key=w.keys["helper"],
        role="worker",
    ),
    "delegate-ttl-int": lambda w: _delegate(w, ttl=60),
    "delegate-ttl-None": lambda w: _delegate(w, ttl=None),
    "delegate-capabilities-None": lambda w: _delegate(w, capabilities=None),
    "delegate-parent-Chain": lambda w: _delegate(w, parent=w.agent.chain),
    "delegate-key-PublicKey": lambda w: _delegate(w, key=w.keys["helper"].public),
    "authorize-call-dict": lambda w: w.gate.authorize(w.agent, {"resource": "tool:lookup"}),  # type: ignore[arg-type]
    "authorize-identity-Chain": lambda w: w.gate.authorize(w.agent.chain, Call.tool("lookup", {"id": "1"})),  # type: ignore[arg-type]
    "authorize-approval-dict": _approved_as_dict,
    "authorize-call_id-int": lambda w: w.gate.authorize(
        w.agent,
        Call.tool("refund", {"amount": 5}),
        call_id=5,  # type: ignore[arg-type]
    ),
    "authorize-run_id-int": lambda w: w.gate.authorize(
        w.agent,
        Call.tool("refund", {"amount": 5}),
        call_id="c",
        run_id=7,  # type: ignore[arg-type]
    ),
    "approve-approver-PublicKey": lambda w: w.gate.approve(
        {"id": "r", "call_hash": "h"},
        w.keys["lead"].public,  # type: ignore[arg-type]
    ),
    "approve-payload-None": lambda w: w.gate.approve(None, w.keys["lead"]),  # type: ignore[arg-type]
    "revoke-reason-None": lambda w: w.gate.revoke(w.agent, reason=None),  # type: ignore[arg-type]
    "revoke-by-None": lambda w: w.gate.revoke(w.agent, by=None),  # type: ignore[arg-type]
    "budget_usage-str": lambda w: w.gate.budget_usage("agent"),  # type: ignore[arg-type]
    "tenant_of-None": lambda w: w.gate.tenant_of(None),  # type: ignore[arg-type]
    "decline-str": lambda w: w.gate.decline("agent"),  # type: ignore[arg-type]
    "run-None": lambda w: w.gate.run(None, lambda: 1),  # type: ignore[arg-type]
    "abandon-str": lambda w: w.gate.abandon("auth"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize(
    "misuse",
    [pytest.param(misuse, id=name) for name, misuse in GATE_MISUSES.items()],
)
def test_gate_entry_points_give_typed_errors_for_wrong_types(
    world: World, misuse: Callable[[World], object]
) -> None:
    before = world.snapshot()
    try:
        answer = misuse(world)
    except AgentGateError:
        assert world.snapshot() == before
        return
    # An authorize may answer with a recorded refusal instead; never with an allow.
    assert isinstance(answer, Authorization) and not answer.allowed


def test_wrong_types_at_the_gate_write_nothing_and_allow_nothing(world: World) -> None:
    """What the test above leaves out: whatever each misuse raises, it raises before any
    write (no grant, revocation, reservation, approval or audit entry) and nothing is allowed."""
    for name, misuse in GATE_MISUSES.items():
        before: tuple[int, ...] | None = world.snapshot()
        if name == "authorize-approval-dict":
            before = None  # the approval request itself is recorded before the misuse
        try:
            answer = misuse(world)
        except Exception:
            answer = None
        assert not (isinstance(answer, Authorization) and answer.allowed), name
        if before is not None:
            assert world.snapshot() == before, name


@pytest.mark.parametrize("where", ["capabilities", "trust_anchors"])
def test_a_string_where_a_list_goes_is_named_as_such(world: World, where: str, tmp_path: Path) -> None:
    if where == "capabilities":
        error = _typed_and_nothing_written(world, lambda w: _delegate(w, capabilities="tool:lookup"))
    else:
        with pytest.raises(AgentGateError) as raised:
            Gate(world.policy, SQLiteStore(tmp_path / "b.db"), trust_anchors=world.keys["root"].did)
        error = raised.value
    assert where in str(error)


def test_a_string_where_a_list_goes_is_refused_typed_and_writes_nothing(world: World, tmp_path: Path) -> None:
    """Holds today: one character is never a capability nor a did, so the misuse cannot grant."""
    error = _typed_and_nothing_written(world, lambda w: _delegate(w, capabilities="tool:lookup"))
    assert isinstance(error, CapabilityError)
    with pytest.raises(TokenFormatError):
        Gate(world.policy, SQLiteStore(tmp_path / "b.db"), trust_anchors=world.keys["root"].did)


# --- what holds at the Gate ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tokens",
    [(-1, 5), (5, -1), (True, 1), (1.5, 1), (math.nan, 1), 5, (1, 2, 3), "12"],
    ids=["neg-prompt", "neg-output", "bool", "float", "nan", "int", "triple", "str"],
)
def test_bad_token_counts_are_an_input_error_and_write_nothing(world: World, tokens: object) -> None:
    error = _typed_and_nothing_written(
        world,
        lambda w: w.gate.authorize(w.agent, Call.model("small"), tokens=tokens),  # type: ignore[arg-type]
    )
    assert isinstance(error, InputError)


@pytest.mark.parametrize(
    "args",
    [
        {1: "x", "id": "1"},
        {None: "x", "id": "1"},
        {(1, 2): "x", "id": "1"},
        {b"id": "1"},
        {"id": b"1"},
        {"id": "1", "note": object()},
        {"id": "1", "note": {1, 2}},
        {"id": "1", "note": datetime.now()},
    ],
    ids=["int-key", "None-key", "tuple-key", "bytes-key", "bytes-value", "object", "set", "datetime"],
)
def test_arguments_that_are_not_json_are_a_recorded_refusal(world: World, args: dict[Any, Any]) -> None:
    size = world.snapshot()[0]
    auth = world.gate.authorize(world.agent, Call.tool("lookup", args))
    assert not auth.allowed and auth.audit_index is not None
    assert world.snapshot()[0] == size + 1  # the refusal, and only it


@pytest.mark.parametrize("amount", [math.nan, math.inf, -math.inf, True])
def test_a_non_finite_or_boolean_amount_is_refused(world: World, amount: object) -> None:
    assert not world.gate.authorize(world.agent, Call.tool("refund", {"amount": amount})).allowed


@pytest.mark.parametrize("grant", [None, 5, b"abc", "", "deadbeef"])
def test_revoking_what_is_not_a_grant_is_a_token_error_and_writes_nothing(
    world: World, grant: object
) -> None:
    error = _typed_and_nothing_written(world, lambda w: w.gate.revoke(grant))  # type: ignore[arg-type]
    assert isinstance(error, TokenFormatError)


def test_an_identity_from_another_policys_gate_is_refused_and_audited(world: World, tmp_path: Path) -> None:
    other = World(tmp_path / "other")
    try:
        size = world.snapshot()[0]
        assert not world.gate.authorize(other.agent, Call.tool("lookup", {"id": "1"})).allowed
        with pytest.raises(AuthorityError) as refused:
            world.gate.delegate(
                other.agent,
                name="sub",
                key=world.keys["helper"],
                capabilities=["tool:lookup"],
                ttl=timedelta(seconds=60),
            )
        assert refused.value.audit_index is not None
        assert world.snapshot()[0] == size + 2
    finally:
        other.gate.close()


def test_a_closed_gate_refuses_everything_typed_from_any_thread(tmp_path: Path) -> None:
    world = World(tmp_path)
    gate, agent = world.gate, world.agent
    gate.close()
    gate.close()  # idempotent
    calls: list[Callable[[], object]] = [
        lambda: gate.authorize(agent, Call.tool("lookup", {"id": "1"})),
        # A key the policy names: Gate.issue refuses another before the store (review R58).
        lambda: gate.issue(world.keys["root"], name="x", key=world.keys["agent"], role="worker"),
        lambda: gate.delegate(
            agent,
            name="sub",
            key=world.keys["helper"],
            capabilities=["tool:lookup"],
            ttl=timedelta(seconds=60),
        ),
        lambda: gate.revoke(agent),
        lambda: gate.budget_usage(agent),
        gate.verify,
    ]
    for call in calls:
        with pytest.raises(StoreError):
            call()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            gate.authorize(agent, Call.tool("lookup", {"id": "1"}))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 4 and all(isinstance(e, StoreError) for e in errors)
    with SQLiteStore(tmp_path / "agentgate.db") as store:  # the file: only the grant's entry
        assert store.query("SELECT count(*) FROM audit_log")[0][0] == 1


def test_assert_statements_are_not_the_guard_under_python_O(tmp_path: Path) -> None:
    """``Gate.authorize`` has ``assert identity is not None``; under ``-O`` asserts vanish, and a call
    with no identity must still be a recorded refusal (``_precheck`` is the guard), a delegation
    with no parent still a ``Denied``."""
    code = f"""
import sys
from datetime import timedelta
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_api_misuse import World
from agentgate.capabilities import Call
from agentgate.errors import Denied
w = World(Path({str(tmp_path)!r}))
auth = w.gate.authorize(None, Call.tool("lookup", {{"id": "1"}}))
print("identity-none", auth.verdict, auth.audit_index is not None)
try:
    w.gate.delegate(None, name="s", key=w.keys["helper"], capabilities=["tool:lookup"], ttl=timedelta(seconds=5))
except Denied as exc:
    print("delegate-none denied", exc.audit_index is not None)
print("optimize", sys.flags.optimize)
w.gate.close()
"""
    result = subprocess.run(
        [sys.executable, "-O", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "identity-none deny True" in result.stdout
    assert "delegate-none denied True" in result.stdout
    assert "optimize 1" in result.stdout


# --- the store URL ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["postgresql:/agentgate", "postgres:agentgate", "sqlite:agentgate.db", "file:agentgate.db"]
)
def test_a_store_url_missing_its_slashes_is_not_a_file_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        store = open_store(url)
    except StoreError:
        assert os.listdir(tmp_path) == []
        return
    store.close()
    pytest.fail(f"{url} opened as the SQLite file {sorted(os.listdir(tmp_path))}")


@pytest.mark.parametrize(
    "url",
    [":memory:", "mysql://x", "http://x", "sqlite://", "POSTGRESQL+psycopg://x", " postgresql://x", "a\x00b"],
)
def test_store_urls_with_a_scheme_it_does_not_serve_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError):
        open_store(url)
    assert os.listdir(tmp_path) == []


# --- policy, capabilities, keys: bare errors for non-text ------------------------------------------------


POLICY_MISUSES: dict[str, Callable[[], object]] = {
    "parse-None": lambda: parse_policy(None),  # type: ignore[arg-type]
    "parse-int": lambda: parse_policy(5),  # type: ignore[arg-type]
    "parse-dict": lambda: parse_policy({"version": 1}),  # type: ignore[arg-type]
    "parse-memoryview": lambda: parse_policy(memoryview(b"version: 1\n")),  # type: ignore[arg-type]
    "parse-base_dir-int": lambda: parse_policy("version: 1\n", base_dir=5),  # type: ignore[arg-type]
    "load-None": lambda: load_policy(None),  # type: ignore[arg-type]
    "load-int": lambda: load_policy(5),  # type: ignore[arg-type]
    "index-None": lambda: PolicyIndex(None),  # type: ignore[arg-type]
    "index-evaluate-dict": lambda: PolicyIndex(parse_policy("version: 1\n")).evaluate(
        "a",
        {"resource": "tool:x"},  # type: ignore[arg-type]
    ),
    "gate-open-None": lambda: Gate.open(None),  # type: ignore[arg-type]
    "gate-policy-str": lambda: Gate("api.yaml", None),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("misuse", list(POLICY_MISUSES.values()), ids=list(POLICY_MISUSES))
def test_policy_entry_points_give_typed_errors_for_non_text(misuse: Callable[[], object]) -> None:
    with pytest.raises(AgentGateError):
        misuse()


def test_a_policy_path_that_is_not_a_file_is_a_policy_error(tmp_path: Path) -> None:
    for path in (tmp_path, tmp_path / "missing.yaml", "", b"/nonexistent.yaml"):
        with pytest.raises(PolicyError):
            load_policy(path)  # type: ignore[arg-type]


CAPABILITY_MISUSES: dict[str, Callable[[], object]] = {
    "of-None": lambda: Capability.of(None),  # type: ignore[arg-type]
    "of-int": lambda: Capability.of(5),  # type: ignore[arg-type]
    "of-action-int": lambda: Capability.of("tool:x", 5),  # type: ignore[arg-type]
    "of-constraints-list": lambda: Capability.of("tool:x", None, [("a", {"eq": 1})]),  # type: ignore[arg-type]
    "of-constraints-int-key": lambda: Capability.of("tool:x", None, {1: {"eq": 1}}),  # type: ignore[dict-item]
    "init-resource-int": lambda: Capability(5, "invoke"),  # type: ignore[arg-type]
    "init-constraints-dict": lambda: Capability("tool:x", "invoke", {"a": 1}),  # type: ignore[arg-type]
    "covers-str": lambda: covers("tool:x", Call.tool("x")),  # type: ignore[arg-type]
    "Call.model-None": lambda: Call.model(None),  # type: ignore[arg-type]
    "Call.tool-int": lambda: Call.tool(5),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("misuse", list(CAPABILITY_MISUSES.values()), ids=list(CAPABILITY_MISUSES))
def test_capability_entry_points_give_typed_errors_for_non_text(misuse: Callable[[], object]) -> None:
    with pytest.raises(CapabilityError):
        misuse()


@pytest.mark.parametrize("text", [None, b"tool:x", 5, "", "t" * 5000])
def test_capability_parse_of_non_text_is_a_capability_error(text: object) -> None:
    with pytest.raises(CapabilityError):
        Capability.parse(text)  # type: ignore[arg-type]


@pytest.mark.parametrize("args", [[("id", "1")], "id=1", None])
def test_a_call_whose_arguments_are_not_a_mapping_is_refused(args: object) -> None:
    with pytest.raises(CapabilityError):
        Call("tool:lookup", "invoke", args)  # type: ignore[arg-type]
    if args is not None:
        with pytest.raises(CapabilityError):
            Call.tool("lookup", args)  # type: ignore[arg-type]


KEY_MISUSES: dict[str, Callable[[], object]] = {
    "SigningKey-None": lambda: SigningKey(None),  # type: ignore[arg-type]
    "SigningKey-str": lambda: SigningKey("x" * 32),  # type: ignore[arg-type]
    "SigningKey-bytearray": lambda: SigningKey(bytearray(32)),  # type: ignore[arg-type]
    "load_signing_key-None": lambda: load_signing_key(None),  # type: ignore[arg-type]
    "load_public_key-None": lambda: load_public_key(None),  # type: ignore[arg-type]
    "load_public_key-SigningKey": lambda: load_public_key(SigningKey.generate()),  # type: ignore[arg-type]
    "sign-str": lambda: SigningKey.generate().sign("message"),  # type: ignore[arg-type]
    "verify-str": lambda: SigningKey.generate().public.verify("message", "s" * 64),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("misuse", list(KEY_MISUSES.values()), ids=list(KEY_MISUSES))
def test_key_entry_points_give_typed_errors_for_wrong_types(misuse: Callable[[], object]) -> None:
    with pytest.raises(AgentGateError):
        misuse()


# --- the authority engine's functions ------------------------------------------------------------------


def _authority_misuses() -> dict[str, Callable[[Path], object]]:
    root, agent = SigningKey.generate(), SigningKey.generate()
    chain = issue(root, agent.public, ["tool:x"], ttl=60)

    def engine(path: Path) -> Authority:
        return Authority(GrantRepository(SQLiteStore(path / "a.db")), [root.public])

    return {
        "issue-issuer-PublicKey": lambda _: issue(root.public, agent.public, ["tool:x"], ttl=60),  # type: ignore[arg-type]
        "issue-budget-int": lambda _: issue(root, agent.public, ["tool:x"], ttl=60, budget=5),  # type: ignore[arg-type]
        "issue-now-nan": lambda _: issue(root, agent.public, ["tool:x"], ttl=60, now=math.nan),
        "verify_chain-trusted-None": lambda _: verify_chain(chain, None),  # type: ignore[arg-type]
        "verify_chain-trusted-SigningKey": lambda _: verify_chain(chain, root),  # type: ignore[arg-type]
        "verify_chain-now-nan": lambda _: verify_chain(chain, root.public, now=math.nan),
        "verify_chain-now-inf": lambda _: verify_chain(chain, root.public, now=math.inf),
        "decide-None": lambda p: engine(p).decide(None),  # type: ignore[arg-type]
        "decide-now-nan": lambda p: engine(p).decide(
            Invocation.sign(agent, chain, Call.tool("x")), now=math.nan
        ),
        "decide_held-call-dict": lambda p: engine(p).decide_held(agent, chain, {"resource": "tool:x"}),  # type: ignore[arg-type]
        "Invocation.sign-PublicKey": lambda _: Invocation.sign(agent.public, chain, Call.tool("x")),  # type: ignore[arg-type]
    }


AUTHORITY_MISUSES = _authority_misuses()


@pytest.mark.parametrize("misuse", list(AUTHORITY_MISUSES.values()), ids=list(AUTHORITY_MISUSES))
def test_authority_functions_give_typed_errors_for_wrong_types(
    tmp_path: Path, misuse: Callable[[Path], object]
) -> None:
    with pytest.raises(AgentGateError):
        misuse(tmp_path)


# --- the scheduler ----------------------------------------------------------------------------------


def test_the_scheduler_refuses_a_bad_priority_typed() -> None:
    ran: list[int] = []
    with SyncScheduler(SchedulerConfig()) as scheduler, pytest.raises(InputError):
        scheduler.submit(ToolCall("t", priority="nope"), lambda _: ran.append(1))
    assert ran == []


# A naive datetime is refused when the call is made (review R89; before, at submit).
@pytest.mark.parametrize("deadline", [math.nan, timedelta(seconds=5), "2030-01-01", True, datetime.now()])
def test_a_deadline_that_is_not_a_time_is_an_input_error(deadline: object) -> None:
    with pytest.raises(InputError):
        ToolCall("t", deadline=deadline)  # type: ignore[arg-type]


def _submit_async(call: object) -> object:
    async def main() -> object:
        scheduler = Scheduler(SchedulerConfig())
        try:
            return await scheduler.submit(call, lambda _: 1)  # type: ignore[arg-type,return-value]
        finally:
            await scheduler.aclose()

    return asyncio.run(main())


def _submit_sync(call: object) -> object:
    with SyncScheduler(SchedulerConfig()) as scheduler:
        return scheduler.submit(call, lambda _: 1)  # type: ignore[arg-type]


SCHEDULER_MISUSES: dict[str, Callable[[], object]] = {
    "sync-submit-str": lambda: _submit_sync("t"),
    "sync-submit-None": lambda: _submit_sync(None),
    "async-submit-str": lambda: _submit_async("t"),
    "ToolCall-arguments-list": lambda: ToolCall("t", arguments=[1, 2]),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("misuse", list(SCHEDULER_MISUSES.values()), ids=list(SCHEDULER_MISUSES))
def test_scheduler_entry_points_give_typed_errors_for_wrong_types(misuse: Callable[[], object]) -> None:
    with pytest.raises(AgentGateError):
        misuse()


def test_a_closed_scheduler_refuses_typed_and_closes_twice() -> None:
    scheduler = SyncScheduler(SchedulerConfig())
    scheduler.close()
    scheduler.close()
    with pytest.raises(SchedulingError):
        scheduler.submit(ToolCall("t"), lambda _: 1)


# --- the LangGraph integration's constructors --------------------------------------------------------


def test_gate_middleware_refuses_agent_none(world: World) -> None:
    from agentgate.integrations.langgraph import GateMiddleware

    with pytest.raises(InputError):
        GateMiddleware(world.gate, agent=None)  # type: ignore[arg-type]


def test_without_an_agent_name_the_inherited_identity_check_is_off(world: World) -> None:
    """Why ``agent=None`` matters: the Gate refuses a call made on another agent's identity only when
    it is told the agent's name; with ``None`` the same call is allowed."""
    call = Call.tool("lookup", {"id": "1"})
    assert not world.gate.authorize(world.agent, call, agent="researcher").allowed
    assert world.gate.authorize(world.agent, call, agent=None).allowed


@pytest.mark.parametrize(
    "change",
    [{"ttl": 60}, {"ttl": timedelta(seconds=-5)}, {"key": "public"}, {"gate": None}],
    ids=["ttl-int", "ttl-negative", "key-PublicKey", "gate-None"],
)
def test_delegation_tool_checks_its_arguments_when_made(world: World, change: dict[str, Any]) -> None:
    from agentgate.integrations.langgraph import delegation_tool

    kwargs: dict[str, Any] = {
        "gate": world.gate,
        "name": "sub",
        "agent": object(),
        "key": world.keys["helper"],
        "capabilities": ["tool:lookup"],
        "ttl": timedelta(seconds=30),
    }
    if change.get("key") == "public":
        change = {"key": world.keys["helper"].public}
    kwargs.update(change)
    gate = kwargs.pop("gate")
    with pytest.raises(AgentGateError):
        delegation_tool(gate, **kwargs)
