"""Review R93: without libyaml, a policy of more than 16 KiB nested deep in flow brackets took
minutes to refuse (17,000 '[': 92 s; 1 MiB of them: 276 s). The pass that counts its nodes
(``_refuse_too_many_nodes``) read every event, with no depth bound, before the composer's
depth limit (``_limit_depth``, 200 levels) applied; PyYAML's own scanner does work for each
token that grows with the flow level. The count now stops where the composer stops, and the file
is refused where it nests too deep, as a smaller one is (agentgate/_yaml.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from test_yaml import _error

import agentgate._yaml

DEEP_AND_LONG = "version: 1\nx:\n" + " [\n" * 6000
"""18 KiB, past ``_COUNT_ABOVE`` (16 KiB): a '[' a line keeps the scanner cheap, so that the
old count, reading all 6,000 levels, fails this test fast rather than slowly."""


@pytest.fixture
def events_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many events PyYAML's own parsers hand out, with libyaml out of the way."""
    monkeypatch.setattr(agentgate._yaml, "_Loader", yaml.SafeLoader)
    read = [0]
    get_event = yaml.parser.Parser.get_event

    def counted(self: yaml.parser.Parser) -> yaml.Event:
        read[0] += 1
        return get_event(self)

    monkeypatch.setattr(yaml.parser.Parser, "get_event", counted)
    yield read


def test_a_long_file_nested_deep_is_refused_where_it_nests_too_deep(events_read: list[int]) -> None:
    assert len(DEEP_AND_LONG) > agentgate._yaml._COUNT_ABOVE
    error = _error(DEEP_AND_LONG)
    assert "nested more than 100 levels deep" in error.message, error.message
    assert (error.line, error.column) == (102, 2), error


def test_counting_a_long_file_stops_where_the_composer_stops(events_read: list[int]) -> None:
    _error(DEEP_AND_LONG)
    # Two passes (count, then compose), each up to the collection past ``_COMPOSER_DEPTH``.
    assert events_read[0] <= 2 * (agentgate._yaml._COMPOSER_DEPTH + 10), events_read[0]
