"""Every environment variable and configuration knob agentgate reads.

Variables read (``grep -rn 'environ\\|getenv' agentgate examples``): ``AGENTGATE_STORE``
(store/__init__.py, cli/_common.py), ``AGENTGATE_SQLITE_SYNCHRONOUS`` and
``AGENTGATE_SQLITE_BUSY_TIMEOUT`` (store/_sqlite.py),
``AGENTGATE_LOG_KEY``, ``AGENTGATE_LOG_ORIGIN``, ``AGENTGATE_LOG_PREVIOUS_KEYS``,
``AGENTGATE_AUDIT_MAX_ENTRY_BYTES`` (store/audit/_keys.py), ``OTEL_TRACES_EXPORTER`` (and, through the
SDK, ``OTEL_SERVICE_NAME``/``OTEL_RESOURCE_ATTRIBUTES``) and
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (audit/spans.py), the variable an
inventory's ``api_key_env`` names (dispatch/inventory.py), libpq's own ``PG*`` variables (read by
psycopg for a ``postgresql://`` store), and in the examples ``AGENTGATE_DEMO_DIR``,
``AGENTGATE_OPENAI_BASE_URL``, ``AGENTGATE_OPENAI_MODEL``, ``AGENTGATE_OPENAI_API_KEY``
(examples/_common.py). ``USER`` in store/_pgserver.py serves the test suite's server only.

What holds (real SQLite files, the real CLI as a subprocess and in-process, a real PostgreSQL):

- the documented defaults are the real ones: no variable set, the store is
  ``.agentgate/agentgate.db`` under the working directory, the log key ``log.key`` beside it, the
  checkpoint origin ``agentgate.local/audit``;
- ``--store`` beats ``AGENTGATE_STORE`` (a refused value in the variable does not matter then);
- garbage in ``AGENTGATE_SQLITE_SYNCHRONOUS`` (empty, white space, ``OFF``, ``0``, a CRLF ``\\r``,
  full-width letters), in ``AGENTGATE_AUDIT_MAX_ENTRY_BYTES`` (``nan``, ``inf``, ``1e309``, 5000
  digits, hex), in ``AGENTGATE_LOG_ORIGIN`` (white space, ``\\r``, ``+``) and in ``AGENTGATE_STORE``
  (white space, ``\\r``, an unknown scheme) is one ``agentgate: error:`` line and exit 2, and a
  revocation asked under it writes nothing; lower-case ``normal``/``extra`` are the SQLite modes
  (``PRAGMA synchronous`` checked), ``FULL`` the default;
- surrounding white space (a CRLF env file) has a safe meaning where it is stripped: the entry
  bound (``65536\\r`` is 65536), previous log keys, an API key named by ``api_key_env`` (sent
  without the ``\\r``); a non-ASCII API key is refused naming the variable, never the value;
- content capture is on only for ``true`` (any case, white space ignored); ``1``, ``yes``, empty:
  off, the safe side;
- ``OTEL_TRACES_EXPORTER``: fixed here (audit/spans.py) for ``Console``/``OTLP`` (the OpenTelemetry
  specification reads enumerated values case-insensitively; they were refused) and for
  ``console,bogus``, which started the console exporter's thread and left it running behind the
  ``InputError`` (now every name is checked, and every exporter made, before any thread starts);
  the error names the variable and its whole value.

Fixed by the lead in review r38, as the rest below: ``Gate`` built its ``AuditLog`` without
``AGENTGATE_LOG_ORIGIN`` and ``AGENTGATE_LOG_PREVIOUS_KEYS`` (``Gate.verify`` raised
``TamperDetected`` on the CLI's checkpoints under the documented origin, and on the old key's
after the documented rotation).

Fixed by the lead in review r38 (plain tests now): ``AGENTGATE_STORE=""`` was read as unset
(a revocation went to a new ``.agentgate/agentgate.db``, exit 0): refused, as is
``open_store("")`` (store/__init__.py ``store_url``); ``AGENTGATE_LOG_KEY`` with white space at an
end is refused naming it; ``AGENTGATE_LOG_PREVIOUS_KEYS=","`` no longer lifts the no-new-key guard;
``AGENTGATE_AUDIT_MAX_ENTRY_BYTES`` and ``AGENTGATE_LOG_PREVIOUS_KEYS`` errors name the variable, and
the entry bound is at most 256 MiB (store/audit/_keys.py); a PostgreSQL session started with
``synchronous_commit = off`` (``PGOPTIONS``) is set back on (store/_postgres.py); the examples'
``AGENTGATE_DEMO_DIR`` empties only a directory an example made (or the default), is documented
(docs/quickstart.md), and a CRLF or blank ``AGENTGATE_OPENAI_BASE_URL`` is one message naming it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _cli import cli
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentgate import Gate
from agentgate.audit.spans import execute_tool_span, get_tracer
from agentgate.dispatch import inventory_from_mapping
from agentgate.errors import BackendCredentialError, KeyFileError
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, entry_limit, open_log_key, previous_log_keys

REPO = Path(__file__).resolve().parents[1]
POLICY = REPO / "policies" / "support.yaml"
GRANT = "a" * 64
OTHER = "b" * 64
VARIABLES = (
    "AGENTGATE_STORE",
    "AGENTGATE_SQLITE_SYNCHRONOUS",
    "AGENTGATE_SQLITE_BUSY_TIMEOUT",
    "AGENTGATE_LOG_KEY",
    "AGENTGATE_LOG_ORIGIN",
    "AGENTGATE_LOG_PREVIOUS_KEYS",
    "AGENTGATE_AUDIT_MAX_ENTRY_BYTES",
    "OTEL_TRACES_EXPORTER",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No variable of the suite's environment leaks in; each test works in its own directory."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def bare_env(**extra: str) -> dict[str, str]:
    """The process environment without any agentgate or OTEL variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(extra)
    return env


