"""Review R86: ``first_inexact`` wrote out each element's full path (``[0][0]...[0][i]``) before
looking at it, so tool-call arguments nested deep and wide took their depth times their size in
memory (0.8 MB at depth 900: over a gigabyte). Paths are now kept as ``check_json`` keeps them,
(parent, key) pairs written out only for the number found."""

import json
import tracemalloc

from agentgate._json import exact_float, first_inexact, inexact_argument


def _deep_and_wide(depth: int, width: int, last: str = "0") -> str:
    return '{"a":' + "[" * depth + ",".join(["0"] * (width - 1) + [last]) + "]" * depth + "}"


def test_first_inexact_takes_memory_in_proportion_to_the_value_not_its_depth_times_its_size() -> None:
    text = _deep_and_wide(200, 20_000)
    exact = json.loads(text, parse_float=exact_float)
    tracemalloc.start()
    try:
        assert first_inexact(exact) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * len(text)


def test_the_number_found_deep_inside_is_still_named_by_its_whole_path() -> None:
    text = _deep_and_wide(3, 4, "100.00000000000000001")
    assert inexact_argument(text, json.loads(text)) == ("a", "'a'[0][0][3]", "100.00000000000000001")
    nested = '{"items": [{"price": 1.5}, {"price": 0.10000000000000000001}]}'
    assert inexact_argument(nested, json.loads(nested)) == (
        "items",
        "'items'[1]'price'",
        "0.10000000000000000001",
    )
