"""``agentgate keys``: create Ed25519 key pairs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentgate.audit.entry import not_printable
from agentgate.cli._common import given_path, unprintable
from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, save_key, shown_value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "keys", help="create Ed25519 key pairs", description="Manage Ed25519 keys."
    )
    sub = parser.add_subparsers(dest="keys_command", metavar="ACTION", parser_class=type(parser))
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
    new.set_defaults(handler=_new)


def _new(args: argparse.Namespace) -> int:
    bad = next((c for c in args.name if not_printable(c)), None)
    if bad is not None:  # a line break or escape in a file name breaks every script that lists it
        raise KeyFileError(
            f"invalid key name {shown_value(args.name, len(args.name))}: {unprintable(bad)}; use a plain file name"
        )
    key = SigningKey.generate()
    save_key(key, args.dir, args.name)
    sys.stdout.write(key.did + "\n")
    return 0
