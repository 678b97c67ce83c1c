"""Review R95: docs/gateway.md's walk-through ("To try the examples below in the checkout"), run in
a checkout as the page says, wrote two Ed25519 private keys (``platform-root.key``, ``agent.key``),
a bearer chain and a policy copy into the checkout's root, untracked and not ignored: ``git add -A``
staged the private keys. It now works in ``.agentgate/gateway/``, which git ignores, and
.gitignore ignores ``*.key`` anywhere in the tree (no test ships a key file; the suite makes its
own). Git runs without the user's or the system's configuration, so that only the checkout's
.gitignore decides."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_docs_dispatch_blocks import ROOT, gateway_set_up

if shutil.which("git") is None:
    pytest.skip("git is not installed", allow_module_level=True)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git checkout holding the project's .gitignore and the policy the walk-through copies."""
    repo = tmp_path / "checkout"
    (repo / "policies").mkdir(parents=True)
    shutil.copy(ROOT / ".gitignore", repo)
    shutil.copy(ROOT / "policies" / "gpu_platform.yaml", repo / "policies")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    return repo


def test_the_gateway_walk_through_leaves_nothing_for_git_to_stage(checkout: Path) -> None:
    here, serve, _ = gateway_set_up(checkout)
    assert serve.startswith("agentgate serve ")
    for name in ("platform-root.key", "agent.key", "agent.token", "platform.yaml"):
        assert (here / name).is_file(), name  # what the page's examples read, where they run
    assert _git(checkout, "status", "--porcelain", "--untracked-files=all").splitlines() == [
        "A  .gitignore",
        "A  policies/gpu_platform.yaml",
    ]


@pytest.mark.parametrize("path", ["agent.key", "keys/platform-root.key", "some/deep/place/ops.key"])
def test_a_private_key_is_ignored_anywhere_in_the_tree(checkout: Path, path: str) -> None:
    assert _git(checkout, "check-ignore", "--no-index", path).strip() == path
