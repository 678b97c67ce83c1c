"""Backend credentials: an inventory names where a backend's API key is read (``api_key_env``,
``api_key_file``), never the key; the key goes out as ``Authorization: Bearer`` on every call to
that backend (the dispatcher's clients and the gateway's lean pool), never the caller's own
``Authorization``; a 401/403 is ``BackendRejectedCredentials`` and the backend is left alone until
it accepts the key again; the key shows in no repr, error, log, audit row or CLI line.

Real HTTP on 127.0.0.1 throughout: ``SimServer(api_key=...)`` enforces the key on ``/v1/*`` as
vLLM does, and a small recording server shows what probes and scrapes carry.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _http
import openai
import pytest
from test_gateway import _free_port, wait_until_serving

from agentgate.cli.main import main
from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch.backends import BackendClient, Timeouts
from agentgate.dispatch.gateway import (
    Gateway,
    GatewayGate,
    GatewayServer,
    InvocationSigner,
    invocation_headers,
)
from agentgate.dispatch.inventory import load_inventory, parse_inventory
from agentgate.errors import (
    BackendCredentialError,
    BackendFailed,
    BackendRejectedCredentials,
    DispatchError,
    InventoryError,
    NoBackend,
)
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

MODEL = "llama-3.1-8b"
KEY = "sk-test-9f8e7d6c5b4a-credential"
"""The backend key of these tests: every leak check searches for it."""
ENV = "AGENTGATE_TEST_BACKEND_KEY"
CHAT = "/v1/chat/completions"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}


def _backend(url: str, name: str = "b0", **extra: Any) -> dict[str, Any]:
    return {"name": name, "url": url, "engine": "vllm", "models": [MODEL], **extra}


def _inventory(*backends: dict[str, Any]) -> Any:
    return inventory_from_mapping({"backends": list(backends)})


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(ENV, KEY)
    return ENV


# --- the inventory ------------------------------------------------------------------------------


def test_api_key_env_is_read_at_load_and_shows_in_no_repr_or_dump(key_env: str) -> None:
    inv = _inventory(_backend("http://10.0.0.1:8000", api_key_env=key_env))
    backend = inv.backends[0]
    assert backend.api_key is not None and backend.api_key.get_secret_value() == KEY
    shown = [repr(inv), str(inv), repr(backend), str(backend), inv.model_dump_json(), str(inv.model_dump())]
    shown += [repr(backend.api_key), str(backend.api_key), f"{backend.api_key}"]
    assert all(KEY not in text for text in shown)
    assert inv.model_dump()["backends"][0]["api_key_env"] == ENV  # the name is shown, never the value


def test_a_backend_without_a_key_sends_none() -> None:
    assert _inventory(_backend("http://10.0.0.1:8000")).backends[0].api_key is None


def test_api_key_file_is_read_stripped_and_must_be_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "vllm.key"
    path.write_text(f"  {KEY}\n")
    path.chmod(0o600)
    backend = _inventory(_backend("http://10.0.0.1:8000", api_key_file=str(path))).backends[0]
    assert backend.api_key is not None and backend.api_key.get_secret_value() == KEY
    path.chmod(0o644)
    with pytest.raises(
        BackendCredentialError, match=r"'b0'.*accessible by others \(mode 0644\); run chmod 600"
    ) as info:
        _inventory(_backend("http://10.0.0.1:8000", api_key_file=str(path)))
    assert KEY not in str(info.value)


def test_group_read_is_allowed_only_when_root_owns_the_key_file(tmp_path: Path) -> None:
    """libpq's rule: u=rw,g=r (0640) passes for a file root owns (a secret a platform mounts for
    the service's group), never for one another user owns."""
    path = tmp_path / "vllm.key"
    path.write_text(KEY)
    path.chmod(0o640)
    spec = _backend("http://10.0.0.1:8000", api_key_file=str(path))
    if os.getuid() == 0:
        key = _inventory(spec).backends[0].api_key
        assert key is not None and key.get_secret_value() == KEY
        os.chown(path, 65534, 65534)  # nobody: root still reads it, but it is not root's
    with pytest.raises(BackendCredentialError, match=r"accessible by others \(mode 0640\)"):
        _inventory(spec)


