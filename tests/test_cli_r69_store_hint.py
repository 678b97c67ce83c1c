"""An error's hint names only options the command has (review R69): the store's errors said
"check --store or AGENTGATE_STORE" to ``grant issue``, ``delegate``, ``inspect`` and ``check``,
which take no ``--store`` (they read ``AGENTGATE_STORE`` only): following the hint was a usage
error. Checked by walking every verb of the command line under stores that are wrong in each
way a store error names."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from _cli import cli
from _raw_sqlite import opened

from agentgate.cli.main import build_parser, main


def _verbs() -> dict[str, argparse.ArgumentParser]:
    """Every verb's parser, by its command (``grant issue``)."""
    verbs: dict[str, argparse.ArgumentParser] = {}
    waiting: list[tuple[str, argparse.ArgumentParser]] = [("", build_parser())]
    while waiting:
        command, parser = waiting.pop()
        groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not groups and command:
            verbs[command] = parser
        for group in groups:
            waiting.extend((f"{command} {name}".strip(), child) for name, child in group.choices.items())
    return verbs


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


WITHOUT_STORE = {
    "grant issue": ["--issuer", "k/root.key", "--to", "k/alice.pub", "--allow", "tool:x", "--ttl", "1h"],
    "grant delegate": ["a.tok", "--as", "k/alice.key", "--to", "k/bob.pub", "--allow", "tool:x"],
    "grant inspect": ["a.tok"],
    "grant check": ["a.tok", "--as", "k/alice.key", "--trust", "k/root.pub", "--tool", "x"],
    "audit verify-proof": ["proof.txt", "--key", "k/root.pub"],
    "keys new": ["carol", "--dir", "k2"],
    "policy lint": ["policy.yaml"],
    "policy explain": ["policy.yaml", "--as", "alice", "--tool", "x"],
    "policy schema": [],
}
"""A command line for every verb that has no ``--store``, that reaches what it reads."""

WITH_STORE = {
    "grant revoke": ["a.tok"],
    "approval list": [],
    "approval sign": ["payload.json", "--as", "k/alice.key"],  # --store since review R70
    "broker inventory": [],
    "broker leases": [],
    "broker queue": [],
    "audit verify": [],
    "audit show": [],
    "audit explain": ["0"],
    "audit checkpoint": [],
    "audit prove": ["0", "--out", "proof.out"],
    "audit report": ["--out", "report.html"],
    "audit accept-repair": ["1", "--by", "me", "--reason", "checked"],
    "tasks dead-letters": [],
    "tasks breakers": [],
    "tasks unsettled": [],
    "tasks settle": ["k1", "--ran"],
    "budget held": [],
    "budget settle": ["1", "--ran"],
    "store prune": ["--older-than", "30d"],
}
"""A command line for every verb that has ``--store`` but ``serve`` (which runs until stopped)
and ``store init`` (which creates the store)."""


def _a_directory(path: Path) -> None:
    path.mkdir()


def _a_foreign_grants_table(path: Path) -> None:
    with opened(path) as conn:
        conn.execute("CREATE TABLE agentgate_grants (name TEXT)")


def _an_empty_file(path: Path) -> None:
    path.write_bytes(b"")


def _nothing(path: Path) -> None:
    """No file at all: a mistyped ``AGENTGATE_STORE``."""


STORES: dict[str, Callable[[Path], None]] = {
    "directory": _a_directory,
    "foreign table": _a_foreign_grants_table,
    "empty file": _an_empty_file,
    "missing": _nothing,
}


def test_the_verbs_without_store_are_the_ones_listed() -> None:
    """The walk below covers every verb that has no ``--store``: a new one must be added."""
    verbs = _verbs()
    assert {command for command, parser in verbs.items() if "--store" not in _options(parser)} == set(
        WITHOUT_STORE
    )
    assert set(verbs) == {*WITHOUT_STORE, *WITH_STORE, "serve", "store init"}


@pytest.mark.parametrize("store", sorted(STORES))
@pytest.mark.parametrize("command", sorted({**WITHOUT_STORE, **WITH_STORE}))
def test_a_store_error_names_no_option_the_command_lacks(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    store: str,
) -> None:
    """Review R69: ``AGENTGATE_STORE=DIR agentgate grant issue ...`` said "name a database file
    (--store or AGENTGATE_STORE)", and an ``agentgate_grants`` table of another application
    "Check --store or AGENTGATE_STORE": ``grant issue --store`` is refused by argparse. Every
    ``--flag`` an error names (outside a whole command it suggests, ``agentgate store init
    --store PATH``) is now one of the command's own options."""
    monkeypatch.chdir(tmp_path)
    for name in ("root", "alice", "bob"):
        assert main(["keys", "new", name, "--dir", "k"]) == 0
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "good.db"))
    issue = ["grant", "issue", *WITHOUT_STORE["grant issue"], "--allow", "tool:*", "--out", "a.tok"]
    assert cli(capsys, *issue)[0] == 0
    Path("policy.yaml").write_text("version: 1\n")
    Path("payload.json").write_text("{}\n")
    Path("proof.txt").write_text("no proof\n")
    STORES[store](tmp_path / "bad.db")
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "bad.db"))
    code, _, err = cli(capsys, *command.split(), *{**WITHOUT_STORE, **WITH_STORE}[command])
    assert "Traceback" not in err
    suggested = re.sub(r"agentgate [a-z-]+ [a-z-]+(?: --[a-z-]+ \S+)*", "", err)  # whole commands
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", suggested))
    assert named <= _options(_verbs()[command]), (code, err)
