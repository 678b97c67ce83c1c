"""Review R73, fuzzing the command line itself: every verb but ``serve`` (which runs until
stopped), with its own flags and positionals in any order, some left out or said twice, each given
a hostile value (empty, a dash, numbers out of range or not numbers, durations of every spelling,
text beyond ASCII, bytes that are not UTF-8 as Python hands them over, the files a verb reads), and
now and then a flag of another verb.

The earlier tests (test_cli_scripts.py) fuzz the files a verb reads and ``--args``; here it is the
arguments. Property (docs/cli.md): ``main`` returns an exit code of the contract, or argparse's
``SystemExit(2)``, and never raises anything else (a traceback); a refusal is one line,
``agentgate: error: ...``. Run in process, in a directory of its own with a real SQLite store.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentgate.cli.main import build_parser, main
from agentgate.keys import SigningKey, save_key

pytest_plugins = ["test_cli_scripts"]  # its ``work`` fixture

ROOT = Path(__file__).resolve().parents[1]


def _verbs() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every verb's parser, by its words (``("grant", "check")``), ``serve`` left out."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers:
            found[words] = parser
            return
        for name, inner in subparsers[0].choices.items():
            walk(inner, (*words, name))

    walk(build_parser(), ())
    return {words: parser for words, parser in found.items() if words != ("serve",)}


VERBS = _verbs()
ALL_FLAGS = sorted(
    {o for p in VERBS.values() for a in p._actions for o in a.option_strings if o.startswith("--")}
)

_FILES = [
    "t.tok",
    "agent.key",
    "root.key",
    "root.pub",
    "agent.pub",
    "third.pub",
    "s.db",
    "policy.yaml",
    "inventory.yaml",
    "keys",
]
"""Files the ``work`` directory holds (and ``policy.yaml``, ``inventory.yaml``, added here)."""

_HOSTILE = st.one_of(
    st.sampled_from(_FILES),
    st.sampled_from(["", " ", "-", "--", "0", "-1", "1", "2", "9" * 30, "1e999", "nan", "inf", "-0"]),
    st.sampled_from(["1m", "0s", "-5m", "1h30m", "10d", "1.5h", "P1D", "60", "1e3", "１０", "٣"]),
    st.sampled_from(
        ["tool:x", "tool:*", "model:m", "x", "a", "did:key:z6Mk", "{}", "[]", '{"a": 1}', "null"]
    ),
    st.sampled_from(["тool:x", "\u202etool:x", "x\ny", "\t", "\udcff", "é" * 300, "-x", "--json"]),
    st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=16),
)
"""Values a flag or a positional is given: no NUL (no command line can carry one)."""


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


_V = None
"""In ``BASELINES``: a flag that takes no value."""

BASELINES: dict[tuple[str, ...], list[tuple[str | None, str | None]]] = {
    ("keys", "new"): [(None, "k2"), ("--dir", "keys")],
    ("grant", "issue"): [
        ("--issuer", "root.key"),
        ("--to", "agent.pub"),
        ("--allow", "tool:x"),
        ("--ttl", "1m"),
        ("--budget", "500:usd_micros"),
        ("--purpose", "p"),
        ("--max-depth", "1"),
        ("--out", "o.tok"),
        ("--force", _V),
    ],
    ("grant", "delegate"): [
        (None, "t.tok"),
        ("--as", "agent.key"),
        ("--to", "third.pub"),
        ("--allow", "tool:x"),
        ("--ttl", "1m"),
        ("--max-depth", "0"),
        ("--out", "d.tok"),
        ("--force", _V),
    ],
    ("grant", "inspect"): [(None, "t.tok"), ("--trust", "root.pub"), ("--json", _V)],
    ("grant", "check"): [
        (None, "t.tok"),
        ("--as", "agent.key"),
        ("--trust", "root.pub"),
        ("--tool", "x"),
        ("--args", '{"a": 1}'),
        ("--json", _V),
    ],
    ("grant", "revoke"): [(None, "t.tok"), ("--reason", "r"), ("--by", "me"), ("--json", _V)],
    ("approval", "list"): [("--json", _V)],
    ("approval", "sign"): [(None, "t.tok"), ("--as", "root.key"), ("--out", "a.json")],
    ("broker", "inventory"): [("--inventory", "inventory.yaml"), ("--broker", "b"), ("--json", _V)],
    ("broker", "leases"): [("--broker", "b"), ("--json", _V)],
    ("broker", "queue"): [("--broker", "b"), ("--json", _V)],
    ("audit", "verify"): [("--key", "root.pub"), ("--json", _V)],
    ("audit", "show"): [
        ("--tool", "wörk"),
        ("--kind", "deny"),
        ("--since", "2020-01"),
        ("--from", "3"),
        ("--last", "2"),
        ("--json", _V),
    ],
    ("audit", "explain"): [(None, "5"), ("--trust", "root.pub")],
    ("audit", "checkpoint"): [("--out", "c.txt")],
    ("audit", "prove"): [(None, "5"), ("--out", "p.txt")],
    ("audit", "verify-proof"): [(None, "p.txt"), ("--key", "root.pub"), ("--origin", "o")],
    ("audit", "report"): [("--out", "r.md")],
    ("audit", "accept-repair"): [(None, "1"), ("--by", "me"), ("--reason", "r")],
    ("policy", "lint"): [(None, "policy.yaml"), ("--json", _V)],
    ("policy", "explain"): [
        (None, "policy.yaml"),
        ("--as", "support-agent"),
        ("--tool", "payments.refund"),
        ("--args", '{"amount": 10}'),
        ("--json", _V),
    ],
    ("policy", "schema"): [("--out", "s.json")],
    ("tasks", "dead-letters"): [("--limit", "5"), ("--tool", "x"), ("--json", _V)],
    ("tasks", "breakers"): [("--json", _V)],
    ("tasks", "unsettled"): [("--json", _V)],
    ("tasks", "settle"): [
        (None, "key"),
        ("--ran", _V),
        ("--by", "me"),
        ("--reason", "r"),
        ("--older-than", "1m"),
    ],
    ("budget", "held"): [("--older-than", "1m"), ("--json", _V)],
    ("budget", "settle"): [(None, "0" * 32), ("--not-run", _V), ("--by", "me"), ("--reason", "r")],
    ("store", "init"): [],
    ("store", "prune"): [("--older-than", "30d"), ("--json", _V)],
}
"""A command line of each verb that it can run in the ``hostile_work`` directory."""


@st.composite
def _changed_baselines(draw: st.DrawFn) -> list[str]:
    """A verb's baseline with one to three of its values made hostile, a flag left out, or said
    again with a hostile value: most of each line still reaches the verb's handler."""
    words = draw(st.sampled_from(sorted(BASELINES)))
    pairs = list(BASELINES[words])
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["value", "value", "drop", "again"]))
        if not pairs:
            break
        at = draw(st.integers(0, len(pairs) - 1))
        flag, value = pairs[at]
        if how == "drop":
            del pairs[at]
        elif value is not None:
            hostile = draw(_HOSTILE)
            if how == "value":
                pairs[at] = (flag, hostile)
            else:
                pairs.append((flag, hostile))
    argv = list(words)
    for flag, value in pairs:
        argv.extend(part for part in (flag, value) if part is not None)
    return argv


