"""Review R85: a ``Chain`` built by hand with no links, or with a link that is not a ``Grant``,
is refused as it is built with a ``TokenFormatError`` (an ``InputError``) naming what is wrong,
as ``Budget`` refuses a value of the wrong type. Until R85 ``Chain((), token)`` raised a bare
``ValueError`` (``max() arg is an empty sequence``) and ``Chain(("x",), token)`` an
``AttributeError``. Grants that are not the token's are still refused where the chain is used
(``Denied``, ``tip_mismatch``: docs/token-format.md)."""

from __future__ import annotations

import dataclasses

import pytest

from agentgate.authority import Chain, issue, verify_chain
from agentgate.errors import Denied, InputError, TokenFormatError
from agentgate.keys import SigningKey

KEY = SigningKey.generate()
CHAIN = issue(KEY, KEY.public, ["tool:x"], ttl=60)


@pytest.mark.parametrize(
    ("links", "named"),
    [
        ((), "got none"),
        (("not a grant",), "link 0 is a str"),
        ((CHAIN.root, {"id": "x"}), "link 1 is a dict"),
        (None, "got a NoneType"),
    ],
)
def test_links_no_chain_is_made_of_are_refused_as_built(links: object, named: str) -> None:
    with pytest.raises(TokenFormatError) as raised:
        Chain(links, CHAIN.token)  # type: ignore[arg-type]
    assert isinstance(raised.value, InputError)
    assert (
        str(raised.value) == f"a chain's links are a tuple of one or more Grant objects, root first; {named}"
    )


def test_a_chain_of_grants_is_built_as_before_and_a_stranger_grant_refused_where_used() -> None:
    other = issue(KEY, KEY.public, ["tool:y"], ttl=60)
    assert Chain(CHAIN.links, CHAIN.token) == CHAIN
    built = Chain(other.links, CHAIN.token)
    assert built.ids == (other.id,)
    with pytest.raises(Denied, match=r"^tip_mismatch: "):
        verify_chain(built, KEY.public)
    assert dataclasses.replace(CHAIN).ids == CHAIN.ids
