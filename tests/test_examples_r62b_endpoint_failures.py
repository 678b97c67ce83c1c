"""Review R62: the examples against an OpenAI-compatible endpoint that fails, each way it can
(nobody listening, no answer in time, a refused key, no API at the URL, a model it does not
serve, an error status, garbage, an answer with no choice): the run stops with one message naming
the endpoint (``AGENTGATE_OPENAI_BASE_URL=...``) and what to check, the server's words cut short,
status 1, no traceback, and every line printed fits in the examples' 100 columns (the message
wrapped, its lines after the first indented). The endpoint is agentgate's simulator (real HTTP on 127.0.0.1) or, for an
answer it cannot give, a loopback server."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _examples import EXAMPLES, run_example
from test_examples_r58_endpoint import _completion
from test_examples_r59_endpoint import Endpoint

from agentgate.sim import SimServer

SERVED = "meta-llama/Llama-3.1-8B-Instruct"  # the model docs/quickstart.md names
KEY = "sim-key-r62b"
WIDTH = 100


@pytest.fixture
def sim() -> Iterator[SimServer]:
    """A simulator of its own for each test. Only support_agent.py runs against it here
    (research_team.py runs against the loopback server); both run against it, twice in one
    process, in tests/test_examples_r63_rerun.py."""
    with SimServer(model_name=SERVED, time_scale=0.01) as server:
        yield server


@pytest.fixture
def keyed() -> Iterator[SimServer]:
    with SimServer(model_name=SERVED, time_scale=0.01, api_key=KEY) as server:
        yield server


def _run(
    name: str,
    base_url: str,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    **settings: str,
) -> tuple[int, str]:
    """``python examples/NAME`` against ``base_url``, run from ``workdir`` as `make demo` runs it
    from the checkout (in this process: the imports are made once), no retry: its exit status and
    what it printed."""
    for setting in ("TIMEOUT", "API_KEY"):
        monkeypatch.delenv(f"AGENTGATE_OPENAI_{setting}", raising=False)
    env = {"BASE_URL": base_url, "MODEL": SERVED, "MAX_RETRIES": "0", **settings}
    for setting, value in env.items():
        monkeypatch.setenv(f"AGENTGATE_OPENAI_{setting}", value)
    monkeypatch.delenv("AGENTGATE_DEMO_DIR", raising=False)
    monkeypatch.chdir(workdir)
    status, out, err = run_example(EXAMPLES / name, capsys)
    return status, out + err


def _stopped(out: str) -> str:
    """The one ``Run stopped:`` message, its wrapped lines joined."""
    lines = out.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Run stopped: ")]
    assert len(starts) == 1, out[-3000:]
    message = [lines[starts[0]].removeprefix("Run stopped: ")]
    for line in lines[starts[0] + 1 :]:
        if not line.startswith("  "):
            break
        message.append(line.strip())
    return " ".join(message)


def _fits(out: str) -> None:
    wide = [f"{len(line)}: {line}" for line in out.splitlines() if len(line) > WIDTH]
    assert not wide, "\n".join(wide)


def _free_port_url() -> str:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{taken.getsockname()[1]}/v1"


def _stops_naming(status: int, out: str, base_url: str, check: str) -> str:
    assert status == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    message = _stopped(out)
    assert f"AGENTGATE_OPENAI_BASE_URL={base_url}" in message, message
    assert check in message, message
    assert "VERIFIES" in out
    _fits(out)
    return message


@pytest.mark.parametrize("name", ["support_agent.py", "research_team.py"])
def test_an_endpoint_nobody_listens_at(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: connection refused stops the run naming the URL and asking whether a server
    runs there, on lines that fit in 100 columns (the message was one line of 130)."""
    url = _free_port_url()
    status, out = _run(name, url, tmp_path, monkeypatch, capsys)
    _stops_naming(status, out, url, "is the server running there?")


def test_an_endpoint_that_does_not_answer_in_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: no answer within AGENTGATE_OPENAI_TIMEOUT stops the run naming the URL and the
    setting to raise, on lines that fit in 100 columns (the message was one line of 220)."""
    with Endpoint(lambda n, request: None) as endpoint:
        status, out = _run("support_agent.py", endpoint.url, tmp_path, monkeypatch, capsys, TIMEOUT="0.2")
    _stops_naming(status, out, endpoint.url, "needs a larger AGENTGATE_OPENAI_TIMEOUT")


def test_a_key_the_endpoint_refuses(
    keyed: SimServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R62: a 401 (the simulator started with an API key, the example sent another) said
    "the endpoint refused the request" without naming which endpoint."""
    url = keyed.url + "/v1"
    status, out = _run("support_agent.py", url, tmp_path, monkeypatch, capsys, API_KEY="sk-wrong")
    message = _stops_naming(status, out, url, "set AGENTGATE_OPENAI_API_KEY to a key it accepts")
    assert message.startswith("the endpoint refused the request (Error code: 401 - ")
    assert "sk-wrong" not in out and KEY not in out


