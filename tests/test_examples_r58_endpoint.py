"""The examples against a loopback OpenAI-compatible endpoint whose model was not scripted for them
(review R58): it asks for tools the example never planned, arguments the grant refuses, arguments
that are no JSON, or it fails (an error status, an answer that is no JSON, a model or a path it
does not serve). Each run ends with a clear message, never a traceback, and what the summary
prints is what the audit log holds (read back with ``agentgate audit show --json``).

The endpoint is a small server in this module (``Endpoint``), not agentgate's simulator, so that a
test chooses each answer; the examples run as scripts run (``runpy``), in the test's process.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from _examples import EXAMPLES, run_example

from agentgate.cli.main import main as cli_main

SERVED = "loopback-model"

Answer = Callable[[dict[str, Any]], tuple[int, bytes]]


class Endpoint:
    """``/v1/chat/completions`` and ``/v1/models`` on 127.0.0.1, each chat answer from ``answer``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.send_header("x-should-retry", "false")  # the client's retries would only add time
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path != "/v1/models":
                    self._send(404, b'{"detail": "Not Found"}')
                    return
                self._send(200, json.dumps({"object": "list", "data": [{"id": SERVED}]}).encode())

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"detail": "Not Found"}')
                    return
                if request.get("model") != SERVED:
                    message = f"The model `{request.get('model')}` does not exist."
                    self._send(404, json.dumps({"error": {"message": message, "code": 404}}).encode())
                    return
                endpoint.requests.append(request)
                self._send(*endpoint.answer(request))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Endpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _completion(content: str | None, calls: Sequence[tuple[str, str]] = ()) -> tuple[int, bytes]:
    """A chat completion answering ``content`` and asking for ``calls`` (name, arguments as sent)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call-{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": n, "arguments": a},
            }
            for n, a in calls
        ]
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": SERVED,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47},
    }
    return 200, json.dumps(body).encode()


def wayward(request: dict[str, Any]) -> tuple[int, bytes]:
    """A model with its own ideas: at each agent's first turn it asks for a tool the agent does
    not have, a call the grant refuses, one that needs an approval, one whose arguments are cut
    JSON, and one the grant allows; once it has the tools' answers, it answers in text alone."""
    offered = {tool["function"]["name"] for tool in request.get("tools", [])}
    if request["messages"][-1]["role"] != "user":
        return _completion("Done, as far as I was allowed.")
    if "payments.refund" in offered:
        refund = "payments.refund"
        return _completion(
            None,
            [
                (refund, json.dumps({"order_id": "O-1", "amount": 2500, "currency": "EUR"})),
                (refund, json.dumps({"order_id": "O-2", "amount": 800, "currency": "EUR"})),
                (refund, json.dumps({"order_id": "O-3", "amount": 40, "currency": "EUR"})),
                ("shell.exec", json.dumps({"cmd": "cat /etc/shadow"})),
                (refund, '{"order_id": "O-4", "amount": 9'),
            ],
        )
    if "ask_researcher" in offered:
        return _completion(
            "Let me delegate.",
            [
                ("ask_researcher", json.dumps({"task": "read arXiv on routing"})),
                ("web.search", json.dumps({"query": "everything", "max_results": 500})),
                ("web.search", json.dumps({"query": "kv cache"})),
                ("docs.publish", json.dumps({"path": "reports/final/r.md"})),
                ("shell.exec", json.dumps({"cmd": "id"})),
                ("docs.write", '{"path": "reports/x.md", "content": '),
            ],
        )
    if "web.fetch" in offered:
        return _completion(
            None,
            [
                ("web.fetch", json.dumps({"url": "https://arxiv.org/abs/2401.01117"})),
                ("web.fetch", json.dumps({"url": "https://evil.example/x"})),
                ("docs.publish", json.dumps({"path": "reports/final/leak.md"})),
            ],
        )
    return _completion("I have no tool for that.")


