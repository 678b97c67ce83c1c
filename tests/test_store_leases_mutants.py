"""The GPU broker's journal (agentgate/store/broker_leases.py) and the inventory
(agentgate/dispatch/inventory.py): each test kills a hand-made mutant that survived the files
covering its module (its docstring names the mutant, then the rule it pins). The PostgreSQL test
interleaves a second connection's committed work between two statements of a real transaction
(``_Hooked``, from test_tasks_leases)."""

from __future__ import annotations

from typing import Any

import pytest
from test_tasks_leases import _Hooked, _pg

from agentgate.errors import InventoryError, StoreError
from agentgate.store import SQLiteStore, Store

# --- store/broker_leases.py: the GPU broker's journal --------------------------------------------


def _journaled_broker(store: Store) -> tuple[Any, Any, Any]:
    """A busy broker journaled in ``store`` (test_broker_store's), its journal and its clock."""
    from test_broker_store import FakeClock, busy_broker

    from agentgate.store.broker_leases import BrokerLeaseStore

    clock = FakeClock()
    journal = BrokerLeaseStore(store)
    return busy_broker(journal, clock), journal, clock


def test_a_restore_of_an_equal_copy_is_refused_once_the_old_broker_wrote_again(
    sqlite_store: SQLiteStore,
) -> None:
    """Kills B10 (``_may_take_over`` telling the snapshot loaded by identity only) and B11 (``save``
    not raising the generation): a restore given
    an equal copy of what the journal loaded skipped the generation check, and took the name over
    although the old broker had written since (here the very same state again: it still runs, and
    would go on granting). Rule: a journal takes over only while the stored generation is still
    the one it loaded, whichever object holds the snapshot restored."""
    import copy

    from agentgate.store.broker_leases import BrokerLeaseStore

    _, old, _ = _journaled_broker(sqlite_store)
    new = BrokerLeaseStore(sqlite_store)
    saved = new.load()
    assert saved is not None
    old.save(saved)  # the old broker is still alive: it writes (the same state) after the load
    new.take_over(copy.deepcopy(saved))
    with pytest.raises(StoreError, match="written over"):
        new.save(saved)
    assert BrokerLeaseStore(sqlite_store).load() == saved


def test_a_state_written_over_by_a_broker_of_before_generations_is_not_taken_over(
    sqlite_store: SQLiteStore,
) -> None:
    """Kills B6 (``_may_take_over`` trusting generation 0 without comparing the state): during a
    rolling upgrade the old broker, of a version from before ``generation``, writes 0 every time;
    it granted again after the new one loaded, and the mutant let the new one take the name over
    with the stale state: the GPUs of that grant handed out twice. Rule: at generation 0 the
    stored state itself must still be the one loaded."""
    from agentgate.store.broker_leases import BrokerLeaseStore

    def as_before_r40() -> None:
        with sqlite_store.transaction() as tx:
            tx.execute("UPDATE broker_state SET generation = 0")

    broker, _, clock = _journaled_broker(sqlite_store)
    as_before_r40()
    new = BrokerLeaseStore(sqlite_store)
    saved = new.load()
    assert saved is not None
    clock.now += 1
    broker.release("low")  # the old version goes on: "high" is granted low's GPUs
    as_before_r40()
    new.take_over(saved)
    with pytest.raises(StoreError, match="written over"):
        new.save(saved)


def test_a_snapshot_restored_into_a_store_that_holds_none_is_taken_over(tmp_path: Any) -> None:
    """Kills B7 (``_may_take_over`` refusing when nothing is stored): a broker restored from a
    snapshot of another store (a move to a new database) could never journal, every grant
    failing with ``StoreError``. Rule: where no broker wrote the name, a restore takes it over."""
    from agentgate.store.broker_leases import BrokerLeaseStore

    first, second = SQLiteStore(tmp_path / "one.db"), SQLiteStore(tmp_path / "two.db")
    try:
        _journaled_broker(first)
        saved = BrokerLeaseStore(first).load()
        assert saved is not None
        moved = BrokerLeaseStore(second)
        moved.take_over(saved)
        moved.save(saved)
        assert BrokerLeaseStore(second).load() == saved
    finally:
        first.close()
        second.close()


