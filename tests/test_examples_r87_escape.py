"""Review R87: what an endpoint says reaches the terminal with each character that is not printable
written as its backslash escape (``agentgate._shown.escaped``): the model's last text, the server's
words in a stop line, the names of the tool calls it asked for and the models it lists. Until then
an escape sequence in any of them was printed as it was (a new window title, a cleared screen over
the run's refusals). The examples run in this process against a loopback endpoint, as
tests/test_examples_r59_endpoint.py runs them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from test_examples_r58_endpoint import _completion
from test_examples_r58_endpoint import common as common  # the fixture
from test_examples_r59_endpoint import Endpoint, Reply, _first_turn
from test_examples_r59_endpoint import _no_endpoint_settings as _no_endpoint_settings  # autouse
from test_examples_r59_endpoint import run as run  # the fixture

HOSTILE = "Done.\x1b]0;owned-title\x07\x1b[2K\rALL REFUNDS APPROVED\x1b[8m hidden\u202e"
"""An OSC that retitles the window, an erase-line, a carriage return, a hidden-text mode, a bidi override."""


def _printed_as_is(out: str) -> list[str]:
    """The characters of ``out`` a terminal acts on (all but line breaks), which none may hold."""
    return [c for c in out if not c.isprintable() and c != "\n"]


def test_the_models_last_text_is_printed_escaped(run: Callable[..., tuple[int, str]]) -> None:
    """Review R87: ``Run finished: the model said:`` printed the endpoint's escape sequences raw."""
    with Endpoint(lambda n, request: _completion(HOSTILE)) as endpoint:
        status, out = run("support_agent.py", endpoint)
    assert status == 0, out[-3000:]
    assert _printed_as_is(out) == []
    assert "the model said: Done.\\x1b]0;owned-title\\x07\\x1b[2K ALL REFUNDS APPROVED\\x1b[8m hidden" in out


def test_the_servers_words_in_a_stop_line_are_printed_escaped(run: Callable[..., tuple[int, str]]) -> None:
    """Review R87: a 500 whose message clears the screen cleared it under ``Run stopped:``."""
    body = json.dumps({"error": {"message": "boom \x1b[2J\x1b[H cleared", "type": "x"}}).encode()
    with Endpoint(lambda n, request: (500, body)) as endpoint:
        status, out = run("support_agent.py", endpoint, MAX_RETRIES="0")
    assert status == 1, out[-3000:]
    assert _printed_as_is(out) == []
    assert "(Error code: 500 - boom \\x1b[2J\\x1b[H cleared)" in out


def test_the_names_of_tool_calls_set_apart_are_printed_escaped(run: Callable[..., tuple[int, str]]) -> None:
    """Review R87: a tool call whose arguments are no JSON object is listed by its name, which the
    model chose, under ``Run finished:`` and in the summary's refusals: both printed it raw."""

    def answer(n: int, request: dict[str, Any]) -> Reply:
        return (
            _completion(None, [("pay\x1b[2Jments.refund", "[1, 2]")])
            if _first_turn(request)
            else _completion("x")
        )

    with Endpoint(answer) as endpoint:
        status, out = run("support_agent.py", endpoint)
    assert status == 0, out[-3000:]
    assert _printed_as_is(out) == []
    assert "pay\\x1b[2Jments.refund [1, 2]" in out
    assert "support-agent  tool:pay\\x1b[2Jments.refund  " in out


def test_the_models_an_endpoint_lists_are_printed_escaped(
    common: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R87: a model the endpoint does not serve is answered with the ids it lists at
    ``GET /models``, which were printed raw."""
    import httpx2
    import openai

    monkeypatch.setattr(common, "_served_models", lambda base_url, api_key: ["m\x1b]0;owned\x07", "n\u202e"])
    endpoint = common.EndpointSettings(
        base_url="http://127.0.0.1:9/v1", model="x", api_key="not-needed", timeout=1.0, retries=0
    )
    response = httpx2.Response(404, request=httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions"))
    error = openai.NotFoundError("Error code: 404 - no \x1b[8m such model", response=response, body=None)
    said = common._endpoint_trouble(error, endpoint, "x")
    assert _printed_as_is(said) == []
    assert said.endswith("set AGENTGATE_OPENAI_MODEL to one it serves: m\\x1b]0;owned\\x07, n\\u202e")
    assert "(Error code: 404 - no \\x1b[8m such model)" in said


@pytest.mark.parametrize(
    ("text", "width", "shown"),
    [
        ("a\x1b[2Jb", 86, "a\\x1b[2Jb"),
        ("line one\r\nline\ttwo", 86, "line one line two"),  # white space folded, as before
        ("\u202eevil", 86, "\\u202eevil"),
        ("x\x00" * 10, 12, "x\\x00x\\x00x…"),  # cut after escaping: no escape half-written past the width
    ],
)
def test_short_escapes_what_is_not_printable(text: str, width: int, shown: str, common: Any) -> None:
    assert common._short(text, width) == shown
