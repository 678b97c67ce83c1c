"""Review R67 (a new user's first commands): what the command line says to input it cannot use."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from _cli import cli

from agentgate.authority import parse_chain
from agentgate.cli.main import build_parser
from agentgate.errors import TokenFormatError


@pytest.mark.parametrize("text", ["ag1garbage", "ag1!!", "ag1_x.y.z"])
def test_a_token_that_starts_with_ag1_but_not_ag1_dot_is_not_said_to_miss_ag1(text: str) -> None:
    """Review R67: ``ag1garbage`` was refused with ``it does not start with 'ag1'``, which it
    does: the wire form starts with ``ag1.``, and the message now names that."""
    with pytest.raises(TokenFormatError) as caught:
        parse_chain(text)
    assert "does not start with 'ag1.'" in str(caught.value)


def test_a_token_of_ag1_alone_is_not_said_to_hold_an_unsigned_link() -> None:
    """Review R67: ``ag1`` alone was refused as ``(a link is unsigned)``; it holds no link."""
    with pytest.raises(TokenFormatError) as caught:
        parse_chain("ag1")
    assert str(caught.value) == "token holds no link: ag1 must be followed by payload.signature pairs"


def test_grant_inspect_of_a_file_of_garbage_after_ag1_names_the_prefix_it_wants(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Review R67: ``agentgate grant inspect`` of a file holding ``ag1garbage!!`` said the file
    does not start with ``ag1``; one line, exit 2, naming the file and ``ag1.``."""
    token = tmp_path / "t.tok"
    token.write_text("ag1garbage!!\n")
    code, out, err = cli(capsys, "grant", "inspect", str(token))
    assert (code, out) == (2, "")
    assert err == f"agentgate: error: {token}: not an agentgate token: it does not start with 'ag1.'\n"


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (("audit", "checkpoint", "--key", "k.key"), "usage: agentgate audit checkpoint "),
        (("grant", "revoke", "t.tok", "--key", "k.key"), "usage: agentgate grant revoke "),
        (("keys", "new", "alice", "--force"), "usage: agentgate keys new "),
        (("store", "init", "extra"), "usage: agentgate store init "),
    ],
)
def test_an_unknown_option_of_a_verb_shows_that_verbs_usage(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], usage: str
) -> None:
    """Review R67: an option a verb does not take (``agentgate audit checkpoint --key k.key``)
    printed the top-level ``usage: agentgate [-h] COMMAND ...``, which names no option of the verb
    the user was typing; it now prints that verb's usage, then the one error line, exit 2."""
    code, out, err = cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith(usage), err
    assert err.splitlines()[-1].startswith("agentgate: error: unrecognized arguments: ")


def _verbs(parser: argparse.ArgumentParser, name: str) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the command line below ``parser``, with the words that reach it."""
    found = [(name, parser)]
    for action in parser._actions:  # argparse lists its subcommands nowhere else
        if isinstance(action, argparse._SubParsersAction):
            for word, child in action.choices.items():
                found += _verbs(child, f"{name} {word}")
    return found


@pytest.mark.parametrize(
    ("words", "parser"), [pytest.param(w, p, id=w) for w, p in _verbs(build_parser(), "agentgate")]
)
def test_every_verbs_help_says_what_it_does_in_plain_text(
    words: str, parser: argparse.ArgumentParser
) -> None:
    """Review R67: ``agentgate audit verify --help`` (and 18 more: every ``audit``, ``broker`` and
    ``policy`` verb, ``grant delegate``) printed the usage and options but no sentence saying what
    the verb does, though ``agentgate audit --help`` lists one for it; ``agentgate grant --help``
    printed reStructuredText markup (````agentgate grant````) and its exit codes twice."""
    shown = parser.format_help()
    assert parser.description, f"{words} --help says nothing of what it does"
    assert "``" not in shown
    assert shown.lower().count("exit codes") <= 1


def test_the_policy_groups_help_line_names_its_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R67: ``agentgate --help`` said ``policy: lint, explain and describe YAML policies``;
    there is no ``describe``: the third verb is ``schema``, which prints the policy JSON Schema."""
    code, out, _ = cli(capsys, "--help")
    line = " ".join(out.split("    policy", 1)[1].split("\n    tasks", 1)[0].split())
    assert code == 0
    assert "describe" not in line
    assert all(verb in line.lower() for verb in ("lint", "explain", "schema")), line


def test_every_store_flag_names_the_default_store_file() -> None:
    """Review R67: ``--store``'s help said ``(default: AGENTGATE_STORE, then .agentgate)`` in
    ``audit`` and ``broker``, naming a directory where the default is a file, and ``(default:
    AGENTGATE_STORE)`` in the eleven other verbs, naming no default; each now says the same,
    with the file used when AGENTGATE_STORE is unset."""
    helps = {
        words: action.help
        for words, parser in _verbs(build_parser(), "agentgate")
        for action in parser._actions
        if "--store" in action.option_strings
    }
    assert len(helps) == 22
    # ``approval sign --store`` (review R70) checks against the default store file only where it
    # exists (review R92): with none, nothing is checked, and the description says so.
    assert helps.pop("agentgate approval sign") == (
        "check what PAYLOAD shows against the Gate's store (default: AGENTGATE_STORE, else "
        ".agentgate/agentgate.db where it exists; none: not checked, and said so)"
    )
    assert set(helps.values()) == {
        "store URL or SQLite path (default: AGENTGATE_STORE, else .agentgate/agentgate.db)"
    }


@pytest.mark.parametrize("name", ["alice.key", "alice.pub"])
def test_keys_new_of_a_name_with_the_key_files_suffix_says_to_leave_it_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    """Review R67: ``agentgate keys new alice.key`` wrote ``alice.key.key`` and ``alice.key.pub``,
    which no page names, so ``--issuer keys/alice.key`` then found no key; it is now refused, one
    line naming the name to give, exit 2, nothing written."""
    code, out, err = cli(capsys, "keys", "new", name, "--dir", str(tmp_path / "keys"))
    assert (code, out) == (2, "")
    assert err == (
        f"agentgate: error: invalid key name {name!r}: NAME is the name without .key or .pub: "
        "agentgate keys new alice writes alice.key and alice.pub\n"
    )
    assert not (tmp_path / "keys").exists() or list((tmp_path / "keys").iterdir()) == []
