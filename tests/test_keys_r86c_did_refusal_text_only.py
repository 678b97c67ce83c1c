"""Review R86c: ``did_refusal`` judged whether to quote a refused did by ``is_key_text``, which
asks whether a file of that name exists (a key file's path is not key text). A did names no file:
the refusal of a client's invocation ``iss`` (the gateway decodes it) quoted a key-looking name
that existed on the server and hid one that did not, telling the client which files exist, and
cost a stat per refusal. Rule: a did's refusal is judged by its text alone (``looks_like_key``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agentgate.authority import issue, verify_chain
from agentgate.authority._operations import _did
from agentgate.errors import AgentGateError
from agentgate.keys import SigningKey, is_key_text, public_key_from_did

ROOT, HOLDER = SigningKey(bytes([71]) * 32), SigningKey(bytes([72]) * 32)
PRESENT, ABSENT = "ab12" * 16, "cd34" * 16


def _readers() -> list[Callable[[str], object]]:
    chain = issue(ROOT, HOLDER.public, ["tool:x"], ttl=60)
    return [
        lambda did: _did(did, "invocation iss"),  # what Invocation.decode does with a client's iss
        lambda did: verify_chain(chain, [ROOT.public, did]),
        public_key_from_did,
    ]


def test_a_refused_did_says_the_same_whether_or_not_a_file_of_that_name_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / PRESENT).touch()
    for read in _readers():
        messages = []
        for did in (PRESENT, ABSENT, "did:key:z" + PRESENT):
            with pytest.raises(AgentGateError) as refused:
                read(did)
            messages.append(str(refused.value))
        assert messages[0] == messages[1] == messages[2], messages
        assert "looks like a key itself" in messages[0] and "ab12" not in messages[0], messages[0]


def test_a_did_refusal_asks_nothing_of_the_file_system(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_file_system(path: object) -> bool:
        raise AssertionError(f"a did refusal asked the file system about {path!r}")

    monkeypatch.setattr("os.path.lexists", no_file_system)
    for read in _readers():
        for did in (PRESENT, "did:web:example.com", "not a did"):
            with pytest.raises(AgentGateError):
                read(did)


def test_a_key_files_path_that_exists_is_still_not_key_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a path belongs, an existing file is a path whatever its name (unchanged)."""
    from agentgate.keys import looks_like_key

    monkeypatch.chdir(tmp_path)
    (tmp_path / PRESENT).touch()
    assert looks_like_key(PRESENT) and looks_like_key(ABSENT)
    assert not is_key_text(PRESENT) and is_key_text(ABSENT)
