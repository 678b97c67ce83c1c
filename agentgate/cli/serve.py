"""``agentgate serve``: the OpenAI-compatible gateway (docs/gateway.md).

``agentgate serve --policy FILE --inventory FILE [--host 127.0.0.1] [--port 8000] [--store URL]
[--stream-stall-s SECONDS] [--shutdown-grace-s SECONDS] [--head-timeout-s SECONDS]
[--max-head-bytes N] [--unread-body-s SECONDS] [--body-timeout-s SECONDS] [--max-body-bytes N]
[--first-token-s SECONDS] [--decode-tokens-per-s N]`` serves ``/v1/chat/completions``,
``/v1/models``, ``/metrics`` and ``/healthz`` with uvicorn until interrupted. Every call is
decided under the policy's trust anchors and recorded in the store (``--store``, else
``AGENTGATE_STORE``, else the default SQLite file). A policy, inventory or
store that cannot be opened or does not exist (``agentgate store init`` creates one), an
inventory without backends, a ``--host`` that does not resolve
and an address that cannot be bound (a port in use) are a one-line error and exit code 2; the
socket is bound before "serving" is printed. It stops on SIGINT (Ctrl-C) or SIGTERM (what
service managers send) alike: calls in flight get ``--shutdown-grace-s`` (default 10), then are
cut and settled, and every outcome is committed before it exits 0. A SIGINT during the grace ends
it at once; any signal after that (the store still committing) is the same stop, waited for.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from agentgate._http_limits import LEAST_HEAD_BYTES, MOST_HEAD_BYTES, MOST_PORT, MOST_SECONDS
from agentgate._numbers import LEAST_DECODE_RATE
from agentgate.cli import stop_signals
from agentgate.cli._common import (
    STORE_HELP,
    ascii_whole,
    given,
    open_existing_store,
    shown_policy,
    shown_source_error,
)
from agentgate.errors import InputError, InventoryError

if TYPE_CHECKING:
    from types import FrameType

    import uvicorn

T = TypeVar("T")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the OpenAI-compatible gateway",
        description="Serve /v1/chat/completions, /v1/models, /metrics and /healthz under agentgate's authority.",
    )
    parser.add_argument("--policy", required=True, type=given, metavar="FILE", help="policy YAML file")
    parser.add_argument(
        "--inventory", required=True, type=given, metavar="FILE", help="inventory YAML file (backends)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", metavar="ADDRESS", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=_port, default=8000, metavar="N", help="port (default 8000)")
    parser.add_argument("--store", type=given, metavar="URL", help=STORE_HELP)
    parser.add_argument(
        "--stream-stall-s",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="cut an answer whose caller reads none of it for this long (default 30)",
    )
    parser.add_argument(
        "--shutdown-grace-s",
        type=_grace,
        default=10,
        metavar="SECONDS",
        help="on SIGINT/SIGTERM, how long calls in flight may finish before they are cut (default 10)",
    )
    parser.add_argument(
        "--head-timeout-s",
        type=_head_timeout,
        default=None,
        metavar="SECONDS",
        help="answer 408 to a request head (line and headers) not all arrived in this long (default 10)",
    )
    parser.add_argument(
        "--max-head-bytes",
        type=_max_head,
        default=None,
        metavar="N",
        help="answer 431 to a request head (line and headers) over this many bytes (default 65536, 64 KiB)",
    )
    parser.add_argument(
        "--unread-body-s",
        type=_unread_body,
        default=None,
        metavar="SECONDS",
        help="close a connection whose request was answered before its body all came, if the rest "
        "takes longer than this (default 10)",
    )
    parser.add_argument(
        "--body-timeout-s",
        type=_body_timeout,
        default=None,
        metavar="SECONDS",
        help="answer 408 to a request body not all arrived this long after its head (default 60)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=_max_body,
        default=None,
        metavar="N",
        help="answer 413 to a request body over this many bytes (default 8388608, 8 MiB)",
    )
    parser.add_argument(
        "--first-token-s",
        type=_first_token,
        default=None,
        metavar="SECONDS",
        help="fail over from a backend that sends no first token of a stream in this long; a whole "
        "(non-streamed) answer is waited for this plus its output limit at --decode-tokens-per-s "
        "(default 60)",
    )
    parser.add_argument(
        "--decode-tokens-per-s",
        type=_decode_rate,
        default=None,
        metavar="N",
        help="the slowest decode, in tokens a second, a whole answer is waited for (default 5)",
    )
    parser.set_defaults(handler=_serve)


def _parsed(
    convert: Callable[[str], T], expected: str, ok: Callable[[T], bool], limit: str
) -> Callable[[str], T]:
    """An argparse type: ``convert(text)``, refused with ``expected`` when it does not convert and
    with ``limit`` when ``ok`` refuses the value; the value quoted cut to 40 characters."""

    def parse(text: str) -> T:
        shown = text[:40] + ("..." if len(text) > 40 else "")
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {shown!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{limit}, not {shown}")
        return value

    return parse


_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)


def _decimal(text: str) -> float:
    """A number written in ASCII digits with an optional fraction (``0.5``, ``30``), else
    ``ValueError``: not ``float``'s ``1e3``, ``inf``, `` 5``, ``1_0`` or other scripts' digits
    (until review R89 each was read). One too large for a float is infinity, refused by every
    bound here."""
    if not _DECIMAL.fullmatch(text):
        raise ValueError(text)
    return float(text)


def _limit_seconds(what: str) -> Callable[[str], float]:
    """An argparse type for a time limit: a number of seconds above 0 and at most a day."""
    return _parsed(
        _decimal,
        "a number of seconds",
        lambda v: 0 < v <= MOST_SECONDS,
        f"{what} is a positive number of seconds, at most {MOST_SECONDS:g}",
    )


MOST_BODY_BYTES = 2**63 - 1
"""The largest ``--max-body-bytes``: the largest size a file or a ``Content-Length`` may have."""

_port = _parsed(ascii_whole, "a port number", lambda v: 0 < v <= MOST_PORT, f"a port is 1 to {MOST_PORT}")
_seconds = _limit_seconds("a stall limit")
_head_timeout = _limit_seconds("a head timeout")
_unread_body = _limit_seconds("an unread body's time")
_body_timeout = _limit_seconds("a body timeout")
_first_token = _limit_seconds("a first token limit")
_decode_rate = _parsed(
    _decimal,
    "a number of tokens a second",
    lambda v: LEAST_DECODE_RATE <= v < math.inf,
    f"a decode rate is a finite number of tokens a second, at least {LEAST_DECODE_RATE:g}",
)
_max_head = _parsed(
    ascii_whole,
    "a whole number of bytes",
    lambda v: LEAST_HEAD_BYTES <= v <= MOST_HEAD_BYTES,
    f"a head limit is {LEAST_HEAD_BYTES} to {MOST_HEAD_BYTES} bytes",
)
_max_body = _parsed(
    ascii_whole,
    "a whole number of bytes",
    lambda v: 0 < v <= MOST_BODY_BYTES,
    f"a body limit is 1 to {MOST_BODY_BYTES} bytes",
)
# The range ``GatewayServer`` takes, refused here before the store is opened or the port bound
# (until review R85 the flag had no upper bound: 100000 reached the server, whose refusal named
# its Python parameter, not the flag).
_grace = _parsed(
    ascii_whole,
    "a whole number of seconds",
    lambda v: 0 <= v <= MOST_SECONDS,
    f"a shutdown grace is a whole number of seconds from 0 to {MOST_SECONDS:g}",
)


def _serve(args: argparse.Namespace) -> int:
    # Imported here: the other commands need neither the gateway nor its web server.
    from agentgate.dispatch.backends import Timeouts
    from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer
    from agentgate.dispatch.inventory import load_inventory

    policy = shown_policy(args.policy)
    with shown_source_error():
        inventory = load_inventory(args.inventory)
    if not inventory.backends:
        raise InventoryError("declares no backends: the gateway could answer nothing", file=args.inventory)
    listener = _listen(args.host, args.port)
    try:
        # A store that does not exist is a mistyped --store (or working directory): a gateway on a
        # new empty one would never see the revocations, budgets and nonces of the store in use.
        gate = GatewayGate(policy, open_existing_store(args.store, init_hint=True))
        try:
            server = GatewayServer(
                Gateway(
                    gate,
                    inventory,
                    timeouts=Timeouts(
                        **_given(
                            first_token_s=args.first_token_s, decode_tokens_per_s=args.decode_tokens_per_s
                        )
                    ),
                    **_given(max_body_bytes=args.max_body_bytes, body_timeout_s=args.body_timeout_s),
                ),
                host=args.host,
                port=args.port,
                shutdown_grace_s=args.shutdown_grace_s,
                **_given(
                    stream_stall_s=args.stream_stall_s,
                    head_timeout_s=args.head_timeout_s,
                    max_head_bytes=args.max_head_bytes,
                    unread_body_s=args.unread_body_s,
                ),
            )
            sys.stderr.write(f"agentgate: serving {', '.join(server.gateway.models)} on {server.url}\n")
            with _stopped_by_signals(server.server):
                try:
                    server.server.run(sockets=[listener])
                finally:
                    gate.close()
        finally:
            gate.close()  # idempotent: here for a server that could not be made
    finally:
        listener.close()
    return 0


_STOP_SIGNALS = stop_signals()
"""The signals that stop ``agentgate serve`` gracefully (``_stopped_by_signals``)."""


@contextlib.contextmanager
def _stopped_by_signals(server: uvicorn.Server) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP (``_STOP_SIGNALS``) are ``server``'s stop request (uvicorn's
    ``handle_exit``: the first begins the shutdown grace, a SIGINT after it ends the grace at
    once) from before it runs until the gate has closed; then the handlers before are put back.
    SIGHUP, which a gateway gets when the terminal or SSH session it runs in closes (and which
    some supervisors send), stops it as SIGTERM does: until review R96 it was left to its default
    action, which killed the process at once, its calls in flight with no outcome and their
    reservations held.

    uvicorn takes the signals only while it serves: once its shutdown is done it puts back the
    handlers it found and raises the signals it caught again. Those were Python's (Ctrl-C's
    ``KeyboardInterrupt``) and the command's (SIGTERM's ``Terminated``), so that until review R93
    a signal during the rest of the shutdown raised where it landed: a Ctrl-C while ``gate.close()``
    waited for a busy store threw its last commit away (an allow's outcome unrecorded, its
    reservation held for ever, exit 130), and a second SIGTERM while ``asyncio.run`` waited for a
    worker thread closed the loop under it (uvloop's traceback on stderr). Held here, a signal
    after the shutdown began only asks again for what is under way: the command ends, exit 0,
    once every outcome is committed. The wait for the store is bounded by its busy timeout.

    A signal ignored when the command began (SIG_IGN from whoever started it: ``trap '' TERM``,
    or the SIGINT a non-interactive shell ignores for a background job ``agentgate serve ... &``)
    stays ignored for the whole run, as for the other commands (``terminate_on_sigterm``): until
    review R94 this and uvicorn's ``capture_signals``, which installs ``server.handle_exit`` for
    both signals whatever they were, made it a stop request, so the Ctrl-C meant for the script
    that started the gateway in the background stopped the gateway too. So does a SIGHUP ignored
    at start (``nohup agentgate serve ...``): the gateway outlives the terminal, as asked.
    """
    ignored = {signum for signum in _STOP_SIGNALS if signal.getsignal(signum) == signal.SIG_IGN}
    stop = server.handle_exit

    def handle_exit(signum: int, frame: FrameType | None) -> None:
        if signum not in ignored:
            stop(signum, frame)

    # On the instance, where uvicorn's ``capture_signals`` takes it from (``self.handle_exit``).
    server.handle_exit = handle_exit  # type: ignore[method-assign,assignment]
    previous = {
        signum: signal.signal(signum, handle_exit) for signum in _STOP_SIGNALS if signum not in ignored
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _given(**settings: Any) -> dict[str, Any]:
    """The settings a flag gave (the others keep their defaults, which live with the gateway)."""
    return {name: value for name, value in settings.items() if value is not None}


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound and listening on ``host``:``port``, before anything says "serving".

    Raises ``InputError`` (one line, exit 2) when the host does not resolve or the address
    cannot be bound (in use, not local, not permitted).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError(f"--host {host!r} does not resolve: {exc}") from None
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return listener
