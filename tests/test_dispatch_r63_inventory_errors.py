"""Review R63: every inventory error names the full path of the value at fault and stands at its
``file:line:column``, and a hostile inventory (too large, an alias bomb, a GPU list of thousands,
numbers out of any range, a URL with credentials or another scheme) ends in an ``InventoryError``
naming what and where (agentgate/dispatch/inventory.py). The GPU-list check's linear work is
counted in tests/test_dispatch_r69_inventory_work.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentgate.dispatch.inventory import (
    MAX_INVENTORY_BYTES,
    inventory_from_mapping,
    load_inventory,
    parse_inventory,
)
from agentgate.errors import InventoryError

BACKEND = "backends:\n  - name: b\n    url: http://127.0.0.1:8000\n    models: [m]\n"


def test_an_unknown_bandwidth_level_is_named_and_stands_at_its_key() -> None:
    """Review R63: a level ``bandwidth_gbps`` does not know was reported as
    ``interconnect.bandwidth_gbps.bogus.[key]`` (pydantic's marker for a mapping key in the path)
    at its value's column; it names ``interconnect.bandwidth_gbps.bogus``, at the key."""
    text = "interconnect:\n  bandwidth_gbps: {node: 5, bogus: 1}\n"
    with pytest.raises(InventoryError) as caught:
        parse_inventory(text, source="inv.yaml")
    assert str(caught.value).startswith(
        "inv.yaml:2:29: interconnect.bandwidth_gbps.bogus: not a valid key: "
    ), str(caught.value)
    assert "'nvlink_domain', 'node' or 'rack'" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('nodes: [{name: n, "[key]": 1}]\n', "inv.yaml:1:19: nodes.0.[key]: unknown field"),
        (
            'interconnect:\n  bandwidth_gbps: {"[key]": 1}\n',
            "inv.yaml:2:20: interconnect.bandwidth_gbps.[key]: not a valid key: ",
        ),
    ],
)
def test_a_key_written_as_pydantics_key_marker_keeps_its_name(text: str, error: str) -> None:
    """Review R63: only pydantic's own ``[key]`` marker is taken off a path: a field or level
    written ``[key]`` in the file is named as written."""
    with pytest.raises(InventoryError) as caught:
        parse_inventory(text, source="inv.yaml")
    assert str(caught.value).startswith(error), str(caught.value)


def _gpus_listed(count: int, listed: bool) -> dict[str, Any]:
    return {
        "nodes": [{"name": "n"}],
        "gpus": [{"id": f"g{i}", "type": "H100", "memory_gb": 80, "node": "n"} for i in range(count)],
        "backends": [
            {
                "name": "b",
                "url": "http://127.0.0.1:8000",
                "models": ["m"],
                "gpus": [f"g{i}" for i in range(count)] if listed else [],
            }
        ],
    }


def test_a_gpu_listed_twice_among_many_is_still_named_at_the_repeat() -> None:
    """Review R63: the linear check still refuses a GPU a backend lists twice, at the repeat."""
    data = _gpus_listed(50, listed=True)
    data["backends"][0]["gpus"].append("g7")
    with pytest.raises(InventoryError) as caught:
        inventory_from_mapping(data, source="inv.yaml", read_keys=False)
    assert str(caught.value) == "inv.yaml: backends.0.gpus.50: backend 'b': gpu 'g7' is listed twice"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            BACKEND.replace("http://", "http://user:secret@"),
            "3:10: backends.0.url: the URL carries credentials",
        ),
        (BACKEND.replace("http://", "http://user@"), "3:10: backends.0.url: the URL carries credentials"),
        (
            BACKEND.replace("http://127.0.0.1:8000", "file:///etc/passwd"),
            "3:10: backends.0.url: 'file:///etc/passwd' must be an http:// or https:// URL",
        ),
        (
            BACKEND.replace("http://127.0.0.1:8000", "unix:///run/engine.sock"),
            "3:10: backends.0.url: 'unix:///run/engine.sock' must be an http:// or https:// URL",
        ),
        (BACKEND + "    max_concurrency: " + "1" + "0" * 30 + "\n", "5:22: backends.0.max_concurrency: "),
        (BACKEND + "    kv_capacity_tokens: 1e30\n", "5:25: backends.0.kv_capacity_tokens: "),
        (
            "nodes: [{name: n}]\ngpus: [{id: g, type: H100, memory_gb: 1" + "0" * 30 + ", node: n}]\n",
            "2:39: gpus.0.memory_gb: Input should be less than or equal to 4096",
        ),
        (
            "interconnect:\n  bandwidth_gbps: {node: .nan}\n",
            "2:26: interconnect.bandwidth_gbps.node: Input should be a finite number",
        ),
        (
            "interconnect:\n  bandwidth_gbps: {rack: .inf}\n",
            "2:26: interconnect.bandwidth_gbps.rack: Input should be a finite number",
        ),
        (
            "interconnect:\n  bandwidth_gbps: {rack: 1e400}\n",
            "2:26: interconnect.bandwidth_gbps.rack: Input should be a finite number",
        ),
        (
            "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c]\n",
            "4:5: more than 16 YAML aliases",
        ),
    ],
)
def test_a_hostile_inventory_is_refused_naming_what_and_where(text: str, where: str) -> None:
    """Review R63: credentials in a URL, a scheme other than http(s), numbers of 10**30, NaN and
    infinite bandwidths and an alias bomb are each refused as an ``InventoryError`` at the value
    (its full path where it has one), never loaded and never a traceback."""
    with pytest.raises(InventoryError) as caught:
        parse_inventory(text, source="inv.yaml", read_keys=False)
    assert str(caught.value).startswith(f"inv.yaml:{where}"), str(caught.value)
    assert "secret" not in str(caught.value)


