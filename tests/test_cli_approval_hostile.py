"""``agentgate approval sign`` against hostile PAYLOAD files and outputs (from a review).

Every failure must be exit 2 with one line on stderr, no traceback, and no signature written.
Run as a real subprocess so that what escapes ``main`` (a traceback, exit 1) is what a user sees.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentgate.audit.entry import argument_digest
from agentgate.gate import approval_call_hash
from agentgate.keys import SigningKey, save_key

FUTURE = 4_000_000_000  # 2096


@pytest.fixture
def key(tmp_path: Path) -> Path:
    private, _ = save_key(SigningKey.generate(), tmp_path / "k", "lead")
    return private


def sign(
    payload: bytes | str, key: Path, tmp_path: Path, *extra: str, stdin: bool = False
) -> tuple[int, str, str]:
    data = payload.encode() if isinstance(payload, str) else payload
    if stdin:
        source, feed = "-", data
    else:
        path = tmp_path / "payload.json"
        path.write_bytes(data)
        source, feed = str(path), b""
    result = subprocess.run(
        [sys.executable, "-m", "agentgate.cli.main", "approval", "sign", source, "--as", str(key), *extra],
        input=feed,
        capture_output=True,
        timeout=60,
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode(errors="replace")


def request(**fields: object) -> str:
    """A request that shows every part of the call it hashes (as the Gate writes it), with
    ``fields`` replacing parts; its call_hash is that of the call shown unless given."""
    inner: dict[str, object] = {
        "id": "req-1",
        "expires_at": FUTURE,
        "resource": "tool:refund",
        "action": "invoke",
        "args": {},
        "args_digest": argument_digest({}),
        "grant": "g" * 64,
        "call_id": "",
    }
    inner.update(fields)
    parts = [inner[field] for field in ("resource", "action", "args_digest", "grant", "call_id")]
    inner.setdefault("call_hash", approval_call_hash(*map(str, parts)))
    return json.dumps({"request": inner})


def assert_refused_cleanly(code: int, out: str, err: str) -> None:
    assert "Traceback" not in err, err[-600:]
    assert code == 2, (code, err[-600:])
    assert out == "", "a signature was written for a request the command should refuse"
    assert err.count("\n") == 1, err


@pytest.mark.parametrize(
    "payload",
    [
        request(expires_at=1e20),  # far future: utc() overflows -> OverflowError traceback, exit 1
        request(expires_at=-1e20),  # far past: refused, but the refusal's utc() overflows too
        request(approvers=5),  # ', '.join(map(str, 5)) -> TypeError traceback
        request(reasons=7),  # same for reasons
        '{"request": {"id": "\\ud800", "call_hash": "h", "expires_at": 4000000000}}',  # lone surrogate
    ],
    ids=["expires_at-1e20", "expires_at-minus-1e20", "approvers-int", "reasons-int", "id-lone-surrogate"],
)
def test_hostile_field_types_exit_2_without_traceback(key: Path, tmp_path: Path, payload: str) -> None:
    assert_refused_cleanly(*sign(payload, key, tmp_path))


@pytest.mark.parametrize(
    "payload",
    [
        request(expires_at=True),  # a bool: 1970-01-01T00:00:01Z, i.e. expired; shown as such, signed anyway
        request(expires_at="2020-01-01"),  # not a number: expiry unknowable; signed with 'expires -'
        '{"request": {"id": "req-1", "call_hash": "h", "expires_at": NaN}}',  # NaN <= now is False
    ],
    ids=["expires_at-bool", "expires_at-string", "expires_at-NaN"],
)
def test_a_malformed_expiry_is_not_signed(key: Path, tmp_path: Path, payload: str) -> None:
    assert_refused_cleanly(*sign(payload, key, tmp_path))


def test_non_utf8_on_stdin_exits_2(key: Path, tmp_path: Path) -> None:
    # A file with the same bytes is refused as "not UTF-8 text"; stdin decodes with
    # surrogateescape and the lone surrogate blows up inside Approval.sign (UnicodeEncodeError).
    payload = b'{"request": {"id": "a\xff", "call_hash": "h", "expires_at": 4000000000}}'
    assert_refused_cleanly(*sign(payload, key, tmp_path, stdin=True))


@pytest.mark.usefixtures("no_default_store")
def test_an_unwritable_out_file_exits_2(key: Path, tmp_path: Path) -> None:
    code, _out, err = sign(request(), key, tmp_path, "--out", str(tmp_path / "no-such-dir" / "approval.json"))
    assert "Traceback" not in err, err[-600:]
    # Review R63 (r63b-settle's finding): one line, as docs/cli.md says of exit 2; the request's
    # description went first, eight lines for an approval that was never written.
    assert code == 2 and len(err.splitlines()) == 1 and "cannot write" in err, err


@pytest.mark.usefixtures("no_default_store")
def test_arguments_not_all_shown_are_said_so(key: Path, tmp_path: Path) -> None:
    # Only loggable arguments are shown; the digest that is signed covers all of them. The human
    # is told when what is shown is not the whole call.
    partial = request(
        resource="tool:refund", args={"amount": 5}, args_digest=argument_digest({"amount": 50_000})
    )
    code, _out, err = sign(partial, key, tmp_path)
    assert code == 0 and "NOT all shown" in err
    whole = request(resource="tool:refund", args={"amount": 5}, args_digest=argument_digest({"amount": 5}))
    code, _out, err = sign(whole, key, tmp_path)
    assert code == 0 and "all shown" in err and "NOT" not in err


def test_a_call_hash_that_is_not_the_shown_calls_is_refused(key: Path, tmp_path: Path) -> None:
    shown = request(
        resource="tool:refund",
        action="invoke",
        args_digest=argument_digest({"amount": 5}),
        grant="g" * 64,
        call_id="",
        call_hash="ab" * 32,
    )
    code, out, err = sign(shown, key, tmp_path)  # call_hash "abab..." is no hash of that call
    assert (code, out) == (1, "") and "call_hash" in err


def test_checked_ok_key_with_wrong_permissions(key: Path, tmp_path: Path) -> None:
    key.chmod(0o644)
    code, out, err = sign(request(), key, tmp_path)
    assert (code, out) == (2, "") and "chmod 600" in err and err.count("\n") == 1
