"""The token-format test vectors in tests/vectors/ (docs/token-format.md): each case file is a rule."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from agentgate.authority import GrantRepository, Invocation, decide, parse_chain, verify_chain
from agentgate.authority._chain_findings import chain_finding, time_finding
from agentgate.capabilities import Call
from agentgate.errors import TokenFormatError
from agentgate.store import SQLiteStore

VECTORS = Path(__file__).resolve().parent / "vectors"
CASES = sorted((VECTORS / "cases").glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_there_are_valid_and_invalid_cases_of_each_kind() -> None:
    cases = [load(p) for p in CASES]
    assert len(cases) >= 40
    assert any(c["expect"].get("valid") is True for c in cases)
    assert any(c["expect"].get("error") == "format" for c in cases)
    assert any(c["expect"].get("outcome") == "allow" for c in cases)
    assert sum(c["expect"].get("outcome") == "deny" for c in cases) >= 5


@pytest.mark.parametrize("path", [p for p in CASES if load(p)["kind"] == "chain"], ids=lambda p: p.stem)
def test_chain_vector(path: Path) -> None:
    case = load(path)
    expect = case["expect"]
    if expect["valid"]:
        chain = verify_chain(case["token"], case["trusted"], now=case["now"])
        assert list(chain.ids) == expect["ids"] and chain.holder == expect["holder"]
        return
    if expect["error"] == "format":
        with pytest.raises(TokenFormatError):
            parse_chain(case["token"])
        return
    chain = parse_chain(case["token"])
    found = chain_finding(chain, frozenset(case["trusted"])) or time_finding(chain, case["now"])
    assert found is not None and found.code == expect["error"]


@pytest.mark.parametrize("path", [p for p in CASES if load(p)["kind"] == "decision"], ids=lambda p: p.stem)
def test_decision_vector(path: Path, tmp_path: Path) -> None:
    case = load(path)
    raw = case["call"]
    call = Call(raw["resource"], raw["action"], raw["args"])
    invocation = Invocation.decode(case["invocation"], case["token"], call)
    store = SQLiteStore(tmp_path / "v.db")
    try:
        decision = decide(invocation, repo=GrantRepository(store), trusted=case["trusted"], now=case["now"])
    finally:
        store.close()
    assert decision.outcome.value == case["expect"]["outcome"]
    assert (decision.findings[0].code if decision.findings else None) == case["expect"].get("code")


def test_vectors_are_what_the_generator_writes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("generate_vectors", VECTORS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for path in module.write(tmp_path):
        committed = VECTORS / path.relative_to(tmp_path)
        assert committed.read_text() == path.read_text(), (
            f"{committed} is stale: run tests/vectors/generate.py"
        )
