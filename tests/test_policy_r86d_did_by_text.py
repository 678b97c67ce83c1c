"""Review R86d: a policy file's ``did:`` that is no did:key and looks like a key itself is refused
without being shown whether or not a file of that name exists in the working directory: a did
names no file, so it is judged by its text alone (``keys.looks_like_key``). Until R86d the loader
asked ``is_key_text``, which takes a value naming an existing file as a path, and quoted it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

KEYISH = "Zm9vYmFyQUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqaw"
POLICY = f"""version: 1
principals:
  agent: {{kind: agent, did: {KEYISH}, roles: []}}
roles: {{}}
"""


@pytest.mark.parametrize("file_exists", [False, True], ids=["no-file", "file-of-that-name"])
def test_a_keyish_did_is_not_shown_whatever_files_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_exists: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    if file_exists:
        (tmp_path / KEYISH).touch()
    with pytest.raises(PolicyError) as refused:
        parse_policy(POLICY, source="p.yaml")
    said = str(refused.value)
    assert KEYISH not in said
    assert "the value (not shown: it looks like a key itself) is not a did:key" in said
