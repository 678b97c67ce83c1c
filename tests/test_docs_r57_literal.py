"""Review R57: README.md, docs/quickstart.md, cli.md, concepts.md, policy-reference.md and
operations.md followed literally by a newcomer, in scratch directories outside the checkout,
each command run and compared with what the page says it prints and does.

What held (run by hand this review): the quickstart end to end (keys, ``policy schema -o`` the
same bytes as ``policies/policy.schema.json``, lint clean, the 2500 refused, the 800 paused,
approved and run, ``audit verify`` "intact: 6 entries ..."); concepts.md's set-up and its four
walk-throughs, word for word where the page quotes the output; every ``grant``, ``approval``,
``policy``, ``audit``, ``tasks``, ``broker`` and ``store`` verb of cli.md with the exit codes and
the refusals quoted in its Conventions (DURATION, AMOUNT, CAP, empty values, ``keys new --dir``
naming a file); every policy in ``policies/`` lints clean.

What did not hold, each with its test below:

- docs/operations.md says to verify the log "before putting anything back" when a protection
  trigger is missing, and recommends ``agentgate audit checkpoint`` from cron every minute; but
  ``audit checkpoint`` opened the log as a writer, which put the dropped trigger back, and then
  signed: an entry rewritten (with its leaf hash) while the trigger was gone was signed into a
  checkpoint, and ``audit verify``, TAMPERED before, said ``intact``. The evidence was gone
  within a minute. It now refuses first (REFUSED, exit 1, nothing signed or put back).
- ``audit prove`` on such a log signed a new checkpoint when the log had grown, so the bundle of
  the rewritten entry verified offline as ``valid``. It now signs none over it (exit 2, one line,
  nothing written).
- docs/operations.md and cli.md's verify row said ``prove`` writes nothing "of an entry a stored
  checkpoint covers"; it signs a checkpoint whenever the log grew since the last, as cli.md's
  prove row says, whichever entry it proves. Docs fixed.
- ``grant revoke`` on such a log put the trigger back as it opened the log to write, without a
  word, after which ``audit verify`` no longer named it. A revocation must go through, so it
  still does; it now names the trigger on one warning line on standard error first.

Checked mechanically from now on: each section's table in docs/policy-reference.md lists exactly
the fields its model takes (the earlier test went from the page to the loader only).
"""

from __future__ import annotations

import hashlib
import re
import typing
from pathlib import Path

import psycopg
import pytest
from _raw_sqlite import opened
from pydantic import BaseModel

from agentgate.cli.main import main
from agentgate.policy import _schema as schema
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


