"""The user docs followed literally: docs/quickstart.md, cli.md, policy-reference.md,
concepts.md, gateway.md, audit-format.md, tasks.md and dispatch.md run as a demanding new user
runs them, each command and block compared with what the page says it prints and does.

Already run as printed elsewhere (not repeated here): the quickstart's blocks
(tests/test_langgraph_newcomer.py, tests/test_docs_quickstart.py), the concepts walk-through
(tests/test_docs_formats_second_verifier.py), the gateway walk-through and dispatch blocks
(tests/test_docs_dispatch_blocks.py), the verifying-by-hand block of audit-format.md
(tests/test_audit_proofs.py), the custom classes block of tasks.md
(tests/test_tasks_retry_classes.py), every documented command line's flags
(tests/test_cli_files_and_streams.py, tests/test_docs_newcomer_commands.py).

What holds (run by hand this review, in scratch directories): every verb of ``agentgate --help``
is in docs/cli.md and every flag cli.md names is in the verb's ``--help``; the quickstart end to
end (keys, lint, the 2500 refused, the 800 paused, approved and run, ``audit verify`` "intact: 6
entries ..., 0 checkpoints"); the DURATION, AMOUNT and CAP grammars accept and refuse exactly the
examples cli.md gives; ``grant issue/delegate/inspect/check/revoke`` (``--holder`` too),
``approval list/sign`` (exit 1 for a wrong call_hash, an expired request or the requester, 2 for
a request without ``call_id``), ``policy lint/explain/schema``, every ``audit`` verb (an edited
entry: verify 1, prove 2 with nothing written, report 1), ``tasks`` (dead letters, breakers,
unsettled, settle), ``broker``, ``store init/prune`` and ``serve`` (exit 0 on SIGINT and
SIGTERM, 2 for an unresolvable or non-local ``--host``) print and exit as documented; a reader
closing the pipe at once is exit 141; policy-reference.md's YAML fragments load together and its
YAML 1.2 scalar claims hold (``NO``, ``10:30``, ``1e3``, ``0o17``, ``0x1F``, ``1_000``,
``0b101``; ``0755`` and ``09`` refused); concepts.md's spliced, dropped and swapped chains give
``parent_mismatch`` and ``root_has_parent``; tasks.md's configuration defaults table is the
dataclasses' defaults; the benchmarks' documented flags exist.

What did not hold:

- docs/cli.md, Output conventions: JSON times "are named ``*_at`` (also ``before``,
  ``deadline``, ``notice_deadline``; ...)". ``tasks dead-letters --json`` gives each attempt's
  error time as ``at``. Doc fixed (``at`` in a dead letter's ``errors`` named);
  ``test_every_time_in_dead_letters_json_has_a_name_cli_md_gives``.
- docs/audit-format.md: ``rule`` was "the policy rule that decided". A ``deny`` of a call the
  policy refuses has ``rule`` null (``audit explain`` prints ``rule: -``) although the policy
  decided it, while a ``deny`` of a call the policy allows and its revoked grant refuses carries
  the allowing rule. Doc fixed (which entries carry it);
  ``test_the_rule_field_is_set_on_the_entries_audit_format_md_names``.
- docs/cli.md, Output conventions: "Human output shows times in UTC to the second,
  ``2026-11-29T18:00:00Z``". The findings ``grant check`` and ``grant delegate`` print quote
  Unix seconds: ``child expires at 1798761476, after its parent (1796198272)``, ``grant expired
  at 1796169685 (now 1796169687)``, ``the invocation expired at N (now M)``. Product defect,
  strict xfail ``test_a_findings_times_are_printed_in_utc_as_cli_md_promises``.
- docs/tasks.md, "What the refusals carry": ``CircuitOpen``, ``Overloaded`` and
  ``DeadlineExceeded`` were named with no module; ``from agentgate.tasks import CircuitOpen``
  fails (they are in ``agentgate.errors``). Doc fixed;
  ``test_the_scheduler_errors_tasks_md_lists_are_where_it_says``.
- docs/concepts.md: "If the store cannot be read (disk gone, PostgreSQL down), the decision is a
  deny with ``revocation_unreachable``". Followed with ``grant check``, a store it cannot open
  (PostgreSQL down, a path it cannot create) is exit 2 with one line and no decision, never a
  deny finding (nor an allow). Doc made precise;
  ``test_grant_check_without_its_store_is_exit_2_and_prints_no_decision``.
- tasks.md's opening block (the scheduler at a glance) was run by no test: it runs, with its
  free names bound, and the tool receives the call's idempotency key
  (``test_the_opening_block_of_tasks_md_runs``); so does the ``SharedLimits`` block
  (``test_the_shared_limits_block_of_tasks_md_runs``).
"""

