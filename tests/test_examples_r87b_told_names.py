"""Review R87b: ``What the model was told`` lists each answered tool call by its name, which the
model chose (an unknown tool's name too, when its arguments are a JSON object and the call is
refused as no such tool); the list printed that name raw after review R87 escaped the others, so an
escape sequence in it still reached the terminal (a cleared screen)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from test_examples_r58_endpoint import _completion
from test_examples_r58_endpoint import common as common  # the fixture
from test_examples_r59_endpoint import Endpoint, Reply, _first_turn
from test_examples_r59_endpoint import _no_endpoint_settings as _no_endpoint_settings  # autouse
from test_examples_r59_endpoint import run as run  # the fixture
from test_examples_r87_escape import _printed_as_is


def test_the_name_of_a_tool_the_model_was_told_about_is_printed_escaped(
    run: Callable[..., tuple[int, str]],
) -> None:
    def answer(n: int, request: dict[str, Any]) -> Reply:
        return (
            _completion(None, [("pay\x1b[2Jments.refund", '{"order_id": "O-1"}')])
            if _first_turn(request)
            else _completion("x")
        )

    with Endpoint(answer) as endpoint:
        status, out = run("support_agent.py", endpoint)
    assert status == 0, out[-3000:]
    assert _printed_as_is(out) == []
    told = out[out.index("What the model was told:") :].split("\n")[1]
    assert told.startswith("  error   pay\\x1b[2Jments.refund  "), told