@pytest.fixture
def checkpointed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite store at ``AGENTGATE_STORE`` with a checkpoint over entry 0 and entry 1 after it."""
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    db = tmp_path / "agentgate.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store))
        log.append({"kind": "revoke", "principal": "operator", "reasons": ["first"]})
        log.checkpoint()
        log.append({"kind": "revoke", "principal": "operator", "reasons": ["second"]})
    return db


def _rewrite_entry_1_past_a_dropped_trigger(db: Path) -> None:
    """What someone with DDL rights does: drop the trigger that refuses an edit, rewrite an entry
    no checkpoint covers yet, with the leaf hash that matches it."""
    with opened(db) as conn:
        conn.execute("DROP TRIGGER audit_log_no_update")
        (entry,) = conn.execute("SELECT entry FROM audit_log WHERE idx = 1").fetchone()
        forged = bytes(entry).replace(b"second", b"SECOND")
        digest = hashlib.sha256(b"\x00" + forged).digest()
        conn.execute("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 1", (forged, digest))


def _triggers(db: Path) -> set[str]:
    with opened(db) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    return names


def test_checkpoint_refuses_a_log_whose_protection_trigger_is_missing_and_puts_nothing_back(
    checkpointed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R57: audit checkpoint put a dropped protection trigger back and signed the entries
    edited meanwhile, so verify's TAMPERED became intact (docs/operations.md: verify first)."""
    _rewrite_entry_1_past_a_dropped_trigger(checkpointed)
    assert main(["audit", "verify"]) == 1
    assert "audit_log_no_update on table audit_log is missing" in capsys.readouterr().out
    triggers = _triggers(checkpointed)
    saved = checkpointed.parent / "saved.cp"

    assert main(["audit", "checkpoint", "--out", str(saved)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REFUSED: the protection trigger audit_log_no_update on table audit_log is missing")
    assert "agentgate audit verify" in out and "nothing was signed" in out
    assert _triggers(checkpointed) == triggers  # nothing put back: the evidence stays
    assert not saved.exists()
    with opened(checkpointed) as conn:
        assert conn.execute("SELECT COUNT(*) FROM audit_checkpoints").fetchone() == (1,)
    assert main(["audit", "verify"]) == 1  # still TAMPERED, naming the trigger
    assert "audit_log_no_update on table audit_log is missing" in capsys.readouterr().out


def test_checkpoint_signs_again_once_store_init_put_the_trigger_back(
    checkpointed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R57: the way out that the refusal names, store init as the owner, then checkpoint."""
    with opened(checkpointed) as conn:
        conn.execute("DROP TRIGGER audit_log_no_update")
    assert main(["audit", "checkpoint"]) == 1
    assert main(["store", "init"]) == 0
    capsys.readouterr()
    # The repair store init made is recorded, and refused until accepted (review R57, later).
    assert main(["audit", "checkpoint"]) == 1
    assert capsys.readouterr().out.startswith("REFUSED: repair 1 at ")
    assert main(["audit", "accept-repair", "1", "--by", "ops", "--reason", "entries checked"]) == 0
    assert main(["audit", "checkpoint"]) == 0
    capsys.readouterr()
    assert main(["audit", "verify"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("intact: 2 entries")


# --- docs/policy-reference.md: every field the loader takes has its table row -------------------

_REFERENCE_TABLES: dict[str, type[BaseModel]] = {
    "Top level": schema.PolicyDocument,
    "settings": schema.Settings,
    "trust_anchors": schema.TrustAnchor,
    "tenants": schema.Tenant,
    "principals": schema.Principal,
    "tools": schema.Tool,
    "models": schema.ModelSpec,
    "gpus": schema.GpuType,
    "priority_classes": schema.PriorityClass,
    "roles": schema.Role,
    "capabilities": schema.CapabilityRule,
    "delegation": schema.Delegation,
    "quotas": schema.Quota,
    "approvals": schema.ApprovalGate,
}


def _documented_fields() -> dict[str, set[str]]:
    """The field names in the first column of each section's table (``a` / `b`` split)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "policy-reference.md").read_text(encoding="utf-8")
    fields: dict[str, set[str]] = {}
    section = header = ""
    for line in text.splitlines():
        if line.startswith("#"):
            section = line.strip("# ")
        elif line.startswith("| ") and not line.startswith("| `"):
            header = line.split("|")[1].strip()  # "field", or "operator" for the operators' table
        elif line.startswith("| `") and section in _REFERENCE_TABLES:
            first = line.strip("|").split("|")[0]
            table = section if header == "field" else f"{section} {header}s"
            fields.setdefault(table, set()).update(re.findall(r"`([^`]+)`", first))
    return fields


def _submodel(annotation: object) -> tuple[type[BaseModel], bool] | None:
    """The model a field holds, and whether it is held by name (a mapping), if it holds one."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    for arg in typing.get_args(annotation):
        found = _submodel(arg)
        if found is not None:
            return found[0], found[1] or typing.get_origin(annotation) is dict
    return None


def _loader_fields(model: type[BaseModel], documented: set[str]) -> set[str]:
    """What the table of ``model`` should list: each field by its YAML name, and where the table
    spells out a field's own fields (``rate.per_second``, ``args.NAME.type``), each of those."""
    names = set()
    for name, info in model.model_fields.items():
        key = info.alias or name
        held = _submodel(info.annotation)
        prefix = f"{key}.NAME." if held and held[1] else f"{key}."
        if held and any(d.startswith(prefix) for d in documented):
            names |= {prefix + (f.alias or n) for n, f in held[0].model_fields.items()}
            if key in documented:
                names.add(key)
        else:
            names.add(key)
    return names


def test_every_field_the_loader_takes_is_a_row_of_its_section_in_policy_reference_md() -> None:
    """Review R57: the reference's tables were checked from the page to the loader (a default
    stated is the loader's), not from the loader to the page: a field added to a section's model
    without its row went unseen. Each section's rows are now exactly its model's fields."""
    documented = _documented_fields()
    assert set(documented) == {*_REFERENCE_TABLES, "capabilities operators"}
    for section, model in _REFERENCE_TABLES.items():
        assert documented[section] == _loader_fields(model, documented[section]), section
    operators = {info.alias or name for name, info in schema.ConstraintSpec.model_fields.items()}
    assert documented["capabilities operators"] == operators


def test_prove_signs_no_checkpoint_over_a_log_whose_protection_trigger_is_missing(
    checkpointed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R57: audit prove signed a new checkpoint over a log whose trigger was dropped, so the
    bundle of an entry rewritten meanwhile verified offline as valid; it is refused, as checkpoint."""
    _rewrite_entry_1_past_a_dropped_trigger(checkpointed)
    bundle = checkpointed.parent / "entry-1.proof"
    for index in ("1", "0"):  # the forged entry, and one the stored checkpoint covers
        # A refusal, as audit checkpoint's: exit 1, REFUSED on standard output (exit 2 until review R59).
        assert main(["audit", "prove", index, "--out", str(bundle)]) == 1
        out = capsys.readouterr().out
        assert "audit_log_no_update on table audit_log is missing" in out and "no proof written" in out
        assert not bundle.exists()
    with opened(checkpointed) as conn:
        assert conn.execute("SELECT COUNT(*) FROM audit_checkpoints").fetchone() == (1,)


def test_prove_signs_a_checkpoint_when_the_log_grew_whichever_entry_it_proves(
    checkpointed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R57: docs/operations.md said prove writes nothing of an entry a stored checkpoint
    covers; it signs one whenever the log grew since the last (cli.md's prove row), as here."""

    def checkpoints() -> int:
        with opened(checkpointed) as conn:
            (count,) = conn.execute("SELECT COUNT(*) FROM audit_checkpoints").fetchone()
        return int(count)

    bundle = checkpointed.parent / "p"
    assert main(["audit", "prove", "0", "--out", str(bundle)]) == 0  # covered, but the log grew
    assert checkpoints() == 2
    assert main(["audit", "prove", "0", "--out", str(bundle)]) == 0  # the last covers the whole log
    assert main(["audit", "prove", "1", "--out", str(bundle)]) == 0
    assert checkpoints() == 2
    capsys.readouterr()


@pytest.mark.postgres
def test_checkpoint_refuses_a_disabled_postgresql_trigger_and_leaves_it_disabled(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R57: audit checkpoint, as the owner, enabled a disabled PostgreSQL protection trigger and signed."""
    from agentgate.store._postgres import PostgresStore

    monkeypatch.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.setenv("AGENTGATE_STORE", postgres_url)
    with PostgresStore(postgres_url) as store:
        log = AuditLog(store, open_log_key(store, create=True))
        log.append({"kind": "revoke", "principal": "operator", "reasons": ["first"]})
        log.checkpoint()
        log.append({"kind": "revoke", "principal": "operator", "reasons": ["second"]})
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only")
        assert main(["audit", "checkpoint"]) == 1
        out = capsys.readouterr().out
        assert out.startswith(
            "REFUSED: the protection trigger audit_log_append_only on table audit_log is disabled"
        )
        state = conn.execute(
            "SELECT tgenabled FROM pg_trigger WHERE tgname = 'audit_log_append_only'"
        ).fetchone()
        assert state == ("D",)
        assert conn.execute("SELECT COUNT(*) FROM audit_checkpoints").fetchone() == (1,)


def test_grant_revoke_says_it_puts_back_a_missing_protection_trigger_and_revokes_all_the_same(
    checkpointed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R57: grant revoke put a dropped protection trigger back without a word, so the one
    trace of it (verify's TAMPERED line) was gone; the revocation goes through, and it says so."""
    with opened(checkpointed) as conn:
        conn.execute("DROP TRIGGER audit_log_no_update")
    grant_id = "a" * 64
    assert main(["grant", "revoke", grant_id, "--reason", "leaked"]) == 0
    done = capsys.readouterr()
    assert done.out == f"revoked {grant_id}\n"
    # The note first, then the warnings, said when the command ends (review R72): the command's
    # own, then the audit log's record of the trigger it put back.
    note, *warnings = done.err.splitlines()
    assert note.startswith("note: no grant with this id is recorded in this store")  # review R64
    assert warnings[0].startswith(
        "agentgate: warning: the protection trigger audit_log_no_update on table audit_log is missing"
    )
    assert "the revocation goes through" in warnings[0] and "run agentgate audit verify" in warnings[0]
    assert all(line.startswith("agentgate: warning: ") for line in warnings) and len(warnings) <= 2, warnings
    assert "audit_log_no_update" in _triggers(checkpointed)  # the writer's opening put it back
