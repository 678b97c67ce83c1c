"""``verify`` on a log whose tables were split across schemas names the move back, not ``store init``.

Since review R60 a writer's opening refuses such a log, naming each table's schema and the
``ALTER TABLE ... SET SCHEMA`` that moves it back. Until review R61 ``audit verify`` read each
moved table's triggers against the functions of its new schema (where agentgate made none) and
reported each as not the one agentgate made, with ``agentgate store init`` as the fix: the very
command that refuses the log. Rules checked here: ``verify`` names the split as the opening does
(each table's schema and the ``ALTER TABLE ... SET SCHEMA``), says nothing of ``store init`` for
the moved tables' triggers, closes with words of the split, and once the table is moved back the
log verifies with nothing to report.
"""

from __future__ import annotations

import psycopg
import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN, _postgres
from test_audit_r58_pg_repairs import _database
from test_audit_r60_rule_closing_line import _log, _verify

from agentgate.store.audit import AuditLog, open_log_key

pytestmark = pytest.mark.postgres


def _moved(url: str, table: str) -> None:
    _log(url)  # entries 0 and 1, checkpointed
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA other")
        conn.execute(f"ALTER TABLE {table} SET SCHEMA other")  # type: ignore[arg-type]
        conn.execute(f"ALTER DATABASE {_database(url)} SET search_path = public, other")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "moved", ["audit_log", "audit_checkpoints", "audit_repairs", "agentgate_store_parts"]
)
def test_verify_names_the_split_and_the_move_back(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], moved: str
) -> None:
    """Review R61: verify on tables split across schemas named `store init` (which refuses the log) as the fix."""
    _moved(postgres_url, moved)
    code, out = _verify(postgres_url, monkeypatch, capsys)
    assert code == 1
    assert out.startswith("TAMPERED: 1 problem(s)\n")
    (line,) = [line for line in out.splitlines() if line.startswith("  - ")]
    assert line.startswith("  - the audit log's tables are not in one schema (")
    assert f"{moved} in other" in line and line.count(" in public") == 3
    assert f"`ALTER TABLE other.{moved} SET SCHEMA public` run as their owner" in line
    assert "store init" not in line
    closing = out.splitlines()[-1]
    assert closing.startswith("the entries verify: 2 entries")
    assert "nothing refuses an edit" not in closing
    assert "the log's tables are split across schemas" in closing
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # the fix the line names
        conn.execute(f"ALTER TABLE other.{moved} SET SCHEMA public")  # type: ignore[arg-type]
    code, out = _verify(postgres_url, monkeypatch, capsys)
    assert (code, out.split(":")[0]) == (0, "intact")
    with _postgres(postgres_url) as store:
        assert AuditLog(store, open_log_key(store), ORIGIN).append(ENTRY) == 2
