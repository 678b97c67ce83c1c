"""Entry point of the ``agentgate`` command.

Each verb group lives in its own module with a ``register(subparsers)`` function; handlers
return the exit code. A command imports only the group it names (``agentgate grant check``
never loads the gateway's HTTP stack): scripts run these verbs in loops, and each import is paid
per process. Help, no command and an unknown group register every group's parser, so they list
them all; a group's handlers, and the layers they need, load only when one of its verbs runs.
Exit codes are a contract (docs/cli.md): 0 success or allow, 1 deny, tampered or error
findings, 2 unusable input, 3 approval required. Errors are one line on stderr, never a
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from agentgate.cli import _warnings, ending, terminate_on_sigterm
from agentgate.cli._lines import one_line as _one_line
from agentgate.errors import AgentGateError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

# One module per verb group, named as the group (``agentgate.cli.keys`` is ``agentgate keys``);
# a new group is one more line here.
GROUPS = (
    "agentgate.cli.keys",
    "agentgate.cli.grant",
    "agentgate.cli.approval",
    "agentgate.cli.broker",
    "agentgate.cli.audit",
    "agentgate.cli.policy",
    "agentgate.cli.tasks",
    "agentgate.cli.budget",
    "agentgate.cli.serve",
    "agentgate.cli.store",
)

PARSERS = {
    "agentgate.cli.keys": "agentgate.cli._keys_parser",
    "agentgate.cli.grant": "agentgate.cli._grant_parser",
    "agentgate.cli.approval": "agentgate.cli._approval_parser",
    "agentgate.cli.broker": "agentgate.cli._broker_parser",
    "agentgate.cli.audit": "agentgate.cli._audit_parser",
    "agentgate.cli.policy": "agentgate.cli._policy_parser",
    "agentgate.cli.tasks": "agentgate.cli._tasks_parser",
    "agentgate.cli.budget": "agentgate.cli._budget_parser",
    "agentgate.cli.store": "agentgate.cli._store_parser",
}
"""Where a group's ``register`` lives apart from its handlers, which load a heavy layer (the
authority engine, the policy package, a store, the audit store, pydantic, the signing library):
help builds the parser from here and loads no handler, and a verb imports its group's module
when it runs (``_handlers.handled_by``). Review R65 (grant, approval, policy) and R65b (the rest
but serve, whose module imports nothing heavy at its top)."""

Handler = Callable[[argparse.Namespace], int]

_PIPE_CLOSED = 141
"""The exit code of a command whose reader closed the pipe before it had written all (as a
command killed by SIGPIPE shows in a shell): never 0, which would pass for allow or intact."""


_VERB_PARSER = "_agentgate_verb_parser"
"""The attribute under which parsing leaves the innermost parser that read the command line."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # A flag is read only as spelled in full: argparse's default takes a prefix (``--iss``)
        # for the one flag it begins, which a script then relies on until a new flag shares the
        # prefix and the line means another flag or is refused (review R70). Every parser of the
        # command line is of this class (``parser_class``), so every verb inherits it.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # argparse's own hint (Python 3.14, on by default from 3.15: ``maybe you meant 'grant'?``)
        # would say it a second time beside ``_check_value``'s; an attribute, as argparse's
        # documentation advises for code that runs on older Pythons too.
        self.suggest_on_error = False
        self.register("action", "parsers", _Verbs)
        self._given: list[str] = []
        """The arguments this parser was last given (``parse_known_args``)."""
        self.verb_options: frozenset[str] = frozenset()
        """The options of the verb the last command line parsed named (``parse_args``): what an
        error's hint may tell to give (``named_for``)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """Refuse the command line: the usage, then one ``agentgate: error:`` line. A line that
        misses a required argument and holds a flag this parser does not know names that flag,
        with the one meant (``--isuer``: until review R74 the refusal said ``the following
        arguments are required: --issuer, --to``, and never which flag was misspelt). A command or
        verb group's line that misses its verb says so, unless a flag in it is close to one of the
        group's own (``--hepl``): ``audit --json`` names the verb missing, not ``--json``."""
        unknown = self._unknown_flags()
        if unknown and message.startswith(_MISSING) and (self._hints(unknown) or not self._takes_a_verb()):
            message = self.unrecognized(unknown)
        self.print_usage(sys.stderr)
        said = _one_line(_secrets_masked(message))  # it may quote an argument, a store's URL too
        sys.stderr.write(f"agentgate: error: {said}\n")
        raise SystemExit(2)

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        """Write the help to ``file``, else standard output, letting an error writing it go:
        argparse's own drops it (``_print_message`` passes over ``OSError``), and help that
        cannot be written was lost, exit 0 (until review R88)."""
        (file or sys.stdout).write(self.format_help())

    def unrecognized(self, extras: Sequence[str]) -> str:
        """The refusal of arguments no parser took, each flag among them that is close to one of
        this parser's named with it: ``unrecognized arguments: --jsn (did you mean '--json'?)``."""
        hints = self._hints(extras)
        return f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else "")

    def _hints(self, args: Sequence[str]) -> list[str]:
        """``did you mean '--json'?`` for each flag of ``args`` close to one of this parser's (none
        for ``--`` nor for what follows it, a positional)."""
        from agentgate._names import did_you_mean  # on the error path only

        return [
            hint
            for arg in _before_dashes(args)
            if _looks_like_a_flag(arg)
            and (hint := did_you_mean(arg.partition("=")[0], self._option_string_actions))
        ]

    def _unknown_flags(self) -> list[str]:
        """The arguments this parser was last given that argparse read as flags it does not know:
        none after ``--``, nor one with a space, which argparse reads as a value (``--purpose '-a
        b'``) or a positional."""
        return [
            arg
            for arg in _before_dashes(self._given)
            if _looks_like_a_flag(arg) and " " not in arg and not self._knows(arg)
        ]

    def _takes_a_verb(self) -> bool:
        """Whether this parser is a command or verb group's, whose line names a verb next."""
        return any(isinstance(action, _Verbs) for action in self._actions)

    def _knows(self, arg: str) -> bool:
        """Whether ``arg`` is one of this parser's flags, alone, with ``=VALUE`` or (a short one)
        with its value attached (``-ofile``)."""
        known = self._option_string_actions
        return arg.partition("=")[0] in known or (not arg.startswith("--") and arg[:2] in known)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """As argparse's, but a command, verb or choice that is not one names the closest that
        is: ``invalid choice: 'revok' (choose from ...); did you mean 'revoke'?`` (review R74)."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            from agentgate._names import did_you_mean  # on the error path only

            hint = did_you_mean(str(value), [str(choice) for choice in action.choices or ()])
            if hint is None:
                raise
            raise argparse.ArgumentError(action, f"{exc.message}; {hint}") from None

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        """As argparse's, but a positional argument's refusal says nothing of a flag: ``given``
        tells an empty value to give one or leave the flag out, and a positional (``tasks settle
        "$KEY"``) has no flag and may not be left out (until review R68 it said so all the same)."""
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as exc:
            from agentgate.cli._common import LEAVE_THE_FLAG_OUT

            if action.option_strings or LEAVE_THE_FLAG_OUT not in exc.message:
                raise
            raise argparse.ArgumentError(action, exc.message.replace(LEAVE_THE_FLAG_OUT, "")) from None

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(args, namespace)
        vars(parsed).setdefault(_VERB_PARSER, self)  # a verb's parser returns first: it stays
        return parsed, extras

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but an argument no parser took is refused with the usage of the verb
        it was given to (``agentgate audit checkpoint [-h] ...``), not the top level's
        ``agentgate [-h] COMMAND ...``, which names none of that verb's options (review R67)."""
        parsed, extras = self.parse_known_args(args, namespace)
        verb: _Parser = vars(parsed).pop(_VERB_PARSER, self)
        self.verb_options = frozenset(option for action in verb._actions for option in action.option_strings)
        if extras:
            verb.error(verb.unrecognized(extras))
        return parsed


