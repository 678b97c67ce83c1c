"""Review R88b: the walks that look for integers beyond 64 bits (``_tool_calls._holds_out_of_range``,
``_integers_out_of_range``, ``_holds_beyond_range``) and the count of an answer's characters
(``dispatch._sse.text_chars``) keep each object they walked alive until they end. Review R88 made
them walk each object once, by its ``id``; but an ``id`` is unique only among live objects, and a
mapping that makes its values on each read (a lazy view) hands dicts that were freed once walked:
the next such dict could take the address of one walked, and was passed over, with the integer
beyond 64 bits (or the characters) in it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from agentgate.dispatch._sse import text_chars
from agentgate.integrations.langgraph._tool_calls import (
    _holds_beyond_range,
    _holds_out_of_range,
    _integers_out_of_range,
)

HUGE = 10**30


class _Lazy(Mapping[str, object]):
    """A mapping of one key whose value is a new dict ``{"v": value}`` at each read."""

    def __init__(self, value: object) -> None:
        self.value = value

    def __getitem__(self, key: str) -> object:
        return {"v": self.value}

    def __iter__(self) -> Iterator[str]:
        return iter(["k"])

    def __len__(self) -> int:
        return 1


def _views_then(last: object, before: int = 50) -> list[_Lazy]:
    """``before`` views of small integers, then one of ``last``: walked from the end, the view of
    ``last`` is the last one read, after many dicts were walked and dropped."""
    return [_Lazy(last), *(_Lazy(n) for n in range(before))]


def test_an_integer_beyond_64_bits_in_a_dict_made_on_each_read_is_found() -> None:
    assert _holds_out_of_range(_views_then(HUGE))
    assert _integers_out_of_range(_views_then(HUGE)) == [((0, "k", "v"), HUGE)]
    assert _holds_beyond_range(_views_then(HUGE))


def test_every_dict_made_on_each_read_is_counted() -> None:
    views: list[object] = [_Lazy("abc") for _ in range(50)]
    assert text_chars(views) == 150