@pytest.mark.parametrize(
    ("content", "mode", "reason"),
    [
        ("", 0o600, "is empty"),
        ("  \n\t", 0o600, "is empty"),
        ("sk-one\nX-Injected: yes", 0o600, "whitespace, control or non-ASCII"),
        ("sk-\u00e9t\u00e9", 0o600, "whitespace, control or non-ASCII"),
    ],
)
def test_an_unusable_key_file_is_refused_without_its_content(
    tmp_path: Path, content: str, mode: int, reason: str
) -> None:
    path = tmp_path / "k"
    path.write_text(content)
    path.chmod(mode)
    with pytest.raises(BackendCredentialError, match=reason) as info:
        _inventory(_backend("http://10.0.0.1:8000", api_key_file=str(path)))
    assert str(path) in str(info.value) and "'b0'" in str(info.value)
    assert all(part not in str(info.value) for part in content.split() if part)


def test_a_key_file_that_cannot_be_read_is_a_typed_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "absent.key"
    for path, reason in (
        (str(missing), "cannot read an API key"),
        (str(tmp_path), "not a regular file"),
        ("secrets/vllm.key", "must be an absolute path"),
    ):
        with pytest.raises(BackendCredentialError, match=reason) as info:
            _inventory(_backend("http://10.0.0.1:8000", api_key_file=path))
        # A relative "path" is not quoted: it is most likely the key itself, pasted in its place.
        assert (path in str(info.value)) is os.path.isabs(path) and "'b0'" in str(info.value)


@pytest.mark.parametrize("value", [None, "", "   ", "sk-a\r\nHost: evil"])
def test_an_unset_empty_or_unusable_variable_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    with pytest.raises(BackendCredentialError) as info:
        _inventory(_backend("http://10.0.0.1:8000", api_key_env=ENV))
    message = str(info.value)
    assert f"the environment variable {ENV}" in message and "'b0'" in message
    assert "sk-a" not in message


def test_a_literal_key_in_the_inventory_is_refused_at_its_line_without_the_key(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        f"backends:\n  - name: b0\n    url: http://10.0.0.1:8000\n    models: [m]\n    api_key: {KEY}\n"
    )
    with pytest.raises(BackendCredentialError) as info:
        load_inventory(path)
    message = str(info.value)
    assert message.startswith(
        f"{path}:5:14: backends.0.api_key: backend 'b0': an API key is never written in the inventory"
    )
    assert "api_key_env" in message and "api_key_file" in message and KEY not in message


def test_a_missing_variable_names_the_file_line_backend_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    text = (
        f"backends:\n  - name: b0\n    url: http://10.0.0.1:8000\n    models: [m]\n    api_key_env: {ENV}\n"
    )
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, source="inv.yaml")
    assert (
        str(info.value)
        == f"inv.yaml:5:18: backends.0.api_key_env: backend 'b0': the environment variable {ENV} is not set"
    )


def test_env_and_file_together_are_refused(key_env: str, tmp_path: Path) -> None:
    with pytest.raises(BackendCredentialError, match="api_key_env or api_key_file, not both"):
        _inventory(_backend("http://10.0.0.1:8000", api_key_env=key_env, api_key_file=str(tmp_path / "k")))
    with pytest.raises(InventoryError, match="api_key_env"):
        _inventory(_backend("http://10.0.0.1:8000", api_key_env="1-not-a-name"))


# --- the clients ----------------------------------------------------------------------------------


async def _client_calls(client: BackendClient) -> tuple[str, str]:
    answer = await client.chat(BODY)
    streamed = "".join([c.content async for c in client.stream(BODY)])
    return answer.content, streamed