def _run(
    name: str,
    base_url: str,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str]:
    """Run the example as ``python examples/NAME`` runs it (in this process: the imports are
    made once), against ``base_url``: its exit status and what it printed. An exception it lets
    out, which a person would see as a traceback, fails the test."""
    monkeypatch.setenv("AGENTGATE_OPENAI_BASE_URL", base_url)
    monkeypatch.setenv("AGENTGATE_OPENAI_MODEL", SERVED)
    monkeypatch.setenv("AGENTGATE_DEMO_DIR", str(workdir))
    status, out, err = run_example(EXAMPLES / name, capsys)
    return status, out + err


def _log(store: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The audit log as ``agentgate audit show --json`` prints it."""
    assert cli_main(["audit", "show", "--json", "--store", str(store)]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _names(workdir: Path) -> dict[str, str]:
    """did:key -> name, from the example's fresh ``keys/NAME.pub``."""
    return {path.read_text().strip(): path.stem for path in (workdir / "keys").glob("*.pub")}


def _summary_agrees_with_log(
    out: str, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> list[dict[str, Any]]:
    """Each figure of the summary, recomputed from the audit log the run wrote."""
    entries = _log(workdir / "agentgate.db", capsys)
    names = _names(workdir)
    decided: Counter[tuple[str, str]] = Counter()
    for e in entries:
        if e["kind"] in ("allow", "deny", "approval_required") and not e["resource"].startswith("agent:"):
            kind = "model" if e["resource"].startswith("model:") else e["kind"]
            decided[(names[e["principal"]], kind)] += 1
    printed = re.findall(
        r"^  (\S+)\s+(\d+) allowed\s+(\d+) denied\s+(\d+) approval asked;\s+(\d+) model calls$", out, re.M
    )
    assert printed, out
    assert {who for who, *_ in printed} == {who for who, _ in decided}
    for who, allowed, denied, asked, models in printed:
        assert (int(allowed), int(denied), int(asked), int(models)) == (
            decided[(who, "allow")],
            decided[(who, "deny")],
            decided[(who, "approval_required")],
            decided[(who, "model")],
        ), who
    refused = re.findall(
        r"^  #(\d+)\s", out.split("Refused, and why:")[1].split("Approved by a human:")[0], re.M
    )
    assert sorted(map(int, refused)) == [e["index"] for e in entries if e["kind"] == "deny"]
    approved = re.findall(r"^  #(\d+) .* approved by (\S+)$", out, re.M)
    assert [(int(i), who) for i, who in approved] == [
        (e["index"], names[e["approver"]]) for e in entries if e["kind"] == "allow" and e["approver"]
    ]
    section = out.partition("Allowed, but did not end ok:")[2].partition("Spent")[0]
    failed = re.findall(r"^  #(\d+) .* (\w+): .*$", section, re.M)
    assert [(int(i), status) for i, status in failed] == [
        (e["index"], e["status"])
        for e in entries
        if e["kind"] == "outcome" and e["status"] not in (None, "ok")
    ]
    # Every grant of this run is the root or a child of it: the root's spending is all of it.
    spent = re.search(r"^  grant \w+ of (\S+)\s+(\d+) of", out, re.M)
    assert spent is not None
    assert int(spent.group(2)) == sum(e["budget_delta"] for e in entries if e["kind"] == "outcome")
    assert re.search(rf"Audit log: {len(entries)} entries, signed checkpoint, VERIFIES", out)
    return entries


@pytest.fixture
def wayward_endpoint() -> Iterator[Endpoint]:
    with Endpoint(wayward) as endpoint:
        yield endpoint


def test_support_agent_under_a_wayward_model_ends_cleanly_and_its_summary_is_the_log(
    wayward_endpoint: Endpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R58: an unscripted model's unknown tool, refused and cut calls end in a summary the log bears out."""
    status, out = _run("support_agent.py", wayward_endpoint.url + "/v1", tmp_path, monkeypatch, capsys)
    assert status == 0, out[-3000:]
    entries = _summary_agrees_with_log(out, tmp_path / "support_agent", capsys)
    refunds = [e for e in entries if e["resource"] == "tool:payments.refund"]
    assert {
        (e["kind"], e["args"]["amount"])
        for e in refunds
        if e["kind"] in ("allow", "deny", "approval_required") and e.get("args")
    } == {
        ("deny", 2500),
        ("approval_required", 800),
        ("allow", 800),
        ("allow", 40),
    }
    assert any(e["kind"] == "deny" and e["resource"] == "tool:shell.exec" for e in entries)
    # The call whose arguments are cut JSON reached no tool, and the run says so; it is recorded
    # refused, without its arguments (review R68: before, it was in no entry).
    assert not any((e.get("args") or {}).get("order_id") == "O-4" for e in entries)
    assert [e["kind"] for e in refunds if not e.get("args") and e["kind"] != "outcome"] == ["deny"]
    assert "1 tool call(s) whose arguments are no JSON object, refused, not run" in out


def test_research_team_under_a_wayward_model_ends_cleanly_and_its_summary_is_the_log(
    wayward_endpoint: Endpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R58: the team under an unscripted model: delegation, denials and an approval, as the log holds them."""
    # a base URL with a trailing slash is the same URL
    status, out = _run("research_team.py", wayward_endpoint.url + "/v1/", tmp_path, monkeypatch, capsys)
    assert status == 0, out[-3000:]
    entries = _summary_agrees_with_log(out, tmp_path / "research_team", capsys)
    denied = {(e["resource"], json.dumps(e["args"], sort_keys=True)) for e in entries if e["kind"] == "deny"}
    assert ("tool:web.fetch", '{"url": "https://evil.example/x"}') in denied
    assert any(resource == "tool:shell.exec" for resource, _ in denied)
    assert any(resource == "tool:docs.publish" and "leak" in args for resource, args in denied)
    assert "the model asked for 1 tool call(s) whose arguments are no JSON object" in out


@pytest.mark.parametrize(
    ("name", "status", "body", "says"),
    [
        ("research_team.py", 500, b'{"error": {"message": "CUDA out of memory"}}', "CUDA out of memory"),
        ("support_agent.py", 200, b"<html>502 Bad Gateway</html>", "is not an OpenAI chat completion"),
    ],
)
def test_an_endpoint_that_fails_stops_the_run_with_a_clear_message_and_a_true_summary(
    name: str,
    status: int,
    body: bytes,
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R58: an endpoint answering 500 or no JSON ended the example with a traceback."""
    with Endpoint(lambda request: (status, body)) as endpoint:
        exit_status, out = _run(name, endpoint.url + "/v1", tmp_path, monkeypatch, capsys)
    assert exit_status == 1, out[-3000:]
    stopped = re.search(r"^Run stopped: (.*)$", out, re.M)
    assert stopped is not None and says in stopped.group(1), out
    assert "VERIFIES" in out
    if name == "research_team.py":
        entries = _summary_agrees_with_log(out, tmp_path / "research_team", capsys)
        assert [e["kind"] for e in entries if e["resource"].startswith("model:")] == ["allow", "outcome"]


def test_a_sub_agent_whose_model_call_failed_is_named_in_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R58: a sub-agent's failed model call reached only the supervisor's model; the summary said nothing of it."""

    def answer(request: dict[str, Any]) -> tuple[int, bytes]:
        offered = {tool["function"]["name"] for tool in request.get("tools", [])}
        if "ask_researcher" not in offered:  # the researcher's model
            return 500, b'{"error": {"message": "researcher backend died"}}'
        if request["messages"][-1]["role"] == "user":
            return _completion(None, [("ask_researcher", json.dumps({"task": "read arXiv on routing"}))])
        return _completion("The researcher could not help.")

    with Endpoint(answer) as endpoint:
        status, out = _run("research_team.py", endpoint.url + "/v1", tmp_path, monkeypatch, capsys)
    assert status == 0, out[-3000:]  # the supervisor's run ended; its sub-agent's did not
    entries = _summary_agrees_with_log(out, tmp_path / "research_team", capsys)
    assert [e["status"] for e in entries if e["kind"] == "outcome" and e["status"] != "ok"] == ["error"]
    assert re.search(r"^  #\d+\s+researcher\s+model:llama-3.1-8b\s+error: EndpointFailed$", out, re.M), out


# --- the environment variables, read by examples/_common.py --------------------------------------


@pytest.fixture
def common(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import _common

    return _common


def _first_answer(common: Any, monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    """The endpoint's first answer through the examples' chat model, or the message it failed with."""
    for name in ("AGENTGATE_OPENAI_BASE_URL", "AGENTGATE_OPENAI_MODEL", "AGENTGATE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    model = common.chat_model([], name="llama-3.1-8b")
    try:
        return str(model.invoke("hello").content)
    except common.EndpointFailed as failure:
        return f"failed: {failure}"


@pytest.fixture
def plain_endpoint() -> Iterator[Endpoint]:
    with Endpoint(lambda request: _completion("hello yourself")) as endpoint:
        yield endpoint


def test_an_empty_api_key_is_no_key(
    common: Any, plain_endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R58: AGENTGATE_OPENAI_API_KEY set but empty ended the example with the client's "Missing credentials"."""
    answer = _first_answer(
        common,
        monkeypatch,
        AGENTGATE_OPENAI_BASE_URL=plain_endpoint.url + "/v1",
        AGENTGATE_OPENAI_MODEL=SERVED,
        AGENTGATE_OPENAI_API_KEY="",
    )
    assert answer == "hello yourself"


def test_a_base_url_without_v1_says_where_the_api_is(
    common: Any, plain_endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R58: a base URL without /v1, or with /chat/completions, ended the example in a 404 traceback."""
    answer = _first_answer(
        common, monkeypatch, AGENTGATE_OPENAI_BASE_URL=plain_endpoint.url, AGENTGATE_OPENAI_MODEL=SERVED
    )
    assert answer.startswith(
        f"failed: no OpenAI-compatible API at AGENTGATE_OPENAI_BASE_URL={plain_endpoint.url} "
    )
    hint = f"set AGENTGATE_OPENAI_BASE_URL={plain_endpoint.url}/v1, where the endpoint lists its models"
    assert answer.endswith(hint)
    pasted = plain_endpoint.url + "/v1/chat/completions"  # the whole endpoint's URL
    answer = _first_answer(
        common, monkeypatch, AGENTGATE_OPENAI_BASE_URL=pasted, AGENTGATE_OPENAI_MODEL=SERVED
    )
    assert answer.endswith(hint), answer


def test_a_model_the_endpoint_does_not_serve_names_those_it_serves(
    common: Any, plain_endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R58: a model name the endpoint does not serve ended the example with a 404 traceback."""
    for model in ("Llama-3.1-8B", ""):  # empty: the example's own name, llama-3.1-8b
        answer = _first_answer(
            common,
            monkeypatch,
            AGENTGATE_OPENAI_BASE_URL=plain_endpoint.url + "/v1",
            AGENTGATE_OPENAI_MODEL=model,
        )
        assert answer.startswith(
            f"failed: the endpoint does not serve AGENTGATE_OPENAI_MODEL={model or 'llama-3.1-8b'!r} "
        )
        assert answer.endswith(f"it serves: {SERVED}")


def test_an_endpoint_nobody_listens_at_is_named(common: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review R58: an endpoint that no server listens at ended the example with a connection-error traceback."""
    with Endpoint(lambda request: _completion("unused")) as endpoint:
        url = endpoint.url + "/v1"
    answer = _first_answer(common, monkeypatch, AGENTGATE_OPENAI_BASE_URL=url, AGENTGATE_OPENAI_MODEL=SERVED)
    assert answer.startswith(f"failed: cannot reach the endpoint AGENTGATE_OPENAI_BASE_URL={url} ")


def test_a_key_the_endpoint_refuses_says_which_variable_to_set(
    common: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R58: an endpoint refusing the API key (401) ended the example with an authentication traceback."""
    refused = (401, b'{"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}')
    with Endpoint(lambda request: refused) as endpoint:
        answer = _first_answer(
            common,
            monkeypatch,
            AGENTGATE_OPENAI_BASE_URL=endpoint.url + "/v1",
            AGENTGATE_OPENAI_MODEL=SERVED,
            AGENTGATE_OPENAI_API_KEY="sk-wrong",
        )
    assert answer.startswith("failed: the endpoint refused the request (Error code: 401 - ")
    assert answer.endswith("set AGENTGATE_OPENAI_API_KEY to a key it accepts")
    assert "sk-wrong" not in answer
