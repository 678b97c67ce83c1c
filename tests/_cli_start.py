"""What a command costs to start: the mean CPU time of fresh ``agentgate`` processes, verb by verb
(docs/cli.md, "Start-up"; tests/README.md). A measuring tool, not a test (no ``test_`` prefix:
never collected) and not a benchmark (no goal of an issue).

    .venv/bin/python tests/_cli_start.py [--runs N] [OTHER_TREE]

measures this checkout's ``agentgate`` package, and, given ``OTHER_TREE`` (a directory holding
another version's ``agentgate/`` package, e.g. ``git worktree add /tmp/before HEAD~3``), that one
too, the two alternated run by run so that load from other work falls on both alike. Each run is
one process started as ``python -m agentgate`` would be, from the package of the tree measured
(the editable install's finder is set aside), in a scratch directory with its own store and keys;
its CPU is the process's user and system time (``RUSAGE_CHILDREN``). Compile both trees' bytecode
first (``python -m compileall -q agentgate``): where ``PYTHONDONTWRITEBYTECODE`` is set, a module
without bytecode is compiled again by every process.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs the ``agentgate`` package of the tree named first, not the installed (editable) one.
_RUN = """
import runpy, sys
root = sys.argv.pop(1)
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, root)
sys.argv[0] = "agentgate"
runpy.run_module("agentgate", run_name="__main__", alter_sys=True)
"""

VERBS = {
    "keys new": lambda i: ["keys", "new", f"k{i}", "--dir", "more"],
    "grant issue": lambda i: [
        "grant", "issue", "--issuer", "k/root.key", "--to", "k/agent.pub", "--allow", "tool:search.*",
        "--ttl", "1h", "--out", f"i{i}.tok",
    ],
    "grant delegate": lambda i: [
        "grant", "delegate", "t.tok", "--as", "k/agent.key", "--to", "k/sub.pub", "--allow", "tool:search.web",
        "--ttl", "10m", "--out", f"d{i}.tok",
    ],
    "grant check": lambda i: [
        "grant", "check", "t.tok", "--as", "k/agent.key", "--trust", "k/root.pub", "--tool", "search.web",
    ],
    "grant inspect": lambda i: ["grant", "inspect", "t.tok"],
    "grant revoke": lambda i: ["grant", "revoke", f"i{i}.tok"],
    "policy lint": lambda i: ["policy", "lint", str(ROOT / "policies" / "research_team.yaml")],
    "audit verify": lambda i: ["audit", "verify"],
}  # fmt: skip


SET_UP = (
    ["store", "init"],
    ["keys", "new", "root", "--dir", "k"],
    ["keys", "new", "agent", "--dir", "k"],
    ["keys", "new", "sub", "--dir", "k"],
    ["grant", "issue", "--issuer", "k/root.key", "--to", "k/agent.pub", "--allow", "tool:search.*", "--ttl", "1h",
     "--out", "t.tok"],
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", nargs="?", type=Path, help="another tree holding an agentgate/ package")
    parser.add_argument("--runs", type=int, default=10, help="runs of each verb in each tree (default 10)")
    args = parser.parse_args(argv)
    trees = [ROOT] + ([args.other.resolve()] if args.other else [])
    for tree in trees:
        if not (tree / "agentgate" / "__main__.py").is_file():
            parser.error(f"{tree}: holds no agentgate/ package")
    scratch = Path(tempfile.mkdtemp(prefix="agentgate-cli-start-"))
    env = {
        **os.environ,
        "AGENTGATE_STORE": str(scratch / "s.db"),
        "AGENTGATE_LOG_KEY": str(scratch / "log.key"),
    }

    def run(tree: Path, argv: list[str]) -> tuple[int, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [sys.executable, "-c", _RUN, str(tree), *argv],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return done.returncode, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)

    try:
        for setup in SET_UP:
            code, _ = run(ROOT, setup)
            if code != 0:
                raise SystemExit(f"set-up failed: agentgate {' '.join(setup)} (exit {code})")
        spent = {(verb, tree): 0.0 for verb in VERBS for tree in trees}
        for i in range(args.runs):
            for verb, words in VERBS.items():
                for n, tree in enumerate(trees if i % 2 == 0 else trees[::-1]):
                    code, cpu = run(tree, words(f"{i}-{n}"))
                    if code not in (0, 1):
                        raise SystemExit(f"agentgate {verb} exited {code} in {tree}")
                    spent[(verb, tree)] += cpu
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    header = f"{'verb':16}" + "".join(f" {str(tree)[-24:]:>24}" for tree in trees)
    print(f"mean CPU seconds of {args.runs} fresh processes each\n{header}")
    for verb in VERBS:
        print(f"{verb:16}" + "".join(f" {spent[(verb, tree)] / args.runs:24.3f}" for tree in trees))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
