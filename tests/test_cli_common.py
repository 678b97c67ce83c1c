"""The command line's shared helpers (agentgate/cli/_common.py): opening the store a verb names,
the one-line errors they print, argument characters and times as a person reads them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentgate.cli._common import json_object, utc
from agentgate.cli.main import main
from agentgate.errors import InputError


@pytest.mark.parametrize("verb", [["audit", "verify"], ["tasks", "unsettled"]])
def test_a_read_verb_never_prints_the_password_of_a_connection_string(
    verb: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", "host=db.example password=hunter2 dbname=agentgate")
    assert main(verb) == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err
    assert "postgresql://" in err


def test_an_argument_byte_that_is_not_utf8_is_named_as_a_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R47 (docs helper): ``--purpose`` with a byte that is not UTF-8 was refused as a "control
    character '\\udcff'"; a real control character is still named as one."""
    import os

    from agentgate.cli.main import main

    keys = str(tmp_path / "k")
    assert main(["keys", "new", "a", "--dir", keys]) == 0
    base = ["grant", "issue", "--issuer", f"{keys}/a.key", "--to", f"{keys}/a.pub", "--allow", "tool:x"]
    capsys.readouterr()
    assert main([*base, "--ttl", "1h", "--purpose", os.fsdecode(b"ab\xffc")]) == 2
    assert "--purpose holds a byte that is not UTF-8 (0xff)" in capsys.readouterr().err
    assert main([*base, "--ttl", "1h", "--purpose", "ab\x1bc"]) == 2
    assert "--purpose holds control character '\\x1b'" in capsys.readouterr().err
    assert main(["keys", "new", os.fsdecode(b"a\xffb"), "--dir", keys]) == 2
    assert "a byte that is not UTF-8 (0xff)" in capsys.readouterr().err


def test_the_lowest_byte_that_is_not_utf8_is_named_as_a_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills y6: ``unprintable`` naming only ``\\udc81``..``\\udcff`` as bytes (``<`` for ``<=``),
    so a stray 0x80 is called a control character. Rule: every byte an argument holds that is
    not UTF-8, 0x80 included, is named as that byte."""
    assert main(["keys", "new", os.fsdecode(b"a\x80b"), "--dir", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err
    assert "a byte that is not UTF-8 (0x80)" in err and "control character" not in err
    assert not (tmp_path / "k").exists() or not list((tmp_path / "k").iterdir())


def test_a_time_no_calendar_holds_is_shown_as_a_dash() -> None:
    """Kills y9: ``utc`` returning ``utc_text``'s ``None`` for a time beyond the years a datetime
    holds. Rule: the CLI shows such a time as ``-``, always a string, never ``None``."""
    assert utc(0) == "1970-01-01T00:00:00Z"
    assert utc(1e20) == "-" and utc(-1e20) == "-"
    assert utc(float("inf")) == "-" and utc(None) == "-"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"amount": 100.00000000000000001}', "'amount'"),
        ('{"amount": 1e-400}', "'amount'"),
        ('{"items": [{"price": 0.1}, {"price": 9007199254740993.0}]}', "'items'[1]'price'"),
    ],
)
def test_a_json_number_no_float_holds_as_written_is_refused_naming_the_argument(
    text: str, where: str
) -> None:
    # R53: ``--args '{"amount": 100.00000000000000001}'`` was read as 100.0, so a bound
    # ``amount<=100`` allowed a call whose written amount is above it.
    with pytest.raises(InputError, match="no float holds") as caught:
        json_object(text)
    assert where in str(caught.value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"n": 9.223372036854775808e18}', 2.0**63),
        ('{"n": -9223372036854775808.0}', -(2.0**63)),
        ('{"n": 0.1000000000000000055511151231257827021181583404541015625}', 0.1),
        ('{"n": 5e-324}', 5e-324),
    ],
)
def test_a_json_number_written_as_the_float_s_exact_value_is_accepted(text: str, value: float) -> None:
    """Review R56: --args '{"n": 9.223372036854775808e18}', exactly 2**63, was refused as a number
    no float holds; the rounded neighbours still are."""
    assert json_object(text) == {"n": value}
    rounded = text.replace("808", "807").replace("625", "626")
    if rounded != text:
        with pytest.raises(InputError, match="no float holds"):
            json_object(rounded)


def test_json_numbers_a_float_holds_as_written_stay_accepted() -> None:
    text = (
        '{"a": 0.1, "b": 1e2, "c": -0.0, "d": 5e-324, "e": 100.000000, "f": 123456789012345678901234567890}'
    )
    assert json_object(text) == {
        "a": 0.1,
        "b": 100.0,
        "c": -0.0,
        "d": 5e-324,
        "e": 100.0,
        "f": 123456789012345678901234567890,
    }


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '{"n": 1e400}',
            "--args: holds a number beyond the range of a float (such as 1e400, read as infinity); "
            "give it in range, or as text",
        ),
        ('{"a": "\\ud800"}', "--args: holds \\ud800, half of a UTF-16 pair alone: not Unicode text"),
    ],
)
def test_arguments_that_parse_but_are_no_value_are_said_so_in_words(text: str, said: str) -> None:
    """Review R55: --args of 1e400 or a lone surrogate was refused with Python's own words ('Out
    of range float values are not JSON compliant', "'utf-8' codec can't encode character")."""
    with pytest.raises(InputError) as refused:
        json_object(text)
    assert str(refused.value) == said
