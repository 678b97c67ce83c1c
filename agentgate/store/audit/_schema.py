"""The audit log's tables (``AUDIT_DDL``), its reference index and cache of block roots
(``REFS_DDL``), the PostgreSQL append lock, ``create_audit_tables``, which makes them and
indexes the entries written before the index, and ``refuse_dropped_log``, which tells a log
never made from one dropped (the record ``agentgate_store_parts`` keeps); and, for a log opened
to read, which writes nothing, ``refs_complete`` (whether the reference index may be read) and
``missing_protection`` (the triggers of the log's machinery that are not in force, the triggers
on its tables that agentgate did not make and the PostgreSQL rules on them, and the repairs not
accepted, which ``verify`` reports). ``audit_repairs`` (``REPAIRS_DDL``) records each protection trigger a writer's opening puts back, makes again or (PostgreSQL)
enables, in the transaction that does it, and each acceptance of such a repair
(``accept_repair``), and each protection trigger an upgrade adds to a log made before a release
made it (``ADDED_BY_UPGRADE``: no repair, ``upgrade_additions``); ``agentgate_store_parts``
records it as made, so that a dropped one is
reported and refused, not made again empty (``_repairs_dropped``)."""

from __future__ import annotations

import functools
import logging
import re
import sqlite3

from agentgate.errors import InputError, LogDropped, RepairRefused, StoreError
from agentgate.store._base import (
    MAX_STORED_INTEGER,
    Dialect,
    Store,
    loaded_driver_errors,
    tables_held,
    whole_number,
)
from agentgate.store.audit._stored import _described, _stored_index

APPEND_LOCK = 27416741019937140
"""The PostgreSQL advisory lock that serializes appends (ASCII "agaudit"; the same number is
written in ``agentgate_audit_lock_next`` below)."""

LOG_TABLES = ("audit_log", "audit_checkpoints")
"""The tables that hold the log itself: its entries and its signed checkpoints."""

_PARTS = "agentgate_store_parts"
"""The table that records which parts of the store were made in it (``part = 'audit_log'``:
the audit log), append-only, outside the log's own tables."""

_REPAIRS = "audit_repairs"
"""The table that records each protection trigger a writer's opening put back or made again
(``REPAIRS_DDL``), append-only."""

ADDED_BY_UPGRADE = "was added by an upgrade"
"""How the ``what`` of a row of ``audit_repairs`` ends for a protection trigger that a writer's
opening added to a log made before a release made it (``_LATER_TRIGGERS``): no repair, and nothing
to accept; ``verify`` prints it as a note (``upgrade_additions``)."""

_LATER_TRIGGERS: dict[Dialect, tuple[str, ...]] = {
    "sqlite": ("audit_checkpoints_no_replace",),
    "postgresql": (),
}
"""The protection triggers that a release added to the log's tables after they were first made:
``audit_checkpoints_no_replace`` came with commit b10e47b3 (2026-11-29 21:00); every other one,
on either store, came with its table (commit ee8f40bf, 2026-11-29 16:16), or is on a table made
with it (``agentgate_store_parts``, ``audit_repairs``)."""

_MARKS = ("audit_refs", _PARTS, _REPAIRS)
"""Tables that a writer's opening of every release since ``_LATER_TRIGGERS`` were added made with
the log's tables and triggers, in the same opening: ``audit_refs`` (commit 5da1c4f6, 2026-11-30
03:50), ``agentgate_store_parts`` (ac9fc378, 2026-12-03) and ``audit_repairs`` (38d4a5e5,
2026-12-03). Where one is there a release that made those triggers opened the log, and one missing
was dropped: a repair. Where none is, the log was last opened by a release before them (or an
attacker dropped those tables too, which only a checkpoint saved outside the database catches, as
for a dropped log): such a trigger is recorded as added by an upgrade, not as a repair (review
R69: an upgrade from the first release said TAMPERED until a repair of nothing was accepted)."""

_logger = logging.getLogger("agentgate.audit")


# The protection triggers on PostgreSQL, as agentgate makes them: ``trigger -> (table, tgtype,
# function)``, ``tgtype`` being pg_trigger's bits (1 FOR EACH ROW, 2 BEFORE, 4 INSERT, 8 DELETE,
# 16 UPDATE, 32 TRUNCATE). None has a WHEN clause, columns, arguments or a constraint.
_PG_FIRES: dict[str, tuple[str, int, str]] = {
    "audit_log_next_index": ("audit_log", 1 | 2 | 4, "agentgate_audit_next_index"),
    "audit_log_append_only": ("audit_log", 1 | 2 | 8 | 16, "agentgate_append_only"),
    "audit_log_no_truncate": ("audit_log", 2 | 32, "agentgate_append_only"),
    "audit_checkpoints_append_only": ("audit_checkpoints", 1 | 2 | 8 | 16, "agentgate_append_only"),
    "audit_checkpoints_no_truncate": ("audit_checkpoints", 2 | 32, "agentgate_append_only"),
    "agentgate_store_parts_append_only": (_PARTS, 1 | 2 | 8 | 16, "agentgate_append_only"),
    "agentgate_store_parts_no_truncate": (_PARTS, 2 | 32, "agentgate_append_only"),
    "audit_repairs_append_only": (_REPAIRS, 1 | 2 | 8 | 16, "agentgate_append_only"),
    "audit_repairs_no_truncate": (_REPAIRS, 2 | 32, "agentgate_append_only"),
}

# The bodies of the functions the protection triggers run, as agentgate makes them (every
# release made them with these words; only whitespace may differ, which is not compared).
_PG_TRIGGER_FUNCTIONS: dict[str, str] = {
    "agentgate_append_only": """
        BEGIN
            RAISE EXCEPTION '% is append-only (% refused)', TG_TABLE_NAME, TG_OP;
        END;
        """,
    "agentgate_audit_next_index": """
        BEGIN
            IF NEW.idx IS DISTINCT FROM (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log) THEN
                RAISE EXCEPTION 'audit_log: index % is not the next one', NEW.idx;
            END IF;
            RETURN NEW;
        END;
        """,
}


# The reference index's trigger (``REFS_DDL``), as agentgate makes it: not a protection trigger
# (nothing is refused without it), compared where the index was built all the same, since one
# that does nothing leaves new entries out of the index that ``explain`` reads.
_PG_INDEX_FIRES: dict[str, tuple[str, int, str]] = {
    "audit_log_index_ref": ("audit_log", 1 | 4, "agentgate_audit_index_ref"),
}

_INDEX_REF_BODY = """
        DECLARE
            t text := encode(NEW.entry, 'escape');
            p integer := position(':"fer",' IN reverse(t));  -- the last ,"ref": from the end
            found text;
        BEGIN
            IF p > 0 THEN
                found := substring(right(t, p - 1) FROM '^([0-9]{1,18}),"resource":');
                IF found IS NOT NULL THEN
                    INSERT INTO audit_refs (idx, ref) VALUES (NEW.idx, found::bigint)
                    ON CONFLICT (idx) DO UPDATE SET ref = EXCLUDED.ref;
                END IF;
            END IF;
            RETURN NULL;
        END;
        """
"""The body of ``agentgate_audit_index_ref()``, the function of ``audit_log_index_ref`` (what
``REFS_DDL`` makes it with, and what ``_changed`` compares, whitespace aside)."""

LOCK_NEXT = "agentgate_audit_lock_next"
"""The function every PostgreSQL append calls (schema-qualified: ``_log._lock_next``) to take the
append lock and read the next index, in one round trip."""

_LOCK_NEXT_BODY = """
        BEGIN
            PERFORM pg_advisory_xact_lock(27416741019937140);  -- APPEND_LOCK, ASCII "agaudit"
            RETURN (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log);
        END;
        """
"""The body of ``agentgate_audit_lock_next()``, as every release made it (``AUDIT_DDL``)."""

_PG_HOME = (
    "(SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
    "ON n.oid = c.relnamespace WHERE c.oid = pg_catalog.to_regclass('audit_refs'))"
)
"""SQL: the schema of the ``audit_refs`` the store's statements find, the one the index's function
is made to write (its search path names it)."""


def _pg_function_differs(proc: str, name: str, *, settings: bool = True) -> str:
    """SQL true when the function row ``proc`` (of pg_proc) is not ``name`` as agentgate makes it:
    another body (whitespace aside), another language, or (where ``settings``) other settings
    (``ALTER FUNCTION ... SET``): a protection trigger's function has none; the index's
    (``agentgate_audit_index_ref``) has the search path ``pg_catalog, <the schema of
    audit_refs>, pg_temp``, and runs as its owner (SECURITY DEFINER), compared whatever
    ``settings``. The append function (``LOCK_NEXT``) has no settings either, runs as its caller,
    is VOLATILE (an IMMUTABLE or STABLE one may be evaluated once for a prepared statement's plan)
    and returns bigint."""
    bodies = {
        **_PG_TRIGGER_FUNCTIONS,
        "agentgate_audit_index_ref": _INDEX_REF_BODY,
        LOCK_NEXT: _LOCK_NEXT_BODY,
    }
    body = " ".join(bodies[name].split())
    differs = (
        f"btrim(regexp_replace({proc}.prosrc, '[[:space:]]+', ' ', 'g'), ' ') <> $body${body}$body$ "
        f"OR {proc}.prolang IS DISTINCT FROM (SELECT oid FROM pg_catalog.pg_language WHERE lanname = 'plpgsql')"
    )
    if name == "agentgate_audit_index_ref":
        differs += f" OR NOT {proc}.prosecdef"
        if settings:
            differs += (
                f" OR {proc}.proconfig IS DISTINCT FROM "
                f"ARRAY['search_path=pg_catalog, ' || quote_ident({_PG_HOME}) || ', pg_temp']"
            )
    elif settings:
        differs += f" OR {proc}.proconfig IS NOT NULL"
    if name == LOCK_NEXT:
        differs += (
            f" OR {proc}.provolatile <> 'v' OR {proc}.prosecdef "
            f"OR {proc}.prorettype <> 'pg_catalog.int8'::pg_catalog.regtype"
        )
    return f"({differs})"


def _pg_runs_otherwise(proc: str, functions: tuple[str, ...] = tuple(_PG_TRIGGER_FUNCTIONS)) -> str:
    """SQL true when the function row ``proc`` (of pg_proc) is not ``made.fn`` as agentgate makes it
    (``_pg_function_differs``), ``made.fn`` being one of ``functions``; true for any other."""
    cases = " ".join(f"WHEN made.fn = '{name}' THEN {_pg_function_differs(proc, name)}" for name in functions)
    return f"(CASE {cases} ELSE true END)"


def _pg_made(tables: tuple[str, ...], fires: dict[str, tuple[str, int, str]] = _PG_FIRES) -> str:
    """SQL rows ``made(name, tbl, type, fn)``: the triggers of ``fires`` (the protection
    triggers: ``_PG_FIRES``) on ``tables`` as agentgate makes them."""
    rows = ", ".join(
        f"('{name}', '{table}', {tgtype}, '{function}')"
        for name, (table, tgtype, function) in fires.items()
        if table in tables
    )
    return f"(VALUES {rows}) AS made(name, tbl, type, fn)"