_MISSING = ("the following arguments are required", "one of the arguments")
"""How argparse's refusals of a command line that misses a required argument begin."""

_STORE_URL = re.compile(r"postgres(?:ql)?://[^\s']+", re.IGNORECASE)
_SECRET_PAIR = re.compile(r"\b((?:ssl)?password\s*=\s*)[^\s']+", re.IGNORECASE)


def _secrets_masked(message: str) -> str:
    """``message``, an error of the command line's parser, with what it quotes back of a store
    shown as every error shows a store: a PostgreSQL URL's password, and a ``password=`` pair's
    value, as ``***`` (review R81: ``--store URL`` given to a verb that takes none was refused as
    ``unrecognized arguments: --store postgresql://app:SECRET@...``, the password in clear)."""
    if "://" in message:
        from agentgate.store._postgres import _redact  # here: only a line that quotes a URL loads psycopg

        message = _STORE_URL.sub(lambda found: _redact(found.group()), message)
    return _SECRET_PAIR.sub(lambda found: found.group(1) + "***", message)


_NUMBER = re.compile(r"-\d+(\.\d*)?|-\.\d+")
"""A negative number, which argparse reads as a value, not a flag."""


def _before_dashes(args: Sequence[str]) -> Sequence[str]:
    """``args`` up to ``--``, after which argparse reads every argument as a positional."""
    return args[: list(args).index("--")] if "--" in args else args


