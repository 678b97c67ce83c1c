"""A chat body's reading (its parse, its canonical JSON hashed, its prompt estimated) never runs on
the gateway's event loop: a caller with no credentials and a large body leaves ``/healthz``
answering while its body is read (review R91).

R89 moved the decision into a worker thread, but the reading before it stayed on the loop. Its
work grows with the body, up to ``max_body_bytes`` (8 MiB by default), and comes before the
caller is authenticated: three bodies of 150,000 small messages with no credentials, each
answered 401 ``missing_invocation``, held ``/healthz`` and every other connection for 3 s. The
reading now runs in the decision's own worker step (``Gateway._read_and_decide``)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import _http
import httpx
import pytest
from test_gateway import Env, _body, _post

from agentgate.dispatch.gateway import _client, _request

pytest_plugins = ("test_gateway",)  # its ``backends`` and ``env`` fixtures


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _watched(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, seen: dict[str, bool]) -> None:
    """Replace ``module.name`` by itself, recording whether it ran on an event loop's thread."""
    original: Callable[..., Any] = getattr(module, name)

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen[name] = seen.get(name, False) or _on_a_loop()
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, watched)


def test_a_body_is_parsed_hashed_and_estimated_off_the_event_loop(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, bool] = {}
    _watched(monkeypatch, _request, "_one_of_each_key", seen)  # the parse's hook of each object
    _watched(monkeypatch, _client, "args_digest", seen)  # the body's canonical JSON, hashed
    _watched(monkeypatch, _request, "estimate_prompt_tokens", seen)  # the prompt estimate
    answer = _post(env, _body())  # no credentials
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "missing_invocation")
    assert seen == {"_one_of_each_key": False, "args_digest": False, "estimate_prompt_tokens": False}


def test_healthz_answers_while_a_body_without_credentials_is_parsed(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    begun, release = threading.Event(), threading.Event()
    hook = _request._one_of_each_key

    def parsing(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if any(key == "model" for key, _ in pairs):  # the body's own object, the last one parsed
            begun.set()
            release.wait(5)
        return hook(pairs)

    monkeypatch.setattr(_request, "_one_of_each_key", parsing)
    answers: list[httpx.Response] = []
    caller = threading.Thread(target=lambda: answers.append(_post(env, json.dumps(_body()).encode())))
    try:
        caller.start()
        assert begun.wait(5), "the gateway never began to parse the body"
        try:
            health = _http.get(env.base_url.removesuffix("/v1") + "/healthz", timeout=1.0)
        except httpx.TimeoutException:
            pytest.fail("/healthz got no answer while a body with no credentials was parsed")
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        assert caller.is_alive() and not answers  # its body was still being parsed
    finally:
        release.set()
        caller.join(30)
    assert [(a.status_code, a.json()["error"]["code"]) for a in answers] == [(401, "missing_invocation")]
    assert [e.kind for e in env.entries()] == ["deny"]
