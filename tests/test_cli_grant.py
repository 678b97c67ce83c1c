"""The `agentgate keys` and `agentgate grant` commands: verbs, flags and exit codes are a contract."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import cli

from agentgate.authority import issue
from agentgate.cli.grant import parse_duration
from agentgate.cli.main import main
from agentgate.errors import InputError
from agentgate.keys import SigningKey, load_signing_key, save_key

REFUND = "tool:payments.refund?amount<=500&currency=EUR|USD"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    monkeypatch.chdir(tmp_path)
    for name in ("root", "alice", "bob"):
        assert main(["keys", "new", name, "--dir", "k"]) == 0
    return tmp_path


def issue_and_delegate(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub", "--allow", REFUND,
               "--allow", "tool:search.*", "--ttl", "1h", "--budget", "1000000", "--out", "a.tok")[0] == 0  # fmt: skip
    assert cli(capsys, "grant", "delegate", "a.tok", "--as", "k/alice.key", "--to", "k/bob.pub", "--allow",
               "tool:payments.refund?amount<=100&currency=EUR", "--ttl", "10m", "--out", "b.tok")[0] == 0  # fmt: skip


CHECK_AS_BOB = ("grant", "check", "b.tok", "--as", "k/bob.key", "--trust", "k/root.pub", "--tool")
"""``grant check`` of the delegated token b.tok as its holder, against the root key: the tool follows."""


def test_keys_new_writes_a_private_0600_key_and_prints_the_did(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "keys", "new", "carol", "--dir", "k")
    assert code == 0 and out.startswith("did:key:z6Mk")
    assert stat.S_IMODE((env / "k" / "carol.key").stat().st_mode) == 0o600
    assert (env / "k" / "carol.pub").read_text().strip() == out.strip()
    code, _, err = cli(capsys, "keys", "new", "carol", "--dir", "k")
    assert code == 2 and "already exists" in err


def test_issue_delegate_check_revoke(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue_and_delegate(capsys)
    check = [*CHECK_AS_BOB, "payments.refund"]
    code, out, _ = cli(capsys, *check, "--args", '{"amount": 50, "currency": "EUR"}')
    assert code == 0 and out.startswith("allow:")
    code, out, _ = cli(capsys, *check, "--args", '{"amount": 150, "currency": "EUR"}', "--json")
    decision = json.loads(out)
    assert code == 1 and decision["outcome"] == "deny"
    assert {"kind", "code", "message"} <= set(decision["findings"][0])
    assert decision["findings"][0]["kind"] == "scope_creep"
    code, out, _ = cli(capsys, "grant", "revoke", "a.tok")
    assert code == 0 and out.startswith("revoked ") and "1 recorded descendant" in out
    code, out, _ = cli(capsys, *check, "--args", '{"amount": 50, "currency": "EUR"}', "--json")
    assert code == 1 and json.loads(out)["findings"][0]["code"] == "revoked"
    code, out, _ = cli(capsys, "grant", "inspect", "b.tok")
    assert code == 1 and "REVOKED" in out  # a marked link exits 1 (review R61)


def test_revoke_by_id(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue_and_delegate(capsys)
    code, out, _ = cli(capsys, "grant", "inspect", "b.tok", "--json")
    tip = json.loads(out)["tip"]
    assert cli(capsys, "grant", "revoke", tip)[0] == 0
    code, out, _ = cli(capsys, *CHECK_AS_BOB, "payments.refund", "--args", '{"amount": 5, "currency": "EUR"}')
    assert code == 1 and "revoked" in out


def test_revoke_refuses_a_store_that_does_not_exist(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``grant revoke ID`` with a mistyped ``--store`` (or run from the wrong directory, with the
    default ``.agentgate/agentgate.db``) created a new store there, recorded the revocation in it,
    printed ``revoked ID`` and exited 0: no gateway reads that store, so the grant stayed live.
    Rule: as ``--holder``, exit 2 and one line naming the store and how to create one; no file,
    no log key written; the store in use still holds the grant unrevoked."""
    issue_and_delegate(capsys)
    code, out, _ = cli(capsys, "grant", "inspect", "a.tok", "--json")
    tip = json.loads(out)["tip"]
    typo = env / "sotre.db"
    for argv in (["--store", str(typo)], ["--store", str(typo), "--json"]):
        for target in (tip, "a.tok"):
            code, out, err = cli(capsys, "grant", "revoke", target, *argv)
            assert code == 2 and out == "", (code, out)
            lines = err.splitlines()
            assert len(lines) == 1 and f"no store at {typo}" in lines[0], err
            assert f"agentgate store init --store {typo}" in lines[0], err
            assert not typo.exists() and not (env / "log.key").exists()
    # The default store, from a directory that has none: refused too, nothing created there.
    elsewhere = env / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("AGENTGATE_STORE")
    code, out, err = cli(capsys, "grant", "revoke", tip)
    assert code == 2 and out == "" and "no store at .agentgate/agentgate.db" in err
    assert "agentgate store init --store .agentgate/agentgate.db" in err
    assert not (elsewhere / ".agentgate").exists()
    # What the error line says to run makes a store that the same command then revokes in.
    assert cli(capsys, "store", "init", "--store", ".agentgate/agentgate.db")[0] == 0
    code, out, _ = cli(capsys, "grant", "revoke", tip)
    assert code == 0 and out == f"revoked {tip}\n"
    monkeypatch.chdir(env)
    monkeypatch.setenv("AGENTGATE_STORE", str(env / "store.db"))
    code, out, _ = cli(capsys, "grant", "inspect", "a.tok", "--json")
    assert [link["revoked"] for link in json.loads(out)["links"]] == [False]


