"""The ``agentgate`` command (docs/cli.md).

``run`` is what the console script and ``python -m agentgate`` call: the first code of
agentgate's the command runs, in a module that imports nothing, so that a Ctrl-C or SIGTERM while
the command's own module loads (``agentgate.cli.main``: argparse, logging, about 20 ms) is the one
line and exit code ``main`` gives later, not a traceback (review R71). What comes before it, the
interpreter's start-up and the import of this package, is Python's.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import signal
    from collections.abc import Callable


def warn(text: str) -> None:
    """Leave ``text`` (one line, already escaped) as a warning for ``main`` to say when the running
    command ends, once however often it is left (``_warnings.warn``, where it is kept: this
    package imports nothing). Every warning of a command goes this way (review R72: some were
    printed at once, as ``warning:`` or ``agentgate: warning:``, and one was left here and said
    only if the command did not fail)."""
    from agentgate.cli import _warnings

    _warnings.warn(text)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, ``docker stop``, a service manager), raised where the command is, so
    that it unwinds as Ctrl-C does: temporary files removed, transactions rolled back."""


def terminate(signum: int, frame: object) -> None:
    """The command's SIGTERM handler: raises ``Terminated``."""
    raise Terminated


def terminate_on_sigterm() -> Callable[[], None]:
    """Make SIGTERM raise ``Terminated``; returns what puts back the handler it replaced. Left as
    it is, with nothing to put back, outside the main thread (Python takes a handler only there)
    and where SIGTERM is ignored (SIG_IGN, inherited from whoever started the process), as
    Python leaves an inherited ignored SIGINT ignored: until review R71 (r71-rev-f) ``run``
    raised ``ValueError`` outside the main thread, and an ignored SIGTERM ended the command."""
    import signal  # here, not at the top: importing this package loads no module more

    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        return _nothing
    try:
        previous = signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread
        return _nothing
    if previous is None:  # a handler not set from Python: none that can be put back
        return _nothing

    def put_back() -> None:
        signal.signal(signal.SIGTERM, previous)

    return put_back


def _nothing() -> None:
    """Nothing to put back."""


def run() -> NoReturn:
    """Run the command of ``sys.argv`` and exit with its code; Ctrl-C before ``main`` catches it
    is ``agentgate: interrupted`` and exit 130, SIGTERM ``agentgate: terminated`` and 143
    (``terminate_on_sigterm``: in the main thread, where SIGTERM is not ignored). Either is held
    back while a native module initialises (``_native``), which an exception would crash. Once
    the command has ended, its output flushed, they and SIGHUP are ignored (``_ignored_until_exit``) for the
    interpreter's shutdown that follows."""
    restore = terminate_on_sigterm()
    loader_put_back = _nothing
    try:
        from agentgate.cli._native import native_imports_held

        loader_put_back = native_imports_held()  # before main imports orjson (review R88)
        from agentgate.cli._warnings import own_the_process
        from agentgate.cli.main import main

        own_the_process()
        code = main()
    except KeyboardInterrupt as exc:
        code = _said(*ending(exc))
    finally:
        if not _ignored_until_exit():
            restore()
        loader_put_back()
    raise SystemExit(code)


def _ignored_until_exit() -> bool:
    """Ignore SIGINT, SIGTERM and SIGHUP for the rest of the process: the command has ended, its output
    flushed, and what is left is the interpreter's shutdown, in which a signal
    would only turn the command's exit code into a death by that signal, nothing said (until
    review R94 the handlers before ``run`` were put back there, SIG_DFL for SIGTERM: a SIGTERM
    or Ctrl-C after an ``audit verify`` printed ``intact`` or a ``budget settle`` committed ended
    it 143 or 130 all the same, without the line those codes come with). False, nothing changed,
    outside the main thread (Python sets a handler only there)."""
    import signal

    try:
        # SIGHUP too: ``serve`` stops on it (review R96), and one after its gate closed would
        # otherwise kill the process, its outcomes all committed, with the wrong exit status.
        for signum in stop_signals():
            signal.signal(signum, signal.SIG_IGN)
    except ValueError:  # not the main thread
        return False
    return True


def stop_signals() -> tuple[signal.Signals, ...]:
    """SIGINT, SIGTERM and SIGHUP (where the platform has it: Windows has none): the signals that
    stop ``agentgate serve`` gracefully, and that ``run`` ignores once a command has ended
    (``_ignored_until_exit``), so that every stop request ``serve`` takes is ignored after it."""
    import signal  # here, not at the top: importing this package loads no module more

    return (signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))


def ending(exc: KeyboardInterrupt) -> tuple[str, int]:
    """The line and the exit code of a command that SIGTERM (``Terminated``: 143) or Ctrl-C (130)
    ended, said alike by ``main`` and, before ``main`` runs, by ``run``."""
    if isinstance(exc, Terminated):
        return "agentgate: terminated\n", 143
    return "agentgate: interrupted\n", 130


def _said(line: str, code: int) -> int:
    """``code``, after ``line`` on standard error if it can be written (closed, it is dropped)."""
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass
    return code
