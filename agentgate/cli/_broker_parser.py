"""The parser of ``agentgate broker``, apart from its handlers (agentgate/cli/broker.py), which need
the broker's model and its store parts: ``agentgate --help`` and ``agentgate broker ... --help``
build this parser without loading them (review R65b)."""

from __future__ import annotations

import argparse
from typing import Any

from agentgate.cli._common import STORE_HELP, given, given_utf8
from agentgate.cli._handlers import handled_by

_BROKER = "agentgate.cli.broker"


def register(subparsers: Any) -> None:
    """Add the ``broker`` verb group."""
    parser = subparsers.add_parser("broker", help="show the GPU broker's inventory, leases and queue")
    sub = parser.add_subparsers(dest="broker_command", metavar="SUBCOMMAND", parser_class=type(parser))
    sub.required = True

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--store",
            type=given,
            metavar="URL",
            help=STORE_HELP,
        )
        p.add_argument(
            "--broker",
            default="default",
            type=given_utf8,  # refused naming the flag, not in the store's words (review R88)
            metavar="NAME",
            help="broker name in the store (default: default)",
        )
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")

    inventory = sub.add_parser("inventory", help="GPUs by rack, node and NVLink domain, with who holds them")
    inventory.add_argument(
        "--inventory", required=True, type=given, metavar="FILE", help="inventory YAML file"
    )
    common(inventory)
    inventory.set_defaults(handler=handled_by(_BROKER, "_inventory"))

    leases = sub.add_parser("leases", help="live leases")
    common(leases)
    leases.set_defaults(handler=handled_by(_BROKER, "_leases"))

    queue = sub.add_parser("queue", help="waiting requests in scheduling order")
    common(queue)
    queue.set_defaults(handler=handled_by(_BROKER, "_queue"))
