"""The files the authority CLI reads and writes are handled as docs/cli.md promises.

Key files, token files and approval payloads are read only if they are regular files of a sane
size (a FIFO is refused at once, a huge file is not read whole); public keys are Ed25519 only;
`keys new` leaves a whole key pair or nothing; tokens written with `--out` are mode 0600, replace
a symbolic link instead of following it, and a grant is recorded only if its token was written;
signed text cannot forge lines in `grant inspect`; `approval sign` refuses a request that does not
show every part of the call it hashes; a budget's `:` needs a unit. Every refusal is exit 2 with
one line `agentgate: error: ...` and never a traceback. Real components: the `agentgate` command in
a subprocess (a hang or a traceback is seen as a user sees it), real files, a real SQLite store.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _raw_sqlite import opened
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa, x25519
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentgate.audit.entry import argument_digest
from agentgate.authority import Budget, issue, parse_chain
from agentgate.capabilities import Capability
from agentgate.errors import InputError, KeyFileError, TokenFormatError
from agentgate.gate import approval_call_hash
from agentgate.keys import (
    SigningKey,
    load_public_key,
    load_signing_key,
    read_regular_file,
    replace_file,
    save_key,
)

ROOT = Path(__file__).resolve().parents[1]
ISSUE = ("grant", "issue", "--allow", "tool:x", "--ttl", "1h")


def run(
    cwd: Path, *argv: str, timeout: float = 60.0, limit_as: int | None = None, store: bool = True
) -> tuple[int, str, str]:
    """Run ``agentgate ARGV`` in ``cwd`` with the store ``cwd/store.db`` (``store=False``: no
    ``AGENTGATE_STORE``, the store left unnamed): (exit code, stdout, stderr). A command still
    running after ``timeout`` seconds is killed and reported as -9."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTGATE_STORE": str(cwd / "store.db")}
    if not store:
        del env["AGENTGATE_STORE"]

    def cap_memory() -> None:
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    try:
        done = subprocess.run(
            [sys.executable, "-m", "agentgate.cli.main", *argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=cap_memory,
        )
    except subprocess.TimeoutExpired:
        return -9, "", "(hung)"
    return done.returncode, done.stdout, done.stderr


def one_line_error(code: int, err: str) -> bool:
    """docs/cli.md exit 2: exactly one line ``agentgate: error: ...`` on stderr, no traceback."""
    lines = err.strip().splitlines()
    return code == 2 and len(lines) == 1 and lines[0].startswith("agentgate: error:")


def recorded_grants(store: Path) -> int:
    if not store.exists():
        return 0
    with opened(store) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "agentgate_grants" not in tables:
            return 0
        count: int = db.execute("SELECT count(*) FROM agentgate_grants").fetchone()[0]
    return count


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    for name in ("root", "alice"):
        save_key(SigningKey.generate(), tmp_path, name)
    return tmp_path


def pem_public(key: rsa.RSAPublicKey | x25519.X25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


# --- public keys: Ed25519 only ------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["rsa", "x25519"])
def test_to_a_pem_public_key_of_another_algorithm_is_one_line_exit_2(keys: Path, algorithm: str) -> None:
    """An RSA PEM (which has no raw form) and an X25519 PEM (32 raw bytes, like Ed25519) are not
    Ed25519 keys: `--to` refuses both, exit 2, and no grant is issued or recorded."""
    key = (
        rsa.generate_private_key(65537, 1024).public_key()
        if algorithm == "rsa"
        else x25519.X25519PrivateKey.generate().public_key()
    )
    (keys / "other.pem").write_bytes(pem_public(key))
    code, out, err = run(keys, *ISSUE, "--issuer", "root.key", "--to", "other.pem")
    assert one_line_error(code, err), (code, err)
    assert "not an Ed25519 public key" in err and out == ""
    assert recorded_grants(keys / "store.db") == 0


def test_an_ed25519_pem_public_key_is_accepted(tmp_path: Path) -> None:
    """The PEM form of an Ed25519 public key still names the same principal as its did:key."""
    key = SigningKey.generate()
    pem = Ed25519PrivateKey.from_private_bytes(key.seed).public_key()
    (tmp_path / "k.pem").write_bytes(
        pem.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    assert load_public_key(tmp_path / "k.pem").did == key.did


def test_load_public_key_refuses_other_algorithms_with_key_file_error(tmp_path: Path) -> None:
    (tmp_path / "x.pem").write_bytes(pem_public(x25519.X25519PrivateKey.generate().public_key()))
    with pytest.raises(KeyFileError, match="not an Ed25519 public key"):
        load_public_key(tmp_path / "x.pem")


# --- bounded reads: FIFOs and huge files ---------------------------------------------------------


@pytest.mark.parametrize("which", ["issuer", "to", "token", "payload"])
def test_a_fifo_in_place_of_a_file_does_not_hang(keys: Path, which: str) -> None:
    """A FIFO given as --issuer, --to, TOKENFILE or an approval PAYLOAD is refused at once (exit 2,
    "not a regular file") instead of blocking forever waiting for a writer."""
    fifo = keys / f"fifo.{which}"
    os.mkfifo(fifo, 0o600)
    argv = {
        "issuer": [*ISSUE, "--issuer", str(fifo), "--to", "alice.pub"],
        "to": [*ISSUE, "--issuer", "root.key", "--to", str(fifo)],
        "token": ["grant", "inspect", str(fifo)],
        "payload": ["approval", "sign", str(fifo), "--as", "root.key"],
    }[which]
    code, _out, err = run(keys, *argv, timeout=60.0)
    assert one_line_error(code, err), (code, err)
    assert "not a regular file" in err


@pytest.mark.parametrize("which", ["issuer", "to"])
def test_a_huge_key_file_is_not_read_whole(keys: Path, which: str) -> None:
    """An 8 GiB (sparse) key file under a 1 GiB address-space limit is refused by its size (exit 2),
    not read into memory (which would end in MemoryError and a traceback)."""
    huge = keys / f"huge.{which}"
    with huge.open("wb") as handle:
        handle.truncate(8 << 30)
    huge.chmod(0o600)
    argv = (
        ["--issuer", str(huge), "--to", "alice.pub"]
        if which == "issuer"
        else ["--issuer", "root.key", "--to", str(huge)]
    )
    code, _out, err = run(keys, *ISSUE, *argv, limit_as=1 << 30)
    assert one_line_error(code, err), (code, err)
    assert "larger than 8192 bytes" in err


def test_read_regular_file_reads_up_to_its_limit_and_no_more(tmp_path: Path) -> None:
    """Exactly ``limit`` bytes are read; one more is refused; a directory and a FIFO are refused
    with the error class asked for; the mode returned is that of the file read."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    path.chmod(0o640)
    data, status = read_regular_file(path, 100, "thing")
    assert data == b"x" * 100 and stat.S_IMODE(status.st_mode) == 0o640
    with pytest.raises(InputError, match="larger than 99 bytes"):
        read_regular_file(path, 99, "thing")
    with pytest.raises(KeyFileError, match="not a regular file"):
        read_regular_file(tmp_path, 100, "thing", KeyFileError)
    os.mkfifo(tmp_path / "p")
    with pytest.raises(InputError, match="not a regular file"):
        read_regular_file(tmp_path / "p", 100, "thing")
    with pytest.raises(InputError, match="cannot read thing"):
        read_regular_file(tmp_path / "missing", 100, "thing")


def test_a_private_key_readable_by_others_is_still_refused(tmp_path: Path) -> None:
    private, _ = save_key(SigningKey.generate(), tmp_path, "k")
    private.chmod(0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_signing_key(private)


# --- keys new: a whole pair or nothing ------------------------------------------------------------


@pytest.mark.parametrize("case", ["dir_is_a_file", "pub_is_a_directory", "name_too_long"])
def test_keys_new_unusable_target_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    """`keys new` exits 2 with one line when it cannot write: --dir naming a file, NAME.pub being
    a directory (and then no NAME.key is left behind without its .pub), a name too long for the
    file system. No temporary file is left either."""
    name = "k"
    if case == "dir_is_a_file":
        (tmp_path / "d").write_text("")
    elif case == "pub_is_a_directory":
        (tmp_path / "d" / "k.pub").mkdir(parents=True)
    else:
        name = "a" * 300
    code, out, err = run(tmp_path, "keys", "new", name, "--dir", "d")
    assert one_line_error(code, err), (code, err)
    assert out == ""
    if case == "pub_is_a_directory":
        assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["k.pub"]


def test_keys_new_writes_a_0600_key_and_its_did(tmp_path: Path) -> None:
    code, out, err = run(tmp_path, "keys", "new", "k", "--dir", "d")
    assert code == 0, err
    key = load_signing_key(tmp_path / "d" / "k.key")
    assert out.strip() == key.did == (tmp_path / "d" / "k.pub").read_text().strip()
    assert stat.S_IMODE((tmp_path / "d" / "k.key").stat().st_mode) == 0o600
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["k.key", "k.pub"]
    code, _out, err = run(tmp_path, "keys", "new", "k", "--dir", "d")
    assert one_line_error(code, err) and "already exists" in err
    assert load_signing_key(tmp_path / "d" / "k.key").did == key.did


# --- grant issue --out -----------------------------------------------------------------------------


def test_out_to_an_existing_file_is_mode_0600(keys: Path) -> None:
    """`--out FILE --force` writes the token mode 0600 even over an existing world-readable file
    (without `--force` a file that is not empty is refused since review R71:
    test_cli_r71_out_existing.py)."""
    out = keys / "a.tok"
    out.write_text("old\n")
    out.chmod(0o644)
    code, _out, err = run(
        keys, *ISSUE, "--issuer", "root.key", "--to", "alice.pub", "--out", str(out), "--force"
    )
    assert code == 0, err
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert parse_chain(out.read_text().rstrip("\n")).holder == load_public_key(keys / "alice.pub").did
    assert recorded_grants(keys / "store.db") == 1


def test_out_refuses_a_symbolic_link_neither_following_nor_replacing_it(keys: Path) -> None:
    """A symbolic link at --out is not written through (the file it points to is untouched) nor
    replaced: exit 2, and no grant is recorded."""
    target = keys / "elsewhere"
    target.write_text("not yours\n")
    (keys / "a.tok").symlink_to(target)
    code, _out, err = run(keys, *ISSUE, "--issuer", "root.key", "--to", "alice.pub", "--out", "a.tok")
    assert one_line_error(code, err) and "symbolic link" in err, (code, err)
    assert target.read_text() == "not yours\n" and (keys / "a.tok").is_symlink()
    assert recorded_grants(keys / "store.db") == 0


@pytest.mark.parametrize("where", ["a_directory", "in_a_missing_directory", "a_fifo"])
def test_issue_that_cannot_write_its_token_records_no_grant(keys: Path, where: str) -> None:
    """A grant is recorded only once its token is written: `--out` naming a directory, a path in
    a missing directory or a FIFO exits 2 (at once) and the store holds no grant nobody received."""
    (keys / "outdir").mkdir()
    os.mkfifo(keys / "fifo")
    out = {"a_directory": "outdir", "in_a_missing_directory": "missing/a.tok", "a_fifo": "fifo"}[where]
    code, _out, err = run(keys, *ISSUE, "--issuer", "root.key", "--to", "alice.pub", "--out", out)
    assert one_line_error(code, err), (code, err)
    assert recorded_grants(keys / "store.db") == 0
    assert list((keys / "outdir").iterdir()) == []
    assert not [p for p in keys.iterdir() if p.name.startswith(".agentgate-")]


@pytest.mark.parametrize("target", ["root.key", "store.db", "store.db-wal"])
def test_out_naming_a_private_key_or_a_database_replaces_neither(keys: Path, target: str) -> None:
    """Mutant: ``replace_file`` replaced any regular file: `grant issue --out root.key` (a slip of
    tab completion) put a token where the private key was, lost for good, and `--out store.db`
    a token where the store's grants, revocations and audit log were, both with exit 0.
    Rule: an output never replaces a private key, a SQLite database or its write-ahead log."""
    code, _out, err = run(keys, *ISSUE, "--issuer", "root.key", "--to", "alice.pub")  # makes store.db
    assert code == 0, err
    with opened(keys / "store.db") as db:  # open throughout: a write-ahead log beside it, as a live store has
        db.execute("PRAGMA journal_mode=WAL")
        (keys / "store.db-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(28))
        before = (keys / target).read_bytes()
        code, _out, err = run(keys, *ISSUE, "--issuer", "root.key", "--to", "alice.pub", "--out", target)
        kind = "a private key" if target.endswith(".key") else "a SQLite database"
        assert one_line_error(code, err) and f"{kind} is there" in err, (code, err)
        assert (keys / target).read_bytes() == before
        assert recorded_grants(keys / "store.db") == 1  # the refused issue recorded nothing
        code, _out, err = run(keys, "policy", "schema", "--output", target)
        assert one_line_error(code, err) and f"{kind} is there" in err, (code, err)
        assert (keys / target).read_bytes() == before


def test_replace_file_renames_nothing_when_the_hook_fails(tmp_path: Path) -> None:
    """``before_rename`` failing (the store refusing the grant) leaves the old file as it was and
    no temporary file behind."""
    path = tmp_path / "f"
    path.write_text("old")

    def refuse() -> None:
        raise InputError("store says no")

    with pytest.raises(InputError):
        replace_file(path, b"new", 0o600, refuse)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f"]
    replace_file(path, b"new", 0o640)
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640
    (tmp_path / "link").symlink_to(path)
    with pytest.raises(OSError, match="symbolic link"):
        replace_file(tmp_path / "link", b"newer", 0o600)
    assert path.read_text() == "new" and (tmp_path / "link").is_symlink()


# --- signed text in grant inspect --------------------------------------------------------------------


def test_inspect_does_not_let_a_purpose_forge_lines(keys: Path) -> None:
    """A token whose signed purpose holds a newline (and an ANSI escape) is shown with them escaped:
    the purpose stays on its one line and cannot add a fake `allow tool:*` to the tree, and no
    escape character reaches the terminal."""
    chain = issue(
        load_signing_key(keys / "root.key"),
        load_public_key(keys / "alice.pub"),
        [Capability.parse("tool:search.query")],
        ttl=3600,
        purpose="ok\n     allow tool:*\x1b[2J",
    )
    (keys / "a.tok").write_text(chain.token + "\n")
    code, out, err = run(keys, "grant", "inspect", "a.tok")
    assert code == 0, err
    lines = [line.strip() for line in out.splitlines()]
    assert "allow tool:*" not in lines and "allow tool:search.query" in lines
    assert "\x1b" not in out
    assert "purpose: ok\\n     allow tool:*\\x1b[2J" in lines


@pytest.mark.parametrize("purpose", ["two\nlines", "bell\x07", "ansi\x1b[31m", "bidi\u202eevil"])
def test_issue_refuses_control_characters_in_the_purpose(keys: Path, purpose: str) -> None:
    code, _out, err = run(keys, *ISSUE, "--issuer", "root.key", "--to", "alice.pub", "--purpose", purpose)
    assert one_line_error(code, err) and "--purpose" in err, (code, err)
    assert recorded_grants(keys / "store.db") == 0


def test_issue_keeps_an_ordinary_purpose(keys: Path) -> None:
    code, _out, err = run(
        keys, *ISSUE, "--issuer", "root.key", "--to", "alice.pub", "--purpose", "Q3 refunds — EU",
        "--out", "a.tok",
    )  # fmt: skip
    assert code == 0, err
    code, out, err = run(keys, "grant", "inspect", "a.tok")
    assert code == 0 and "purpose: Q3 refunds — EU" in out, err


# --- approval sign: the call shown is the call hashed ----------------------------------------------


def approval_request(**fields: object) -> dict[str, object]:
    """A request as the Gate writes it (all five hashed parts, call_id "" for none), with
    ``fields`` replacing parts; call_hash is that of the call shown unless given."""
    inner: dict[str, object] = {
        "id": "r1",
        "gate": "refunds",
        "resource": "tool:search.query",
        "action": "invoke",
        "grant": "g" * 64,
        "call_id": "",
        "args": {},
        "args_digest": argument_digest({}),
        "requester": "agent",
        "requester_did": SigningKey.generate().did,
        "approvers": ["approver"],
        "expires_at": int(time.time()) + 600,
        "reasons": [],
    }
    inner.update(fields)
    parts = [str(inner[f]) for f in ("resource", "action", "args_digest", "grant", "call_id")]
    inner.setdefault("call_hash", approval_call_hash(*parts))
    return inner


@pytest.mark.parametrize("missing", ["resource", "action", "args_digest", "grant", "call_id"])
def test_approval_sign_refuses_a_request_that_does_not_show_what_it_hashes(
    tmp_path: Path, missing: str
) -> None:
    """A payload that drops any part of the call it hashes (here it shows `tool:search.query {}`
    while its call_hash is a refund of 100000) is refused with exit 2, naming the missing part,
    and nothing is signed."""
    save_key(SigningKey.generate(), tmp_path, "approver")
    hidden = approval_call_hash(
        "tool:payments.refund", "invoke", argument_digest({"amount": 100000}), "g" * 64, "call-1"
    )
    request = approval_request(call_hash=hidden)
    del request[missing]
    (tmp_path / "p.json").write_text(json.dumps({"agentgate": "approval_required", "request": request}))
    code, out, err = run(tmp_path, "approval", "sign", "p.json", "--as", "approver.key")
    assert one_line_error(code, err) and repr(missing) in err, (code, err)
    assert out == ""


def test_approval_sign_signs_a_whole_request_with_an_empty_call_id(tmp_path: Path) -> None:
    """The Gate writes call_id "" when the call has none: such a request signs (exit 0), and the
    approval written with --out is mode 0600."""
    save_key(SigningKey.generate(), tmp_path, "approver")
    request = approval_request()
    (tmp_path / "p.json").write_text(json.dumps({"request": request}))
    # No store named: a request made by hand is in none (AGENTGATE_STORE would check it there).
    code, _out, err = run(
        tmp_path, "approval", "sign", "p.json", "--as", "approver.key", "--out", "a.json", store=False
    )
    assert code == 0, err
    assert json.loads((tmp_path / "a.json").read_text())["call_hash"] == request["call_hash"]
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o600


def test_approval_sign_shows_payload_text_escaped(tmp_path: Path) -> None:
    """Text from the payload (requester, gate, reasons) is shown escaped: a newline in it cannot add
    a fake `asks for` line above the real one, and no escape character reaches the terminal."""
    save_key(SigningKey.generate(), tmp_path, "approver")
    request = approval_request(
        requester="agent\n  asks for   tool:search.query {}", reasons=["ok\x1b[2K"], gate="g\u202e"
    )
    (tmp_path / "p.json").write_text(json.dumps({"request": request}))
    code, _out, err = run(tmp_path, "approval", "sign", "p.json", "--as", "approver.key", store=False)
    assert code == 0, err
    assert next(line for line in err.splitlines() if "asks for" in line).startswith("  requester")
    assert "\x1b" not in err and "\u202e" not in err
    assert "ok\\x1b[2K" in err and "g\\u202e" in err


def test_approval_payload_larger_than_its_limit_is_refused(tmp_path: Path) -> None:
    save_key(SigningKey.generate(), tmp_path, "approver")
    (tmp_path / "p.json").write_text(json.dumps({"request": approval_request(pad="x" * (1 << 20))}))
    code, _out, err = run(tmp_path, "approval", "sign", "p.json", "--as", "approver.key")
    assert one_line_error(code, err) and "larger than" in err, (code, err)


# --- budgets ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["500:", " 500", "500 ", "500: calls", "500:calls "])
def test_budget_with_an_empty_unit_or_spaces_is_refused(text: str) -> None:
    """`500:` (a unit forgotten) is refused, not taken as usd_micros; so are spaces around parts."""
    with pytest.raises(TokenFormatError):
        Budget.parse(text)
    assert Budget.parse("500") == Budget(500, "usd_micros")
    assert Budget.parse("500:calls") == Budget(500, "calls")


def test_issue_with_an_empty_budget_unit_is_one_line_exit_2(keys: Path) -> None:
    code, _out, err = run(keys, *ISSUE, "--issuer", "root.key", "--to", "alice.pub", "--budget", "500:")
    assert one_line_error(code, err), (code, err)
    assert recorded_grants(keys / "store.db") == 0
