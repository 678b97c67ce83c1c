"""The warnings of a command (docs/cli.md, Warnings): each ``agentgate: warning: ...`` line said
once, by the command that left it, when it ends.

Warnings belong to a command, not to the process: ``main`` may run while another ``main`` runs
(a hook of an embedding program calls it from inside a command, in the same thread or another),
so each command keeps its own list in a context variable (``running``), and a warning goes to the
command whose code left it. Until review R73 there was one list for the process, and a command
started inside another emptied it: the outer command's warnings were never said.

agentgate's own log records of WARNING and above, logged by a command's code, are its warnings
too (``log_records_said``). While any command says them, one handler on the ``agentgate`` logger
takes every record from propagation and hands on, as propagation would, each one that is not a
command's warning: a record below WARNING, a ``serve`` command's (which keeps its log lines as they
come), one a thread outside any command logs. Until review R73 the records also went on to an
embedding program's root handler, which printed each warning a second time, bare. What a command
changes in the logging configuration is made when the first command starts and undone when the
last ends (``_WhileCommandsRun``): ``main`` leaves the logging of its caller as it found it.
Only the ``agentgate`` command's own process (``run``) keeps libraries' records quiet until it
exits (``own_the_process``).

This is written here rather than taken from a library: the standard library's ``logging`` has
no way to take some records of a logger from propagation, and no library does this for a CLI.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar


class _Command:
    """What a running command has left to say, and whether its log records are its warnings. Its
    warnings may be left by another thread of the process (``_THE_PROCESS``) while it says them:
    ``lock`` keeps each said once, and ``ended`` (it has said its last) none lost."""

    __slots__ = ("ended", "lock", "says_log_records", "warnings")

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.says_log_records = False
        self.lock = threading.Lock()
        self.ended = False


class _Process:
    """Whether this process is the ``agentgate`` command's own (``own_the_process``), and the
    command it runs: the one whose warnings a record logged outside any command's context is."""

    def __init__(self) -> None:
        self.owned = False
        self.command: _Command | None = None
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def running(self, command: _Command) -> Iterator[None]:
        """``command`` is the process's while it runs, if the process is owned and runs no other.
        Two commands that start at once in two threads cannot both take it (until the review of
        R77 each could see none running, and the first to end left the other's records none)."""
        with self._lock:
            took = self.owned and self.command is None
            if took:
                self.command = command
        if not took:
            yield
            return
        try:
            yield
        finally:
            self.command = None


_THE_PROCESS = _Process()


_RUNNING: ContextVar[_Command | None] = ContextVar("agentgate_cli_command", default=None)
"""The command running in this context (thread, task); ``None`` outside any."""


def warn(text: str) -> None:
    """Leave ``text`` (one line, already escaped) as a warning of the running command, said once
    however often it is left. Outside any command (a program that calls a verb's helper itself)
    there is no command to say it: it is a WARNING record of the ``agentgate.cli`` logger, which
    the program's handlers (or Python's last-resort handler) get at once. Until review R73 it
    waited in a list that the next command emptied, and was never said."""
    command = _RUNNING.get()
    if command is None or not _leave(command, text):
        logging.getLogger("agentgate.cli").warning("%s", text)


def _leave(command: _Command, text: str) -> bool:
    """Leave ``text`` as a warning of ``command``, unless it has it already; ``False`` where the
    command has said its last (``said(last=True)``): a thread's record that arrives then goes on
    as if no command ran. Until review R74 (r74-rev-cli) it went into the list no one said."""
    line = f"agentgate: warning: {text}\n"
    with command.lock:
        if command.ended:
            return False
        if line not in command.warnings:
            command.warnings.append(line)
        return True


def said(*, last: bool = False) -> list[str]:
    """The lines of the warnings the running command has left since it was last asked, forgotten
    (so that each is said once); none outside a command. ``last``: the command takes no more."""
    command = _RUNNING.get()
    if command is None:
        return []
    with command.lock:
        lines = command.warnings[:]
        command.warnings.clear()
        command.ended = command.ended or last
    return lines


class _WhileCommandsRun:
    """A change to the logging configuration that holds while at least one command runs: made
    when the first starts (``held``), undone when the last ends, whatever their nesting or
    threads; a change made and undone by each command would pile up, or be undone under one that
    still runs."""

    def __init__(self, make: Callable[[], None], undo: Callable[[], None]) -> None:
        self._make, self._undo = make, undo
        self._lock = threading.Lock()
        self._commands = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._commands == 0:
                self._make()
            self._commands += 1
        try:
            yield
        finally:
            with self._lock:
                self._commands -= 1
                if self._commands == 0:
                    self._undo()


class _QuietLibraries:
    """Keeps libraries' log records off standard error, whose contract is one ``agentgate: error:``
    line: with no handler configured, Python prints warnings through its last-resort handler
    (psycopg's pool wrote one line per failed connection attempt before the command's own error).
    A ``NullHandler`` on the library's logger stops that; a program that configures logging
    itself keeps its own handlers, and a logger that has a ``NullHandler`` already gets none.

    Two lifetimes: ``make`` and ``undo`` while commands run (``_QUIETED``), the handlers taken off
    again when the last command ends, so that a program that calls ``main`` has its logging back
    as it was (until review R73 they stayed on for good); ``make_for_good`` for the ``agentgate``
    command's own process (``own_the_process``), never taken off."""

    def __init__(self, *names: str) -> None:
        self._names = names
        self._added: list[tuple[logging.Logger, logging.Handler]] = []

    def make(self) -> None:
        """Add the handlers, to be taken off by ``undo``."""
        self._added += self._add()

    def make_for_good(self) -> None:
        """Add the handlers, for the rest of the process: ``undo`` leaves them. Called before any
        command runs (``run``): while one runs, each logger has the handler ``make`` put there,
        gets no other, and is left without one when the last command ends."""
        self._add()

    def undo(self) -> None:
        while self._added:
            logger, handler = self._added.pop()
            logger.removeHandler(handler)

    def _add(self) -> list[tuple[logging.Logger, logging.Handler]]:
        """Put a ``NullHandler`` on each library's logger that has none; return those put."""
        added: list[tuple[logging.Logger, logging.Handler]] = []
        for name in self._names:
            logger = logging.getLogger(name)
            if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
                handler = logging.NullHandler()
                logger.addHandler(handler)
                added.append((logger, handler))
        return added