from __future__ import annotations

import asyncio
import json
import re
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from agentgate.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _blocks(page: str, language: str) -> list[str]:
    """The fenced ``language`` blocks of ``page`` in order, also those indented in a list."""
    text = (DOCS / page).read_text()
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", text, flags=re.S | re.M)
    return [textwrap.dedent(block) for _, block in found]


def _block_after(page: str, marker: str, language: str) -> str:
    text = (DOCS / page).read_text()
    return text.split(marker, 1)[1].split(f"```{language}\n", 1)[1].split("```", 1)[0]


@pytest.fixture(autouse=True)
def _no_agentgate_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AGENTGATE_STORE", "AGENTGATE_LOG_KEY", "AGENTGATE_LOG_PREVIOUS_KEYS", "AGENTGATE_DEMO_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- docs/cli.md, Output conventions: the names of JSON times ------------------------------------


def _documented_time_names() -> set[str]:
    text = " ".join((DOCS / "cli.md").read_text().split())
    sentence = text.split("They are named `*_at` (also", 1)[1].split(")", 1)[0]
    return set(re.findall(r"`([a-z_]+)`", sentence))


def _times(value: Any, key: str = "") -> list[str]:
    """The keys under which ``value`` holds a Unix time (a number of 2020 .. 2100)."""
    if isinstance(value, dict):
        return [found for k, v in value.items() for found in _times(v, k)]
    if isinstance(value, list):
        return [found for v in value for found in _times(v, key)]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 1.58e9 < value < 4.1e9:
        return [key]
    return []


def test_every_time_in_dead_letters_json_has_a_name_cli_md_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentgate.store import open_store
    from agentgate.tasks import RetryPolicy, Scheduler, SchedulerConfig, ToolCall, ToolLimits

    path = tmp_path / "store.db"
    store = open_store(str(path))
    config = SchedulerConfig(
        tools={"flaky.tool": ToolLimits(retry=RetryPolicy(attempts=2, backoff_initial_s=0.001))}
    )

    async def failing() -> None:
        scheduler = Scheduler(config, store=store)

        async def refuse(attempt: object) -> None:
            raise ConnectionRefusedError("refused")

        with pytest.raises(ConnectionRefusedError):
            await scheduler.submit(ToolCall("flaky.tool", run_id="r", call_id="c"), refuse)
        await scheduler.aclose()

    try:
        asyncio.run(failing())
    finally:
        store.close()
    code, out, err = run(capsys, "tasks", "dead-letters", "--json", "--store", str(path))
    assert code == 0, err
    letters = json.loads(out)
    assert len(letters) == 1 and len(letters[0]["errors"]) == 2
    names = set(_times(letters))
    assert "recorded_at" in names and "at" in names  # the dead letter's time and its errors'
    undocumented = {n for n in names if not n.endswith("_at") and n not in _documented_time_names()}
    assert not undocumented, f"JSON times docs/cli.md does not name: {sorted(undocumented)}"


# --- docs/audit-format.md: which entries carry `rule` ---------------------------------------------


POLICY = """\
version: 1
trust_anchors:
  root: {key: keys/root.pub}
principals:
  agent: {kind: agent, key: keys/agent.pub, roles: [agent]}
tools:
  tickets.read: {}
  payments.refund:
    args: {amount: {type: number, required: true}}
roles:
  agent:
    kind: agent
    capabilities:
      - resource: tool:tickets.read
      - resource: tool:payments.refund
        constraints: {amount: {le: 100}}
    ttl_s: 3600
"""


