"""Back-pressure on the gateway's streamed path: a caller that reads slowly slows the backend down.

Two places could pile a streamed answer up in the gateway's memory: the upstream connection (bytes
read from the backend's socket that nobody has taken yet) and the queue between the task that reads
the backend and the caller's generator (``GatewayGate.gated_stream``). Both are bounded; each is
checked here with real components: a loopback TCP backend that writes as fast as it may, and a
real ``GatewayGate`` on a SQLite file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

from agentgate.authority import Invocation
from agentgate.capabilities import Call
from agentgate.dispatch.backends import ChatChunk
from agentgate.dispatch.gateway._authority import GatewayDecision, GatewayGate
from agentgate.dispatch.gateway._upstream import HIGH_WATER, UpstreamPool
from agentgate.gate import AgentIdentity
from agentgate.gate._dispatching import STREAM_AHEAD
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

LINE = 1024
TOTAL = 64 << 20  # far more than the loopback socket buffers on both sides can hold


def _line(n: int) -> str:
    return f"data: {n:0{LINE - 7}d}"


class _Flood:
    """A loopback backend that answers every request with ``TOTAL`` bytes of server-sent events
    (numbered ``LINE``-byte lines, chunked), as fast as its socket lets it, counting what it wrote."""

    def __init__(self) -> None:
        self.written = 0
        self.finished = False
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/chat/completions"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            length = next(
                int(h.split(":")[1]) for h in head.split("\r\n") if h.lower().startswith("content-length")
            )
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            per_chunk = 64
            for first in range(0, TOTAL // LINE, per_chunk):
                block = b"".join(b"data: %0*d\n" % (LINE - 7, n) for n in range(first, first + per_chunk))
                writer.write(b"%x\r\n%s\r\n" % (len(block), block))
                await writer.drain()  # blocks while the reader's socket buffers are full
                self.written += len(block)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            self.finished = True
        except ConnectionError:
            pass  # the gateway closed the connection: the caller left
        finally:
            writer.close()


def test_a_slow_reader_stalls_the_backend_instead_of_filling_the_gateways_memory() -> None:
    async def scenario() -> None:
        flood = _Flood()
        url = await flood.start()
        pool = UpstreamPool()
        try:
            async with pool.stream(url, b"{}") as (status, _, lines, _):
                assert status == 200
                assert await anext(lines) == _line(0)
                # The caller stops reading. The backend can only get as far as the kernel's
                # socket buffers and the connection's read-ahead (HIGH_WATER) let it.
                await asyncio.sleep(0.5)
                stalled = flood.written
                await asyncio.sleep(0.3)
                assert flood.written == stalled and not flood.finished
                assert stalled < TOTAL // 2
                # Reading again resumes the socket: every line arrives, in order, none lost.
                count = 1
                async for line in lines:
                    if not line:
                        continue
                    assert line == _line(count)
                    count += 1
                assert count == TOTAL // LINE and flood.finished
        finally:
            await pool.aclose()
            await flood.stop()

    asyncio.run(scenario())


def test_read_ahead_of_the_connection_is_bounded_by_high_water() -> None:
    """The bytes waiting in the connection for a slow reader stay near ``HIGH_WATER``."""

    async def scenario() -> None:
        flood = _Flood()
        url = await flood.start()
        pool = UpstreamPool()
        try:
            _, connection, status = await pool._send(url, b"{}")
            assert status == 200
            pieces = connection.pieces()
            await anext(pieces)  # streaming from here on
            await asyncio.sleep(0.5)
            # One socket read may land after the mark is passed; asyncio reads 256 KiB at most.
            assert connection._buffered <= HIGH_WATER + (256 << 10) <= 1 << 20
            assert flood.written < TOTAL // 2 and not flood.finished
            await pieces.aclose()
            connection.close()
        finally:
            await pool.aclose()
            await flood.stop()

    asyncio.run(scenario())


POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [chat]}}
models:
  m: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  chat:
    kind: agent
    capabilities: [{{resource: model:m}}]
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
"""


@contextmanager
def allowed_model_call(tmp_path: Path) -> Iterator[tuple[GatewayGate, AgentIdentity, GatewayDecision]]:
    """A gateway gate whose one agent (a budget of 1,000,000 usd_micros) holds an allowed call of
    model ``m`` (10 prompt and 100 output tokens reserved: 110 usd_micros); closed on exit."""
    root, agent_key = SigningKey.generate(), SigningKey.generate()
    gate = GatewayGate(
        parse_policy(POLICY.format(root=root.did, agent=agent_key.did), source="p.yaml"),
        SQLiteStore(tmp_path / "ag.db"),
    )
    try:
        agent = gate.issue(root, name="agent", key=agent_key, role="chat")
        call = Call.model("m", {"max_tokens": 100})
        invocation = Invocation.sign(agent.key, agent.chain, call).encode()
        decision = gate.authorize_invocation(agent.chain.token, invocation, call, (10, 100))
        assert decision.auth.allowed
        yield gate, agent, decision
    finally:
        gate.close()


def test_gated_stream_reads_the_backend_only_a_bounded_way_ahead_of_its_caller(tmp_path: Path) -> None:
    with allowed_model_call(tmp_path) as (gate, agent, decision):
        produced = 0
        closed = asyncio.Event()

        async def backend() -> AsyncIterator[ChatChunk]:
            nonlocal produced
            try:
                while True:
                    produced += 1
                    yield ChatChunk(content="x")
                    await asyncio.sleep(0)
            finally:
                closed.set()

        async def scenario() -> None:
            stream = gate.gated_stream(decision.auth, backend())
            assert (await anext(stream)).content == "x"
            for _ in range(50):  # the caller does not read; the backend reader gets every chance
                await asyncio.sleep(0)
            assert produced <= STREAM_AHEAD + 2
            for _ in range(10):
                await anext(stream)
            await stream.aclose()  # the caller leaves: the backend stream is closed at once
            assert closed.is_set()

        asyncio.run(scenario())
        gate.flush()
        outcomes = [e for e in gate.audit.entries() if e.kind == "outcome"]
        assert len(outcomes) == 1 and outcomes[0].status == "error"  # abandoned mid-answer
        # Output was delivered without usage: the whole reservation is charged.
        assert gate.budget_usage(agent)[agent.chain.root.id][0] == 110  # spent
