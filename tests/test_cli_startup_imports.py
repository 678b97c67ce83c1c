"""A command imports only what its verb uses (review R46): scripts run ``grant check`` in loops,
and each layer a verb does not need (the gateway's HTTP stack, OpenTelemetry, Prometheus, the
policy schema, PostgreSQL's driver) was paid by every process. Help still lists every group."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ALWAYS_UNNEEDED = (
    "aiohttp",
    "httpx",
    "langgraph",
    "langchain_core",
    "opentelemetry.sdk",
    "prometheus_client",
    "agentgate.dispatch.dispatcher",
    "agentgate.gate._gate",
    "agentgate.tasks",
)

_RUN = """
import json, sys
from agentgate.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:  # --help
    code = exit.code
sys.stdout.flush()
print("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded(tmp_path: Path, *argv: str) -> tuple[int, set[str]]:
    """Run ``agentgate ARGV`` in a fresh interpreter; its exit code and every module it imported."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "AGENTGATE_STORE": str(tmp_path / "s.db")}
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["code"], set(report["modules"])


@pytest.fixture(scope="module")
def token(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A grant token from root to agent, issued through the CLI in one interpreter."""
    where = tmp_path_factory.mktemp("grant")
    code = f"""
import os, sys
os.chdir({str(where)!r})
os.environ["AGENTGATE_STORE"] = {str(where / "s.db")!r}
from agentgate.cli.main import main
for argv in (["keys", "new", "root"], ["keys", "new", "agent"],
             ["grant", "issue", "--issuer", "root.key", "--to", "agent.pub", "--allow", "tool:search",
              "--ttl", "1h", "--out", "g.tok"]):
    assert main(argv) == 0, argv
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return where / "g.tok"


def test_keys_new_loads_no_store_policy_or_dispatch_layer(tmp_path: Path) -> None:
    code, modules = loaded(tmp_path, "keys", "new", "k")
    assert code == 0 and (tmp_path / "k.key").exists()
    unneeded = (
        *ALWAYS_UNNEEDED,
        "psycopg",
        "agentgate.policy",
        "agentgate.store.audit",
        "agentgate.authority",
    )
    assert not modules & set(unneeded)


def test_grant_check_loads_no_dispatch_gate_or_policy_layer(tmp_path: Path, token: Path) -> None:
    where = token.parent
    code, modules = loaded(
        where,
        "grant", "check", str(token), "--as", "agent.key", "--trust", "root.pub", "--tool", "search",
    )  # fmt: skip
    assert code == 0
    assert not modules & {*ALWAYS_UNNEEDED, "agentgate.policy", "agentgate.store.audit"}


def test_grant_inspect_loads_no_dispatch_gate_or_policy_layer(tmp_path: Path, token: Path) -> None:
    code, modules = loaded(token.parent, "grant", "inspect", str(token))
    assert code == 0
    assert not modules & {*ALWAYS_UNNEEDED, "agentgate.policy", "agentgate.store.audit"}


@pytest.mark.parametrize("verb", ["issue", "delegate", "check", "inspect"])
def test_the_grant_verbs_that_write_no_audit_entry_load_no_pydantic(
    tmp_path: Path, token: Path, verb: str
) -> None:
    """Review R81: a grant was decided and a duration read through Pydantic models (``Finding``,
    the audit entry's ``canonical_json``, the policy schema's ``MAX_TTL_S``): about 0.2 CPU-s of
    the 0.4 that each of these commands took."""
    where = token.parent
    argv = {
        "issue": ["--issuer", "root.key", "--to", "agent.pub", "--allow", "tool:search", "--ttl", "1h30m"],
        "delegate": [str(token), "--as", "agent.key", "--to", str(tmp_path / "sub.pub"), "--allow", "tool:search",
                     "--ttl", "10m"],
        "check": [str(token), "--as", "agent.key", "--trust", "root.pub", "--tool", "search"],
        "inspect": [str(token)],
    }[verb]  # fmt: skip
    assert loaded(tmp_path, "keys", "new", "sub")[0] == 0
    code, modules = loaded(where, "grant", verb, *argv, *(["--json"] if verb in ("check", "inspect") else []))
    assert code == 0
    assert not modules & {"pydantic", "agentgate.policy", "agentgate.audit.entry"}


def test_grant_inspect_on_a_sqlite_store_loads_no_postgresql_driver(tmp_path: Path, token: Path) -> None:
    code, modules = loaded(token.parent, "grant", "inspect", str(token))
    assert code == 0 and "psycopg" not in modules


def test_policy_lint_loads_no_store_or_dispatch_layer(tmp_path: Path) -> None:
    code, modules = loaded(tmp_path, "policy", "lint", str(ROOT / "policies" / "support.yaml"))
    assert code == 0
    assert not modules & {*ALWAYS_UNNEEDED, "psycopg", "agentgate.store.audit", "agentgate.authority"}


def test_audit_verify_loads_no_dispatch_or_gate_layer(tmp_path: Path, token: Path) -> None:
    assert loaded(token.parent, "audit", "checkpoint")[0] == 0
    code, modules = loaded(token.parent, "audit", "verify")
    assert code == 0
    assert not modules & set(ALWAYS_UNNEEDED)


def test_audit_verify_on_a_sqlite_store_loads_no_policy_layer(tmp_path: Path, token: Path) -> None:
    assert loaded(token.parent, "audit", "checkpoint")[0] == 0
    code, modules = loaded(token.parent, "audit", "verify")
    assert code == 0 and "agentgate.policy" not in modules


GROUPS = ("keys", "grant", "approval", "broker", "audit", "policy", "tasks", "budget", "serve", "store")


def agentgate(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "agentgate", *argv], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("argv", [["--help"], ["-h", "grant"]], ids=repr)
def test_help_lists_every_group(argv: list[str]) -> None:
    done = agentgate(*argv)
    assert done.returncode == 0
    assert [line.split()[0] for line in done.stdout.splitlines() if line.startswith("    ")] == list(GROUPS)


def test_an_unknown_group_is_refused_naming_every_group() -> None:
    done = agentgate("nope")
    assert done.returncode == 2
    choices = ", ".join(f"'{group}'" for group in GROUPS)
    assert done.stderr.endswith(f"argument COMMAND: invalid choice: 'nope' (choose from {choices})\n")


def test_no_command_is_refused_as_before() -> None:
    done = agentgate()
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "usage: agentgate [-h] COMMAND ...\nagentgate: error: the following arguments are required: COMMAND\n"
    )


def test_a_group_named_first_is_parsed_as_before() -> None:
    # Only the named group is registered: its own errors and usage are what they were.
    done = agentgate("grant", "inspect")
    assert done.returncode == 2
    assert done.stderr.startswith(
        "usage: agentgate grant inspect [-h] [--trust PUBFILE|DID] [--json] TOKENFILE\n"
    )
    assert done.stderr.endswith("agentgate: error: the following arguments are required: TOKENFILE\n")


# Review R64: ``agentgate store`` on SQLite, and ``--help``, load no PostgreSQL driver:
# ``agentgate.cli.store`` imported psycopg at module level to recognise PostgreSQL's ``permission
# denied``, which only a PostgreSQL store (that has loaded psycopg) can raise, and help registers
# every group, so each paid for the driver (about 0.15 s here).


def test_store_init_on_sqlite_loads_no_postgresql_driver_nor_authority(tmp_path: Path) -> None:
    """Review R64: ``agentgate store init`` on a SQLite file creates its tables without loading
    psycopg, or the authority engine, which only ``store prune`` uses."""
    code, modules = loaded(tmp_path, "store", "init")
    assert code == 0 and (tmp_path / "s.db").exists()
    assert sorted(modules & {"psycopg", "agentgate.authority"}) == []


def test_store_prune_on_sqlite_loads_no_postgresql_driver(tmp_path: Path) -> None:
    """Review R64: ``agentgate store prune`` on a SQLite file prunes without loading psycopg."""
    assert loaded(tmp_path, "store", "init")[0] == 0
    code, modules = loaded(tmp_path, "store", "prune", "--older-than", "30d")
    assert code == 0
    assert "psycopg" not in modules


def test_help_loads_no_postgresql_driver(tmp_path: Path) -> None:
    """Review R64: ``agentgate --help`` lists every group without loading psycopg."""
    code, modules = loaded(tmp_path, "--help")
    assert code == 0
    assert "psycopg" not in modules


def test_help_loads_no_gpu_inventory(tmp_path: Path) -> None:
    """Review R64: ``agentgate --help`` registers the broker group without loading the GPU
    inventory, which only ``agentgate broker inventory`` reads."""
    code, modules = loaded(tmp_path, "--help")
    assert code == 0
    assert "agentgate.dispatch.inventory" not in modules


# Review R65: help loaded the authority engine and the policy package: grant, policy and approval
# registered their parsers beside handlers that import them at module level. Their parsers live
# apart now (cli/_grant_parser.py, _policy_parser.py, _approval_parser.py) and each handler is
# imported when its verb runs.

HEAVY_FOR_HELP = ("agentgate.authority", "agentgate.policy", "agentgate.gate._approval", "yaml")


def test_help_loads_no_authority_engine_nor_policy_package(tmp_path: Path) -> None:
    """Review R65: ``agentgate --help`` lists every group without loading the authority engine, the
    policy package or the Gate's approval layer, which only the verbs that decide or sign use."""
    code, modules = loaded(tmp_path, "--help")
    assert code == 0
    assert sorted(modules & set(HEAVY_FOR_HELP)) == []


@pytest.mark.parametrize(
    "argv",
    [
        ("grant", "--help"),
        ("grant", "check", "--help"),
        ("grant", "issue", "--help"),
        ("policy", "lint", "--help"),
        ("policy", "explain", "--help"),
        ("approval", "sign", "--help"),
    ],
    ids=" ".join,
)
def test_a_verbs_help_loads_no_authority_engine_nor_policy_package(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    """Review R65: a verb's ``--help`` builds its parser without loading the layer its handler uses."""
    code, modules = loaded(tmp_path, *argv)
    assert code == 0
    assert sorted(modules & set(HEAVY_FOR_HELP)) == []


# Review R65b: help still loaded every store implementation, the audit store, pydantic (the audit
# entry's model) and nacl/cryptography (agentgate.keys): keys, broker, audit, tasks, budget and
# store registered their parsers beside handlers that import them at module level, and
# cli/_common.py imported the store package for the verbs that open one. Those parsers live apart
# now (cli/_keys_parser.py, _broker_parser.py, _audit_parser.py, _tasks_parser.py,
# _budget_parser.py, _store_parser.py), and _common imports the store where it opens one.

STORE_FOR_HELP = (
    "agentgate.store",
    "agentgate.store.audit",
    "agentgate.audit",
    "agentgate.keys",
    "pydantic",
    "nacl",
    "cryptography",
)


def test_help_loads_no_store_audit_store_pydantic_nor_signing_library(tmp_path: Path) -> None:
    """Review R65b: ``agentgate --help`` lists every group without loading a store, the audit
    store, pydantic or the signing libraries, which only the verbs that open or sign use."""
    code, modules = loaded(tmp_path, "--help")
    assert code == 0
    assert sorted(modules & {*STORE_FOR_HELP, *HEAVY_FOR_HELP}) == []


@pytest.mark.parametrize(
    "argv",
    [
        *((group, "--help") for group in GROUPS),
        ("keys", "new", "--help"),
        ("audit", "verify", "--help"),
        ("audit", "show", "--help"),
        ("tasks", "dead-letters", "--help"),
        ("tasks", "settle", "--help"),
        ("budget", "held", "--help"),
        ("budget", "settle", "--help"),
        ("store", "init", "--help"),
        ("store", "prune", "--help"),
        ("broker", "leases", "--help"),
        ("approval", "list", "--help"),
        ("grant", "revoke", "--help"),
    ],
    ids=" ".join,
)
def test_a_verbs_help_loads_no_store_audit_store_pydantic_nor_signing_library(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    """Review R65b: a group's or a verb's ``--help`` builds its parser without loading a store,
    the audit store, pydantic or the signing libraries its handlers use."""
    code, modules = loaded(tmp_path, *argv)
    assert code == 0
    assert sorted(modules & {*STORE_FOR_HELP, *HEAVY_FOR_HELP}) == []


def test_the_whole_command_line_built_imports_every_handler(tmp_path: Path) -> None:
    """Review R65b: ``build_parser()``, with no command line, still imports every verb group's
    handlers (only a command line given loads parsers alone): tests and programs build it before
    they drop to another account, which may not read the interpreter's files afterwards."""
    code = "import json, sys\nfrom agentgate.cli.main import build_parser\nbuild_parser()\nprint(json.dumps(list(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    modules = set(json.loads(done.stdout))
    assert {f"agentgate.cli.{group}" for group in GROUPS} <= modules
