"""The command line as scripts use it: what reaches the terminal from a hostile file,
empty names, and the ``--json`` shapes docs/cli.md describes.

Real components: the ``agentgate`` entry point in process, real files, a real SQLite store and
audit log.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agentgate.audit.entry import argument_digest
from agentgate.cli.main import main
from agentgate.gate import approval_call_hash
from agentgate.keys import SigningKey, save_key
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "\n\x1b[2J\u202e"
"""A line break, a clear-screen escape sequence and a right-to-left override."""


def _no_hostile_text(text: str) -> None:
    assert not any(c in text for c in "\x1b\u202e"), repr(text)


# --- approval sign: the refusal of an expired request ---------------------------------------------


def test_an_expired_request_is_refused_with_its_id_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The refusal quoted the payload's request id as it was: a hostile payload could add a line
    # ("agentgate: approval signed") or clear the approver's terminal.
    key, _ = save_key(SigningKey.generate(), tmp_path, "lead")
    parts = {
        "resource": "tool:refund",
        "action": "invoke",
        "args_digest": argument_digest({}),
        "grant": "g" * 64,
        "call_id": "",
    }
    request = {
        "id": f"req-1{HOSTILE}agentgate: approval signed",
        "expires_at": 1000,
        "args": {},
        "call_hash": approval_call_hash(*parts.values()),
        **parts,
    }
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"request": request}))
    assert main(["approval", "sign", str(payload), "--as", str(key)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(
        f"agentgate: refused: {payload}: request req-1\\n\\x1b[2J\\u202e"
    )  # R59: the file
    _no_hostile_text(captured.err)


# --- audit verify-proof: an invalid bundle's own text -----------------------------------------------


@pytest.fixture
def proof(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A proof bundle of entry 0 of a real log, with the log's ``log.pub`` beside it."""
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
    db = tmp_path / "agentgate.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True))
        log.append({"kind": "deny", "principal": "did:key:zBob", "resource": "tool:x", "reasons": ["no"]})
    bundle = tmp_path / "entry.tlog-proof"
    assert main(["audit", "prove", "0", "--out", str(bundle)]) == 0
    return bundle


def test_verify_proof_prints_an_invalid_bundles_origin_escaped(
    proof: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An offline verifier is given bundles it does not trust: INVALID quoted the checkpoint's
    # origin line as it was, so a forged bundle could repaint the auditor's terminal.
    capsys.readouterr()
    text = proof.read_text()
    forged = text.replace("agentgate.local/audit\n", "agentgate.local/audit\x1b[2J\u202e\n", 1)
    assert forged != text
    proof.write_text(forged)
    assert main(["audit", "verify-proof", str(proof), "--key", str(proof.parent / "log.pub")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("INVALID: ") and "agentgate.local/audit\\x1b[2J\\u202e" in out, out
    assert out.count("\n") == 1
    _no_hostile_text(out)


# --- broker: an empty --broker names nothing ------------------------------------------------------


@pytest.mark.parametrize("verb", ["leases", "queue", "inventory"])
def test_an_empty_broker_name_is_exit_2_not_an_empty_answer(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ``--broker "$BROKER"`` with BROKER unset read the state of a broker named "" and printed
    # "no state written yet", exit 0: an empty answer instead of the one asked for.
    db = tmp_path / "agentgate.db"
    SQLiteStore(db).close()
    extra = ["--inventory", str(ROOT / "policies" / "inventory.yaml")] if verb == "inventory" else []
    with pytest.raises(SystemExit) as exited:
        main(["broker", verb, *extra, "--store", str(db), "--broker", "", "--json"])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "argument --broker: an empty value names nothing" in captured.err


# --- the JSON shapes docs/cli.md describes --------------------------------------------------------


def test_policy_lint_json_is_the_object_the_docs_describe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/cli.md said --json prints "the findings"; it prints {"file", "valid", "findings"}, and
    # for a file that does not load an "error" object on stdout with nothing on stderr.
    doc = (ROOT / "docs" / "cli.md").read_text()
    assert '`{"file", "valid", "findings": [...]}`' in doc
    assert main(["policy", "lint", str(ROOT / "policies" / "support.yaml"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"file", "valid", "findings"} and report["valid"] is True
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\nname: [\n")
    assert main(["policy", "lint", str(broken), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ""
    report = json.loads(captured.out)
    assert report["valid"] is False and report["findings"] == []
    assert set(report["error"]) == {"message", "file", "line", "column", "expected", "hint"}


def test_grant_check_json_findings_leave_out_a_grant_or_field_they_lack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The docs' example shows "grant" and "field" on every finding; a finding without a field
    # (a revoked link) has no "field" key at all, which docs/cli.md now says.
    assert (
        "A finding has `grant` and `field` only where it names one." in (ROOT / "docs" / "cli.md").read_text()
    )
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "s.db"))
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    root, root_pub = save_key(SigningKey.generate(), tmp_path, "root")
    agent, agent_pub = save_key(SigningKey.generate(), tmp_path, "agent")
    token = tmp_path / "a.tok"
    issue = ["grant", "issue", "--issuer", str(root), "--to", str(agent_pub), "--allow", "tool:search"]
    assert main([*issue, "--ttl", "1h", "--out", str(token)]) == 0
    assert main(["grant", "revoke", str(token)]) == 0
    capsys.readouterr()
    check = ["grant", "check", str(token), "--as", str(agent), "--trust", str(root_pub), "--tool", "search"]
    assert main([*check, "--json"]) == 1
    decision = json.loads(capsys.readouterr().out)
    (finding,) = decision["findings"]
    assert finding["code"] == "revoked" and "grant" in finding and "field" not in finding
    assert decision["decided_at"] <= time.time() + 1


def test_a_revocation_by_a_name_that_is_not_utf8_goes_through_as_the_docs_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/cli.md listed "a reason" among the arguments that must be UTF-8 (else exit 2, nothing
    # stored); ``grant revoke`` records its --reason and --by escaped and revokes (review R29).
    assert "except `grant revoke`'s `--reason` and `--by`" in (ROOT / "docs" / "cli.md").read_text()
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "s.db"))
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    grant = "a" * 64
    assert main(["store", "init"]) == 0  # grant revoke refuses a store that does not exist
    capsys.readouterr()
    assert main(["grant", "revoke", grant, "--by", "\udcff", "--reason", "\udcfe"]) == 0
    assert capsys.readouterr().out.startswith(f"revoked {grant}")
    assert main(["audit", "show", "--kind", "revoke", "--json"]) == 0
    (entry,) = map(json.loads, capsys.readouterr().out.splitlines())
    assert entry["principal"] == "\\udcff" and entry["reasons"] == ["\\udcfe"]
