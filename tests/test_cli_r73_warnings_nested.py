"""A command's warnings when ``main`` is not the only thing in the process: an embedding program
with its own root logging handler, ``main`` called again and again, ``main`` inside ``main`` (in
the same thread or in another one). Each warning is said once, by the command that left it, and
``main`` leaves the logging configuration as it found it.

Until review R73 a root handler printed agentgate's own log warnings a second time (bare, at once,
beside the command's ``agentgate: warning: ...`` line); a ``main`` run while another ran emptied
the one process-wide list of pending warnings, so the outer command never said its own; and a
handler stayed on the ``psycopg`` logger after ``main`` returned. Each test runs real commands
in-process on a real SQLite store.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentgate.cli import warn
from agentgate.cli.main import main

ROOT = Path(__file__).resolve().parents[1]

_MISSING = "agentgate: warning: the protection trigger audit_log_no_update on table audit_log is missing"
"""The start of ``grant revoke``'s own warning about a log whose trigger was dropped."""

_PUT_BACK = "agentgate: warning: audit log: the protection trigger audit_log_no_update"
"""The start of the audit log's logger warning, said as the command's, when it puts it back."""


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A SQLite store made by the command, its log holding one revocation (the working directory,
    where the log key is kept, is ``tmp_path``)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    path = str(tmp_path / "agentgate.db")
    assert main(["store", "init", "--store", path]) == 0
    assert main(["grant", "revoke", "b" * 64, "--store", path]) == 0
    return path


def _drop_trigger(store: str) -> None:
    """Drop the log's ``audit_log_no_update`` trigger, as the store's owner may."""
    with contextlib.closing(sqlite3.connect(store)) as db, db:
        db.execute("DROP TRIGGER audit_log_no_update")


def _revoke(store: str, revocation_id: str) -> int:
    """``grant revoke`` of ``revocation_id`` after the trigger was dropped: two warnings."""
    _drop_trigger(store)
    return main(["grant", "revoke", revocation_id, "--reason", "leaked", "--store", store])


