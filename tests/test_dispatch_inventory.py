"""The inventory (agentgate/dispatch/inventory.py): validated like a policy, every reference
resolved (GPUs, nodes, racks), with the topology lookups the router and broker use. Backend URLs
carry no credentials, query string, fragment or port 0, and backend keys (variable or file) are
checked at load without ever being quoted in an error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_dispatch_dispatcher import MODEL

from agentgate.dispatch.inventory import (
    MAX_INVENTORY_NODES,
    engine_key,
    inventory_from_mapping,
    load_inventory,
    origin,
    parse_inventory,
)
from agentgate.errors import BackendCredentialError, InventoryError

REPO = Path(__file__).resolve().parents[1]

SMALL = """\
racks: [{name: r1}, {name: r2}]
nodes:
  - {name: n1, rack: r1}
  - {name: n2, rack: r2}
gpus:
  - {id: g0, type: H100, memory_gb: 80, node: n1, nvlink_domain: d1}
  - {id: g1, type: H100, memory_gb: 80, node: n1, nvlink_domain: d1}
  - {id: g2, type: H200, memory_gb: 141, node: n1}
  - {id: g3, type: H200, memory_gb: 141, node: n2, nvlink_domain: d2}
backends:
  - name: b1
    url: http://127.0.0.1:8000
    engine: vllm
    models: [m]
    gpus: [g0, g1]
