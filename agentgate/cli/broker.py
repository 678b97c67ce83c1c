"""``agentgate broker``: show the GPU inventory, the broker's leases and its queue.

The broker process writes its state to the store after every change
(``agentgate.store.broker_leases``); these commands read the last state written, from the store
named by ``--store`` or ``AGENTGATE_STORE``, and print when it was taken.

    agentgate broker inventory --inventory cluster.yaml     GPUs by rack, node and NVLink domain
    agentgate broker leases [--json]                        live leases
    agentgate broker queue [--json]                         waiting requests, in scheduling order
"""

from __future__ import annotations

import argparse
from typing import Any

from agentgate.cli._broker_parser import (
    register as register,
)
from agentgate.cli._common import (
    open_existing_store,
    printable,
    shown_source_error,
    unix,
    utc,
    write_json,
)
from agentgate.dispatch.broker import BrokerSnapshot, Lease, QueuedRequest, from_inventory
from agentgate.errors import InventoryError
from agentgate.store.broker_decisions import BrokerDecisionStore, LeaseDecision
from agentgate.store.broker_leases import BrokerLeaseStore, SetAside


def _state(
    args: argparse.Namespace, *, decisions: bool = True
) -> tuple[BrokerSnapshot | None, dict[str, LeaseDecision], tuple[SetAside, ...]]:
    """The broker's journal, if ``decisions`` the decisions its gated leases were granted under
    (by lease id), and the rows the journal set aside (written before review R68)."""
    with open_existing_store(args.store, read_only=True) as store:
        journal = BrokerLeaseStore(store, args.broker)
        snapshot = journal.load()
        decided = (
            {d.request_id: d for d in BrokerDecisionStore(store, args.broker).all()} if decisions else {}
        )
    return snapshot, decided, journal.set_aside


def _set_aside_json(rows: tuple[SetAside, ...]) -> list[dict[str, str]]:
    return [{"kind": r.kind, "id": r.id, "field": r.field, "value": r.value, "why": r.why} for r in rows]


def _print_set_aside(rows: tuple[SetAside, ...]) -> None:
    """Name each row set aside (review R69: until then the CLI failed on such a store)."""
    for row in rows:
        print(printable(str(row)))


def _header(snapshot: BrokerSnapshot | None, broker: str) -> str:
    if snapshot is None:
        return f"broker {broker!r}: no state written yet"
    return f"broker {broker!r}: state as of {utc(snapshot.taken_at)}"