def test_check_refuses_a_store_that_does_not_exist_instead_of_allowing_a_revoked_grant(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``grant check`` with ``AGENTGATE_STORE`` mistyped (or run from another directory, with the
    default ``.agentgate/agentgate.db``) created a new store there and decided against its empty
    revocation list: a revoked chain printed ``allow`` and exited 0. An empty file, or another
    application's SQLite file, was opened as a store the same way (agentgate's tables written
    into it). Rule: a check that cannot read the revocation state fails closed: exit 2, one line
    naming the store and how to create one, no decision printed, nothing created or written."""
    import sqlite3

    issue_and_delegate(capsys)
    assert cli(capsys, "grant", "revoke", "a.tok")[0] == 0
    check = [*CHECK_AS_BOB, "payments.refund", "--args", '{"amount": 50, "currency": "EUR"}']
    typo = env / "typo" / "stor.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(typo))
    for json_flag in ([], ["--json"]):
        code, out, err = cli(capsys, *check, *json_flag)
        assert code == 2 and out == "", (code, out)
        lines = err.splitlines()
        assert len(lines) == 1 and f"no store at {typo}: check AGENTGATE_STORE;" in lines[0], err
        assert f"agentgate store init --store {typo}" in lines[0], err
    assert not (env / "typo").exists()
    empty = env / "empty.db"
    empty.touch()
    foreign, named = env / "other-app.db", env / "other-wal.db"
    with contextlib.closing(sqlite3.connect(foreign)) as db:
        db.execute("CREATE TABLE customers (id INTEGER)")
        db.commit()
    with contextlib.closing(sqlite3.connect(named)) as db:  # WAL mode, a table of agentgate's name
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE audit_log (id INTEGER)")
        db.commit()
    before = {path: path.read_bytes() for path in (foreign, named)}
    for path in (empty, foreign, named):
        monkeypatch.setenv("AGENTGATE_STORE", str(path))
        code, out, err = cli(capsys, *check)
        assert code == 2 and out == "" and len(err.splitlines()) == 1 and f"{path}" in err, (code, out, err)
    assert empty.stat().st_size == 0 and {path: path.read_bytes() for path in before} == before
    # The default store, from a directory that has none: refused too, nothing created there.
    elsewhere = env / "elsewhere"
    elsewhere.mkdir()
    for name in ("b.tok", "k"):
        (elsewhere / name).symlink_to(env / name)
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("AGENTGATE_STORE")
    code, out, err = cli(capsys, *check)
    assert code == 2 and out == "" and "no store at .agentgate/agentgate.db" in err
    assert "agentgate store init --store .agentgate/agentgate.db" in err
    assert not (elsewhere / ".agentgate").exists()
    # The store in use: the revoked chain is denied, as ever.
    monkeypatch.chdir(env)
    monkeypatch.setenv("AGENTGATE_STORE", str(env / "store.db"))
    code, out, _ = cli(capsys, *check)
    assert code == 1 and "revoked" in out
    assert sorted(p.name for p in env.glob("*.db")) == [
        "empty.db",
        "other-app.db",
        "other-wal.db",
        "store.db",
    ]


def test_delegate_refuses_a_store_that_does_not_exist_instead_of_delegating_under_a_revoked_parent(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``grant delegate`` checked the parent chain's revocation in a store it created where
    ``AGENTGATE_STORE`` was mistyped: under a revoked parent it wrote the child's token and
    exited 0. Rule: exit 2, one line naming the store and how to create one; no token written,
    no store created; against the store in use, the revoked parent is a deny (exit 1)."""
    issue_and_delegate(capsys)
    assert cli(capsys, "grant", "revoke", "a.tok")[0] == 0
    delegate = ["grant", "delegate", "a.tok", "--as", "k/alice.key", "--to", "k/bob.pub", "--allow",
                "tool:search.web", "--ttl", "5m", "--out", "c.tok"]  # fmt: skip
    typo = env / "sotre.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(typo))
    for out_flag in (delegate, delegate[:-2]):  # to a file, and to stdout
        code, out, err = cli(capsys, *out_flag)
        assert code == 2 and out == "", (code, out)
        lines = err.splitlines()
        assert len(lines) == 1 and f"no store at {typo}: check AGENTGATE_STORE;" in lines[0], err
        assert f"agentgate store init --store {typo}" in lines[0], err
    assert not typo.exists() and not (env / "c.tok").exists()
    monkeypatch.setenv("AGENTGATE_STORE", str(env / "store.db"))
    code, out, err = cli(capsys, *delegate)
    assert code == 1 and out == "" and "revoked" in err and not (env / "c.tok").exists()