async def test_chat_and_stream_send_the_key_and_succeed(key_env: str) -> None:
    with SimServer(time_scale=0.01, api_key=KEY) as server:
        backend = _inventory(_backend(server.url, api_key_env=key_env)).backends[0]
        async with _http.AsyncClient() as http:
            content, streamed = await _client_calls(BackendClient(backend, http))
        assert content and streamed
        assert server.authorizations == {(CHAT, f"Bearer {KEY}"): 2}


@pytest.mark.parametrize("sent", ["none", "wrong"])
async def test_a_401_is_rejected_credentials_naming_the_backend_never_the_key(
    sent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, KEY)
    with SimServer(time_scale=0.01, api_key="sk-the-right-one") as server:
        extra = {"api_key_env": ENV} if sent == "wrong" else {}
        client = BackendClient(_inventory(_backend(server.url, **extra)).backends[0], _http.AsyncClient())
        try:
            with pytest.raises(
                BackendRejectedCredentials, match="b0 rejected our credentials: HTTP 401"
            ) as one:
                await client.chat(BODY)
            with pytest.raises(BackendRejectedCredentials, match="b0 rejected our credentials") as two:
                await anext(aiter(client.stream(BODY)))
            assert not await client.accepts_credentials()
        finally:
            await client.http.aclose()
    for info in (one, two):
        assert KEY not in str(info.value)
        assert ("none is configured" in str(info.value)) is (sent == "none")
    assert server.served == 0


