"""``agentgate serve --first-token-s --decode-tokens-per-s`` set how long the gateway waits for a
backend (``Timeouts``), as ``Gateway(timeouts=Timeouts(...))`` does in Python (review R59).

One real ``agentgate serve`` process over real HTTP on 127.0.0.1 to a raw backend that never
answers a JSON call (``Slow`` in mode ``hang``, tests/test_dispatch_r58_answer_deadline.py).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import _http
import pytest
from test_dispatch_r58_answer_deadline import Slow
from test_gateway import MODEL, NAMES, _body, _free_port, _policy_text, wait_until_serving

from agentgate.cli.main import main
from agentgate.dispatch.gateway import GatewayGate, invocation_headers
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


@pytest.fixture
def backend() -> Iterator[Slow]:
    made = Slow()
    made.mode = "hang"
    yield made
    made.close()


def test_agentgate_serve_waits_for_a_backend_by_its_timeout_flags(tmp_path: Path, backend: Slow) -> None:
    """Review R59, ``agentgate serve`` had no setting for a backend's first token limit or for the
    slowest decode a whole answer is waited for: a backend decoding slower than 5 tokens a second
    (a CPU llama.cpp) failed every long answer, and a hung one held a call 60 s and more.

    With ``--first-token-s 0.2 --decode-tokens-per-s 5``, a JSON call for one token to a backend
    that never answers is given up after 0.2 + 1/5 s, and its outcome says so."""
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = tmp_path / "policy.yaml"
    policy.write_text(_policy_text({n: k.did for n, k in keys.items()}))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        f"backends:\n  - {{name: slow, url: '{backend.url}', engine: vllm, models: [{MODEL}]}}\n"
    )
    store = tmp_path / "serve.db"
    assert main(["store", "init", "--store", str(store)]) == 0
    issuer = GatewayGate(parse_policy(policy.read_text(), source=str(policy)), SQLiteStore(store))
    try:
        agent = issuer.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
    finally:
        issuer.close()
    port = _free_port()
    command = [sys.executable, "-m", "agentgate.cli.main", "serve", "--policy", str(policy)]
    command += ["--inventory", str(inventory), "--port", str(port), "--store", str(store)]
    command += ["--first-token-s", "0.2", "--decode-tokens-per-s", "5"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base, process)
        body = _body(max_tokens=1)
        headers = invocation_headers(agent.key, agent.chain, body)
        answer = _http.post(base + "/v1/chat/completions", json=body, headers=headers, timeout=30)
    finally:
        process.terminate()
        process.communicate(timeout=20)
    assert answer.status_code in (502, 503), answer.text
    reader = GatewayGate(parse_policy(policy.read_text(), source=str(policy)), SQLiteStore(store))
    try:
        [outcome] = [e for e in reader.audit.entries() if e.kind == "outcome"]
    finally:
        reader.close()
    assert outcome.status == "error"
    assert any("slow: no answer within 0.4s" in reason for reason in outcome.reasons), outcome.reasons


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--first-token-s", "0"), ("--first-token-s", "86401"), ("--decode-tokens-per-s", "0")]
    + [("--decode-tokens-per-s", v) for v in ("-1", "nan", "inf", "x")],
)
def test_a_serve_timeout_flag_out_of_range_is_one_line_naming_it(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 and one line naming the flag, as for the other limits (``Timeouts`` refuses the same
    values as an ``InputError``)."""
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--policy", "p.yaml", "--inventory", "i.yaml", flag, value])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("agentgate: error: ")]
    assert len(lines) == 1 and f"argument {flag}: " in lines[0], err
