"""``agentgate store init [--store URL]``: create every table agentgate uses, at once.
``agentgate store prune --older-than DURATION [--store URL] [--json]``: forget what has been over
for longer than DURATION (expired approval requests, settled budget reservations, dead letters,
grants that expired with their budgets and revocations), all in one transaction.

Every part of agentgate creates its tables when it is first opened. A PostgreSQL role without
CREATE on the schema (PostgreSQL 15's default for ``public``) can then not start a part whose
tables do not exist yet; the owner runs this once (and after an upgrade), then grants the
application role what it needs (docs/operations.md). Creating what exists is skipped, so it is
safe to run again. It creates no key: ``agentgate audit checkpoint`` makes the log key.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from agentgate._durations import parse_duration
from agentgate.cli import warn
from agentgate.cli._common import (
    closed_once_committed,
    open_existing_store,
    say_written,
    work_done_said,
    write_json,
)
from agentgate.cli._handlers import committed_work_held
from agentgate.cli._store_parser import register as register
from agentgate.errors import StoreError
from agentgate.store import Store, open_store
from agentgate.store.agent_names import AgentNames
from agentgate.store.approvals import ApprovalStore
from agentgate.store.audit import create_audit_tables
from agentgate.store.broker_decisions import BrokerDecisionStore
from agentgate.store.broker_leases import BrokerLeaseStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.store.grants import GrantRepository
from agentgate.store.leases import LeaseManager, SharedBreakers, SharedRateLimits
from agentgate.store.ledger import BudgetLedger
from agentgate.store.once import OnceCalls
from agentgate.store.quotas import QuotaCounter

PARTS: tuple[tuple[str, Any], ...] = (
    ("grants, revocations and nonces", GrantRepository),
    ("agent names", AgentNames),
    ("budget ledger", BudgetLedger),
    ("quotas", QuotaCounter),
    ("approvals", ApprovalStore),
    ("calls that run once", OnceCalls),
    ("dead letters", DeadLetterStore),
    ("scheduler leases", LeaseManager),
    ("shared rate limits", SharedRateLimits),
    ("shared circuit breakers", SharedBreakers),
    ("broker leases", BrokerLeaseStore),
    ("broker decisions", BrokerDecisionStore),
)
"""Every store part but the audit log, with the name ``store init`` prints for it."""


def _init(args: argparse.Namespace) -> int:
    store = open_store(args.store)
    try:
        indexed = _create("audit log", create_audit_tables, store)
        # Each part's line once it is made (committed): exit 0 whether or not it can be written.
        say_written(f"audit log: ready{'' if indexed else ' (its reference index could not be built)'}")
        for name, part in PARTS:
            opened = _create(name, part, store)
            close = getattr(opened, "close", None)
            if close is not None:
                close()
            say_written(f"{name}: ready")
    finally:
        store.close()
    return 0


def _prune(args: argparse.Namespace) -> int:
    # Whole seconds, as --json prints it (docs/cli.md, Output conventions): the cutoff a script
    # reads back is the one applied.
    before = int(time.time()) - parse_duration(args.older_than)
    with committed_work_held() as committed:
        pruned, refused = _pruned(args.store, before, committed)
        if refused is not None:
            warn(
                f"expired grants not pruned: {refused}; this role may not delete grants or "
                "revocations (docs/operations.md, PostgreSQL set-up): run `agentgate store prune` as "
                "the role that owns the schema to prune them"
            )
        with work_done_said():  # committed: exit 0 whether or not this can be written (review R83)
            if args.json:
                write_json({"before": before, "pruned": pruned}, indent=None)
            else:
                for name, count in pruned.items():
                    shown = "not pruned" if count is None else f"{count} pruned"
                    sys.stdout.write(f"{name.replace('_', ' ')}: {shown}\n")
    return 0


def _pruned(
    target: str | None, before: float, committed: Callable[[], None]
) -> tuple[dict[str, int | None], str | None]:
    """``_prune_parts`` on the store ``target``, opened and closed; ``committed`` is called as
    the prune commits. A store that cannot be closed once the prune committed is a warning
    (``closed_once_committed``), not ``nothing was pruned``."""
    store = open_existing_store(target)
    done: tuple[dict[str, int | None], str | None] | None = None
    try:
        # Every part opened before anything is deleted: a part whose tables are missing and that
        # this role may not make (PostgreSQL's application role after an upgrade) is refused with
        # nothing pruned, not after the parts before it were (until review R63). Opened before
        # the transaction, too: on SQLite, creating a table would wait for the lock it holds.
        approvals, ledger, letters = ApprovalStore(store), BudgetLedger(store), DeadLetterStore(store)
        repo = GrantRepository(store)
        try:
            done = _prune_parts(store, approvals, ledger, letters, repo, before, committed)
        finally:
            closed_once_committed(repo.close, committed=done is not None, work="the prune")
        return done
    except StoreError as exc:
        raise StoreError(f"nothing was pruned: {exc}") from exc
    finally:
        closed_once_committed(store.close, committed=done is not None, work="the prune")


def _prune_parts(
    store: Store,
    approvals: ApprovalStore,
    ledger: BudgetLedger,
    letters: DeadLetterStore,
    repo: GrantRepository,
    before: float,
    committed: Callable[[], None],
) -> tuple[dict[str, int | None], str | None]:
    """Prune every part in one transaction: a failure in any part (a lock another process
    holds, a full disk) rolls back them all, so an operator never has to find out which parts
    went (until review R64 each part committed on its own, and a failure after the first left
    the earlier ones pruned, exit 2 without saying so). Returns the counts, and PostgreSQL's
    reason when the role may not delete grants or revocations (the application role,
    docs/operations.md): those two counts are then ``None``, the grants' part is rolled back to
    its savepoint, and the other parts commit."""
    from agentgate.authority import prune_grants  # here: ``store init`` needs no authority engine

    refused: str | None = None
    with store.transaction() as tx:
        pruned: dict[str, int | None] = {
            "approval_requests": approvals.prune(before, tx=tx),
            "settled_reservations": ledger.prune(before, tx=tx),
            "dead_letters": letters.prune(before, tx=tx),
            # Budgets first: the record of a grant whose budget is kept stays for a later prune.
            "expired_grant_budgets": ledger.prune_expired(before, tx=tx),
        }
        try:
            with tx.savepoint("agentgate_prune_grants"), repo.within(tx):
                grants = prune_grants(repo, before)
        except StoreError as exc:
            import psycopg  # here: a SQLite store never loads the PostgreSQL driver

            if not isinstance(exc.__cause__, psycopg.errors.InsufficientPrivilege):
                raise
            refused = str(exc.__cause__).splitlines()[0]
            pruned["expired_grants"] = pruned["expired_grant_revocations"] = None
        else:
            pruned["expired_grants"], pruned["expired_grant_revocations"] = grants
        committed()  # the transaction commits as it ends: a signal from here leaves it done
    return pruned, refused


def _create(name: str, make: Callable[[Store], Any], store: Store) -> Any:
    """``make(store)``, which creates the tables of the part ``name``.

    Raises ``StoreError`` naming the part when the role may not create them (PostgreSQL's
    ``permission denied``: a role without CREATE on the schema, typically the application role
    after an upgrade added a table), and saying to run this command as the schema's owner; any
    other ``StoreError`` passes unchanged.
    """
    try:
        return make(store)
    except StoreError as exc:
        import psycopg  # here: a SQLite store never loads the PostgreSQL driver

        if not isinstance(exc.__cause__, psycopg.errors.InsufficientPrivilege):
            raise
        reason = str(exc.__cause__).splitlines()[0]
        raise StoreError(
            f"{name}: this role may not create the tables this version of agentgate needs ({reason}): "
            "run `agentgate store init` as the role that owns the schema, then grant the application "
            "role its rights again (docs/operations.md, Upgrading)"
        ) from exc
