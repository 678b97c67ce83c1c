"""Regression review (round c) of R87: ``SimServer`` refused a ``model_name`` UTF-8 cannot encode
(a lone surrogate) but took such an ``api_key``, which every ``/v1`` request compares as UTF-8:
each was then a 500 with a ``UnicodeEncodeError``. Now the key is refused with ``InputError`` as
the name is, at construction and when it is changed while serving, without quoting the key.
"""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.sim import SimServer

_KEY = "sk-secret\ud800"


def test_an_api_key_with_a_lone_surrogate_is_refused_without_quoting_it() -> None:
    with pytest.raises(InputError) as refused:
        SimServer(api_key=_KEY)
    message = str(refused.value)
    assert message.startswith("api_key must be text UTF-8 can encode")
    assert "U+D800 at character 10" in message
    assert "sk-secret" not in message


def test_a_rotated_api_key_is_checked_as_the_argument_is() -> None:
    server = SimServer(api_key="sk-old")
    with pytest.raises(InputError, match="api_key must be text UTF-8 can encode"):
        server.api_key = _KEY
    with pytest.raises(InputError, match="api_key must be text"):
        server.api_key = b"sk-new"  # type: ignore[assignment]
    assert server.api_key == "sk-old"
    server.api_key = None
    assert server.api_key is None
