"""The examples against a loopback endpoint answering as real vLLM and llama.cpp servers can
(review R59): one that never answers, retries after an error status or a 429, arguments that are
JSON but no object, an answer with no choice, a cut answer. Each run ends with a clear line and an
exit status, never a traceback; the endpoint's timeout and retries are settings, checked.

The examples run as in tests/test_examples_r58_endpoint.py (``_run``: ``runpy``, in this process);
the server here also sends headers (``Retry-After``), lets the client retry, and can hang.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_examples_r58_endpoint import SERVED, _completion, _log, _run

Reply = tuple[int, bytes] | tuple[int, bytes, dict[str, str]]


class Endpoint:
    """``/v1/chat/completions`` and ``/v1/models`` on 127.0.0.1; the n-th chat answer (from 0) is
    ``answer(n, request)``, with headers where it gives them, or none at all where it is ``None``:
    the request then waits, unanswered, until the test ends (or ``late`` seconds, then "late")."""

    def __init__(self, answer: Callable[[int, dict[str, Any]], Reply | None], late: float = 5.0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.released = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(200, json.dumps({"object": "list", "data": [{"id": SERVED}]}).encode(), {})

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                endpoint.requests.append(request)
                reply = answer(len(endpoint.requests) - 1, request)
                if reply is None:
                    if endpoint.released.wait(late):
                        return  # the test is over: the client gave up long ago
                    reply = _completion("late")  # a client that waits this long gets an answer
                status, body, *headers = reply
                self._send(status, body, headers[0] if headers else {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Endpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def _first_turn(request: dict[str, Any]) -> bool:
    return bool(request["messages"][-1]["role"] == "user")


def _refund(arguments: str) -> tuple[str, str]:
    return ("payments.refund", arguments)


REFUND_40 = _refund(json.dumps({"order_id": "O-1", "amount": 40, "currency": "EUR"}))


@pytest.fixture
def run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str]]:
    """``run(name, endpoint, **settings)``: the example's exit status and what it printed."""

    def run(name: str, endpoint: Endpoint | SimpleNamespace, **settings: str) -> tuple[int, str]:
        for setting, value in settings.items():
            monkeypatch.setenv(f"AGENTGATE_OPENAI_{setting}", value)
        return _run(name, endpoint.url, tmp_path, monkeypatch, capsys)

    return run


def _unwrapped(out: str) -> str:
    """``out`` with each line the examples wrapped at 100 columns joined to the line it continues
    (indented lines are joined too: enough to find what a line said)."""
    return re.sub(r"\n {2,}", " ", out)


def _stopped(out: str) -> str:
    stopped = re.search(r"^Run stopped: (.*)$", _unwrapped(out), re.M)
    assert stopped is not None, out[-3000:]
    return stopped.group(1)


# --- 1. the endpoint's timeout and retries ---------------------------------------------------------


def test_an_endpoint_that_never_answers_stops_the_run_after_the_timeout_and_its_retries(
    run: Callable[..., tuple[int, str]],
) -> None:
    """Review R59: a hanging endpoint made the example wait the client's 600 s a try, 3 tries, with no setting to shorten it."""
    with Endpoint(lambda n, request: None) as endpoint:
        status, out = run("support_agent.py", endpoint, TIMEOUT="0.2", MAX_RETRIES="1")
    assert status == 1, out[-3000:]
    assert _stopped(out) == (
        f"the endpoint AGENTGATE_OPENAI_BASE_URL={endpoint.url} did not answer within "
        "AGENTGATE_OPENAI_TIMEOUT=0.2 s (2 tries): is it overloaded, or still loading the model? "
        "A slow endpoint needs a larger AGENTGATE_OPENAI_TIMEOUT"
    )
    assert len(endpoint.requests) == 2  # the first try and one retry
    assert "VERIFIES" in out