"""


def test_example_inventory_loads_and_answers_topology_questions() -> None:
    inv = load_inventory(REPO / "policies" / "inventory.yaml")
    assert len(inv.gpus) == 8
    assert inv.domain_of("node-a/0") == "nvl-a"
    assert inv.node_of("node-b/1") == "node-b"
    assert inv.rack_of("node-b/1") == "rack-1"
    assert [b.name for b in inv.backends_serving("qwen3-32b")] == ["qwen-a23"]
    assert inv.backend("llama-a0").chat_url == "http://127.0.0.1:8100/v1/chat/completions"


def test_shared_level_is_the_innermost_common_group() -> None:
    inv = parse_inventory(SMALL)
    assert inv.shared_level(["g0", "g1"]) == "nvlink_domain"
    assert inv.shared_level(["g0", "g2"]) == "node"
    assert inv.shared_level(["g0", "g3"]) is None
    assert inv.domain_of("g2") == "gpu:g2"
    assert {g.id for g in inv.gpus_in("node", "n1")} == {"g0", "g1", "g2"}
    assert set(inv.groups("rack")) == {"r1", "r2"}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (SMALL.replace("gpus: [g0, g1]", "gpus: [g0, g9]"), 15, "unknown gpu 'g9'"),
        (SMALL.replace("node: n2,", "node: n7,"), 9, "unknown node 'n7'"),
        (SMALL.replace("engine: vllm", "engine: vlm"), 13, "engine"),
        (SMALL.replace("models: [m]", "models: [m]\n    max_concurency: 4"), 15, "unknown field"),
        (SMALL.replace("memory_gb: 141, node: n2", "memory_gb: -1, node: n2"), 9, "memory_gb"),
        (SMALL.replace("{name: r2}", "{name: r1}"), 1, "duplicate rack"),
        ("a: !!python/object/apply:os.system [ls]\n", 1, "is not allowed"),
        ("gpus: [\n", 1, "is never closed"),  # at the bracket left open (review R81)
        ("nodes: {a: 1}\nnodes: {b: 2}\n", 2, "duplicate key"),
    ],
)
def test_bad_inventory_is_rejected_with_file_and_line(text: str, line: int, words: str) -> None:
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, source="inv.yaml")
    assert str(info.value).startswith(f"inv.yaml:{line}:")
    assert words in str(info.value)


@pytest.mark.parametrize(
    ("edit", "line", "said"),
    [
        (("id: g3,", "id: g 3,"), 9, "'g 3' must be 1 to 128 letters, digits and . _ : / -"),
        (
            ("name: b1", "name: -b1"),
            11,
            "'-b1' must be 1 to 128 letters, digits and . _ : / -, starting with",
        ),
        (
            ("http://127.0.0.1:8000", "ftp://127.0.0.1"),
            12,
            "'ftp://127.0.0.1' must be an http:// or https:// URL",
        ),
        (
            ("engine: vllm", "engine: vllm\n    health_path: health"),
            14,
            "'health' must be a path starting with /",
        ),
        (
            ("engine: vllm", "engine: vllm\n    api_key_env: 1KEY"),
            14,
            "api_key_env: the value given (not shown: it may be the key itself) must be an "
            "environment variable's name",
        ),
    ],
)
def test_a_value_a_field_pattern_refuses_is_said_in_words_not_as_the_regex(
    edit: tuple[str, str], line: int, said: str
) -> None:
    """Review R53: a name, URL, health path or key variable that its field's pattern refuses was
    reported as pydantic's "String should match pattern '^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$'":
    the line was right, but a person had to read the regex. The error says what the field takes."""
    with pytest.raises(InventoryError) as info:
        parse_inventory(SMALL.replace(*edit), source="inv.yaml")
    message = str(info.value)
    assert message.startswith(f"inv.yaml:{line}:") and said in message, message
    assert "pattern" not in message and "^" not in message


def test_nvlink_domain_cannot_span_racks() -> None:
    text = SMALL.replace("node: n2, nvlink_domain: d2", "node: n2, nvlink_domain: d1")
    with pytest.raises(InventoryError, match="spans racks"):
        parse_inventory(text)


def test_hierarchy_must_run_innermost_first() -> None:
    with pytest.raises(InventoryError, match="innermost"):
        parse_inventory("interconnect: {hierarchy: [rack, node]}\n")


def test_unknown_lookup_is_a_typed_error() -> None:
    inv = parse_inventory(SMALL)
    with pytest.raises(InventoryError, match="unknown gpu"):
        inv.domain_of("nope")


def test_missing_file_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="cannot read"):
        load_inventory(tmp_path / "absent.yaml")


def test_a_declared_kv_capacity_beyond_any_real_cache_is_a_load_error() -> None:
    """The router multiplies the capacity by floats: an absurd one would overflow every call."""
    text = "backends:\n  - {name: b1, url: 'http://127.0.0.1:8000', engine: vllm, models: [m], kv_capacity_tokens: 10000000000000}\n"
    with pytest.raises(InventoryError, match=r"inv\.yaml:2"):
        parse_inventory(text, source="inv.yaml")
    ok = text.replace("10000000000000", "400000")
    assert parse_inventory(ok).backends[0].kv_capacity_tokens == 400000


def test_a_backend_url_with_credentials_is_refused_without_echoing_them() -> None:
    """``http://user:PASSWORD@host`` was accepted, and httpx logs the URL it calls at INFO: the
    password was written on every health probe and every call (review R9)."""
    with pytest.raises(InventoryError, match="carries credentials") as refused:
        inventory_from_mapping(
            {"backends": [{"name": "b", "url": "http://proxy:CANARY@127.0.0.1:9", "models": ["m"]}]}
        )
    assert "CANARY" not in str(refused.value)


@pytest.mark.parametrize("field", ["url", "metrics_url"])
def test_a_backend_url_with_a_query_string_is_refused_without_echoing_it(field: str) -> None:
    """A token in a query string (``/metrics?token=...``) was accepted and logged by httpx with
    every scrape (review R48, leaks); a query string in ``url`` made a chat URL with the path
    behind it."""
    backend = {"name": "b", "url": "http://127.0.0.1:9", "models": ["m"]}
    backend[field] = "http://127.0.0.1:9/metrics?token=CANARY"
    with pytest.raises(InventoryError, match="query string") as refused:
        inventory_from_mapping({"backends": [backend]})
    assert "CANARY" not in str(refused.value)


# --- backend URLs: a bare ``?`` or ``#`` at the end is refused; IPv6 literals (a zone id too) and
# percent-escaped ``?`` and ``#`` are accepted, the chat URL built behind them --------------------


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/?", "http://127.0.0.1:8000/v1#"])
def test_a_url_ending_in_a_bare_question_mark_or_hash_is_refused(url: str) -> None:
    with pytest.raises(InventoryError):
        inventory = inventory_from_mapping({"backends": [{"name": "a", "url": url, "models": [MODEL]}]})
        pytest.fail(f"accepted; chat URL {inventory.backends[0].chat_url}")


@pytest.mark.parametrize(
    "url",
    ["http://[::1]:8000", "http://[fe80::1%25eth0]:8000", "http://127.0.0.1:8000/a%3Fb%23c"],
    ids=["ipv6", "ipv6-zone", "escaped"],
)
def test_ipv6_literals_and_escaped_question_marks_and_hashes_are_accepted(url: str) -> None:
    inventory = inventory_from_mapping(
        {"backends": [{"name": "a", "url": url, "metrics_url": url + "/metrics", "models": [MODEL]}]}
    )
    assert inventory.backends[0].chat_url.startswith(url + "/")


# --- backend credentials ----------------------------------------------------------------------


@pytest.mark.parametrize("key", ["sk-clé-non-ascii-1234", "sk-\u00a0nbsp-1234567"], ids=["non-ascii", "nbsp"])
def test_a_key_an_authorization_header_cannot_carry_is_refused_at_load(
    monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """Kills: the key check loosened to ``isprintable`` (a non-ASCII key accepted at load, to fail
    inside every call's header encoding). Rule: the key is printable ASCII or the inventory is
    refused, naming the variable, never the key."""
    monkeypatch.setenv("R47_BACKEND_KEY", key)
    backend = {"name": "b0", "url": "http://127.0.0.1:9", "models": ["m"], "api_key_env": "R47_BACKEND_KEY"}
    with pytest.raises(BackendCredentialError) as raised:
        inventory_from_mapping({"backends": [backend]})
    assert "R47_BACKEND_KEY" in str(raised.value) and key not in str(raised.value)


def test_a_url_with_a_user_name_is_refused() -> None:
    """Kills: ``_usable_url`` refusing only a password (``http://token@host`` passed: the user
    part is where a bare token goes, and HTTP clients log the URL). Rule: no credentials in a
    backend URL, user name included."""
    backend = {"name": "b0", "url": "http://sk-secret-token@127.0.0.1:9", "models": ["m"]}
    with pytest.raises(InventoryError) as raised:
        inventory_from_mapping({"backends": [backend]})
    assert "credentials" in str(raised.value)


# --- GPUs and the interconnect hierarchy ------------------------------------------------------


_NODES = {"nodes": [{"name": "n1"}, {"name": "n2"}]}


def test_two_gpus_with_one_id_are_refused() -> None:
    """I7 (GPU ids not checked unique): two GPUs listed under one id (on two nodes) are an
    InventoryError naming the id, not one GPU the broker could lease twice under that name."""
    data = {
        **_NODES,
        "gpus": [
            {"id": "g0", "type": "H100", "memory_gb": 80, "node": "n1"},
            {"id": "g0", "type": "H100", "memory_gb": 80, "node": "n2"},
        ],
    }
    with pytest.raises(InventoryError, match="duplicate gpu 'g0'"):
        inventory_from_mapping(data)


@pytest.mark.parametrize("levels", [["node", "node"], ["nvlink_domain", "node", "node", "rack"]])
def test_a_hierarchy_level_listed_twice_is_refused(levels: list[str]) -> None:
    """I15 (levels not checked distinct): a hierarchy that lists a level twice is an
    InventoryError, not accepted as an order (it is in order, but names one group twice)."""
    with pytest.raises(InventoryError, match="distinct"):
        inventory_from_mapping({"interconnect": {"hierarchy": levels}})


# --- references, URLs, key files and the groups a lone GPU or rackless node forms ------------


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


def _cluster(gpus: int) -> str:
    """An inventory of ``gpus`` GPUs, 8 to a node and an NVLink domain, one rack."""
    lines = ["racks: [{name: r0}]", "nodes:"]
    lines += [f"  - {{name: n{k}, rack: r0}}" for k in range(gpus // 8)]
    lines.append("gpus:")
    lines += [
        f"  - {{id: g{k}, type: H100, memory_gb: 80, node: n{k // 8}, nvlink_domain: d{k // 8}}}"
        for k in range(gpus)
    ]
    return "\n".join(lines) + "\n"


def test_an_inventory_of_thousands_of_gpus_loads() -> None:
    # 6,000 GPUs are 66,000 YAML nodes: until review R51 an inventory had a policy's limit of
    # 50,000, and a cluster of 575 nodes of 8 GPUs was refused as "a few hundred" too many.
    inventory = parse_inventory(_cluster(6000), source="cluster.yaml")
    assert len(inventory.gpus) == 6000 and inventory.domain_of("g5999") == "d749"


def test_an_inventory_past_its_node_limit_is_refused_at_its_line() -> None:
    text = _cluster(8 * (MAX_INVENTORY_NODES // 88 + 1))  # 11 nodes a GPU, 1 a node: past the limit
    with pytest.raises(InventoryError, match=f"more than {MAX_INVENTORY_NODES} YAML nodes") as info:
        parse_inventory(text, source="cluster.yaml")
    assert info.value.file == "cluster.yaml" and info.value.line is not None


@pytest.mark.parametrize("gpu_type", ["H100 SXM", "H100/80GB", "A800:pcie", "h100.", "Ｈ100"])
def test_a_gpu_type_that_makes_no_resource_name_is_refused_when_loaded(gpu_type: str) -> None:
    """Kills: an inventory GPU type taken as any text: ``H100 SXM`` loaded, and ``GatedBroker``
    then refused every request for it (``gpu:h100 sxm`` is no resource name, so no grant could
    cover it), however the policy and grants were written.

    Rule: each GPU's type, in lower case, is a resource name (``gpu:TYPE``); an inventory with
    one that is not is refused when it is loaded, naming the GPU, its node and the type, at the
    type's line (gpus.1.type)."""
    text = f"""nodes:
  - name: n1
gpus:
  - id: n1/0
    type: H100
    memory_gb: 80
    node: n1
  - id: n1/1
    type: "{gpu_type}"
    memory_gb: 80
    node: n1
"""
    with pytest.raises(InventoryError) as raised:
        parse_inventory(text, source="inv.yaml")
    message = str(raised.value)
    assert (
        message.startswith("inv.yaml:9:11: gpus.1.type: ") and "'n1/1'" in message and "node 'n1'" in message
    )
    assert repr(gpu_type) in message


def test_gpu_types_that_make_resource_names_load_in_any_case() -> None:
    """Rule: a type whose lower case is a resource name loads as written (``H100-SXM5.80GB``)."""
    text = "nodes:\n  - name: n1\ngpus:\n  - {id: n1/0, type: H100-SXM5.80GB, memory_gb: 80, node: n1}\n"
    assert parse_inventory(text).gpus[0].type == "H100-SXM5.80GB"


@pytest.mark.parametrize("model", ["llama 3.1 8b", "", "gpt-4o\n", "a" * 201, "llama..8b"])
def test_a_model_name_that_makes_no_resource_name_is_refused_when_loaded(model: str) -> None:
    """Kills: a backend's ``models`` taken as any text: ``llama 3.1 8b`` (or an empty name)
    loaded, the gateway listed it in ``/v1/models``, and every call to it was refused (a call is
    authorized as ``model:NAME``, which that is not), however the policy and grants were written.

    Rule: each model a backend serves is a resource name as ``model:NAME``, written as such; an
    inventory with one that is not is refused when it is loaded, naming the backend and the model
    (its first 200 characters), at the model's line (backends.1.models.1)."""
    text = f"""backends:
  - name: good
    url: http://127.0.0.1:8000
    models: [llama-3.1-8b, meta-llama/Llama-3.1-8B-Instruct, "gpt-4o:2024-08-06"]
  - name: odd
    url: http://127.0.0.1:8001
    models: [m, {json.dumps(model)}]
"""
    with pytest.raises(InventoryError) as raised:
        parse_inventory(text, source="inv.yaml")
    message = str(raised.value)
    assert message.startswith("inv.yaml:7:") and "backends.1.models.1: backend 'odd'" in message
    assert repr(model[:200]) in message
    assert len(message) < 600
    assert (
        parse_inventory(text.split("  - name: odd")[0]).backends[0].models[1]
        == "meta-llama/Llama-3.1-8B-Instruct"
    )


@pytest.mark.parametrize(
    "url", ["https://api.openai.com/v1", "http://127.0.0.1:8000/v1/", "http://h:1/proxy/V1"]
)
def test_a_backend_url_given_as_an_sdks_base_url_ending_in_v1_is_refused(url: str) -> None:
    """Kills: a backend ``url`` taken as the OpenAI SDKs' ``base_url`` (which ends in ``/v1``):
    every call went to ``.../v1/v1/chat/completions`` and got 404, every ``/v1/models`` probe
    too, and the backend, marked down at its first call, never came back: every call to its
    models failed ``no_backend``, with a 404 in the gateway's log as the only clue.

    Rule: a backend's ``url`` is the server's root; one whose path ends in ``/v1`` is refused
    when the inventory is loaded, at its line, saying to leave the ``/v1`` out; a path that only
    contains it elsewhere loads, as does a ``metrics_url`` (whatever its path)."""
    text = f"backends:\n  - name: b\n    models: [m]\n    url: {url}\n"
    with pytest.raises(InventoryError, match="ends in /v1: give the server's base URL without it") as raised:
        parse_inventory(text, source="inv.yaml")
    assert "inv.yaml:4" in str(raised.value)
    fine = "backends:\n  - {name: b, models: [m], url: 'http://h:1/v1x', metrics_url: 'http://h:1/v1'}\n"
    assert parse_inventory(fine).backends[0].chat_url == "http://h:1/v1x/v1/chat/completions"


def test_an_unknown_field_that_is_not_printable_is_quoted_in_the_error() -> None:
    """Mutant (review r53): the path of a schema error quoted its keys raw, so a key written
    ``"r\\nx"`` split the one-line ``InventoryError`` in two (and an escape sequence in a key
    reached the terminal of whoever printed it).

    Rule: the error is one line of printable text that says what the key holds."""
    with pytest.raises(InventoryError) as info:
        parse_inventory('nodes:\n  - {name: n, "r\\nx\\e[2J": 1}\n', source="inv.yaml")
    assert str(info.value) == "inv.yaml:2:15: nodes.0.'r\\nx\\x1b[2J': unknown field"


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        ("http://h", "http://h:80", True),
        ("https://h/", "https://H:443", True),
        ("http://H.example:8000/x", "http://h.example:8000/x/", True),
        ("http://[::1]:8000", "http://[0:0::1]:8000", True),
        ("http://[FE80::1]", "http://[fe80::1]:80", True),
        ("http://h:8000/A", "http://h:8000/a", False),
        ("http://h", "https://h", False),
        ("http://h:8000", "http://h:8001", False),
        ("http://h:443", "https://h", False),
    ],
)
def test_backends_are_one_engine_when_their_urls_name_one_endpoint(one: str, other: str, same: bool) -> None:
    """Review R54: engines were matched by the chat URL lower-cased, so ``http://h`` and ``http://h:80``
    were two engines and ``/A`` and ``/a`` (paths are case-sensitive) one.

    Rule: ``Backend.engine_key`` lower-cases the scheme and host, spells the default port out,
    writes an IP address in its shortest form (IPv6 in brackets) and keeps the path as it is."""
    inv = inventory_from_mapping(
        {"backends": [{"name": n, "url": u, "models": ["m"]} for n, u in (("a", one), ("b", other))]}
    )
    a, b = inv.backend("a"), inv.backend("b")
    assert (a.engine_key == b.engine_key) is same
    assert a.engine_key.startswith(("http://", "https://")) and a.engine_key.endswith("/v1/chat/completions")
    if "[" in one:
        assert "[" in a.engine_key and "]:" in a.engine_key


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        ("http://127.0.0.1:8000", "http://[::ffff:127.0.0.1]:8000", True),
        ("http://10.0.0.1", "http://[::FFFF:a00:1]:80", True),
        ("http://localhost:8000", "http://localhost.:8000", True),
        ("http://gpu1.example", "http://GPU1.example.:80", True),
        ("http://h/~vllm", "http://h/%7evllm", True),
        ("http://h/Ab-1", "http://h/%41%62%2D%31", True),
        ("http://h/a%2fb", "http://h/a%2Fb", True),
        ("http://h/x", "http://h/x/./", True),
        ("http://h/x", "http://h/x/y/..", True),
        ("http://h/x", "http://h/w/../x", True),
        ("http://h/x", "http://h/w/%2E%2E/x", True),
        ("http://h/a%2fb", "http://h/a/b", False),
        ("http://h/x", "http://h/x/y", False),
        ("http://h/a", "http://h/%61b", False),
        ("http://[::ffff:127.0.0.1]", "http://[::1]", False),
        ("http://localhost..", "http://localhost", False),
        ("http://127.0.0.1:8000", "http://127.1:8000", True),
        ("http://127.0.0.1:8000", "http://0x7f.0.0.1:8000", True),
        ("http://127.0.0.1", "http://0177.0.0.1", True),
        ("http://127.0.0.1", "http://2130706433", True),
        ("http://0x7f.0.0.1", "http://0x7f.0.0.1.example", False),
        ("http://127.0.0.1", "http://0x.0.0.1", False),
        ("http://xn--bcher-kva.example", "http://Bücher.example", True),
        ("http://xn--strae-oqa.de", "http://straße.de", True),
        ("http://strasse.de", "http://straße.de", False),
    ],
)
def test_spellings_of_one_endpoint_are_one_engine(one: str, other: str, same: bool) -> None:
    """Review R55: ``engine_key`` kept percent-encoded unreserved characters, ``.`` and ``..``
    segments, IPv4-mapped IPv6 addresses and a host name's trailing dot as written, so two
    spellings of one engine were two engines (each with its own cap and load).

    Rule: the key decodes percent-encoded unreserved characters (and upper-cases other escapes,
    never decoding ``%2F``), resolves dot segments (RFC 3986, 6.2.2), writes an IPv4-mapped IPv6
    address as the IPv4 one and drops a host name's one trailing dot.

    Review R55: ``127.1``, ``0x7f.0.0.1`` (IPv4 as resolvers read it) and ``Bücher.example`` (its
    IDNA form as the client sends it) were other engines than ``127.0.0.1`` and ``xn--bcher-kva``."""
    inv = inventory_from_mapping(
        {"backends": [{"name": n, "url": u, "models": ["m"]} for n, u in (("a", one), ("b", other))]}
    )
    assert (inv.backend("a").engine_key == inv.backend("b").engine_key) is same


