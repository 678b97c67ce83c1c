"""The store (agentgate/store): transactions and nonces on both stores, SQLite's WAL and durability,
and open_store / open_existing_store with every documented form of a path or URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentgate.cli._common import open_existing_store
from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.store import SQLiteStore, Store, open_store
from agentgate.store.approvals import ApprovalStore
from agentgate.store.grants import GrantRepository

DDL = {
    "sqlite": "CREATE TABLE IF NOT EXISTS t_probe (k TEXT PRIMARY KEY, v INTEGER NOT NULL);",
    "postgresql": "CREATE TABLE IF NOT EXISTS t_probe (k TEXT PRIMARY KEY, v BIGINT NOT NULL);",
}


def test_transaction_commits_and_rolls_back(store: Store) -> None:
    store.ensure_schema("probe", DDL)
    with store.transaction() as tx:
        tx.execute("INSERT INTO t_probe (k, v) VALUES (?, ?)", ("a", 1))
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.execute("INSERT INTO t_probe (k, v) VALUES (?, ?)", ("b", 2))
        raise RuntimeError("abort")
    assert store.query("SELECT k, v FROM t_probe ORDER BY k") == [("a", 1)]


def test_conditional_update_reports_rowcount(store: Store) -> None:
    store.ensure_schema("probe", DDL)
    with store.transaction() as tx:
        tx.execute("INSERT INTO t_probe (k, v) VALUES (?, ?)", ("a", 10))
        tx.execute("UPDATE t_probe SET v = v - ? WHERE k = ? AND v >= ?", (20, "a", 20))
        assert tx.rowcount == 0
        tx.execute("UPDATE t_probe SET v = v - ? WHERE k = ? AND v >= ?", (5, "a", 5))
        assert tx.rowcount == 1


@pytest.mark.parametrize("value", [{"not": "bindable"}, 2**64], ids=["unbindable", "beyond-64-bits"])
@pytest.mark.parametrize("many", [False, True], ids=["execute", "executemany"])
def test_a_parameter_the_driver_cannot_send_is_a_store_error_and_nothing_is_written(
    store: Store, value: object, many: bool
) -> None:
    """Review R56: on SQLite a parameter sqlite3 cannot bind ended in an ``AttributeError``
    ('ProgrammingError' object has no attribute 'sqlite_errorcode') and one beyond 64 bits in an
    ``OverflowError``, where PostgreSQL's store raised ``StoreError``, as every store failure is."""
    store.ensure_schema("probe", DDL)
    with pytest.raises(StoreError), store.transaction() as tx:
        tx.execute("INSERT INTO t_probe (k, v) VALUES (?, ?)", ("a", 1))
        if many:
            tx.executemany("INSERT INTO t_probe (k, v) VALUES (?, ?)", [("b", value)])
        else:
            tx.execute("INSERT INTO t_probe (k, v) VALUES (?, ?)", ("b", value))
    assert store.query("SELECT k, v FROM t_probe") == []


def test_sqlite_store_is_wal_and_durable(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "x" / "a.db"))
    store = open_store()
    assert store.query("PRAGMA journal_mode") == [("wal",)]
    assert store.query("PRAGMA synchronous") == [(2,)]  # FULL
    store.close()


def test_unreachable_store_is_a_typed_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError):
        open_store(str(blocker / "sub" / "a.db"))


def test_nonces_bound_to_a_transaction_commit_and_roll_back_with_it(store: Store) -> None:
    repo = GrantRepository(store)
    try:
        with pytest.raises(RuntimeError), store.transaction() as tx, repo.within(tx):
            assert repo.consume_nonce("did:key:zA", "n1", 2_000_000_000, ["g1"]) == "fresh"
            raise RuntimeError("the decision failed")
        # Rolled back with the decision: the nonce was never spent.
        with store.transaction() as tx, repo.within(tx):
            assert repo.consume_nonce("did:key:zA", "n1", 2_000_000_000, ["g1"]) == "fresh"
        assert repo.consume_nonce("did:key:zA", "n1", 2_000_000_000, ["g1"]) == "replay"
        repo.revoke("g1", now=1)
        with store.transaction() as tx, repo.within(tx):
            assert repo.revoked(["g0", "g1"]) == {"g1"}
            assert repo.consume_nonce("did:key:zA", "n2", 2_000_000_000, ["g0", "g1"]) == "revoked"
        # Outside the block the repository is unbound again.
        assert repo.consume_nonce("did:key:zA", "n3", 2_000_000_000, ["g0"]) == "fresh"
    finally:
        repo.close()


@pytest.mark.parametrize(("synchronous", "pages"), [("FULL", 200), ("NORMAL", 1000)])
def test_durable_store_starts_its_wal_over_sooner(tmp_path, synchronous: str, pages: int) -> None:
    """A durable store checkpoints every ``DURABLE_WAL_PAGES`` pages, so its WAL starts over (and
    commits overwrite blocks in place) after 200 pages, not SQLite's 1000; a relaxed store keeps
    SQLite's default. The WAL file's size is the evidence: it stops growing at the threshold."""
    from agentgate.store import SQLiteStore

    store = SQLiteStore(tmp_path / "wal.db", synchronous=synchronous)
    store.ensure_schema("pad", {"sqlite": "CREATE TABLE IF NOT EXISTS pad (x BLOB)", "postgresql": ""})
    with store.transaction() as tx:
        assert tx.execute("PRAGMA wal_autocheckpoint") == [(pages,)]
    for i in range(600):
        with store.transaction() as tx:
            tx.execute("INSERT INTO pad (x) VALUES (?)", (bytes([i % 256]) * 100,))
    frames = (tmp_path / "wal.db-wal").stat().st_size // (4096 + 24)
    if synchronous == "FULL":
        assert pages <= frames <= pages + 10
    else:
        assert frames >= 600
    store.close()


