"""The command line as a contract, and the docs that describe it.

Every file a command is given is read the way docs/cli.md promises (a regular file of a sane size;
a FIFO, device or directory is refused at once, exit 2, one line), files written with ``--out``
are never half written and never followed through a symbolic link, ``--json`` output is complete
and parseable, stderr carries only agentgate's own line, and the examples the docs show run.
Real components: the ``agentgate`` entry point (in process, or in a subprocess where a hang or
stderr matters), real files, a real SQLite store.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentgate.audit.report import PAGE_START
from agentgate.cli.main import build_parser, main
from agentgate.keys import SigningKey, save_key

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ROOT / "policies"
SUPPORT = str(POLICIES / "support.yaml")
INVENTORY = str(POLICIES / "inventory.yaml")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite store with one audit entry and its log key, as ``AGENTGATE_STORE``."""
    path = tmp_path / "store.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(path))
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    from agentgate.store import open_store
    from agentgate.store.audit import AuditLog, log_origin, open_log_key

    with open_store(str(path)) as opened:
        log = AuditLog(opened, open_log_key(opened, create=True), log_origin())
        log.append({"kind": "deny", "principal": "did:key:z6Mk-test", "reasons": ["test"]})
    return path


def _one_error_line(err: str, needle: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("agentgate: error: ") and needle in lines[0], err
    assert "Traceback" not in err


# --- files given to a command: a device or a FIFO is refused at once ------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["policy", "lint", "{f}"],
        ["policy", "explain", "{f}", "--as", "support-agent", "--tool", "tickets.read"],
        ["grant", "issue", "--issuer", "{k}", "--to", "{d}", "--policy", "{f}", "--role", "r"],
        ["broker", "inventory", "--inventory", "{f}"],
        ["serve", "--policy", "{f}", "--inventory", INVENTORY, "--port", "1"],
        ["serve", "--policy", SUPPORT, "--inventory", "{f}", "--port", "1"],
        ["audit", "verify", "--checkpoint", "{f}"],
        ["audit", "verify-proof", "{f}", "--key", "{d}"],
    ],
    ids=["lint", "explain", "issue", "broker", "serve-policy", "serve-inventory", "verify", "verify-proof"],
)
def test_a_device_in_place_of_a_file_is_refused_unread(
    argv: list[str], store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # /dev/null read as a file is empty, /dev/zero never ends: both must be refused unread.
    key = SigningKey.generate()
    save_key(key, tmp_path, "issuer")
    fill = {"f": "/dev/null", "k": str(tmp_path / "issuer.key"), "d": key.did}
    assert main([a.format(**fill) for a in argv]) == 2
    _one_error_line(capsys.readouterr().err, "/dev/null: cannot read")


@pytest.mark.parametrize(
    "argv",
    [
        ["policy", "lint", "{f}"],
        ["broker", "inventory", "--inventory", "{f}"],
        ["audit", "verify", "--checkpoint", "{f}"],
        ["audit", "verify-proof", "{f}", "--key", "{d}"],
    ],
    ids=["lint", "broker", "verify", "verify-proof"],
)
def test_a_fifo_in_place_of_a_file_is_refused_not_waited_on(
    argv: list[str], store: Path, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fill = {"f": str(fifo), "d": SigningKey.generate().did}
    done = subprocess.run(
        [sys.executable, "-m", "agentgate.cli.main", *[a.format(**fill) for a in argv]],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENTGATE_STORE": str(store)},
    )
    assert done.returncode == 2
    _one_error_line(done.stderr, "not a regular file")


def test_policy_lint_json_reports_an_unreadable_file_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["policy", "lint", "/dev/null", "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False and "not a regular file" in report["error"]["message"]
    assert report["error"]["file"] == "/dev/null"


def test_an_oversized_policy_is_refused_without_reading_it_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as out:
        out.truncate(64 * 1024 * 1024)  # sparse: nothing to read, but larger than any policy
    assert main(["policy", "lint", str(big)]) == 2
    _one_error_line(capsys.readouterr().err, "cannot read policy: larger than")


# --- files written with --out: whole or not at all, never through a symbolic link -------------


@pytest.mark.parametrize("verb", ["checkpoint", "report"])
def test_audit_out_does_not_write_through_a_symbolic_link(
    verb: str, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "out.txt"
    link.symlink_to(target)
    assert main(["audit", verb, "--out", str(link)]) == 2
    _one_error_line(capsys.readouterr().err, "a symbolic link is there")
    assert target.read_text() == "keep me\n"
    assert link.is_symlink()


def test_audit_out_replaces_a_regular_file_whole(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ``audit checkpoint --out`` replaces only a checkpoint the log extends (test_audit_cli.py):
    # a report or a proof replaces an earlier one, whole, however long (since review R73 it
    # refuses any other file that is not empty: test_audit_r73_out_refuses.py).
    out = tmp_path / "report.html"
    out.write_text(PAGE_START + "x" * 1_000_000)
    assert main(["audit", "report", "--out", str(out)]) == 0
    page = out.read_text()
    assert page.rstrip().endswith("</html>") and "x" * 100 not in page
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".agentgate-")]


def test_audit_out_to_a_fifo_is_refused_not_blocked_on(store: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "agentgate.cli.main", "audit", "report", "--out", str(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENTGATE_STORE": str(store)},
    )
    assert done.returncode == 2
    _one_error_line(done.stderr, "not a regular file is there")


# --- --json is complete and parseable ---------------------------------------------------------


def test_policy_explain_json_holds_every_fact_the_text_shows(capsys: pytest.CaptureFixture[str]) -> None:
    args = '{"order_id": "O1", "amount": 800, "currency": "EUR"}'
    cmd = ["policy", "explain", SUPPORT, "--as", "support-agent", "--tool", "payments.refund", "--args", args]
    assert main([*cmd, "--json"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["decision"] == "approval_required"
    assert out["roles_held"] == ["support-agent"] and out["held_role"] == "support-agent"
    assert out["constraints"] == ["amount <= 2000 and amount > 0", 'currency in ["EUR", "USD"]']
    assert out["budget"] == {"limit": 500, "unit": "calls"}
    assert out["approval"] == "large-refund" and out["approvers"] == ["alice", "bob"]
    assert out["quorum"] == 1 and out["approval_expiry_s"] == 900
    assert {"name": "agent-refunds-per-hour", "subject": "principal:support-agent", "limit": 20,
            "unit": "calls", "window_s": 3600} in out["quota_limits"]  # fmt: skip
    assert main(cmd) == 3
    text = capsys.readouterr().out
    assert "500 calls" in text and "20 calls per 3600s" in text


def test_policy_explain_json_of_a_non_canonical_tool_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = ["policy", "explain", SUPPORT, "--as", "support-agent", "--tool", "Payments.Refund", "--json"]
    assert main(cmd) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["decision"] == "deny" and "not canonical" in out["reasons"][0]
    assert out["resource"] == "tool:Payments.Refund"


# --- stderr is agentgate's one line -----------------------------------------------------------


def test_library_warnings_do_not_reach_stderr(tmp_path: Path) -> None:
    """psycopg's pool logs each failed connection attempt as a warning; with no handler set up,
    Python printed them before the command's own one-line error. Review R73: the ``agentgate``
    command (``run``) keeps them off until its process exits (a pool thread can log as the
    interpreter exits: here an ``atexit`` hook, after the command's own exit), while ``main``
    alone now leaves a program's logging as it was (test_cli_r73_warnings_nested)."""
    script = (
        "import atexit, logging, sys\n"
        "from agentgate.cli import run\n"
        "atexit.register(logging.getLogger('psycopg.pool').warning, \"error connecting in 'pool-1'\")\n"
        f"sys.argv = ['agentgate', 'policy', 'schema', '-o', {str(tmp_path / 's.json')!r}]\n"
        "run()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stderr == ""


def test_policy_schema_out_does_not_write_through_a_symbolic_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "schema.json"
    link.symlink_to(target)
    assert main(["policy", "schema", "-o", str(link)]) == 2
    _one_error_line(capsys.readouterr().err, "cannot write the schema")
    assert target.read_text() == "keep me\n"


# --- docs/cli.md names only verbs and flags the command has -----------------------------------

_CLI_DOC = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def _documented_commands() -> list[tuple[str, str | None, set[str]]]:
    """``(group, verb, flags)`` of every command line docs/cli.md shows in backquotes."""
    import re

    found = []
    for text in re.findall(
        r"`((?:agentgate )?(?:keys|grant|approval|policy|audit|tasks|broker|serve)\b[^`]*)`", _CLI_DOC
    ):
        words = text.removeprefix("agentgate ").split()
        group = words[0]
        verb = words[1] if len(words) > 1 and re.fullmatch(r"[a-z][a-z-]+", words[1]) else None
        if group == "serve":
            verb = None
        options = text.split(" -- ")[0]  # after `--` every word is an operand (`keys new -- -a`)
        flags = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", options))
        found.append((group, verb, flags))
    return found


def _subparser(parser: argparse.ArgumentParser, group: str, verb: str | None) -> object:
    def child(p: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
        action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        return action.choices[name]  # type: ignore[no-any-return]

    p = child(parser, group)
    return p if verb is None else child(p, verb)


def test_every_documented_command_line_exists_with_its_flags() -> None:
    commands = _documented_commands()
    assert len(commands) > 30  # the doc's command lines were found
    whole = build_parser()  # one parser read for all of them: looking up a verb changes nothing
    missing = []
    for group, verb, flags in commands:
        try:
            parser = _subparser(whole, group, verb)
        except (KeyError, StopIteration):
            if verb is not None and group not in {"serve"}:
                missing.append(f"{group} {verb}")
            continue
        known = {s for a in parser._actions for s in a.option_strings}  # type: ignore[attr-defined]
        missing += [f"{group} {verb or ''} {f}" for f in flags - known]
    assert not missing, missing


@pytest.mark.parametrize(
    "args",
    ['{"ticket_id": "T", "n": 1e400}', '{"ticket_id": "\\ud800"}'],
    ids=["overflowing-float", "lone-surrogate"],
)
def test_args_that_parse_but_are_no_value_are_input_errors_everywhere(
    args: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 1e400 parsed as infinity and "\ud800" as a lone surrogate: policy explain decided on them
    # (deny, allow) while grant check refused them; both are unusable input, exit 2.
    assert (
        main(
            ["policy", "explain", SUPPORT, "--as", "support-agent", "--tool", "tickets.read", "--args", args]
        )
        == 2
    )
    _one_error_line(capsys.readouterr().err, "--args")


def test_the_command_lines_ten_years_are_the_policys_ten_years() -> None:
    # docs: lifetimes at most ten years, "315,360,000 s, the command line's limit too"; the
    # command line allowed ten 366-day years (3660d) while a policy refuses more than 3650d.
    from agentgate.cli.grant import parse_duration
    from agentgate.errors import InputError

    assert parse_duration("3650d") == 315_360_000
    with pytest.raises(InputError, match="10 years"):
        parse_duration("3650d1s")
    with pytest.raises(InputError):
        parse_duration("3660d")


def test_serve_ends_on_ctrl_c_with_exit_0(tmp_path: Path) -> None:
    # docs/cli.md: serve "runs until interrupted (exit 0)". uvicorn shuts down on SIGINT and then
    # raises it again, which main() turned into exit 130.
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert main(["store", "init", "--store", str(tmp_path / "s.db")]) == 0  # serve creates none
    process = subprocess.Popen(
        [sys.executable, "-m", "agentgate.cli.main", "serve", "--policy", str(POLICIES / "research_team.yaml"),
         "--inventory", INVENTORY, "--port", str(port), "--store", str(tmp_path / "s.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
                    assert answer.status == 200
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "Traceback" not in err and "interrupted" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["tasks", "dead-letters", "--limit", "99999999999999999999999"],
        ["audit", "explain", "99999999999999999999999"],
        ["audit", "explain", "-1"],
        ["audit", "prove", "99999999999999999999999", "--out", "p.txt"],
    ],
    ids=["dead-letters-limit", "explain-huge", "explain-negative", "prove-huge"],
)
def test_numbers_beyond_the_stores_integers_are_usage_errors(
    argv: list[str], store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An index or limit past 2**63 overflowed SQLite: a traceback and exit 1.
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("agentgate: error: argument")


def test_a_key_name_with_a_line_break_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "new", "a\nb", "--dir", str(tmp_path)]) == 2
    _one_error_line(capsys.readouterr().err, "control character")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [["policy", "schema"], ["audit", "show"], ["grant", "inspect", "{tok}"]],
    ids=["schema", "audit-show", "inspect"],
)
def test_output_that_cannot_be_written_is_one_line_and_exit_2(
    argv: list[str], store: Path, tmp_path: Path
) -> None:
    # stdout on a full disk raised OSError out of main(): a traceback and exit 1 (read as "deny").
    from agentgate.authority import issue
    from agentgate.capabilities import Capability

    anchor, holder = SigningKey.generate(), SigningKey.generate()
    chain = issue(anchor, holder.did, [Capability.parse("tool:x")], ttl=60)
    token = tmp_path / "t.tok"
    token.write_text(chain.token + "\n")
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [sys.executable, "-m", "agentgate.cli.main", *[a.format(tok=token) for a in argv]],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, "AGENTGATE_STORE": str(store)},
        )
    assert done.returncode == 2
    _one_error_line(done.stderr, "cannot write the output: No space left on device")


def test_reading_commands_take_store_urls_as_open_store_does(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Schemes are case-insensitive for open_store (grant, serve); the read-only commands took
    # SQLITE:////path for a missing file and mysql://... for "no store at mysql://...".
    assert main(["approval", "list", "--store", f"SQLITE:///{store}"]) == 0
    assert "no open approval requests" in capsys.readouterr().out
    assert main(["audit", "verify", "--store", f"Sqlite:///{store}"]) == 0
    capsys.readouterr()
    assert main(["approval", "list", "--store", "mysql://host/db"]) == 2
    _one_error_line(capsys.readouterr().err, "unsupported store URL")


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ("agentgate.policy import load_policy", "PolicyError"),
        ("agentgate.dispatch.inventory import load_inventory", "InventoryError"),
    ],
)
def test_the_library_loaders_refuse_a_fifo_at_once(tmp_path: Path, call: str, error: str) -> None:
    # Gate.open, load_policy and load_inventory read like the command line: a FIFO (or a device)
    # in place of the file is refused, where they blocked for ever (review R1).
    fifo = tmp_path / "source.yaml"
    os.mkfifo(fifo)
    module, name = call.split(" import ")
    script = f"from {module} import {name}\n{name}({str(fifo)!r})\n"
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{name} blocked on a FIFO") from None
    assert error in done.stderr and "not a regular file" in done.stderr


def test_approval_expiry_and_quorum_are_bounded_like_every_lifetime() -> None:
    # expiry_s: 1e23 loaded and linted clean, then the agent run died inside LangGraph (msgpack
    # cannot hold the request's expires_at); review R1.
    from agentgate.errors import PolicyError
    from agentgate.policy import parse_policy

    head = (
        "version: 1\nprincipals:\n  a: {kind: human, did: did:key:z6Mktk1iFd7YoyEirJoqYtcfNUtMa5nUhqkrQsgX9tmc5Npj}\n"
        "tools:\n  t: {}\napprovals:\n  g: {resource: 'tool:t', approvers: [a], "
    )
    for field, value in (("expiry_s", "99999999999999999999999"), ("quorum", "1001")):
        with pytest.raises(PolicyError, match=field):
            parse_policy(head + f"{field}: {value}}}\n")
    parse_policy(head + "expiry_s: 315360000}\n")