def test_a_journal_that_never_loaded_the_stored_state_does_not_take_it_over(
    sqlite_store: SQLiteStore,
) -> None:
    """Kills B8 (``_may_take_over`` granting a take-over without a snapshot when a state is
    stored): a broker started without restoring wrote its empty state over the name, so the
    leases the stored state held were forgotten and their GPUs granted again. Rule: a take-over
    names the state it restored, and a stored state that is not it is never written over."""
    from agentgate.store.broker_leases import BrokerLeaseStore

    _, _, _ = _journaled_broker(sqlite_store)
    stored = BrokerLeaseStore(sqlite_store).load()
    fresh = BrokerLeaseStore(sqlite_store)
    fresh.take_over()
    assert stored is not None
    with pytest.raises(StoreError):
        fresh.save(type(stored)(stored.taken_at + 1, (), ()))
    assert BrokerLeaseStore(sqlite_store).load() == stored


def test_a_snapshot_loaded_elsewhere_is_not_restored_over_a_newer_state(sqlite_store: SQLiteStore) -> None:
    """Kills B9 (``_may_take_over`` not comparing the stored state with a snapshot loaded by
    another journal): a broker restored from a snapshot read earlier elsewhere (the CLI, another
    replica) took the name over although the old broker had granted since: the GPUs of that
    grant handed out twice. Rule: such a take-over needs the stored state to be that snapshot."""
    from agentgate.store.broker_leases import BrokerLeaseStore

    broker, _, clock = _journaled_broker(sqlite_store)
    earlier = BrokerLeaseStore(sqlite_store).load()
    assert earlier is not None
    clock.now += 1
    broker.release("low")  # the old broker grants low's GPUs to "high" after that read
    fresh = BrokerLeaseStore(sqlite_store)
    fresh.take_over(earlier)
    with pytest.raises(StoreError, match="written over"):
        fresh.save(earlier)
    assert BrokerLeaseStore(sqlite_store).load() == broker.snapshot()


@pytest.mark.postgres
def test_a_load_that_a_write_overtakes_reads_one_whole_state(postgres_url: str) -> None:
    """Kills B14 (``load`` not reading the generation again after the rows): on PostgreSQL a save
    committed between the read of the leases and that of the queue gave the mutant the old
    leases with the new queue, a state no broker ever had (a waiter shown with the GPUs it was
    granted meanwhile). Rule: ``load`` returns one whole saved state."""
    from agentgate.store.broker_leases import BrokerLeaseStore

    one, two = _pg(postgres_url), _pg(postgres_url)
    try:
        broker, _, clock = _journaled_broker(two)
        before = broker.snapshot()

        def release() -> None:
            clock.now += 1
            broker.release("low")  # "high" leaves the queue and takes low's GPUs: both tables change

        hooked = _Hooked(one, "SELECT body FROM broker_leases", meanwhile=release)
        loaded = BrokerLeaseStore(hooked).load()  # type: ignore[arg-type]
        after = broker.snapshot()
        assert hooked.fired == 1
        assert before != after
        assert loaded == after
    finally:
        one.close()
        two.close()


def test_a_broker_saving_under_its_name_leaves_another_names_state_whole(store: Store) -> None:
    """Kills B20 and B21 (``save`` deleting the leases, or the queue, of every broker name) and
    B22 (``_generation`` reading the newest generation of any name): brokers sharing one store
    lost each other's leases and waiters at every save (a restart then found GPUs free that
    were leased), or a journal could not load nor take over its own name. Rule: a journal reads
    and writes only its own name's rows."""
    from test_broker_store import FakeClock, busy_broker

    from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology
    from agentgate.store.broker_leases import BrokerLeaseStore

    clock = FakeClock()
    east = busy_broker(BrokerLeaseStore(store, "east"), clock)  # many saves: a high generation
    before = east.snapshot()
    west = Broker(
        synthetic_topology(1, 8), [TenantQuota("a", 8)], clock=clock, journal=BrokerLeaseStore(store, "west")
    )
    west.submit(GangRequest("solo", "a", 1))
    assert BrokerLeaseStore(store, "east").load() == before
    journal = BrokerLeaseStore(store, "west")
    saved = journal.load()
    assert saved is not None and [lease.id for lease in saved.leases] == ["solo"]
    journal.take_over(saved)
    journal.save(saved)  # the restarted west broker takes its name over
    assert BrokerLeaseStore(store, "east").load() == before


