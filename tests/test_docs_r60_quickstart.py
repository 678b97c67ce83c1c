"""docs/quickstart.md's "What happens", checked against the run its blocks make: what the model is
told of the refused refund, and what the paused run's interrupt holds."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "quickstart.md").read_text()


def _blocks(language: str) -> list[str]:
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", PAGE, flags=re.S | re.M)
    return [textwrap.dedent(block) for _, block in found]


def test_the_refusal_the_model_receives_is_the_one_the_page_quotes(tmp_path: Path) -> None:
    """Review R60: quickstart.md said the refused refund's ToolMessage names the rule that refused it; it names the grant and the finding."""
    shutil.copy(ROOT / "policies" / "support.yaml", tmp_path / "support.yaml")
    cli = Path(sys.executable).with_name("agentgate")
    for line in _blocks("bash")[1].splitlines():
        command = line.split("#")[0].split()
        if command and command[0] == "agentgate":
            subprocess.run([str(cli), *command[1:]], cwd=tmp_path, check=True, capture_output=True)
    # The blocks up to the run's pause, then what the page says of the refusal and the pause.
    code = "\n".join(_blocks("python")[:3])
    code += textwrap.dedent("""
        import json
        (refusal,) = [m for m in state["messages"] if getattr(m, "status", "") == "error"]
        print(json.dumps({"refusal": refusal.content, "asked": state["__interrupt__"][0].value}))
        gate.close()
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGENTGATE_STORE", None)
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.splitlines()[-1])
    said = " ".join(PAGE.split("- A refund of 2500", 1)[1].split("- A refund of 800", 1)[0].split())
    quoted = re.search(r"\(`(.*?)`\)", said)
    assert quoted, said
    head, tail = quoted.group(1).split("; ...; ")
    assert seen["refusal"].startswith(f"agentgate refused tool:payments.refund (invoke): {head}; ")
    assert tail in seen["refusal"], seen["refusal"]
    request = seen["asked"]["request"]
    assert (request["gate"], request["approvers"], request["requester"]) == (
        "large-refund",
        ["alice", "bob"],
        "support-agent",
    )
    assert request["args"] == {"order_id": "O-77", "amount": 800, "currency": "EUR"}
