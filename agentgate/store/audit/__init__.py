"""The audit log's tables and the ``AuditLog``: append, checkpoint, verify, prove.

Tables (DDL per dialect below):

- ``audit_log(idx, entry, leaf_hash)``: one row per entry, ``idx`` from 0 without gaps, the
  entry's canonical bytes and their RFC 9162 leaf hash. Triggers refuse UPDATE, DELETE (and on
  PostgreSQL TRUNCATE), and any INSERT whose ``idx`` is not the next one.
- ``audit_checkpoints(id, size, root, note, created)``: signed checkpoints, append-only too.
- ``agentgate_store_parts(part, made)``: a row ``audit_log`` written with the log's tables, which
  tells a log dropped from one never made (``refuse_dropped_log``).
- ``audit_repairs``: a row for each protection trigger a writer's opening put back or made again
  (with the log's size and the latest checkpoint's size then), for each acceptance of one, and for
  each protection trigger an upgrade added to a log made before a release made it (no repair:
  ``ADDED_BY_UPGRADE`` in ``_schema``); append-only. ``verify`` reports a repair not accepted, and
  prints an accepted one and an addition as notes.
- ``audit_refs(idx, ref)`` (kept by a trigger on ``audit_log``) and ``audit_nodes(level,
  position, hash)`` (a cache of block roots): lookup aids for ``explain`` and ``prove``, covered
  by no signature, so everything read through them is proven against a signed checkpoint.

Appends are serialized so that indexes have no gaps: SQLite's write lock (the store's
transactions are ``BEGIN IMMEDIATE``) does it on SQLite, a transaction-scoped advisory lock on
PostgreSQL. ``append`` runs inside the caller's transaction when given one, so that a decision's
entry and its budget change commit together, or neither does (log before allow).

The log key signs checkpoints. ``open_log_key`` finds it: the file named by ``AGENTGATE_LOG_KEY``,
else ``log.key`` next to the SQLite database (``.agentgate/log.key`` in the working directory for
PostgreSQL), created with mode 0600 on first use (only for a log without checkpoints, or while
rotating the key); ``log.pub`` beside it holds the public key.

Where each part lives: ``AuditLog`` (``_log``: its making, appends, checkpoints, and the reads of
the log in batches) inherits one part per concern, each in a module of its own: ``_proofs``
(inclusion and consistency proofs, ``explain`` and ``referring``, with ``Explanation``),
``_nodes`` (the cached roots of blocks of leaf hashes, ``audit_nodes``) and ``_verify``
(``verify`` and its ``VerifyReport``). Beside them: ``_schema`` (the tables and their triggers,
the append lock, ``create_audit_tables``), ``_keys`` (the origin, the bound on an entry's bytes
and the log key: ``log_origin``, ``entry_limit``, ``previous_log_keys``, ``log_key_path``,
``open_log_key``) and ``_stored`` (what the parts share: stored values read as text or bytes, the
index an entry's bytes carry, an index given by a caller checked).
"""

from __future__ import annotations

from agentgate.store.audit._keys import (
    DEFAULT_ORIGIN,
    entry_limit,
    log_key_path,
    log_origin,
    open_log_key,
    previous_log_keys,
)
from agentgate.store.audit._log import AuditLog
from agentgate.store.audit._proofs import Explanation
from agentgate.store.audit._schema import (
    APPEND_LOCK,
    AUDIT_DDL,
    FOREIGN_TRIGGER,
    PARTS_DDL,
    REFS_DDL,
    create_audit_tables,
)
from agentgate.store.audit._verify import VerifyReport

__all__ = [
    "APPEND_LOCK",
    "AUDIT_DDL",
    "DEFAULT_ORIGIN",
    "FOREIGN_TRIGGER",
    "PARTS_DDL",
    "REFS_DDL",
    "AuditLog",
    "Explanation",
    "VerifyReport",
    "create_audit_tables",
    "entry_limit",
    "log_key_path",
    "log_origin",
    "open_log_key",
    "previous_log_keys",
]
