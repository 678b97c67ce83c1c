"""A newcomer's first policy, written from docs/concepts.md and the command line's habits: a
capability in its one-line form, a lifetime with a unit, an argument declared by its type name.
Each is refused at its line, and the hint says what to write instead (review R73: the hints were
"see docs/policy-reference.md for this section" and "10:30 is text, not 630")."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.errors import PolicyError
from agentgate.policy import load_policy, parse_policy

_HEAD = (
    "version: 1\ntools:\n  payments.refund:\n    args: {amount: {type: number}, currency: {type: string}}\n"
)


def _refusal(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    return refused.value


@pytest.mark.parametrize("where", ["capabilities", "delegation"])
def test_a_capability_in_its_one_line_form_gets_the_mapping_to_write(where: str) -> None:
    """Review R73: docs/concepts.md writes a capability on one line (``tool:payments.refund?amount<=500``),
    as ``--allow`` takes it; in a policy that is "got text (expected a mapping)". The hint gives the
    mapping that means the same, and that mapping, written back, loads."""
    line = "tool:payments.refund?amount<=500&currency=EUR|USD"
    if where == "capabilities":
        body = f"roles:\n  r:\n    capabilities:\n      - {line}\n"
    else:
        body = (
            "roles:\n  r:\n    capabilities:\n      - resource: tool:payments.refund\n"
            f"    delegation:\n      capabilities:\n        - {line}\n"
        )
    error = _refusal(_HEAD + body)
    assert error.line == (8 if where == "capabilities" else 11), str(error)
    assert "the one-line form" in (error.hint or ""), error.hint
    mapping = (error.hint or "").split("write it as a mapping: ", 1)[1].split(" (", 1)[0]
    assert (
        mapping
        == '{resource: "tool:payments.refund", constraints: {amount: {le: 500}, currency: {in: ["EUR", "USD"]}}}'
    )
    fixed = parse_policy(_HEAD + body.replace(line, mapping), source="p.yaml")
    if where == "capabilities":
        assert str(fixed.rules["r"][0].capability) == "tool:payments.refund?amount<=500&currency=EUR|USD"


def test_text_that_is_no_capability_still_gets_the_shape_to_write() -> None:
    """Review R73: a capability line that does not parse is named as one, with the mapping's shape."""
    error = _refusal(_HEAD + "roles:\n  r:\n    capabilities:\n      - refund anything\n")
    assert "{resource: " in (error.hint or ""), error.hint


@pytest.mark.parametrize(
    ("written", "seconds", "read"),
    [
        ("1h", 3600, "1h"),
        ("30m", 1800, "30m"),
        ("90s", 90, "90s"),
        ("2d", 172800, "2d"),
        ("8 h", 28800, "8h"),
    ],
)
def test_a_lifetime_with_a_unit_gets_its_seconds(written: str, seconds: int, read: str) -> None:
    """Review R73: ``--ttl 8h`` on the command line, ``ttl_s: 8h`` in a policy; the hint was about
    sexagesimal numbers. It now says the field is in seconds and what the value is in them, the
    duration quoted as the command line reads it (``8h`` for ``8 h``, since review R91)."""
    error = _refusal(_HEAD + f"roles:\n  r:\n    ttl_s: {written}\n")
    assert error.line == 7
    assert f"ttl_s is whole seconds, {seconds} for {read}" in (error.hint or ""), error.hint


@pytest.mark.parametrize("kind", ["string", "integer", "number", "boolean"])
def test_an_argument_declared_by_its_type_name_gets_the_declaration_to_write(kind: str) -> None:
    """Review R73: ``args: {q: string}`` was "got text (expected a mapping)"; the hint now gives
    ``q: {type: string}``."""
    error = _refusal(f"version: 1\ntools:\n  search.web:\n    args: {{q: {kind}}}\n")
    assert error.line == 4
    assert f"write q: {{type: {kind}}}" in (error.hint or ""), error.hint


def test_the_hints_reach_policy_lint_as_a_reader_runs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R73: ``agentgate policy lint`` prints the hint on its one line, exit 2."""
    path = tmp_path / "p.yaml"
    path.write_text(_HEAD + "roles:\n  r:\n    capabilities:\n      - tool:payments.refund?amount<=500\n")
    assert main(["policy", "lint", str(path)]) == 2
    err = capsys.readouterr().err
    assert "write it as a mapping: {resource: " in err and err.count("\n") == 1, err
    with pytest.raises(PolicyError):
        load_policy(path)