def test_the_rule_field_is_set_on_the_entries_audit_format_md_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentgate.capabilities import Call
    from agentgate.gate import Gate
    from agentgate.keys import load_signing_key

    row = next(
        line for line in (DOCS / "audit-format.md").read_text().splitlines() if line.startswith("| `rule` ")
    )
    # What the row says, checked below against the log.
    assert "`deny` of a call the policy refuses" in row and "null on the other entries" in row
    assert "unless the grant chain refuses the call too: then they are the chain's refusal" in row
    assert "a `deny` that refuses it all the same (its grant chain" in row
    for name in ("root", "agent"):
        assert run(capsys, "keys", "new", name, "--dir", "keys")[0] == 0
    (tmp_path / "policy.yaml").write_text(POLICY)
    gate = Gate.open("policy.yaml", store=str(tmp_path / "store.db"))
    try:
        identity = gate.issue(
            load_signing_key("keys/root.key"),
            name="agent",
            key=load_signing_key("keys/agent.key"),
            role="agent",
        )
        allowed = gate.authorize(
            identity, Call("tool:payments.refund", "invoke", {"amount": 50}), agent="agent"
        )
        gate.run(allowed, lambda: "ok")
        refused = gate.authorize(
            identity, Call("tool:payments.refund", "invoke", {"amount": 500}), agent="agent"
        )
        gate.revoke(identity, reason="review")
        revoked = gate.authorize(
            identity, Call("tool:payments.refund", "invoke", {"amount": 50}), agent="agent"
        )
    finally:
        gate.close()
    assert (allowed.verdict, refused.verdict, revoked.verdict) == ("allow", "deny", "deny")
    code, out, err = run(capsys, "audit", "show", "--json", "--store", str(tmp_path / "store.db"))
    assert code == 0, err
    entries = [json.loads(line) for line in out.splitlines()]
    got = [(e["kind"], e["resource"], e["rule"]) for e in entries]
    rule = "role agent rule 2"  # the example's form: the role's second capability
    assert got == [
        ("allow", "agent:agent", None),  # the grant issued
        ("allow", "tool:payments.refund", rule),
        ("outcome", "tool:payments.refund", None),
        ("deny", "tool:payments.refund", None),  # the policy refuses amount=500
        ("revoke", None, None),
        ("deny", "tool:payments.refund", rule),  # the policy allows it, the revoked grant does not
    ]
    # The grant (the role's template, amount <= 100) refuses amount=500 too, and its refusal comes
    # first, as at the gateway (review R59); a call only the policy refuses names its rules.
    assert "is outside the granted tool:payments.refund?amount<=100" in entries[3]["reasons"][0]


# --- docs/cli.md, Output conventions: human times in UTC ------------------------------------------


