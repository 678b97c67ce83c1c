"""Review R84: a policy error's hint quotes the file's own text (a duration as written, an
argument's name) and was written raw and whole: a line break made ``str(error)`` two lines, a
bidi override reached ``policy lint --json`` as it is, a key of 1 MB made an error of 1 MB. A hint
is now one line, each character that is not printable escaped, and bounded, as a message is
(docs/policy-reference.md: "An error is one line")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgate._shown import not_printable
from agentgate.cli.main import main
from agentgate.errors import InventoryError, PolicyError
from agentgate.policy import parse_policy


def refusal(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    return refused.value


def one_line(error: PolicyError) -> str:
    text = str(error)
    assert not any(not_printable(c) for c in text), text
    assert error.hint is not None and not any(not_printable(c) for c in error.hint), error.hint
    return text


def test_a_duration_with_line_breaks_in_it_is_quoted_as_it_reads() -> None:
    """Review R84: ``ttl_s: "8\\n\\u2028h"`` was told "28800 for 8", a line break, U+2028, "h":
    each run of spaces and line breaks was quoted as one space; since review R91 the duration is
    quoted without them, as the command line reads it."""
    error = refusal('version: 1\nroles:\n  r:\n    ttl_s: "8\\n\\u2028h"\n')
    one_line(error)
    assert error.hint is not None and error.hint.endswith("ttl_s is whole seconds, 28800 for 8h"), error.hint


def test_a_duration_padded_with_spaces_is_quoted_with_one() -> None:
    """Review R84: 100,000 spaces inside the duration were quoted in the hint, all of them."""
    error = refusal('version: 1\nroles:\n  r:\n    ttl_s: "8' + " " * 100_000 + 'h"\n')
    assert len(one_line(error)) < 400
    assert error.hint is not None and error.hint.endswith("28800 for 8h"), error.hint


def test_an_argument_named_with_a_line_break_is_written_as_yaml_reads_it_back() -> None:
    """Review R84: the hint for an argument declared by its type's name alone wrote the name raw,
    a line break and a bidi override (U+202E) in it; it writes it double-quoted, escaped."""
    error = refusal('version: 1\ntools:\n  t:\n    args:\n      "a\\nb\\u202ec": string\n')
    one_line(error)
    assert error.hint == 'write "a\\nb\\u202ec": {type: string}', error.hint


def test_an_argument_named_with_a_megabyte_is_shortened_in_the_hint() -> None:
    """Review R84: the message was bounded and the hint, quoting the same name, was 1 MB."""
    text = "version: 1\ntools:\n  t:\n    args:\n      ? " + "a" * 1_000_000 + "\n      : string\n"
    error = refusal(text)
    assert len(one_line(error)) < 1000
    assert error.hint is not None and "(1000000 characters)" in error.hint, error.hint


def test_every_hint_is_escaped_and_bounded_where_it_is_attached() -> None:
    """Whatever the code that raises it quotes, a ``SourceError``'s hint is one line of at most 300
    characters (``MAX_QUOTING``) that says how much was left out."""
    error = InventoryError("bad", file="i.yaml", hint="a\nb\u202ec" + "x" * 10_000)
    assert error.hint is not None and error.hint.startswith("a\\nb\\u202ec"), error.hint
    assert len(error.hint) <= 350 and "characters left out" in error.hint, error.hint
    assert "\n" not in str(error) and "\u202e" not in str(error)


def test_lint_json_writes_the_hint_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R84: ``policy lint --json`` wrote a raw U+202E in ``error.hint``."""
    path = tmp_path / "p.yaml"
    path.write_text('version: 1\ntools:\n  t:\n    args:\n      "a\\u202eb": string\n', encoding="utf-8")
    assert main(["policy", "lint", str(path), "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["error"]["hint"] == 'write "a\\u202eb": {type: string}', report["error"]
