"""``audit show`` and ``audit explain`` warn of a trigger of the log's machinery not in force.

Until review R57 only ``verify`` and ``report`` said that a protection trigger was missing, changed
or disabled; ``show`` and ``explain`` listed the entries of a log that nothing protected any more
without a word. Rules checked here: each prints one warning line on standard error naming the
first such trigger and pointing to ``audit verify``; the exit code is unchanged (they show, they do
not verify); standard output is what it would be without the warning; nothing is written (a SQLite
file byte for byte, a PostgreSQL catalog and rows); an intact log gets no warning.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from test_audit_read_only import ORIGIN, _catalog, _files, _postgres, _run
from test_audit_trigger_bodies import KEY, NO_OP, _sqlite_log

from agentgate.store.audit import AuditLog

DROPPED = "the protection trigger audit_log_no_update on table audit_log is missing"
CHANGED = "the protection trigger audit_log_no_update on table audit_log is not the one agentgate made"


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit", "agentgate.cli.store"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))


VERBS = [["audit", "show"], ["audit", "show", "--json", "--last", "1"], ["audit", "explain", "1"]]


@pytest.mark.parametrize(
    ("ddl", "warning"),
    [(["DROP TRIGGER audit_log_no_update"], DROPPED), (["DROP TRIGGER audit_log_no_update", NO_OP], CHANGED)],
    ids=["dropped", "changed"],
)
@pytest.mark.parametrize("argv", VERBS, ids=[" ".join(v[1:]) for v in VERBS])
def test_show_and_explain_warn_of_a_trigger_not_in_force_and_write_nothing(
    tmp_path: Path,
    cli: None,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    ddl: list[str],
    warning: str,
) -> None:
    """Review R57: audit show and explain said nothing of a dropped or changed protection trigger (verify and report did)."""
    _sqlite_log(tmp_path / "agentgate.db")
    capsys.readouterr()
    assert _run([*argv, "--key", KEY.public.did]) == 0
    intact = capsys.readouterr()
    assert intact.err == ""
    _sqlite_log(tmp_path / "other.db", *ddl)  # the same entries, the trigger damaged
    (tmp_path / "other.db").replace(tmp_path / "agentgate.db")
    before = _files(tmp_path)
    assert _run([*argv, "--key", KEY.public.did]) == 0
    damaged = capsys.readouterr()
    assert _files(tmp_path) == before  # byte for byte
    lines = damaged.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"agentgate: warning: {warning}")
    assert lines[0].endswith("; run agentgate audit verify")
    if argv[1] == "show":  # the same entries (explain prints the entry's time, which differs)
        assert damaged.out.count("\n") == intact.out.count("\n") and damaged.out


@pytest.mark.postgres
def test_show_warns_of_a_disabled_postgresql_trigger_and_changes_nothing(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R57: audit show said nothing of a disabled PostgreSQL protection trigger."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.setenv("AGENTGATE_STORE", postgres_url)
    with _postgres(postgres_url) as store:
        AuditLog(store, KEY, ORIGIN).append_many([{"kind": "allow", "principal": "did:key:zA"}] * 2)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only")
    before = _catalog(postgres_url)
    capsys.readouterr()
    for argv in (["audit", "show"], ["audit", "explain", "0"]):
        assert _run([*argv, "--key", KEY.public.did]) == 0
        err = capsys.readouterr().err
        assert err.startswith(
            "agentgate: warning: the protection trigger audit_log_append_only on table audit_log is disabled"
        )
        assert err.count("\n") == 1
    assert _catalog(postgres_url) == before