@pytest.mark.parametrize(
    ("retries", "status", "tries"),
    [("0", 1, 1), ("1", 0, 2), ("", 0, 2)],  # empty: the default, 2 retries
)
def test_an_error_status_is_tried_again_as_often_as_max_retries_says(
    retries: str, status: int, tries: int, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R59: the number of retries after a failed model call (500) could not be set."""

    def answer(n: int, request: dict[str, Any]) -> Reply:
        if n == 0:
            return 500, b'{"error": {"message": "engine restarting"}}'
        return _completion("Nothing to refund.")

    with Endpoint(answer) as endpoint:
        exit_status, out = run("support_agent.py", endpoint, MAX_RETRIES=retries)
    assert exit_status == status, out[-3000:]
    assert len(endpoint.requests) == tries
    if status:
        assert _stopped(out) == (
            f"the endpoint failed the model call (Error code: 500 - engine restarting) at "
            f"AGENTGATE_OPENAI_BASE_URL={endpoint.url}: the server's log there says why"
        )
    else:
        assert "Run finished: the model said: Nothing to refund." in out


def test_a_429_with_retry_after_is_tried_again(run: Callable[..., tuple[int, str]]) -> None:
    """Review R59: a rate-limited model call (429, Retry-After) is tried again, and the run goes on."""

    def answer(n: int, request: dict[str, Any]) -> Reply:
        if n == 0:
            return 429, b'{"error": {"message": "too many requests"}}', {"retry-after-ms": "10"}
        search = ("web.search", json.dumps({"query": "kv cache"}))
        return _completion(None, [search]) if _first_turn(request) else _completion("Searched.")

    with Endpoint(answer) as endpoint:
        status, out = run("research_team.py", endpoint)
    assert status == 0, out[-3000:]
    assert "Run finished: the model said: Searched." in out


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("TIMEOUT", "soon", "a number of seconds above 0, at most 86400 (a day)"),
        ("TIMEOUT", "0", "a number of seconds above 0, at most 86400 (a day)"),
        ("TIMEOUT", "-5", "a number of seconds above 0, at most 86400 (a day)"),
        ("TIMEOUT", "nan", "a number of seconds above 0, at most 86400 (a day)"),
        ("TIMEOUT", "inf", "a number of seconds above 0, at most 86400 (a day)"),
        (
            "TIMEOUT",
            "1e10",
            "a number of seconds above 0, at most 86400 (a day)",
        ),  # review R82: past the clocks
        ("TIMEOUT", "86401", "a number of seconds above 0, at most 86400 (a day)"),
        ("MAX_RETRIES", "-1", "a whole number from 0 to 100"),
        ("MAX_RETRIES", "1.5", "a whole number from 0 to 100"),
        ("MAX_RETRIES", "two", "a whole number from 0 to 100"),
    ],
)
def test_a_timeout_or_retries_setting_that_is_no_such_number_ends_with_one_line_and_status_2(
    setting: str, value: str, says: str, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R59: AGENTGATE_OPENAI_TIMEOUT and _MAX_RETRIES are checked: one line, status 2, no call made."""
    with Endpoint(lambda n, request: _completion("unused")) as endpoint:
        status, out = run("support_agent.py", endpoint, **{setting: value})
    assert status == 2, out[-3000:]
    assert out.splitlines()[-1] == f"AGENTGATE_OPENAI_{setting}={value!r} is not {says}"
    assert not endpoint.requests


def test_a_timeout_of_a_day_is_taken(run: Callable[..., tuple[int, str]]) -> None:
    """Review R82: the longest timeout the examples take, 86400 s (a day), runs (1e10, past what
    the platform's clocks hold, is refused above)."""
    with Endpoint(lambda n, request: _completion("Nothing to refund.")) as endpoint:
        status, out = run("support_agent.py", endpoint, TIMEOUT="86400")
    assert status == 0, out[-3000:]
    assert "timeout 86400 s" in _unwrapped(out) and "Nothing to refund." in out, out[-3000:]


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1\r", "127.0.0.1:8000/v1"])
def test_a_base_url_that_is_no_http_url_ends_with_one_line_and_status_2(
    url: str, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R59: a base URL the examples cannot use ended them with status 1, the status of a failed model call."""
    status, out = run("support_agent.py", SimpleNamespace(url=url))
    assert status == 2, out[-3000:]
    assert out.splitlines()[-1].startswith(f"AGENTGATE_OPENAI_BASE_URL={url!r} is not an http(s) URL ")


# --- 2. arguments that are JSON but no object; an answer with no choice ------------------------------


@pytest.mark.parametrize("arguments", ["[1, 2]", '"x"', "40", "true"])
def test_arguments_that_are_json_but_no_object_are_reported_as_such_and_the_run_goes_on(
    arguments: str, tmp_path: Path, run: Callable[..., tuple[int, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: tool-call arguments that are JSON but no object ([1, 2], "x") stopped the run as EndpointFailed (ValidationError)."""

    def answer(n: int, request: dict[str, Any]) -> Reply:
        if _first_turn(request):
            return _completion(None, [_refund(arguments), REFUND_40])
        return _completion("Refunded what I could.")

    with Endpoint(answer) as endpoint:
        status, out = run("support_agent.py", endpoint)
    assert status == 0, out[-3000:]
    assert "Run finished: the model said: Refunded what I could." in out
    assert (
        "the model asked for 1 tool call(s) whose arguments are no JSON object, refused, not run: "
        f"payments.refund {arguments}"
    ) in _unwrapped(out)
    # the call beside it was decided and ran; the other reached no decision
    entries = _log(tmp_path / "support_agent" / "agentgate.db", capsys)
    refunds = [e for e in entries if e["resource"] == "tool:payments.refund"]
    # the other is recorded refused, without its arguments (review R68)
    assert [(e["kind"], e["status"]) for e in refunds] == [("deny", None), ("allow", None), ("outcome", "ok")]
    assert "args" not in refunds[0] or not refunds[0]["args"], refunds[0]
    assert refunds[1]["args"] == {"order_id": "O-1", "amount": 40, "currency": "EUR"}


@pytest.mark.parametrize("name", ["support_agent.py", "research_team.py"])
def test_an_answer_with_no_choice_stops_the_run_with_a_clear_line(
    name: str, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R59: an answer whose choices are empty ended the example with an IndexError traceback."""
    empty = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": SERVED, "choices": []}
    with Endpoint(lambda n, request: (200, json.dumps(empty).encode())) as endpoint:
        status, out = run(name, endpoint)
    assert status == 1, out[-3000:]
    assert _stopped(out) == (
        f"the endpoint answered no message (its choices are empty) at AGENTGATE_OPENAI_BASE_URL={endpoint.url}: "
        "the server's log there says why"
    )
    assert "VERIFIES" in out


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({"choices": None}, "the endpoint answered no message (its choices are null)"),
        (
            {"error": {"message": "prompt too long", "code": 400}},
            "the endpoint failed the model call (its answer is an error: prompt too long)",
        ),
    ],
)
def test_an_answer_with_null_choices_or_an_error_says_so_in_its_own_words(
    answer: dict[str, Any], says: str, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R59: choices null, or an error object answered with status 200, stopped the run with LangChain's TypeError or a dict's repr."""
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": SERVED, **answer}
    with Endpoint(lambda n, request: (200, json.dumps(body).encode())) as endpoint:
        status, out = run("support_agent.py", endpoint)
    assert status == 1, out[-3000:]
    assert (
        _stopped(out)
        == f"{says} at AGENTGATE_OPENAI_BASE_URL={endpoint.url}: the server's log there says why"
    )


@pytest.mark.parametrize(
    ("arguments", "decided"),
    [
        ({"order_id": "O-1", "amount": 40, "currency": "EUR"}, True),  # the object itself: read as its JSON
        ([1, 2], False),
        (40, False),
    ],
)
def test_arguments_sent_as_json_rather_than_as_a_string_of_it_stop_no_run(
    arguments: Any,
    decided: bool,
    tmp_path: Path,
    run: Callable[..., tuple[int, str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R59: tool-call arguments sent as JSON, not as a string of JSON, stopped the run as EndpointFailed (ValidationError)."""

    def answer(n: int, request: dict[str, Any]) -> Reply:
        if not _first_turn(request):
            return _completion("Done.")
        status, body = _completion(None, [_refund("{}")])
        sent = json.loads(body)
        sent["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = arguments
        return status, json.dumps(sent).encode()

    with Endpoint(answer) as endpoint:
        status, out = run("support_agent.py", endpoint)
    assert status == 0, out[-3000:]
    entries = _log(tmp_path / "support_agent" / "agentgate.db", capsys)
    refunds = [e["args"] for e in entries if e["resource"] == "tool:payments.refund" and e["kind"] == "allow"]
    if decided:
        assert refunds == [arguments]
        assert "Run finished: the model said: Done." in out
    else:  # an answer holding only such a call ends the run
        assert not refunds
        assert "Run finished: the model said: (no text)" in out
        assert (
            f"whose arguments are no JSON object, refused, not run: payments.refund {json.dumps(arguments)}"
            in _unwrapped(out)
        )


# --- 3. the order of what the run prints ----------------------------------------------------------


@pytest.mark.parametrize("name", ["support_agent.py", "research_team.py"])
def test_the_endpoint_is_named_before_what_happened_and_how_the_run_ended(
    name: str, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R59: "Model calls served by URL" was printed after "Run stopped: cannot reach URL"."""
    with Endpoint(lambda n, request: (500, b'{"error": {"message": "no GPU"}}')) as endpoint:
        status, out = run(name, endpoint, MAX_RETRIES="0")
    assert status == 1, out[-3000:]
    lines = _unwrapped(out).splitlines()
    served = lines.index(
        f"Model calls served by {endpoint.url} (model {SERVED!r}, timeout 60 s, max retries 0)"
    )
    stopped = next(i for i, line in enumerate(lines) if line.startswith("Run stopped: "))
    assert lines[0].startswith("agentgate demo: ") and served == 1
    decisions = next(i for i, line in enumerate(lines) if line.startswith("Decisions per agent"))
    assert served < stopped < decisions


# --- 5. a cut answer ------------------------------------------------------------------------------


def test_an_answer_cut_at_the_token_limit_says_so(run: Callable[..., tuple[int, str]]) -> None:
    """Review R59: an answer cut at the endpoint's token limit (finish_reason length) read as a model that chose to stop."""
    cut = _refund('{"order_id": "O-1", "amount": 4')
    status, body = _completion(None, [cut])
    answer = json.loads(body)
    answer["choices"][0]["finish_reason"] = "length"
    with Endpoint(lambda n, request: (status, json.dumps(answer).encode())) as endpoint:
        exit_status, out = run("support_agent.py", endpoint)
    assert exit_status == 0, out[-3000:]
    assert "the endpoint cut the model's last answer at its token limit (finish_reason length)" in out
    assert "1 tool call(s) whose arguments are no JSON object" in out


@pytest.fixture(autouse=True)
def _no_endpoint_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sets the timeout and retries it needs; none come from the environment it ran in."""
    for setting in ("TIMEOUT", "MAX_RETRIES", "API_KEY"):
        monkeypatch.delenv(f"AGENTGATE_OPENAI_{setting}", raising=False)
    yield
