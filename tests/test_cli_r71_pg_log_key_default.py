"""With a PostgreSQL store, the log key's default place is `.agentgate/log.key` under the working
directory: a command run from another directory looks for another key (or finds one left there
by a SQLite quickstart, whose default is the same path) for the one shared log.

Until review R71 nothing said so: `audit checkpoint` from whatever directory it first ran in made
a key there (or took the one found there) and signed the log's first checkpoint with it, and every
other directory was then told `no log key there`. Rule: a command that opens a PostgreSQL store's
log with its private key from the default place (no `AGENTGATE_LOG_KEY`) while the log has no
checkpoint yet, the moment its key is chosen, says on one `warning:` line on standard error which
file it uses and to set `AGENTGATE_LOG_KEY`; its exit code and standard output are unchanged.
Once the log has a checkpoint it says nothing (a cron job is not warned each run; another
directory is refused, naming `AGENTGATE_LOG_KEY`). A SQLite store (its key beside the database
file) and `AGENTGATE_LOG_KEY` say nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _cli import cli

pytestmark = pytest.mark.postgres


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("agentgate: warning:")]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    return tmp_path


def test_a_postgresql_log_signed_with_the_default_key_says_so(
    here: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: `audit checkpoint` on a PostgreSQL store made and used
    `.agentgate/log.key` under whatever directory it ran in, without a word. Rule: one warning
    line naming the file's full path and AGENTGATE_LOG_KEY; exit 0, the checkpoint printed."""
    assert cli(capsys, "store", "init", "--store", postgres_url)[0] == 0
    code, out, err = cli(capsys, "audit", "checkpoint", "--store", postgres_url)
    assert code == 0, err
    assert out.startswith("agentgate.local/audit\n")
    key = here / ".agentgate" / "log.key"
    assert key.exists()
    (line,) = _warnings(err)
    assert err == line + "\n"
    assert f"{key}" in line and "AGENTGATE_LOG_KEY" in line and "PostgreSQL" in line, line
    # The log has its key now: said no more from here, and from another directory the command
    # is refused, naming AGENTGATE_LOG_KEY, rather than signing with another key.
    code, _out, err = cli(capsys, "audit", "checkpoint", "--store", postgres_url)
    assert (code, _warnings(err)) == (0, []), err
    (here / "elsewhere").mkdir()
    os.chdir(here / "elsewhere")
    code, out, err = cli(capsys, "audit", "checkpoint", "--store", postgres_url)
    assert (code, out, _warnings(err)) == (2, "", []), err
    assert err.startswith("agentgate: error: ") and "AGENTGATE_LOG_KEY" in err, err
    assert not (here / "elsewhere" / ".agentgate").exists()


def test_agentgate_log_key_set_or_a_sqlite_store_says_nothing(
    here: Path, postgres_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R71: the warning is for the default place with PostgreSQL only."""
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(here / "keys" / "log.key"))
    (here / "keys").mkdir()
    assert cli(capsys, "store", "init", "--store", postgres_url)[0] == 0
    code, _out, err = cli(capsys, "audit", "checkpoint", "--store", postgres_url)
    assert (code, _warnings(err)) == (0, []), err
    monkeypatch.delenv("AGENTGATE_LOG_KEY")
    sqlite = str(here / "db" / "agentgate.db")
    assert cli(capsys, "store", "init", "--store", sqlite)[0] == 0
    code, _out, err = cli(capsys, "audit", "checkpoint", "--store", sqlite)
    assert (code, _warnings(err)) == (0, []), err