# --- dispatch/inventory.py ----------------------------------------------------------------------


_GPUS = """
nodes:
  - {name: n1}
  - {name: n2}
gpus:
  - {id: g0, type: H100, memory_gb: 80, node: n1}
  - {id: g1, type: H100, memory_gb: 80, node: n2}
"""


def test_a_node_in_an_unknown_rack_is_refused() -> None:
    """Kills I1 (the node's rack not checked): a node naming a rack the inventory lacks (a typo)
    was accepted as a rack of its own, so the broker's rack-level placement put GPUs of two
    different physical racks (the typo's and the real one) into different groups silently.
    Rule: every reference resolves; a node's rack must be listed."""
    from agentgate.dispatch.inventory import parse_inventory

    text = "racks: [{name: rack-1}]\n" + _GPUS.replace("{name: n2}", "{name: n2, rack: rack-2}")
    with pytest.raises(InventoryError, match="unknown rack 'rack-2'") as caught:
        parse_inventory(text)
    assert caught.value.line == 5


def test_a_backend_listing_a_gpu_twice_is_refused() -> None:
    """Kills I6 (a backend's GPU list not checked for repeats): ``gpus: [g0, g0]`` was accepted,
    so the backend counted one GPU as two wherever its GPUs are counted. Rule: a backend lists
    each of its GPUs once, at the line of the list."""
    from agentgate.dispatch.inventory import parse_inventory

    text = _GPUS + "backends:\n  - {name: b, url: 'http://h:8000', models: [m], gpus: [g0, g0]}\n"
    with pytest.raises(InventoryError, match="listed twice"):
        parse_inventory(text)


def test_one_nvlink_domain_does_not_span_two_rackless_nodes() -> None:
    """Kills I3 (the rack of a GPU's node taken as ``node.rack``, ``None`` for a node without
    one): two nodes without racks compared as one rack, so one NVLink domain spanning two hosts
    was accepted and the broker placed a gang across them as if NVLink joined them. Rule: a node
    without a rack is its own rack; a domain spans no racks."""
    text = _GPUS.replace("node: n1}", "node: n1, nvlink_domain: d}").replace(
        "node: n2}", "node: n2, nvlink_domain: d}"
    )
    from agentgate.dispatch.inventory import parse_inventory

    with pytest.raises(InventoryError, match="spans racks"):
        parse_inventory(text)


def test_lone_gpus_and_rackless_nodes_are_groups_of_their_own() -> None:
    """Kills I26 (``rack_of`` naming every rackless node's rack ``node:``) and I27 (``domain_of``
    naming every lone GPU's domain ``gpu:``): GPUs on two hosts without racks or NVLink domains
    then shared a rack and a domain, and ``shared_level`` told the broker they were joined by
    NVLink. Rule: a lone GPU is its own domain, a rackless node its own rack."""
    from agentgate.dispatch.inventory import parse_inventory

    inv = parse_inventory(_GPUS)
    assert inv.domain_of("g0") != inv.domain_of("g1")
    assert inv.rack_of("g0") != inv.rack_of("g1")
    assert inv.shared_level(["g0", "g1"]) is None
    assert len(inv.groups("nvlink_domain")) == len(inv.groups("rack")) == 2


@pytest.mark.parametrize(
    ("url", "mutant"),
    [
        ("http://10.0.0.1:8000/#v1", "I11"),  # the chat path would end up in the fragment, never sent
        ("http://10.0.0.1:8000/metrics?token=s3cret", "I11b"),
        ("http://10.0.0.1:0", "I9"),
    ],
)
def test_a_backend_url_that_would_misroute_or_leak_is_refused(url: str, mutant: str) -> None:
    """Kills I11 (only a query string refused: a fragment passed); also I11b (only a fragment
    refused: a query string, where a metrics token sits, passed) and I9 (port 0 passed), which
    test_dispatch_inventory and test_broker_library_use kill too. A fragment made
    ``chat_url`` ``...#v1/v1/chat/completions``, sent to ``/`` (a misrouted call); a query string
    was logged with every scrape. Rule: a URL with a query string, a fragment or port 0 is
    refused, and the error does not quote a token."""
    from agentgate.dispatch.inventory import inventory_from_mapping

    for field in ("url", "metrics_url"):
        backend = {"name": "b", "url": "http://10.0.0.1:8000", "models": ["m"], field: url}
        with pytest.raises(InventoryError) as caught:
            inventory_from_mapping({"backends": [backend]})
        assert "s3cret" not in str(caught.value), mutant


