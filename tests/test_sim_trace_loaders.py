"""Fixes to the simulated backend: trace loaders, replay settings, prefix blocks.

The trace loaders promise an ``InputError`` naming the file and line for a malformed row; a file
that is not UTF-8, a JSON row nested too deeply and a CSV field over the csv module's limit were
tracebacks, a CSV row after blank lines was named by the wrong line, and a row with a timestamp of
``Infinity`` or ``NaN`` (or a length that is no count) loaded silently and then kept ``replay``
from ever returning, as did a ``scrape_interval`` of 0. The HTTP server cut its prefix-cache blocks
in bytes, so prompts outside ASCII sharing a third of their text were served as almost fully
cached. An ``EngineConfig`` with a token budget or batch of 0 made every request hang, and a
``SimServer`` with a NaN ``max_model_len`` refused every request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _http
import httpx
import pytest

from agentgate.dispatch.prefix import block_hashes
from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, EngineConfig, Send, SimServer, load_trace, replay
from agentgate.sim.traces import TraceRequest

_ROW = b'{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n'
_HEADER = b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
_AZURE_ROW = b"2023-11-16 18:15:46.6805900,374,44\n"


def _trace(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("name", "data", "line"),
    [
        pytest.param("t.jsonl", _ROW + b'{"timestamp": 1, "x": "\xe9"}\n', 2, id="jsonl_latin1"),
        pytest.param("t.csv", _HEADER + _AZURE_ROW + b"2023-11-16 18:15:47.0,37\xe9,4\n", 3, id="csv_latin1"),
        pytest.param("t.jsonl", _ROW + b"[" * 100_000 + b"\n", 2, id="jsonl_nested_too_deeply"),
        pytest.param(
            "t.csv",
            _HEADER + _AZURE_ROW + _AZURE_ROW + b'2023-11-16 18:15:47.0,3,"' + b"1" * 200_000 + b'"\n',
            4,
            id="csv_field_over_the_limit",
        ),
        pytest.param(
            "t.csv",
            _HEADER + _AZURE_ROW + b"\n\n2023-11-16 18:15:47.0,3,oops\n",
            5,
            id="csv_after_blank_lines",
        ),
    ],
)
def test_a_malformed_trace_is_an_input_error_naming_its_file_and_line(
    tmp_path: Path, name: str, data: bytes, line: int
) -> None:
    path = _trace(tmp_path, name, data)
    with pytest.raises(InputError, match=rf"{name}:{line}: "):
        load_trace(path)


@pytest.mark.parametrize(
    "row",
    [
        b'{"timestamp": Infinity, "input_length": 5, "output_length": 1, "hash_ids": [0]}',
        b'{"timestamp": NaN, "input_length": 5, "output_length": 1, "hash_ids": [0]}',
        b'{"timestamp": 1e400, "input_length": 5, "output_length": 1, "hash_ids": [0]}',
        b'{"timestamp": true, "input_length": 5, "output_length": 1, "hash_ids": [0]}',
        b'{"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": [0]}',
        b'{"timestamp": 1, "input_length": 5.7, "output_length": 1, "hash_ids": [0]}',
        b'{"timestamp": 1, "input_length": 5, "output_length": true, "hash_ids": [0]}',
        b'{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": "abc"}',
    ],
    ids=["infinity", "nan", "overflow", "bool_time", "negative", "fraction", "bool_length", "ids_not_list"],
)
def test_a_mooncake_row_whose_values_are_not_its_columns_is_refused_naming_its_line(
    tmp_path: Path, row: bytes
) -> None:
    """A timestamp must be a finite number of ms, a length a whole number of tokens, hash_ids a
    list (../shared/data/traces/README.md); an infinite arrival loaded, then hung the replay."""
    with pytest.raises(InputError, match=r"t\.jsonl:2: malformed trace row"):
        load_trace(_trace(tmp_path, "t.jsonl", _ROW + row + b"\n"))


def test_an_azure_row_with_a_negative_length_is_refused_naming_its_line(tmp_path: Path) -> None:
    path = _trace(tmp_path, "t.csv", _HEADER + _AZURE_ROW + b"2023-11-16 18:15:47.0,-3,4\n")
    with pytest.raises(InputError, match=r"t\.csv:3: malformed trace row: ContextTokens"):
        load_trace(path)


def _azure(tokens: str) -> bytes:
    return _HEADER + _AZURE_ROW + f"2023-11-16 18:15:47.0,{tokens}\n".encode()


def _mooncake(tokens: int) -> bytes:
    return (
        _ROW + f'{{"timestamp": 1, "input_length": {tokens}, "output_length": 1, "hash_ids": [0]}}\n'.encode()
    )


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("t.csv", _azure("1000000000000,4"), "t.csv:3: malformed trace row: ContextTokens"),
        ("t.csv", _azure("3,1048577"), "t.csv:3: malformed trace row: GeneratedTokens"),
        ("t.jsonl", _mooncake(1048577), "t.jsonl:2: malformed trace row: input_length"),
    ],
)
def test_a_token_count_beyond_any_context_is_refused_naming_its_line(
    tmp_path: Path, name: str, text: bytes, where: str
) -> None:
    """Review R54: a token count had no upper bound, and an Azure row's block hashes are made from
    it, so one row of ``1000000000000`` context tokens asked for two billion hashes and took the
    process's memory instead of being refused.

    Rule: a count above ``MAX_TRACE_TOKENS`` (1,048,576) is a malformed row, named by file and line;
    the bound itself loads."""
    with pytest.raises(InputError, match=where.replace(".", "[.]") + " must be a whole number of tokens"):
        load_trace(_trace(tmp_path, name, text))
    assert load_trace(_trace(tmp_path, "edge.csv", _azure("1048576,1048576")))[-1].prompt_tokens == 1048576
    assert load_trace(_trace(tmp_path, "edge.jsonl", _mooncake(1048576)))[-1].prompt_tokens == 1048576


def test_well_formed_rows_still_load_with_their_line_as_id(tmp_path: Path) -> None:
    path = _trace(tmp_path, "t.csv", _HEADER + _AZURE_ROW + b"\n" + b"2023-11-16 18:15:47.6805900,0,1\n")
    first, second = load_trace(path)
    assert (first.id, second.id) == ("r2", "r4")
    assert second.prompt_tokens == 0 and second.arrival == pytest.approx(1.0)


class _SendAll:
    def route(self, request: TraceRequest, now: float) -> Send:
        return Send("b")

    def first_token(self, backend: str, request: TraceRequest, now: float) -> None: ...
    def finished(self, backend: str, request: TraceRequest, now: float) -> None: ...
    def observe(self, backend: str, metrics: object, now: float) -> None: ...


@pytest.mark.parametrize("interval", [0.0, -0.5, float("nan")])
def test_replay_refuses_a_scrape_interval_that_is_not_a_positive_number(interval: float) -> None:
    """0 or less scraped at one instant for ever (``benchmarks/dispatch.py --scrape 0`` hung)."""
    trace = [TraceRequest("a", 0.0, 10, 2)]
    with pytest.raises(InputError, match="scrape_interval"):
        replay(trace, {"b": Engine(LLAMA_8B_H100)}, _SendAll(), scrape_interval=interval)  # type: ignore[arg-type]


@pytest.mark.parametrize("arrival", [float("inf"), float("nan")])
def test_replay_refuses_an_arrival_that_never_comes(arrival: float) -> None:
    trace = [TraceRequest("a", 0.0, 10, 2), TraceRequest("b", arrival, 10, 2)]
    engine = Engine(LLAMA_8B_H100)
    with pytest.raises(InputError, match="'b'"):
        replay(trace, {"b": engine}, _SendAll())  # type: ignore[arg-type]
    assert not engine.has_work()


@pytest.mark.parametrize("second_at", [0.001, 60.0], ids=["while-the-first-runs", "after-it-ended"])
def test_replay_refuses_two_requests_with_one_id(second_at: float) -> None:
    """Requests and outcomes were kept by id: the replay failed with a bare KeyError when the
    second arrived while the first ran, and gave the second's outcome for both when it came later."""
    trace = [TraceRequest("a", 0.0, 100, 50), TraceRequest("a", second_at, 100, 5)]
    engine = Engine(LLAMA_8B_H100)
    with pytest.raises(InputError, match="'a': two requests"):
        replay(trace, {"b": engine}, _SendAll())  # type: ignore[arg-type]
    assert not engine.has_work()


