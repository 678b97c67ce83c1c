"""The key lifecycle of an operator running agentgate for months
(docs/operations.md, "Rotating keys" and "Rotating the log key"; docs/policy-reference.md,
"Changing a policy"), end to end with the CLI and the Python API on real SQLite stores, the log
key's rotation on PostgreSQL too.

What holds:

- trust anchor: a new anchor listed beside the old one issues while the old one's chains still
  decide (the overlap); once the old anchor leaves the policy, its chains and their sub-agents'
  are refused ``untrusted_root`` (401 at the gateway), also by ``agentgate grant check --trust
  NEW``, ``agentgate grant issue --policy`` refuses the retired key, and a request waiting for
  approval under it is closed (the ``deny`` refers to its ``approval_required``; no longer listed);
- approver key replaced under the same name: the vote it gave before no longer counts, an approval
  it signs after is not counted (the call is asked again), the new key's counts;
- a leaked agent key: revoking every grant the store records for its DID (``agentgate grant revoke
  ID``, from another process) refuses at once, in a gateway already running, its calls and those
  of a grant the leaked key delegated offline (never recorded). There was no revocation by holder
  (R45 added ``agentgate grant revoke --holder`` and ``Gate.revoke_holder``) and there is no key
  denylist: docs/operations.md gives the command and the policy change that also stops grants
  the store never recorded;
- log key: the documented procedure (checkpoint --out, move aside, AGENTGATE_LOG_PREVIOUS_KEYS,
  checkpoint) works on SQLite and PostgreSQL: every checkpoint verifies, a proof bundle made before
  the rotation verifies with the old public key and one made after with the new; without the
  previous keys, checkpoint creates no key and verify reports the old checkpoints;
- a key file replaced under a running Gate (a principal's ``key:``) is not picked up: the process
  keeps the key it loaded until it restarts (documented: a policy takes effect at restart).

What did not (fixed in agentgate/audit/note.py): after a log-key rotation, ``audit verify`` without
the previous key, and ``Gate.verify`` of a Gate still running on the old key, said only "note
carries no signature by the log key", which reads as a forgery; the message now names the key id
that did sign the checkpoint beside the log key's (the one ``audit checkpoint`` prints in its
verifier key) and says what to do. docs/operations.md did not say that a running process keeps
the log key it loaded (its ``Gate.verify`` refuses the new key's checkpoints, and it could go on
signing with a compromised key): now it does, with a "Rotating keys" section for the other keys.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from _raw_sqlite import opened

from agentgate.audit.note import key_id
from agentgate.audit.proof import verify_bundle
from agentgate.authority import Budget, Chain, Invocation, delegate, issue
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.dispatch.gateway import GatewayGate
from agentgate.errors import AgentGateError, ScopeCreep, TamperDetected
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey, load_public_key, save_key
from agentgate.policy import load_policy, parse_policy
from agentgate.store import SQLiteStore

KEYS = {
    n: SigningKey.generate() for n in ("root", "root2", "agent", "agent2", "alice", "alice2", "bob", "evil")
}
ORIGIN = "agentgate.local/audit"

POLICY = """
version: 1
trust_anchors:
{anchors}
principals:
  agent: {{kind: agent, {agent}, roles: [worker]}}
  alice: {{kind: human, did: "{alice}", roles: [lead]}}
  bob: {{kind: human, did: "{bob}", roles: [lead]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  refund:
    args: {{amount: {{type: integer, required: true}}}}
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:refund
      - resource: model:small
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 600
    delegation:
      max_depth: 1
      capabilities:
        - resource: tool:lookup
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: [alice, bob]
    quorum: {quorum}
"""

LOOKUP = Call.tool("lookup", {"id": "1"})
REFUND = Call.tool("refund", {"amount": 500})
MODEL = Call.model("small", {"max_tokens": 10})


def policy_text(
    anchors: tuple[str, ...] = ("root",), *, alice: str = "alice", quorum: int = 1, agent: str | None = None
) -> str:
    lines = "\n".join(f'  {name}: {{did: "{KEYS[name].did}"}}' for name in anchors)
    return POLICY.format(
        anchors=lines,
        agent=agent or f'did: "{KEYS["agent"].did}"',
        alice=KEYS[alice].did,
        bob=KEYS["bob"].did,
        quorum=quorum,
    )


def gate(path: Path, cls: type[Gate] = Gate, **changes: object) -> Gate:
    """A process on the store at ``path`` with the policy changed by ``changes``."""
    return cls(parse_policy(policy_text(**changes), source="p.yaml"), SQLiteStore(path / "ag.db"))  # type: ignore[arg-type]


def codes(auth: object) -> list[tuple[str, str]]:
    return [(str(f.kind), f.code) for f in auth.findings]  # type: ignore[attr-defined]


def status(g: GatewayGate, key: SigningKey, chain: Chain, call: Call = MODEL) -> tuple[int, str | None]:
    """What the gateway answers ``key`` presenting ``chain`` for ``call``."""
    answer = g.authorize_invocation(chain.token, Invocation.sign(key, chain, call).encode(), call, (1, 1))
    return answer.status, answer.code


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI's environment: the store ``tmp_path/ag.db``, the log key beside it."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "ag.db"))
    for name in ("AGENTGATE_LOG_KEY", "AGENTGATE_LOG_PREVIOUS_KEYS", "AGENTGATE_LOG_ORIGIN"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


# --- the trust anchor -----------------------------------------------------------------------------


def test_an_anchor_added_then_the_old_one_retired_refuses_only_the_old_roots_chains(env: Path) -> None:
    both = gate(env, anchors=("root", "root2"))
    try:
        old = both.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        new = both.issue(KEYS["root2"], name="agent", key=KEYS["agent"], role="worker")
        old_sub = both.delegate(
            old,
            name="sub",
            key=SigningKey.generate(),
            capabilities=["tool:lookup"],
            ttl=timedelta(seconds=60),
        )
        for identity in (old, new, old_sub):  # the overlap: both roots decide
            assert both.authorize(identity, LOOKUP).allowed
    finally:
        both.close()
    retired = gate(env, GatewayGate, anchors=("root2",))
    assert isinstance(retired, GatewayGate)
    try:
        for identity in (old, old_sub):
            refused = retired.authorize(identity, LOOKUP)
            assert not refused.allowed
            assert codes(refused) == [("authority_chain_opacity", "untrusted_root")]
            assert KEYS["root"].did[:16] in refused.reasons[0]  # names the retired root
        assert status(retired, KEYS["agent"], old.chain) == (401, "untrusted_root")
        assert retired.authorize(new, LOOKUP).allowed
        assert status(retired, KEYS["agent"], new.chain) == (200, None)
        with pytest.raises(AgentGateError):  # the retired key issues nothing more
            retired.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    finally:
        retired.close()


def test_the_cli_refuses_a_retired_roots_token_and_issue(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = env / "k"
    for name in ("root", "root2", "agent"):
        save_key(KEYS[name], keys, name)
    assert main(["grant", "issue", "--issuer", str(keys / "root.key"), "--to", str(keys / "agent.pub"),
                 "--allow", "tool:lookup", "--ttl", "1h", "--out", str(env / "old.tok")]) == 0  # fmt: skip
    check = ["grant", "check", str(env / "old.tok"), "--as", str(keys / "agent.key"), "--tool", "lookup",
             "--args", '{"id": "1"}', "--json"]  # fmt: skip
    capsys.readouterr()
    both = ["--trust", str(keys / "root.pub"), "--trust", str(keys / "root2.pub")]
    assert main([*check, *both]) == 0
    capsys.readouterr()
    assert main([*check, "--trust", str(keys / "root2.pub")]) == 1
    decision = json.loads(capsys.readouterr().out)
    assert decision["outcome"] == "deny"
    assert [(f["kind"], f["code"]) for f in decision["findings"]] == [
        ("authority_chain_opacity", "untrusted_root")
    ]
    (env / "p.yaml").write_text(policy_text(anchors=("root2",)))
    issue = [
        "grant",
        "issue",
        "--to",
        str(keys / "agent.pub"),
        "--policy",
        str(env / "p.yaml"),
        "--role",
        "worker",
    ]
    assert main([*issue, "--issuer", str(keys / "root.key"), "--out", str(env / "x.tok")]) == 2
    assert not (env / "x.tok").exists()
    assert main([*issue, "--issuer", str(keys / "root2.key"), "--out", str(env / "x.tok")]) == 0


def test_a_request_waiting_under_a_retired_anchor_is_closed(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = gate(env, anchors=("root", "root2"))
    try:
        agent = old.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        asked = old.authorize(agent, REFUND, call_id="c1")
        assert asked.needs_approval and asked.request is not None
        asked_at = asked.audit_index
    finally:
        old.close()
    new = gate(env, anchors=("root2",))
    try:
        refused = new.authorize(
            agent, REFUND, call_id="c1", approval=Approval.sign(asked.request, KEYS["alice"])
        )
        assert not refused.allowed and codes(refused) == [("authority_chain_opacity", "untrusted_root")]
        new.flush()
        last = list(new.audit.entries())[-1]
        assert (last.kind, last.ref) == ("deny", asked_at)
    finally:
        new.close()
    capsys.readouterr()
    assert main(["approval", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


# --- an approver's key ------------------------------------------------------------------------------


def test_an_approvers_replaced_key_no_longer_counts_and_the_new_one_does(env: Path) -> None:
    old = gate(env, quorum=2)
    try:
        agent = old.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        asked = old.authorize(agent, REFUND, call_id="c1")
        assert asked.request is not None
        request = asked.request
        assert old.authorize(
            agent, REFUND, call_id="c1", approval=Approval.sign(request, KEYS["alice"])
        ).needs_approval
    finally:
        old.close()
    new = gate(env, quorum=2, alice="alice2")  # alice's key rotated while the request waits
    try:
        # her vote under the old key no longer counts: bob's alone is one of two
        assert new.authorize(
            agent, REFUND, call_id="c1", approval=Approval.sign(request, KEYS["bob"])
        ).needs_approval
        again = new.authorize(agent, REFUND, call_id="c1", approval=Approval.sign(request, KEYS["alice"]))
        assert again.needs_approval and not again.allowed  # the retired key signs nothing that counts
        assert new.authorize(
            agent, REFUND, call_id="c1", approval=Approval.sign(request, KEYS["alice2"])
        ).allowed
    finally:
        new.close()


# --- a leaked agent key -----------------------------------------------------------------------------


def test_a_leaked_agent_key_is_cut_off_at_once_by_revoking_every_grant_it_holds(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    running = gate(env, GatewayGate, anchors=("root", "root2"))
    assert isinstance(running, GatewayGate)
    try:
        one = running.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        two = running.issue(KEYS["root2"], name="agent", key=KEYS["agent"], role="worker")
        # what a thief does with the key: delegates to a key of its own, offline, unrecorded
        stolen = delegate(one.chain, KEYS["agent"], KEYS["evil"].public, ["model:small"], ttl=60)
        calls = [(KEYS["agent"], one.chain), (KEYS["agent"], two.chain), (KEYS["evil"], stolen)]
        # Since review R57 the policy holds a chain made outside the Gate to the delegation rule
        # (the worker may hand on tool:lookup alone), so the thief's own delegation is refused
        # even before the revocation; the leaked key's grants still serve the thief until then.
        assert [status(running, k, c) for k, c in calls] == [(200, None)] * 2 + [
            (403, "delegation_wider_than_policy")
        ]
        # docs/operations.md, Rotating keys: the grants the store records for the leaked DID
        with opened(env / "ag.db") as db:
            query = "SELECT id FROM agentgate_grants WHERE audience = ?"
            ids = sorted(row[0] for row in db.execute(query, (KEYS["agent"].did,)))
        assert ids == sorted([one.grant_id, two.grant_id])
        for grant_id in ids:  # another process, as an operator would
            assert main(["grant", "revoke", grant_id, "--reason", "key leaked", "--by", "ops"]) == 0
        assert [status(running, k, c) for k, c in calls] == [(401, "revoked")] * 3
        assert not running.authorize(one, LOOKUP).allowed
        # the gap until the restart below: a grant to the leaked key that the store never recorded
        offline = issue(
            KEYS["root2"],
            KEYS["agent"].public,
            ["model:small"],
            ttl=60,
            budget=Budget(1_000_000, "usd_micros"),
        )
        assert status(running, KEYS["agent"], offline) == (200, None)
    finally:
        running.close()
    # and the policy names the agent's new key: what the store never recorded dies too
    restarted = gate(env, GatewayGate, agent=f'did: "{KEYS["agent2"].did}"', anchors=("root", "root2"))
    assert isinstance(restarted, GatewayGate)
    try:
        assert status(restarted, KEYS["agent"], offline) == (403, "policy_denied")
    finally:
        restarted.close()


# --- the log key ------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def log_store(request: pytest.FixtureRequest, env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The store the CLI uses (SQLite or PostgreSQL); returns the directory of its log key."""
    monkeypatch.chdir(env)
    if request.param == "sqlite":
        return env
    monkeypatch.setenv("AGENTGATE_STORE", request.getfixturevalue("postgres_url"))
    return env / ".agentgate"


def _checkpoint(out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """``agentgate audit checkpoint --out OUT``; the key id of its verifier key."""
    capsys.readouterr()
    assert main(["audit", "checkpoint", "--out", str(out)]) == 0
    verifier = capsys.readouterr().out.split("verifier key: ")[1].strip()
    return verifier.split("+")[1]


def _revoke_one(keys: Path, name: str) -> None:
    """One audited act: a grant issued and revoked through the CLI (a ``revoke`` entry)."""
    save_key(SigningKey.generate(), keys, name)
    token = keys / f"{name}.tok"
    assert main(["grant", "issue", "--issuer", str(keys / f"{name}.key"), "--to", KEYS["agent"].did,
                 "--allow", "tool:lookup", "--ttl", "1h", "--out", str(token)]) == 0  # fmt: skip
    assert main(["grant", "revoke", str(token), "--reason", "test"]) == 0


def test_the_documented_log_key_rotation_keeps_every_checkpoint_and_proof_verifiable(
    log_store: Path, env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    keys, saved = env / "k", env / "saved.checkpoint"
    _revoke_one(keys, "a")
    old_id = _checkpoint(saved, capsys)  # step 1
    assert main(["audit", "prove", "0", "--out", str(env / "old.bundle")]) == 0
    old_pub = load_public_key(log_store / "log.pub")
    assert old_id == key_id(ORIGIN, old_pub).hex()
    (log_store / "log.key").rename(env / "log-2026-11.key")  # step 2
    (log_store / "log.pub").rename(env / "log-2026-11.pub")
    capsys.readouterr()
    assert main(["audit", "checkpoint"]) == 2  # step 3 forgotten: no key is made
    assert "AGENTGATE_LOG_PREVIOUS_KEYS" in capsys.readouterr().err
    assert not (log_store / "log.key").exists()
    monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", str(env / "log-2026-11.pub"))  # step 3
    _revoke_one(keys, "b")
    new_id = _checkpoint(saved, capsys)  # step 4: a new key, building on the saved checkpoint
    assert new_id != old_id
    new_pub = load_public_key(log_store / "log.pub")
    capsys.readouterr()
    assert main(["audit", "verify", "--checkpoint", str(saved)]) == 0
    assert "2 checkpoints" in capsys.readouterr().out
    assert main(["audit", "prove", "1", "--out", str(env / "new.bundle")]) == 0
    old_bundle, new_bundle = (env / "old.bundle").read_text(), (env / "new.bundle").read_text()
    assert verify_bundle(old_bundle, old_pub, ORIGIN)[1].size == 1
    assert verify_bundle(new_bundle, new_pub, ORIGIN)[1].size == 2
    with pytest.raises(TamperDetected):
        verify_bundle(old_bundle, new_pub, ORIGIN)
    # An auditor without the previous key: the old checkpoint is reported, naming who signed it
    # (the key id `audit checkpoint` printed then), not only "no signature by the log key".
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS")
    capsys.readouterr()
    assert main(["audit", "verify", "--key", str(log_store / "log.pub")]) == 1
    out = capsys.readouterr().out
    assert "checkpoint #1" in out and f"key id {old_id}" in out and "AGENTGATE_LOG_PREVIOUS_KEYS" in out
    monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", str(env / "log-2026-11.pub"))
    assert main(["audit", "verify", "--key", str(log_store / "log.pub")]) == 0


def test_a_gate_running_across_a_log_key_rotation_keeps_the_key_it_loaded(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    running = gate(env)
    try:
        agent = running.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        old_id = key_id(ORIGIN, running.audit.public_key).hex()
        _checkpoint(env / "saved", capsys)
        (env / "log.key").rename(env / "log-1.key")
        (env / "log.pub").rename(env / "log-1.pub")
        monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", str(env / "log-1.pub"))
        assert running.authorize(agent, LOOKUP).allowed
        running.flush()
        new_id = _checkpoint(env / "saved", capsys)
        assert running.authorize(agent, LOOKUP).allowed  # decisions go on
        running.flush()
        # ... but the process still holds the old key: its checkpoint cannot build on the new
        # key's, and says which keys are involved (docs/operations.md: restart every process)
        with pytest.raises(TamperDetected) as refused:
            running.verify()
        assert f"key id {old_id}" in str(refused.value) and f"key id {new_id}" in str(refused.value)
    finally:
        running.close()
    restarted = gate(env)
    try:
        report = restarted.verify()
        assert report.ok and report.checkpoints_checked == 3
        assert key_id(ORIGIN, restarted.audit.public_key).hex() == new_id
    finally:
        restarted.close()


# --- a key file replaced under a running process -----------------------------------------------------


def test_a_principals_key_file_replaced_under_a_running_gate_waits_for_the_restart(env: Path) -> None:
    keys = env / "keys"
    keys.mkdir()
    (keys / "agent.pub").write_text(KEYS["agent"].did + "\n")
    (env / "p.yaml").write_text(policy_text(agent="key: keys/agent.pub"))
    running = Gate(load_policy(env / "p.yaml"), SQLiteStore(env / "ag.db"))
    try:
        old = running.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        (keys / "agent.pub").write_text(KEYS["agent2"].did + "\n")  # the agent's key rotated on disk
        assert running.authorize(old, LOOKUP).allowed  # not picked up: the policy loaded at start
        # The new key is no principal of the policy loaded at start: since review R58 Gate.issue
        # refuses it (until then it issued a grant every call on which was refused).
        with pytest.raises(ScopeCreep, match="is not a principal of this policy"):
            running.issue(KEYS["root"], name="agent", key=KEYS["agent2"], role="worker")
    finally:
        running.close()
    restarted = Gate(load_policy(env / "p.yaml"), SQLiteStore(env / "ag.db"))
    try:
        assert restarted.authorize(old, LOOKUP).reasons == (
            f"{KEYS['agent'].did!r} is not a principal of this policy",
        )
        new = restarted.issue(KEYS["root"], name="agent", key=KEYS["agent2"], role="worker")
        assert restarted.authorize(new, LOOKUP).allowed
    finally:
        restarted.close()