def test_a_url_with_no_api_under_it(
    sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: a 404 for the whole API (the base URL without /v1) names the URL and the one
    where the endpoint lists its models."""
    status, out = _run("support_agent.py", sim.url, tmp_path, monkeypatch, capsys)
    _stops_naming(status, out, sim.url, f"set AGENTGATE_OPENAI_BASE_URL={sim.url}/v1")


def test_a_model_the_endpoint_does_not_serve(
    sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: a 404 for the model named the models the endpoint serves but not the endpoint."""
    url = sim.url + "/v1"
    status, out = _run("support_agent.py", url, tmp_path, monkeypatch, capsys, MODEL="llama-3.1-70b")
    message = _stops_naming(status, out, url, f"set AGENTGATE_OPENAI_MODEL to one it serves: {SERVED}")
    assert message.startswith("the endpoint does not serve AGENTGATE_OPENAI_MODEL='llama-3.1-70b' ")


@pytest.mark.parametrize("fault", ["error", "garbage"])
def test_an_error_status_or_garbage(
    fault: Any,
    sim: SimServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R62: a 500 (the simulator's ``fault = "error"``) said "the endpoint failed the model
    call (Error code: 500 - simulated failure)", naming no endpoint and nothing to check."""
    url = sim.url + "/v1"
    sim.fault = fault
    try:
        status, out = _run("support_agent.py", url, tmp_path, monkeypatch, capsys)
    finally:
        sim.fault = "none"
    check = "the server's log there says why" if fault == "error" else "is an OpenAI-compatible server there?"
    _stops_naming(status, out, url, check)


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({"choices": []}, "answered no message (its choices are empty)"),
        ({"choices": None}, "answered no message (its choices are null)"),
        ({"error": {"message": "prompt too long"}}, "its answer is an error: prompt too long"),
    ],
)
def test_an_answer_with_no_message(
    answer: dict[str, Any],
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R62: an answer with no choice, or an error object answered with status 200, named
    no endpoint."""
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": SERVED, **answer}
    with Endpoint(lambda n, request: (200, json.dumps(body).encode())) as endpoint:
        status, out = _run("support_agent.py", endpoint.url, tmp_path, monkeypatch, capsys)
    message = _stops_naming(status, out, endpoint.url, "the server's log there says why")
    assert says in message


def test_an_error_of_many_lines_is_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: a 500 whose error message is many lines (an engine's stack, 5,000 characters)
    went whole into the message, each of its lines a line of the output; it is one message, the
    server's words cut short."""
    said = "engine failed:\n  in step 1\n  in step 2\n" + "x" * 5000
    error = json.dumps({"error": {"message": said, "type": "server_error"}}).encode()
    with Endpoint(lambda n, request: (500, error)) as endpoint:
        status, out = _run("support_agent.py", endpoint.url, tmp_path, monkeypatch, capsys)
    message = _stops_naming(status, out, endpoint.url, "the server's log there says why")
    assert "engine failed: in step 1 in step 2 xxx" in message and len(message) < 600, message


def _ends_well(out: str, url: str) -> None:
    _fits(out)
    lines = out.splitlines()
    assert lines[1].startswith(f"Model calls served by {url} ")
    described = " ".join([lines[1], *(line.strip() for line in lines[2:4] if line.startswith("  "))])
    assert described.endswith(f"(model {SERVED!r}, timeout 60 s, max retries 0)"), described
    assert any(line.startswith("Run finished: ") for line in lines)


def test_a_run_that_ends_well_fits_in_100_columns(
    sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: in endpoint mode the line naming the endpoint ("Model calls served by ...")
    was 119 columns with the model docs/quickstart.md names; every line now fits in 100, the
    endpoint still named before the run's end (support_agent.py against the simulator;
    research_team.py against a loopback server, below)."""
    url = sim.url + "/v1"
    status, out = _run("support_agent.py", url, tmp_path, monkeypatch, capsys)
    assert status == 0, out[-3000:]
    _ends_well(out, url)


def test_a_research_team_run_that_ends_well_fits_in_100_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: as above, for research_team.py; its model asks for a tool call whose
    arguments are no JSON object, listed on ``Run finished:`` (a line that had no bound)."""

    def answer(n: int, request: dict[str, Any]) -> Any:
        if request["messages"][-1]["role"] == "user":
            return _completion(None, [("web.search", '["' + "kv cache " * 20 + '"]')])
        return _completion("Done.")

    with Endpoint(answer) as endpoint:
        status, out = _run("research_team.py", endpoint.url, tmp_path, monkeypatch, capsys)
    assert status == 0, out[-3000:]
    _ends_well(out, endpoint.url)
    assert "whose arguments are no JSON object" in out