_PG_TRIGGER_DIFFERS = (
    "(t.tgtype <> made.type OR t.tgqual IS NOT NULL OR t.tgnargs <> 0 OR t.tgconstraint <> 0 "
    "OR cardinality(t.tgattr::int2[]) > 0 "
    "OR t.tgfoid IS DISTINCT FROM pg_catalog.to_regprocedure(pg_catalog.quote_ident(n.nspname) || '.' || made.fn || '()'))"
)
"""SQL true when the trigger row ``t`` fires otherwise than ``made`` says: other events, timing or
level, a WHEN clause, columns, arguments, a constraint trigger, or another function than the one
of its name in its table's schema (``n``, the pg_namespace row of that table), read by that
schema-qualified name: a function of the same name earlier on the search path is not agentgate's
(until review R59 the path's was read, and a writer's opening dropped each trigger for it)."""


def _pinned_path(table: str) -> str:
    """A PL/pgSQL step that sets the search path, to the end of the block (``_caller_path``), to the
    schema of ``table`` (where the store's statements find it) and pg_temp, last: so that the
    function names of the steps after it (``CREATE OR REPLACE FUNCTION``, ``CREATE TRIGGER ...
    EXECUTE FUNCTION``, ``to_regprocedure``) are those of the log's tables' schema, where they are
    made, and no function of the same name in a schema earlier on the caller's path (a schema named
    after the role, which ``"$user"`` puts first) is replaced or run instead (until review R59 it
    was). pg_catalog, not named, is searched first; the schema named first is where things are
    made. Needs a variable ``caller_path text`` set to the caller's path."""
    return f"""
    PERFORM pg_catalog.set_config('search_path', pg_catalog.quote_ident((SELECT n.nspname
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = pg_catalog.to_regclass('{table}'))) || ', pg_temp', true);
"""


_CALLER_PATH = "caller_path text := pg_catalog.current_setting('search_path');"
"""The PL/pgSQL variable that keeps the caller's search path, set again at the end of a block that
pins it (``_pinned_path``, ``_caller_path``)."""

_caller_path = """
    PERFORM pg_catalog.set_config('search_path', caller_path, true);
"""
"""The PL/pgSQL step that sets the caller's search path again (``_CALLER_PATH``), at the end of a
block that pinned it: the statements after the block, in the same transaction, find what the
caller's path finds."""


def _replace_changed_function(name: str) -> str:
    """A PL/pgSQL step that makes the trigger function ``name`` when it is missing, and makes it
    again (``CREATE OR REPLACE``) when its owner runs it and it is not agentgate's
    (``_pg_function_differs``): a role that does not own it leaves it (``verify`` reports it)."""
    return f"""
    IF to_regprocedure('{name}()') IS NULL
       OR EXISTS (SELECT 1 FROM pg_proc p WHERE p.oid = to_regprocedure('{name}()')
                  AND pg_has_role(p.proowner, 'USAGE') AND {_pg_function_differs("p", name)}) THEN
        CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $fn${_PG_TRIGGER_FUNCTIONS[name]}$fn$;
    END IF;
"""


def _replace_changed_lock_next() -> str:
    """A PL/pgSQL step that makes the append function (``LOCK_NEXT``) when it is missing, and makes
    it again when its owner runs it and it is not agentgate's (``_pg_function_differs``; one
    returning another type is dropped first, which ``CREATE OR REPLACE`` cannot change): until
    review R61 it was made only when missing, and one made otherwise (that skips the append lock,
    or appends rows of its own as the appending role) was kept by every writer. A role that does
    not own it leaves it (``verify`` reports it: ``_append_function``). Run with the path pinned
    to the log's schema (``_pinned_path``)."""
    owned_differs = (
        f"EXISTS (SELECT 1 FROM pg_proc p WHERE p.oid = to_regprocedure('{LOCK_NEXT}()') "
        "AND pg_has_role(p.proowner, 'USAGE') AND {differs})"
    )
    returns_other = "p.prorettype <> 'pg_catalog.int8'::pg_catalog.regtype"
    return f"""
    IF {owned_differs.format(differs=returns_other)} THEN
        DROP FUNCTION {LOCK_NEXT}();
    END IF;
    IF to_regprocedure('{LOCK_NEXT}()') IS NULL OR {owned_differs.format(differs=_pg_function_differs("p", LOCK_NEXT))} THEN
        -- One round trip: take the append lock (held to the end of the transaction), then read
        -- the next index with a fresh snapshot (a volatile function's queries each take one).
        CREATE OR REPLACE FUNCTION {LOCK_NEXT}() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn${_LOCK_NEXT_BODY}$fn$;
    END IF;
"""


def _drop_changed_triggers(
    tables: tuple[str, ...], fires: dict[str, tuple[str, int, str]] = _PG_FIRES
) -> str:
    """A PL/pgSQL step that drops each trigger of ``fires`` (the protection triggers) on
    ``tables`` that is not the one agentgate makes (``_PG_TRIGGER_DIFFERS``), where the table's
    owner runs it: the steps after it make it again, in the same transaction. Needs a variable
    ``changed record``."""
    return f"""
    FOR changed IN SELECT t.tgname, c.relname FROM pg_trigger t
            JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            JOIN {_pg_made(tables, fires)} ON t.tgname = made.name AND t.tgrelid = to_regclass(made.tbl)
            WHERE NOT t.tgisinternal AND pg_has_role(c.relowner, 'USAGE') AND {_PG_TRIGGER_DIFFERS} LOOP
        EXECUTE format('DROP TRIGGER %I ON %I', changed.tgname, changed.relname);
    END LOOP;
"""


def _owned(table: str) -> str:
    """SQL true where this role owns ``table`` (or is a member of its owner): the role that puts a
    protection trigger of it back, the one ``_RECORD_REPAIRS`` records the repair for. A role that
    holds only the TRIGGER privilege there may run ``CREATE TRIGGER`` too (PostgreSQL asks no
    more), but not ``DROP TRIGGER`` or ``ALTER TABLE ... ENABLE``: until review R59 it put a dropped
    trigger back, and no repair was recorded; it leaves it now, and ``verify`` goes on naming it."""
    return f"pg_has_role((SELECT relowner FROM pg_class WHERE oid = '{table}'::regclass), 'USAGE')"


def _append_only_triggers(table: str) -> str:
    """A PL/pgSQL step that makes ``table``'s two protection triggers where missing (one dropped
    alone, or changed and dropped by ``_drop_changed_triggers`` just before, is put back), where
    this role owns the table (``_owned``): ``TABLE_append_only`` refuses an UPDATE or DELETE of a
    row, ``TABLE_no_truncate`` a TRUNCATE."""
    return f"""
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '{table}'::regclass
                   AND tgname = '{table}_append_only') AND {_owned(table)} THEN
        CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
            FOR EACH ROW EXECUTE FUNCTION agentgate_append_only();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '{table}'::regclass
                   AND tgname = '{table}_no_truncate') AND {_owned(table)} THEN
        CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
            FOR EACH STATEMENT EXECUTE FUNCTION agentgate_append_only();
    END IF;
"""


def _fire_always(tables: tuple[str, ...]) -> str:
    """A PL/pgSQL step that makes each protection trigger of ``tables`` that does not fire in every
    session fire there (``tgenabled`` A, ENABLE ALWAYS), where the table's owner runs it: one that
    fires in ordinary sessions only (O, as CREATE TRIGGER makes it), so that
    ``session_replication_role = replica``, set for a session, a role or the database, no longer
    skips it; and one disabled (D, or R: replica sessions only), put back in force like a dropped
    one (``_RECORD_REPAIRS`` records it first, in the same transaction). Needs a variable
    ``changed record``."""
    return f"""
    FOR changed IN SELECT t.tgname, c.relname FROM pg_trigger t
            JOIN pg_class c ON c.oid = t.tgrelid
            JOIN {_pg_made(tables)} ON t.tgname = made.name AND t.tgrelid = to_regclass(made.tbl)
            WHERE NOT t.tgisinternal AND t.tgenabled <> 'A' AND pg_has_role(c.relowner, 'USAGE') LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ALWAYS TRIGGER %I', changed.relname, changed.tgname);
    END LOOP;
"""


def _protected(table: str) -> str:
    """The PL/pgSQL steps that put ``table``'s protection triggers in force: a changed one dropped
    (``_drop_changed_triggers``), a missing one made (``_append_only_triggers``), each made to fire
    in every session (``_fire_always``)."""
    return (
        _pinned_path(table)
        + _drop_changed_triggers((table,))
        + _append_only_triggers(table)
        + _fire_always((table,))
        + _caller_path
    )


AUDIT_DDL: dict[Dialect, str] = {
    "sqlite": """
CREATE TABLE IF NOT EXISTS audit_log (
    idx INTEGER PRIMARY KEY,
    entry BLOB NOT NULL,
    leaf_hash BLOB NOT NULL CHECK (length(leaf_hash) = 32)
);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    size INTEGER NOT NULL,
    root BLOB NOT NULL,
    note TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS audit_log_next_index BEFORE INSERT ON audit_log
WHEN NEW.idx IS NOT (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log)
BEGIN SELECT RAISE(ABORT, 'audit_log: index must be the next one'); END;
CREATE TRIGGER IF NOT EXISTS audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_checkpoints_no_update BEFORE UPDATE ON audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_checkpoints_no_delete BEFORE DELETE ON audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_checkpoints_no_replace BEFORE INSERT ON audit_checkpoints
WHEN NEW.id IN (SELECT id FROM audit_checkpoints)
BEGIN SELECT RAISE(ABORT, 'audit_checkpoints is append-only'); END;
""",
    "postgresql": """
DO $$
DECLARE
    changed record;
    """
    + _CALLER_PATH
    + """
BEGIN
    -- Everything is created only when missing, so that a role that may only SELECT and INSERT
    -- (docs/operations.md, least privilege) can start agentgate on a schema made by the owner.
    IF to_regclass('audit_log') IS NULL THEN
        CREATE TABLE audit_log (
            idx BIGINT PRIMARY KEY,
            entry BYTEA NOT NULL,
            leaf_hash BYTEA NOT NULL CHECK (octet_length(leaf_hash) = 32)
        );
    END IF;
    IF to_regclass('audit_checkpoints') IS NULL THEN
        CREATE TABLE audit_checkpoints (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            size BIGINT NOT NULL,
            root BYTEA NOT NULL,
            note TEXT NOT NULL,
            created TEXT NOT NULL
        );
    END IF;
"""
    + _pinned_path("audit_log")
    + _replace_changed_function("agentgate_append_only")
    + _replace_changed_lock_next()
    + _replace_changed_function("agentgate_audit_next_index")
    + _drop_changed_triggers(LOG_TABLES)
    + """
    -- Each trigger is made when it is missing, whichever others are there: one dropped alone, or
    -- changed (dropped just above), is put back by the next writer that owns the table (``audit
    -- verify`` reports it first: missing_protection; ``_RECORD_REPAIRS`` records it).
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'audit_log'::regclass
                   AND tgname = 'audit_log_next_index') AND """
    + _owned("audit_log")
    + """ THEN
        CREATE TRIGGER audit_log_next_index BEFORE INSERT ON audit_log
            FOR EACH ROW EXECUTE FUNCTION agentgate_audit_next_index();
    END IF;
"""
    + "".join(_append_only_triggers(table) for table in LOG_TABLES)
    + _fire_always(LOG_TABLES)
    + _caller_path
    + """
END;
$$;
""",
}

