"""``agentgate approval sign``: what a payload may hold (review R71): a quorum that is a whole
number, not a boolean, and no JSON key given twice; and the gate and approvers it shows checked,
with ``--store``, against the request's ``approval_required`` audit entry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _cli import cli
from test_cli_approval_r70_store_check import Asked

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


@pytest.fixture
def asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Asked]:
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    made = Asked(tmp_path)
    yield made
    made.gate.close()


def _sign(capsys: pytest.CaptureFixture[str], asked: Asked, path: str) -> tuple[int, str, str]:
    return cli(capsys, "approval", "sign", path, "--as", asked.lead, "--store", str(asked.db))


@pytest.mark.parametrize("quorum", [True, 1.0, "1"])
def test_a_quorum_that_is_not_a_whole_number_is_refused(
    asked: Asked, capsys: pytest.CaptureFixture[str], quorum: Any
) -> None:
    """Review R71: the store check compared the payload's quorum with ``!=``, so ``"quorum": true``
    (and ``1.0``) read as the store's quorum of 1 and the payload was signed under a ``checked``
    line naming the quorum. A quorum is a whole number: anything else is malformed (exit 2),
    named, with or without a store."""

    def edit(request: dict[str, Any]) -> None:
        request["quorum"] = quorum

    for store in (["--store", str(asked.db)], []):
        code, out, err = cli(capsys, "approval", "sign", asked.write(edit), "--as", asked.lead, *store)
        assert (code, out) == (2, ""), err
        assert "the request's 'quorum' must be a whole number" in err, err


def test_a_policy_quorum_that_is_a_boolean_is_refused_at_its_line() -> None:
    """Review R71 (confirmed, not a defect): ``quorum: true`` in a policy is not read as 1; the
    loader refuses it at its file, line and field, as any other field of the wrong type."""
    text = asked_policy_with("quorum: true")
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, source="p.yaml")
    assert str(raised.value).startswith(
        "p.yaml:12:13: approvals.close.quorum: Input should be a valid integer"
    )


def asked_policy_with(line: str) -> str:
    return f"""\
version: 1
principals:
  alice: {{kind: human, roles: [clerk]}}
  bob: {{kind: human}}
tools:
  tickets.close: {{}}
roles:
  clerk:
    capabilities: [{{resource: tool:tickets.close}}]
approvals:
  close:
    {line}
    resource: tool:tickets.close
    approvers: [bob]
"""


@pytest.mark.parametrize(
    ("duplicate", "key"),
    [
        ('"args": {"amount": 80}, "args": {"amount": 800}', "args"),
        ('"args": {"amount": 800, "amount": 80}', "amount"),
    ],
)
def test_a_key_given_twice_is_refused(
    asked: Asked, capsys: pytest.CaptureFixture[str], duplicate: str, key: str
) -> None:
    """Review R71: a payload holding a key twice was read with its last value (Python's ``json``),
    while another reader (the UI that showed it, ``jq``) may show the first: the approver could be
    shown ``amount: 80`` and sign what this command read as 800. A key given twice is malformed
    (exit 2), named, and nothing is signed."""
    request = dict(asked.payload["request"])
    del request["args"]
    text = json.dumps({"agentgate": "approval_required", "request": request})
    path = Path(asked.write())
    path.write_text(text[:-2] + ", " + duplicate + "}}", encoding="utf-8")
    code, out, err = _sign(capsys, asked, str(path))
    assert (code, out) == (2, ""), err
    assert f"the key {key!r} is given twice" in err, err


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gate", "small-refund"),
        ("approvers", ["lead", "ceo"]),
        ("approvers", []),
        ("approvers", ["l\u0435ad"]),  # a Cyrillic e: reads as "lead"
    ],
)
def test_a_gate_or_approvers_changed_on_the_way_are_refused(
    asked: Asked, capsys: pytest.CaptureFixture[str], field: str, value: Any
) -> None:
    """Review R71: with ``--store`` the gate and the approvers a payload shows were its word alone
    (the ``checked`` line said so): an editor on the way could show another gate, or a second
    approver who would never be asked. The ``approval_required`` entry records both, in the
    policy's reason ``approval gate G applies: Q of A, B must approve within Ns``: a payload that
    shows others is refused, naming the field."""

    def edit(request: dict[str, Any]) -> None:
        request[field] = value

    code, out, err = _sign(capsys, asked, asked.write(edit))
    assert (code, out) == (1, ""), err
    assert f"its {field!r} is not what audit entry" in err and "changed on its way" in err, err


def test_the_checked_line_names_the_gate_and_approvers(
    asked: Asked, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: an untouched payload is signed; its ``checked`` line names the gate and the
    approvers among what was checked, and the requester's name alone as the payload's word."""
    code, _, err = _sign(capsys, asked, asked.write())
    assert code == 0, err
    checked = err[err.index("checked") :]
    assert "gate, approvers" in checked and "(the requester's name is the payload's word)" in checked, err
