"""``agentgate serve``: the OpenAI-compatible gateway (docs/gateway.md).

``agentgate serve --policy FILE --inventory FILE [--host 127.0.0.1] [--port 8000] [--store URL]``
serves ``/v1/chat/completions``, ``/v1/models``, ``/metrics`` and ``/healthz`` with uvicorn until
interrupted. Every call is decided under the policy's trust anchors and recorded in the store
(``--store``, else ``AGENTGATE_STORE``, else the default SQLite file). A policy, inventory or
store that cannot be opened is a one-line error and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the OpenAI-compatible gateway",
        description="Serve /v1/chat/completions, /v1/models, /metrics and /healthz under agentgate's authority.",
    )
    parser.add_argument("--policy", required=True, metavar="FILE", help="policy YAML file")
    parser.add_argument("--inventory", required=True, metavar="FILE", help="inventory YAML file (backends)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8000, metavar="N", help="port (default 8000)")
    parser.add_argument("--store", metavar="URL", help="store URL or path (default: AGENTGATE_STORE)")
    parser.set_defaults(handler=_serve)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, not {value}")
    return value


def _serve(args: argparse.Namespace) -> int:
    # Imported here: the other commands need neither the gateway nor its web server.
    from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer
    from agentgate.dispatch.inventory import load_inventory
    from agentgate.policy import load_policy
    from agentgate.store import open_store

    policy = load_policy(args.policy)
    inventory = load_inventory(args.inventory)
    gate = GatewayGate(policy, open_store(args.store))
    try:
        server = GatewayServer(Gateway(gate, inventory), host=args.host, port=args.port)
        sys.stderr.write(f"agentgate: serving {', '.join(server.gateway.models)} on {server.url}\n")
        server.run()
    finally:
        gate.close()
    return 0