def test_an_inventory_of_ten_megabytes_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """Review R63: a 10 MiB inventory is refused as larger than ``MAX_INVENTORY_BYTES``, naming the
    file, having read at most one byte more than the limit."""
    path = tmp_path / "inventory.yaml"
    path.write_bytes(b"# " + b"x" * (10 * 2**20) + b"\n")
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert str(caught.value) == f"{path}: cannot read inventory: larger than {MAX_INVENTORY_BYTES} bytes"


def test_a_literal_key_beside_a_name_of_any_size_is_refused_in_one_short_line() -> None:
    """Review R63: a backend's literal ``api_key`` is refused before its fields are validated, and
    the refusal quoted the backend's name as it was: a name of 100,000 characters made an error
    line of 100,209. The name is cut as every quote from the file is (``shortened``); a name that
    is not text at all is not quoted."""
    backend = "backends:\n  - name: NAME\n    url: http://127.0.0.1:8000\n    models: [m]\n    api_key: sk\n"
    with pytest.raises(InventoryError) as caught:
        parse_inventory(backend.replace("NAME", "n" * 100_000), source="inv.yaml")
    message = str(caught.value)
    assert message.startswith("inv.yaml:5:14: backends.0.api_key: backend 'nnnn"), message
    assert "(100000 characters)" in message and len(message) < 600
    with pytest.raises(InventoryError) as caught:
        parse_inventory(backend.replace("NAME", "{a: [1, 2]}"), source="inv.yaml")
    assert str(caught.value).startswith(
        "inv.yaml:5:14: backends.0.api_key: the backend: an API key is never written"
    ), str(caught.value)


@pytest.mark.parametrize(
    ("mode", "content", "said"), [(0o644, b"sk-1\n", "mode 0644"), (0o600, b" \n", "empty")]
)
def test_a_key_file_named_with_a_line_break_is_quoted_on_one_line(
    tmp_path: Path, mode: int, content: bytes, said: str
) -> None:
    """Review R63: an ``api_key_file`` whose name holds a line break was quoted as it was when the
    file was readable by others or empty: the error (a ``BackendCredentialError``), logged, was
    two lines, the second free text from the inventory. The path is quoted as every error quotes
    a path (``shown_path``: a line break as ``\\n``), as a file that cannot be read already was."""
    path = tmp_path / "key\nfile"
    path.write_bytes(content)
    path.chmod(mode)
    text = BACKEND + f'    api_key_file: "{tmp_path}/key\\nfile"\n'
    with pytest.raises(InventoryError) as caught:
        parse_inventory(text, source="inv.yaml")
    message = str(caught.value)
    assert message.startswith("inv.yaml:5:19: backends.0.api_key_file: backend 'b': "), message
    assert "\n" not in message and f"{tmp_path}/key\\nfile" in message and said in message


@pytest.mark.parametrize("data", [[1, 2], "backends: []", None, 5])
def test_inventory_data_that_is_no_mapping_is_an_inventory_error(data: Any) -> None:
    """Review R63: ``inventory_from_mapping`` (data already parsed, from JSON or a caller) given a
    list raised a bare ``TypeError`` from ``dict()`` (cannot convert dictionary update sequence
    element), and a string or None the same; it is refused as an ``InventoryError`` naming the
    source, as ``parse_inventory`` refuses a YAML document that is no mapping."""
    with pytest.raises(InventoryError) as caught:
        inventory_from_mapping(data, source="inv.json")
    assert str(caught.value) == "inv.json: the inventory must be a mapping"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://h:" + "x" * 2_000, "Port could not be cast to integer value as 'xxx"),
        ("http://[" + "x" * 2_000 + "]:1", "'xxx"),
    ],
)
def test_an_unusable_url_of_any_size_is_refused_in_one_short_line(url: str, said: str) -> None:
    """Review R63: a backend URL the URL parser refuses was refused with the parser's own words,
    which quote the port or the bracketed host whole: a port of 100,000 characters made an error
    line of 100,094. The parser's words are cut as every quote from the file is (``shortened``).
    (2,000 characters here: a longer URL is refused by its length first, ``MAX_URL_CHARS``.)"""
    text = BACKEND.replace("http://127.0.0.1:8000", f'"{url}"')
    with pytest.raises(InventoryError) as caught:
        parse_inventory(text, source="inv.yaml")
    message = str(caught.value)
    assert message.startswith(f"inv.yaml:3:10: backends.0.url: not a usable URL: {said}"), message[:200]
    assert len(message) < 400
