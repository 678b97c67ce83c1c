"""A newcomer's path: the wheel built from the checkout, installed with its
`langgraph` extra into a fresh Python 3.11 venv, then README.md, docs/quickstart.md, docs/cli.md
and docs/policy-reference.md followed literally in an empty directory outside the checkout.

What holds (checked by hand in that venv; the quickstart's blocks also run in
tests/test_langgraph_newcomer.py and tests/test_docs_quickstart.py): the wheel carries
`agentgate/py.typed` and the `agentgate` entry point, `python -m agentgate` is the same command;
every verb's `--help` matches the flags docs/cli.md lists; the quickstart's `keys new`, `policy
lint`, Python blocks (both resumes, `create_agent` with the middleware) and `audit verify` give
exactly the output shown (`intact: 6 entries, ..., 0 checkpoints`), also without `gate.close()`
(the gate flushes at exit); the quickstart's warning that pip reuses a stale `build/` is true
(a removed module is still in the second wheel); `agentgate policy schema` equals
policies/policy.schema.json; the policy reference's YAML 1.2 scalar rules (`NO`, `1_000`,
`0b101`, `0755`, `10:30`, ...), its empty-file and null-operator errors and its
`file:line:column` error example hold; `approval sign`'s output resumes a run as `Command(resume=)`;
every reading verb refuses a missing store without creating it.

What did not hold, fixed in the docs (this file pins each):
- docs/policy-reference.md showed `agentgate grant issue --policy FILE --role ROLE --to DID`:
  `--issuer` is required, so the line as printed was exit 2.
- docs/cli.md said `grant check`'s "exit 3 appears once a policy with approval rules is in use":
  the verb reads no policy, so it prints `allow` (exit 0) for a call the policy puts behind an
  approval gate, and never exits 3.
- docs/cli.md's `audit prove` row did not say that it signs and stores a checkpoint when the log
  has grown past the last one, nor that it always needs the log key (an auditor with only
  `log.pub` gets exit 2).
- docs/quickstart.md copied support.yaml, whose first line points editors at
  `./policy.schema.json`, without saying that file is not in the installed package.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import shutil
from pathlib import Path

import pytest

from agentgate.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _verb_parser(words: list[str]) -> argparse.ArgumentParser | None:
    """The parser of ``agentgate GROUP [VERB]`` named by ``words`` (``words[0]`` is "agentgate")."""
    parser = build_parser()
    for word in words[1:3]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return parser
        if word not in subs[0].choices:
            return None
        parser = subs[0].choices[word]
    return parser


def _missing_required(parser: argparse.ArgumentParser, mandatory: set[str]) -> list[str]:
    missing = [
        a.option_strings[0]
        for a in parser._actions
        if a.required and a.option_strings and not set(a.option_strings) & mandatory
    ]
    for group in parser._mutually_exclusive_groups:
        # A positional in the group (``grant revoke TOKENFILE|ID | --holder DID``) may be the
        # word the line gives: such a group is not judged.
        if any(not a.option_strings for a in group._group_actions):
            continue
        if group.required and not any(set(a.option_strings) & mandatory for a in group._group_actions):
            missing.append("|".join(a.option_strings[0] for a in group._group_actions))
    return missing


def test_every_documented_command_line_names_the_flags_its_verb_requires() -> None:
    # An inline `agentgate ...` span with two flags or more is a command line a reader copies; one
    # flag alone (`agentgate grant check --trust NEW`) is a reference to that flag.
    checked, wrong = 0, []
    for doc in DOCS:
        for span in re.findall(r"`(agentgate [^`\n]+)`", doc.read_text(encoding="utf-8")):
            words = span.replace("[", " [ ").replace("]", " ] ").split()
            if sum(w.startswith("--") for w in words) < 2:
                continue
            parser = _verb_parser(words)
            if parser is None:
                continue
            depth, mandatory = 0, set()
            for word in words:  # what [...] holds is optional: it does not supply a required flag
                depth += (word == "[") - (word == "]")
                if depth == 0:
                    mandatory |= {part for part in word.strip("()").split("|")}
            checked += 1
            if missing := _missing_required(parser, mandatory):
                wrong.append(f"{doc.name}: `{span}` lacks {missing}")
    assert checked >= 20, checked  # the docs' command lines were found
    assert not wrong, wrong


def test_every_command_in_a_shell_block_parses_as_the_command_line_reads_it() -> None:
    checked, wrong = 0, []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.findall(r"^ *```(?:sh|bash|shell|console)\n(.*?)^ *```", text, re.S | re.M):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip().removeprefix("$ ")
                line = re.sub(r"^(?:[A-Z_]+=\S*\s+)+", "", line)  # VAR=value prefixes
                match = re.match(r"(?:\S*/)?agentgate\s+([^|;&<>]*)", line) or re.match(
                    r"\S*python3?\s+-m\s+agentgate\s+([^|;&<>]*)", line
                )
                if not match:
                    continue
                argv = shlex.split(match.group(1).replace(">", " "))
                err = io.StringIO()
                try:
                    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                        build_parser().parse_args(argv)
                except SystemExit as exit_:
                    if exit_.code:
                        wrong.append(f"{doc.name}: {line}: {err.getvalue().strip().splitlines()[-1:]}")
                checked += 1
    assert checked >= 10, checked
    assert not wrong, wrong


@pytest.fixture
def newbie(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty directory with the quickstart's step 2 done: support.yaml copied, keys made."""
    shutil.copy(ROOT / "policies" / "support.yaml", tmp_path / "support.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    for name in ("ops-root", "support-agent", "alice", "bob"):
        assert main(["keys", "new", name, "--dir", "keys"]) == 0
    return tmp_path


def test_the_policy_references_role_grant_line_runs_and_grant_check_reads_no_policy(
    newbie: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (ROOT / "docs" / "policy-reference.md").read_text(encoding="utf-8")
    line = re.search(r"`(agentgate grant issue [^`]*--role ROLE[^`]*)`", text)
    assert line is not None
    fill = {"KEYFILE": "keys/ops-root.key", "FILE": "support.yaml", "ROLE": "support-agent"}
    fill["DID"] = "keys/support-agent.pub"
    argv = [fill.get(word, word) for word in shlex.split(line.group(1))[1:]]
    assert main([*argv, "--out", "agent.tok"]) == 0, capsys.readouterr().err

    # docs/cli.md, grant check: the chain alone decides; 800 EUR is behind support.yaml's
    # large-refund gate, which policy explain reports (3) and grant check cannot see (0, allow).
    refund = '{"order_id": "O-77", "amount": 800, "currency": "EUR"}'
    check = ["grant", "check", "agent.tok", "--as", "keys/support-agent.key"]
    capsys.readouterr()
    assert main([*check, "--trust", "keys/ops-root.pub", "--tool", "payments.refund", "--args", refund]) == 0
    assert capsys.readouterr().out.startswith("allow: ")
    explain = ["policy", "explain", "support.yaml", "--as", "support-agent", "--tool", "payments.refund"]
    assert main([*explain, "--args", refund]) == 3
    cli = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "Exit 3 appears once a policy with approval rules is in use" not in cli
    assert "`check` decides the chain alone" in cli


def test_audit_prove_signs_a_checkpoint_so_it_needs_the_log_key(
    newbie: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    issue = ["grant", "issue", "--issuer", "keys/ops-root.key", "--to", "keys/alice.pub"]
    for token in ("a.tok", "b.tok"):
        assert main([*issue, "--allow", "tool:x", "--ttl", "1h", "--out", token]) == 0
    assert main(["grant", "revoke", "a.tok"]) == 0  # audit entry 0
    assert main(["audit", "checkpoint"]) == 0
    assert main(["grant", "revoke", "b.tok"]) == 0  # entry 1: the log grew past its checkpoint

    def checkpoints() -> int:
        capsys.readouterr()
        assert main(["audit", "verify"]) == 0
        found = re.search(r"(\d+) checkpoints?\b", capsys.readouterr().out)
        assert found is not None
        return int(found.group(1))

    assert checkpoints() == 1
    assert main(["audit", "prove", "0", "--out", "p.bundle"]) == 0
    assert checkpoints() == 2  # prove signed and stored one of the grown log
    assert main(["audit", "prove", "1", "--out", "p.bundle"]) == 0
    assert checkpoints() == 2  # and reuses it while the log has not grown

    # With only log.pub (the private key moved away), prove is exit 2 and writes no bundle, also
    # when the stored checkpoint covers the whole log, as here.
    (newbie / ".agentgate" / "log.key").rename(newbie / "log.key.away")
    assert main(["audit", "prove", "0", "--out", "q.bundle"]) == 2
    assert not (newbie / "q.bundle").exists()
    assert main(["audit", "verify-proof", "p.bundle", "--key", ".agentgate/log.pub"]) == 0
    row = next(
        r for r in (ROOT / "docs" / "cli.md").read_text().splitlines() if r.startswith("| `audit prove")
    )
    assert "needs the log key" in row
