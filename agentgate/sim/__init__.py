"""Simulated vLLM-like backends: the engine model, trace replay, and an HTTP server on loopback."""

from __future__ import annotations

from agentgate.sim._des import Choice, Outcome, Reject, ReplayDispatcher, Send, Wait, replay
from agentgate.sim._engine import Engine, EngineConfig, SimRequest, StepResult
from agentgate.sim._kvcache import KVCache
from agentgate.sim._latency import LLAMA_8B_H100, LLAMA_8B_H200, PROFILES, QWEN3_32B, LatencyModel
from agentgate.sim._server import SimServer
from agentgate.sim.traces import TraceRequest, chain_hashes, load_trace

__all__ = [
    "LLAMA_8B_H100",
    "LLAMA_8B_H200",
    "PROFILES",
    "QWEN3_32B",
    "Choice",
    "Engine",
    "EngineConfig",
    "KVCache",
    "LatencyModel",
    "Outcome",
    "Reject",
    "ReplayDispatcher",
    "Send",
    "SimRequest",
    "SimServer",
    "StepResult",
    "TraceRequest",
    "Wait",
    "chain_hashes",
    "load_trace",
    "replay",
]
