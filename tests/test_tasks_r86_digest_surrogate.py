"""A ``ToolCall``'s ``arguments_digest`` is text hashed into the idempotency key and written with a
dead letter: one holding a lone surrogate is refused with ``InputError`` when the call is made, as
every other text field is (review R86: it was taken, and ``submit`` raised a bare
``UnicodeEncodeError`` or the store lost the dead letter)."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.tasks import ToolCall


def test_a_digest_with_a_lone_surrogate_is_refused_naming_it() -> None:
    with pytest.raises(InputError, match="not valid Unicode"):
        ToolCall("t", {}, run_id="r", call_id="c", arguments_digest="\udcff")


def test_a_digest_of_valid_unicode_is_taken() -> None:
    call = ToolCall("t", {}, run_id="r", call_id="c", arguments_digest="caf\u00e9")
    assert call.digest() == "caf\u00e9"
    assert call.idempotency_key() is not None