PARTS_DDL: dict[Dialect, str] = {
    # ``agentgate_store_parts(part, made)``: the record that a part of the store was made in it
    # (``audit_log``: the audit log, ``made`` the UTC time), append-only, outside the log's own
    # tables: ``refuse_dropped_log`` tells a log dropped from one never made by it; ``audit_repairs``:
    # the record of repairs, written where that table is there, so that a dropped one is told from
    # one never made (``_repairs_dropped``). Run after ``AUDIT_DDL`` (its triggers use
    # ``agentgate_append_only``) and, for a new log, after ``REPAIRS_DDL`` (its row then commits with
    # the table); a row is written when missing.
    "sqlite": """
CREATE TABLE IF NOT EXISTS agentgate_store_parts (
    part TEXT PRIMARY KEY,
    made TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS agentgate_store_parts_no_update BEFORE UPDATE ON agentgate_store_parts
BEGIN SELECT RAISE(ABORT, 'agentgate_store_parts is append-only'); END;
CREATE TRIGGER IF NOT EXISTS agentgate_store_parts_no_delete BEFORE DELETE ON agentgate_store_parts
BEGIN SELECT RAISE(ABORT, 'agentgate_store_parts is append-only'); END;
INSERT OR IGNORE INTO agentgate_store_parts (part, made)
VALUES ('audit_log', strftime('%Y-%m-%dT%H:%M:%SZ', 'now'));
INSERT OR IGNORE INTO agentgate_store_parts (part, made)
SELECT 'audit_repairs', strftime('%Y-%m-%dT%H:%M:%SZ', 'now')
WHERE EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit_repairs' COLLATE NOCASE);
""",
    "postgresql": """
CREATE TABLE IF NOT EXISTS agentgate_store_parts (
    part TEXT PRIMARY KEY,
    made TEXT NOT NULL
);
DO $$
DECLARE
    changed record;
    """
    + _CALLER_PATH
    + """
BEGIN"""
    + _protected(_PARTS)
    + """
    -- Read only where this role may read and insert (PL/pgSQL's AND does not stop at the first
    -- false): a role of least privilege without rights there leaves it to the schema's owner.
    IF has_table_privilege('agentgate_store_parts', 'SELECT')
       AND has_table_privilege('agentgate_store_parts', 'INSERT') THEN
        IF NOT EXISTS (SELECT 1 FROM agentgate_store_parts WHERE part = 'audit_log') THEN
            INSERT INTO agentgate_store_parts (part, made)
            VALUES ('audit_log', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
            ON CONFLICT DO NOTHING;
        END IF;
        IF to_regclass('audit_repairs') IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM agentgate_store_parts WHERE part = 'audit_repairs') THEN
            INSERT INTO agentgate_store_parts (part, made)
            VALUES ('audit_repairs', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
            ON CONFLICT DO NOTHING;
        END IF;
    END IF;
END;
$$;
""",
}

REPAIRS_DDL: dict[Dialect, str] = {
    # ``audit_repairs``: a row for each protection trigger that a writer's opening of an existing
    # log found missing, not agentgate's or disabled and put back in force (``what``, with the log's
    # size and the size of the latest stored checkpoint then: the entries after that checkpoint,
    # up to that size, were appended while nothing protected them), written in the transaction
    # that repairs it; and a row for each acceptance of such a repair (``accepts``: the repair's
    # id, ``accepted_by``, ``reason``). Append-only, with triggers of its own that are protection
    # triggers like the log's. Run after ``AUDIT_DDL`` (its triggers use ``agentgate_append_only``).
    "sqlite": """
CREATE TABLE IF NOT EXISTS audit_repairs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created TEXT NOT NULL,
    what TEXT NOT NULL,
    log_size INTEGER,
    checkpoint_size INTEGER,
    accepts INTEGER,
    accepted_by TEXT,
    reason TEXT
);
CREATE TRIGGER IF NOT EXISTS audit_repairs_no_update BEFORE UPDATE ON audit_repairs
BEGIN SELECT RAISE(ABORT, 'audit_repairs is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_repairs_no_delete BEFORE DELETE ON audit_repairs
BEGIN SELECT RAISE(ABORT, 'audit_repairs is append-only'); END;
""",
    "postgresql": """
CREATE TABLE IF NOT EXISTS audit_repairs (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created TEXT NOT NULL,
    what TEXT NOT NULL,
    log_size BIGINT,
    checkpoint_size BIGINT,
    accepts BIGINT,
    accepted_by TEXT,
    reason TEXT
);
DO $$
DECLARE
    changed record;
    """
    + _CALLER_PATH
    + """
BEGIN"""
    + _protected(_REPAIRS)
    + """
END;
$$;
""",
}

_SIZES = (
    "(SELECT COUNT(DISTINCT idx) FROM audit_log WHERE idx >= 0), (SELECT MAX(size) FROM audit_checkpoints)"
)
"""SQL: the log's size and the size of its latest stored checkpoint (NULL for none), as a repair
records them."""

_NOW: dict[Dialect, str] = {
    "sqlite": "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')",
    "postgresql": "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
}


REFS_DDL: dict[Dialect, str] = {
    # ``audit_refs(idx, ref)``: for each entry that refers to another (an outcome to its allow,
    # an approval to its request), its index and that reference, kept by a trigger on audit_log
    # so that every writer (whatever its version or its database role) keeps it complete.
    # A lookup aid only, covered by no signature: ``AuditLog.explain`` re-reads and proves every
    # entry it finds through it. ``audit_refs_built`` holds one row once existing entries were
    # indexed (``AuditLog`` does that the first time it opens a log without it).
    # ``audit_nodes(level, position, hash)``: a cache of the roots of aligned blocks of
    # ``2**_NODE_LEVEL`` (_nodes.py) leaf hashes, filled by ``explain``; proofs built from it are checked
    # against the signed root, and rebuilt from the leaf hashes if they do not match.
    "sqlite": """
CREATE TABLE IF NOT EXISTS audit_refs (
    idx INTEGER PRIMARY KEY,
    ref INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_refs_by_ref ON audit_refs (ref);
CREATE TABLE IF NOT EXISTS audit_refs_built (built INTEGER PRIMARY KEY CHECK (built = 1));
CREATE TABLE IF NOT EXISTS audit_nodes (
    level INTEGER NOT NULL,
    position INTEGER NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (level, position)
);
CREATE TRIGGER IF NOT EXISTS audit_log_index_ref AFTER INSERT ON audit_log
WHEN json_valid(CAST(NEW.entry AS TEXT)) AND json_type(CAST(NEW.entry AS TEXT), '$.ref') = 'integer'
BEGIN
    INSERT OR REPLACE INTO audit_refs (idx, ref)
    VALUES (NEW.idx, json_extract(CAST(NEW.entry AS TEXT), '$.ref'));
END;
""",
    # PostgreSQL 15 has no error-free JSON test (and parsing costs), so the trigger reads the
    # reference from the canonical bytes as text: the top-level ``,"ref":`` is the last one (args
    # may hold the same text, but the keys after ``ref`` hold no objects, and a string cannot
    # hold an unescaped quote), found from the end; a number and ``,"resource":`` must follow. SECURITY DEFINER: a
    # role that may only insert into audit_log still keeps the index.
    "postgresql": """
CREATE TABLE IF NOT EXISTS audit_refs (
    idx BIGINT PRIMARY KEY,
    ref BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_refs_by_ref ON audit_refs (ref);
CREATE TABLE IF NOT EXISTS audit_refs_built (
    built INTEGER PRIMARY KEY CHECK (built = 1)
);
CREATE TABLE IF NOT EXISTS audit_nodes (
    level INTEGER NOT NULL,
    position BIGINT NOT NULL,
    hash BYTEA NOT NULL,
    PRIMARY KEY (level, position)
);
DO $$
DECLARE
    -- The schema of the audit_refs this process's statements use: what the function must write.
    home text := (SELECT nspname FROM pg_class JOIN pg_namespace ON pg_namespace.oid = relnamespace
                  WHERE pg_class.oid = 'audit_refs'::regclass);
    changed record;
    """
    + _CALLER_PATH
    + """
BEGIN"""
    + _pinned_path("audit_log")
    + """
    -- Made when missing, and made again by its owner when it is not agentgate's (another body,
    -- whitespace aside, language or security: one made again to do nothing, or the body that
    -- versions before 2026-11-30 04:00 made, commit 0626663, a backtracking regex, about 50 us
    -- per append against 18 us, the same rows); its settings are set below.
    IF to_regprocedure('agentgate_audit_index_ref()') IS NULL
       OR EXISTS (SELECT 1 FROM pg_proc p WHERE p.oid = to_regprocedure('agentgate_audit_index_ref()')
                  AND pg_has_role(p.proowner, 'USAGE')
                  AND """
    + _pg_function_differs("p", "agentgate_audit_index_ref", settings=False)
    + """) THEN
        CREATE OR REPLACE FUNCTION agentgate_audit_index_ref() RETURNS trigger LANGUAGE plpgsql
        SECURITY DEFINER SET search_path FROM CURRENT AS $fn$"""
    + _INDEX_REF_BODY
    + """$fn$;
    END IF;
    -- One made again otherwise (other events, FOR EACH STATEMENT, a WHEN clause, another
    -- function) is dropped where its owner runs this, and made again just below.
"""
    + _drop_changed_triggers(("audit_log",), _PG_INDEX_FIRES)
    + """
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'audit_log'::regclass
                   AND tgname = 'audit_log_index_ref') THEN
        CREATE TRIGGER audit_log_index_ref AFTER INSERT ON audit_log
            FOR EACH ROW EXECUTE FUNCTION agentgate_audit_index_ref();
    END IF;
    -- One disabled (DISABLE, or ENABLE REPLICA: replica sessions only) is enabled by its table's
    -- owner as CREATE TRIGGER makes it (O: not ALWAYS, which would fire in a logical-replication
    -- subscriber's apply worker too); the entries appended meanwhile are indexed after this.
    IF EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
               WHERE t.tgrelid = 'audit_log'::regclass AND t.tgname = 'audit_log_index_ref'
                 AND t.tgenabled IN ('D', 'R') AND pg_has_role(c.relowner, 'USAGE')) THEN
        ALTER TABLE audit_log ENABLE TRIGGER audit_log_index_ref;
    END IF;
    -- It runs as its owner, so its search path names pg_temp last: first (where PostgreSQL puts
    -- it unless named), a caller's temporary table called audit_refs, with a trigger of the
    -- caller's, would run the caller's code as the owner. Set by its owner (functions made by
    -- an earlier version are fixed when the owner opens the log).
    IF EXISTS (SELECT 1 FROM pg_proc WHERE oid = 'agentgate_audit_index_ref()'::regprocedure
               AND pg_has_role(proowner, 'USAGE')
               AND proconfig IS DISTINCT FROM ARRAY['search_path=pg_catalog, ' || quote_ident(home) || ', pg_temp']) THEN
        EXECUTE format('ALTER FUNCTION agentgate_audit_index_ref() SET search_path = pg_catalog, %I, pg_temp', home);
    END IF;
"""
    + _caller_path
    + """
END;
$$;
""",
}
_BACKFILL: dict[Dialect, str] = {
    "sqlite": "INSERT OR IGNORE INTO audit_refs (idx, ref) "
    "SELECT idx, json_extract(CAST(entry AS TEXT), '$.ref') FROM audit_log "
    "WHERE json_valid(CAST(entry AS TEXT)) AND json_type(CAST(entry AS TEXT), '$.ref') = 'integer'",
    "postgresql": "INSERT INTO audit_refs (idx, ref) SELECT idx, found::bigint FROM ("
    "SELECT idx, CASE WHEN p > 0 THEN substring(right(t, p - 1) FROM '^([0-9]{1,18}),\"resource\":') END "
    "AS found FROM (SELECT idx, t, position(':\"fer\",' IN reverse(t)) AS p FROM ("
    "SELECT idx, encode(entry, 'escape') AS t FROM audit_log) AS texts) AS found_at) AS refs "
    "WHERE found IS NOT NULL ON CONFLICT (idx) DO NOTHING",
}


