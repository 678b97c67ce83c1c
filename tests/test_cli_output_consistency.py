"""Is what the command line prints consistent across verbs (docs/cli.md, Output
conventions)? Every `--json` output is run on one real SQLite store that holds something for it
(a grant chain, a revocation, an approval request, a breaker, a dead letter, broker leases and a
queue, an unsettled call) and walked whole.

What did not hold, fixed in agentgate/cli/ (each pinned below):
- `approval list --json` printed `expires_at` as `1796154156.0` where the LangGraph interrupt
  payload (and `approval sign`) has `1796154156`: a script matching the two saw different values.
  Every CLI time in JSON now goes through `unix()`: whole seconds are an integer, a recorded
  fraction is kept, a non-finite time is `null`; so broker, breaker and dead-letter times too.
- `store prune --json` printed `before` with a fraction (`1796067159.4222562`); it is now whole
  seconds, the cutoff applied.
- `audit explain` showed a grant's expiry as Unix seconds (`expires 1796157150`) where every
  other human output shows `2026-11-29T18:00:00Z`.
- Without the log's private key, `audit prove`, `verify`, `show`, `explain`, `report`, `tasks
  unsettled` and `tasks settle` said only `cannot read private key: No such file or directory`;
  they now say, as `audit checkpoint` and `grant revoke` do, that there is no log key there, where
  agentgate looks, to point AGENTGATE_LOG_KEY at it, and (the reading verbs) that `--key log.pub`
  reads the log without it. A key that is there but unusable keeps its own reason.
- The examples' "check it yourself" hint named `.venv/bin/agentgate` (right only in this repo).

- `tasks settle --older-than` took only seconds (`900`) and `store prune --older-than` only a
  DURATION (`15m`): the same flag refused the other's spelling. settle now takes both; `nan`,
  `inf`, `1e3` and negatives are refused as argument errors.

What holds: every JSON key is snake_case; findings (`grant check`, `policy lint`) leave out
`grant`/`field`/`line`/... that name nothing, every other object has all its keys (`null` for
none); ids are text and audit indexes integers everywhere.

Decided not a defect (the lead): `grant inspect --json` names a link's times `not_before` and
`expires`, the token's own field names (docs/token-format.md), where every other output says
`*_at`; docs/cli.md's output conventions name the exception.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from agentgate.cli.main import main
from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology
from agentgate.store import open_store
from agentgate.store.approvals import ApprovalStore
from agentgate.store.broker_leases import BrokerLeaseStore
from agentgate.store.dead_letters import AttemptError, DeadLetter, DeadLetterStore
from agentgate.store.leases import SharedBreakers

ROOT = Path(__file__).resolve().parents[1]
WHOLE = 1_896_000_000  # a whole second, in the future (2030)

_TIME_KEYS = re.compile(r"(.*_at|before|deadline|notice_deadline|not_before|expires)$")


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store with something in it for every listing; the log key beside it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "st.db"))
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    for name in ("root", "alice", "bob"):
        assert main(["keys", "new", name, "--dir", "keys"]) == 0
    grant = ["--allow", "tool:x", "--ttl", "1h"]
    assert (
        main(
            [
                "grant",
                "issue",
                "--issuer",
                "keys/root.key",
                "--to",
                "keys/alice.pub",
                *grant,
                "--out",
                "a.tok",
            ]
        )
        == 0
    )
    delegate = ["grant", "delegate", "a.tok", "--as", "keys/alice.key", "--to", "keys/bob.pub"]
    # Shorter than its parent's hour: a child may not outlive it, and a second may tick between.
    assert main([*delegate, "--allow", "tool:x", "--ttl", "30m", "--out", "b.tok"]) == 0
    assert main(["grant", "revoke", "b.tok"]) == 0  # audit entry 0: the child revoked, the root not
    assert main(["audit", "checkpoint"]) == 0
    store = open_store(str(tmp_path / "st.db"))
    try:
        ApprovalStore(store).request("c" * 64, "did:key:zRequester", WHOLE)
        ApprovalStore(store).request("d" * 64, "did:key:zRequester", WHOLE + 0.5)
        SharedBreakers(store).publish("tool:x", "open", float(WHOLE))
        error = AttemptError(1, "transient", "TimeoutError", "slow", float(WHOLE))
        letter = DeadLetter(
            "dl1", WHOLE + 0.25, "x", "t", "p", None, None, None, "e" * 64, ("g",), "r", (error,)
        )
        DeadLetterStore(store).record(letter)
        clock = [float(WHOLE)]
        broker = Broker(
            synthetic_topology(nodes=1, gpus_per_node=8),
            [TenantQuota("team", 8)],
            clock=lambda: clock[0],
            ttl_s=60,
            journal=BrokerLeaseStore(store),
        )
        broker.submit(GangRequest("r1", "team", 8))
        broker.submit(GangRequest("r2", "team", 4))  # waits: the quota is held
    finally:
        store.close()
    return tmp_path


def _json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> Any:
    capsys.readouterr()
    assert main(argv) == code, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _walk(value: Any, path: str = "") -> list[tuple[str, str, Any]]:
    """Every (path, key, value) in a JSON document."""
    found: list[tuple[str, str, Any]] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            found.append((path, key, inner))
            found += _walk(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            found += _walk(item, f"{path}[]")
    return found


def _outputs(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    trust = ["--trust", "keys/root.pub", "--tool", "x"]
    return {
        "approval list": _json(capsys, ["approval", "list", "--json"]),
        "store prune": _json(capsys, ["store", "prune", "--older-than", "1d", "--json"]),
        "tasks dead-letters": _json(capsys, ["tasks", "dead-letters", "--json"]),
        "tasks breakers": _json(capsys, ["tasks", "breakers", "--json"]),
        "tasks unsettled": _json(capsys, ["tasks", "unsettled", "--json"]),
        "broker leases": _json(capsys, ["broker", "leases", "--json"]),
        "broker queue": _json(capsys, ["broker", "queue", "--json"]),
        "grant inspect": _json(capsys, ["grant", "inspect", "b.tok", "--json"], 1),  # revoked: exit 1
        "grant check": _json(capsys, ["grant", "check", "a.tok", "--as", "keys/alice.key", *trust, "--json"]),
        "policy lint": _json(capsys, ["policy", "lint", str(ROOT / "policies" / "support.yaml"), "--json"]),
    }


def test_every_json_time_is_unix_seconds_whole_seconds_an_integer(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = _outputs(capsys)
    times = [
        (verb, f"{path}.{key}", value)
        for verb, doc in outputs.items()
        for path, key, value in _walk(doc)
        if _TIME_KEYS.match(key) and key != "approval_expiry_s"
    ]
    # Each listing had a time to show: the check below is not vacuous.
    assert {verb for verb, _, _ in times} >= {
        "approval list",
        "store prune",
        "tasks dead-letters",
        "tasks breakers",
        "broker leases",
        "broker queue",
        "grant inspect",
        "grant check",
    }, times
    wrong = [
        (verb, where, value)
        for verb, where, value in times
        if value is not None
        and not (isinstance(value, int) and not isinstance(value, bool))
        and not (isinstance(value, float) and not value.is_integer())
        and not (verb == "tasks unsettled" and where.endswith("allowed_at"))  # the entry's time text
    ]
    assert not wrong, wrong


def test_approval_list_expiry_is_the_interrupt_payloads_number(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _json(capsys, ["approval", "list", "--json"])
    expiries = sorted((row["expires_at"] for row in rows), key=float)
    # The Gate writes int(time.time()) + expiry_s into the payload: the same number, an integer.
    assert expiries == [WHOLE, WHOLE + 0.5]
    assert type(expiries[0]) is int
    capsys.readouterr()
    assert main(["approval", "list", "--json"]) == 0
    assert f'"expires_at": {WHOLE}\n' in capsys.readouterr().out  # not 1896000000.0


def test_store_prune_before_is_the_whole_second_cutoff(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    low = int(time.time()) - 86400
    out = _json(capsys, ["store", "prune", "--older-than", "1d", "--json"])
    assert type(out["before"]) is int
    assert low <= out["before"] <= int(time.time()) - 86400


def test_broker_and_task_times_keep_a_fraction_and_drop_a_whole_seconds_point(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (letter,) = _json(capsys, ["tasks", "dead-letters", "--json"])
    assert letter["recorded_at"] == WHOLE + 0.25  # a recorded fraction is kept
    assert type(letter["errors"][0]["at"]) is int
    (breaker,) = _json(capsys, ["tasks", "breakers", "--json"])
    assert breaker["opened_at"] == WHOLE and type(breaker["opened_at"]) is int
    leases = _json(capsys, ["broker", "leases", "--json"])
    assert type(leases["taken_at"]) is int
    (lease,) = leases["leases"]
    assert (lease["granted_at"], lease["expires_at"]) == (WHOLE, WHOLE + 60)
    queue = _json(capsys, ["broker", "queue", "--json"])
    (waiting,) = queue["queue"]
    assert type(waiting["submitted_at"]) is int
    assert waiting["deadline"] == WHOLE + 3600 and type(waiting["deadline"]) is int


def test_every_json_key_is_snake_case_and_ids_are_text(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = _outputs(capsys)
    keys = [(verb, path, key) for verb, doc in outputs.items() for path, key, _ in _walk(doc)]
    assert len(keys) > 100
    assert not [k for k in keys if not re.fullmatch(r"[a-z][a-z0-9_]*", k[2])]
    for verb, doc in outputs.items():
        for _, key, value in _walk(doc):
            if key in {"id", "tip", "call_hash", "grant", "requester"}:
                assert isinstance(value, str), (verb, key, value)
            if key in {"allow_index", "decision", "index"} and value is not None:
                assert type(value) is int, (verb, key, value)


def test_audit_explain_shows_a_grants_expiry_as_utc_time(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["audit", "explain", "0"]) == 0
    out = capsys.readouterr().out
    root, child = [line for line in out.splitlines() if "└── grant " in line]
    assert "REVOKED" in child
    assert re.search(r"\(expires \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)$", root), root


READERS = [
    ["audit", "verify"],
    ["audit", "show"],
    ["audit", "explain", "0"],
    ["audit", "report", "--out", "r.html"],
]
SIGNERS = [["audit", "prove", "0", "--out", "p.bundle"], ["tasks", "settle", "k" * 64, "--ran"]]


def test_every_verb_says_the_same_when_the_log_key_is_missing(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (world / "log.key").rename(world / "log.key.away")
    lines: dict[str, str] = {}
    for argv in [
        *READERS,
        *SIGNERS,
        ["audit", "checkpoint"],
        ["grant", "revoke", "a.tok"],
    ]:
        capsys.readouterr()
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and not captured.out, (argv, captured)
        lines[" ".join(argv[:2])] = err[0]
    for verb, line in lines.items():
        assert "No such file or directory" not in line, (verb, line)
        assert f"{world / 'log.key'}: no log key there" in line, (verb, line)
        assert "AGENTGATE_LOG_KEY" in line, (verb, line)
    for argv in READERS:
        assert "--key log.pub" in lines[" ".join(argv[:2])]
    assert "log.pub will not do" in lines["audit prove"]
    assert not (world / "p.bundle").exists() and not (world / "r.html").exists()
    # With log.pub the reading verbs need no private key, as the line says.
    for argv in READERS:
        assert main([*argv, "--key", "log.pub"]) == 0, argv
    # Listing what waits to be settled checks no signature: no key at all (review R68).
    assert main(["tasks", "unsettled"]) == 0


def test_a_log_key_that_is_there_but_unusable_keeps_its_own_reason(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = world / "log.key"
    key.write_text("not a key\n")
    key.chmod(0o600)
    capsys.readouterr()
    assert main(["audit", "prove", "0", "--out", "p.bundle"]) == 2
    err = capsys.readouterr().err
    assert "not a PKCS#8 PEM private key" in err and "no log key there" not in err


def test_the_examples_hint_names_the_installed_command() -> None:
    text = (ROOT / "examples" / "_common.py").read_text(encoding="utf-8")
    assert ".venv/bin/agentgate" not in text
    assert "agentgate audit verify" in text


def test_docs_state_the_output_conventions() -> None:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = " ".join(text.split("**Output conventions**", 1)[1].split("\n## ", 1)[0].split())
    for word in ("Unix seconds", "integer", "null", "snake_case", "2026-11-29T18:00:00Z", "no log key there"):
        assert word in section, word


def test_older_than_reads_a_duration_in_tasks_settle_as_in_store_prune(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `store prune --older-than 15m` and `tasks settle --older-than 900` were the only spellings
    # each took: the same flag, two grammars. settle keeps its seconds and takes a DURATION too.
    for age in ("15m", "900", "0", "1h30m"):
        capsys.readouterr()
        assert main(["tasks", "settle", "nokey", "--ran", "--older-than", age]) == 1  # refused
        assert "no call that must run once has the key" in capsys.readouterr().out, age
    for age in ("nan", "inf", "-5", "1e3", "15x", ""):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:  # argparse's exit 2, its usage line and one error line
            main(["tasks", "settle", "nokey", "--ran", "--older-than", age])
        assert exited.value.code == 2
        assert "argument --older-than" in capsys.readouterr().err, age
