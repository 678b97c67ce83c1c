"""Review R84 (regression): ``agentgate keys new -- -a.key`` is refused (NAME is the name without
``.key``), and the command it offered, ``agentgate keys new -a``, was one argparse reads as an
option (``unrecognized arguments: -a``). A name that starts with ``-`` is now offered after
``--``; the test runs each offered command and checks it writes the pair."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from _cli import cli

_OFFER = re.compile(r"NAME is the name without \.key or \.pub: (agentgate keys new .+) writes ")


@pytest.mark.parametrize(
    ("name", "stem"), [("-a.key", "-a"), ("-a b.pub", "-a b"), ("--x.key.key", "--x"), ("~x.key", "~x")]
)
def test_the_offered_command_writes_the_pair(
    name: str, stem: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "keys", "new", "--", name)
    offer = _OFFER.search(err)
    assert (code, out) == (2, "") and offer, err
    assert list(tmp_path.iterdir()) == []
    argv = shlex.split(offer.group(1))
    assert argv[:3] == ["agentgate", "keys", "new"] and ("--" in argv) == stem.startswith("-"), argv
    code, out, err = cli(capsys, *argv[1:])
    assert (code, err) == (0, ""), err
    assert out.startswith("did:key:")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{stem}.key", f"{stem}.pub"]
