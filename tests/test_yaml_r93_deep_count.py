"""Review R93: without libyaml, a policy of more than 16 KiB nested deep in flow brackets took
minutes to refuse (17,000 '[': 92 s; 1 MiB of them: 276 s). The pass that counts its nodes
(``_refuse_too_many_nodes``) read every event, with no depth bound, before the composer's
depth limit (``_limit_depth``, 200 levels) applied; PyYAML's own scanner does work for each
token that grows with the flow level. The count now stops where the composer stops, and the file
is refused where it nests too deep, as a smaller one is (agentgate/_yaml.py).

A regression review of R93: the scanner's cheap walk of its possible simple keys was written for
the re-read of a text libyaml refused (``_Window``) alone; without libyaml the count and compose
passes still looked at every key for every token (17,000 '[': 1.7 s to refuse). The parser used
without libyaml (``_PureLoader``) now has it, and ``_Window`` inherits it.

Review R94: the count reads on past the composer's limit, up to libyaml's own (``_LIBYAML_DEPTH``,
1,000 levels), as libyaml's count does (tests/test_yaml_r94_count_past_depth.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
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
    monkeypatch.setattr(agentgate._yaml, "_Loader", agentgate._yaml._PureLoader)
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


def test_counting_a_long_file_stops_where_libyaml_stops(events_read: list[int]) -> None:
    _error(DEEP_AND_LONG)
    # Two passes: the count, up to the collection past ``_LIBYAML_DEPTH``, then the composer, up
    # to the one past ``_COMPOSER_DEPTH``.
    most = agentgate._yaml._LIBYAML_DEPTH + agentgate._yaml._COMPOSER_DEPTH + 20
    assert events_read[0] <= most, events_read[0]


def test_without_libyaml_the_loader_walks_only_the_simple_keys_it_needs() -> None:
    # A fresh interpreter, where PyYAML has no libyaml when agentgate._yaml picks its parser:
    # PyYAML's own walk of every possible simple key is never called, and the error is the same.
    code = textwrap.dedent(
        """
        import yaml
        del yaml.CSafeLoader
        from yaml.scanner import Scanner
        import agentgate._yaml as Y
        from agentgate.errors import PolicyError
        from agentgate.policy import parse_policy

        assert issubclass(Y._Window, Y._Loader)  # the re-read is the same parser, bounded
        calls = []
        for name in ("next_possible_simple_key", "stale_possible_simple_keys"):
            walk = getattr(Scanner, name)
            setattr(Scanner, name, lambda self, walk=walk, name=name: calls.append(name) or walk(self))
        try:
            parse_policy("a: " + "[" * 17000, source="p.yaml")
        except PolicyError as error:
            print(error.line, error.column, error.message)
        print(len(calls))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    located, calls = result.stdout.splitlines()
    assert located.startswith("1 103 nested more than 100 levels deep"), located
    assert calls == "0", calls