def _tables_held(store: Store, names: tuple[str, ...]) -> set[str]:
    """Which of ``names`` (constants) are tables of the store, where its statements find them
    (PostgreSQL: the search path). Reads the catalog only: no right on the tables is needed."""
    if store.dialect == "sqlite":
        return tables_held(store.query, "sqlite", names)  # as SQLite compares names
    listed = ", ".join(f"'{name}'" for name in names)
    sql = (
        "SELECT c.relname FROM pg_catalog.pg_class c WHERE c.relkind IN ('r', 'p') "
        f"AND c.relname IN ({listed}) AND pg_catalog.pg_table_is_visible(c.oid)"
    )
    return {str(row[0]) for row in store.query(sql)}


def refuse_dropped_log(store: Store) -> bool:
    """Whether the store holds the audit log's tables (``LOG_TABLES``): ``False`` for a log never
    made here (no table of it, and no record of it in ``agentgate_store_parts``). Creates nothing.

    Raises ``LogDropped`` (a ``StoreError``) when the log was dropped: a table of it is missing
    and the store records the log as made. A log made again in its place would start at index 0
    and verify as intact. A store without the record (its log made by a version before it, the
    record written when it is next opened, or the record removed too) cannot tell: only a
    checkpoint saved outside the database catches that (docs/operations.md)."""
    held = _tables_held(store, (*LOG_TABLES, _PARTS))
    missing = [name for name in LOG_TABLES if name not in held]
    if not missing:
        return True
    made = store.query(f"SELECT made FROM {_PARTS} WHERE part = 'audit_log'") if _PARTS in held else []
    if not made:
        return len(missing) < len(LOG_TABLES)
    tables = f"table {missing[0]} is" if len(missing) == 1 else f"tables {', '.join(missing)} are"
    raise LogDropped(
        f"the audit log was dropped from this store: its {tables} missing, and {_PARTS} records "
        f"the log as made here at {made[0][0]}; nothing was created in its place (a new log would "
        "start at index 0 and verify as intact): restore the database from a backup and verify it "
        "against the checkpoint saved outside it (docs/operations.md, A dropped audit log)"
    )


_ONE_SCHEMA = (*LOG_TABLES, _PARTS, _REPAIRS)
"""The tables whose protection triggers a writer's opening makes and compares with the functions of
``audit_log``'s schema (``AUDIT_DDL`` pins the path to it): they must be in that schema."""


SPLIT_LINE = "the audit log's tables are not in one schema"
"""How the refusal of a writer's opening, and ``verify``'s line, for a log whose tables were split
across schemas begins (``_split_tables``)."""


def _split_tables(store: Store) -> tuple[str, str, set[str]] | None:
    """Where the tables of ``_ONE_SCHEMA`` that the store's statements find (PostgreSQL: the search
    path) are not all in one schema, each moved by hand (``ALTER TABLE ... SET SCHEMA``): where each
    is (``audit_log in public, audit_checkpoints in other, ...``), the statements that move each
    back to the schema most of them are in (audit_log's where as many are in another), and the
    tables outside it. ``None`` where they are in one schema, and on SQLite (one schema). Reads the
    catalog only."""
    if store.dialect != "postgresql":
        return None
    listed = ", ".join(f"'{name}'" for name in _ONE_SCHEMA)
    rows = store.query(
        "SELECT c.relname, n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
        f"ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') AND c.relname IN ({listed}) "
        "AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY c.relname"
    )
    schemas = {str(table): str(schema) for table, schema in rows}
    if len(set(schemas.values())) < 2:
        return None
    counts = {schema: list(schemas.values()).count(schema) for schema in schemas.values()}
    home = max(counts, key=lambda schema: (counts[schema], schema == schemas.get("audit_log")))
    where = ", ".join(f"{table} in {_quoted(schema, 'postgresql')}" for table, schema in schemas.items())
    moves = "; ".join(
        f"ALTER TABLE {_quoted(schema, 'postgresql')}.{table} SET SCHEMA {_quoted(home, 'postgresql')}"
        for table, schema in schemas.items()
        if schema != home
    )
    return where, moves, {table for table, schema in schemas.items() if schema != home}


def _refuse_split_tables(store: Store) -> None:
    """Raise ``StoreError`` where the log's tables are split across schemas (``_split_tables``):
    agentgate makes the functions their triggers run in the schema of audit_log, and a writer's
    opening cannot put the protection of a table in another schema back. Names each table's schema
    and the statement that moves it back. Until review R60 the opening failed on PostgreSQL's own
    words (``relation "audit_checkpoints" does not exist``, ``function agentgate_append_only() does
    not exist``), naming no schema. Reads the catalog only."""
    split = _split_tables(store)
    if split is None:
        return
    where, moves, _moved = split
    raise StoreError(
        f"{SPLIT_LINE} ({where}): agentgate makes them, and the "
        "functions their protection triggers run, in one schema, and cannot put the protection of a "
        f"table moved out of it back; nothing was changed: run `{moves}` as their owner, then open "
        "the log again (docs/operations.md, The audit log's tables in one schema)"
    )


def create_audit_tables(store: Store) -> bool:
    """Create the audit log's tables (``AUDIT_DDL``) and its reference index (``REFS_DDL``), and
    index the entries written before the index, once. Returns whether the index is complete.
    The record that the log was made (``PARTS_DDL``) is written with its tables, in one
    transaction, or the first time a log made before the record is opened where it may be.

    A role that may not create or fill the index (an owner has not opened the log since the
    upgrade) gets ``False``, and ``explain`` scans instead. Raises ``LogDropped`` for a log that
    was dropped (``refuse_dropped_log``) or whose record of repairs was (``_repairs_dropped``),
    creating nothing, ``StoreError`` for a log whose tables were moved into other schemas by hand
    (``_refuse_split_tables``), changing nothing, and ``StoreError`` when the audit tables
    themselves cannot be created.
    """
    index_changed = False
    if not refuse_dropped_log(store):
        # A new log: its tables and the record of it commit together, or neither does.
        store.ensure_schema(
            "audit",
            {
                dialect: AUDIT_DDL[dialect] + REPAIRS_DDL[dialect] + PARTS_DDL[dialect]
                for dialect in AUDIT_DDL
            },
        )
    else:
        _refuse_split_tables(store)
        # Refused rather than made again empty: the record of the repairs it held would be erased.
        dropped_at = _repairs_dropped(store)
        if dropped_at is not None:
            raise LogDropped(f"{_repairs_dropped_said(dropped_at)}; nothing was created in its place")
        # Where a table of the log is made now (a store of an early release), it is not repaired.
        # Read before this opening makes any of them (``_repairs_recorded`` makes audit_repairs).
        upgrade = not _tables_held(store, _MARKS)
        record = len(_tables_held(store, LOG_TABLES)) == len(LOG_TABLES) and _repairs_recorded(store)
        last = _last_repair(store) if record else 0
        if store.dialect == "sqlite":  # PostgreSQL's DDL makes a changed one again itself
            index_changed = _put_back_changed_sqlite(store, record)
        else:  # read before REFS_DDL makes it again, where this role owns it
            index_changed = _index_changed(store)
        # Each protection trigger put back or made again is recorded in the transaction that
        # does it (``_RECORD_REPAIRS``, run first), so the repair leaves evidence; the record's
        # own (``PARTS_DDL``) too, where this role owns its table (until review R59 they were put
        # back in a transaction of their own, after the repair of them was committed).
        parts = record and _owns_parts(store)
        store.ensure_schema(
            "audit",
            {
                d: (_RECORD_UPGRADE if upgrade else _RECORD_REPAIRS)[d]
                + AUDIT_DDL[d]
                + REPAIRS_DDL[d]
                + (PARTS_DDL[d] if parts else "")
                for d in AUDIT_DDL
            }
            if record
            else AUDIT_DDL,
        )
        if record:
            _warn_repaired(store, last)
        # For a log made before the record, the record written (and where this role does not own
        # it, a trigger of it put back where it may), where this process may (not as a role
        # without rights there; a later opener writes it).
        try:
            store.ensure_schema("audit_parts", PARTS_DDL)
        except loaded_driver_errors(StoreError):
            pass
    # Entries appended while the index's trigger was dropped, or changed, are not in the index:
    # indexed again once the trigger is back (the index's rows are one per entry, so this adds
    # only those).
    # A disabled one too (PostgreSQL; enabled by its owner's REFS_DDL since review R59).
    enabled = _triggers(store, ("audit_log",)).get((_INDEX_TRIGGER, "audit_log"))
    disabled = enabled is False
    dropped = "audit_refs_built" in _tables_held(store, ("audit_refs_built",)) and (
        index_changed or not enabled
    )
    try:
        store.ensure_schema("audit_refs", REFS_DDL)
        if index_changed and _index_changed(store):
            return False  # a role that does not own it leaves it changed: the index is not read
        if disabled and not _triggers(store, ("audit_log",)).get((_INDEX_TRIGGER, "audit_log")):
            return False  # nor disabled
        if not dropped and store.query("SELECT 1 FROM audit_refs_built"):
            return True
        with store.transaction() as tx:
            # Every append from now on fires the trigger; this indexes those before it.
            tx.execute(_BACKFILL[store.dialect])
            tx.execute("INSERT INTO audit_refs_built (built) VALUES (1) ON CONFLICT DO NOTHING")
    except loaded_driver_errors(StoreError):
        return False
    return True


