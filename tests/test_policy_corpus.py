"""The policy conformance corpus: tests/corpus/NNN-name/{policy.yaml,cases.json}.

Each folder is one policy; ``cases.json`` says what loading it must do (``load_error``: the
line and a fragment of the message), which lint findings it must produce (``findings``: the
exact multiset of kind and code), and what each request must get (``requests``: principal,
tool or model or resource, arguments, expected decision, and optionally the role, the gate, its
approvers and the quotas). A new case is a new folder; this module does not change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentgate.capabilities import Call
from agentgate.errors import CapabilityError, PolicyError
from agentgate.policy import PolicyIndex, lint, load_policy

CORPUS = Path(__file__).parent / "corpus"
FOLDERS = sorted(p for p in CORPUS.iterdir() if p.is_dir())


def _spec(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "cases.json").read_text())
    return data


def _call(request: dict[str, Any]) -> Call:
    args = request.get("args", {})
    if "tool" in request:
        return Call.tool(request["tool"], args)
    if "model" in request:
        return Call.model(request["model"], args)
    return Call(request["resource"], request["action"], args)


def _count_cases() -> int:
    total = 0
    for folder in FOLDERS:
        spec = _spec(folder)
        total += ("load_error" in spec) + ("findings" in spec) + len(spec.get("requests", []))
    return total


def test_corpus_has_at_least_sixty_cases() -> None:
    assert _count_cases() >= 60


def test_corpus_covers_every_lint_code() -> None:
    from agentgate.policy import RULES

    expected = {rule.code for rule in RULES}
    seen = {f["code"] for folder in FOLDERS for f in _spec(folder).get("findings", [])}
    assert expected <= seen, f"lint codes without a corpus case: {sorted(expected - seen)}"


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_corpus_case(folder: Path) -> None:
    spec = _spec(folder)
    path = folder / "policy.yaml"
    if "load_error" in spec:
        with pytest.raises(PolicyError) as info:
            load_policy(path)
        error = info.value
        assert error.file == str(path)
        assert error.line == spec["load_error"]["line"], str(error)
        assert spec["load_error"]["contains"] in str(error)
        assert error.hint
        return
    policy = load_policy(path)
    if "findings" in spec:
        got = sorted((f.kind.value, f.code) for f in lint(policy))
        want = sorted((f["kind"], f["code"]) for f in spec["findings"])
        assert got == want
    index = PolicyIndex(policy)
    for request in spec.get("requests", []):
        try:
            call = _call(request)
        except CapabilityError:
            assert request["expect"] == "deny", request
            continue
        decision = index.evaluate(request["as"], call)
        assert decision.outcome.value == request["expect"], (request, decision.reasons)
        if "role" in request:
            assert decision.role == request["role"]
        if "approval" in request:
            assert decision.approval is not None and decision.approval.gate == request["approval"]
        if "approvers" in request:
            assert decision.approval is not None and list(decision.approval.approvers) == request["approvers"]
        if "quotas" in request:
            assert sorted(q.name for q in decision.quotas) == sorted(request["quotas"])
        assert decision.reasons