_LOOPBACK_SPELLINGS = (
    "127.0.0.1",
    "127.0.1",
    "127.1",
    "0x7f.0.0.1",
    "0x7f.1",
    "0177.0.0.1",
    "0177.1",
    "2130706433",
    "0x7f000001",
    "017700000001",
)


@pytest.mark.parametrize("host", [*_LOOPBACK_SPELLINGS, *(h + "." for h in _LOOPBACK_SPELLINGS)])
def test_every_spelling_of_an_ipv4_address_has_its_dotted_key(host: str) -> None:
    """Review R56: a short IPv4 with a trailing dot (``127.1.``) kept its spelling as the key while
    ``127.1`` and ``127.0.0.1.`` were keyed ``127.0.0.1``, so one engine counted as two.

    Rule: each form ``inet_aton`` reads (one to four parts, decimal, hex or octal), with or without
    the one trailing dot of an absolute name, is keyed as the dotted address."""
    assert engine_key(f"http://{host}:8000/v1") == "http://127.0.0.1:8000/v1"
    assert origin(f"HTTP://{host.upper()}") == ("http", "127.0.0.1", 80)


@pytest.mark.parametrize("host", ["127.1..", "127.1.example", ".127.1", "127..1"])
def test_a_name_that_only_looks_like_an_address_keeps_its_spelling(host: str) -> None:
    """Review R56: only one trailing dot is an absolute name's; the rest are names, not addresses."""
    assert engine_key(f"http://{host}:8000") != "http://127.0.0.1:8000"