class _Recorder(http.server.ThreadingHTTPServer):
    """A real HTTP server on ``host`` (127.0.0.1, or ::1) that records each GET's path and
    Authorization and answers 200 with vLLM-shaped metrics; a POST gets ``answer`` (status, body)
    with the request's Authorization in place of ``{auth}``: a backend that echoes what it was sent."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.seen: list[tuple[str, str | None]] = []
        self.answer = (500, "{auth}")
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorder.seen.append((self.path, self.headers.get("Authorization")))
                body = b"vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                status, template = recorder.answer
                body = template.replace("{auth}", self.headers.get("Authorization", "")).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.server_address[0]}]" if self.address_family == socket.AF_INET6 else "127.0.0.1"
        return f"http://{host}:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def recorders() -> Iterator[tuple[_Recorder, _Recorder]]:
    made = (_Recorder(), _Recorder())
    yield made
    for recorder in made:
        recorder.close()


async def test_probes_carry_the_key_to_the_backends_origin_only(
    key_env: str, recorders: tuple[_Recorder, _Recorder]
) -> None:
    home, other = recorders
    same = _inventory(_backend(home.url, api_key_env=key_env, metrics_url=home.url + "/metrics")).backends[0]
    away = _inventory(_backend(home.url, api_key_env=key_env, metrics_url=other.url + "/metrics")).backends[0]
    async with _http.AsyncClient() as http:
        for backend in (same, away):
            client = BackendClient(backend, http, Timeouts(probe_s=30.0))  # a loaded machine: no 1 s limit
            assert await client.health() and await client.accepts_credentials()
            assert (await client.scrape(0.0)).running == 1
    bearer = f"Bearer {KEY}"
    probes = [("/health", bearer), ("/v1/models", bearer)]
    assert home.seen == [*probes, ("/metrics", bearer), *probes]
    assert other.seen == [("/metrics", None)]  # another origin never gets the key


async def test_a_metrics_url_of_the_backends_origin_spelled_otherwise_gets_the_key(key_env: str) -> None:
    """Review R54: origins were compared by the host as written, so a ``metrics_url`` of
    ``http://[0:0::1]:P`` beside a ``url`` of ``http://[::1]:P`` (one address, one server) was
    taken for a sidecar's, sent no key, and every scrape of an engine that guards its metrics
    failed.

    Rule: the origin is compared as ``inventory.origin`` spells it (an IP address in its shortest
    form), the same spelling that decides which backends are one engine."""
    try:
        home = _Recorder("::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        port = home.server_address[1]
        backend = _inventory(
            _backend(
                f"http://[::1]:{port}", api_key_env=key_env, metrics_url=f"http://[0:0::1]:{port}/metrics"
            )
        ).backends[0]
        async with _http.AsyncClient() as http:
            assert (await BackendClient(backend, http, Timeouts(probe_s=30.0)).scrape(0.0)).running == 1
        assert home.seen == [("/metrics", f"Bearer {KEY}")]
    finally:
        home.close()


@pytest.mark.parametrize(
    ("status", "template", "error"),
    [
        (500, "upstream said: {auth}", BackendFailed),
        (400, '{"error": {"message": "bad request from {auth}"}}', DispatchError),
        (502, "x" * 180 + "{auth}", BackendFailed),  # the key straddles where the quote is cut
        (200, '{"error": {"message": "refused {auth}"}}', BackendFailed),
        (200, "{auth} is not an SSE event\n", BackendFailed),
    ],
)
async def test_a_backend_echoing_the_key_gets_it_scrubbed_from_every_error(
    key_env: str, recorders: tuple[_Recorder, _Recorder], status: int, template: str, error: type[Exception]
) -> None:
    echo = recorders[0]
    echo.answer = (status, template)
    client = BackendClient(
        _inventory(_backend(echo.url, api_key_env=key_env)).backends[0], _http.AsyncClient()
    )
    try:
        with pytest.raises(error) as plain:
            await client.chat(BODY)
        with pytest.raises(error) as streamed:
            await anext(aiter(client.stream(BODY)))
    finally:
        await client.http.aclose()
    messages = [str(plain.value), str(streamed.value)]
    assert all(KEY[:8] not in message for message in messages)
    assert any("[redacted]" in message for message in messages)


async def test_a_hosted_endpoint_without_health_is_probed_on_its_health_path(
    key_env: str, recorders: tuple[_Recorder, _Recorder]
) -> None:
    home = recorders[0]
    backend = _inventory(_backend(home.url, api_key_env=key_env, health_path="/v1/models")).backends[0]
    async with _http.AsyncClient() as http:
        # A probe's 1 s default is the product's; a loaded CI machine can take longer to answer.
        assert await BackendClient(backend, http, Timeouts(probe_s=30.0)).health()
    assert home.seen == [("/v1/models", f"Bearer {KEY}")]
    with pytest.raises(InventoryError, match="health_path"):
        _inventory(_backend(home.url, health_path="v1/models"))


# --- the dispatcher ---------------------------------------------------------------------------------


async def test_a_rejecting_backend_costs_one_attempt_then_is_left_until_it_accepts_the_key(
    key_env: str,
) -> None:
    with (
        SimServer(time_scale=0.01, api_key="sk-rotated") as wrong,
        SimServer(time_scale=0.01, api_key=KEY) as right,
    ):
        inv = _inventory(
            _backend(wrong.url, "a", api_key_env=key_env), _backend(right.url, "b", api_key_env=key_env)
        )
        async with Dispatcher(inv, Router(inv), health_interval_s=0.05, cooldown_s=0.05) as d:
            results = [await d.chat(BODY) for _ in range(6)]
            assert {r.backend for r in results} == {"b"}
            await asyncio.sleep(0.3)  # several health rounds: /health passes, but does not bring "a" back
            assert d.is_down("a") and d.rejected_credentials("a")
            results += [await d.chat(BODY) for _ in range(4)]
            assert {r.backend for r in results} == {"b"}
            # One chat attempt on "a", whatever the number of calls; the rest were probes.
            assert wrong.authorizations[(CHAT, f"Bearer {KEY}")] == 1
            assert wrong.authorizations[("/v1/models", f"Bearer {KEY}")] >= 2
            assert wrong.served == 0
            wrong.api_key = KEY  # the backend's key is set right: it is used again
            for _ in range(100):
                if not d.is_down("a"):
                    break
                await asyncio.sleep(0.02)
            assert not d.is_down("a") and not d.rejected_credentials("a")
            later = await asyncio.gather(*(d.chat(BODY) for _ in range(8)))
            assert "a" in {r.backend for r in later}


async def test_when_every_backend_rejects_the_call_fails_naming_the_cause(key_env: str) -> None:
    with SimServer(time_scale=0.01, api_key="sk-other") as server:
        inv = _inventory(_backend(server.url, "a", api_key_env=key_env))
        async with Dispatcher(inv, Router(inv), recovery_wait_s=0.2, health_interval_s=0.05) as d:
            with pytest.raises(NoBackend, match="a rejected our credentials: HTTP 401") as info:
                await d.chat(BODY)
            with pytest.raises(NoBackend):
                await d.chat(BODY)
    assert KEY not in str(info.value)
    assert server.authorizations[(CHAT, f"Bearer {KEY}")] == 1


# --- the gateway --------------------------------------------------------------------------------------


def _policy_text(root: SigningKey, agent: SigningKey) -> str:
    return f"""