def _record_missing(upgrade: bool) -> dict[Dialect, str]:
    """``_RECORD_REPAIRS``: SQL that writes a row of ``audit_repairs`` for each protection trigger
    that the DDL run after it in the same transaction puts back: on SQLite each one missing (a
    changed one is recorded by ``_put_back_changed_sqlite``), on PostgreSQL each one missing or
    not agentgate's (its row or its function), or disabled (``_fire_always`` enables it), on a
    table this role owns (the DDL makes it again there), whose function is agentgate's once the
    DDL ran (missing, this role's, or unchanged: a changed one that another role owns is left as
    it is, so nothing is recorded and ``verify`` goes on naming it); the tables whose triggers are
    looked for are there (a table made now is not repaired). The record's triggers
    (``agentgate_store_parts``) are put back by ``PARTS_DDL``, run in the same transaction after
    ``AUDIT_DDL`` where this role owns that table (``_owns_parts``): the repair and its record
    commit together, or neither does. Where ``upgrade`` (``_RECORD_UPGRADE``: the log shows no mark
    of a release that made the triggers of ``_LATER_TRIGGERS``, ``_MARKS``), such a trigger missing
    is recorded as added by an upgrade (``ADDED_BY_UPGRADE``), not as a repair."""
    sqlite = "".join(
        "INSERT INTO audit_repairs (created, what, log_size, checkpoint_size) "
        f"SELECT {_NOW['sqlite']}, 'the protection trigger {name} on table {table} "
        f"{ADDED_BY_UPGRADE if upgrade and name in _LATER_TRIGGERS['sqlite'] else 'was missing'}', {_SIZES} "
        f"WHERE NOT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND lower(name) = '{name}') "
        f"AND EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND lower(name) = '{table}');\n"
        for name, table, _refuses in PROTECTION_TRIGGERS["sqlite"]
    )
    # Every PostgreSQL protection trigger came with its table (``_LATER_TRIGGERS``): none is added
    # by an upgrade there, and each one missing is a repair.
    postgresql = f"""
DO $$
BEGIN
    INSERT INTO audit_repairs (created, what, log_size, checkpoint_size)
    SELECT {_NOW["postgresql"]},
           'the protection trigger ' || made.name || ' on table ' || made.tbl
           || CASE WHEN t.oid IS NULL THEN ' was missing'
                   WHEN {_PG_TRIGGER_DIFFERS} OR {_pg_runs_otherwise("p")} THEN ' was not the one agentgate made'
                   ELSE ' was disabled' END,
           {_SIZES}
    FROM {_pg_made((*LOG_TABLES, _PARTS, _REPAIRS))}
    JOIN pg_class c ON c.oid = to_regclass(made.tbl)
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_trigger t ON t.tgrelid = c.oid AND t.tgname = made.name AND NOT t.tgisinternal
    LEFT JOIN pg_proc p ON p.oid = t.tgfoid
    -- q: the function of its name in its table's schema, where the DDL after this makes it
    LEFT JOIN pg_proc q ON q.oid = to_regprocedure(quote_ident(n.nspname) || '.' || made.fn || '()')
    WHERE pg_has_role(c.relowner, 'USAGE')
      AND (t.oid IS NULL OR {_PG_TRIGGER_DIFFERS} OR {_pg_runs_otherwise("p")} OR t.tgenabled IN ('D', 'R'))
      -- and the trigger runs agentgate's function once made: one made now, made again by its
      -- owner (this role), or unchanged; one another role owns is left (verify names it).
      AND (q.oid IS NULL OR pg_has_role(q.proowner, 'USAGE') OR NOT {_pg_runs_otherwise("q")})
    ORDER BY made.name;
    -- The append function, where this role owns it and it is not agentgate's: AUDIT_DDL makes it
    -- again (``_replace_changed_lock_next``). A missing one is not recorded: no append ran.
    INSERT INTO audit_repairs (created, what, log_size, checkpoint_size)
    SELECT {_NOW["postgresql"]},
           'the append function ' || quote_ident(n.nspname) || '.{LOCK_NEXT}() was not the one agentgate made',
           {_SIZES}
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_proc p ON p.oid = to_regprocedure(quote_ident(n.nspname) || '.{LOCK_NEXT}()')
    WHERE c.oid = to_regclass('audit_log') AND pg_has_role(p.proowner, 'USAGE')
      AND {_pg_function_differs("p", LOCK_NEXT)};
END;
$$;
"""
    return {"sqlite": sqlite, "postgresql": postgresql}


PROTECTION_TRIGGERS: dict[Dialect, tuple[tuple[str, str, str], ...]] = {
    # ``(trigger, table, what it refuses)``: the triggers that keep the log and the record of it
    # append-only. A missing one, one not made as agentgate makes it (or, on PostgreSQL, one
    # disabled) is what ``missing_protection`` reports; a writer's opening (``create_audit_tables``)
    # puts it back, makes it again or enables it (PostgreSQL).
    "sqlite": (
        ("audit_log_next_index", "audit_log", "an entry at any index but the next one"),
        ("audit_log_no_update", "audit_log", "an entry's edit"),
        ("audit_log_no_delete", "audit_log", "an entry's deletion"),
        ("audit_checkpoints_no_update", "audit_checkpoints", "a checkpoint's edit"),
        ("audit_checkpoints_no_delete", "audit_checkpoints", "a checkpoint's deletion"),
        ("audit_checkpoints_no_replace", "audit_checkpoints", "a checkpoint's replacement"),
        ("agentgate_store_parts_no_update", _PARTS, "an edit of the record that the log was made"),
        ("agentgate_store_parts_no_delete", _PARTS, "a deletion of the record that the log was made"),
        ("audit_repairs_no_update", _REPAIRS, "an edit of the record of a repair"),
        ("audit_repairs_no_delete", _REPAIRS, "a deletion of the record of a repair"),
    ),
    "postgresql": (
        ("audit_log_next_index", "audit_log", "an entry at any index but the next one"),
        ("audit_log_append_only", "audit_log", "an entry's edit or deletion"),
        ("audit_log_no_truncate", "audit_log", "the emptying of the log (TRUNCATE)"),
        ("audit_checkpoints_append_only", "audit_checkpoints", "a checkpoint's edit or deletion"),
        ("audit_checkpoints_no_truncate", "audit_checkpoints", "the emptying of the checkpoints (TRUNCATE)"),
        (
            "agentgate_store_parts_append_only",
            _PARTS,
            "an edit or deletion of the record that the log was made",
        ),
        ("agentgate_store_parts_no_truncate", _PARTS, "the emptying of the record that the log was made"),
        ("audit_repairs_append_only", _REPAIRS, "an edit or deletion of the record of a repair"),
        ("audit_repairs_no_truncate", _REPAIRS, "the emptying of the record of repairs"),
    ),
}

_RECORD_REPAIRS = _record_missing(upgrade=False)
_RECORD_UPGRADE = _record_missing(upgrade=True)

_INDEX_TRIGGER = "audit_log_index_ref"
"""The trigger that keeps the reference index (``audit_refs``) complete as entries are appended."""


def _triggers(store: Store, tables: tuple[str, ...]) -> dict[tuple[str, str], bool]:
    """``(trigger, table) -> enabled`` for the triggers on ``tables`` (constants) where the store's
    statements find them. Reads the catalog only. A PostgreSQL trigger is enabled when it fires
    in an ordinary session (``tgenabled`` O or A: not D, disabled, nor R, replica only)."""
    listed = ", ".join(f"'{name}'" for name in tables)
    if store.dialect == "sqlite":
        rows = store.query(
            "SELECT lower(name), lower(tbl_name), 1 FROM sqlite_master "
            f"WHERE type = 'trigger' AND lower(tbl_name) IN ({listed})"
        )
    else:
        rows = store.query(
            "SELECT t.tgname, c.relname, t.tgenabled IN ('O', 'A') FROM pg_catalog.pg_trigger t "
            "JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal "
            f"AND c.relname IN ({listed}) AND pg_catalog.pg_table_is_visible(c.oid)"
        )
    return {(str(name), str(table)): bool(enabled) for name, table, enabled in rows}


@functools.cache
def _sqlite_made() -> dict[str, str]:
    """``trigger -> CREATE TRIGGER statement`` for the SQLite protection triggers and the reference
    index's (``audit_log_index_ref``), as ``sqlite_master`` holds those agentgate makes: the
    statement as written, ``IF NOT EXISTS`` and the last ``;`` left out (read by running
    ``AUDIT_DDL``, ``PARTS_DDL`` and ``REFS_DDL`` in memory)."""
    memory = sqlite3.connect(":memory:")
    try:
        memory.executescript(
            AUDIT_DDL["sqlite"] + PARTS_DDL["sqlite"] + REPAIRS_DDL["sqlite"] + REFS_DDL["sqlite"]
        )
        rows = memory.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    finally:
        memory.close()
    return {str(name): str(sql) for name, sql in rows}


def _same_sqlite(stored: object, made: str) -> bool:
    """Whether the stored text of a trigger is ``made`` but for whitespace and letter case outside
    its string literals (SQLite keeps the text as it was written; every release wrote these
    triggers with the same words). A literal is compared as it is: ``'$.ref'`` and ``'$.REF'``
    are other JSON paths, ``'integer'`` and ``'INTEGER'`` other types (until review R81 a trigger
    so changed, which never fired, passed as agentgate's)."""
    return isinstance(stored, str) and _sql_words(stored) == _sql_words(made)


_SQL_LITERAL = re.compile(r"'(?:[^']|'')*'")


def _sql_words(sql: str) -> tuple[str, list[str]]:
    """``sql`` outside its string literals, white space collapsed and letters lowered (SQL's words
    and identifiers are read case-blind), and its literals as written."""
    return " ".join(_SQL_LITERAL.sub("'", sql).split()).lower(), _SQL_LITERAL.findall(sql)


_REMADE_BY_INIT = "`agentgate store init` run as the store's owner makes it again"
"""What makes a trigger that is not agentgate's again, where nothing stops the store's owner."""


def _changed(
    store: Store, tables: tuple[str, ...], *, index: bool = False
) -> dict[tuple[str, str], tuple[str, str]]:
    """``(trigger, table) -> (how it differs, what makes it again)`` for each protection trigger on
    ``tables`` (constants), and where ``index`` the reference index's (``audit_log_index_ref``, on
    audit_log), that is there but is not the one agentgate makes. Reads the catalog only: SQLite's
    stored text of the trigger; PostgreSQL's trigger row (events, timing, level, WHEN clause,
    columns, arguments, function) and the body, language, security and settings of the function
    it runs. On PostgreSQL a function that is not agentgate's and that a role other than the
    table's owner owns (of which the owner is not a member) is made again by its owner only
    (``_replace_changed_function``): what makes it again then names ``ALTER FUNCTION ... OWNER
    TO`` first."""
    names = [name for name, table, _refuses in PROTECTION_TRIGGERS[store.dialect] if table in tables]
    fires = _PG_FIRES
    if index and "audit_log" in tables:
        names.append(_INDEX_TRIGGER)
        fires = {**_PG_FIRES, **_PG_INDEX_FIRES}
    listed = ", ".join(f"'{name}'" for name in names)
    if store.dialect == "sqlite":
        made = _sqlite_made()
        rows = store.query(
            "SELECT lower(name), lower(tbl_name), sql FROM sqlite_master "
            f"WHERE type = 'trigger' AND lower(name) IN ({listed})"
        )
        return {
            (str(name), str(table)): (
                "its definition in sqlite_master is not the one agentgate runs",
                _REMADE_BY_INIT,
            )
            for name, table, sql in rows
            if not _same_sqlite(sql, made[str(name)])
        }
    functions = (*_PG_TRIGGER_FUNCTIONS, "agentgate_audit_index_ref")
    # q: the function of the trigger's name in its table's schema (where agentgate made both), read
    # by that schema-qualified name, not by the search path, on which a function of the same name
    # in another schema may come first (until review R59 the line named that one's owner, and the
    # function unqualified); its owner, where the table's owner may not replace it. A trigger that
    # runs any other function fires otherwise.
    home = "pg_catalog.quote_ident(n.nspname) || '.' || made.fn"
    rows = store.query(
        f"SELECT t.tgname, c.relname, {_PG_TRIGGER_DIFFERS}, {home}, {_pg_runs_otherwise('p', functions)}, "
        "CASE WHEN q.oid IS NOT NULL AND NOT pg_catalog.pg_has_role(c.relowner, q.proowner, 'USAGE') "
        f"AND {_pg_runs_otherwise('q', functions)} "
        "THEN pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(q.proowner)) END, "
        "pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(c.relowner)) "
        "FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        f"JOIN {_pg_made(tables, fires)} ON t.tgname = made.name AND c.relname = made.tbl "
        "JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid "
        f"LEFT JOIN pg_catalog.pg_proc q ON q.oid = pg_catalog.to_regprocedure({home} || '()') "
        "WHERE NOT t.tgisinternal AND pg_catalog.pg_table_is_visible(c.oid)"
    )
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for name, table, fires_otherwise, function, runs_otherwise, function_owner, table_owner in rows:
        fix = _REMADE_BY_INIT
        if function_owner is not None:
            fix = (
                f"its function's owner {function_owner} is not the table's owner {table_owner}, whose "
                f"`agentgate store init` leaves the function as it is: `ALTER FUNCTION {function}() "
                f"OWNER TO {table_owner}` run as a superuser, then {_REMADE_BY_INIT}"
            )
        if fires_otherwise:
            found[(str(name), str(table))] = (
                "it fires otherwise (its events, timing, FOR EACH, WHEN clause, columns, arguments or "
                f"function are not those of agentgate's, which runs {function}())",
                fix,
            )
        elif runs_otherwise:
            found[(str(name), str(table))] = (
                f"its function {function}() is not the one agentgate made (its body, language, "
                "security or settings were changed)",
                fix,
            )
    return found


