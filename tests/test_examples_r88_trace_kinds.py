"""Review R88: ``dispatch.py`` tagged each trace's figures from its file name, ``mooncake`` if it
held that word, ``azure`` if it held ``Azure`` (in that case only), else the whole name: two traces
of one kind printed both tables and the JSON line kept only the last one's figures, and an Azure
trace named ``azure.csv`` got no Azure goal and keys holding its dot. The kind is now read in any
case (else the name without its extension), and a second trace of a kind is refused before any
replay with one line and status 2. The default run's keys are unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_benchmarks_r57_contract import _load

MOONCAKE_ROWS = (
    '{"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [1]}\n'
    '{"timestamp": 10, "input_length": 100, "output_length": 2, "hash_ids": [2]}\n'
)


def test_a_second_trace_of_a_kind_is_refused_before_any_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatch = _load("dispatch")
    monkeypatch.setattr(dispatch, "plot_file", lambda path: path)  # not matplotlib's 2 s import
    first, second = tmp_path / "mooncake_a.jsonl", tmp_path / "MOONCAKE_later.jsonl"
    first.write_text(MOONCAKE_ROWS)
    second.write_text(MOONCAKE_ROWS)
    args = ["--trace", str(first), "--trace", str(second), "--load", "0.9", "--backends", "1"]
    assert dispatch.main([*args, "--plot", str(tmp_path / "p.png")]) == 2
    out, err = capsys.readouterr()
    assert not out and not (tmp_path / "p.png").exists()
    assert err.splitlines() == [
        f"dispatch: {second}: a second trace of kind 'mooncake' (after {first}), whose figures "
        "would replace the first's: give one trace of each kind per run"
    ]


def test_an_azure_trace_in_lower_case_gets_the_azure_goal(tmp_path: Path) -> None:
    dispatch = _load("dispatch")
    trace = tmp_path / "azure.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,4\n"
        "2023-11-16 18:15:50.9951690,396,3\n"
    )
    res = dispatch.run_trace(trace, dispatch.load_trace(trace), [0.9], 1, 1, 0.5)
    figures, goals = dispatch.goals([res])
    assert "azure_p99_ttft_vs_best_load_based" in goals
    assert "azure.agentgate.load0.9.ttft_p99" in figures


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("mooncake_conversation_trace.jsonl", "mooncake"),
        ("AzureLLMInferenceTrace_conv.csv", "azure"),
        ("my_trace.jsonl", "my_trace"),
    ],
)
def test_a_trace_kind_is_read_from_its_name(name: str, kind: str) -> None:
    assert _load("dispatch").trace_kind(name) == kind
