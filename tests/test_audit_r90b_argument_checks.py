"""Review R90's argument checks of the evidence API, completed where they leaked or came late.

R90 refused a ``public_key`` that is no ``PublicKey`` and a hash that is not bytes with
``InputError``, but: a released ``memoryview`` as a hash still failed with a bare ``ValueError``
(``verify_inclusion``) or as a proof that does not lead to the root; ``open_checkpoint`` compared
the origin before it checked the key, so a ``public_key`` of ``None`` with another ``origin`` was
refused as a checkpoint of another log (``TamperDetected``), and ``verify_bundle`` parsed the
bundle first, so a malformed one hid the key's error; and ``previous_keys`` had to be a sequence,
where a ``set`` or a generator of keys opened a note before R90. Now the hash and the key are
refused with ``InputError`` before anything is compared, and ``previous_keys`` is any iterable.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentgate.audit import (
    Checkpoint,
    leaf_hash,
    open_checkpoint,
    sign_checkpoint,
    verify_bundle,
    verify_inclusion,
)
from agentgate.errors import InputError
from agentgate.keys import SigningKey

OLD, NEW = SigningKey(b"\x07" * 32), SigningKey(b"\x08" * 32)
ORIGIN = "r90b.example/audit"
LEAF = leaf_hash(b"entry")


def _released() -> memoryview:
    view = memoryview(bytearray(LEAF))
    view.release()
    return view


@pytest.mark.parametrize(
    ("check", "named"),
    [
        (lambda: verify_inclusion(_released(), 0, 1, [], LEAF), "leaf"),
        (lambda: verify_inclusion(LEAF, 0, 1, [], _released()), "root"),
        (lambda: verify_inclusion(LEAF, 0, 2, [_released()], LEAF), "proof[0]"),
    ],
    ids=["leaf", "root", "proof-item"],
)
def test_a_released_memoryview_hash_is_refused_naming_it(check: Callable[[], object], named: str) -> None:
    with pytest.raises(InputError) as refused:
        check()
    assert str(refused.value) == f"Merkle proof check: {named} is a released memoryview"


def test_a_memoryview_hash_is_read_as_its_bytes() -> None:
    verify_inclusion(memoryview(LEAF), 0, 1, [], memoryview(bytearray(LEAF)))  # type: ignore[arg-type]


def test_the_key_is_checked_before_the_origin_is_compared() -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, LEAF), OLD)
    with pytest.raises(InputError, match=r"^public_key must be a PublicKey"):
        open_checkpoint(note, None, origin="other.example/log")  # type: ignore[arg-type]


def test_the_key_is_checked_before_the_bundle_is_read() -> None:
    with pytest.raises(InputError, match=r"^public_key must be a PublicKey"):
        verify_bundle("not a bundle\n", None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "previous",
    [lambda: {OLD.public}, lambda: (key for key in [OLD.public]), lambda: frozenset([OLD.public])],
    ids=["set", "generator", "frozenset"],
)
def test_previous_keys_may_be_any_iterable(previous: Callable[[], object]) -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, LEAF), OLD)  # signed before the key was rotated
    opened = open_checkpoint(note, NEW.public, ORIGIN, previous_keys=previous())  # type: ignore[arg-type]
    assert opened == Checkpoint(ORIGIN, 1, LEAF)


@pytest.mark.parametrize(
    ("previous", "named"), [(OLD.public.raw, "bytes"), (None, "NoneType")], ids=["bytes", "none"]
)
def test_previous_keys_that_are_no_iterable_of_keys_are_refused(previous: object, named: str) -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, LEAF), OLD)
    with pytest.raises(InputError) as refused:
        open_checkpoint(note, NEW.public, ORIGIN, previous_keys=previous)  # type: ignore[arg-type]
    assert str(refused.value) == f"previous_keys must be an iterable of PublicKey, got {named}"