def _looks_like_a_flag(arg: str) -> bool:
    """Whether argparse reads ``arg`` as a flag: ``-x``, ``--name``, ``--name=value``; not ``-``
    (standard input) nor a negative number."""
    return arg.startswith("-") and arg != "-" and not _NUMBER.fullmatch(arg)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for the command line ``argv``, with only the verb group it names registered when
    its first argument names one; with every group otherwise (``build_parser()``, no command, an
    option first such as ``--help``, an unknown group), so that help and errors list them all.
    Parsing loads no handler (``PARSERS``) but ``build_parser()``, with no command line, also
    imports every group's handlers: a program that builds the whole command line before it
    gives up its rights (``setuid``, a chroot) imports nothing after, when it may no longer read
    the interpreter's files (tests run verbs as another account so). ``main`` passes a command
    line, even an empty one."""
    parser = _Parser(prog="agentgate", description="Authority, scheduling and evidence for AI agents.")
    sub = parser.add_subparsers(dest="group", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in _groups_for(argv):
        importlib.import_module(PARSERS.get(name, name)).register(sub)
        if argv is None:
            importlib.import_module(name)
    return parser


def _groups_for(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The modules of the verb groups that parsing ``argv`` needs: the one its first argument
    names, else all. Only the first argument counts: the top-level parser has no option but
    ``--help``, so a group named later (``-h grant``, ``-- grant``) is read by argparse as it
    reads it with every group there."""
    named = [name for name in GROUPS if argv and name.rpartition(".")[2] == argv[0]]
    return tuple(named) or tuple(GROUPS)


class _Verbs(argparse._SubParsersAction):  # type: ignore[type-arg]
    """The subcommands of a verb group: a verb registered with a ``help`` line but no
    ``description`` takes that line as its description, so that ``agentgate audit verify
    --help`` says what the verb does, as ``agentgate audit --help`` does (until review R67 it
    printed the usage and options alone)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        help_text = kwargs.get("help")
        if kwargs.get("description") is None and help_text:
            kwargs["description"] = f"{help_text[0].upper()}{help_text[1:]}."
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code. Ctrl-C at any point after this is entered (while
    the verb groups load, while parsing, in a handler) is one line on stderr and exit 130;
    SIGTERM, received in the main thread (and not ignored, ``terminate_on_sigterm``), is the same
    with exit 143. The ``agentgate: warning:`` lines the command left (``agentgate.cli.warn``)
    come on stderr when it ends, each once: after its output, before its error or interruption
    line (``_end``)."""
    _standard_streams()
    restore = terminate_on_sigterm()
    with _warnings.running():
        try:
            return _run(argv)
        finally:
            restore()
            _say_warnings(last=True)


def _say_warnings(*, last: bool = False) -> None:
    """Say the warnings the command left (``_warnings.said``), each once; ``last``: it leaves no
    more (one a thread leaves later goes on as if no command ran)."""
    for line in _warnings.said(last=last):
        _say(line)


