"""A checkpoint signs a root given as any bytes-like object of 32 bytes, and names what it refuses.

Review R90 made ``Checkpoint.text`` refuse a root that is not ``bytes``, so that a ``bytearray``
or ``memoryview`` root, which ``sign_checkpoint`` signed before (a note that opens), was refused,
and the refusal said only "a checkpoint needs a size 0 .. 2**64-1 and a 32-byte root", not the
type it got. A root of ``bytes``, ``bytearray`` or ``memoryview`` is signed again as its 32
bytes; anything else is refused with ``InputError`` naming its type, a root of another length
with its length.
"""

from __future__ import annotations

import pytest

from agentgate.audit import Checkpoint, open_checkpoint, sign_checkpoint
from agentgate.errors import InputError
from agentgate.keys import SigningKey

KEY = SigningKey(b"\x07" * 32)
ORIGIN = "r90b.example/audit"
ROOT = b"\x11" * 32


@pytest.mark.parametrize("root", [ROOT, bytearray(ROOT), memoryview(ROOT)], ids=lambda r: type(r).__name__)
def test_a_bytes_like_root_is_signed_and_opens(root: bytes) -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, root), KEY)
    assert open_checkpoint(note, KEY.public) == Checkpoint(ORIGIN, 1, ROOT)


@pytest.mark.parametrize(("root", "named"), [("x" * 32, "str"), (None, "NoneType"), (list(ROOT), "list")])
def test_a_root_of_another_type_is_refused_naming_the_type(root: object, named: str) -> None:
    with pytest.raises(InputError) as refused:
        sign_checkpoint(Checkpoint(ORIGIN, 1, root), KEY)  # type: ignore[arg-type]
    assert (
        str(refused.value)
        == f"a checkpoint needs a 32-byte root (bytes, bytearray or memoryview), got {named}"
    )


def test_a_root_of_another_length_is_refused_naming_the_length() -> None:
    with pytest.raises(InputError, match="a checkpoint needs a 32-byte root, got 31 bytes"):
        sign_checkpoint(Checkpoint(ORIGIN, 1, bytearray(31)), KEY)  # type: ignore[arg-type]
