"""(Lead, 2026-11-30, third session) One encoder for a call's arguments: the authority engine's
digest and the audit log's agree on every value, so no call is allowed whose arguments its audit
entry cannot record."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.audit.entry import MAX_DEPTH, argument_digest
from agentgate.authority._invocation import args_digest
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import InputError, StoreError, TokenFormatError
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store._postgres import PostgresStore
from agentgate.store.once import OnceCalls

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  bot: {{kind: agent, did: "{bot}", roles: [bot]}}
models:
  m: {{cost_per_mtok: {{input: 1000, output: 2000}}}}
roles:
  bot:
    kind: agent
    capabilities: [{{resource: model:m}}]
    budget: {{limit: 1000000000, unit: usd_micros}}
    ttl_s: 600
"""


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth - 1):
        value = [value]
    return value


def _digests(args: dict[Any, Any]) -> tuple[str | None, str | None]:
    try:
        authority: str | None = "sha256:" + args_digest(args)
    except TokenFormatError:
        authority = None
    try:
        audit: str | None = argument_digest(args)
    except InputError:
        audit = None
    return authority, audit


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
    st.sampled_from(["\ud800", "\x00", "é"]),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 3)), inner, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 3)), values, max_size=4))
def test_the_two_digests_agree_or_both_refuse(args: dict[Any, Any]) -> None:
    authority, audit = _digests(args)
    assert authority == audit


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 300])
def test_the_two_digests_agree_at_the_nesting_limit(depth: int) -> None:
    authority, audit = _digests({"a": _nested(depth)})
    assert authority == audit
    assert (authority is None) == (depth > MAX_DEPTH)  # depth - 1 lists, and the args object


def _gate(tmp_path: Path) -> tuple[Gate, AgentIdentity]:
    root, bot = SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(POLICY.format(root=root.did, bot=bot.did), source="lead3.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "store.db", synchronous="NORMAL"))
    return gate, gate.issue(root, name="bot", key=bot, role="bot")


@pytest.mark.parametrize(
    "args",
    [{"max_tokens": 5, "messages": _nested(300)}, {"max_tokens": 5, "messages": {1: "int key"}}],
    ids=["nested-300", "int-key"],
)
def test_a_call_whose_arguments_the_log_cannot_record_is_refused(
    tmp_path: Path, args: dict[Any, Any]
) -> None:
    # Before: the authority engine digested these (its encoder took any depth and int keys), the
    # call was allowed and ran, and its allow entry said "the arguments have no canonical JSON
    # form; they are not recorded": evidence of a call that does not bind its arguments.
    gate, identity = _gate(tmp_path)
    try:
        auth = gate.authorize(identity, Call.model("m", args), agent="bot", tokens=(1, 5))
        assert not auth.allowed
        assert any(f.code == "args_not_canonical" for f in auth.findings), auth.findings
        entries = [e for e in gate.audit.entries() if e.resource == "model:m"]
        assert [e.kind for e in entries] == ["deny"]
    finally:
        gate.close()


def test_an_allowed_calls_entry_carries_the_digest_the_authority_engine_computed(tmp_path: Path) -> None:
    gate, identity = _gate(tmp_path)
    args = {"max_tokens": 5, "messages": [{"role": "user", "content": "hé", "n": 1.5}]}
    try:
        auth = gate.authorize(identity, Call.model("m", args), agent="bot", tokens=(1, 5))
        assert auth.allowed and auth.decision is not None
        gate.run(auth, lambda: "ok", spent=lambda _: (1, 5))
        gate.flush()
        (entry,) = [e for e in gate.audit.entries() if e.kind == "allow" and e.resource == "model:m"]
        assert entry.args_digest == argument_digest(args) == f"sha256:{auth.decision.args_digest}"
    finally:
        gate.close()


# --- review r33's finding, fixed here (agentgate/store/_postgres.py) ---------------------------


def test_the_application_role_on_a_store_missing_new_tables_is_told_to_run_store_init(
    postgres_server: Any,
) -> None:
    """Started as the application role (no CREATE on the schema) on a store an earlier version
    wrote, a part whose table is new fails with PostgreSQL's text only ("PostgreSQL error:
    permission denied for schema public LINE 1: CREATE TABLE IF NOT EXISTS agentgate_once"),
    not saying to run ``agentgate store init`` as the owner. PostgresStore.ensure_schema is the
    one place that sees every part's DDL."""
    url = postgres_server.create_database()
    role = "r33o_" + uuid.uuid4().hex[:8]
    assert main(["store", "init", "--store", url]) == 0
    with PostgresStore(url) as owner, owner.transaction() as tx:
        tx.execute("DROP TABLE agentgate_once")  # the store as it was before the table existed
        tx.execute(f"CREATE ROLE {role} LOGIN")
        tx.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        tx.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
    app = PostgresStore(url.replace(f"postgresql://{postgres_server.user}@", f"postgresql://{role}@"))
    try:
        with pytest.raises(StoreError, match="agentgate store init"):
            OnceCalls(app)
    finally:
        app.close()
