"""Review R92: the scan for a tab the two parsers read differently (``_disagreed``) looked up
every tab, in a quoted scalar and in a comment too: 8 MiB of comment lines holding a tab took
7 times as long to load as 8 MiB without one. A tab inside a quoted scalar now skips the rest of
the scalar, one in a comment the rest of its line (agentgate/_yaml.py, ``_first_tab``). Counted
in look-ups, not timed."""

from __future__ import annotations

import pytest
from _call_counts import calls_of
from test_yaml import _error, parser  # noqa: F401 (the fixture)

import agentgate._yaml
from agentgate._yaml import load_yaml


def test_tabs_in_a_comment_are_looked_up_once_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = calls_of(monkeypatch, agentgate._yaml, "_in_comment")
    data, _ = load_yaml("a: 1 # ?" + "\t" * 500 + "\nb: 2 #\t\t\t\n", source="p.yaml")
    assert data == {"a": 1, "b": 2}
    assert calls[0] == 2


def test_tabs_in_a_quoted_scalar_are_not_looked_up_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = calls_of(monkeypatch, agentgate._yaml, "_inside")
    data, _ = load_yaml('a: "?' + "\t" * 500 + '"\n', source="p.yaml")
    assert data == {"a": "?" + "\t" * 500}
    assert calls[0] <= 1


@pytest.mark.usefixtures("parser")
def test_a_tab_after_a_quoted_scalar_and_a_comment_is_still_found() -> None:
    error = _error('a: "x\t?"  # c\t\nb: ["y\t", \t2]\n')
    assert (error.line, error.column) == (2, 11), error
    assert "tab" in error.message, error.message
