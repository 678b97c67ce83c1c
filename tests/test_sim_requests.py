"""Fixes to the simulated backend's HTTP server and to ``agentgate serve``.

The simulator checks a chat body before the engine sees it (agentgate/sim/_request.py): a
malformed or oversized request is a 400 with an OpenAI error body, never a 500, never work that
cannot end; a non-streaming client that hangs up frees the engine. ``agentgate serve`` refuses an
inventory without backends and an address it cannot listen on in one line, exit code 2.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import _http
import httpx
import pytest

from agentgate.dispatch.prefix import estimate_prompt_tokens
from agentgate.sim import EngineConfig, SimServer

MODEL = "llama-3.1-8b"
_CHAT: dict[str, object] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
_REPO = Path(__file__).resolve().parents[1]


def _post(server: SimServer, body: bytes, timeout: float = 2.0) -> httpx.Response:
    with _http.Client(timeout=timeout) as http:
        return http.post(
            server.url + "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )


def _body(**fields: object) -> bytes:
    return json.dumps({**_CHAT, **fields}).encode()


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            b'{"model":"llama-3.1-8b","messages":[{"role":"user","content":"x"}],"max_tokens":Infinity}',
            id="max_tokens_infinity",
        ),
        pytest.param(b'{"model":"llama-3.1-8b","messages":[1,2]}', id="messages_not_objects"),
        pytest.param(b'{"model":"llama-3.1-8b","messages":[{"content":"x"}]}', id="message_without_role"),
        pytest.param(
            b'{"model":"llama-3.1-8b","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":[1]}',
            id="stream_options_not_object",
        ),
        pytest.param(
            b'{"model":"llama-3.1-8b","messages":' + b"[" * 100_000 + b"]" * 100_000 + b"}", id="deep"
        ),
        pytest.param(b"[1, 2]", id="body_not_object"),
        pytest.param(
            b'{"model":"llama-3.1-8b","messages":[{"role":"user","content":"x"}],"stream":"yes"}', id="stream"
        ),
    ],
)
def test_a_malformed_chat_request_is_a_400_with_an_openai_error(body: bytes) -> None:
    """Every malformed body is a 400 whose JSON names the problem under ``error.message``."""
    with SimServer(time_scale=0.001) as server:
        answer = _post(server, body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["type"] == "invalid_request_error"
        assert server._runner is not None and not server._runner.live


@pytest.mark.parametrize(
    "value",
    [0, -1, True, "16", 1.5, 10**9, 131_073],
    ids=["zero", "negative", "bool", "string", "float", "huge", "above_context"],
)
def test_max_tokens_must_be_an_integer_from_1_to_the_context_limit(value: object) -> None:
    """``max_tokens`` is refused unless an integer in 1..max_model_len (131072 by default); 0 is
    not silently replaced by the default."""
    with SimServer(time_scale=0.001) as server:
        answer = _post(server, _body(max_tokens=value))
        assert answer.status_code == 400, answer.text
        assert "max_tokens" in answer.json()["error"]["message"]


def test_a_missing_max_tokens_generates_the_default_and_max_completion_tokens_is_read() -> None:
    """No ``max_tokens`` generates 16 tokens; ``max_completion_tokens`` takes precedence."""
    with SimServer(time_scale=0.001) as server:
        assert _post(server, _body()).json()["usage"]["completion_tokens"] == 16
        both = _post(server, _body(max_tokens=9, max_completion_tokens=3))
        assert both.json()["usage"]["completion_tokens"] == 3


def test_a_request_larger_than_the_kv_cache_is_refused_and_does_not_block_the_server() -> None:
    """A prompt plus ``max_tokens`` beyond the KV capacity is a 400 naming the context limit, and
    the next request is served (nothing is queued behind a request that can never fit)."""
    config = EngineConfig(kv_capacity_tokens=2_000)
    with SimServer(config=config, time_scale=0.001) as server:
        assert server.max_model_len == 2_000
        huge = _body(messages=[{"role": "user", "content": "x " * 4_000}], max_tokens=1)
        refused = _post(server, huge)
        assert refused.status_code == 400
        assert "maximum context length is 2000 tokens" in refused.json()["error"]["message"]
        just_over = _body(messages=[{"role": "user", "content": "x"}], max_tokens=2_000)
        assert _post(server, just_over).status_code == 400
        assert _post(server, _body(max_tokens=1)).status_code == 200


def test_a_huge_prompt_on_the_default_server_is_refused_quickly() -> None:
    """On the default profile a prompt of twice the KV capacity gets its 400 without waiting."""
    with SimServer(time_scale=0.001) as server:
        huge = _body(messages=[{"role": "user", "content": "x " * (server.engine.kv.capacity * 4)}])
        assert _post(server, huge, timeout=5.0).status_code == 400
        assert _post(server, _body(max_tokens=1)).status_code == 200


def test_a_body_over_the_size_limit_is_refused_without_reading_it_all() -> None:
    """A body past ``MAX_BODY_BYTES`` is a 413 (memory stays bounded); the server keeps serving."""
    from agentgate.sim._server import MAX_BODY_BYTES

    with SimServer(time_scale=0.001) as server:
        padding = "x" * (MAX_BODY_BYTES + 1)
        try:
            answer = _post(server, _body(messages=[{"role": "user", "content": padding}]), timeout=10.0)
        except httpx.TransportError:
            pass  # the server may close the connection while the client is still sending the rest
        else:
            assert answer.status_code == 413
            assert "larger than" in answer.json()["error"]["message"]
        assert _post(server, _body(max_tokens=1)).status_code == 200


def test_a_non_streaming_client_that_hangs_up_frees_the_engine() -> None:
    """A plain (non-SSE) request whose client disconnects is aborted in the engine: it leaves the
    runner's live set and gives its KV back, instead of decoding for nobody."""
    with SimServer(time_scale=1.0) as server:
        with pytest.raises(httpx.TimeoutException), _http.Client(timeout=0.5) as http:
            http.post(server.url + "/v1/chat/completions", content=_body(max_tokens=100_000))
        deadline = time.monotonic() + 2.0
        while server._runner is not None and server._runner.live and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server._runner is not None and not server._runner.live
        assert server.engine.kv.used_tokens == 0
        assert not server.engine.has_work()


