"""Review R61: an approved tool call whose process is killed after the approval was used and
before the tool had its effect, resumed in a new process from a ``SqliteSaver`` on a real file.
The kill is a real ``SIGKILL`` of a child process, sent by the tool itself as its first act."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _raw_sqlite import opened
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from test_langgraph import NAMES, _calls, _policy_text

from agentgate.authority import parse_chain
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import Policy, parse_policy
from agentgate.store import SQLiteStore
from agentgate.store.once import settle

CONFIG = {"configurable": {"thread_id": "crash"}}
GO = {"messages": [{"role": "user", "content": "go"}]}

# The child resumes the paused run with the approval; its publish tool kills the process before
# it writes its effect, as a power cut or an OOM kill would, after the Gate committed the allow.
# LangGraph saves the resume value (the approval) from a background thread, even with
# durability="sync", so the tool may start before it is on disk: the tool waits until it is, so
# that the run resumed later is presented the used approval again (as the tests below expect),
# whatever the load. (Killed before, the resumed run is never shown the approval, which is used,
# and asks anew without saying why; nothing counts twice either way.) The child's saver is slowed
# down, as on a loaded machine, so that the tool always starts before the resume value is saved.
_CHILD = """
import json, os, signal, sqlite3, sys, time
from contextlib import closing
from pathlib import Path
d = Path(sys.argv[1])
sys.path.insert(0, sys.argv[2])
from test_langgraph_r61_crash_approval import _agent, _gate_and_agent_identity
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

def _resume_saved() -> bool:
    with closing(sqlite3.connect(d / "checkpoints.sqlite")) as c:
        return bool(c.execute(
            "SELECT 1 FROM writes WHERE thread_id = 'crash' AND channel = '__resume__'"
        ).fetchone())

def publish(path: str) -> str:
    deadline = time.monotonic() + 60
    while not _resume_saved():
        if time.monotonic() > deadline:
            sys.stderr.write("the resume value was never saved to the checkpoint")
            os._exit(3)
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"

class _SlowSaver(SqliteSaver):
    def put_writes(self, *args, **kwargs):
        time.sleep(0.2)
        return super().put_writes(*args, **kwargs)

gate, supervisor = _gate_and_agent_identity(d)
conn = sqlite3.connect(d / "checkpoints.sqlite", check_same_thread=False)
approval = json.loads((d / "approval.json").read_text())
_agent(gate, _SlowSaver(conn), publish).invoke(
    Command(resume=approval), {"configurable": {"thread_id": "crash"}}, context=supervisor, durability="sync"
)
"""


def _gate_and_agent_identity(d: Path) -> tuple[Gate, AgentIdentity]:
    """The Gate over ``d``'s store and the supervisor, from the keys and grant saved there: what a
    new process has."""
    keys = {n: SigningKey(bytes.fromhex(s)) for n, s in json.loads((d / "keys.json").read_text()).items()}
    gate = Gate(_policy(d, keys), SQLiteStore(d / "agentgate.db"))
    return gate, AgentIdentity("supervisor", keys["supervisor"], parse_chain((d / "chain.txt").read_text()))


def _policy(d: Path, keys: dict[str, SigningKey]) -> Policy:
    """The team's policy; ``publish`` idempotent where ``d`` holds a file of that name."""
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000)
    if (d / "idempotent").exists():
        text = text.replace("    loggable: [path]", "    loggable: [path]\n    idempotent: true")
    return parse_policy(text, source="team.yaml")


def _agent(gate: Gate, saver: Any, publish: Any) -> Any:
    tool = StructuredTool.from_function(func=publish, name="publish", description="publish")
    model = ScriptedChatModel(turns=[_calls(("publish", {"path": "reports/final"}))])
    return create_gated_agent(
        gate, name="supervisor", model=model, tools=[tool], checkpointer=saver, gate_models=False
    )


