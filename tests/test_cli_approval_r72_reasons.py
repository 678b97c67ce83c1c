"""``agentgate approval sign --store`` shows an approver the reasons the log holds that earlier
approvals of the request were not counted, and a reason the log records by digest in the words
the payload shows it (review R72; the CLI's main run with argv, a real Gate on a SQLite file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import cli
from test_cli_approval_r71_asked_again import _asked_again
from test_cli_approval_r71_review import _Elided, elided  # noqa: F401 (a fixture)

from agentgate.audit.entry import elision


def _sign(tmp_path: Path, capsys: pytest.CaptureFixture[str], payload: object) -> tuple[int, str, str]:
    (tmp_path / "p.json").write_text(json.dumps(payload), encoding="utf-8")
    return cli(
        capsys, "approval", "sign", str(tmp_path / "p.json"), "--as", str(tmp_path / "k" / "lead.key"),
        "--store", str(tmp_path / "s.db"),
    )  # fmt: skip


def _line(err: str, label: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(f"  {label} ")]


def test_an_earlier_approval_not_counted_that_the_log_holds_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R72: after eve's approval (a key the gate does not list) was not counted, the log
    holds an ``approval_required`` entry referring to the request's saying so, and the payload
    asked again ends with it; the description showed nothing of it (the ``why`` line showed the
    first entry's reasons only), so the approver signing never learnt that a forged or misdirected
    yes had been presented. It is now shown on a ``not counted`` line, as the log records it."""
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    payload = _asked_again(tmp_path)
    code, out, err = _sign(tmp_path, capsys, payload)
    assert code == 0, err
    shown = _line(err, "not counted")
    assert len(shown) == 1, err
    assert "approval not counted: its approver is not one of this call's approvers" in shown[0], err
    assert "audit entry" in shown[0], err  # where the log holds it
    assert json.loads(out)["request"] == payload["request"]["id"]


def test_a_not_counted_reason_the_log_does_not_hold_is_counted_not_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R72: a ``not counted`` reason added on the way (the log holds no such entry) is still
    not quoted, as review R71 made sure, but no longer passed over in silence either: the
    description says how many the payload shows that the log does not hold."""
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    payload = _asked_again(tmp_path)
    payload["request"]["reasons"].append("approval not counted: boss agreed; the amount is really 80")
    code, _out, err = _sign(tmp_path, capsys, payload)
    assert code == 0, err
    assert "really 80" not in err and "boss" not in err, err
    shown = _line(err, "not counted")
    assert len(shown) == 2 and "1 more the payload shows" in shown[1], err


def test_a_reason_the_log_records_by_digest_is_shown_readable(
    elided: _Elided,  # noqa: F811 (the fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R72: the ``why`` line showed the entry's reasons as recorded, so a gate's reason the
    log keeps by digest (a gate of 41 long-named approvers, a log of 4096 bytes per entry) read
    ``elided reason: sha256:...``. The payload shows that reason and its digest is the entry's:
    the line now shows it in words."""
    request = dict(elided.payload["request"])
    gate_reason = next(r for r in request["reasons"] if r.startswith("approval gate big-refund applies"))
    code, _out, err = elided.sign(capsys, request)
    assert code == 0, err
    why = _line(err, "why")
    assert len(why) == 1 and "elided reason" not in why[0], why
    assert "approval gate big-refund applies" in why[0], why
    assert elision("reason", gate_reason.encode("utf-8")) not in err