def _table(rows: list[list[str]]) -> str:
    """The rows as aligned columns, every cell one printable line (``printable``): lease and
    request ids, tenants and GPU names come from callers and the inventory, and a newline or an
    escape sequence in one must not add a row or repaint the operator's terminal."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _inventory(args: argparse.Namespace) -> int:
    from agentgate.dispatch.inventory import load_inventory  # here: the other verbs read no inventory

    with shown_source_error():
        inventory = load_inventory(args.inventory, read_keys=False)  # no backend is called
    if not inventory.gpus:
        # ``from_inventory`` refuses it too, but cannot name the file (until review R60 the one
        # line said "the broker needs at least one GPU", not which inventory had none).
        raise InventoryError("declares no GPUs: the broker has none to lease", file=args.inventory)
    topology = from_inventory(inventory)
    # The rows set aside are named as leases and queue name them: a lease set aside shows its
    # GPUs free, although its holder may still run on them until its next renewal ends it.
    snapshot, _, set_aside = _state(args, decisions=False)
    leased: dict[str, str] = {}
    reserved: dict[str, str] = {}
    if snapshot is not None:
        for lease in snapshot.leases:
            leased.update(dict.fromkeys(lease.gpus, lease.id))
        for q in snapshot.queue:
            reserved.update(dict.fromkeys(q.nominated, q.request.id))
    # GPUs the broker's state holds that this inventory does not list: another cluster's file, or
    # one edited since. Shown, since the table would call every GPU of the wrong file free.
    unknown = sorted((set(leased) | set(reserved)) - set(topology.index))
    if args.json:
        out = [
            {
                "id": g.id,
                "type": g.type,
                "memory_gb": g.memory_gb,
                "node": g.node,
                "nvlink_domain": g.nvlink_domain,
                "rack": g.rack,
                "lease": leased.get(g.id),
                "reserved_for": reserved.get(g.id),
            }
            for g in topology.gpus
        ]
        taken_at = None if snapshot is None else unix(snapshot.taken_at)
        write_json(
            {
                "taken_at": taken_at,
                "gpus": out,
                "unknown_gpus": unknown,
                "set_aside": _set_aside_json(set_aside),
            }
        )
        return 0
    holder = {gpu: f"(reserved: {request})" for gpu, request in reserved.items()}
    holder.update(leased)  # a GPU reserved for a preemptor is still held by its victim's lease
    rows = [["RACK", "NODE", "NVLINK DOMAIN", "GPU", "TYPE", "MEMORY GB", "HELD BY"]]
    for g in sorted(topology.gpus, key=lambda g: (g.rack, g.node, g.nvlink_domain, topology.number(g.id))):
        rows.append(
            [g.rack, g.node, g.nvlink_domain, g.id, g.type, f"{g.memory_gb:g}", holder.get(g.id, "-")]
        )
    free = sum(1 for g in topology.gpus if g.id not in holder)
    print(_header(snapshot, args.broker))
    _print_set_aside(set_aside)
    print(_table(rows))
    print(f"{len(topology)} GPUs, {free} free")
    if unknown:
        shown = ", ".join(printable(gpu) for gpu in unknown[:8]) + (", ..." if len(unknown) > 8 else "")
        print(
            f"{len(unknown)} GPUs held in the broker's state are not in {printable(args.inventory)}: {shown}"
        )
    return 0


def _reserved(decided: LeaseDecision) -> dict[str, int]:
    """What a lease holds reserved, per unit: its decision's and every renewal's, summed."""
    out: dict[str, int] = {}
    for _reservation, unit, amount in decided.reservations:
        out[unit] = out.get(unit, 0) + amount
    return out


def _lease_json(lease: Lease, decided: LeaseDecision | None) -> dict[str, Any]:
    return {
        "id": lease.id,
        "tenant": lease.tenant,
        "holder": lease.request.holder,
        "priority": lease.priority,
        "gpus": list(lease.gpus),
        "gpu_type": lease.request.gpu_type,
        "state": lease.state,
        "level": lease.level,
        "granted_at": unix(lease.granted_at),
        "expires_at": unix(lease.expires_at),
        "notice_deadline": unix(lease.notice_deadline),
        "preempted_by": lease.preempted_by,
        "preempt_reason": lease.preempt_reason,
        # Through GatedBroker: the audit entry that decided the lease, its price, what it holds.
        "decision": None if decided is None else decided.audit_index,
        "cost_per_gpu_hour": None if decided is None else decided.cost_per_gpu_hour,
        "reserved": None if decided is None else _reserved(decided),
    }


def _leases(args: argparse.Namespace) -> int:
    snapshot, decisions, set_aside = _state(args)
    leases = () if snapshot is None else snapshot.leases
    if args.json:
        out = [_lease_json(x, decisions.get(x.id)) for x in leases]
        taken_at = None if snapshot is None else unix(snapshot.taken_at)
        write_json(
            {"taken_at": taken_at, "leases": out, "set_aside": _set_aside_json(set_aside)}, indent=None
        )
        return 0
    print(_header(snapshot, args.broker))
    _print_set_aside(set_aside)
    if not leases:
        print("no leases")
        return 0
    rows = [
        ["LEASE", "TENANT", "PRIO", "GPUS", "PLACED IN", "STATE", "EXPIRES", "NOTICE UNTIL", "FOR", "DECIDED"]
    ]
    for lease in leases:
        decided = decisions.get(lease.id)
        rows.append(
            [
                lease.id,
                lease.tenant,
                str(lease.priority),
                str(len(lease.gpus)),
                lease.level or "spread",
                lease.state,
                utc(lease.expires_at),
                utc(lease.notice_deadline),
                lease.preempted_by or "-",
                "-" if decided is None or decided.audit_index is None else f"audit #{decided.audit_index}",
            ]
        )
    print(_table(rows))
    return 0


def _queued_json(q: QueuedRequest) -> dict[str, Any]:
    r = q.request
    return {
        "id": r.id,
        "tenant": r.tenant,
        "priority": r.priority,
        "gpus": r.gpus,
        "gpu_type": r.gpu_type,
        "bound": r.hint.bound,
        "kind": r.hint.kind,
        "submitted_at": unix(q.submitted_at),
        "deadline": unix(q.deadline),
        "nominated": list(q.nominated),
        "victims": list(q.victims),
    }


def _queue(args: argparse.Namespace) -> int:
    snapshot, _, set_aside = _state(args, decisions=False)
    queue = () if snapshot is None else snapshot.queue
    if args.json:
        write_json(
            {
                "taken_at": None if snapshot is None else unix(snapshot.taken_at),
                "queue": [_queued_json(q) for q in queue],
                "set_aside": _set_aside_json(set_aside),
            },
            indent=None,
        )
        return 0
    print(_header(snapshot, args.broker))
    _print_set_aside(set_aside)
    if not queue:
        print("queue empty")
        return 0
    rows = [["REQUEST", "TENANT", "PRIO", "GPUS", "WORKLOAD", "SUBMITTED", "TIMES OUT", "WAITING ON"]]
    for q in queue:
        r = q.request
        rows.append(
            [
                r.id,
                r.tenant,
                str(r.priority),
                str(r.gpus),
                f"{r.hint.bound}/{r.hint.kind}",
                utc(q.submitted_at),
                utc(q.deadline),
                ",".join(q.victims) if q.victims else "-",
            ]
        )
    print(_table(rows))
    return 0
