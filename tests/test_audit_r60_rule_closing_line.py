"""``audit verify``'s closing line calls a PostgreSQL rule on the log's tables a rule.

Until review R60 a rule on the log's tables (``CREATE RULE ... ON INSERT TO audit_log DO INSTEAD
...``, reported since review R59) was counted with the triggers agentgate did not make, so the
closing line said "a trigger agentgate did not make runs as the log's tables are written" of a
store that held no such trigger, and a reader went looking for a trigger. Rules checked here: a
rule alone closes with words of a rule; a rule beside a trigger agentgate did not make names
both; the verdict stays TAMPERED, exit 1.
"""

from __future__ import annotations

import psycopg
import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN, _postgres, _run

from agentgate.store.audit import AuditLog, open_log_key

pytestmark = pytest.mark.postgres

RULE = "CREATE RULE quiet AS ON UPDATE TO audit_checkpoints DO INSTEAD NOTHING"
TRIGGER_SAID = "a trigger agentgate did not make runs as the log's tables are written"
RULE_SAID = "a rule agentgate did not make rewrites what is written to the log's tables"


def _verify(url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit", "agentgate.cli.store"))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.setenv("AGENTGATE_STORE", url)
    capsys.readouterr()
    code = _run(["audit", "verify"])
    return code, capsys.readouterr().out


def _log(url: str, *statements: str) -> None:
    with _postgres(url) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 2)
        log.checkpoint()
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


def test_a_rule_alone_is_called_a_rule_in_the_closing_line(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R60: a PostgreSQL rule on a log table closed verify with "a trigger agentgate did not make"."""
    _log(postgres_url, RULE)
    code, out = _verify(postgres_url, monkeypatch, capsys)
    assert code == 1
    assert out.startswith("TAMPERED: 1 problem(s)\n")
    closing = out.splitlines()[-1]
    assert closing.startswith("the entries verify: 2 entries")
    assert TRIGGER_SAID not in closing and "the triggers are back" not in closing
    assert "nothing refuses an edit" not in closing
    assert RULE_SAID in closing


def test_a_rule_beside_a_trigger_agentgate_did_not_make_names_both(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R60: a rule and a trigger agentgate did not make: the closing line names each as what it is."""
    _log(
        postgres_url,
        RULE,
        "CREATE FUNCTION mirror() RETURNS trigger LANGUAGE plpgsql AS $fn$ BEGIN RETURN NULL; END; $fn$",
        "CREATE TRIGGER mirror AFTER INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION mirror()",
    )
    code, out = _verify(postgres_url, monkeypatch, capsys)
    assert code == 1
    assert out.startswith("TAMPERED: 2 problem(s)\n")
    closing = out.splitlines()[-1]
    assert TRIGGER_SAID in closing and RULE_SAID in closing
    assert "nothing refuses an edit" not in closing