def _owns_parts(store: Store) -> bool:
    """Whether this role may put back the triggers of ``agentgate_store_parts`` in the transaction
    that records their repair: on SQLite always; on PostgreSQL where the table is there and this
    role owns it (or is a member of its owner), the role ``_RECORD_REPAIRS`` records repairs for.
    Reads the catalog only."""
    if store.dialect == "sqlite":
        return True
    rows = store.query(
        "SELECT pg_catalog.pg_has_role(c.relowner, 'USAGE') FROM pg_catalog.pg_class c "
        f"WHERE c.oid = pg_catalog.to_regclass('{_PARTS}')"
    )
    return bool(rows and rows[0][0])


def _repairs_recorded(store: Store) -> bool:
    """Whether repairs can be recorded: ``audit_repairs`` is there, made (with its triggers) here
    for a log made by a release before it. ``False`` where this role may not make it (a role of
    least privilege on PostgreSQL, which may not put a trigger back either)."""
    if _REPAIRS in _tables_held(store, (_REPAIRS,)):
        # A role without rights there (least privilege) is not the owner, and puts nothing back.
        return store.dialect == "sqlite" or bool(
            store.query(
                "SELECT has_table_privilege('audit_repairs', 'SELECT') "
                "AND has_table_privilege('audit_repairs', 'INSERT')"
            )[0][0]
        )
    try:
        store.ensure_schema("audit_repairs", REPAIRS_DDL)
    except loaded_driver_errors(StoreError):
        return False
    return True


def _repairs_dropped(store: Store) -> str | None:
    """When the store records ``audit_repairs`` as made (``agentgate_store_parts``), where that
    table is missing: the record of repairs was dropped. ``None`` where it is there, or where the
    store cannot tell (no record of it: made by a version before the record, or never made; or a
    role that may not read the record). Reads only."""
    held = _tables_held(store, (_PARTS, _REPAIRS))
    if _REPAIRS in held or _PARTS not in held:
        return None
    try:
        made = store.query(f"SELECT made FROM {_PARTS} WHERE part = 'audit_repairs'")
    except loaded_driver_errors(StoreError):
        return None  # a role that may not read the record cannot tell
    return str(made[0][0]) if made else None


RECORD_OF_REPAIRS_DROPPED = "the record of repairs was dropped from this store"
"""How ``verify``'s line for a dropped record of repairs begins (``VerifyReport.records_lost``)."""


def _repairs_dropped_said(made: str) -> str:
    """What ``verify`` reports, and a writer's opening refuses with, for a dropped record of repairs."""
    return (
        f"{RECORD_OF_REPAIRS_DROPPED}: its table {_REPAIRS} is missing, and "
        f"{_PARTS} records it as made here at {made}, so the repairs of protection triggers it held "
        "(and whether they were accepted) are lost; restore from a backup and verify against the "
        "checkpoint saved outside it (docs/operations.md, A dropped audit log)"
    )


_NOT_ADDED = f"what NOT LIKE '% {ADDED_BY_UPGRADE}'"
"""SQL: a row of ``audit_repairs`` that is not a trigger added by an upgrade (``ADDED_BY_UPGRADE``
holds no ``%`` or ``_``)."""


def _last_repair(store: Store) -> int:
    """The id of the newest row of ``audit_repairs`` (0 for none)."""
    return int(store.query("SELECT COALESCE(MAX(id), 0) FROM audit_repairs")[0][0])


def _warn_repaired(store: Store, after: int) -> None:
    """A warning on the ``agentgate.audit`` logger for each repair recorded after the row ``after``."""
    for rid, what, size, checkpoint in store.query(
        "SELECT id, what, log_size, checkpoint_size FROM audit_repairs WHERE id > ? AND accepts IS NULL "
        f"AND {_NOT_ADDED} ORDER BY id",
        (after,),
    ):
        odd = _not_whole(size, checkpoint)
        if odd is not None:  # as verify says it (until review R84 "entries not known (...) were appended")
            _logger.warning(
                "audit log: repair %s: %s; audit verify reports it until it is accepted (agentgate "
                "audit accept-repair)",
                rid,
                _written_outside(what, odd),
            )
            continue
        _logger.warning(
            "audit log: %s and was put back (repair %s): %s after the last checkpoint while nothing "
            "protected them; audit verify reports it until it is accepted (agentgate audit accept-repair)",
            what,
            rid,
            _appended(size, checkpoint),
        )


def _put_back_changed_sqlite(store: Store, record: bool) -> bool:
    """Make again, in one transaction, each SQLite protection trigger, and the reference index's,
    whose stored text is not the one agentgate runs (``_changed``): dropped, then created as
    ``AUDIT_DDL``, ``PARTS_DDL`` and ``REFS_DDL`` write it. ``CREATE TRIGGER IF NOT EXISTS``
    alone would keep the changed one. Returns whether the index's trigger was made again (the
    entries appended while it was changed are then indexed again). Where ``record``, each
    protection trigger made again is recorded in ``audit_repairs`` in the same transaction."""
    tables = (*LOG_TABLES, _PARTS, _REPAIRS)
    if not _changed(store, tables, index=True):
        return False
    made = _sqlite_made()
    names = [name for name, _table, _refuses in PROTECTION_TRIGGERS["sqlite"]] + [_INDEX_TRIGGER]
    listed = ", ".join(f"'{name}'" for name in names)
    remade = []
    with store.transaction() as tx:
        # Read again in the transaction: another writer may have put them back meanwhile.
        for name, sql in tx.execute(
            f"SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND lower(name) IN ({listed})"
        ):
            # SQLite's names ignore ASCII case: one made again as AUDIT_LOG_NO_UPDATE is agentgate's
            # name (``CREATE TRIGGER IF NOT EXISTS`` skips it), so it is compared, not missed.
            name = str(name).lower()
            if not _same_sqlite(sql, made[name]):
                tx.execute(f'DROP TRIGGER "{name}"')
                tx.execute(made[name])
                remade.append(name)
                if record and name != _INDEX_TRIGGER:
                    table = next(t for n, t, _r in PROTECTION_TRIGGERS["sqlite"] if n == name)
                    tx.execute(
                        "INSERT INTO audit_repairs (created, what, log_size, checkpoint_size) "
                        f"SELECT {_NOW['sqlite']}, ?, {_SIZES}",
                        (f"the protection trigger {name} on table {table} was not the one agentgate made",),
                    )
    return _INDEX_TRIGGER in remade


def _index_changed(store: Store) -> bool:
    """Whether the reference index's trigger (``audit_log_index_ref``) is there but is not the one
    agentgate makes (``_changed``). Reads the catalog only."""
    return (_INDEX_TRIGGER, "audit_log") in _changed(store, ("audit_log",), index=True)


def refs_complete(store: Store) -> bool:
    """Whether the reference index can be read as complete, read without writing: its tables are
    there, its entries were indexed once (``audit_refs_built``) and its trigger keeps it (present,
    the one agentgate makes, and on PostgreSQL enabled). What ``AuditLog(create=False)`` reads it
    by; otherwise ``explain`` scans the log (slower, the same answer)."""
    held = _tables_held(store, ("audit_refs", "audit_refs_built"))
    if len(held) < 2 or not _triggers(store, ("audit_log",)).get((_INDEX_TRIGGER, "audit_log")):
        return False
    if _index_changed(store):
        return False
    try:
        return bool(store.query("SELECT 1 FROM audit_refs_built"))
    except loaded_driver_errors(StoreError):
        return False  # a role that may not read it: read as a log without the index


def _ordinary_only(store: Store) -> list[tuple[str, str]]:
    """``(trigger, table)`` for each trigger of the log's machinery on PostgreSQL that fires in
    ordinary sessions only (``tgenabled`` O: a protection trigger a writer has not yet made
    ENABLE ALWAYS, and ``audit_log_index_ref``), which ``session_replication_role = replica``
    skips. Reads the catalog only."""
    names = [name for name, _table, _refuses in PROTECTION_TRIGGERS["postgresql"]] + [_INDEX_TRIGGER]
    listed = ", ".join(f"'{name}'" for name in names)
    rows = store.query(
        "SELECT t.tgname, c.relname FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c "
        f"ON c.oid = t.tgrelid WHERE NOT t.tgisinternal AND t.tgenabled = 'O' AND t.tgname IN ({listed}) "
        "AND c.relname IN ('audit_log', 'audit_checkpoints', 'agentgate_store_parts', 'audit_repairs') "
        "AND pg_catalog.pg_table_is_visible(c.oid)"
    )
    order = {name: k for k, name in enumerate(names)}
    return sorted(((str(name), str(table)) for name, table in rows), key=lambda found: order[found[0]])


_REPLICA_SETTINGS = """
SELECT CASE WHEN s.setrole = 0 AND s.setdatabase = 0 THEN 'every role'
            WHEN s.setrole = 0 THEN 'database ' || quote_ident(d.datname)
            WHEN s.setdatabase = 0 THEN 'role ' || quote_ident(r.rolname)
            ELSE 'role ' || quote_ident(r.rolname) || ' in database ' || quote_ident(d.datname) END,
       'ALTER ' || CASE WHEN s.setrole = 0 AND s.setdatabase = 0 THEN 'ROLE ALL'
            WHEN s.setrole = 0 THEN 'DATABASE ' || quote_ident(d.datname)
            WHEN s.setdatabase = 0 THEN 'ROLE ' || quote_ident(r.rolname)
            ELSE 'ROLE ' || quote_ident(r.rolname) || ' IN DATABASE ' || quote_ident(d.datname) END
            || ' RESET session_replication_role'
FROM pg_catalog.pg_db_role_setting s
LEFT JOIN pg_catalog.pg_roles r ON r.oid = s.setrole
LEFT JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase
WHERE s.setdatabase IN (0, (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()))
  AND EXISTS (SELECT 1 FROM unnest(s.setconfig) AS c(v) WHERE lower(c.v) = 'session_replication_role=replica')
UNION ALL
SELECT 'this session (' || source || ')',
       'a session without it (a connection without PGOPTIONS=''-c session_replication_role=replica'')'
FROM pg_catalog.pg_settings
WHERE name = 'session_replication_role' AND setting = 'replica'
  AND source NOT IN ('database', 'user', 'database user')
ORDER BY 1
"""
"""SQL rows ``(whose sessions, what removes it)``: each setting of ``session_replication_role =
replica`` that applies in this database (``ALTER ROLE|DATABASE ... SET``, kept in
pg_db_role_setting, for any role), and this session's own value when it is replica from
elsewhere (the client's options). Readable by any role."""


