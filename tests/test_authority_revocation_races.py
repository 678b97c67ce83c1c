"""Authority over time. Revocation racing decisions (threads and processes, SQLite and
PostgreSQL), clocks and tolerances, approvals used twice at once, and key files. Each test below
the first section is a defect found by running the real thing; the first section records what
was attacked and held."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from agentgate.authority import (
    Authority,
    ChainCache,
    GrantRepository,
    Invocation,
    decide,
    delegate,
    issue,
    revoke,
    verify_chain,
)
from agentgate.capabilities import Call
from agentgate.errors import AgentGateError, Expired, TokenFormatError
from agentgate.findings import Outcome
from agentgate.keys import SigningKey
from agentgate.store import Store
from agentgate.store.approvals import ApprovalStore

NOW = 1_800_000_000
ROOT, ALICE, BOB = (SigningKey(bytes([i]) * 32) for i in range(41, 44))
PAY = Call.tool("payments.refund", {"amount": 5})


# --- what held: revocation racing decisions --------------------------------------------------------


def test_no_decision_that_starts_after_revoke_returned_allows_in_any_thread(store: Store) -> None:
    """Four threads decide fresh invocations over a three-link chain (and delegate new children
    from its middle link as they go) while the main thread revokes that link: every decision that
    started after ``revoke`` returned is a deny naming it, every child included."""
    repo = GrantRepository(store)
    root = issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500"], ttl=3600, now=NOW)
    middle = delegate(root, ALICE, BOB.did, ["tool:payments.refund?amount<=100"], ttl=1800, now=NOW)
    authority = Authority(repo, ROOT.public)
    revoked = threading.Event()
    seen: list[tuple[bool, str, str | None]] = []
    lock = threading.Lock()

    def decider(me: int) -> None:
        holder = SigningKey(bytes([60 + me]) * 32)
        for _ in range(40):
            after = revoked.is_set()
            child = delegate(middle, BOB, holder.did, ["tool:payments.refund?amount<=50"], ttl=60, now=NOW)
            decided = authority.decide(Invocation.sign(holder, child, PAY, now=NOW), now=NOW + 1)
            code = decided.findings[0].code if decided.findings else None
            with lock:
                seen.append((after, decided.outcome.value, code))

    threads = [threading.Thread(target=decider, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    while len(seen) < 10:
        time.sleep(0.002)
    revoke(repo, middle, now=NOW)
    revoked.set()
    for thread in threads:
        thread.join()
    later = [s for s in seen if s[0]]
    assert later and all(outcome == "deny" and code == "revoked" for _, outcome, code in later)
    assert any(outcome == "allow" for after, outcome, _ in seen if not after)
    repo.close()


_WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from agentgate.authority import Authority, GrantRepository, Invocation, parse_chain
    from agentgate.capabilities import Call
    from agentgate.keys import SigningKey
    from agentgate.store import open_store

    url, token, flag, ready = sys.argv[1:5]
    holder, root = SigningKey(bytes([43]) * 32), SigningKey(bytes([41]) * 32)
    repo = GrantRepository(open_store(url))
    authority = Authority(repo, root.public)
    chain, call, after_flag, out = parse_chain(token), Call.tool("payments.refund", {"amount": 5}), 0, []
    while after_flag < 30:
        after = Path(flag).exists()
        decided = authority.decide(Invocation.sign(holder, chain, call, now=1_800_000_000), now=1_800_000_001)
        out.append([after, decided.outcome.value, decided.findings[0].code if decided.findings else None])
        after_flag += after
        Path(ready).touch()
    print(json.dumps(out))
    """
)