def test_a_mapped_address_and_a_dot_segment_are_keyed_as_the_plain_url() -> None:
    """Review R55: the router counts one cap per ``engine_key``; a backend that names an engine
    through an IPv4-mapped address and a ``..`` segment gets that engine's plain key, and so its cap."""
    inv = inventory_from_mapping(
        {
            "backends": [
                {"name": "a", "url": "http://127.0.0.1:8000", "models": ["m"]},
                {"name": "b", "url": "http://[::ffff:127.0.0.1]:8000/x/..", "models": ["m"]},
            ]
        }
    )
    assert (
        inv.backend("a").engine_key
        == inv.backend("b").engine_key
        == "http://127.0.0.1:8000/v1/chat/completions"
    )


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("nodes:\n  - {name: n, bogus: 1}\n", "inv.yaml:2:15: nodes.0.bogus: unknown field"),
        ("nodes:\n  - name: n\n    bogus:\n      1\n", "inv.yaml:3:5: nodes.0.bogus: unknown field"),
        (
            "gpus:\n  - {id: a0, type: H100, memory_gb: 80, node: nowhere}\n",
            "inv.yaml:2:47: gpus.0.node: gpu 'a0'",
        ),
        (
            "backends:\n  - name: b\n    models: [m]\n    url: http://h:1/v1\n",
            "inv.yaml:4:10: backends.0.url",
        ),
        ("nodes:\n  - {name: n, rack: 7}\n", "inv.yaml:2:21: nodes.0.rack"),
        ("\n\n  - 1\n", "inv.yaml:3:3: the inventory must be a mapping"),
    ],
)
def test_an_inventory_error_says_the_line_and_the_column_as_the_policy_loader_does(
    text: str, where: str
) -> None:
    """Review R54: inventory schema errors said ``file:line`` where the policy loader says
    ``file:line:column``, so a value in a flow mapping (``{id: a0, ..., node: nowhere}``) was found
    by reading the whole line.

    Rule: an inventory error is located at ``file:line:column`` where the value starts, at the key
    for an unknown field (as the policy loader locates an unknown field)."""
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, source="inv.yaml")
    assert str(info.value).startswith(where)


def test_an_inventory_file_that_is_not_utf8_says_where_the_first_bad_byte_is(tmp_path: Path) -> None:
    """Review R54: as the policy loader does, the first byte that is not UTF-8 is located."""
    path = tmp_path / "inv.yaml"
    path.write_bytes(b"nodes:\n  - {name: n\xff}\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert str(info.value) == f"{path}:2:13: cannot read: not UTF-8 text (byte 19)"
