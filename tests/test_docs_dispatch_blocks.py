"""The docs as a newcomer runs them: the code blocks of docs/dispatch.md and
docs/gateway.md that no other test ran, copied as printed, against agentgate's simulated vLLM on
loopback (the blocks of README.md, quickstart, langgraph, concepts, lint, tasks, audit-format,
token-format, operations and policy-reference are run by earlier reviews' tests).

Until this review docs/dispatch.md's inventory block raised ``InventoryError`` (``inv.node_of(...)``
asks for the GPU ``Ellipsis``) and its dispatcher block named ``Router``, ``Timeouts`` and
``payload`` without defining them; docs/gateway.md's client blocks were refused 403 by the page's
own policy (``policies/gpu_platform.yaml`` requires a priority class they did not send), its
signing block used a ``body`` it never defined, its ``ChatOpenAI`` block ended in a top-level
``await`` (a ``SyntaxError`` in a script) and a ``chat.stream(...)`` that sent nothing, its example
body was not JSON (``[...]``), and nothing on the page made the ``agent.key`` and ``agent.token``
its blocks read from a key the policy names.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _http
import pytest
from test_gateway import wait_until_serving

from agentgate.cli.main import main
from agentgate.dispatch import inventory_from_mapping, parse_inventory
from agentgate.sim import SimServer

ROOT = Path(__file__).resolve().parent.parent
DISPATCH = ROOT / "docs" / "dispatch.md"
GATEWAY = ROOT / "docs" / "gateway.md"
MODEL = "llama-3.1-8b"


def _block(page: Path, after: str, language: str) -> str:
    """The first fenced ``language`` block of ``page`` after the text ``after``, as printed."""
    text = page.read_text(encoding="utf-8")
    return text.split(after, 1)[1].split(f"```{language}\n", 1)[1].split("\n```\n", 1)[0] + "\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def backend() -> Iterator[SimServer]:
    with SimServer(model_name=MODEL, time_scale=0.01) as server:
        yield server


# --- docs/dispatch.md ------------------------------------------------------------------------------


def test_the_inventory_example_loads_with_its_key_variable_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-docs-example")
    inventory = parse_inventory(_block(DISPATCH, "## Inventory", "yaml"), source="dispatch.md")
    (backend,) = inventory.backends
    assert backend.name == "llama-a0" and backend.api_key_env == "VLLM_API_KEY"
    assert backend.api_key is not None and backend.api_key.get_secret_value() == "sk-docs-example"


def test_the_inventory_block_runs_in_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    namespace: dict[str, Any] = {}
    exec(compile(_block(DISPATCH, "## Inventory", "python"), "dispatch.md", "exec"), namespace)
    inventory = namespace["inv"]
    assert (inventory.node_of("node-a/0"), inventory.rack_of("node-a/0")) == ("node-a", "rack-1")
    assert inventory.shared_level(["node-a/0", "node-a/1"]) == "nvlink_domain"


def test_the_dispatcher_block_routes_answers_and_streams(backend: SimServer) -> None:
    block = _block(DISPATCH, "## Dispatcher and failover", "python")
    inventory = inventory_from_mapping(
        {"backends": [{"name": "sim", "url": backend.url, "engine": "vllm", "models": [MODEL]}]}
    )
    # "In a coroutine, with `inv` the inventory above": the block as the body of one.
    code = "async def run():\n" + textwrap.indent(block, "    ") + "    return payload, result, chunk\n"
    namespace: dict[str, Any] = {"inv": inventory}
    exec(compile(code, "dispatch.md", "exec"), namespace)
    payload, result, last = asyncio.run(namespace["run"]())
    asked = payload["max_tokens"]
    assert result.backend == "sim" and result.usage.completion_tokens == asked
    assert last.usage is not None and last.usage.completion_tokens == asked


# --- docs/gateway.md -------------------------------------------------------------------------------


def gateway_set_up(checkout: Path) -> tuple[Path, str, dict[str, str]]:
    """Run the set-up lines of gateway.md's walk-through ("To try the examples below") in
    ``checkout``, with this interpreter's ``agentgate`` first on PATH and no AGENTGATE_STORE: the
    directory where the block leaves its shell (it changes into one git ignores: serve and the
    page's examples run there), the block's last line (its ``agentgate serve``), and that env."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("AGENTGATE_STORE", None)
    *set_up, serve = _block(GATEWAY, "To try the examples below", "sh").replace("\\\n", " ").splitlines()
    made = subprocess.run(
        ["bash", "-euc", "\n".join([*set_up, "pwd"])], cwd=checkout, env=env, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    return Path(made.stdout.splitlines()[-1]), serve, env


# The block's `asyncio.run(chat.ainvoke(...))` leaves the async client's connection to a loop that
# has ended, as any script that does so; it is collected inside this test, not in a later one.
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_gateway_pages_walk_through_runs_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], backend: SimServer
) -> None:
    # The checkout as the page assumes it: the example policy, and an inventory whose backend is up.
    (tmp_path / "policies").mkdir()
    shutil.copy(ROOT / "policies" / "gpu_platform.yaml", tmp_path / "policies")
    (tmp_path / "policies" / "inventory.yaml").write_text(
        f"backends:\n  - {{name: sim, url: '{backend.url}', engine: vllm, models: [{MODEL}]}}\n"
    )
    here, serve, env = gateway_set_up(tmp_path)
    bin_dir = Path(sys.executable).parent

    port = _free_port()
    command = [str(bin_dir / "agentgate"), *shlex.split(serve)[1:], "--port", str(port)]
    process = subprocess.Popen(
        command, cwd=here, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base, process)
        monkeypatch.chdir(here)
        monkeypatch.delenv("AGENTGATE_STORE", raising=False)  # the store the page's serve uses
        namespace: dict[str, Any] = {}
        for after in (
            "Sign in Python with",
            "## From the `openai` client",
            "## From `langchain_openai.ChatOpenAI`",
        ):
            block = _block(GATEWAY, after, "python").replace("http://127.0.0.1:8000", base)
            exec(compile(block, "gateway.md", "exec"), namespace)  # a refusal raises: each call ran
        body = json.loads(_block(GATEWAY, "**Priority classes.**", "json"))
        assert body == namespace["body"]  # the body the page shows is the one it signs
        sent = _http.post(base + "/v1/chat/completions", json=body, headers=namespace["headers"])
        assert sent.status_code == 200, sent.text
        namespace["client"].close()
        namespace.clear()
        gc.collect()
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err

    # Every call of the page (two `openai`, three `ChatOpenAI`, the signed body) decided and settled.
    assert main(["audit", "show", "--json"]) == 0
    entries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {e["resource"] for e in entries} == {f"model:{MODEL}"}
    assert Counter(e["kind"] for e in entries) == {"allow": 6, "outcome": 6}
    assert {e["status"] for e in entries if e["kind"] == "outcome"} == {"ok"}
