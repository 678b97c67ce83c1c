"""Review R90: ``SimServer`` refused only a non-text, empty or lone-surrogate ``api_key``, and took
keys no client can present, then answered every ``/v1`` request 401: a line break (a key read
from a file) cannot be sent in a header, a trailing space is read off by HTTP parsers, and a
non-ASCII key sent as UTF-8 is read back as Latin-1. The inventory refuses such a backend key
("an Authorization header cannot carry"); the simulator now refuses it too, as it is made and
when it is changed, without quoting it."""

from __future__ import annotations

import urllib.request

import pytest

from agentgate.errors import InputError
from agentgate.sim import SimServer

_REFUSAL = (
    "api_key must be printable ASCII without whitespace, which an Authorization header can carry: it holds "
)


@pytest.mark.parametrize(
    ("key", "held"),
    [
        ("sk-test\n", "control character '\\n' (U+000A) at character 8"),
        ("sk-test ", "a space (U+0020) at character 8"),
        ("sk-\ttest", "control character '\\t' (U+0009) at character 4"),
        ("clé", "character U+00E9 at character 3"),
        ("sk-\x7f", "control character '\\x7f' (U+007F) at character 4"),
    ],
)
def test_a_key_no_header_can_carry_is_refused_without_quoting_it(key: str, held: str) -> None:
    with pytest.raises(InputError) as refused:
        SimServer(api_key=key)
    assert str(refused.value) == _REFUSAL + held
    server = SimServer(api_key="sk-old")
    with pytest.raises(InputError, match="api_key must be printable ASCII"):
        server.api_key = key
    assert server.api_key == "sk-old"


def test_a_printable_ascii_key_is_asked_for() -> None:
    key = "sk-" + "".join(chr(c) for c in range(0x21, 0x7F))
    with SimServer(api_key=key, time_scale=1e-3) as server:
        request = urllib.request.Request(
            server.url + "/v1/models", headers={"Authorization": f"Bearer {key}"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200