def _replica_sessions(store: Store) -> list[str]:
    """A line for each setting of ``session_replication_role = replica`` in force here
    (``_REPLICA_SETTINGS``) under which a trigger of the log's machinery does not fire
    (``_ordinary_only``); empty where none applies, or every such trigger fires always."""
    skipped = _ordinary_only(store)
    if not skipped:
        return []
    protection = [f"{name} on table {table}" for name, table in skipped if name != _INDEX_TRIGGER]
    index = any(name == _INDEX_TRIGGER for name, _table in skipped)
    harm = []
    if protection:
        harm.append(
            f"the protection trigger(s) {', '.join(protection)} do not fire there, so the log is not "
            "protected in those sessions (an edit or deletion is refused by nothing)"
        )
    if index:
        harm.append(
            f"the trigger {_INDEX_TRIGGER} does not fire there, so entries appended in those sessions "
            "are left out of the reference index audit_refs"
        )
    cure = (
        "; `agentgate store init` run as the store's owner makes the protection triggers fire in "
        "every session (ENABLE ALWAYS)"
        if protection
        else ""
    )
    lines = []
    for whose, reset in store.query(_REPLICA_SETTINGS):
        fix = (
            f"`{reset}` run as a superuser removes the setting"
            if reset.startswith("ALTER")
            else f"verify from {reset}"
        )
        lines.append(f"session_replication_role = replica is set for {whose}: {'; '.join(harm)}; {fix}{cure}")
    return lines


APPEND_FUNCTION_LINE = "the append function "
"""How ``verify``'s line for the append function (``_append_function``) begins."""


def _append_function(store: Store) -> list[str]:
    """A line for the append function (``LOCK_NEXT``) of the log's schema (the schema of
    ``audit_log``, by that schema-qualified name, as an append calls it) where it is missing or not
    the one agentgate makes (``_pg_function_differs``): every append runs it as the appending
    role, and one made otherwise can skip the append lock or write rows of its own (until review
    R61 nothing reported it). A function another role owns, of which the table's owner is not a
    member, is made again by its owner only: the line names ``ALTER FUNCTION ... OWNER TO`` first.
    Reads the catalog only (PostgreSQL; SQLite has no functions)."""
    rows = store.query(
        "SELECT pg_catalog.quote_ident(n.nspname), p.oid IS NOT NULL, "
        f"p.oid IS NOT NULL AND {_pg_function_differs('p', LOCK_NEXT)}, "
        "CASE WHEN NOT pg_catalog.pg_has_role(c.relowner, p.proowner, 'USAGE') "
        "THEN pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(p.proowner)) END, "
        "pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(c.relowner)) "
        "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_catalog.pg_proc p ON p.oid = pg_catalog.to_regprocedure("
        f"pg_catalog.quote_ident(n.nspname) || '.{LOCK_NEXT}()') "
        "WHERE c.oid = pg_catalog.to_regclass('audit_log')"
    )
    if not rows:
        return []
    schema, present, differs, function_owner, table_owner = rows[0]
    function = f"{schema}.{LOCK_NEXT}()"
    if not present:
        return [
            f"{APPEND_FUNCTION_LINE}{function} is missing: every append fails (it takes the append "
            "lock and reads the next index; someone with DDL rights on the store dropped it); "
            "`agentgate store init` run as the store's owner puts it back"
        ]
    if not differs:
        return []
    fix = _REMADE_BY_INIT
    if function_owner is not None:
        fix = (
            f"its owner {function_owner} is not the table's owner {table_owner}, whose `agentgate store "
            f"init` leaves the function as it is: `ALTER FUNCTION {function} OWNER TO {table_owner}` "
            f"run as a superuser, then {_REMADE_BY_INIT}"
        )
    return [
        f"{APPEND_FUNCTION_LINE}{function} is not the one agentgate made (its body, language, "
        "volatility, security, settings or return type were changed): every append runs it as the "
        "appending role, to take the append lock and read the next index, and one made otherwise can "
        "skip the append lock (two writers interleave) or write rows of its own (someone with DDL "
        f"rights on the store changed it); {fix}"
    ]


FOREIGN_TRIGGER = "is not one agentgate made"
"""What ``verify``'s line for a trigger agentgate did not make (``_foreign_triggers``), or a
PostgreSQL rule (``_rules``: agentgate makes none), says of it: ``agentgate audit verify``'s
closing line tells such lines from a trigger not in force."""


RULE_LINE = "the rule "
"""How ``verify``'s line for a PostgreSQL rule on the log's tables (``_rules``) begins: the closing
line of ``agentgate audit verify`` calls it a rule, not a trigger (until review R60 it said "a
trigger agentgate did not make" of a store that held none)."""


def _foreign_triggers(store: Store, tables: tuple[str, ...]) -> list[str]:
    """A line for each trigger on ``tables`` (constants: the log's tables and the records of it)
    that agentgate did not make: not a protection trigger of its table nor, on audit_log, the
    reference index's (SQLite: its name in any letter case, as SQLite matches names; PostgreSQL:
    the exact name, ``"AUDIT_LOG_APPEND_ONLY"`` being another trigger). Reported whatever it
    does, since ``verify`` cannot read intent: a BEFORE trigger can change an entry as it is
    appended (PostgreSQL: its leaf hash with it) or drop it (SQLite's ``RAISE(IGNORE)``), any
    trigger can append rows of its own, and a function can be replaced at any time while the
    trigger's row stays as it is. A writer's opening leaves it (it is not agentgate's to drop).
    Reads the catalog only."""
    if not tables:
        return []
    ours = {(name, table) for name, table, _refuses in PROTECTION_TRIGGERS[store.dialect]}
    ours.add((_INDEX_TRIGGER, "audit_log"))
    listed = ", ".join(f"'{name}'" for name in tables)
    if store.dialect == "sqlite":
        rows = store.query(
            "SELECT name, lower(tbl_name) FROM sqlite_master "
            f"WHERE type = 'trigger' AND lower(tbl_name) IN ({listed}) ORDER BY lower(tbl_name), name"
        )
        foreign = [
            (str(name), str(table)) for name, table in rows if (str(name).lower(), str(table)) not in ours
        ]
        drop = "`DROP TRIGGER {name}` removes it"
    else:
        rows = store.query(
            "SELECT t.tgname, c.relname FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c "
            f"ON c.oid = t.tgrelid WHERE NOT t.tgisinternal AND c.relname IN ({listed}) "
            "AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY c.relname, t.tgname"
        )
        foreign = [(str(name), str(table)) for name, table in rows if (str(name), str(table)) not in ours]
        drop = "`DROP TRIGGER {name} ON {table}` run as the table's owner removes it"
    return [
        f"the trigger {_quoted(name, store.dialect)} on table {table} {FOREIGN_TRIGGER}: it runs "
        "as that table is written to, and what it does cannot be told from here (a BEFORE trigger can "
        "change or drop an entry as it is appended, any trigger can write rows of its own); check what "
        "it did to the rows written since it was made, then "
        + drop.format(name=_quoted(name, store.dialect), table=table)
        + " (a writer's opening of the log leaves it)"
        for name, table in foreign
    ]


def _rules(store: Store, tables: tuple[str, ...]) -> list[str]:
    """A line for each PostgreSQL rule on ``tables`` (constants: the log's tables and the records of
    it), enabled or not; agentgate makes none. Reported whatever it does, as a trigger agentgate did
    not make (``_foreign_triggers``): a ``DO INSTEAD`` rule rewrites the statement before any
    trigger runs, so one ``ON INSERT`` can drop each deny as it is appended (the INSERT succeeds
    and writes nothing) and one ``ON UPDATE`` can turn an edit into another statement, and any rule
    can write rows of its own (until review R59 none was read). A writer's opening leaves it.
    Reads the catalog only; SQLite has no rules."""
    if store.dialect != "postgresql" or not tables:
        return []
    listed = ", ".join(f"'{name}'" for name in tables)
    rows = store.query(
        "SELECT r.rulename, c.relname FROM pg_catalog.pg_rewrite r JOIN pg_catalog.pg_class c "
        f"ON c.oid = r.ev_class WHERE c.relname IN ({listed}) AND r.rulename <> '_RETURN' "
        "AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY c.relname, r.rulename"
    )
    return [
        f"{RULE_LINE}{_quoted(str(name), 'postgresql')} on table {table} {FOREIGN_TRIGGER}: it rewrites "
        "the statements that write that table, and what it does cannot be told from here (a DO "
        "INSTEAD rule can drop or change an entry as it is appended, any rule can write rows of its "
        "own); check what it did to the rows written since it was made, then "
        f"`DROP RULE {_quoted(str(name), 'postgresql')} ON {table}` run as the table's owner removes it "
        "(a writer's opening of the log leaves it)"
        for name, table in rows
    ]


def _quoted(name: str, dialect: Dialect) -> str:
    """A trigger's name as SQL of ``dialect`` names it: double-quoted where it is not plain
    lower-case letters, digits and underscores (PostgreSQL folds an unquoted name to lower case)."""
    plain = name.isascii() and name.replace("_", "a").isalnum() and not name[:1].isdigit()
    if plain and (dialect == "sqlite" or name == name.lower()):
        return name
    return '"' + name.replace('"', '""') + '"'


def missing_protection(store: Store) -> list[str]:
    """What is missing of the log's machinery, one line each, read from the catalog (nothing is
    written): each protection trigger (``PROTECTION_TRIGGERS``) that is missing from its table, is
    not the one agentgate made (``_changed``), or on PostgreSQL is disabled, and the reference
    index's trigger, the same way, where the index was built; on PostgreSQL also each setting of
    ``session_replication_role = replica`` under which one of them does not fire
    (``_replica_sessions``); each trigger on those tables that agentgate did not make
    (``_foreign_triggers``), and each PostgreSQL rule on them (``_rules``); and each repair recorded in ``audit_repairs`` that no acceptance
    names (``_unaccepted_repairs``), or, where the store records ``audit_repairs`` as made, that
    table missing (``_repairs_dropped``). Its tables are there (the log's were checked as it opened; the record's triggers are looked for
    only where the record's table is). Empty for a log whose machinery is whole."""
    held = _tables_held(store, (*LOG_TABLES, _PARTS, _REPAIRS, "audit_refs_built"))
    found = _triggers(store, (*LOG_TABLES, _PARTS, _REPAIRS))
    changed = _changed(store, (*LOG_TABLES, _PARTS, _REPAIRS), index=True)
    lines = []
    split = _split_tables(store)
    moved: set[str] = set()
    if split is not None:
        # A moved table's triggers run the functions of the schema it left, and read against its
        # new schema's they are not agentgate's: the move back is the fix (until review R61 each
        # line named `store init`, which refuses such a log), and they are compared after it.
        where, moves, moved = split
        lines.append(
            f"{SPLIT_LINE} ({where}): agentgate makes them, and the functions their protection "
            "triggers run, in one schema, so the protection of a table moved out of it cannot be "
            f"read or put back (a writer's opening refuses the log); `{moves}` run as their owner "
            "moves it back (docs/operations.md, The audit log's tables in one schema)"
        )
        changed = {found_at: said for found_at, said in changed.items() if found_at[1] not in moved}
    unmarked = not _tables_held(store, _MARKS)
    for name, table, refuses in PROTECTION_TRIGGERS[store.dialect]:
        if table not in held or (found.get((name, table)) and (name, table) not in changed):
            continue
        state, fix = _state(name, table, found, changed)
        if unmarked and name in _LATER_TRIGGERS[store.dialect] and (name, table) not in found:
            # Not yet upgraded, or dropped with the tables that tell (``_MARKS``): no one is
            # accused (until review R69 the line said someone changed it).
            lines.append(
                f"the protection trigger {name} on table {table} is missing: the log holds none of "
                "the tables a release that made the trigger makes with it "
                f"({', '.join(_MARKS)}), so it was made before the trigger (2026-11-29) and never "
                "had it, or someone with DDL rights on the store dropped it and those tables; it is "
                f"not protected against {refuses}; `agentgate store init` run as the store's owner "
                "adds it (docs/operations.md, Upgrading)"
            )
            continue
        lines.append(
            f"the protection trigger {name} on table {table} {state}: the log is no longer protected "
            f"against {refuses} (someone with DDL rights on the store changed it); {fix}"
        )
    index = (_INDEX_TRIGGER, "audit_log")
    if "audit_refs_built" in held and (not found.get(index) or index in changed):
        try:
            built = bool(store.query("SELECT 1 FROM audit_refs_built"))
        except loaded_driver_errors(StoreError):
            built = False  # a role that may not read it: an index it does not read
        if built:
            state, fix = _state(_INDEX_TRIGGER, "audit_log", found, changed)
            lines.append(
                f"the trigger {_INDEX_TRIGGER} on table audit_log {state}: the reference index "
                "audit_refs is no longer kept for new entries (audit explain reads the whole log "
                f"instead); {fix}"
            )
    if store.dialect == "postgresql" and "audit_log" in held and "audit_log" not in moved:
        lines.extend(_append_function(store))
    present = tuple(table for table in (*LOG_TABLES, _PARTS, _REPAIRS) if table in held)
    lines.extend(_foreign_triggers(store, present))
    lines.extend(_rules(store, present))
    if store.dialect == "postgresql":
        lines.extend(_replica_sessions(store))
    if _REPAIRS in held:
        lines.extend(_unaccepted_repairs(store))
    else:
        dropped_at = _repairs_dropped(store)
        if dropped_at is not None:
            lines.append(_repairs_dropped_said(dropped_at))
    return lines


