"""Review R87: AGENTGATE_OPENAI_API_KEY is checked before anything is made, as the other settings
are: a key an Authorization header cannot carry (the \\r of an env file saved with CRLF endings,
white space, a control or non-ASCII character) ends the example with one line naming the setting,
never the key, and status 2, and its demo directory is never made. The examples run in this
process, as tests/test_examples_r85_base_url.py runs them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_examples_r58_endpoint import common as common  # the fixture
from test_examples_r59_endpoint import _no_endpoint_settings as _no_endpoint_settings  # autouse
from test_examples_r59_endpoint import run as run  # the fixture

NOBODY = SimpleNamespace(url="http://127.0.0.1:9/v1")
"""An endpoint nobody listens at: a key the check lets through would stop the run there."""


@pytest.mark.parametrize("name", ["support_agent.py", "research_team.py"])
@pytest.mark.parametrize(
    ("key", "first", "crlf"),
    [
        ("sk-test-0123456789\r", 19, True),
        ("sk-test-0123456789\r\n", 19, False),
        (" sk-test-0123456789", 1, False),
        ("sk-test 0123456789", 8, False),
        ("sk-test-\x1b[2J0123456789", 9, False),
        ("sk-t\u00e9st-0123456789", 5, False),
        ("sk-test-\udcff0123456789", 9, False),  # a byte of the environment that is not UTF-8
    ],
)
def test_a_key_no_header_can_carry_ends_with_one_line_before_anything_is_made(
    name: str, key: str, first: int, crlf: bool, tmp_path: Path, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R87: ``sk-test\\r`` made the store and stopped the run as an endpoint nobody listens
    at ("Connection error.: is the server running there?", status 1); a non-ASCII key printed a bare
    ``UnicodeEncodeError``."""
    status, out = run(name, NOBODY, API_KEY=key)
    assert status == 2, out[-3000:]
    assert "Traceback" not in out
    [line] = out.splitlines()
    assert line == (
        "AGENTGATE_OPENAI_API_KEY holds whitespace, control or non-ASCII characters, which an "
        f"Authorization header cannot carry (the first at character {first} of {len(key)}"
        + ("; an env file saved with CRLF endings adds a \\r" if crlf else "")
        + "): set it to the key alone (its value is not shown)"
    )
    assert "0123456789" not in out
    assert not (tmp_path / name.removesuffix(".py")).exists()


@pytest.mark.parametrize("key", ["sk-live-0123456789abcdef", "not-needed", "a.b_c~d+e/f=", "x"])
def test_a_key_of_printable_ascii_is_taken(key: str, common: Any) -> None:
    """Review R87: the check refuses only what no Authorization header carries."""
    assert common._api_key_fault(key) is None