class _Effects:
    """The tool of the processes after the crash: writes its effect to a file."""

    def __init__(self, d: Path) -> None:
        self.path = d / "effects.txt"

    def publish(self, path: str) -> str:
        with self.path.open("a") as f:
            f.write(path + "\n")
        return f"published {path}"

    def done(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []


def _killed(tmp_path: Path, *, idempotent: bool) -> Path:
    """A run paused for dana's approval, approved, then resumed in a child process killed by
    ``SIGKILL`` once the Gate had used the approval and allowed the call, before its effect."""
    if idempotent:
        (tmp_path / "idempotent").touch()
    keys = {n: SigningKey.generate() for n in NAMES}
    (tmp_path / "keys.json").write_text(json.dumps({n: k.seed.hex() for n, k in keys.items()}))
    gate = Gate(_policy(tmp_path, keys), SQLiteStore(tmp_path / "agentgate.db"))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    (tmp_path / "chain.txt").write_text(supervisor.chain.token)
    effects = _Effects(tmp_path)
    with opened(tmp_path / "checkpoints.sqlite", check_same_thread=False) as conn:
        paused = _agent(gate, SqliteSaver(conn), effects.publish).invoke(
            GO, CONFIG, context=supervisor, durability="sync"
        )
    approval = gate.approve(paused["__interrupt__"][0].value, keys["dana"])
    (tmp_path / "approval.json").write_text(json.dumps(approval))
    gate.close()
    child = tmp_path / "child.py"
    child.write_text(_CHILD)
    killed = subprocess.run(
        [sys.executable, str(child), str(tmp_path), str(Path(__file__).resolve().parent)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert effects.done() == []
    return tmp_path


# Each kill is made once for the module (a child process costs seconds) and copied for each test.


@pytest.fixture(scope="module")
def killed_once_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _killed(tmp_path_factory.mktemp("once-only"), idempotent=False)


@pytest.fixture(scope="module")
def killed_idempotent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _killed(tmp_path_factory.mktemp("idempotent"), idempotent=True)


@pytest.fixture
def crashed(killed_once_only: Path, tmp_path: Path) -> Path:
    """A copy of what the kill of a call to ``publish`` (not idempotent) left."""
    return Path(shutil.copytree(killed_once_only, tmp_path / "crashed"))


@pytest.fixture
def crashed_idempotent(killed_idempotent: Path, tmp_path: Path) -> Path:
    """A copy of what the kill of a call to ``publish`` marked ``idempotent: true`` left."""
    return Path(shutil.copytree(killed_idempotent, tmp_path / "crashed"))


def _resume(d: Path, resume: Any) -> dict[str, Any]:
    gate, supervisor = _gate_and_agent_identity(d)
    try:
        with opened(d / "checkpoints.sqlite", check_same_thread=False) as conn:
            return dict(
                _agent(gate, SqliteSaver(conn), _Effects(d).publish).invoke(
                    resume, CONFIG, context=supervisor, durability="sync"
                )
            )
    finally:
        conn.close()
        gate.close()


def _store_rows(d: Path, sql: str) -> list[tuple[Any, ...]]:
    with opened(d / "agentgate.db") as conn:
        return list(conn.execute(sql))


@pytest.mark.parametrize("resume", ["none", "same approval"])
def test_a_call_killed_after_its_approval_was_used_is_not_run_again_on_resume(
    crashed: Path, resume: str
) -> None:
    """Review R61: resumed in a new process (``invoke(None)``, or the same approval again), the
    call whose process died after its allow is refused as started with no outcome, without
    asking anyone again: its approval is used, the tool never runs twice, no request is left
    pending, and the call is listed for a person to settle (``agentgate tasks unsettled``)."""
    approval = json.loads((crashed / "approval.json").read_text())
    done = _resume(crashed, None if resume == "none" else Command(resume=approval))
    assert "__interrupt__" not in done
    (answer,) = [m for m in done["messages"] if isinstance(m, ToolMessage)]
    assert answer.status == "error"
    assert "was started" in str(answer.content) and "its outcome was never recorded" in str(answer.content)
    assert _Effects(crashed).done() == []
    assert _store_rows(crashed, "SELECT state FROM approvals") == [("consumed",)]
    assert _store_rows(crashed, "SELECT state FROM agentgate_once") == [("started",)]


def _approved_again(d: Path, done: dict[str, Any]) -> dict[str, Any]:
    """The run ``done`` paused asking again, resumed with dana's approval of the new request;
    the interrupt says why the used approval did not count."""
    (asked,) = done["__interrupt__"]
    assert any("not used" in r and "does not count again" in r for r in asked.value["request"]["reasons"])
    gate, _ = _gate_and_agent_identity(d)
    keys = json.loads((d / "keys.json").read_text())
    approval = gate.approve(asked.value, SigningKey(bytes.fromhex(keys["dana"])))
    gate.close()
    return _resume(d, Command(resume=approval))


def test_a_killed_call_settled_as_not_run_runs_once_when_resumed(crashed: Path) -> None:
    """Review R61: a person finds the killed call had no effect and settles it as not run ("it may
    be decided and run again", docs/langgraph.md); the run resumed then asks for the call's
    approval again (the used approval never counts again: presented again it is a replay) and,
    approved anew, runs it once; never refused for good (until review R61 it was, as already
    used)."""
    gate, _ = _gate_and_agent_identity(crashed)
    try:
        (record,) = gate.once.unsettled()
        settle(gate.store, gate.audit, record.key, ran=False, by="operator", min_age_s=0)
    finally:
        gate.close()
    done = _approved_again(crashed, _resume(crashed, None))
    refusals = [
        str(m.content) for m in done["messages"] if isinstance(m, ToolMessage) and m.status == "error"
    ]
    assert refusals == []
    assert _Effects(crashed).done() == ["reports/final"]
    assert "__interrupt__" not in done
    assert _store_rows(crashed, "SELECT state FROM approvals ORDER BY created") == [
        ("consumed",),
        ("consumed",),
    ]
    assert _store_rows(crashed, "SELECT state FROM agentgate_once") == [("ok",)]


def test_a_killed_idempotent_call_runs_when_resumed(crashed_idempotent: Path) -> None:
    """Review R61: an idempotent tool may run again; resumed after its process died with the
    approval used and the tool not yet run, the run asks for the call's approval again and,
    approved anew, runs it; never refused for good (until review R61 it was, as already used)."""
    done = _approved_again(crashed_idempotent, _resume(crashed_idempotent, None))
    refusals = [
        str(m.content) for m in done["messages"] if isinstance(m, ToolMessage) and m.status == "error"
    ]
    assert refusals == []
    assert _Effects(crashed_idempotent).done() == ["reports/final"]
    assert "__interrupt__" not in done
    assert _store_rows(crashed_idempotent, "SELECT state FROM approvals ORDER BY created") == [
        ("consumed",),
        ("consumed",),
    ]