_REPAIRS_UNACCEPTED = (
    "SELECT r.id, r.created, r.what, r.log_size, r.checkpoint_size FROM audit_repairs r "
    "WHERE r.accepts IS NULL AND r." + _NOT_ADDED + " AND {accepted} "
    "(SELECT 1 FROM audit_repairs a WHERE a.accepts = r.id) ORDER BY r.id"
)


def _not_whole(log_size: object, checkpoint_size: object) -> str | None:
    """What is wrong with a repair's sizes when one is not a whole number, ``None`` when both are
    (or NULL, read as 0: no checkpoint stored then). A writer's opening records whole numbers
    only; ``audit_repairs`` is append-only, not closed, and SQLite keeps a fraction, text or bytes
    in its columns if given one. A whole number kept as a real (5.0, in a table made again
    without the columns' types) is that number, as an index is (``_stored_index``): until review
    R84 it was named "a fraction"."""
    for column, value in (("log_size", log_size), ("checkpoint_size", checkpoint_size)):
        if value is not None and _stored_index(value) is None:
            return f"its {column} is {_described(value)}, not a whole number: a repair record written outside agentgate"
    return None


def _written_outside(what: object, odd: str) -> str:
    """What a repair whose sizes are not whole numbers (``odd``, ``_not_whole``) says: that
    someone wrote it, and that the entries it leaves unprotected are not known; the warning and
    ``verify``'s line both say it so."""
    return (
        f"{what}; {odd} (someone with write rights on the store inserted it), so the entries it "
        "leaves unprotected are not known"
    )


def _window(log_size: object, checkpoint_size: object) -> str:
    """The entries a repair found unprotected: after the checkpoint stored last then, up to the
    log's size then; a row whose sizes are not whole numbers (``_not_whole``) names none, and says
    why (until review R84 ``int`` raised on a size of 3.5, and ``verify``, ``show`` and
    ``checkpoint`` ended in a traceback)."""
    odd = _not_whole(log_size, checkpoint_size)
    if odd is not None:
        return f"entries not known ({odd})"
    first = _stored_index(checkpoint_size) or 0  # NULL: no checkpoint then
    end = _stored_index(log_size) or 0
    return (
        f"entries {first} to {end - 1}" if end > first else "no entry (every one was covered by a checkpoint)"
    )


def _appended(log_size: object, checkpoint_size: object) -> str:
    """``_window`` as the subject of a sentence: "entries 3 to 4 were appended", or "no entry was
    appended" (not "entries 2 to 1", nor "no entry ... were"), for a repair whose sizes are whole
    numbers (``_not_whole``: the lines that name one say otherwise what is not known)."""
    window = _window(log_size, checkpoint_size)
    return f"{window} were appended" if window.startswith("entries") else f"{window} was appended"


def _unaccepted_repairs(store: Store) -> list[str]:
    """A line for each repair recorded in ``audit_repairs`` that no acceptance names: a protection
    trigger a writer's opening put back or made again, after which the entries appended while it
    was not in force (and not covered by a checkpoint then) cannot be vouched for. Reads only."""
    try:
        rows = store.query(_REPAIRS_UNACCEPTED.format(accepted="NOT EXISTS"))
    except loaded_driver_errors(StoreError):
        return []  # a role that may not read it
    lines = []
    for rid, created, what, size, checkpoint in rows:
        odd = _not_whole(size, checkpoint)
        if odd is None:
            lines.append(
                f"repair {rid} at {created}: {what}, and a writer's opening of the log put it back: "
                f"{_appended(size, checkpoint)} after the checkpoint stored last then while it "
                "was not in force, and cannot be vouched for (someone with DDL rights on the store "
                "changed it); check them against a copy kept outside the database, then run "
                f"`agentgate audit accept-repair {rid} --by NAME --reason TEXT`"
            )
        else:
            lines.append(
                f"repair {rid} at {created}: {_written_outside(what, odd)}: check the log against a "
                "copy kept outside the database, then run `agentgate audit accept-repair "
                f"{rid} --by NAME --reason TEXT`"
            )
    return lines


def accepted_repairs(store: Store) -> list[str]:
    """A line for each repair in ``audit_repairs`` that an acceptance names (who accepted it, when,
    why): what ``verify`` prints as information. Reads only."""
    if _REPAIRS not in _tables_held(store, (_REPAIRS,)):
        return []
    try:
        rows = store.query(
            "SELECT r.id, r.what, r.log_size, r.checkpoint_size, a.accepted_by, a.created, a.reason "
            "FROM audit_repairs r JOIN audit_repairs a ON a.accepts = r.id "
            "WHERE r.accepts IS NULL ORDER BY r.id, a.id"
        )
    except loaded_driver_errors(StoreError):
        return []
    return [
        f"repair {rid} ({what}; {_window(size, checkpoint)} unprotected) was accepted by {by} at {when}: {reason}"
        for rid, what, size, checkpoint, by, when, reason in rows
    ]


def upgrade_additions(store: Store) -> list[str]:
    """A line for each protection trigger that a writer's opening added to a log made before a
    release made it (``ADDED_BY_UPGRADE``): what ``verify`` prints as information, not a problem.
    Reads only."""
    if _REPAIRS not in _tables_held(store, (_REPAIRS,)):
        return []
    try:
        rows = store.query(
            "SELECT created, what, log_size, checkpoint_size FROM audit_repairs "
            f"WHERE accepts IS NULL AND NOT ({_NOT_ADDED}) ORDER BY id"
        )
    except loaded_driver_errors(StoreError):
        return []
    return [
        f"{what} at {created}, when the log held {size} entries: the log was made by a release "
        "before the trigger (2026-11-29), and the store held none of the tables a later release "
        f"makes with the log ({', '.join(_MARKS)}); nothing to accept (what the trigger refuses "
        "was refused by nothing before it, as on every log of that release: a checkpoint saved "
        "outside the database vouches for the log)"
        for created, what, size, _checkpoint in rows
    ]


def accept_repair(store: Store, repair: int, by: str, reason: str) -> str:
    """Record that ``by`` checked the entries a repair left unprotected against a copy kept outside
    the database and accepts it (``reason``): a row of ``audit_repairs`` naming the repair. Returns
    the repair's line. Raises ``RepairRefused`` (an ``InputError``) for an id that names no repair
    (none recorded in this store included, and a protection trigger an upgrade added:
    ``ADDED_BY_UPGRADE``) or one already accepted, and ``InputError`` for an
    empty ``by`` or ``reason``, for either when it is not text, and for a ``repair`` that is no
    whole number a store holds (until review R90 ``None`` was a bare ``AttributeError``);
    nothing is written."""
    whole_number(repair, "repair", -MAX_STORED_INTEGER - 1)
    for value, argument in ((by, "by"), (reason, "reason")):
        if not isinstance(value, str):
            raise InputError(f"accepting a repair: {argument} must be text (str), got {type(value).__name__}")
    if not by.strip() or not reason.strip():
        raise InputError("accepting a repair needs who accepts it (--by) and why (--reason)")
    if _REPAIRS not in _tables_held(store, (_REPAIRS,)):
        raise RepairRefused(f"this store records no repair (no table {_REPAIRS})")
    with store.transaction() as tx:
        if store.dialect == "postgresql":  # one acceptance of a repair, whoever else accepts it
            tx.execute(f"SELECT pg_catalog.pg_advisory_xact_lock({APPEND_LOCK})")
        found = tx.execute(
            "SELECT what, log_size, checkpoint_size FROM audit_repairs WHERE id = ? AND accepts IS NULL",
            (repair,),
        )
        if not found:
            raise RepairRefused(f"audit_repairs holds no repair {repair}")
        if str(found[0][0]).endswith(f" {ADDED_BY_UPGRADE}"):
            raise RepairRefused(
                f"audit_repairs row {repair} is no repair: {found[0][0]}, to a log made before a "
                "release made it, and needs no acceptance (audit verify prints it as a note)"
            )
        if tx.execute("SELECT 1 FROM audit_repairs WHERE accepts = ?", (repair,)):
            raise RepairRefused(f"repair {repair} was accepted already")
        tx.execute(
            f"INSERT INTO audit_repairs (created, what, accepts, accepted_by, reason) "
            f"SELECT {_NOW[store.dialect]}, 'acceptance', ?, ?, ?",
            (repair, by, reason),
        )
    what, size, checkpoint = found[0]
    return f"repair {repair} ({what}; {_window(size, checkpoint)} unprotected)"


def protection_said(store: Store) -> str | None:
    """The first line of ``missing_protection`` in ``audit verify``'s words, followed by
    " (and N more)" where more are missing; ``None`` for a log whose machinery is whole. What
    the verbs that warn or refuse over such a log name. Reads the catalog only: writes nothing
    and needs no key."""
    lines = missing_protection(store)
    if not lines:
        return None
    return lines[0] + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else "")


def _state(
    name: str,
    table: str,
    found: dict[tuple[str, str], bool],
    changed: dict[tuple[str, str], tuple[str, str]],
) -> tuple[str, str]:
    """How a trigger not in force is (missing, changed, or disabled) and what puts it back in force:
    a writer's opening as the store's owner (a disabled ``audit_log_index_ref`` is enabled by
    ``REFS_DDL`` as ``CREATE TRIGGER`` makes it, firing in ordinary sessions only, and the entries
    appended meanwhile are indexed)."""
    if (name, table) in changed:
        how, fix = changed[(name, table)]
        return f"is not the one agentgate made: {how}", fix
    if (name, table) in found:
        return "is disabled", "`agentgate store init` run as the store's owner enables it"
    return "is missing", "`agentgate store init` run as the store's owner puts it back"
