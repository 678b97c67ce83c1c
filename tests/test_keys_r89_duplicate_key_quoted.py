"""A key given twice is quoted cut (``_shown.quoted``, 80 characters) by the ``--args`` reader
and by the token and invocation reader, as every other strict reader cuts it (review R89). Until
then both quoted it whole: a chain token repeating a 4 KB key was refused with a 4,100-character
message, which the gateway writes into its 401 body and twice into the audit log, for a caller
not yet authenticated; ``--args`` repeating a 100,000-character key, a 100,024-character error.
The key may be a secret, and the message still names it and says what is wrong."""

from __future__ import annotations

import pytest

from agentgate.authority._encoding import b64url_encode, parse_canonical
from agentgate.authority._parsing import MAX_PAYLOAD_BYTES, TOKEN_PREFIX, parse_chain
from agentgate.cli._common import json_object
from agentgate.errors import InputError, TokenFormatError

LIMIT = 200
"""Room for what the refusal says around the quoted key (80 characters)."""


def _twice(key: str, separator: str = ",") -> str:
    return f'{{"{key}":1{separator}"{key}":2}}'


def test_a_chain_token_repeating_a_long_key_is_refused_with_the_key_cut() -> None:
    key = "x" * (MAX_PAYLOAD_BYTES // 2 - 20)
    token = f"{TOKEN_PREFIX}.{b64url_encode(_twice(key).encode())}.{b64url_encode(bytes(64))}"
    with pytest.raises(TokenFormatError, match=r"duplicate key 'xxx+\.\.\.") as info:
        parse_chain(token)
    assert len(str(info.value)) < LIMIT, len(str(info.value))


def test_an_invocation_repeating_a_long_key_is_refused_with_the_key_cut() -> None:
    with pytest.raises(TokenFormatError, match=r"duplicate key 'aaa+\.\.\.") as info:
        parse_canonical(_twice("a" * 20_000).encode(), "invocation")
    assert len(str(info.value)) < LIMIT, len(str(info.value))


def test_args_repeating_a_long_key_is_refused_with_the_key_cut() -> None:
    with pytest.raises(InputError, match=r"^--args: duplicate key 'kkk+\.\.\.$") as info:
        json_object(_twice("k" * 100_000, ", "))
    assert len(str(info.value)) < LIMIT, len(str(info.value))


def test_a_short_key_given_twice_is_still_quoted_whole() -> None:
    with pytest.raises(InputError, match=r"^--args: duplicate key 'amount'$"):
        json_object(_twice("amount"))
    with pytest.raises(TokenFormatError, match=r"duplicate key 'amount'"):
        parse_canonical(_twice("amount").encode(), "invocation")
