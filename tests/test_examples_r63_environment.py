"""Review R63: the examples in a bad environment (a demo directory they cannot make, a policy file
they cannot read or that is no policy) end with one line naming what is wrong and where, status
2, no traceback. Each example runs in this process (``runpy``, as ``python examples/NAME`` runs
it), from a copy of the checkout's examples/ and policies/ where the policy is to be broken."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _examples import run_example

CHECKOUT = Path(__file__).resolve().parents[1]
NAMES = ["research_team", "support_agent"]
POLICIES = {"research_team": "research_team.yaml", "support_agent": "support.yaml"}


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No endpoint, the default demo directory under ``tmp_path``; the examples' own modules
    imported afresh from the copy each run, and forgotten afterwards."""
    for variable in [v for v in os.environ if v.startswith(("AGENTGATE_OPENAI_", "AGENTGATE_DEMO_DIR"))]:
        monkeypatch.delenv(variable)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    yield
    for module in ("_common", "_interrupt"):
        sys.modules.pop(module, None)


def _run(root: Path, name: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``python ROOT/examples/NAME.py``: its exit status, stdout and stderr."""
    for module in ("_common", "_interrupt"):
        sys.modules.pop(module, None)
    return run_example(root / "examples" / f"{name}.py", capsys)


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for folder in ("examples", "policies"):
        shutil.copytree(CHECKOUT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _refused(status: int, out: str, err: str) -> str:
    """The one line an example ended with, checked to be all it said, with status 2."""
    assert status == 2, (status, out, err)
    assert "Traceback" not in out + err
    assert len(err.splitlines()) == 1, err
    return err.strip()


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _write(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


BROKEN = {
    "a directory": (_directory, "Is a directory"),
    "missing": (Path.unlink, "No such file or directory"),
    "not UTF-8": (_write(b"version: 1\nprincipals: \xff\xfe\n"), "UTF-8"),
    "not YAML": (_write(b"principals: [\n"), "YAML"),
    "a list": (_write(b"- principals\n"), "mapping"),
    "an unknown field": (_write(b"version: 1\nrolez: {}\n"), "rolez"),
}


@pytest.mark.usefixtures("isolated")
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("broken", BROKEN, ids=list(BROKEN))
def test_a_policy_it_cannot_use_is_named_in_one_line(
    name: str, broken: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: a policy file that is a directory, is missing, or is no policy (bytes that are
    no UTF-8, no YAML, a list, a field no policy has) ended the example with a traceback
    (IsADirectoryError, FileNotFoundError, UnicodeDecodeError, a YAML error, AttributeError,
    PolicyError); it now ends with one line naming the file and what is wrong, and status 2."""
    root = _copy(tmp_path)
    policy = root / "policies" / POLICIES[name]
    breaks, says = BROKEN[broken]
    breaks(policy)
    line = _refused(*_run(root, name, capsys))
    assert f"policies/{POLICIES[name]}" in line
    assert says in line


@pytest.mark.usefixtures("isolated")
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("where", ["a file", "unmakeable"])
def test_a_demo_directory_it_cannot_make_is_named_in_one_line(
    name: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: AGENTGATE_DEMO_DIR naming a file, or a directory that cannot be made there,
    ended the example with a NotADirectoryError or FileNotFoundError traceback; it now ends with
    one line naming the directory and AGENTGATE_DEMO_DIR, and status 2."""
    base = tmp_path / "a-file" if where == "a file" else Path("/proc/agentgate-r63")
    if where == "a file":
        base.write_text("not a directory\n")
    monkeypatch.setenv("AGENTGATE_DEMO_DIR", str(base))
    line = _refused(*_run(CHECKOUT, name, capsys))
    assert str(base / name) in line
    assert "AGENTGATE_DEMO_DIR" in line
    if where == "a file":
        assert base.read_text() == "not a directory\n"


@pytest.mark.usefixtures("isolated")
def test_agentgate_store_does_not_move_the_examples_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: AGENTGATE_STORE naming a directory (as the CLI reads it) is no store an
    example uses: each writes its own under its demo directory, and says where."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path))
    status, out, err = _run(CHECKOUT, "support_agent", capsys)
    assert status == 0, err
    assert "AGENTGATE_STORE=.agentgate/demo/support_agent/agentgate.db agentgate audit verify" in out
