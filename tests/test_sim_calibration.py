"""The H200 profile against the step times measured on an H200 (benchmarks/calibrate_gpu.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agentgate.sim import LLAMA_8B_H200

REPO = Path(__file__).resolve().parents[1]
MEASURED = REPO / "benchmarks" / "calibration" / "llama-3.1-8b-h200.json"


def _calibrate_gpu() -> Any:
    spec = importlib.util.spec_from_file_location("calibrate_gpu", REPO / "benchmarks" / "calibrate_gpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("calibrate_gpu", module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)  # imports no torch: only measuring needs it
    return module


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MEASURED.read_text())
    assert data["info"]["device"] == "NVIDIA H200" and data["info"]["shape"] == "llama-3.1-8b"
    assert not data["info"]["failed"]
    return data


def test_the_fit_of_the_measurements_is_close(measured: dict[str, Any]) -> None:
    fit = _calibrate_gpu().fit(measured)
    assert fit["max_abs_error"] <= 0.15
    assert len(fit["points"]) == len(measured["decode"]) + len(measured["prefill"]) >= 20


def test_the_h200_profile_carries_the_measured_coefficients(measured: dict[str, Any]) -> None:
    fitted = _calibrate_gpu().fit(measured)["coefficients"]
    for name in ("decode_seq_s", "kv_read_s", "prefill_token_s", "attention_pair_s"):
        assert getattr(LLAMA_8B_H200, name) == pytest.approx(fitted[name], rel=0.02), name
    # base is the weight-bandwidth bound, below the plain-PyTorch step (unfused kernels)
    assert LLAMA_8B_H200.base_s < fitted["base_s"]


def test_the_h200_profile_predicts_every_measured_step(measured: dict[str, Any]) -> None:
    # Every step, less the per-step overhead of plain PyTorch that engines do not pay (the
    # difference between the measured and the profile's base), within 10%.
    overhead = _calibrate_gpu().fit(measured)["coefficients"]["base_s"] - LLAMA_8B_H200.base_s
    for d in measured["decode"]:
        model = LLAMA_8B_H200.step_time(d["batch"], d["batch"] * d["context"], 0, 0)
        assert model + overhead == pytest.approx(d["seconds"], rel=0.10), d
    for p in measured["prefill"]:
        model = LLAMA_8B_H200.prefill_time(p["uncached"], p["cached"])
        assert model + overhead == pytest.approx(p["seconds"], rel=0.10), p


def test_the_h200_profiles_base_and_kv_capacity_follow_from_the_measured_machine(
    measured: dict[str, Any],
) -> None:
    weights = 2 * measured["info"]["parameters"]  # BF16 bytes
    assert LLAMA_8B_H200.base_s == pytest.approx(weights / 4.8e12, rel=0.03)  # read once per step at 4.8 TB/s
    kv_bytes_per_token = 32 * 8 * 128 * 2 * 2  # layers x KV heads x head dim x (K, V) x BF16
    capacity = (measured["info"]["memory_bytes"] - weights) * 0.9 / kv_bytes_per_token
    assert LLAMA_8B_H200.kv_capacity_tokens == pytest.approx(capacity, rel=0.02)
