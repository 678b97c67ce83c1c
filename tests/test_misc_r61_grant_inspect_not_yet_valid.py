"""``agentgate grant inspect`` of a chain with a link that is not yet valid (agentgate/cli/grant.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agentgate.authority import DEFAULT_SKEW, issue
from agentgate.cli.main import main
from agentgate.keys import load_signing_key

REFUND = "tool:payments.refund?amount<=500"


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    monkeypatch.chdir(tmp_path)
    for name in ("root", "alice"):
        assert main(["keys", "new", name, "--dir", "k"]) == 0
    assert main(["store", "init"]) == 0  # revocation read, not "unknown"
    return tmp_path


def _inspect(capsys: pytest.CaptureFixture[str], starts_in: int) -> tuple[int, str, int, dict[str, object]]:
    """The exit code and output of ``grant inspect``, as a tree and as JSON, of a root grant
    whose validity starts ``starts_in`` seconds from now."""
    root, alice = load_signing_key(Path("k/root.key")), load_signing_key(Path("k/alice.key"))
    Path("t.tok").write_text(issue(root, alice.public, [REFUND], ttl=7200, now=time.time() + starts_in).token)
    capsys.readouterr()
    code = main(["grant", "inspect", "t.tok"])
    out, _ = capsys.readouterr()
    json_code = main(["grant", "inspect", "t.tok", "--json"])
    shown, _ = capsys.readouterr()
    link: dict[str, object] = json.loads(shown)["links"][0]
    return code, out, json_code, link


def test_a_link_not_yet_valid_is_marked_and_exits_1(keys: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R61: a link whose not_before is an hour ahead (beyond the tolerated skew) was
    shown unmarked and inspect exited 0, though every verifier refuses the chain
    (grant_not_yet_valid): ``grant inspect t.tok && deploy`` went ahead. It is now marked
    ``NOT YET VALID``, ``"not_yet_valid": true`` in JSON, and exits 1."""
    code, out, json_code, link = _inspect(capsys, 3600)
    assert "[NOT YET VALID]" in out
    assert link["not_yet_valid"] is True and link["expired"] is False
    assert (code, json_code) == (1, 1)


def test_a_link_valid_within_the_skew_is_not_marked(keys: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R61: a not_before within the tolerated clock skew (as a verifier allows it), or in
    the past, marks nothing: exit 0, ``"not_yet_valid": false``."""
    for starts_in in (DEFAULT_SKEW - 5, -60):
        code, out, json_code, link = _inspect(capsys, starts_in)
        assert "NOT YET VALID" not in out and "  [" not in out
        assert link["not_yet_valid"] is False
        assert (code, json_code) == (0, 0)