def test_a_findings_times_are_printed_in_utc_as_cli_md_promises(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conventions = " ".join((DOCS / "cli.md").read_text().split())
    assert "Human output shows times in UTC to the second, `2026-11-29T18:00:00Z`" in conventions
    for name in ("root", "agent", "sub"):
        assert run(capsys, "keys", "new", name, "--dir", "keys")[0] == 0
    assert (
        run(capsys, "grant", "issue", "--issuer", "keys/root.key", "--to", "keys/agent.pub",
            "--allow", "tool:x", "--ttl", "1h", "--out", "agent.tok")[0]
        == 0
    )  # fmt: skip
    code, out, err = run(
        capsys, "grant", "delegate", "agent.tok", "--as", "keys/agent.key", "--to", "keys/sub.pub",
        "--allow", "tool:x", "--ttl", "2h",
    )  # fmt: skip
    printed = out + err
    assert code == 1 and "outlives_parent" in printed, printed
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", printed), printed
    assert not re.search(r"\b1\d{9}\b", printed), printed


# --- docs/tasks.md, blocks no other test runs -----------------------------------------------------


def test_the_opening_block_of_tasks_md_runs() -> None:
    block = _blocks("tasks.md", "python")[0]
    assert block.startswith("from agentgate.tasks import Scheduler")
    keys: list[str] = []

    class Psp:  # the page's payment service
        async def refund(self, amount: int, idempotency_key: str | None) -> str:
            assert idempotency_key is not None
            keys.append(idempotency_key)
            return f"refunded {amount}"

    class Grant:
        expires_at = time.time() + 3600

    namespace: dict[str, Any] = {
        "psp": Psp(),
        "run_id": "run-1",
        "tool_call_id": "call-1",
        "invocation_deadline": time.time() + 60,
        "grant": Grant(),
        "root_hash": "a" * 64,
        "child_hash": "b" * 64,
    }
    source = "async def _page():\n" + textwrap.indent(block, "    ") + "\n    return result\n"
    exec(compile(source, "docs/tasks.md", "exec"), namespace)
    assert asyncio.run(namespace["_page"]()) == "refunded 10"
    assert len(keys) == 1 and re.fullmatch(r"[0-9a-f]{64}", keys[0])


def test_the_shared_limits_block_of_tasks_md_runs() -> None:
    from agentgate.tasks import SchedulerConfig, ToolCall

    block = _block_after("tasks.md", "## One set of limits for every scheduler of a Gate", "python")
    assert "limits = SharedLimits(config)" in block and "\n...\n" in block
    # The page's "..." stands for the calls: one through each scheduler, on the one set of limits.
    used = (
        "assert sync.submit(ToolCall('t'), lambda attempt: 1) == 1\n"
        "assert await per_loop.submit(ToolCall('t'), two) == 2\n"
        "assert sync.scheduler.shared is per_loop.shared is limits\n"
        "assert per_loop.config is config\n"
    )
    source = "async def _page():\n" + textwrap.indent(block.replace("...\n", used), "    ")

    async def two(attempt: object) -> int:
        return 2

    namespace: dict[str, Any] = {"config": SchedulerConfig(), "ToolCall": ToolCall, "two": two}
    exec(compile(source, "docs/tasks.md", "exec"), namespace)
    asyncio.run(namespace["_page"]())


def test_the_scheduler_errors_tasks_md_lists_are_where_it_says() -> None:
    import agentgate.errors
    import agentgate.tasks

    text = " ".join((DOCS / "tasks.md").read_text().split())
    section = text.split("## What the refusals carry", 1)[1].split("## ", 1)[0]
    assert "They are in `agentgate.errors`" in section and "not in `agentgate.tasks`" in section
    names = re.findall(
        r"^\| `([A-Za-z]+)` \|",
        (DOCS / "tasks.md").read_text().split("## What the refusals carry")[1].split("\n## ")[0],
        flags=re.M,
    )
    assert names == [
        "CircuitOpen",
        "Overloaded",
        "DeadlineExceeded",
        "TwinDeadlineExceeded",
    ]  # the last since R59
    for name in names:
        assert issubclass(getattr(agentgate.errors, name), agentgate.errors.SchedulingError)
        assert not hasattr(agentgate.tasks, name)


# --- docs/concepts.md: grant check and a store it cannot open -------------------------------------


def test_grant_check_without_its_store_is_exit_2_and_prints_no_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = " ".join((DOCS / "concepts.md").read_text().split())
    assert (
        "a store it cannot open or reach is exit 2, one line naming the store, and no decision is printed"
        in text
    )
    for name in ("root", "agent"):
        assert run(capsys, "keys", "new", name, "--dir", "keys")[0] == 0
    assert run(
        capsys, "grant", "issue", "--issuer", "keys/root.key", "--to", "keys/agent.pub",
        "--allow", "tool:x", "--ttl", "1h", "--out", "agent.tok",
    )[0] == 0  # fmt: skip
    (tmp_path / "file").write_text("")
    store = tmp_path / "file" / "store.db"  # under a regular file: it cannot be created
    monkeypatch.setenv("AGENTGATE_STORE", str(store))
    code, out, err = run(
        capsys,
        "grant",
        "check",
        "agent.tok",
        "--as",
        "keys/agent.key",
        "--trust",
        "keys/root.pub",
        "--tool",
        "x",
    )
    assert code == 2 and out == "", (code, out)
    lines = err.splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith("agentgate: error: ") and str(tmp_path / "file") in lines[0]
    )