@st.composite
def _free_lines(draw: st.DrawFn) -> list[str]:
    """A verb with its flags and positionals in any order, any of them, each given a hostile value."""
    words = draw(st.sampled_from(sorted(VERBS)))
    argv = list(words)
    actions = _options(VERBS[words])
    chosen = draw(st.lists(st.sampled_from(actions), max_size=len(actions) + 2)) if actions else []
    for action in chosen:
        if action.option_strings:
            argv.append(draw(st.sampled_from(action.option_strings)))
        if action.nargs != 0:
            argv.append(draw(_HOSTILE))
    if draw(st.integers(0, 5)) == 0:  # a flag of another verb (or a stray value)
        argv.insert(draw(st.integers(len(words), len(argv))), draw(st.sampled_from(ALL_FLAGS) | _HOSTILE))
    return argv


_COMMAND_LINES = _changed_baselines() | _free_lines()


@pytest.fixture
def hostile_work(work: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``work`` with a third key, a policy (its keys beside it), and an inventory, as the current
    directory."""
    shutil.copy(ROOT / "policies" / "support.yaml", work / "policy.yaml")
    shutil.copy(ROOT / "policies" / "inventory.yaml", work / "inventory.yaml")
    shutil.copytree(ROOT / "policies" / "keys", work / "keys")
    save_key(SigningKey.generate(), work, "third")
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(work))
    return work


@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)
@given(argv=_COMMAND_LINES)
def test_any_command_line_is_an_exit_code_of_the_contract_never_a_traceback(
    hostile_work: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R73: any verb with its own flags in any order, given hostile values, ends in an exit
    code of docs/cli.md (0 to 3) or argparse's exit 2, never another exception; a refusal (2) says
    so on its last stderr line, ``agentgate: error: ...`` (``policy lint --json``: as JSON)."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refusing the line, after its usage and error line
        code = exc.code
        assert code in (0, 2), (argv, code)  # 0: --help
    out, err = capsys.readouterr()
    assert code in (0, 1, 2, 3), (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    if code == 2 and not err:  # policy lint --json: the error as JSON (docs/cli.md)
        assert argv[:2] == ["policy", "lint"] and json.loads(out)["valid"] is False, (argv, out)
    elif code == 2:
        assert err.splitlines()[-1].startswith("agentgate: error: "), (argv, err)
    os.chdir(hostile_work)  # a verb never moves the process, but keep each example where it starts
