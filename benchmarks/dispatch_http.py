"""Added latency of the gateway over real HTTP: agentgate serve against direct httpx and LiteLLM's Router.

One simulated vLLM backend (``agentgate.sim.SimServer``, time scale 1e-6 so that it answers at
once) runs in a process of its own on 127.0.0.1. In the same run, interleaved in a random order
per round, one caller process sends the same non-streaming chat completion (8 output tokens):

- ``direct``: ``httpx.Client`` straight to the backend (the floor);
- ``gateway``: ``httpx.Client`` to ``agentgate serve`` (its own process, default durable SQLite
  store, ``synchronous=FULL``), with a freshly signed invocation per call (signing is timed: a
  caller must do it);
- ``gateway-relaxed``: the same with ``AGENTGATE_SQLITE_SYNCHRONOUS=NORMAL`` (a commit survives a
  process crash but not a power loss), to show what the durable commit costs;
- ``litellm``: ``litellm.Router.completion`` in this process, with one deployment pointing at the
  same backend (``openai/`` provider, ``api_base`` the backend);
- the floor of a second hop, on the same uvicorn (uvloop, httptools) as the gateway, each its own
  process: ``bare-hop``, a raw ASGI app answering fixed bytes (what any HTTP server in front
  costs), and ``bare-proxy``, a raw ASGI app that forwards the body to the backend over a pooled
  aiohttp session and returns its bytes (a proxy that decides nothing: the least a gateway adds).

With ``--baseline TREE`` the gateway is also served from another source tree (``git worktree add
TREE <commit>``), durable and relaxed (and streamed), as the rows ``baseline*`` of the same run:
a before/after comparison under the same load. With ``--stream`` each round also streams the call directly, through the gateway and through
LiteLLM, timing the first content event. Added latency = p50 of the path minus p50 of ``direct``
(``direct-stream`` for streamed rows). Goals (docs/gateway.md): the gateway's
added p50 <= 1 ms, and <= 0.5 x LiteLLM Router's added p50.

    .venv/bin/python benchmarks/dispatch_http.py [--quick] [--rounds N] [--stream] [--baseline TREE] --json
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from agentgate.dispatch.gateway import GatewayGate, invocation_headers  # noqa: E402
from agentgate.keys import SigningKey  # noqa: E402
from agentgate.policy import parse_policy  # noqa: E402
from agentgate.store import SQLiteStore  # noqa: E402
from benchmarks._args import random_seed, whole_up_to  # noqa: E402

MODEL = "llama-3.1-8b"
MESSAGES = [{"role": "user", "content": "Reply with a few words."}]
MAX_TOKENS = 8
BACKEND_SCRIPT = """
import sys, time
from agentgate.sim import SimServer
SimServer(model_name=sys.argv[1], time_scale=1e-6, port=int(sys.argv[2])).start()
while True:
    time.sleep(3600)
"""


FLOOR_SCRIPT = """
import sys, aiohttp, uvicorn
kind, port, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3]
FIXED = b'{"ok":true}'
session = None
async def app(scope, receive, send):
    global session
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        if session is not None:
            await session.close()
        await send({"type": "lifespan.shutdown.complete"})
        return
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    out = FIXED
    if kind == "bare-proxy" and scope["path"] == "/v1/chat/completions":
        if session is None:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(keepalive_timeout=4.0))
        async with session.post(backend + scope["path"], data=b"".join(parts),
                                headers={"content-type": "application/json"}) as answer:
            out = await answer.read()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": out})
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
"""


def _policy(root: str, agent: str) -> str:
    return f"""
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  bench: {{kind: agent, did: "{agent}", roles: [chat]}}
models:
  {MODEL}: {{cost_per_mtok: {{input: 100000, output: 300000}}}}
roles:
  chat:
    kind: agent
    capabilities:
      - resource: model:{MODEL}
        constraints: {{max_tokens: {{le: 4096}}}}
    budget: {{limit: 1000000000000, unit: usd_micros}}
    ttl_s: 86400