def test_a_revocation_that_returned_stops_the_next_decision_of_every_process(
    store: Store, tmp_path: Path
) -> None:
    """Two other processes decide in a loop on the same store (SQLite file, or PostgreSQL through
    their own pools); this one revokes, then raises a flag: no decision that began after seeing the
    flag is an allow."""
    repo = GrantRepository(store)
    chain = delegate(
        issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500"], ttl=3600, now=NOW),
        ALICE, BOB.did, ["tool:payments.refund?amount<=100"], ttl=1800, now=NOW,
    )  # fmt: skip
    flag = tmp_path / "revoked"
    readies = [tmp_path / f"ready-{i}" for i in range(2)]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, store.url, chain.token, str(flag), str(ready)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for ready in readies
    ]
    deadline = time.monotonic() + 60
    while not all(r.exists() for r in readies):
        assert time.monotonic() < deadline and all(w.poll() is None for w in workers)
        time.sleep(0.01)
    revoke(repo, chain.links[0].id, now=NOW)  # the root: the cascade reaches the tip
    flag.touch()
    for worker in workers:
        out, _ = worker.communicate(timeout=60)
        assert worker.returncode == 0
        seen = json.loads(out)
        assert any(outcome == "allow" for after, outcome, _ in seen if not after)
        assert all(outcome == "deny" and code == "revoked" for after, outcome, code in seen if after)
    repo.close()


def test_revoking_by_id_a_grant_this_store_never_saw_kills_it_and_its_children(store: Store) -> None:
    """A grant issued elsewhere (never recorded here) revoked by its id alone: a child delegated
    from it afterwards, never recorded either, is refused too; no descendant is listed."""
    repo = GrantRepository(store)
    parent = issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500"], ttl=600, now=NOW)
    assert revoke(repo, parent.id, now=NOW) == parent.id
    assert repo.descendants(parent.id) == [] and not repo.revoke(parent.id, now=NOW)  # once
    child = delegate(parent, ALICE, BOB.did, ["tool:payments.refund?amount<=50"], ttl=60, now=NOW)
    decided = Authority(repo, ROOT.public).decide(Invocation.sign(BOB, child, PAY, now=NOW), now=NOW)
    assert decided.findings[0].code == "revoked" and decided.findings[0].grant == parent.id
    repo.close()


