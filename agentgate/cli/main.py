"""Entry point of the ``agentgate`` command.

Each verb group lives in its own module with a ``register(subparsers)`` function; handlers
return the exit code. Exit codes are a contract (docs/cli.md): 0 success or allow, 1 deny,
tampered or error findings, 2 unusable input, 3 approval required. Errors are one line on
stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence

from agentgate.errors import AgentGateError

# One module per verb group; a new group is one more line here.
GROUPS = (
    "agentgate.cli.keys",
    "agentgate.cli.grant",
    "agentgate.cli.approval",
    "agentgate.cli.broker",
    "agentgate.cli.audit",
    "agentgate.cli.policy",
    "agentgate.cli.tasks",
    "agentgate.cli.serve",
    "agentgate.cli.store",
)

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"agentgate: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="agentgate", description="Authority, scheduling and evidence for AI agents.")
    sub = parser.add_subparsers(dest="group", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in GROUPS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code. Ctrl-C at any point after this is entered (while
    the verb groups load, while parsing, in a handler) is one line on stderr and exit 130."""
    _quiet_library_logs()
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        handler: Handler = args.handler
        code = handler(args)
        sys.stdout.flush()  # a full disk or a dead pipe shows here, not after main() returned
        return code
    except AgentGateError as exc:
        sys.stderr.write(f"agentgate: error: {_one_line(str(exc))}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("agentgate: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # standard output cannot be written (disk full, I/O error), or a file
        if exc.filename is not None:
            sys.stderr.write(f"agentgate: error: {_one_line(f'{exc.filename}: {exc.strerror or exc}')}\n")
            return 2
        _drop_stdout()
        sys.stderr.write(
            f"agentgate: error: cannot write the output: {_one_line(str(exc.strerror or exc))}\n"
        )
        return 2


def _drop_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's flush at exit does not fail
    again on what could not be written (and print a second error)."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (captured in-process)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, descriptor)
    finally:
        os.close(devnull)


def _quiet_library_logs() -> None:
    """Keep libraries' log records off stderr, whose contract is one ``agentgate: error:`` line.

    With no handler configured, Python prints warnings through its last-resort handler: psycopg's
    pool wrote one line per failed connection attempt before the command's own error. A handler
    that drops them stops that; a program that configures logging itself keeps its own handlers.
    """
    logger = logging.getLogger("psycopg")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def _one_line(text: str) -> str:
    return " ".join(text.split())[:2000]


if __name__ == "__main__":
    raise SystemExit(main())