# A relative path whose first directory is named postgres:x, sqlite:x or file:x is refused as a URL
# without //, as documented; ./postgres:x/a.db opens it.
_PATHS = [
    "file.db",
    "file.db:x",
    "postgresql_backup.db",
    "sqlite3:z.db",
    "my-sqlite:y.db",
    "C:/c.db",
    "C:\\d.db",
    "sub/e.db",
    "./postgres:x/b.db",
    "sqlite:///rel.db",
    "SQLITE:///up.db",
]


@pytest.mark.parametrize("name", _PATHS)
def test_every_documented_sqlite_form_opens_the_file_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "postgres:x").mkdir()
    (tmp_path / "C:").mkdir()
    with open_store(name) as store:
        assert isinstance(store, SQLiteStore)
        ApprovalStore(store)
    expected = name.split("///", 1)[1] if "///" in name else name
    assert (tmp_path / expected).is_file()
    with open_existing_store(name) as store:  # and a reading command finds it
        assert store.query("SELECT count(*) FROM approvals")[0][0] == 0


def test_absolute_sqlite_forms_through_a_directory_named_like_a_scheme(tmp_path: Path) -> None:
    odd = tmp_path / "postgres:x"
    odd.mkdir()
    for name in (str(odd / "a.db"), f"sqlite:///{odd / 'b.db'}", f"sqlite:///{tmp_path}/c.db"):
        with open_store(name) as store:
            assert isinstance(store, SQLiteStore)
        with open_existing_store(name):
            pass
    assert sorted(p.name for p in odd.iterdir()) == ["a.db", "b.db"] and (tmp_path / "c.db").is_file()


@pytest.mark.parametrize(
    "name",
    ["sqlite:///agentgate.db?mode=ro", "sqlite:///agentgate.db?timeout=30", "sqlite:///agentgate.db#main"],
)
def test_a_sqlite_url_with_a_query_or_fragment_is_refused_not_a_new_store_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """``sqlite:///agentgate.db?mode=ro`` (SQLAlchemy's form) opened a new, empty store in a file
    named ``agentgate.db?mode=ro``: ``grant revoke ID --store`` such a URL printed ``revoked ID``,
    exit 0, and the store meant never learnt of it (review r53)."""
    monkeypatch.chdir(tmp_path)
    with open_store("agentgate.db"):  # the store meant
        pass
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(StoreError, match="takes no query or fragment"):
        open_store(name)
    assert main(["grant", "revoke", "a" * 64, "--store", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "takes no query or fragment" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    "name",
    ["~/ag/agentgate.db", "sqlite:///~/agentgate.db", "$HOME/agentgate.db", "${STATE_DIRECTORY}/agentgate.db",
     "sqlite:///sub/$ENV/agentgate.db"],
)  # fmt: skip
def test_a_path_with_an_unexpanded_tilde_or_variable_is_refused_not_a_new_store_beside_the_one_meant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """``AGENTGATE_STORE=~/ag/agentgate.db`` in a systemd unit or an env file (neither expands
    ``~`` or ``$HOME``) opened a new store under a directory named ``~`` in the working directory:
    ``grant revoke ID`` printed ``revoked ID``, exit 0, into it (review r53)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", name)
    with pytest.raises(StoreError, match="does not expand"):
        open_store()
    assert main(["grant", "revoke", "a" * 64]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not expand" in err
    assert list(tmp_path.iterdir()) == []


def test_a_directory_named_tilde_is_named_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store("./~/a$b.db") as store:
        assert isinstance(store, SQLiteStore)
    assert (tmp_path / "~" / "a$b.db").is_file()


@pytest.mark.postgres
def test_a_postgresql_url_with_a_query_string_opens(postgres_url: str) -> None:
    separator = "&" if "?" in postgres_url else "?"
    url = f"{postgres_url}{separator}application_name=agentgate-review&connect_timeout=5"
    with open_store(url) as store:
        assert store.dialect == "postgresql"
        assert store.query("SELECT current_setting('application_name')")[0][0] == "agentgate-review"


@pytest.mark.parametrize("kind", ["path", "bytes"])
def test_open_store_of_a_path_object_is_opened_or_refused_with_a_typed_error(
    tmp_path: Path, kind: str
) -> None:
    """Review R69: this test took either outcome for either kind (``contextlib.suppress``), so
    it held whatever ``open_store`` did but raise an untyped error; it now pins each: a path
    object opens its SQLite file, bytes are refused naming what a store may be."""
    target: Any = tmp_path / "ag.db" if kind == "path" else str(tmp_path / "ag.db").encode()
    if kind == "path":
        with open_store(target) as store:
            assert isinstance(store, SQLiteStore)
        assert (tmp_path / "ag.db").is_file()
    else:
        with pytest.raises(StoreError) as caught:
            open_store(target)
        assert str(caught.value) == "a store is a URL or a path, given as text or a path object, got bytes"
        assert not (tmp_path / "ag.db").exists()