_GATE_DECIDER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from agentgate.authority import parse_chain
    from agentgate.capabilities import Call
    from agentgate.gate import AgentIdentity, Gate
    from agentgate.keys import SigningKey
    from agentgate.policy import parse_policy
    from agentgate.store import open_store

    url, policy, token, flag, ready = sys.argv[1:6]
    gate = Gate(parse_policy(Path(policy).read_text(), source="p.yaml"), open_store(url))
    me = AgentIdentity("agent", SigningKey(bytes([42]) * 32), parse_chain(token))
    out, after_flag = [], 0
    while after_flag < 20:
        after = Path(flag).exists()
        auth = gate.authorize(me, Call.tool("search.web", {}))
        out.append([after, auth.verdict, [f.code for f in auth.findings]])
        after_flag += after
        Path(ready).touch()
    gate.close()
    print(json.dumps(out))
    """
)


def test_a_gate_in_another_process_refuses_from_the_decision_after_a_revoke_returned(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Gate's own path (decision with the key in hand, revocation read in the decision's
    transaction) in another process, while this one revokes through the grant repository as
    ``agentgate grant revoke`` does: nothing allowed once the flag raised after the revoke is seen."""
    from agentgate.gate import Gate
    from agentgate.policy import parse_policy

    text = _APPROVAL_POLICY.format(root=ROOT.did, agent=ALICE.did, lead=BOB.did)
    text = text.replace("  payments.refund: {", "  search.web: {}\n  payments.refund: {").replace(
        "      - resource: tool:payments.refund\n    ttl_s: 3600\n  lead:",
        "      - resource: tool:payments.refund\n      - resource: tool:search.web\n    ttl_s: 3600\n  lead:",
    )
    (tmp_path / "policy.yaml").write_text(text)
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    gate = Gate(parse_policy(text, source="p.yaml"), store)
    identity = gate.issue(ROOT, name="agent", key=ALICE, role="payer")
    flag, ready = tmp_path / "revoked", tmp_path / "ready"
    argv = [store.url, str(tmp_path / "policy.yaml"), identity.chain.token, str(flag), str(ready)]
    worker = subprocess.Popen([sys.executable, "-c", _GATE_DECIDER, *argv], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert time.monotonic() < deadline and worker.poll() is None
        time.sleep(0.01)
    repo = GrantRepository(store)
    revoke(repo, identity.chain.id)
    flag.touch()
    seen = json.loads(worker.communicate(timeout=60)[0])
    assert worker.returncode == 0
    assert any(verdict == "allow" for after, verdict, _ in seen if not after)
    assert all(verdict == "deny" and "revoked" in codes for after, verdict, codes in seen if after)
    repo.close()
    gate.close()


# --- what held: clocks at the boundaries -------------------------------------------------------------


def test_validity_boundaries_to_the_millisecond_for_signed_and_held_decisions(store: Store) -> None:
    """Expiry is exact (allowed 1 ms before, refused at it), not-before tolerates exactly 30 s,
    the same for a signed invocation and a decision with the key in hand; sub-second clocks never
    round a refused time into an allowed one."""
    repo = GrantRepository(store)
    authority = Authority(repo, ROOT.public)
    chain = issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500"], ttl=600, now=NOW)
    cases = [
        (NOW + 600 - 0.001, None),
        (NOW + 600, "grant_expired"),
        (NOW + 600.999, "grant_expired"),
        (NOW - 30, None),
        (NOW - 30.001, "grant_not_yet_valid"),
        (NOW - 30.5, "grant_not_yet_valid"),
    ]
    for now, code in cases:
        held = authority.decide_held(ALICE, chain, PAY, now=now)
        signed = authority.decide(Invocation.sign(ALICE, chain, PAY, now=now), now=now)
        for decided in (held, signed):
            assert (decided.findings[0].code if decided.findings else None) == code, (now, decided)
    inv = Invocation.sign(ALICE, chain, PAY, now=NOW + 10, ttl=60)
    assert authority.decide(inv, now=NOW + 70).findings[0].code == "invocation_expired"
    assert authority.decide(inv, now=NOW + 69.999).allowed
    early = Invocation.sign(ALICE, chain, PAY, now=NOW + 41)
    assert authority.decide(early, now=NOW + 10.999).findings[0].code == "invocation_not_yet_valid"
    assert authority.decide(early, now=NOW + 11).allowed
    repo.close()


def test_inspect_prints_the_same_times_in_every_time_zone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Token times are Unix seconds; ``grant inspect`` prints them in UTC whatever ``TZ`` says (a
    DST change included: the grant spans the 2026-11-01 change in New York)."""
    from agentgate.cli.main import main

    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    start = 1_793_505_600  # 2026-11-01T04:00:00Z: New York leaves daylight time at 06:00Z
    chain = issue(ROOT, ALICE.did, ["tool:payments.refund"], ttl=86_400, now=start)
    (tmp_path / "t.tok").write_text(chain.token + "\n")
    shown = []
    for zone in ("UTC", "America/New_York", "Asia/Kolkata", "Pacific/Chatham"):
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        assert main(["grant", "inspect", str(tmp_path / "t.tok")]) == 1  # EXPIRED (review R61)
        shown.append(capsys.readouterr().out)
    monkeypatch.delenv("TZ")
    time.tzset()
    assert len(set(shown)) == 1 and "valid 2026-11-01T04:00:00Z → 2026-11-02T04:00:00Z" in shown[0]


# --- what held: approvals used twice at once --------------------------------------------------------


def _together(count: int, work: object) -> list[object]:
    """Run ``work(i)`` in ``count`` threads released at once; each result or the error raised."""
    barrier, results = threading.Barrier(count), [None] * count

    def one(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)  # type: ignore[operator]
        except AgentGateError as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return list(results)


def test_an_approval_is_consumed_once_and_a_vote_counts_once_under_concurrency(store: Store) -> None:
    approvals = ApprovalStore(store)
    later = time.time() + 600
    single = approvals.request("call-1", "did:key:zRequester", later)
    approvals.approve(single, "did:key:zLead")
    used = _together(4, lambda i: approvals.consume(single, "call-1"))
    assert sum(1 for r in used if isinstance(r, tuple)) == 1  # the others: "already used"
    assert all("already used" in str(r) for r in used if not isinstance(r, tuple))

    pair = approvals.request("call-2", "did:key:zRequester", later, quorum=2)
    _together(4, lambda i: approvals.approve(pair, "did:key:zLead", call_hash="call-2"))
    assert approvals.get(pair).state == "pending" and approvals.approvers(pair) == ("did:key:zLead",)
    _together(2, lambda i: approvals.approve(pair, f"did:key:zOther{i}", call_hash="call-2"))
    assert approvals.get(pair).state == "approved"
    wrong = _together(2, lambda i: approvals.consume(pair, "call-3"))  # for an edited call: refused
    assert all("another call" in str(r) for r in wrong)
    assert isinstance(approvals.consume(pair, "call-2"), tuple)


_APPROVAL_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [payer]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
tools:
  payments.refund: {{idempotent: true, args: {{amount: {{type: integer}}}}}}
roles:
  payer:
    kind: agent
    capabilities:
      - resource: tool:payments.refund
    ttl_s: 3600
  lead:
    kind: human
    capabilities:
      - resource: tool:payments.refund
    ttl_s: 3600
approvals:
  refunds:
    resource: tool:payments.refund
    approvers: [lead]
"""

_GATE_WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agentgate.authority import parse_chain
    from agentgate.capabilities import Call
    from agentgate.gate import AgentIdentity, Approval, Gate
    from agentgate.keys import SigningKey
    from agentgate.policy import parse_policy
    from agentgate.store import open_store

    url, policy, token, approval, go = sys.argv[1:6]
    gate = Gate(parse_policy(Path(policy).read_text(), source="p.yaml"), open_store(url))
    me = AgentIdentity("agent", SigningKey(bytes([42]) * 32), parse_chain(token))
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.001)
    auth = gate.authorize(
        me, Call.tool("payments.refund", {"amount": 5}), approval=Approval.parse(__import__("json").loads(approval)),
        call_id="call-1",
    )
    gate.close()
    print(auth.verdict, flush=True)
    """
)


def test_one_signed_approval_presented_by_two_processes_at_once_allows_one_call(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same approval, for the same call of the same grant, presented at once to two gates in
    two processes sharing the store (the tool marked idempotent, so that only the approval's
    single use can refuse the copy): one allow, one refusal, one ``allow`` in the log."""
    from agentgate.gate import Approval, Gate
    from agentgate.policy import parse_policy

    keys = {"root": ROOT, "agent": ALICE, "lead": BOB}
    text = _APPROVAL_POLICY.format(**{n: k.did for n, k in keys.items()})
    (tmp_path / "policy.yaml").write_text(text)
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))  # the workers' too
    gate = Gate(parse_policy(text, source="p.yaml"), store)
    identity = gate.issue(ROOT, name="agent", key=ALICE, role="payer")
    asked = gate.authorize(identity, PAY, call_id="call-1")
    assert asked.needs_approval, asked.reasons
    approval = json.dumps(Approval.sign(asked.approval_payload(), BOB).to_dict())
    go = tmp_path / "go"
    argv = [store.url, str(tmp_path / "policy.yaml"), identity.chain.token, approval, str(go)]
    workers = [
        subprocess.Popen([sys.executable, "-c", _GATE_WORKER, *argv], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for worker in workers:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
    go.touch()
    verdicts = sorted(worker.communicate(timeout=60)[0].split()[-1] for worker in workers)
    assert verdicts == ["allow", "deny"], verdicts
    gate.flush()
    entries = gate.audit.entries()
    allows = [e for e in entries if e.kind == "allow" and e.resource == "tool:payments.refund"]
    assert len(allows) == 1 and allows[0].approver == BOB.did
    gate.close()


# --- what held: keys ----------------------------------------------------------------------------------


def _did_with(prefix: bytes, size: int) -> str:
    import base58

    return "did:key:z" + base58.b58encode(prefix + bytes(range(1, size + 1))).decode()


def test_did_keys_of_other_key_types_are_refused_everywhere_a_did_enters(tmp_path: Path) -> None:
    """secp256k1 (0xe7), X25519 (0xec), P-256 (0x1200) and an Ed25519 key one byte long: refused
    as a trust anchor, as an audience, as a key file's content, and as an approver."""
    from agentgate.errors import KeyFileError
    from agentgate.gate import Approval
    from agentgate.keys import load_public_key

    for did in (
        _did_with(b"\xe7\x01", 33),
        _did_with(b"\xec\x01", 32),
        _did_with(b"\x80\x24", 33),
        _did_with(b"\xed\x01", 33),
    ):
        with pytest.raises(KeyFileError):
            load_public_key(did)
        (tmp_path / "k.pub").write_text(did + "\n")
        with pytest.raises(KeyFileError):
            load_public_key(tmp_path / "k.pub")
        with pytest.raises(TokenFormatError):
            issue(ROOT, did, ["tool:payments.refund"], ttl=60, now=NOW)
        with pytest.raises(TokenFormatError, match="trust anchor"):
            verify_chain(issue(ROOT, ALICE.did, ["tool:payments.refund"], ttl=60, now=NOW), [did], now=NOW)
        assert not Approval("r", "c", did, bytes(64)).verify()


def test_a_private_key_reached_through_a_symlink_is_judged_by_the_file_it_reaches(tmp_path: Path) -> None:
    from agentgate.errors import KeyFileError
    from agentgate.keys import load_signing_key, save_key

    key_path, _ = save_key(ALICE, tmp_path / "keys", "alice")
    link = tmp_path / "link.key"
    link.symlink_to(key_path)
    assert load_signing_key(link).did == ALICE.did
    key_path.chmod(0o640)  # group-readable: refused through the link too
    with pytest.raises(KeyFileError, match="accessible by others"):
        load_signing_key(link)


# --- defects -----------------------------------------------------------------------------------------


def test_a_verifier_with_another_clock_tolerance_refuses_a_replay(store: Store) -> None:
    """The nonce was stored under (signed expiry + this verifier's skew): two verifiers on one store
    with different tolerances (``Authority(skew=60)`` beside the default 30 s) wrote different
    keys for the same invocation, so each accepted it once: a replay."""
    repo = GrantRepository(store)
    chain = issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500"], ttl=3600, now=NOW)
    inv = Invocation.sign(ALICE, chain, PAY, now=NOW)
    strict, lenient = Authority(repo, ROOT.public), Authority(repo, ROOT.public, skew=120)
    assert strict.decide(inv, now=NOW + 1).outcome is Outcome.ALLOW
    replayed = lenient.decide(inv, now=NOW + 2)
    assert replayed.outcome is Outcome.DENY and replayed.findings[0].code == "replayed_invocation"
    again = decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 3, skew=0, cache=ChainCache())
    assert again.findings[0].code == "replayed_invocation"
    repo.close()


def test_a_grant_from_an_issuer_whose_clock_runs_ahead_is_delegable_as_soon_as_it_is_usable(
    store: Store,
) -> None:
    """Decisions tolerate 30 s on not-before, ``delegate`` tolerated none: with the issuer's clock
    2 s ahead of the holder's, the fresh grant was usable at once but ``grant delegate`` (and the
    Gate's delegation) refused it, ``grant_not_yet_valid``, until the holder's clock caught up."""
    parent = issue(ROOT, ALICE.did, ["tool:payments.refund?amount<=500"], ttl=600, now=NOW)
    here = NOW - 2  # the holder's clock
    verify_chain(parent, ROOT.public, now=here)
    child = delegate(parent, ALICE, BOB.did, ["tool:payments.refund?amount<=50"], ttl=60, now=here)
    assert child.tip.not_before == NOW  # never before its parent
    repo = GrantRepository(store)
    inv = Invocation.sign(BOB, child, PAY, now=here)
    decided = decide(inv, repo=repo, trusted=ROOT.public, now=here, cache=ChainCache())
    assert decided.outcome is Outcome.ALLOW
    with pytest.raises(TokenFormatError, match="ends before the parent grant starts"):
        delegate(parent, ALICE, BOB.did, ["tool:payments.refund?amount<=50"], ttl=2, now=here)
    with pytest.raises(Expired, match="grant_not_yet_valid"):  # beyond the tolerance: still refused
        delegate(parent, ALICE, BOB.did, ["tool:payments.refund?amount<=50"], ttl=60, now=NOW - 31)
    repo.close()


def test_a_revocation_is_recorded_whatever_its_free_text_reason_holds(store: Store) -> None:
    """``revoke(..., reason=...)`` with a lone surrogate (text decoded with ``surrogateescape``, a
    JSON ``\\ud800`` escape) raised UnicodeEncodeError from SQLite, and with a NUL character a
    StoreError from PostgreSQL: a traceback or an error, and the grant stayed alive."""
    repo = GrantRepository(store)
    authority = Authority(repo, ROOT.public)
    for i, reason in enumerate(["key leaked \udcff", "nul \x00 here"]):
        key = SigningKey(bytes([70 + i]) * 32)
        chain = issue(ROOT, key.did, ["tool:payments.refund"], ttl=600, now=NOW)
        assert revoke(repo, chain, reason=reason, now=NOW) == chain.id
        decided = authority.decide_held(key, chain, PAY, now=NOW + 1)
        assert decided.findings[0].code == "revoked"
        (stored,) = store.query("SELECT reason FROM agentgate_revocations WHERE grant_id = ?", (chain.id,))
        assert stored[0] == reason.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")
    repo.close()


@pytest.mark.postgres
def test_a_host_whose_clock_runs_ahead_cannot_prune_the_nonces_other_hosts_still_need(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every 1,024th nonce prunes those of invocations that expired over an hour ago, by the
    pruning host's clock: one host sharing the PostgreSQL store with its clock two hours ahead
    deleted every live nonce of the other hosts, which then accepted a replay. Pruning now takes
    the earlier of its own clock and the database server's."""
    import agentgate.store.grants as grants_module
    from agentgate.store._postgres import PostgresStore

    honest_store, fast_store = PostgresStore(postgres_url), PostgresStore(postgres_url)
    honest, fast = GrantRepository(honest_store), GrantRepository(fast_store)
    live = int(time.time()) + 60
    assert honest.consume_nonce("did:key:zAlice", "live", live, ["root"]) == "fresh"

    class _TwoHoursAhead:  # the fast host's clock
        @staticmethod
        def time() -> float:
            return time.time() + 7200

    monkeypatch.setattr(grants_module, "time", _TwoHoursAhead)
    ahead = int(_TwoHoursAhead.time())
    for i in range(1024):  # invocations its own callers (as fast) signed: allowed there
        assert fast.consume_nonce("did:key:zBob", f"n{i}", ahead + 60, ["root"]) == "fresh"
    with fast_store.transaction() as tx, fast.within(tx):  # as its gateway decides: in a decision's tx
        for i in range(1024):
            assert fast.consume_nonce("did:key:zBob", f"m{i}", ahead + 60, ["root"]) == "fresh"
    monkeypatch.undo()
    assert honest.consume_nonce("did:key:zAlice", "live", live, ["root"]) == "replay"
    for repo, opened in ((honest, honest_store), (fast, fast_store)):
        repo.close()
        opened.close()