def _serve(tmp_path: Path, *args: str, timeout: float = 30.0) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "agentgate.cli.main", "serve", "--store", str(tmp_path / "s.db"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=_REPO,
    )
    return done.returncode, done.stderr.strip().splitlines()


_POLICY = ("--policy", str(_REPO / "policies/research_team.yaml"))
_INVENTORY = ("--inventory", str(_REPO / "policies/inventory.yaml"))


def test_serve_on_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """With --port already taken, serve says so in one line, exit 2, and never says "serving"."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, lines = _serve(tmp_path, *_POLICY, *_INVENTORY, "--port", str(port))
    assert (code, len(lines)) == (2, 1), (code, lines)
    assert "serving" not in lines[0] and "cannot listen" in lines[0]


def test_serve_on_a_host_that_does_not_resolve_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """An unresolvable --host is one line naming it, exit 2."""
    code, lines = _serve(tmp_path, *_POLICY, *_INVENTORY, "--host", "no-such-host.invalid")
    assert (code, len(lines)) == (2, 1), (code, lines)
    assert "no-such-host.invalid" in lines[0]


def test_serve_refuses_an_inventory_with_no_backends(tmp_path: Path) -> None:
    """An inventory with no backends (here an empty file) is one line naming it, exit 2."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = str(probe.getsockname()[1])
    # An empty regular file: /dev/null, used before, is now refused as not a regular file.
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    code, lines = _serve(tmp_path, *_POLICY, "--inventory", str(empty), "--port", free)
    assert (code, len(lines)) == (2, 1), (code, lines)
    assert str(empty) in lines[0] and "no backends" in lines[0]


def test_an_image_part_is_counted_at_its_fixed_estimate_not_its_data_urls_length() -> None:
    """Kills: the simulator counting a prompt's image by the characters of its base64 data URL: a
    photo of 600 kB was a prompt of 150,000 tokens, refused 400 as over the model's context.

    Rule: the simulated backend counts a prompt as the router does (``estimate_prompt_tokens``:
    each image part ``IMAGE_TOKENS``), and reports that as its usage's prompt tokens."""
    photo = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0KGgo" * 55_000}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, photo]}]
    with SimServer(time_scale=0.01) as server:
        answer = _post(server, _body(messages=messages, max_tokens=2), timeout=10.0)
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json()["usage"]["prompt_tokens"] == estimate_prompt_tokens(messages)