@pytest.fixture
def root_log() -> Iterator[io.StringIO]:
    """What an embedding program's own root handler (level INFO) writes, as it configured it."""
    root, written = logging.getLogger(), io.StringIO()
    handler, level = logging.StreamHandler(written), root.level
    handler.setFormatter(logging.Formatter("ROOT %(name)s %(levelname)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield written
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _logging_as_configured() -> dict[str, tuple[list[logging.Handler], bool]]:
    """Each logger's handlers and whether it propagates: what ``main`` must leave as it found."""
    loggers = {"": logging.getLogger()} | {
        name: logger
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    return {name: (list(logger.handlers), logger.propagate) for name, logger in loggers.items()}


def test_a_root_handler_does_not_print_a_warning_a_second_time(
    store: str, root_log: io.StringIO, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R73: with a root handler installed, the audit log's warning (a trigger put back) was
    printed twice: by that handler at once, bare, and as the command's ``agentgate: warning:``
    line. Rule: once, as the command's warning; again on a second ``main``."""
    capsys.readouterr()
    for revocation_id in ("a" * 64, "c" * 64):
        assert _revoke(store, revocation_id) == 0
        lines = capsys.readouterr().err.splitlines()
        assert sum(line.startswith(_PUT_BACK) for line in lines) == 1, lines
        assert sum(line.startswith(_MISSING) for line in lines) == 1, lines
    assert "protection trigger" not in root_log.getvalue(), root_log.getvalue()


def _in_this_thread(run: Callable[[], None]) -> None:
    run()


def _in_another_thread(run: Callable[[], None]) -> None:
    worker = threading.Thread(target=run)
    worker.start()
    worker.join()


class _Hook(logging.Handler):
    """An embedding program's hook on the audit log's warnings: it runs ``audit show`` on the store
    (``main`` inside the ``main`` whose command logged the warning), where ``runs`` says."""

    def __init__(self, store: str, runs: Callable[[Callable[[], None]], None]) -> None:
        super().__init__(logging.WARNING)
        self.store, self.runs, self.codes = store, runs, list[int]()

    def emit(self, record: logging.LogRecord) -> None:
        self.runs(lambda: self.codes.append(main(["audit", "show", "--store", self.store])))


@pytest.mark.parametrize("runs", [_in_this_thread, _in_another_thread])
def test_main_inside_main_keeps_each_commands_warnings(
    store: str, capsys: pytest.CaptureFixture[str], runs: Callable[[Callable[[], None]], None]
) -> None:
    """Review R73: a ``main`` run while another ran (a hook of the embedding program, in the same
    thread or another) emptied the one list of pending warnings: the outer ``grant revoke`` never
    said that the log's trigger was missing. Rule: the inner command says its warning when it
    ends, the outer says each of its own when it ends, each once."""
    audit = logging.getLogger("agentgate.audit")
    hook = _Hook(store, runs)
    audit.addHandler(hook)
    capsys.readouterr()
    try:
        code = _revoke(store, "a" * 64)
    finally:
        audit.removeHandler(hook)
    lines = capsys.readouterr().err.splitlines()
    assert code == 0 and hook.codes == [0], lines
    inner = [n for n, line in enumerate(lines) if line.startswith("agentgate: warning: repair 1 at ")]
    missing = [n for n, line in enumerate(lines) if line.startswith(_MISSING)]
    put_back = [n for n, line in enumerate(lines) if line.startswith(_PUT_BACK)]
    assert len(inner) == len(missing) == len(put_back) == 1, lines
    assert inner[0] < missing[0] < put_back[0] == len(lines) - 1, lines


_AS_FOUND = """
import contextlib, io, json, logging, sqlite3, sys
from agentgate.cli.main import main

def configured():
    loggers = {"": logging.getLogger()} | {
        name: logger for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    return {name: [[repr(h) for h in logger.handlers], logger.propagate] for name, logger in loggers.items()}

class Hook(logging.Handler):
    def emit(self, record):
        codes.append(main(["audit", "show", "--store", "s.db"]))

before, codes = configured(), []
codes.append(main(["store", "init", "--store", "s.db"]))
codes.append(main(["grant", "revoke", "b" * 64, "--store", "s.db"]))
with contextlib.closing(sqlite3.connect("s.db")) as db, db:
    db.execute("DROP TRIGGER audit_log_no_update")
logging.getLogger("agentgate.audit").addHandler(Hook(logging.WARNING))
codes.append(main(["grant", "revoke", "a" * 64, "--store", "s.db"]))
logging.getLogger("agentgate.audit").handlers.clear()
codes.append(main(["audit", "show", "--store", "none.db"]))
after = configured()
changed = {name: [before.get(name), now] for name, now in after.items() if before.get(name, [[], True]) != now}
print(json.dumps({"codes": codes, "changed": changed}))
"""


def test_main_leaves_logging_as_it_found_it(tmp_path: Path) -> None:
    """Review R73: ``main`` left a handler on the ``psycopg`` logger for good, in an embedding
    program's logging. Rule: after any number of commands, nested, failed or not, every logger
    has the handlers it had and propagates as it did. In a fresh interpreter: the first ``main``
    of a process is the one that changed it."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("AGENTGATE_LOG_PREVIOUS_KEYS", None)
    environment.pop("AGENTGATE_STORE", None)
    done = subprocess.run(
        [sys.executable, "-c", _AS_FOUND],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report == {"codes": [0, 0, 0, 0, 2], "changed": {}}, report


def test_records_a_command_does_not_say_still_reach_the_programs_handlers(
    store: str, root_log: io.StringIO, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R73: while a command runs, only agentgate's records of WARNING and above that its own
    code logs are its warnings. A record below WARNING, and one that another thread of the
    embedding program logs (through the library, outside any command), reach the program's root
    handler once, as they would with no command running, and are not said by the command."""
    library = logging.getLogger("agentgate.gate")

    class Program(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            library.info("the program's note")
            _in_another_thread(lambda: library.warning("the program's worker warns"))

    audit = logging.getLogger("agentgate.audit")
    program = Program(logging.WARNING)
    audit.addHandler(program)
    capsys.readouterr()
    try:
        assert _revoke(store, "a" * 64) == 0
    finally:
        audit.removeHandler(program)
    said = capsys.readouterr().err
    assert "the program's" not in said, said
    written = root_log.getvalue().splitlines()
    assert written == [
        "ROOT agentgate.gate INFO the program's note",
        "ROOT agentgate.gate WARNING the program's worker warns",
    ], written


def test_a_warning_left_outside_a_command_is_logged_not_said_by_the_next(
    store: str, root_log: io.StringIO, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R73: a verb's helper called outside any command (a program using it directly) left
    its warning in a list that the next ``main`` emptied: it was never said anywhere. Rule: it
    is a log record of ``agentgate.cli``, which the program's handlers get at once, and the next
    command does not say it."""
    capsys.readouterr()
    warn("left outside a command")
    assert root_log.getvalue() == "ROOT agentgate.cli WARNING left outside a command\n"
    assert main(["audit", "show", "--store", store]) == 0
    assert "left outside" not in capsys.readouterr().err
