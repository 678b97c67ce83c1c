"""Free text the command line records (a revocation's ``--reason`` and ``--by``, a grant's
``--purpose``, ``tasks settle``'s ``--reason`` and ``--by``) and names it writes (``keys new``):
one line of text, of bounded length, refused with one error line naming the flag, the character
by its kind and code point, and where it is (docs/cli.md, Conventions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_grant import cli, env, issue_and_delegate  # noqa: F401 (env is a fixture)

from agentgate.cli.main import main

GRANT_ID = "0" * 64

HOSTILE = [
    ("x\x1b[31m", "control character '\\x1b' (U+001B) at character 2"),
    ("x\x7f", "control character '\\x7f' (U+007F) at character 2"),
    ("x\x85y", "control character '\\x85' (U+0085) at character 2"),
    ("ab\u202ecd", "bidirectional-text control character U+202E at character 3"),
    ("\u2066x", "bidirectional-text control character U+2066 at character 1"),
    ("a\u2028b", "line separator U+2028 at character 2"),
]


def _one_error_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(("value", "said"), HOSTILE)
@pytest.mark.parametrize("flag", ["--reason", "--by"])
def test_revoke_refuses_a_control_or_bidi_character_in_recorded_text(
    flag: str, value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: grant revoke --reason/--by took control and bidi characters into the audit entry."""
    code, out, err = cli(capsys, "grant", "revoke", GRANT_ID, flag, value, "--store", "/nonexistent/s.db")
    assert code == 2 and out == ""
    assert _one_error_line(err) == f"agentgate: error: {flag} holds {said}; write one line of text\n"


@pytest.mark.parametrize(("value", "said"), HOSTILE[:4])
@pytest.mark.parametrize("flag", ["--reason", "--by"])
def test_settle_refuses_a_control_or_bidi_character_in_recorded_text(
    flag: str, value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: tasks settle --reason/--by took control and bidi characters into the audit entry."""
    code, out, err = cli(capsys, "tasks", "settle", "k", "--ran", flag, value, "--store", "/nonexistent/s.db")
    assert code == 2 and out == ""
    assert _one_error_line(err) == f"agentgate: error: {flag} holds {said}; write one line of text\n"


@pytest.mark.parametrize("verb", [("grant", "revoke", GRANT_ID), ("tasks", "settle", "k", "--ran")])
def test_a_reason_over_a_thousand_characters_is_refused(
    verb: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: grant revoke --reason took 100 KB into the audit entry; at most 1,000 characters."""
    code, out, err = cli(capsys, *verb, "--reason", "a" * 100_000, "--store", "/nonexistent/s.db")
    assert code == 2 and out == ""
    assert _one_error_line(err) == "agentgate: error: --reason is 100,000 characters long; at most 1,000\n"


def test_a_reason_of_a_thousand_characters_is_recorded(
    env: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    issue_and_delegate(capsys)
    code, _, err = cli(capsys, "grant", "revoke", "b.tok", "--reason", "r" * 1001)
    assert code == 2 and "--reason is 1,001 characters long" in err
    assert cli(capsys, "grant", "revoke", "b.tok", "--reason", "r" * 1000, "--by", "ops \u00e9quipe")[0] == 0
    code, out, _ = cli(capsys, "audit", "show", "--kind", "revoke", "--json")
    (entry,) = [json.loads(line) for line in out.splitlines()]  # the refused one left no entry
    assert (entry["principal"], entry["reasons"]) == ("ops \u00e9quipe", ["r" * 1000])


def test_purpose_names_a_bidi_override_and_its_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: --purpose called a bidi override a "control character '\\u202e'"; over 256
    characters the library's error did not name the flag."""
    keys = str(tmp_path / "k")
    assert main(["keys", "new", "a", "--dir", keys]) == 0
    base = [
        "grant",
        "issue",
        "--issuer",
        f"{keys}/a.key",
        "--to",
        f"{keys}/a.pub",
        "--allow",
        "tool:x",
        "--ttl",
        "1h",
    ]
    capsys.readouterr()
    code, _, err = cli(capsys, *base, "--purpose", "pay \u202eEUR")
    assert code == 2
    assert err == (
        "agentgate: error: --purpose holds bidirectional-text control character U+202E at character 5; "
        "write one line of text\n"
    )
    code, _, err = cli(capsys, *base, "--purpose", "p" * 257)
    assert (code, err) == (2, "agentgate: error: --purpose is 257 characters long; at most 256\n")


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("a\u202eb", "bidirectional-text control character U+202E"),
        ("a\u200fb", "bidirectional-text control character U+200F"),
        ("a\u200bb", "invisible format character U+200B"),
        ("a\x1bb", "control character '\\x1b' (U+001B)"),
    ],
)
def test_keys_new_names_the_kind_of_character_it_refuses(
    name: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: keys new called a bidi override (U+202E) "a control character"."""
    assert main(["keys", "new", name, "--dir", str(tmp_path / "k")]) == 2
    shown = repr(name)
    assert (
        capsys.readouterr().err
        == f"agentgate: error: invalid key name {shown}: {said}; use a plain file name\n"
    )
    assert not (tmp_path / "k").exists()


@pytest.mark.parametrize(
    ("cap", "said"),
    [
        ("tool:x?note=\x1b[31m", "control character '\\x1b' (U+001B) at character 13"),
        ("tool:x?note=a\u202eb", "bidirectional-text control character U+202E at character 14"),
    ],
)
def test_allow_refuses_a_control_or_bidi_character_naming_its_position(
    cap: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: --allow 'tool:x?note=<ESC>[31m' was signed into a grant (escaped on output)."""
    keys = str(tmp_path / "k")
    assert main(["keys", "new", "a", "--dir", keys]) == 0
    capsys.readouterr()
    code, out, err = cli(capsys, "grant", "issue", "--issuer", f"{keys}/a.key", "--to", f"{keys}/a.pub",
                         "--allow", cap, "--ttl", "1h", "--out", str(tmp_path / "a.tok"))  # fmt: skip
    assert (code, out) == (2, "")
    assert _one_error_line(err) == f"agentgate: error: --allow holds {said}; write one line of text\n"
    assert not (tmp_path / "a.tok").exists()
