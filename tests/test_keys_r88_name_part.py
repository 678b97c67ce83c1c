"""The key-text check judges a long path part in one pass (review R88).

``_key_like`` lets a word of 40 or more characters pass as a path of names when every part after
``/`` is a name (``/Users/JohnDoe/...``). The parts were matched against
``(?:[A-Z]?[a-z]+|[0-9]+|[-_])+``, which splits a run of small letters into words in
exponentially many ways before it refuses a part ending in ``+``: a client's invocation ``iss``
of ``did:key:/0123456789012345678/`` and 26 letters and ``+`` held the gateway for seconds,
before any signature check. The check now takes one character at a time and accepts the same
parts.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import subprocess
import sys
from pathlib import Path

from agentgate import keys

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

_BEFORE = re.compile(r"(?:[A-Z]?[a-z]+|[0-9]+|[-_])+")
"""The pattern the check used before review R88: exponential on a refused part, short ones only."""

_ALPHABET = "abZY09-_+=é"


def test_name_part_accepts_exactly_what_the_old_pattern_accepted() -> None:
    for length in range(6):
        for letters in itertools.product("aZ0-+é", repeat=length):
            part = "".join(letters)
            assert bool(keys._NAME_PART.fullmatch(part)) == bool(_BEFORE.fullmatch(part)), part
    chance = random.Random(88)
    for _ in range(3000):
        part = "".join(chance.choice(_ALPHABET) for _ in range(chance.randint(1, 12)))
        assert bool(keys._NAME_PART.fullmatch(part)) == bool(_BEFORE.fullmatch(part)), part


def test_names_and_refused_parts() -> None:
    for name in ("Users", "JohnDoe", "agent-keys_2", "v2", "a", "-", "McDonald"):
        assert keys._NAME_PART.fullmatch(name), name
    for part in ("keyV2", "ABC", "Z", "a+", "a=b", "", "é"):
        assert keys._NAME_PART.fullmatch(part) is None, part


# Run in a process of its own: the old pattern held the GIL for ever on this text, so a thread
# could not be given up on; a process is killed at the timeout, and the test fails instead.
_HOSTILE = """
from agentgate.errors import KeyFileError
from agentgate.keys import looks_like_key, public_key_from_did
did = "did:key:/0123456789012345678/" + "z" * 5000 + "+"
print(looks_like_key(did))
try:
    public_key_from_did(did)
except KeyFileError as error:
    print(type(error).__name__)
"""


def test_a_did_of_a_long_hostile_path_part_is_judged_and_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _HOSTILE], env=ENV, capture_output=True, text=True, timeout=20, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "KeyFileError"]