"""


MAX_ROUNDS = 100_000
"""The most ``--rounds`` taken: 50 times the default's 2,000, each round one call per path, all
their timings held for the medians (until review R88d any number of digits was taken, and
``range(warmup + rounds)`` ran without end)."""

MAX_WARMUP = 10_000
"""The most ``--warmup`` rounds taken: 200 times the default's 50, unmeasured (until review R88d
unbounded, as ``--rounds`` was)."""


STAGES = ("read", "wait", "parse", "decide", "backend", "total")
"""The gateway's ``Server-Timing`` entries (milliseconds)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, process: subprocess.Popen[bytes], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(
                f"{what} did not start: {process.stderr.read().decode() if process.stderr else ''}"
            )
        time.sleep(0.05)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _litellm_router(backend_url: str) -> tuple[Any, str]:
    """LiteLLM's Router over the backend, or None and why it cannot be measured."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
    # LiteLLM's streaming path asks Hugging Face for a tokenizer; offline, it falls back at once
    # instead of retrying a download (nothing may be downloaded at run time).
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import litellm
        from litellm.router import Router
    except Exception as exc:  # an import failure of an optional comparison must not stop the run
        return None, f"litellm not importable: {type(exc).__name__}: {exc}"
    litellm.telemetry = False
    litellm.suppress_debug_info = True
    router = Router(
        model_list=[
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": f"openai/{MODEL}",
                    "api_base": backend_url + "/v1",
                    "api_key": "none",
                },
            }
        ],
        num_retries=0,
    )

    return router, f"litellm {importlib.metadata.version('litellm')}"


def _first_content_ms(lines: Any, started: float) -> float:
    """Read an SSE stream to its end; milliseconds from ``started`` to the first content event."""
    first = None
    for line in lines:
        if first is None and line.startswith("data: {") and '"content":"' in line.replace(" ", ""):
            first = (time.perf_counter() - started) * 1000
    if first is None:
        raise SystemExit("a stream delivered no content")
    return first


def goals_of(gateway_added_ms: float, ratio_to_litellm: float | None) -> dict[str, Any]:
    """The goal line: the gateway's added p50, and its ratio to LiteLLM's added p50 when LiteLLM
    was measured. Without LiteLLM that goal is left out (the table says why), as audit.py leaves
    out PostgreSQL's when initdb is absent: a goal's value is always a number."""
    goals: dict[str, Any] = {
        "gateway_added_p50_ms": {"value": round(gateway_added_ms, 4), "limit": 1.0, "better": "lower"}
    }
    if ratio_to_litellm is not None:
        goals["gateway_added_vs_litellm_added"] = {
            "value": round(ratio_to_litellm, 3),
            "limit": 0.5,
            "better": "lower",
        }
    return goals


def _source_tree(text: str) -> Path:
    """An argparse type: a source tree of agentgate to serve the gateway from (``--baseline``),
    as an absolute path. Checked before any process starts: until review R85 a tree that was not
    there was a FileNotFoundError traceback once the backend and both gateways had started."""
    tree = Path(text)
    try:
        holds_cli = (tree / "agentgate" / "cli" / "main.py").is_file()
    except OSError:  # a name too long to look at, or a place not to be looked into
        holds_cli = False
    if not holds_cli:
        raise argparse.ArgumentTypeError(
            f"not a source tree of agentgate (no agentgate/cli/main.py in it): {text!r}"
        )
    return tree.resolve()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 rounds instead of 2,000")
    parser.add_argument(
        "--rounds",
        type=whole_up_to(1, MAX_ROUNDS, "measured rounds, their timings held in memory"),
        default=None,
        help=f"measured rounds (one call per path each), at most {MAX_ROUNDS:,}",
    )
    parser.add_argument(
        "--warmup",
        type=whole_up_to(0, MAX_WARMUP, "unmeasured rounds"),
        default=50,
        help=f"unmeasured rounds first, at most {MAX_WARMUP:,}",
    )
    parser.add_argument("--seed", type=random_seed, default=7)
    parser.add_argument(
        "--stream", action="store_true", help="also time streamed calls (time to first token), same rounds"
    )
    parser.add_argument(
        "--baseline",
        type=_source_tree,
        metavar="TREE",
        help="also serve the gateway from another source tree (a checkout of an earlier commit),"
        " as the rows baseline, baseline-relaxed (and baseline-stream), in the same interleaved run",
    )
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    args = parser.parse_args()
    rounds = args.rounds or (300 if args.quick else 2000)
    rng = random.Random(args.seed)

    workdir = Path(tempfile.mkdtemp(prefix="agentgate-bench-http-"))
    root, agent = SigningKey.generate(), SigningKey.generate()
    policy = workdir / "policy.yaml"
    policy.write_text(_policy(root.did, agent.did))
    backend_port = _free_port()
    backend_url = f"http://127.0.0.1:{backend_port}"
    inventory = workdir / "inventory.yaml"
    inventory.write_text(
        f"backends:\n  - {{name: sim-0, url: '{backend_url}', engine: vllm, models: [{MODEL}]}}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        backend = subprocess.Popen(
            [sys.executable, "-c", BACKEND_SCRIPT, MODEL, str(backend_port)], env=env, stderr=subprocess.PIPE
        )
        processes.append(backend)
        _wait_ready(backend_url + "/health", backend, "the simulated backend")

        gateways: dict[str, str] = {}
        chains: dict[str, Any] = {}
        served = [("gateway", "FULL", REPO), ("gateway-relaxed", "NORMAL", REPO)]
        if args.baseline is not None:
            served += [("baseline", "FULL", args.baseline), ("baseline-relaxed", "NORMAL", args.baseline)]
        for name, synchronous, tree in served:
            store = workdir / f"{name}.db"
            issuer = GatewayGate(parse_policy(policy.read_text(), source=str(policy)), SQLiteStore(store))
            try:
                chains[name] = issuer.issue(root, name="bench", key=agent, role="chat").chain
            finally:
                issuer.close()
            port = _free_port()
            command = [sys.executable, "-m", "agentgate.cli.main", "serve", "--policy", str(policy)]
            command += ["--inventory", str(inventory), "--port", str(port), "--store", str(store)]
            process = subprocess.Popen(
                command,
                env={**env, "PYTHONPATH": str(tree), "AGENTGATE_SQLITE_SYNCHRONOUS": synchronous},
                cwd=tree,
                stderr=subprocess.PIPE,
            )
            processes.append(process)
            gateways[name] = f"http://127.0.0.1:{port}"
            _wait_ready(gateways[name] + "/healthz", process, name)

        floors: dict[str, str] = {}
        for name in ("bare-hop", "bare-proxy"):
            port = _free_port()
            process = subprocess.Popen(
                [sys.executable, "-c", FLOOR_SCRIPT, name, str(port), backend_url],
                env=env,
                stderr=subprocess.PIPE,
            )
            processes.append(process)
            floors[name] = f"http://127.0.0.1:{port}"
            _wait_ready(floors[name] + "/healthz", process, name)

        body = {"model": MODEL, "messages": MESSAGES, "max_tokens": MAX_TOKENS}
        raw = json.dumps(body).encode()
        http = httpx.Client(timeout=30)
        json_headers = {"content-type": "application/json"}

        def direct() -> None:
            response = http.post(backend_url + "/v1/chat/completions", content=raw, headers=json_headers)
            response.raise_for_status()

        stream_body = {**body, "stream": True}
        stream_raw = json.dumps(stream_body).encode()

        def direct_stream() -> float:
            started = time.perf_counter()
            url = backend_url + "/v1/chat/completions"
            with http.stream("POST", url, content=stream_raw, headers=json_headers) as response:
                response.raise_for_status()
                return _first_content_ms(response.iter_lines(), started)

        def streamed(name: str) -> Callable[[], float]:
            url = gateways[name] + "/v1/chat/completions"

            def call() -> float:
                started = time.perf_counter()
                headers = {**json_headers, **invocation_headers(agent, chains[name], stream_body)}
                with http.stream("POST", url, content=stream_raw, headers=headers) as response:
                    response.raise_for_status()
                    return _first_content_ms(response.iter_lines(), started)

            return call

        def floor(name: str) -> Callable[[], None]:
            url = floors[name] + "/v1/chat/completions"

            def call() -> None:
                # The gateway rows' headers (a fresh invocation each call), so that the same bytes travel.
                headers = {**json_headers, **invocation_headers(agent, chains["gateway"], body)}
                response = http.post(url, content=raw, headers=headers)
                response.raise_for_status()

            return call

        stages: dict[str, dict[str, list[float]]] = {
            name: {stage: [] for stage in (*STAGES, "outside")} for name in ("gateway", "gateway-relaxed")
        }

        def through(name: str) -> Callable[[], Any]:
            url = gateways[name] + "/v1/chat/completions"
            chain = chains[name]
            if name not in stages:  # a baseline tree: its Server-Timing may differ, only the call is timed

                def plain() -> None:
                    headers = {**json_headers, **invocation_headers(agent, chain, body)}
                    http.post(url, content=raw, headers=headers).raise_for_status()

                return plain

            def call() -> None:
                headers = {**json_headers, **invocation_headers(agent, chain, body)}
                posted = time.perf_counter()
                response = http.post(url, content=raw, headers=headers)
                posted_ms = (time.perf_counter() - posted) * 1000
                response.raise_for_status()
                timing = dict(
                    part.strip().split(";dur=") for part in response.headers["server-timing"].split(",")
                )
                for stage in STAGES:
                    stages[name][stage].append(float(timing[stage]))
                # Per call: the caller's HTTP request minus the handler (the hop, both ways).
                stages[name]["outside"].append(posted_ms - float(timing["total"]))

            return call

        paths: dict[str, Callable[[], float | None]] = {
            "direct": direct,
            "gateway": through("gateway"),
            "gateway-relaxed": through("gateway-relaxed"),
            "bare-hop": floor("bare-hop"),
            "bare-proxy": floor("bare-proxy"),
        }
        if args.baseline is not None:
            paths["baseline"] = through("baseline")
            paths["baseline-relaxed"] = through("baseline-relaxed")
        router, litellm_note = _litellm_router(backend_url)
        if router is not None:

            def litellm_call() -> None:
                router.completion(model=MODEL, messages=MESSAGES, max_tokens=MAX_TOKENS)

            def litellm_stream() -> float:
                started = time.perf_counter()
                first = None
                for chunk in router.completion(
                    model=MODEL, messages=MESSAGES, max_tokens=MAX_TOKENS, stream=True
                ):
                    if first is None and chunk.choices and chunk.choices[0].delta.content:
                        first = (time.perf_counter() - started) * 1000
                if first is None:
                    raise SystemExit("the LiteLLM stream delivered no content")
                return first

            paths["litellm"] = litellm_call
        if args.stream:
            paths["direct-stream"] = direct_stream
            paths["gateway-stream"] = streamed("gateway")
            if args.baseline is not None:
                paths["baseline-stream"] = streamed("baseline")
            if router is not None:
                paths["litellm-stream"] = litellm_stream

        samples: dict[str, list[float]] = {name: [] for name in paths}
        names = list(paths)
        for i in range(args.warmup + rounds):
            rng.shuffle(names)
            for name in names:
                started = time.perf_counter()
                ttft = paths[name]()
                elapsed = (time.perf_counter() - started) * 1000
                if i >= args.warmup:
                    samples[name].append(elapsed if ttft is None else ttft)

        sign_ms = []
        for _ in range(500):
            started = time.perf_counter()
            invocation_headers(agent, chains["gateway"], body)
            sign_ms.append((time.perf_counter() - started) * 1000)
        http.close()
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.communicate(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)

    p50 = {name: statistics.median(values) for name, values in samples.items()}
    p99 = {name: _percentile(values, 0.99) for name, values in samples.items()}
    added = {
        name: p50[name] - p50["direct-stream" if name.endswith("-stream") else "direct"]
        for name in p50
        if not name.startswith("direct")
    }

    print(f"dispatch_http: {rounds} rounds, interleaved, 1 caller, max_tokens={MAX_TOKENS}, loopback")
    print("(streamed rows: time to the first content event; the others: the whole call)")
    print(f"{'path':<17}{'p50 ms':>9}{'p99 ms':>9}{'added p50 ms':>14}")
    for name in paths:
        extra = f"{added[name]:>14.3f}" if name in added else f"{'-':>14}"
        print(f"{name:<17}{p50[name]:>9.3f}{p99[name]:>9.3f}{extra}")
    if router is None:
        print(f"litellm          not measured: {litellm_note}")
    print(
        f"client-side invocation signing p50: {statistics.median(sign_ms):.3f} ms (inside the gateway rows)"
    )
    stage_p50 = {
        name: {stage: statistics.median(v[-rounds:]) for stage, v in parts.items()}
        for name, parts in stages.items()
    }
    for name, parts in stage_p50.items():
        print(
            f"{name}: inside the gateway p50: handler {parts['total']:.3f} ms = read the body {parts['read']:.3f}"
            f" + wait for a worker thread {parts['wait']:.3f} + parse {parts['parse']:.3f}"
            f" + decide {parts['decide']:.3f} + backend call (router + HTTP client + backend)"
            f" {parts['backend']:.3f} + answer; outside the handler (the HTTP hop, per call)"
            f" {parts['outside']:.3f} ms"
        )
    over_floor = {name: p50[name] - p50["bare-proxy"] for name in ("gateway", "gateway-relaxed")}
    print(
        f"floor: bare-hop {p50['bare-hop']:.3f} ms (a trivial ASGI answer), bare-proxy adds"
        f" {added['bare-proxy']:.3f} ms over direct; the gateway adds {over_floor['gateway']:.3f} ms"
        f" over bare-proxy ({over_floor['gateway-relaxed']:.3f} relaxed)"
    )

    ratio = added["gateway"] / added["litellm"] if "litellm" in added and added["litellm"] > 0 else None
    figures: dict[str, Any] = {
        "rounds": rounds,
        "p50_ms": {k: round(v, 4) for k, v in p50.items()},
        "p99_ms": {k: round(v, 4) for k, v in p99.items()},
        "added_p50_ms": {k: round(v, 4) for k, v in added.items()},
        "gateway_vs_litellm_added": None if ratio is None else round(ratio, 3),
        "sign_p50_ms": round(statistics.median(sign_ms), 4),
        "gateway_stage_p50_ms": {n: {k: round(v, 4) for k, v in p.items()} for n, p in stage_p50.items()},
        "gateway_over_bare_proxy_p50_ms": {k: round(v, 4) for k, v in over_floor.items()},
        "litellm": litellm_note,
    }
    goals = goals_of(added["gateway"], ratio)
    if args.baseline is not None:
        print(f"baseline: the gateway served from {args.baseline} in the same run (its rows above)")
        figures["baseline"] = str(args.baseline)
    print(json.dumps({"benchmark": "dispatch_http", "figures": figures, "goals": goals}))


if __name__ == "__main__":
    main()
