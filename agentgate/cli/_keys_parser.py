"""The parser of ``agentgate keys``, apart from its handler (agentgate/cli/keys.py), which needs
the signing library (agentgate.keys: nacl, cryptography): ``agentgate --help`` and ``agentgate
keys ... --help`` build this parser without loading it (review R65b)."""

from __future__ import annotations

from typing import Any

from agentgate.cli._common import given_path
from agentgate.cli._handlers import handled_by

_KEYS = "agentgate.cli.keys"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "keys", help="create Ed25519 key pairs", description="Manage Ed25519 keys."
    )
    sub = parser.add_subparsers(dest="keys_command", metavar="SUBCOMMAND", parser_class=type(parser))
    sub.required = True
    new = sub.add_parser(
        "new",
        help="write DIR/NAME.key (mode 0600) and DIR/NAME.pub, print the did:key",
        description="Generate a key pair: DIR/NAME.key (PKCS#8 PEM, mode 0600, never overwritten) and "
        "DIR/NAME.pub (the did:key). Prints the did:key.",
    )
    new.add_argument("name", metavar="NAME", help="plain file name, without extension")
    new.add_argument(
        "--dir", default=".", type=given_path, metavar="DIR", help="directory (default: current)"
    )
    new.set_defaults(handler=handled_by(_KEYS, "_new"))