def agentgate(cwd: Path, *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """The real command, as a subprocess, in ``cwd`` with only the variables given."""
    return subprocess.run(
        [sys.executable, "-m", "agentgate", *argv],
        cwd=cwd,
        env=bare_env(**extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentgate: error: "), err
    assert "Traceback" not in err
    return lines[0]


def entries(store: Path) -> tuple[int, int]:
    """Audit entries and checkpoints in the SQLite file ``store``."""
    conn = sqlite3.connect(store)
    try:
        (log,) = conn.execute("SELECT count(*) FROM audit_log").fetchone()
        (checkpoints,) = conn.execute("SELECT count(*) FROM audit_checkpoints").fetchone()
    finally:
        conn.close()
    return int(log), int(checkpoints)


@pytest.fixture
def store_with_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A SQLite store holding one revocation entry and one checkpoint, named by AGENTGATE_STORE."""
    path = tmp_path / "db" / "store.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(path))
    assert cli(capsys, "store", "init")[0] == 0  # grant revoke refuses a store that does not exist
    assert cli(capsys, "grant", "revoke", OTHER)[0] == 0
    assert cli(capsys, "audit", "checkpoint")[0] == 0
    return path


# --- defaults and precedence ---------------------------------------------------------------------


def test_documented_defaults_are_the_real_ones(tmp_path: Path) -> None:
    done = agentgate(tmp_path, "store", "init")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".agentgate" / "agentgate.db").is_file()
    done = agentgate(tmp_path, "grant", "revoke", GRANT)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".agentgate" / "log.key").is_file()  # beside the SQLite file
    done = agentgate(tmp_path, "audit", "checkpoint")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "agentgate.local/audit"


def test_the_store_flag_beats_the_variable(store_with_log: Path, tmp_path: Path) -> None:
    bad = {"AGENTGATE_STORE": "mysql://elsewhere/db"}
    done = agentgate(tmp_path, "audit", "verify", **bad)
    assert done.returncode == 2 and "unsupported store URL" in one_error_line(done.stderr)
    done = agentgate(tmp_path, "audit", "verify", "--store", str(store_with_log), **bad)
    assert done.returncode == 0 and done.stdout.startswith("intact: 1 entry,"), done.stderr


# --- garbage values: one line, exit 2, nothing written -------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("AGENTGATE_SQLITE_SYNCHRONOUS", "", "AGENTGATE_SQLITE_SYNCHRONOUS"),
        ("AGENTGATE_SQLITE_SYNCHRONOUS", "  ", "AGENTGATE_SQLITE_SYNCHRONOUS"),
        ("AGENTGATE_SQLITE_SYNCHRONOUS", "OFF", "AGENTGATE_SQLITE_SYNCHRONOUS"),
        ("AGENTGATE_SQLITE_SYNCHRONOUS", "0", "AGENTGATE_SQLITE_SYNCHRONOUS"),
        ("AGENTGATE_SQLITE_SYNCHRONOUS", "NORMAL\r", "AGENTGATE_SQLITE_SYNCHRONOUS"),
        ("AGENTGATE_SQLITE_SYNCHRONOUS", "\uff26\uff35\uff2c\uff2c", "AGENTGATE_SQLITE_SYNCHRONOUS"),
        ("AGENTGATE_SQLITE_BUSY_TIMEOUT", "nan", "AGENTGATE_SQLITE_BUSY_TIMEOUT"),
        ("AGENTGATE_SQLITE_BUSY_TIMEOUT", "-1", "AGENTGATE_SQLITE_BUSY_TIMEOUT"),
        ("AGENTGATE_SQLITE_BUSY_TIMEOUT", "30s", "AGENTGATE_SQLITE_BUSY_TIMEOUT"),
        ("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "nan", "AGENTGATE_AUDIT_MAX_ENTRY_BYTES"),
        ("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "inf", "AGENTGATE_AUDIT_MAX_ENTRY_BYTES"),
        ("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "1e309", "AGENTGATE_AUDIT_MAX_ENTRY_BYTES"),
        ("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "9" * 5000, "AGENTGATE_AUDIT_MAX_ENTRY_BYTES"),
        ("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "0x10000", "AGENTGATE_AUDIT_MAX_ENTRY_BYTES"),
        ("AGENTGATE_LOG_ORIGIN", " ", "origin"),
        ("AGENTGATE_LOG_ORIGIN", "audit.example.com/prod\r", "origin"),
        ("AGENTGATE_LOG_ORIGIN", "a+b", "origin"),
        ("AGENTGATE_STORE", "{store}\r", "white space"),
        ("AGENTGATE_STORE", " {store}", "white space"),
        ("AGENTGATE_STORE", "postgresql+psycopg://h/db", "unsupported store URL"),
    ],
)
def test_a_garbage_value_is_one_line_exit_2_and_writes_nothing(
    store_with_log: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    said: str,
) -> None:
    monkeypatch.setenv(variable, value.format(store=store_with_log))
    # The origin is used when signing (entries do not carry it): a checkpoint is asked for.
    argv = ("audit", "checkpoint") if variable == "AGENTGATE_LOG_ORIGIN" else ("grant", "revoke", GRANT)
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == ""
    assert said in one_error_line(err)
    assert entries(store_with_log) == (1, 1)  # no revocation recorded, no checkpoint signed
    assert sorted(p.name for p in store_with_log.parent.iterdir() if not p.name.startswith("store.db-")) == [
        "log.key",
        "log.pub",
        "store.db",
    ]


@pytest.mark.parametrize(
    ("value", "pragma"), [(None, 2), ("normal", 1), ("Normal", 1), ("extra", 3), ("FULL", 2)]
)
def test_sqlite_synchronous_modes_take_effect_in_any_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None, pragma: int
) -> None:
    if value is not None:
        monkeypatch.setenv("AGENTGATE_SQLITE_SYNCHRONOUS", value)
    store = SQLiteStore(tmp_path / "s.db")
    try:
        conn = store.connect()
        try:
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == pragma
        finally:
            conn.close()
    finally:
        store.close()


def test_a_refused_synchronous_mode_creates_no_store_directory(tmp_path: Path) -> None:
    # store init: the verb that creates a store (grant revoke refuses one that does not exist).
    done = agentgate(tmp_path, "store", "init", AGENTGATE_SQLITE_SYNCHRONOUS="off")
    assert done.returncode == 2 and "'OFF'" in one_error_line(done.stderr)
    assert not (tmp_path / ".agentgate").exists()


def test_white_space_around_the_entry_bound_and_previous_keys_is_stripped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "65536\r")
    assert entry_limit() == 65536
    monkeypatch.setenv("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "")
    assert entry_limit() == 64 * 1024  # docs/audit-format.md: 64 KiB by default
    store = SQLiteStore(tmp_path / "s.db")
    try:
        key = open_log_key(store)
        monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", f" {tmp_path / 'log.pub'}\r,")
        assert previous_log_keys() == [key.public]
    finally:
        store.close()


# --- the gate and the documented log variables ---------------------------------------------------


def test_the_gate_signs_and_verifies_under_agentgate_log_origin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(store))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", "audit.example.com/prod")
    assert cli(capsys, "store", "init")[0] == 0
    assert cli(capsys, "grant", "revoke", GRANT)[0] == 0
    assert cli(capsys, "audit", "checkpoint")[0] == 0  # signed as audit.example.com/prod
    gate = Gate.open(str(POLICY), str(store))
    try:
        assert gate.verify().ok  # raised TamperDetected: "no signature by the log key agentgate.local/audit"
    finally:
        gate.close()
    code, out, _ = cli(capsys, "audit", "verify")
    assert code == 0 and out.startswith("intact"), out


def test_the_gate_accepts_checkpoints_of_a_rotated_out_log_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store.db"
    gate = Gate.open(str(POLICY), str(store))
    try:
        assert gate.verify().ok  # a checkpoint signed by the first log key
    finally:
        gate.close()
    (tmp_path / "log.key").rename(tmp_path / "log-old.key")  # docs/operations.md, rotation step 2
    (tmp_path / "log.pub").rename(tmp_path / "log-old.pub")
    monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", str(tmp_path / "log-old.pub"))  # step 3
    gate = Gate.open(str(POLICY), str(store))  # step 4: a new log.key
    try:
        report = gate.verify()
        assert report.ok and report.checkpoints_checked == 2, report.problems
    finally:
        gate.close()


def test_an_empty_store_variable_is_refused_not_read_as_the_default(tmp_path: Path) -> None:
    done = agentgate(tmp_path, "grant", "revoke", GRANT, AGENTGATE_STORE="")
    assert done.returncode == 2, done.stdout
    assert "AGENTGATE_STORE" in one_error_line(done.stderr)
    assert not (tmp_path / ".agentgate").exists()


@pytest.mark.parametrize("shape", [" {path}", "{path}\r"])
def test_a_log_key_path_with_white_space_at_an_end_is_refused_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    wanted = tmp_path / "secrets" / "log.key"
    monkeypatch.setenv("AGENTGATE_LOG_KEY", shape.format(path=wanted))
    store = SQLiteStore(tmp_path / "db" / "s.db")
    try:
        with pytest.raises(KeyFileError) as info:
            open_log_key(store)
    finally:
        store.close()
    assert "AGENTGATE_LOG_KEY" in str(info.value)
    assert "white space" in str(info.value) or "line break" in str(info.value)
    assert not (tmp_path / " ").exists()


def test_previous_keys_naming_no_key_do_not_lift_the_new_key_guard(
    store_with_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "mount" / "log.key"  # a secret that was not mounted
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(elsewhere))
    monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", ",")  # $OLD_PUB,$OLDER_PUB, both unset
    code, out, err = cli(capsys, "audit", "checkpoint")
    assert not elsewhere.exists()  # it was created; then checkpoint said REFUSED, as for tampering
    assert code == 2 and "No key was created" in one_error_line(err), out + err


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "0"),
        ("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "-1"),
        ("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "4095"),
        ("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "1" + "0" * 30),
        ("AGENTGATE_LOG_PREVIOUS_KEYS", "/nonexistent/log-2026-11.pub"),
    ],
)
def test_a_refused_value_names_its_variable(
    store_with_log: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
) -> None:
    monkeypatch.setenv(variable, value)
    code, _, err = cli(capsys, "audit", "verify")
    assert code == 2 and variable in one_error_line(err)


@pytest.mark.postgres
def test_pgoptions_cannot_turn_off_durable_commits(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentgate.store._postgres import PostgresStore

    monkeypatch.setenv("PGOPTIONS", "-c synchronous_commit=off")
    try:
        store = PostgresStore(postgres_url)
    except Exception as exc:  # refusing the setting, naming it, is a fix too
        assert "synchronous_commit" in str(exc)
        return
    try:
        with store.transaction() as tx:
            assert tx.execute("SHOW synchronous_commit")[0][0] == "on"
    finally:
        store.close()


# --- OpenTelemetry ------------------------------------------------------------------------------

_CONFIGURE = """
import os, sys, threading
from agentgate.audit.spans import configure_from_env, execute_tool_span, get_tracer
from agentgate.errors import InputError
from opentelemetry import trace
threads = threading.active_count()
os.environ["OTEL_TRACES_EXPORTER"] = "console,Carrier-Pigeon"
try:
    configure_from_env()
except InputError as exc:
    print("refused:", exc)
assert threading.active_count() == threads, "an exporter thread left running"
assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider), "a provider installed"
os.environ["OTEL_TRACES_EXPORTER"] = " Console\\r"
provider = configure_from_env()
with execute_tool_span("search_docs", tracer=get_tracer(provider)):
    pass
provider.shutdown()
"""


def test_otel_traces_exporter_any_case_and_a_refusal_leaves_nothing_running(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CONFIGURE],
        cwd=tmp_path,
        env=bare_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "refused: OTEL_TRACES_EXPORTER='console,Carrier-Pigeon'" in done.stdout
    assert "'carrier-pigeon' is not supported" in done.stdout
    assert '"name": "execute_tool search_docs"' in done.stdout  # the console exporter ran


@pytest.mark.parametrize(
    ("value", "captured"), [("TRUE\r\n", True), (" true ", True), ("1", False), ("yes", False), ("", False)]
)
def test_content_capture_is_on_only_for_true(
    monkeypatch: pytest.MonkeyPatch, value: str, captured: bool
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
    with execute_tool_span("t", arguments={"card": "4111"}, tracer=get_tracer(provider)):
        pass
    (span,) = exporter.get_finished_spans()
    assert ("gen_ai.tool.call.arguments" in (span.attributes or {})) is captured


# --- the variable an inventory's api_key_env names -----------------------------------------------


def test_api_key_env_strips_a_crlf_and_refuses_non_ascii_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend: dict[str, Any] = {
        "name": "b0",
        "url": "http://10.0.0.1:8000",
        "engine": "vllm",
        "models": ["m"],
        "api_key_env": "R38_BACKEND_KEY",
    }
    monkeypatch.setenv("R38_BACKEND_KEY", "sk-r38-secret\r\n")
    key = inventory_from_mapping({"backends": [backend]}).backends[0].api_key
    assert key is not None and key.get_secret_value() == "sk-r38-secret"
    monkeypatch.setenv("R38_BACKEND_KEY", "sk-r38-\u043a\u043b\u044e\u0447")
    with pytest.raises(BackendCredentialError) as info:
        inventory_from_mapping({"backends": [backend]})
    assert "R38_BACKEND_KEY" in str(info.value) and "sk-r38" not in str(info.value)


# --- the examples -------------------------------------------------------------------------------


@pytest.fixture
def examples_common(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    # _common.py imports its sibling _interrupt as the examples run it, with examples/ on the path:
    # until review R63 this passed only where an earlier test of the worker had imported it.
    monkeypatch.syspath_prepend(str(REPO / "examples"))
    spec = importlib.util.spec_from_file_location("_r38_examples_common", REPO / "examples" / "_common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered while it runs: its dataclasses look their module up in sys.modules.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_an_empty_demo_dir_removes_nothing_of_the_users(
    examples_common: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "support_agent"
    mine.mkdir()
    (mine / "notes.txt").write_text("not the demo's\n")
    monkeypatch.setenv("AGENTGATE_DEMO_DIR", "")
    with contextlib.suppress(SystemExit):  # refusing the empty value is a fix too
        examples_common.demo_dir("support_agent")
    assert (mine / "notes.txt").read_text() == "not the demo's\n"


@pytest.mark.parametrize("value", ["http://127.0.0.1:9/v1\r", "   "])
def test_an_unusable_endpoint_url_is_one_message_naming_the_variable(
    examples_common: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    value: str,
) -> None:
    # Since review R59 the line goes to standard error and the status is 2 (a setting it cannot use).
    monkeypatch.setenv("AGENTGATE_OPENAI_BASE_URL", value)
    with pytest.raises(SystemExit) as info:
        examples_common.chat_model([], name="m")
    assert info.value.code == 2
    assert "AGENTGATE_OPENAI_BASE_URL" in capsys.readouterr().err


def test_every_variable_the_examples_read_is_documented() -> None:
    docs = (REPO / "README.md").read_text() + "".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    source = (REPO / "examples" / "_common.py").read_text()
    read = {
        "AGENTGATE_DEMO_DIR",
        "AGENTGATE_OPENAI_BASE_URL",
        "AGENTGATE_OPENAI_MODEL",
        "AGENTGATE_OPENAI_API_KEY",
    }
    assert all(name in source for name in read)
    assert sorted(name for name in read if name not in docs) == []


def test_every_variable_agentgate_reads_is_documented() -> None:
    docs = (REPO / "README.md").read_text() + "".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    missing = [name for name in VARIABLES if name not in docs]
    assert missing == []


def test_the_audit_log_reads_its_variables_when_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bound is read when the log is built (a Gate fails at open, not at its first decision).
    store = SQLiteStore(tmp_path / "s.db")
    try:
        key = open_log_key(store)
        monkeypatch.setenv("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "8192")
        assert AuditLog(store, key).max_entry_bytes == 8192
        monkeypatch.setenv("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "nan")
        with pytest.raises(Exception, match="AGENTGATE_AUDIT_MAX_ENTRY_BYTES"):
            AuditLog(store, key)
    finally:
        store.close()
