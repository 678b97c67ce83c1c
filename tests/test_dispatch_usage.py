"""Garbage from a backend is a typed error (``BackendFailed``), never a crash, a 500 or a bill.

Every field the dispatcher, the gateway and ``DispatchedChatModel`` read from a backend's answer
(usage counts, ``finish_reason``, ``choices``, stream events, published metrics, tool calls) is
checked where it is parsed. A real HTTP backend on 127.0.0.1 answers whatever a test sets; the
gateway runs over real HTTP with a real SQLite store.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _http
import httpx
import pytest
from langchain_core.messages import HumanMessage
from test_gateway import MODEL, NAMES, _policy_text

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import MAX_USAGE_TOKENS, BackendClient, Timeouts, Usage
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers
from agentgate.dispatch.inventory import MAX_KV_CAPACITY_TOKENS
from agentgate.dispatch.metrics import load_from_text
from agentgate.dispatch.router import Router
from agentgate.errors import BackendFailed, DispatchError, InventoryError
from agentgate.gate import Gate
from agentgate.integrations.langgraph import DispatchedChatModel
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

WAIT_S = 5.0


class EvilBackend:
    """A real HTTP server on 127.0.0.1 answering chat completions with whatever ``answer`` holds
    (a dict: a JSON answer; a list: the data lines of an SSE stream), and ``metrics`` on
    ``/metrics``."""

    def __init__(self) -> None:
        self.answer: object = {}
        self.metrics = ""
        evil = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                body = evil.metrics.encode() if self.path.endswith("/metrics") else b"ok"
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                answer = evil.answer
                if isinstance(answer, list):
                    body = "".join(f"data: {line}\n\n" for line in answer).encode()
                    kind = "text/event-stream"
                else:
                    body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                    kind = "application/json"
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def inventory(self, **extra: Any) -> Any:
        return inventory_from_mapping(
            {"backends": [{"name": "evil", "url": self.url, "engine": "openai", "models": [MODEL], **extra}]}
        )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(WAIT_S)


@pytest.fixture
def evil() -> Iterator[EvilBackend]:
    made = EvilBackend()
    yield made
    made.stop()


def _chat(usage: object = None, **choice: object) -> dict[str, object]:
    message = {"role": "assistant", "content": "hi"}
    return {
        "choices": [{"message": message, "finish_reason": "stop", **choice}],
        "usage": usage,
    }


def _delta(content: str = "hi", **choice: object) -> str:
    return json.dumps({"choices": [{"delta": {"content": content}, "finish_reason": None, **choice}]})


GOOD_USAGE = {"prompt_tokens": 3, "completion_tokens": 1}
BAD_USAGES = [
    pytest.param({"prompt_tokens": -50, "completion_tokens": 5}, id="negative-prompt"),
    pytest.param({"prompt_tokens": 3, "completion_tokens": -1}, id="negative-completion"),
    pytest.param({"prompt_tokens": 2.5, "completion_tokens": 1}, id="fraction"),
    pytest.param({"prompt_tokens": True, "completion_tokens": 1}, id="bool"),
    pytest.param({"prompt_tokens": "3", "completion_tokens": 1}, id="string"),
    pytest.param({"prompt_tokens": [3], "completion_tokens": 1}, id="list"),
    pytest.param({"prompt_tokens": 10**30, "completion_tokens": 1}, id="huge"),
    pytest.param({"prompt_tokens": MAX_USAGE_TOKENS + 1, "completion_tokens": 1}, id="over-max"),
    pytest.param(
        {"prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": -2}},
        id="negative-cached",
    ),
    pytest.param("lots", id="usage-a-string"),
    pytest.param([3, 1], id="usage-a-list"),
]


async def _client_chat(evil: EvilBackend) -> Any:
    async with _http.AsyncClient() as http_client:
        client = BackendClient(evil.inventory().backends[0], http_client, Timeouts(first_token_s=2))
        return await client.chat({"model": MODEL, "messages": [], "max_tokens": 4})


async def _client_stream(evil: EvilBackend) -> list[Any]:
    async with _http.AsyncClient() as http_client:
        client = BackendClient(evil.inventory().backends[0], http_client, Timeouts(first_token_s=2, idle_s=2))
        return [c async for c in client.stream({"model": MODEL, "messages": [], "max_tokens": 4})]


# --- usage: non-negative integer token counts, or BackendFailed --------------------------------------


def test_a_usage_holds_only_non_negative_integer_counts() -> None:
    """``Usage`` cannot be built with a count a budget or a Prometheus counter would refuse."""
    assert Usage(3, 1, 2) == Usage(prompt_tokens=3, completion_tokens=1, cached_tokens=2)
    for bad in (-1, True, 2.0, "3"):
        with pytest.raises(ValueError, match="non-negative integer"):
            Usage(bad, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("usage", BAD_USAGES)
async def test_an_answer_whose_usage_is_not_token_counts_is_backend_failed(
    evil: EvilBackend, usage: object
) -> None:
    """A JSON answer whose usage holds anything but counts from 0 to MAX_USAGE_TOKENS is refused."""
    evil.answer = _chat(usage)
    with pytest.raises(BackendFailed, match="malformed chat completion"):
        await _client_chat(evil)


@pytest.mark.parametrize("usage", BAD_USAGES)
async def test_a_streamed_usage_that_is_not_token_counts_is_backend_failed(
    evil: EvilBackend, usage: object
) -> None:
    evil.answer = [_delta(), json.dumps({"choices": [], "usage": usage}), "[DONE]"]
    with pytest.raises(BackendFailed, match="malformed stream event"):
        await _client_stream(evil)


@pytest.mark.parametrize(
    "event",
    [
        '{"choices": [], "usage": {"prompt_tokens": 1e999, "completion_tokens": 1}}',
        '{"choices": [], "usage": {"prompt_tokens": Infinity, "completion_tokens": 1}}',
        '{"choices": [], "usage": {"prompt_tokens": NaN, "completion_tokens": 1}}',
        "[" * 200_000 + "]" * 200_000,  # nested past any recursion limit
    ],
    ids=["beyond-float-range", "infinity", "nan", "nested"],
)
async def test_a_streamed_event_beyond_float_range_or_nested_too_deeply_is_backend_failed(
    evil: EvilBackend, event: str
) -> None:
    """Review R2: ``1e999`` was read as infinity and ``int(inf)`` escaped as OverflowError."""
    evil.answer = [_delta(), event, "[DONE]"]
    with pytest.raises(BackendFailed, match="malformed stream event"):
        await _client_stream(evil)


async def test_good_usage_is_read_whole_and_absent_usage_is_none(evil: EvilBackend) -> None:
    """What must keep working: counts (integral floats too, as orjson reads integers past 64
    bits), cached tokens, ``null`` counts and details, no usage at all, vLLM's ``"usage": null``
    on every chunk but the last."""
    evil.answer = _chat(
        {"prompt_tokens": 7.0, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}
    )
    assert (await _client_chat(evil)).usage == Usage(7, 2, 4)
    evil.answer = _chat({"prompt_tokens": 5, "completion_tokens": None, "prompt_tokens_details": None})
    assert (await _client_chat(evil)).usage == Usage(5, 0, 0)
    evil.answer = _chat(None)
    assert (await _client_chat(evil)).usage == Usage()
    evil.answer = [
        json.dumps({"choices": [{"delta": {"content": "hi"}, "finish_reason": None}], "usage": None}),
        json.dumps({"choices": [], "usage": GOOD_USAGE}),
        "[DONE]",
    ]
    chunks = await _client_stream(evil)
    assert [c.content for c in chunks] == ["hi", ""]
    assert chunks[-1].usage == Usage(3, 1)


# --- other fields of the answer ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        _chat(GOOD_USAGE, finish_reason=["stop"]),
        _chat(GOOD_USAGE, finish_reason=7),
        {"choices": "hi", "usage": GOOD_USAGE},
        {"choices": [{"message": "hi"}], "usage": GOOD_USAGE},
        [1, 2, 3],
        b'{"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 1e999}}',
    ],
    ids=["finish-reason-list", "finish-reason-int", "choices-a-string", "message-a-string", "a-list", "inf"],
)
async def test_an_answer_with_fields_of_the_wrong_kind_is_backend_failed(
    evil: EvilBackend, answer: object
) -> None:
    evil.answer = answer
    with pytest.raises(BackendFailed, match="malformed chat completion"):
        await _client_chat(evil)


@pytest.mark.parametrize(
    "event",
    [
        _delta(finish_reason={"why": "stop"}),
        json.dumps({"choices": "abc"}),
        json.dumps({"choices": {"0": {}}}),
        json.dumps({"choices": [{"delta": "hi"}]}),
        json.dumps(["not", "an", "event"]),
    ],
    ids=["finish-reason-object", "choices-a-string", "choices-an-object", "delta-a-string", "a-list"],
)
async def test_a_stream_event_with_fields_of_the_wrong_kind_is_backend_failed(
    evil: EvilBackend, event: str
) -> None:
    evil.answer = [_delta(), event, "[DONE]"]
    with pytest.raises(BackendFailed, match="malformed stream event"):
        await _client_stream(evil)


# --- the gateway: a typed 502 and nothing charged, never a 500 -----------------------------------------


class GatewayOverEvil:
    def __init__(self, tmp_path: Path, evil: EvilBackend) -> None:
        keys = {name: SigningKey.generate() for name in NAMES}
        policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}), source="gateway.yaml")
        self.gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
        self.server = GatewayServer(Gateway(self.gate, evil.inventory()), port=0).start()
        self.agent = self.gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")

    def post(self, **extra: Any) -> httpx.Response:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **extra}
        return _http.post(
            f"{self.server.url}/chat/completions",
            content=json.dumps(body).encode(),
            headers={
                "content-type": "application/json",
                **invocation_headers(self.agent.key, self.agent.chain, body),
            },
            timeout=10,
        )

    def spent(self) -> int:
        self.gate.flush()
        return self.gate.budget_usage(self.agent)[self.agent.chain.root.id][0]

    def outcomes(self) -> list[str]:
        self.gate.flush()
        return [e.status for e in self.gate.audit.entries() if e.kind == "outcome"]

    def tokens_counted(self) -> dict[str, float]:
        text = _http.get(f"{self.server.url[: -len('/v1')]}/metrics", timeout=10).text
        return {
            kind: float(line.split()[-1])
            for line in text.splitlines()
            for kind in ("prompt", "completion")
            if line.startswith(f'agentgate_gateway_tokens_total{{kind="{kind}"}}')
        }

    def close(self) -> None:
        self.server.stop()
        self.gate.close()


@pytest.fixture
def gateway(tmp_path: Path, evil: EvilBackend) -> Iterator[GatewayOverEvil]:
    made = GatewayOverEvil(tmp_path, evil)
    yield made
    made.close()


@pytest.mark.parametrize(
    "usage",
    [{"prompt_tokens": -50, "completion_tokens": 5}, {"prompt_tokens": 3, "completion_tokens": -1}],
)
def test_negative_usage_from_a_backend_is_a_typed_error_charged_its_reservation_never_a_500(
    gateway: GatewayOverEvil, evil: EvilBackend, usage: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    """Review R2: the negative count reached a Prometheus counter (``inc(-50)`` raises) after the
    call was charged, and the caller got a 500. Now the answer is refused where it is parsed: a
    typed 502, the outcome audited as an error, the counters untouched. Review R68: the call ran,
    so it is charged its reservation (until then released: such a backend's calls were free)."""
    evil.answer = _chat(usage)
    answer = gateway.post()
    assert answer.status_code == 502, answer.text
    # Why is in the gateway's log; the caller gets a fixed message (review R4: no backend
    # names, addresses or bytes to remote callers).
    assert "malformed chat completion: usage" in caplog.text
    assert "malformed" not in answer.json()["error"]["message"]
    assert "charged its reservation" in answer.json()["error"]["message"]
    reserved = gateway.spent()
    assert reserved > 0
    assert gateway.outcomes() == ["error"]
    evil.answer = _chat(GOOD_USAGE)
    assert gateway.post().status_code == 200
    assert gateway.tokens_counted() == {"prompt": 3.0, "completion": 1.0}
    assert gateway.spent() == reserved + 4


def test_negative_streamed_usage_ends_the_stream_with_an_error_event_never_a_500(
    gateway: GatewayOverEvil, evil: EvilBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """The stream's usage comes after its output: the caller has the output, then an error event
    (as OpenAI's streams end on an error); the counters never see the negative count."""
    evil.answer = [
        _delta("hello"),
        json.dumps({"choices": [], "usage": {"prompt_tokens": -50, "completion_tokens": 5}}),
        "[DONE]",
    ]
    answer = gateway.post(stream=True)
    assert answer.status_code == 200, answer.text
    events = [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: {")]
    assert events[0]["choices"][0]["delta"]["content"] == "hello"
    assert events[-1]["error"]["code"] == "backend_failed"
    assert "malformed stream event" in caplog.text  # logged; the event's message is fixed (review R4)
    assert "malformed" not in events[-1]["error"]["message"]
    assert gateway.tokens_counted() == {}
    assert gateway.outcomes() == ["error"]


# --- published metrics: an absurd KV capacity is refused, routing goes on ------------------------------

METRICS = (
    "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
    "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.5\n"
)


def _cache_info(block_size: str, blocks: str) -> str:
    return (
        METRICS + "# TYPE vllm:cache_config_info gauge\n"
        f'vllm:cache_config_info{{block_size="{block_size}",num_gpu_blocks="{blocks}"}} 1\n'
    )


@pytest.mark.parametrize(
    ("block_size", "blocks"),
    [("16", "1" + "0" * 400), ("16", str(MAX_KV_CAPACITY_TOKENS // 16 + 1)), ("-16", "100"), ("-16", "-100")],
    ids=["400-digits", "just-over-max", "negative", "both-negative"],
)
def test_an_absurd_published_kv_capacity_is_backend_failed(block_size: str, blocks: str) -> None:
    with pytest.raises(BackendFailed, match="cache_config_info"):
        load_from_text(_cache_info(block_size, blocks), "vllm")


@pytest.mark.parametrize(
    ("block_size", "blocks", "capacity"),
    [("16", "27500", 16 * 27500), ("16", "None", None), ("16", "0", None), ("x", "9", None)],
)
def test_a_kv_capacity_not_yet_known_is_none(block_size: str, blocks: str, capacity: int | None) -> None:
    """vLLM publishes ``num_gpu_blocks="None"`` until it has profiled its memory: not an error."""
    assert load_from_text(_cache_info(block_size, blocks), "vllm").kv_capacity_tokens == capacity


@pytest.mark.parametrize("name", ["vllm:num_requests_running", "vllm:num_requests_waiting"])
def test_an_absurd_request_count_is_backend_failed(name: str) -> None:
    """A finite count of 1e300 requests would make the router's estimates infinite (or NaN)."""
    with pytest.raises(BackendFailed, match="requests, over"):
        load_from_text(METRICS.replace(f"{name} 0", f"{name} 1e300"), "vllm")


async def test_a_backend_publishing_an_absurd_kv_capacity_still_serves_calls(evil: EvilBackend) -> None:
    """Review R2: the 400-digit capacity reached ``kv_usage * capacity`` (OverflowError) in every
    routed call. Now its scrape fails, the router keeps to its own accounting, and calls go on."""
    evil.metrics = _cache_info("16", "1" + "0" * 400)
    evil.answer = _chat(GOOD_USAGE)
    inv = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": "evil",
                    "url": evil.url,
                    "engine": "vllm",
                    "models": [MODEL],
                    "metrics_url": evil.url + "/metrics",
                }
            ]
        }
    )
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with Dispatcher(inv, Router(inv), scrape_interval_s=0.05, health_interval_s=0.05) as d:
        with pytest.raises(BackendFailed, match="cache_config_info"):
            await d.clients["evil"].scrape(0.0)
        await asyncio.sleep(0.2)  # scrapes run (and fail) meanwhile
        result = await asyncio.wait_for(d.chat(body), WAIT_S)
    assert (result.content, result.usage) == ("hi", Usage(3, 1))


def test_a_declared_kv_capacity_of_hundreds_of_digits_is_refused_when_the_inventory_loads(
    evil: EvilBackend,
) -> None:
    """The inventory bounds ``kv_capacity_tokens`` at ``MAX_KV_CAPACITY_TOKENS`` (the router
    multiplies it by floats; a published capacity beyond it fails that backend's scrape)."""
    with pytest.raises(InventoryError, match="kv_capacity_tokens"):
        evil.inventory(kv_capacity_tokens=10**400, engine="vllm", metrics_url=evil.url + "/metrics")


# --- DispatchedChatModel: malformed tool calls are invalid tool calls ----------------------------------


@pytest.fixture
def gate(tmp_path: Path, evil: EvilBackend) -> Iterator[Gate]:
    made = Gate(parse_policy("version: 1\n", source="empty.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    inv = evil.inventory()
    made.attach_dispatcher(Dispatcher(inv, Router(inv)))
    yield made
    made.close()


def _with_tool_calls(evil: EvilBackend, tool_calls: object) -> None:
    evil.answer = {
        "choices": [
            {
                "message": {"role": "assistant", "content": "", "tool_calls": tool_calls},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": GOOD_USAGE,
    }


def _lookup(arguments: object, ident: object = "c1") -> dict[str, object]:
    return {"id": ident, "type": "function", "function": {"name": "lookup", "arguments": arguments}}


@pytest.mark.parametrize(
    ("raw", "name", "args", "error"),
    [
        (_lookup({"q": 1}), "lookup", '{"q":1}', "not a JSON string"),
        ("not-a-tool-call", None, '"not-a-tool-call"', "not an object"),
        (
            {"id": "c1", "type": "function", "function": "lookup"},
            None,
            '{"id":"c1","type":"function","function":"lookup"}',
            "function is not an object",
        ),
        (_lookup("{not json"), "lookup", "{not json", "not JSON"),
        (_lookup("[1, 2]"), "lookup", "[1, 2]", "not a JSON object"),
        (_lookup("[" * 100_000), "lookup", "[" * 100_000, "not JSON"),
        (_lookup('{"q": 1}', ident=7), "lookup", '{"q": 1}', "id is not a string"),
        ({"id": "c1", "function": {"name": 5, "arguments": "{}"}}, None, "{}", "names no function"),
        ({"id": "c1", "function": {"arguments": "{}"}}, None, "{}", "names no function"),
    ],
    ids=[
        "arguments-an-object",
        "call-a-string",
        "function-a-string",
        "arguments-not-json",
        "arguments-a-list",
        "arguments-nested-deeply",
        "id-an-int",
        "name-an-int",
        "no-name",
    ],
)
def test_a_malformed_tool_call_from_a_backend_is_an_invalid_tool_call(
    gate: Gate, evil: EvilBackend, raw: object, name: str | None, args: str | None, error: str
) -> None:
    """Review R2: these raised bare TypeError / AttributeError out of the model call (and
    arguments that were not JSON became ``{}``: a call run with arguments nobody sent). Now each
    is an ``InvalidToolCall`` naming what is wrong, kept as text, never run; the valid call beside
    it is still a tool call."""
    _with_tool_calls(evil, [raw, _lookup('{"q": "ok"}', ident="c2")])
    model = DispatchedChatModel(gate=gate, model_name=MODEL, max_tokens=8)
    message = model.invoke([HumanMessage(content="hi")])
    assert [(c["name"], c["args"], c["id"]) for c in message.tool_calls] == [("lookup", {"q": "ok"}, "c2")]
    [invalid] = message.invalid_tool_calls
    assert (invalid["name"], invalid["args"]) == (name, args)
    assert error in (invalid["error"] or "")


def test_a_tool_call_nested_past_the_bound_fails_the_answer(gate: Gate, evil: EvilBackend) -> None:
    """A tool call nested 300 deep was an ``InvalidToolCall`` shown as "(not shown: nested too
    deeply)". Since review R88d the backend's client refuses a whole answer nested past
    ``MAX_DEPTH`` (254) as a stream event and the gateway's JSON path refuse one: the call fails
    over, and ends naming each failure."""
    _with_tool_calls(evil, [json.loads("[" * 300 + "]" * 300), _lookup('{"q": "ok"}', ident="c2")])
    model = DispatchedChatModel(gate=gate, model_name=MODEL, max_tokens=8)
    with pytest.raises(
        DispatchError, match="evil: malformed chat completion: it is nested more than 254 levels"
    ):
        model.invoke([HumanMessage(content="hi")])


def test_well_formed_tool_calls_are_parsed_back(gate: Gate, evil: EvilBackend) -> None:
    _with_tool_calls(evil, [_lookup('{"q": 1}'), _lookup("", ident="c2"), _lookup(None, ident=None)])
    message = DispatchedChatModel(gate=gate, model_name=MODEL).invoke([HumanMessage(content="hi")])
    assert [(c["name"], c["args"], c["id"]) for c in message.tool_calls] == [
        ("lookup", {"q": 1}, "c1"),
        ("lookup", {}, "c2"),
        ("lookup", {}, None),
    ]
    assert message.invalid_tool_calls == []
    assert message.usage_metadata is not None and message.usage_metadata["total_tokens"] == 4


@pytest.mark.parametrize("tool_calls", [{"0": _lookup("{}")}, "lookup"], ids=["an-object", "a-string"])
async def test_tool_calls_that_are_not_a_list_are_backend_failed(
    gate: Gate, evil: EvilBackend, tool_calls: object
) -> None:
    # The backend's client refuses the answer (review R88c), so the dispatcher fails the call over
    # and ends with NoBackend naming each failure.
    _with_tool_calls(evil, tool_calls)
    model = DispatchedChatModel(gate=gate, model_name=MODEL)
    with pytest.raises(DispatchError, match="evil: malformed chat completion: tool_calls is not a list"):
        model.invoke([HumanMessage(content="hi")])
    with pytest.raises(DispatchError, match="evil: malformed chat completion: tool_calls is not a list"):
        await model.ainvoke([HumanMessage(content="hi")])