class _SaidAsWarnings(logging.Handler):
    """On the ``agentgate`` logger, which does not propagate while it is there: says a record of
    WARNING and above that a command whose log records are its warnings logged (``warn``), and
    hands every other record on to the handlers above, as propagation would have."""

    def __init__(self) -> None:
        super().__init__()
        self.propagated = True
        """Whether the ``agentgate`` logger propagated before this handler took its place."""

    def handle(self, record: logging.LogRecord) -> bool:
        command = _RUNNING.get() or _THE_PROCESS.command
        if command is None or not command.says_log_records or record.levelno < logging.WARNING:
            self._hand_on(record)
            return True
        from agentgate.cli._lines import one_line

        try:
            text = one_line(record.getMessage())
        except Exception:  # a record whose arguments do not fit its message
            self.handleError(record)
            return True
        # The library's records begin "agentgate: " to stand out in a program's log; the
        # command's line begins so already (until review R76 "agentgate: warning: agentgate: ...").
        text = text.removeprefix("agentgate: ")
        if not _leave(command, text):
            self._hand_on(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        """Never called: ``handle`` says or hands on each record."""

    def _hand_on(self, record: logging.LogRecord) -> None:
        """Give ``record`` to the handlers of the loggers above ``agentgate``, as
        ``Logger.callHandlers`` does when it propagates, and to Python's last-resort handler when
        no handler at all took it (none on its logger, nor on any logger it propagates to)."""
        found = self._handlers_below(record)
        parent = _AGENTGATE.parent if self.propagated else None
        while parent is not None:
            for handler in parent.handlers:
                found += 1
                if record.levelno >= handler.level:
                    handler.handle(record)
            parent = parent.parent if parent.propagate else None
        last = logging.lastResort
        if found == 0 and last is not None and record.levelno >= last.level:
            last.handle(record)

    def _handlers_below(self, record: logging.LogRecord) -> int:
        """How many handlers the record met before this one (those of its logger and of the loggers
        between it and ``agentgate``, and the others on ``agentgate``): Python called them."""
        logger: logging.Logger | None = logging.getLogger(record.name)
        found = 0
        while logger is not None and logger is not _AGENTGATE:
            found += len(logger.handlers)
            logger = logger.parent
        return found + sum(handler is not self for handler in _AGENTGATE.handlers)


_AGENTGATE = logging.getLogger("agentgate")
_SAYS = _SaidAsWarnings()


def _take_records() -> None:
    """Put ``_SAYS`` in the place of the ``agentgate`` logger's propagation; when it is there
    already, nothing: an interruption (Ctrl-C, ``Terminated``) that lands after a command took the
    records and before it was counted, or as the last one gives them back, leaves them taken with
    no command running. Until review R73 the next command then kept "does not propagate" as what
    to restore, and no agentgate record reached the program's root handler again."""
    if _SAYS in _AGENTGATE.handlers:
        return
    _SAYS.propagated = _AGENTGATE.propagate
    _AGENTGATE.addHandler(_SAYS)
    _AGENTGATE.propagate = False


def _give_records_back() -> None:
    if _SAYS in _AGENTGATE.handlers:
        _AGENTGATE.removeHandler(_SAYS)
        _AGENTGATE.propagate = _SAYS.propagated


_QUIET = _QuietLibraries("psycopg")
_QUIETED = _WhileCommandsRun(_QUIET.make, _QUIET.undo)
_RECORDS_TAKEN = _WhileCommandsRun(_take_records, _give_records_back)


def own_the_process() -> None:
    """For the ``agentgate`` command's own process (``run``): libraries' log records stay off
    standard error until it exits, not only while a command runs (psycopg's pool threads can still
    log as the interpreter exits), and agentgate's records that a thread outside the command's
    context logs while it runs are its warnings (``_THE_PROCESS``). A program that calls ``main``
    keeps its logging as it was, and the records of its own threads."""
    _QUIET.make_for_good()
    _THE_PROCESS.owned = True


@contextlib.contextmanager
def running() -> Iterator[None]:
    """Run a command in this context: a list of warnings of its own (the command that ran here
    before it, if any, keeps its list, and has it back after), libraries' log records kept off
    standard error."""
    command = _Command()
    token = _RUNNING.set(command)
    try:
        with _QUIETED.held(), _THE_PROCESS.running(command):
            yield
    finally:
        _RUNNING.reset(token)


@contextlib.contextmanager
def log_records_said(said: bool) -> Iterator[None]:
    """While the running command runs its verb, agentgate's own log records of WARNING and above
    that it logs (the audit log's ``a protection trigger ... was put back``) are said as its
    warnings, not by Python's last-resort handler as a bare line among the command's own (until
    review R72), nor by a root handler of the program that runs it, a second time (until review
    R73). ``said`` false (``serve``, which runs until stopped): its log lines go as they come
    (docs/gateway.md)."""
    command = _RUNNING.get()
    if not said or command is None:
        yield
        return
    command.says_log_records = True
    try:
        with _RECORDS_TAKEN.held():
            yield
    finally:
        command.says_log_records = False
