"""``agentgate keys``: create Ed25519 key pairs."""

from __future__ import annotations

import argparse
import shlex

from agentgate._shown import character_named, not_printable
from agentgate.cli._common import say_written
from agentgate.cli._keys_parser import register as register
from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, is_key_text, save_key, shown_value


def _new(args: argparse.Namespace) -> int:
    bad = next((c for c in args.name if not_printable(c)), None)
    if bad is not None:  # a line break or escape in a file name breaks every script that lists it
        raise KeyFileError(
            f"invalid key name {_shown_name(args.name)}: {character_named(bad)}; use a plain file name"
        )
    # The name offered leaves out white space at either end, which save_key refuses (until review
    # R89b ``alice .key`` was offered ``keys new 'alice '``, refused in turn).
    stem, dot, suffix = args.name.rpartition(".")
    stem = stem.strip()
    # In any case: until review R88 ``alice.KEY`` wrote alice.KEY.key.
    if dot and stem and suffix.lower() in ("key", "pub"):  # ``keys new alice.key`` wrote alice.key.key
        while stem.lower().endswith((".key", ".pub")) and len(stem) > 4:  # ``a.key.key``: the name is a
            stem = stem[:-4].strip()  # (until review R82 the command it offered was refused in turn)
        if not stem.startswith(".") and "/" not in stem:  # else (`.key.key`, R84) save_key says why
            # a name that starts with '-' is read as an option unless after ``--`` (R84: ``-a``)
            given = f"{'-- ' if stem.startswith('-') else ''}{shlex.quote(stem)}"
            raise KeyFileError(
                f"invalid key name {args.name!r}: NAME is the name without .key or .pub: "
                f"agentgate keys new {given} writes {stem}.key and {stem}.pub"
            )
    key = SigningKey.generate()
    save_key(key, args.dir, args.name)
    say_written(key.did)  # the key files are written: a retry would be refused, they exist
    return 0


def _shown_name(name: str) -> str:
    """``name``, which holds a control character, quoted for the error that refuses it, unless it
    looks like a key's own text: judged with its line breaks as blanks, since ``is_key_text`` takes
    any text of more than one line for a key (a key pasted where a path belongs), and a name with
    a line break is refused for that very character (until review R55 it was not shown, as if a
    key). A PEM block or a base64 or hex key word in it is still not shown."""
    if is_key_text(" ".join(name.splitlines())):
        return shown_value(name)
    return repr(name)
