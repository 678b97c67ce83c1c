"""``agentgate approval sign --store``: what the payload shows is checked against the store's
request and its ``approval_required`` audit entry (review R70)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _cli import cli

from agentgate.audit.entry import argument_digest
from agentgate.capabilities import Call
from agentgate.gate import Gate, approval_call_hash
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store._postgres import PostgresStore

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
tools:
  refund:
    args: {{amount: {{type: integer, required: true}}, note: {{type: string}}}}
    loggable: [amount]
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:refund
    ttl_s: 600
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: [lead]
    expiry_s: 300
"""


class Asked:
    """A real Gate on a SQLite file (or the PostgreSQL database ``url``) that asked for approval of a refund of 800 (its note is not
    loggable, so the payload does not show every argument)."""

    def __init__(self, path: Path, url: str | None = None) -> None:
        self.path = path
        keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
        for name, key in keys.items():
            save_key(key, path / "k", name)
        self.lead = str(path / "k" / "lead.key")
        self.db = path / "agentgate.db"
        self.url = url or str(self.db)
        store = SQLiteStore(self.db) if url is None else PostgresStore(url)
        self.gate = Gate(parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()})), store)
        agent = self.gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        call = Call.tool("refund", {"amount": 800, "note": "customer 42"})
        asked = self.gate.authorize(agent, call, call_id="call-1")
        assert asked.needs_approval
        self.payload: dict[str, Any] = asked.approval_payload()

    def write(self, edit: Callable[[dict[str, Any]], None] | None = None) -> str:
        payload = json.loads(json.dumps(self.payload))
        if edit is not None:
            edit(payload["request"])
        path = self.path / "payload.json"
        path.write_text(json.dumps(payload), encoding="utf-8")
        return str(path)


@pytest.fixture
def asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Asked]:
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    made = Asked(tmp_path)
    yield made
    made.gate.close()


def _rehash(request: dict[str, Any]) -> None:
    """Make the call_hash the hash of the call the request now shows: an editor who knows how."""
    parts = [request[f] for f in ("resource", "action", "args_digest", "grant", "call_id")]
    request["call_hash"] = approval_call_hash(*parts)


def _set(field: str, value: Any, rehash: bool = False) -> Callable[[dict[str, Any]], None]:
    def edit(request: dict[str, Any]) -> None:
        request[field] = value
        if rehash:
            _rehash(request)

    return edit


def test_an_untouched_payload_is_checked_and_signed(asked: Asked, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R70: with --store, the payload the Gate wrote is found in the store and signed."""
    code, out, err = cli(
        capsys, "approval", "sign", asked.write(), "--as", asked.lead, "--store", str(asked.db)
    )
    assert code == 0, err
    assert json.loads(out)["call_hash"] == asked.payload["request"]["call_hash"]
    assert (
        '"amount": 800' in err
        and "checked    against the store's request" in err
        and "could not be checked" not in err
    )


def test_agentgate_store_names_the_store_to_check_against(
    asked: Asked, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R70: AGENTGATE_STORE names the store as --store does, as for every other verb."""
    monkeypatch.setenv("AGENTGATE_STORE", str(asked.db))
    shown_80 = asked.write(lambda r: r["args"].update(amount=80))
    code, out, err = cli(capsys, "approval", "sign", shown_80, "--as", asked.lead)
    assert (code, out) == (1, ""), err
    assert "'args'" in err


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        # The defect: 800 asked, 80 shown, the signature approving 800.
        (lambda r: r["args"].update(amount=80), "'args'"),
        (_set("args", {"amount": 800, "note": "customer 42"}), "'args'"),
        (
            _set("reasons", ["approval gate big-refund applies: 1 of lead must approve within 300s"]),
            "'reasons'",
        ),
        (
            _set("reasons", ["allowed by role worker rule 1: tool:refund (line 16)", "routine refund"]),
            "'reasons'",
        ),
        (
            _set("requester_did", "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"),
            "'requester_did'",
        ),
        (_set("expires_at", 4_000_000_000), "'expires_at'"),
        (_set("quorum", 2), "'quorum'"),
        (_set("id", "0" * 32), "no approval request"),
        (_set("resource", "tool:refund.small", rehash=True), "'call_hash'"),
        (_set("args_digest", argument_digest({"amount": 80}), rehash=True), "'call_hash'"),
    ],
)
def test_a_payload_changed_on_its_way_is_refused(
    asked: Asked, capsys: pytest.CaptureFixture[str], edit: Callable[[dict[str, Any]], None], field: str
) -> None:
    """Review R70: an amount edited in transit (800 -> 80) was shown to the approver as 80 and
    signed (the line said only that the arguments shown do not hash to the digest): nothing the
    approver could run checked the arguments shown. With --store each field shown is compared with
    the store's request and its approval_required audit entry; a difference is refused, exit 1,
    one line naming the field, nothing signed."""
    out_file = asked.path / "approval.json"
    code, out, err = cli(
        capsys, "approval", "sign", asked.write(edit), "--as", asked.lead, "--store", str(asked.db),
        "--out", str(out_file),
    )  # fmt: skip
    assert (code, out) == (1, ""), err
    assert err.count("\n") == 1 and err.startswith("agentgate: refused: ") and field in err, err
    assert not out_file.exists()


@pytest.mark.usefixtures("no_default_store")
def test_without_a_store_the_unchecked_arguments_say_how_to_check_them(
    asked: Asked, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: without a store the NOT-all-shown line said the arguments might be changed but
    not that nothing checked them, nor how to."""
    code, _, err = cli(capsys, "approval", "sign", asked.write(), "--as", asked.lead)
    assert code == 0, err
    line = next(each for each in err.splitlines() if each.lstrip().startswith("arguments"))
    assert "could not be checked" in line and "--store" in line


def test_a_reason_the_log_keeps_with_a_placeholder_matches_the_reason_shown() -> None:
    """Review R70: the log keeps a value not loggable that a reason quotes as a placeholder; the
    payload shows it. The check must take that reason as the one recorded, and no other."""
    from agentgate.cli.approval import _reason_recorded

    recorded = "note=<not loggable> is not allowed"
    assert _reason_recorded("note='customer 42' is not allowed", recorded)
    assert not _reason_recorded("note='customer 42' is allowed", recorded)
    assert not _reason_recorded("a routine refund", "approval gate big-refund applies")


@pytest.mark.postgres
def test_a_postgresql_store_is_checked_as_a_sqlite_one(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R70: the check reads a PostgreSQL store too: the Gate's payload signs, an edited one
    is refused."""
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    made = Asked(tmp_path, postgres_url)
    try:
        code, _, err = cli(capsys, "approval", "sign", made.write(), "--as", made.lead, "--store", made.url)
        assert code == 0, err
        edited = made.write(lambda r: r["args"].update(amount=80))
        code, out, err = cli(capsys, "approval", "sign", edited, "--as", made.lead, "--store", made.url)
        assert (code, out) == (1, "") and "'args'" in err, err
    finally:
        made.gate.close()
