"""Review R87b: ``_scrub`` (what agentgate's backend client, and the examples, redact of a backend's
words) finds the key and the prompts in the text as it came, never in the ``[redacted]`` markers it
wrote, and leaves a key or prompt shorter than ``_FRAGMENT`` (8) characters where it stands: such a
key is no secret, and redacting it garbled the endpoint's words. Until then a second pass rescanned
the first pass's markers (the key ``a``: ``Inv[red[red[red[redacted]cted]cted]cted]lid API key``)
and a short key was redacted wherever it stood (``1``: ``Error code: 40[redacted]``)."""

from __future__ import annotations

import _http
import pytest
from test_dispatch_backend_error_quotes import ENV, PAYLOAD, Raw, _inventory
from test_dispatch_backend_error_quotes import raw as raw  # the fixture

from agentgate.dispatch._redaction import _FRAGMENT, _scrub
from agentgate.dispatch.backends import BackendClient, Timeouts
from agentgate.errors import BackendFailed

KEY = "sk-live-0123456789abcdefSECRET"
SAID = "Error code: 401 - Invalid API key; model ollama/llama3"


@pytest.mark.parametrize("key", ["a", "1", "ollama", "EMPTY", "x" * (_FRAGMENT - 1)])
def test_a_key_shorter_than_the_fragment_leaves_the_words_as_they_are(key: str) -> None:
    assert _scrub(SAID, key) == SAID


def test_a_prompt_shorter_than_the_fragment_leaves_the_words_as_they_are() -> None:
    assert _scrub(SAID, None, ["API", "Error"]) == SAID


@pytest.mark.parametrize(
    ("key", "said", "scrubbed"),
    [
        ("redacted-0123456789", "key redacted-0123456789 refused", "key [redacted] refused"),
        (KEY, f"[redacted]{KEY}", "[redacted][redacted]"),  # the first is the endpoint's own
    ],
)
def test_the_markers_written_are_never_scanned_again(key: str, said: str, scrubbed: str) -> None:
    """A key that starts as the marker's word was found again inside the marker: ``[[redacted]]``."""
    assert _scrub(said, key) == scrubbed


@pytest.mark.parametrize(
    ("said", "scrubbed"),
    [
        (
            f"Incorrect API key provided: {KEY[:12]}****{KEY[-4:]}",
            "Incorrect API key provided: [redacted]****CRET",
        ),
        (f"bad token ...{KEY[8:]} for tenant", "bad token ...[redacted] for tenant"),
        (f"x{KEY[3:20]}y", "x[redacted]y"),
    ],
)
def test_a_key_of_the_fragment_or_longer_is_still_redacted(said: str, scrubbed: str) -> None:
    assert _scrub(said, KEY) == scrubbed
    assert _scrub(said, KEY[:_FRAGMENT]) == said.replace(KEY[:_FRAGMENT], "[redacted]")


async def test_the_backend_clients_error_keeps_an_endpoints_words_under_a_short_key(
    raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own words too: ``rejected our credenti[red[red[red[redacted]cted]cted]cted]ls``."""
    monkeypatch.setenv(ENV, "a")
    raw.routes["/v1/chat/completions"] = (500, {}, b"model ollama/llama3: Invalid API key")
    async with _http.AsyncClient() as http:
        client = BackendClient(
            _inventory(raw).backends[0], http, Timeouts(first_token_s=10, idle_s=10, probe_s=10)
        )
        with pytest.raises(BackendFailed) as raised:
            await client.chat(PAYLOAD)
    assert "model ollama/llama3: Invalid API key" in str(raised.value), str(raised.value)
    assert "[red" not in str(raised.value)