version: 1
trust_anchors:
  root: {{did: "{root.did}"}}
tenants:
  lab: {{}}
principals:
  agent: {{kind: agent, did: "{agent.did}", tenant: lab, roles: [chat]}}
models:
  {MODEL}: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  chat:
    kind: agent
    capabilities:
      - resource: model:{MODEL}
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
"""


def _policy(root: SigningKey, agent: SigningKey) -> Any:
    return parse_policy(_policy_text(root, agent), source="credentials.yaml")


def _gateway_calls(tmp_path: Path, server: SimServer, backend: dict[str, Any]) -> tuple[list[Any], str, Path]:
    """Serve a gateway over ``backend``, make a plain and a streamed call with the agent's chain
    token as the caller's ``Authorization``; the two results, the chain token and the store file."""
    root, key = SigningKey.generate(), SigningKey.generate()
    db = tmp_path / "agentgate.db"
    gate = GatewayGate(_policy(root, key), SQLiteStore(db))
    inventory = _inventory(backend)
    gateway = GatewayServer(Gateway(gate, inventory), port=0).start()
    try:
        agent = gate.issue(root, name="agent", key=key, role="chat")
        signer = InvocationSigner(agent.key, agent.chain)
        with (
            signer.client(verify=_http.TLS) as http,
            openai.OpenAI(
                base_url=gateway.url, api_key=agent.chain.token, http_client=http, max_retries=0
            ) as client,
        ):
            results: list[Any] = []
            for stream in (False, True):
                try:
                    made = client.chat.completions.create(
                        model=MODEL, messages=BODY["messages"], max_tokens=3, stream=stream
                    )
                    results.append(list(made) if stream else made)
                except openai.APIStatusError as exc:
                    results.append(exc)
            results.append(_http.get(gateway.url + "/metrics").text)
    finally:
        gateway.stop()
        gate.close()
    return results, agent.chain.token, db


def test_the_gateway_sends_the_backend_key_and_never_the_callers_token(key_env: str, tmp_path: Path) -> None:
    with SimServer(time_scale=0.01, api_key=KEY) as server:
        results, token, _ = _gateway_calls(tmp_path, server, _backend(server.url, api_key_env=key_env))
    answer, chunks, _ = results
    assert answer.choices[0].message.content and any(c.choices for c in chunks)
    assert server.authorizations == {(CHAT, f"Bearer {KEY}"): 2}
    assert all(token not in (value or "") for _, value in server.authorizations)


def test_the_gateway_sends_no_authorization_to_a_backend_without_a_key(tmp_path: Path) -> None:
    with SimServer(time_scale=0.01) as server:
        results, _, _ = _gateway_calls(tmp_path, server, _backend(server.url))
    assert results[0].choices[0].message.content
    assert server.authorizations == {(CHAT, None): 2}


