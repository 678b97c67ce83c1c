"""Ctrl-C ends an example with the line ``interrupted`` and status 130 at any moment, never a traceback.

Each example imports this module first, before the imports that take seconds (langgraph,
langchain, agentgate): importing it makes Ctrl-C end the process at once, with that line, as
nothing has been written yet. While the run runs (``_common.exit_with``), Ctrl-C raises
``KeyboardInterrupt`` where the run is, so that the run's ``finally`` closes the gate and what it
wrote to its store stays whole (a second Ctrl-C while it does is held, a third ends the process
at once); once the run has ended, Ctrl-C ends the process at once again
(during the exit itself, which joins the run's threads). Standard library only: it must load in
milliseconds.

The handler that raises it is this module's, not ``signal.default_int_handler``: ``asyncio.run``
replaces that one with its own for as long as it runs, which only cancels the main task at its
next ``await``; a Ctrl-C during research_team's summary (no ``await`` in it) let the summary run
to its end, then said ``interrupted`` (tests/test_examples_r63b_interrupt.py).

All this only where an example is the program (``python examples/NAME.py``): a test that runs
one in its own process (``runpy``, importing it) keeps its own Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import FrameType

# The interpreter's own command line: runpy sets sys.argv[0] to the example it runs, not this.
_AN_EXAMPLE_IS_THE_PROGRAM = any(
    Path(argument).resolve().parent == Path(__file__).resolve().parent for argument in sys.orig_argv[1:]
)


def say_interrupted() -> None:
    """Print the one line a person reads after Ctrl-C (nowhere, where stderr is gone)."""
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _end_now(signum: int, frame: FrameType | None) -> None:
    say_interrupted()
    os._exit(130)  # no exception to unwind through an import or the interpreter's exit


def outside_the_run() -> None:
    """Ctrl-C from now on ends the process at once: for while nothing is being written."""
    if _AN_EXAMPLE_IS_THE_PROGRAM:
        signal.signal(signal.SIGINT, _end_now)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGINT, _held)  # the run now unwinds: its cleanup is not to be cut
    raise KeyboardInterrupt


def _held(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C again while the run unwinds from the first: held, so that its ``finally`` closes
    the gate (which commits the outcomes of the calls that ran) and its store. Until review R66
    it raised ``KeyboardInterrupt`` again wherever that cleanup was, which it cut, and under
    ``asyncio.run`` a traceback followed ``interrupted``. Once more (a cleanup that seems stuck)
    ends the process at once: every write of the store is its own transaction."""
    signal.signal(signal.SIGINT, _end_now)


def inside_the_run() -> None:
    """Ctrl-C from now on raises ``KeyboardInterrupt``, which the run's ``finally`` blocks see,
    in an ``asyncio.run`` too (which leaves a handler other than Python's default in place); a
    second one while they run is held (``_held``), a third ends the process at once."""
    if _AN_EXAMPLE_IS_THE_PROGRAM:
        signal.signal(signal.SIGINT, _raise_interrupt)


outside_the_run()
