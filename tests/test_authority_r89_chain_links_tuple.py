"""Review R89: a ``Chain`` built with a list of its own token's grants was taken, and then the
entry points disagreed: ``verify_chain``, ``delegate`` and ``record`` refused it as
``tip_mismatch`` ("the chain's links are not the ones its token carries", which was false: a list
never equals the parsed tuple), while ``Authority.decide_held`` allowed a call on it. Its links
are documented as a tuple; anything else is now refused as the chain is built, with the
``TokenFormatError`` that names what was given, so every entry point gives the same answer."""

from __future__ import annotations

import pytest

from agentgate.authority import Chain, issue, verify_chain
from agentgate.errors import TokenFormatError
from agentgate.keys import SigningKey

ROOT, ALICE = SigningKey.generate(), SigningKey.generate()
NOW = 1_800_000_000
CHAIN = issue(ROOT, ALICE.public, ["tool:pay?amount<=500"], ttl=3600, now=NOW)


@pytest.mark.parametrize("made", [list, iter, lambda links: {link.id: link for link in links}.values()])
def test_links_given_as_anything_but_a_tuple_are_refused_as_the_chain_is_built(made: object) -> None:
    links = made(CHAIN.links)  # type: ignore[operator]
    with pytest.raises(TokenFormatError) as raised:
        Chain(links, CHAIN.token)
    assert str(raised.value) == (
        f"a chain's links are a tuple of one or more Grant objects, root first; got a {type(links).__name__}"
    )


def test_the_same_grants_as_a_tuple_make_the_chain_its_token_does() -> None:
    built = Chain(tuple(list(CHAIN.links)), CHAIN.token)
    assert built == CHAIN
    assert verify_chain(built, ROOT.public, now=NOW + 1) == CHAIN