def test_revoking_a_revoked_grant_again_writes_nothing_and_says_so(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A retried script revoked again: a second ``revoke`` audit entry (a later time, another
    reason, another ``--by``) for a grant revoked before, and "revoked ID" / ``"revoked": [ID]``
    as if it had just been. Rule: as ``--holder``, a grant already revoked is left as it is."""
    issue_and_delegate(capsys)
    code, out, _ = cli(capsys, "grant", "inspect", "b.tok", "--json")
    tip = json.loads(out)["tip"]
    code, out, _ = cli(capsys, "grant", "revoke", tip, "--reason", "first", "--json")
    assert code == 0 and json.loads(out) == {
        "revoked": [tip],
        "already_revoked": [],
        "descendants": [],
        "recorded": True,
    }
    code, out, _ = cli(capsys, "grant", "revoke", "b.tok", "--reason", "again", "--by", "cron", "--json")
    assert code == 0 and json.loads(out) == {
        "revoked": [],
        "already_revoked": [tip],
        "descendants": [],
        "recorded": True,
    }
    code, out, _ = cli(capsys, "grant", "revoke", tip)
    assert code == 0 and out == f"already revoked (nothing written) {tip}\n"
    code, out, _ = cli(capsys, "audit", "show", "--kind", "revoke", "--json")
    entries = [json.loads(line) for line in out.splitlines()]
    assert [(e["chain_hash"], e["principal"], e["reasons"]) for e in entries] == [
        (tip, "operator", ["first"])
    ]
    assert cli(capsys, "audit", "verify")[0] == 0


def test_inspect_creates_no_store_and_says_revocation_is_unknown_where_there_is_none(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``grant inspect`` with ``AGENTGATE_STORE`` mistyped created that store (and its
    directories) and, reading it empty, showed every link of a revoked chain as not revoked
    (``"revoked": false``). Rule: a look at a token writes nothing, and an answer it has not
    read is unknown, never "not revoked"."""
    issue_and_delegate(capsys)
    assert cli(capsys, "grant", "revoke", "a.tok")[0] == 0
    mistyped = env / "typo" / "stor.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(mistyped))
    code, out, err = cli(capsys, "grant", "inspect", "b.tok", "--json")
    assert (code, err) == (0, "")
    assert [link["revoked"] for link in json.loads(out)["links"]] == [None, None]
    code, out, _ = cli(capsys, "grant", "inspect", "b.tok")
    assert code == 0 and out.count("revocation unknown (no store at AGENTGATE_STORE)") == 2
    assert not (env / "typo").exists()
    monkeypatch.setenv("AGENTGATE_STORE", str(env / "store.db"))
    code, out, _ = cli(capsys, "grant", "inspect", "b.tok", "--json")
    assert [link["revoked"] for link in json.loads(out)["links"]] == [True, False]


def test_inspect_reads_no_empty_or_foreign_file_as_a_store_and_leaves_it_as_it_was(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """R53: ``grant inspect`` with ``AGENTGATE_STORE`` naming an empty file opened it as a store:
    SQLite read it as an empty database, agentgate wrote its tables into it, and every link of a
    revoked chain showed as not revoked. Another application's SQLite file got agentgate's
    tables (and WAL mode) too. Rule: a look at a token writes to no file; revocation is unknown
    where the file is no agentgate store, and the reason says which."""
    import sqlite3

    issue_and_delegate(capsys)
    assert cli(capsys, "grant", "revoke", "a.tok")[0] == 0
    empty = env / "empty.db"
    empty.touch()
    foreign = env / "other-app.db"
    with contextlib.closing(sqlite3.connect(foreign)) as db:
        db.execute("CREATE TABLE customers (id INTEGER)")
        db.commit()
    before = foreign.read_bytes()
    for path, why in ((empty, "the file is empty"), (foreign, "not an agentgate store")):
        monkeypatch.setenv("AGENTGATE_STORE", str(path))
        code, out, err = cli(capsys, "grant", "inspect", "b.tok", "--json")
        assert (code, err) == (0, "")
        assert [link["revoked"] for link in json.loads(out)["links"]] == [None, None]
        code, out, _ = cli(capsys, "grant", "inspect", "b.tok")
        assert code == 0 and out.count(f"revocation unknown (no store at AGENTGATE_STORE: {why})") == 2
    assert empty.stat().st_size == 0 and foreign.read_bytes() == before
    assert sorted(p.name for p in env.glob("*.db*")) == ["empty.db", "other-app.db", "store.db"]


def test_check_refuses_an_amount_no_float_holds_instead_of_rounding_it_under_the_bound(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # R53: 100.00000000000000001 was read as 100.0, which the bound amount<=100 of b.tok allows.
    issue_and_delegate(capsys)
    base = [*CHECK_AS_BOB, "payments.refund"]
    code, _, err = cli(capsys, *base, "--args", '{"amount": 100.00000000000000001, "currency": "EUR"}')
    assert code == 2 and "'amount'" in err and "no float holds" in err and len(err.splitlines()) == 1
    assert cli(capsys, *base, "--args", '{"amount": 99.5, "currency": "EUR"}')[0] == 0


def test_delegate_refuses_an_out_that_is_the_token_file_it_delegates_from(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``grant delegate a.tok ... --out a.tok`` (or any other path to it) replaced alice's token
    with the child's chain, held by bob: alice's own grant was gone from her file, exit 0. Rule:
    as the audit verbs refuse an ``--out`` naming a file they read, exit 2, nothing written."""
    issue_and_delegate(capsys)
    before = (env / "a.tok").read_bytes()
    os.symlink("a.tok", env / "a-link.tok")
    for out in ("a.tok", "./a.tok", str(env / "a.tok")):
        code, _, err = cli(capsys, "grant", "delegate", "a-link.tok", "--as", "k/alice.key", "--to", "k/bob.pub",
                           "--allow", "tool:search.web", "--ttl", "10m", "--out", out)  # fmt: skip
        assert code == 2 and "it is the token file delegated from" in err and err.count("\n") == 1
        assert (env / "a.tok").read_bytes() == before
    code, _, _ = cli(capsys, "grant", "delegate", "a.tok", "--as", "k/alice.key", "--to", "k/bob.pub",
                     "--allow", "tool:search.web", "--ttl", "10m", "--out", "c.tok")  # fmt: skip
    assert code == 0 and (env / "c.tok").exists()


def test_revoke_names_what_a_pasted_token_or_an_upper_case_id_is(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``grant revoke "$(cat a.tok)"`` answered ``<the whole token>: File name too long``, and an
    id in upper case "is neither a token file nor a 64-hex grant id", though it is 64 hex digits.
    Rule: exit 2, one line saying what was given and what is wanted; nothing revoked."""
    issue_and_delegate(capsys)
    token = (env / "a.tok").read_text().strip()
    code, _, err = cli(capsys, "grant", "revoke", token)
    assert code == 2 and err.count("\n") == 1 and "is a token itself, not the path of a token file" in err
    assert token not in err
    tip = json.loads(cli(capsys, "grant", "inspect", "a.tok", "--json")[1])["tip"]
    code, _, err = cli(capsys, "grant", "revoke", tip.upper())
    assert code == 2 and "64 lower-case hex digits" in err
    code, out, _ = cli(capsys, *CHECK_AS_BOB, "payments.refund", "--args", '{"amount": 5, "currency": "EUR"}')
    assert code == 0 and out.startswith("allow:")


def test_delegate_that_widens_exits_1_with_the_scope_creep_finding(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    issue_and_delegate(capsys)
    code, out, err = cli(capsys, "grant", "delegate", "a.tok", "--as", "k/alice.key", "--to", "k/bob.pub",
                         "--allow", "tool:payments.refund?amount<=900&currency=EUR", "--ttl", "10m")  # fmt: skip
    assert code == 1 and out == ""
    assert "scope_creep constraint_widened [constraints.amount]" in err
    code, _, err = cli(capsys, "grant", "delegate", "a.tok", "--as", "k/alice.key", "--to", "k/bob.pub",
                       "--allow", "tool:search.web", "--ttl", "2h")  # fmt: skip
    assert code == 1 and "outlives_parent" in err


def test_token_copied_to_another_agent_is_denied(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue_and_delegate(capsys)
    code, out, _ = cli(capsys, "grant", "check", "b.tok", "--as", "k/alice.key", "--trust", "k/root.pub", "--tool",
                       "payments.refund", "--args", '{"amount": 5, "currency": "EUR"}', "--json")  # fmt: skip
    assert code == 1
    assert json.loads(out)["findings"][0]["kind"] == "implicit_trust_inheritance"


@pytest.mark.parametrize(
    "tool", ["Payments.refund", "payments.refund ", "payments.re\u200bfund", "../payments.refund"]
)
def test_ambiguous_tool_names_are_denied(env: Path, capsys: pytest.CaptureFixture[str], tool: str) -> None:
    issue_and_delegate(capsys)
    code, out, _ = cli(capsys, *CHECK_AS_BOB, tool, "--args", '{"amount": 5, "currency": "EUR"}', "--json")
    assert code == 1 and json.loads(out)["findings"][0]["code"] == "ambiguous_resource"


def test_inspect_shows_who_gave_what_to_whom(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue_and_delegate(capsys)
    code, out, _ = cli(capsys, "grant", "inspect", "b.tok")
    alice = (env / "k" / "alice.pub").read_text().strip()
    assert code == 0
    assert "chain of 2 link(s)" in out and f"gave {alice}" in out
    assert "allow tool:payments.refund?amount<=100&currency=EUR" in out and "budget 1000000 usd_micros" in out
    code, out, _ = cli(capsys, "grant", "inspect", "b.tok", "--json")
    links = json.loads(out)["links"]
    assert [link["signature"] for link in links] == ["valid", "valid"]
    assert links[1]["revoked"] is False


@pytest.mark.parametrize(
    "argv",
    [
        ["--ttl", "0s"],
        ["--ttl", "-1h"],
        ["--ttl", "1.5h"],
        ["--ttl", "forever"],
        ["--ttl", "1h", "--budget", "-5"],
        ["--ttl", "1h", "--budget", "1.5"],
        ["--ttl", "1h", "--budget", "nan"],
        ["--ttl", "1h", "--budget", "inf"],
        ["--ttl", "1h", "--budget", str(2**63)],
        ["--ttl", "1h", "--allow", "tool:Run_Shell"],
        ["--ttl", "1h", "--allow", "tool:x?amount<=1.5"],
        ["--ttl", "1h", "--allow", "tool:x?amount~1"],
        ["--ttl", "1h", "--max-depth", "99"],
    ],
)
def test_bad_issue_input_exits_2_with_one_line(
    env: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    base = ["grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub", "--allow", "tool:x"]
    code, out, err = cli(capsys, *base, *argv)
    assert code == 2 and out == ""
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("agentgate: error:")


def test_bad_files_and_arguments_exit_2(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    issue_and_delegate(capsys)
    (env / "g.tok").write_text("garbage\n")
    (env / "big.tok").write_text("ag1." + "A" * 40000)
    (env / "bin.tok").write_bytes(b"ag1.\xff\xfe")
    os.chmod(env / "k" / "bob.key", 0o644)
    check = ["--trust", "k/root.pub", "--tool", "x"]
    cases = [
        ["grant", "inspect", "g.tok"],
        ["grant", "inspect", "big.tok"],
        ["grant", "inspect", "bin.tok"],
        ["grant", "inspect", "missing.tok"],
        ["grant", "check", "b.tok", "--as", "k/bob.key", *check],  # key readable by others
        ["grant", "check", "b.tok", "--as", "k/alice.key", *check, "--args", "[1"],
        ["grant", "check", "b.tok", "--as", "k/alice.key", *check, "--args", '{"a":1,"a":2}'],
        ["grant", "check", "b.tok", "--as", "k/alice.key", *check, "--args", '{"a":NaN}'],
        ["grant", "check", "b.tok", "--as", "k/alice.key", *check, "--args", "[]"],
        ["grant", "check", "b.tok", "--as", "k/alice.key", "--trust", "did:key:zzz", "--tool", "x"],
        ["grant", "revoke", "not-a-file-or-id"],
        [
            "grant",
            "issue",
            "--issuer",
            "k/root.pub",
            "--to",
            "k/alice.pub",
            "--allow",
            "tool:x",
            "--ttl",
            "1h",
        ],
        [
            "grant",
            "issue",
            "--issuer",
            "k/root.key",
            "--to",
            "did:key:z6Mk../../x",
            "--allow",
            "tool:x",
            "--ttl",
            "1h",
        ],
    ]
    for argv in cases:
        code, _, err = cli(capsys, *argv)
        assert code == 2, (argv, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)


def test_no_traceback_from_the_installed_command(env: Path) -> None:
    (env / "g.tok").write_text("ag1.%%%.AA\n")
    proc = subprocess.run([sys.executable, "-m", "agentgate.cli.main", "grant", "inspect", "g.tok"],
                          capture_output=True, text=True, cwd=env, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("agentgate: error:") and len(proc.stderr.splitlines()) == 1


def test_duration_grammar() -> None:
    assert [parse_duration(t) for t in ("30s", "15m", "1h", "7d", "1h30m")] == [30, 900, 3600, 604800, 5400]
    for bad in ("0s", "0d", "-5m", "5", "5 m", "1.5h", "1w", "", "s", "99999999999d"):
        with pytest.raises(InputError):
            parse_duration(bad)


@pytest.mark.parametrize("long", ["99999999999d", "1h9999999999s", "0001000000000s"])
def test_a_duration_with_a_ten_digit_number_is_said_to_be_too_long(long: str) -> None:
    """Review R55: a duration well written but with a number of ten digits or more
    (``--ttl 99999999999d``) was refused as malformed ("write a positive whole number with a
    unit"), which it is. Rule: it is refused as more than 10 years, naming the 9-digit limit."""
    with pytest.raises(InputError) as refused:
        parse_duration(long)
    assert "at most 10 years" in str(refused.value) and "at most 9 digits" in str(refused.value)
    assert "write a positive whole number" not in str(refused.value)


@pytest.mark.parametrize(
    ("ttl", "what"),
    [
        ("1h1h", "the unit h comes more than once"),
        ("1h30m1h", "the unit h comes more than once"),
        ("1s1h", "its units are out of order"),
        ("30m1h", "its units are out of order"),
    ],
)
def test_a_duration_with_a_unit_repeated_or_out_of_order_is_refused(
    env: Path, capsys: pytest.CaptureFixture[str], ttl: str, what: str
) -> None:
    """Review R55: --ttl 1h1h was accepted as 2h (and 1s1h as 3601 s), a slip read as a sum.
    Rule (docs/cli.md, DURATION): each unit at most once, largest first; else exit 2, one line."""
    code, _, err = cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub",
                       "--allow", "tool:search.web", "--ttl", ttl, "--out", "t.tok")  # fmt: skip
    assert code == 2 and not (env / "t.tok").exists()
    assert err == (
        f"agentgate: error: duration {ttl!r}: {what}; write each unit at most once, largest first "
        "(d, h, m, s), e.g. 1h30m\n"
    )


@pytest.mark.parametrize("budget", ["99999999999999999999", "9223372036854775808", "9" * 5000 + ":calls"])
def test_a_budget_too_large_is_said_to_be_too_large_with_the_largest_accepted(
    env: Path, capsys: pytest.CaptureFixture[str], budget: str
) -> None:
    """Review R55: --budget of 20 digits or more was refused as "must be a whole, non-negative
    number", which it is. Rule: exit 2, one line saying it is too large and naming 2**63-1."""
    shown = repr(budget[:40]) + ("..." if len(budget) > 40 else "")
    code, _, err = cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub",
                       "--allow", "tool:search.web", "--ttl", "1h", "--budget", budget, "--out", "t.tok")  # fmt: skip
    assert code == 2 and not (env / "t.tok").exists()
    assert err == (
        f"agentgate: error: budget {shown}: the amount is too large; the largest is "
        "9223372036854775807 (2**63-1) minor units\n"
    )
    largest = ("--budget", "9223372036854775807", "--out", "t.tok")
    assert cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub",
               "--allow", "tool:search.web", "--ttl", "1h", *largest)[0] == 0  # fmt: skip


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        (
            "two.tok",
            "{t}\n{t}\n",
            "two.tok: holds more than one line; a token file holds one token on one line",
        ),
        ("cr.tok", "{t}\rx\n", "cr.tok: holds more than one line; a token file holds one token on one line"),
        ("nul.tok", "{t}\x00x\n", "nul.tok: the token holds control character '\\x00' at character {n}"),
        ("tab.tok", "{t}\tx\n", "tab.tok: the token holds control character '\\t' at character {n}"),
        (
            "bom.tok",
            "\ufeff{t}\n",
            "bom.tok: starts with a UTF-8 byte order mark (an editor's); a token file holds the token as plain ASCII",
        ),
        (
            "odd\nname.tok",
            "{t}\n{t}\n",
            "odd\\nname.tok: holds more than one line; a token file holds one token on one line",
        ),
    ],
)
@pytest.mark.parametrize("verb", ["check", "delegate", "revoke"])
def test_a_token_file_that_is_not_one_line_of_token_is_said_so(
    env: Path, capsys: pytest.CaptureFixture[str], verb: str, name: str, content: str, said: str
) -> None:
    """Review R55: a token file of two tokens, or with a NUL or a tab after the token, was
    refused as 'link 0 signature: not unpadded base64url', one with a byte order mark as 'not
    ASCII', and a file name with a line break was shown with a space. Rule: exit 2, one line
    saying what the file holds, its name escaped."""
    issue_and_delegate(capsys)
    token = (env / "a.tok").read_text().strip()
    (env / name).write_text(content.format(t=token), encoding="utf-8")
    argv = {
        "check": ("grant", "check", name, "--as", "k/alice.key", "--trust", "k/root.pub", "--tool", "search.web"),
        "delegate": ("grant", "delegate", name, "--as", "k/alice.key", "--to", "k/bob.pub",
                     "--allow", "tool:search.web", "--ttl", "10m", "--out", "c.tok"),
        "revoke": ("grant", "revoke", name, "--reason", "r"),
    }[verb]  # fmt: skip
    code, out, err = cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert err == f"agentgate: error: {said.format(n=len(token) + 1)}\n"
    assert not (env / "c.tok").exists()


def test_grant_revoke_of_a_symbolic_link_that_loops_says_why_it_cannot_be_read(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: grant revoke of a symbolic link loop (or a dangling link) said "'loop' is
    neither a token file nor a 64-hex grant id", as if nothing were there; grant check and
    delegate said why the file cannot be read. Rule: revoke says it too, exit 2."""
    os.symlink("loop2", env / "loop1")
    os.symlink("loop1", env / "loop2")
    os.symlink("nowhere.tok", env / "dangling.tok")
    code, _, err = cli(capsys, "grant", "revoke", "loop1", "--reason", "r")
    assert (
        code == 2 and err == "agentgate: error: loop1: cannot read token: Too many levels of symbolic links\n"
    )
    code, _, err = cli(capsys, "grant", "revoke", "dangling.tok", "--reason", "r")
    assert (
        code == 2 and err == "agentgate: error: dangling.tok: cannot read token: No such file or directory\n"
    )


POLICY = """\
version: 1
name: cli-test
settings:
  max_ttl_s: 3600
trust_anchors:
  root:
    key: k/root.pub
tools:
  payments.refund:
    args:
      amount: {type: number, required: true}
      currency: {type: string, required: true}
roles:
  refunder:
    kind: agent
    capabilities:
      - resource: tool:payments.refund
        constraints:
          amount: {le: 100}
          currency: {in: [EUR]}
    budget: {limit: 5000, unit: usd_micros}
    ttl_s: 600
    delegation: {max_depth: 1}
principals:
  alice:
    kind: agent
    key: k/alice.pub
    roles: [refunder]
"""


def test_issue_from_a_policy_role(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (env / "pol.yaml").write_text(POLICY)
    base = ["grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub", "--policy", "pol.yaml"]
    assert cli(capsys, *base, "--role", "refunder", "--out", "r.tok")[0] == 0
    code, out, _ = cli(capsys, "grant", "inspect", "r.tok", "--json")
    link = json.loads(out)["links"][0]
    assert link["capabilities"] == ["tool:payments.refund?amount<=100&currency=EUR"]
    assert link["budget"] == {"amount": 5000, "unit": "usd_micros"}
    assert link["expires"] - link["not_before"] == 600 and link["max_depth"] == 1
    code, out, _ = cli(capsys, "grant", "check", "r.tok", "--as", "k/alice.key", "--trust", "k/root.pub",
                       "--tool", "payments.refund", "--args", '{"amount": 100, "currency": "EUR"}')  # fmt: skip
    assert code == 0
    # the flags may narrow the role, never widen it, and only a trust anchor may issue
    assert (
        cli(capsys, *base, "--role", "refunder", "--ttl", "5m", "--budget", "10", "--max-depth", "0")[0] == 0
    )
    for argv, message in [
        (["--role", "refunder", "--ttl", "2h"], "TTL"),
        (["--role", "refunder", "--budget", "9000"], "budget"),
        (
            ["--role", "refunder", "--budget", "10:calls"],
            "is in calls; role refunder's budget is 5000 usd_micros",
        ),
        (["--role", "refunder", "--max-depth", "2"], "depth"),
        (["--role", "refunder", "--allow", "tool:x"], "--allow"),
        (["--role", "nobody"], "no role"),
    ]:
        code, _, err = cli(capsys, *base, *argv)
        assert code == 2 and message in err, (argv, err)
    code, _, err = cli(capsys, "grant", "issue", "--issuer", "k/alice.key", "--to", "k/bob.pub",
                       "--policy", "pol.yaml", "--role", "refunder")  # fmt: skip
    assert code == 2 and "trust anchor" in err
    code, _, err = cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub")
    assert code == 2 and "--policy FILE --role ROLE" in err


def test_a_private_key_given_for_a_public_key_flag_is_refused_without_being_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``grant issue --to "$(cat agent.key)"`` (the private key's text where a did:key or a
    ``.pub`` file belongs) exits 2 naming the mistake; no piece of the key reaches the output,
    where the error quoted it as a file name that could not be read."""
    key_file, _ = save_key(SigningKey.generate(), tmp_path, "agent")
    issuer, _ = save_key(SigningKey.generate(), tmp_path, "root")
    pem = key_file.read_text()
    seed_line = pem.splitlines()[1]
    for given in (pem, seed_line):
        code = main(
            ["grant", "issue", "--issuer", str(issuer), "--to", given, "--allow", "tool:x", "--ttl", "1h"]
        )
        out, err = capsys.readouterr()
        assert code == 2 and "looks like a key itself" in err, (code, err)
        assert seed_line[24:40] not in out + err


def test_a_grant_issue_with_a_repeated_bound_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: a repeated operator in ``--allow`` keeping only the last bound, and an AMOUNT of
    ``500:`` read as 500 usd_micros.

    ``amount<=5&amount<=500`` would issue a grant ten times wider than its first clause: the
    command refuses it, exit 2, one error line, no token written; so is a budget with ``:`` and no
    unit."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    monkeypatch.chdir(tmp_path)
    for name in ("root", "alice"):
        assert main(["keys", "new", name, "--dir", "k"]) == 0
    capsys.readouterr()
    base = [
        "grant",
        "issue",
        "--issuer",
        "k/root.key",
        "--to",
        "k/alice.pub",
        "--ttl",
        "1h",
        "--out",
        "a.tok",
    ]
    assert main([*base, "--allow", "tool:payments.refund?amount<=5&amount<=500"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentgate: error: ") and err.count("\n") == 1 and "given twice" in err
    assert main([*base, "--allow", "tool:payments.refund", "--budget", "500:"]) == 2
    assert "name the unit" in capsys.readouterr().err
    assert not (tmp_path / "a.tok").exists()


def test_json_output_writes_text_as_utf_8_like_the_audit_log(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every ``--json`` writes text as itself (UTF-8), as ``audit show --json`` writes the logged
    bytes: a purpose signed into a grant reads the same in ``grant inspect --json``, not as
    ``\\u`` escapes, and the document still parses to the same value."""
    purpose = "remboursement client № 42 — équipe Zürich"
    assert cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub", "--allow", REFUND,
               "--ttl", "1h", "--purpose", purpose, "--out", "u.tok")[0] == 0  # fmt: skip
    code, out, _ = cli(capsys, "grant", "inspect", "u.tok", "--json")
    assert code == 0
    assert purpose in out and "\\u" not in out
    assert json.loads(out)["links"][0]["purpose"] == purpose


def test_json_output_escapes_what_a_terminal_would_not_show_as_it_is(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A token made elsewhere may carry a purpose the command line refuses to write: a bidi
    override, a line separator, an invisible tag character (beyond U+FFFF). ``grant inspect
    --json`` writes each as its ``\\u`` escape (a surrogate pair for the tag), printable text as
    itself; the document parses back to the purpose signed into the token."""
    purpose = "refund \u202eRUE\u2028forged line\U000e0041 for Zoë"
    alice = (env / "k" / "alice.pub").read_text().strip()
    chain = issue(
        load_signing_key(env / "k" / "root.key"), alice, ["tool:search.web"], ttl=3600, purpose=purpose
    )
    (env / "hostile.tok").write_text(chain.token)
    code, out, _ = cli(capsys, "grant", "inspect", "hostile.tok", "--json")
    assert code == 0
    assert not any(c in out for c in "\u202e\u2028\U000e0041") and "Zoë" in out
    assert "\\u202e" in out and "\\u2028" in out and "\\udb40\\udc41" in out
    assert json.loads(out)["links"][0]["purpose"] == purpose