def test_a_rejected_key_leaks_into_no_answer_log_metric_or_audit_row(
    key_env: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG), SimServer(time_scale=0.01, api_key="sk-other") as server:
        results, _, db = _gateway_calls(tmp_path, server, _backend(server.url, api_key_env=key_env))
    plain, streamed, metrics = results
    assert isinstance(plain, openai.APIStatusError) and plain.status_code in (502, 503)
    assert isinstance(streamed, openai.APIStatusError)
    assert "rejected our credentials" in caplog.text  # the gateway's log says why
    answers = [json.dumps(e.body) + e.response.text for e in (plain, streamed)]
    assert all(KEY not in text for text in [*answers, metrics, caplog.text])
    assert server.authorizations[(CHAT, f"Bearer {KEY}")] >= 1
    stored = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    assert stored and KEY.encode() not in stored


# --- the CLI ----------------------------------------------------------------------------------------


def test_serve_with_an_unusable_credential_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\n")
    inventory = tmp_path / "inventory.yaml"
    monkeypatch.delenv(ENV, raising=False)
    for line, column, expected in (
        (f"api_key_env: {ENV}", 18, f"the environment variable {ENV} is not set"),
        (f"api_key: {KEY}", 14, "an API key is never written in the inventory"),
    ):
        inventory.write_text(
            f"backends:\n  - name: b0\n    url: http://127.0.0.1:9\n    models: [m]\n    {line}\n"
        )
        code = main(["serve", "--policy", str(policy), "--inventory", str(inventory), "--port", "9"])
        out, err = capsys.readouterr()
        assert code == 2 and out == ""
        assert err.startswith(f"agentgate: error: {inventory}:5:{column}: backends.0.") and expected in err
        assert ": backend 'b0': " in err
        assert KEY not in err and err.count("\n") == 1


def test_the_inventory_module_reads_the_environment_when_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    # A key set after loading is not seen: the inventory holds what was read at load time.
    monkeypatch.setenv(ENV, "sk-first")
    inv = _inventory(_backend("http://10.0.0.1:8000", api_key_env=ENV))
    monkeypatch.setenv(ENV, "sk-second")
    assert inv.backends[0].api_key is not None and inv.backends[0].api_key.get_secret_value() == "sk-first"


def test_agentgate_serve_sends_the_key_and_prints_or_logs_it_nowhere(tmp_path: Path) -> None:
    root, key = SigningKey.generate(), SigningKey.generate()
    policy = tmp_path / "policy.yaml"
    policy.write_text(_policy_text(root, key))
    store = tmp_path / "serve.db"
    assert main(["store", "init", "--store", str(store)]) == 0  # serve refuses a store that does not exist
    port = _free_port()
    with SimServer(time_scale=0.01, api_key=KEY) as server:
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(
            f"backends:\n  - {{name: b0, url: '{server.url}', engine: vllm, models: [{MODEL}], api_key_env: {ENV}}}\n"
        )
        command = [sys.executable, "-m", "agentgate.cli.main", "serve", "--policy", str(policy)]
        command += ["--inventory", str(inventory), "--port", str(port), "--store", str(store)]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, ENV: KEY}, text=True
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_serving(base, process)
            issuer = GatewayGate(_policy(root, key), SQLiteStore(store))
            try:
                agent = issuer.issue(root, name="agent", key=key, role="chat")
            finally:
                issuer.close()
            statuses = []
            for backend_key in (KEY, "sk-rotated"):
                server.api_key = backend_key  # the second call: the backend no longer takes ours
                headers = invocation_headers(agent.key, agent.chain, BODY)
                statuses.append(_http.post(base + CHAT, json=BODY, headers=headers, timeout=20).status_code)
        finally:
            process.terminate()
            out, err = process.communicate(timeout=20)
    assert statuses == [200, 503]
    assert server.authorizations[(CHAT, f"Bearer {KEY}")] == 2
    assert "rejected our credentials" in err and KEY not in out + err
    assert KEY.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("serve.db*"))