def _chat(http: httpx.Client, server: SimServer, text: str) -> dict[str, Any]:
    answer = http.post(
        server.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": text}], "max_tokens": 1},
    )
    assert answer.status_code == 200, answer.text
    usage: dict[str, Any] = answer.json()["usage"]
    return usage


def test_a_prefix_shared_outside_ascii_is_cached_only_for_the_tokens_it_covers() -> None:
    """Two Chinese prompts of 3,000 characters (750 estimated tokens) sharing their first 1,000
    characters (about 250 tokens): the second has at most those tokens cached, not 736."""
    shared = "汉" * 1000
    with SimServer(time_scale=0.001) as server, _http.Client(timeout=10) as http:
        _chat(http, server, shared + "字" * 2000)
        usage = _chat(http, server, shared + "语" * 2000)
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert 0 < cached <= (len("<user>\n") + len(shared)) // 4, usage


def test_a_block_is_as_many_characters_as_its_tokens_count_also_outside_ascii() -> None:
    """``dispatch.prefix.block_hashes`` (the router's and the simulated backend's) cuts blocks of
    ``block_tokens`` x 4 characters, the unit ``estimate_tokens`` counts: a 3-byte character is
    one character, so 1,000 shared Chinese characters share 15 blocks of 64, not 46 of 64 bytes."""
    shared = "汉" * 1000
    one, two = block_hashes(shared + "字" * 2000, 16), block_hashes(shared + "语" * 2000, 16)
    assert len(one) == len(two) == 3000 // 64
    common = next(i for i, (a, b) in enumerate(zip(one, two, strict=True)) if a != b)
    assert common == 1000 // 64
    ascii_text = "the quick brown fox " * 300  # one character, one byte: as before
    assert len(block_hashes(ascii_text, 16)) == len(ascii_text) // 64


@pytest.mark.parametrize("value", [float("nan")])
def test_a_simulated_backend_with_no_usable_context_length_is_refused_when_made(value: float) -> None:
    """A NaN ``max_model_len`` was taken, and every request was then refused as too long."""
    with pytest.raises(InputError, match="max_model_len"):
        SimServer(max_model_len=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "setting",
    [
        {"max_num_batched_tokens": 0},
        {"max_num_seqs": 0},
        {"block_tokens": 0},
        {"kv_capacity_tokens": 0},
        {"kv_capacity_tokens": -5},
    ],
    ids=["no_token_budget", "no_batch", "no_block", "no_kv", "negative_kv"],
)
def test_an_engine_config_that_can_schedule_nothing_is_refused_when_made(setting: dict[str, int]) -> None:
    """A token budget or batch of 0 left every request waiting for ever (an HTTP call to the
    simulator hung); a KV capacity of 0 was silently taken as the model's 440k tokens."""
    with pytest.raises(InputError, match=next(iter(setting))):
        EngineConfig(**setting)