def test_the_chat_url_of_a_url_ending_in_a_slash_has_one_slash() -> None:
    """Kills I24 (``chat_url`` without ``rstrip("/")``): ``http://h:8000/`` gave
    ``http://h:8000//v1/chat/completions``, which a strict server answers 404: every call to that
    backend failed. Rule: the chat path is appended to the URL without its trailing slash."""
    from agentgate.dispatch.inventory import inventory_from_mapping

    inv = inventory_from_mapping({"backends": [{"name": "b", "url": "http://h:8000/", "models": ["m"]}]})
    assert inv.backend("b").chat_url == "http://h:8000/v1/chat/completions"


def test_equal_bandwidths_along_the_hierarchy_are_accepted() -> None:
    """Kills I17 (``outer_gbps >= inner_gbps`` refused): two levels as fast as each other (a flat
    fabric) were refused, which only contradicts nothing. Rule: bandwidth must not grow outward;
    it may stay the same."""
    from agentgate.dispatch.inventory import inventory_from_mapping

    inv = inventory_from_mapping({"interconnect": {"bandwidth_gbps": {"node": 400.0, "rack": 400.0}}})
    assert inv.interconnect.bandwidth_gbps == {"node": 400.0, "rack": 400.0}
    with pytest.raises(InventoryError, match="above"):
        inventory_from_mapping({"interconnect": {"bandwidth_gbps": {"node": 400.0, "rack": 401.0}}})


def test_a_twenty_character_key_pasted_as_the_variable_name_is_not_quoted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kills I20 (``_looks_like_a_key`` from 21 characters): a 20-character key pasted in place of
    ``api_key_env``'s variable name was quoted in the error (and so in logs). Rule: a name of 20
    characters or more mixing lower-case letters and digits is never quoted."""
    from agentgate.dispatch.inventory import inventory_from_mapping
    from agentgate.errors import BackendCredentialError

    key = "abcdefghij0123456789"
    assert len(key) == 20
    monkeypatch.delenv(key, raising=False)
    backend = {"name": "b", "url": "http://h:8000", "models": ["m"], "api_key_env": key}
    with pytest.raises(BackendCredentialError) as caught:
        inventory_from_mapping({"backends": [backend]})
    assert key not in str(caught.value)


def test_a_relative_key_file_is_refused_without_quoting_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills I22 (``api_key_file`` not required to be absolute): a key pasted in place of the path
    was read as a relative path (from whatever directory the process ran in) and, when missing,
    quoted in the error. Rule: a relative ``api_key_file`` is refused and not quoted."""
    from agentgate.dispatch.inventory import inventory_from_mapping
    from agentgate.errors import BackendCredentialError

    monkeypatch.chdir(tmp_path)
    pasted = "sk-live-0123456789abcdef"
    (tmp_path / pasted).write_text("sk-other\n")
    (tmp_path / pasted).chmod(0o600)
    backend = {"name": "b", "url": "http://h:8000", "models": ["m"], "api_key_file": pasted}
    with pytest.raises(BackendCredentialError) as caught:
        inventory_from_mapping({"backends": [backend]})
    assert pasted not in str(caught.value)


def test_a_group_writable_key_file_is_refused(tmp_path: Any) -> None:
    """Kills I23 (only others' permissions checked) and I23b (of the group's, only read checked):
    a key file the group may write (0660) was accepted, so any member of the group could swap the
    key the backends are called with. Rule: at most u=rw (g=r when root owns it)."""
    from agentgate.dispatch.inventory import inventory_from_mapping
    from agentgate.errors import BackendCredentialError

    path = tmp_path / "key"
    path.write_text("sk-123\n")
    path.chmod(0o660)
    backend = {"name": "b", "url": "http://h:8000", "models": ["m"], "api_key_file": str(path)}
    with pytest.raises(BackendCredentialError, match="accessible by others"):
        inventory_from_mapping({"backends": [backend]})