def _end(line: str) -> None:
    """Say the last line of a command that failed or was interrupted, after its warnings."""
    _say_warnings()
    _say(line)


def _run(argv: Sequence[str] | None) -> int:
    options: frozenset[str] = frozenset()
    helped: SystemExit | None = None
    try:
        argv = sys.argv[1:] if argv is None else argv
        parser = build_parser(argv)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            if exc.code:  # a refusal: its usage and line are on stderr
                raise
            # --help: argparse exits once the help is written, which must still reach its reader
            # as a verb's output must (the flush below; until review R88 one that could not be
            # written was lost, exit 0)
            helped, code = exc, 0
        else:
            options = getattr(parser, "verb_options", options)
            handler: Handler = args.handler
            with _warnings.log_records_said(args.group != "serve"):
                code = handler(args)
    except BrokenPipeError:  # the reader went away before the command had said all: no verdict
        _drop_stdout()
        return _PIPE_CLOSED
    except AgentGateError as exc:
        from agentgate.cli._common import named_for, privilege_hint  # on the error path only

        _end(f"agentgate: error: {_one_line(privilege_hint(named_for(str(exc), options)))}\n")
        return 2
    except UnicodeError as exc:  # an argument of bytes that are not UTF-8 (``$'\xff'``), sent to a store
        _end(f"agentgate: error: input that is not UTF-8 text: {_one_line(str(exc))}\n")
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (``Terminated``)
        line, code = ending(exc)
        _end(line)
        return code
    except OSError as exc:  # standard output cannot be written (disk full, I/O error), or a file
        if exc.filename is not None:
            _end(f"agentgate: error: {_one_line(f'{exc.filename}: {exc.strerror or exc}')}\n")
            return 2
        _drop_stdout()
        _end(f"agentgate: error: cannot write the output: {_one_line(str(exc.strerror or exc))}\n")
        return 2
    try:
        sys.stdout.flush()  # a full disk or a dead pipe shows here, not after main() returned
    except BrokenPipeError:  # the reader has what it wanted (``| head -1``): the verdict stands
        _drop_stdout()
        if helped is not None:  # no verdict, and the help did not reach its reader
            return _PIPE_CLOSED
    except OSError as exc:
        _drop_stdout()
        _end(f"agentgate: error: cannot write the output: {_one_line(str(exc.strerror or exc))}\n")
        return 2
    if helped is not None:
        raise helped  # as argparse ends --help, for a program that calls main
    return code


def _say(line: str) -> None:
    """Write ``line`` to standard error; when even that cannot be written (stderr on a full disk,
    or closed), it is dropped, so that the exit code still says what happened."""
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError):
            _drop(sys.stderr)


def _standard_streams() -> None:
    """Make the three standard streams safe to use, whatever the caller left them as.

    A descriptor 0-2 that was closed (``>&-`` in a cron line, a daemon's leftovers) is opened on
    /dev/null, so no file agentgate opens later (a store, an ``--out`` file) takes its number:
    standard input then reads empty, standard output is read-only (writing to it fails with
    ``EBADF``: exit 2, one line, as for a full disk), standard error discards. Standard output is
    written as UTF-8 (JSON is UTF-8, and ``audit show --json`` lines must be the logged bytes)
    whatever the locale or ``PYTHONIOENCODING`` say, with what UTF-8 cannot carry (a file name
    that is not UTF-8) escaped as ``\\udcff``, as on standard error, instead of a traceback.
    """
    for descriptor, flags in ((0, os.O_RDONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(descriptor)
        except OSError:
            opened = os.open(os.devnull, flags)
            if opened != descriptor:
                os.dup2(opened, descriptor)
                os.close(opened)
    if sys.stdin is None:
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 (lives as long as sys.stdin)
    if sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(encoding="utf-8", errors="backslashreplace")


def _drop_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's flush at exit does not fail
    again on what could not be written (and print a second error)."""
    _drop(sys.stdout)


def _drop(stream: TextIO) -> None:
    """Point ``stream``'s descriptor at /dev/null (nothing for a stream that has none)."""
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (captured in-process)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, descriptor)
    finally:
        os.close(devnull)


if __name__ == "__main__":
    raise SystemExit(main())
