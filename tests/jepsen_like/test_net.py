"""The per-link proxies: bytes pass unchanged, a blocked link drops live and new connections,
unblocking restores it, delay holds chunks without reordering them, and a stalled destination
back-pressures the sender instead of filling memory. Plain asyncio echo servers, no cluster."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from collections.abc import AsyncIterator, Callable

import pytest

from cluster.ops.process import free_port
from jepsen_like.db import ports_needed
from jepsen_like.net import (
    HOST,
    PENDING_BYTES_MAX,
    READ_CHUNK_BYTES,
    Delay,
    LinkProxies,
    LinkProxy,
)
from jepsen_like.runner import ChaosOptions

IO_TIMEOUT_S = 5.0
DELAY_MS = 60.0
HOLD_LONGER_THAN_DEADLINE_MS = 1000 * 10 * IO_TIMEOUT_S
POLL_S = 0.005
BACKPRESSURE_TOTAL_BYTES = 64 * 1024 * 1024
BACKPRESSURE_WAIT_S = 1.0


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(_echo, HOST, 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()


@pytest.fixture
async def proxy(echo_port: int) -> AsyncIterator[LinkProxy]:
    p = LinkProxy("a", "b", echo_port)
    await p.start()
    try:
        yield p
    finally:
        await p.close()


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection(HOST, port), IO_TIMEOUT_S)


async def _roundtrip(port: int, payload: bytes) -> bytes:
    reader, writer = await _connect(port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), IO_TIMEOUT_S)
    finally:
        writer.close()


async def _until(
    condition: Callable[[], bool], what: str, deadline_s: float = IO_TIMEOUT_S
) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` if the deadline passes first."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"not within {deadline_s} s: {what}")
        await asyncio.sleep(POLL_S)


async def _closed_by_peer(reader: asyncio.StreamReader) -> bool:
    """True once the connection is closed or reset from the other side."""
    try:
        data = await asyncio.wait_for(reader.read(1), IO_TIMEOUT_S)
    except ConnectionError:
        return True
    return data == b""


async def test_bytes_pass_both_ways_unchanged(proxy: LinkProxy) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, several chunks
    assert await _roundtrip(proxy.port, payload) == payload
    assert proxy.accepted == 1


async def test_block_cuts_live_connections_and_refuses_new_ones(proxy: LinkProxy) -> None:
    reader, writer = await _connect(proxy.port)
    writer.write(b"hello")
    assert await asyncio.wait_for(reader.readexactly(5), IO_TIMEOUT_S) == b"hello"

    proxy.block()
    assert await _closed_by_peer(reader)
    writer.close()
    assert proxy.live_connections == 0

    reader2, writer2 = await _connect(proxy.port)
    writer2.write(b"anyone?")
    assert await _closed_by_peer(reader2)
    writer2.close()
    assert proxy.refused >= 1

    proxy.unblock()
    assert await _roundtrip(proxy.port, b"back again") == b"back again"


async def test_target_down_closes_the_dialed_connection() -> None:
    server = await asyncio.start_server(_echo, HOST, 0)
    port = int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()
    p = LinkProxy("a", "b", port)
    await p.start()
    try:
        reader, writer = await _connect(p.port)
        assert await _closed_by_peer(reader)
        writer.close()
        assert p.refused == 1 and p.accepted == 0
    finally:
        await p.close()


async def test_delay_holds_each_direction(proxy: LinkProxy) -> None:
    proxy.set_delay(Delay(DELAY_MS, 0.0))
    start = time.monotonic()
    assert await _roundtrip(proxy.port, b"ping") == b"ping"
    elapsed = time.monotonic() - start
    # held once on the way there and once on the way back (a lower bound: a busy machine only
    # makes the round trip longer)
    assert elapsed >= 2 * DELAY_MS / 1000 * 0.9


async def test_cleared_delay_holds_nothing_new(proxy: LinkProxy) -> None:
    # no upper bound on a round trip's time (a loaded machine takes what it takes): the delay
    # set is far longer than the deadline, so a round trip that beats the deadline was not held
    proxy.set_delay(Delay(HOLD_LONGER_THAN_DEADLINE_MS, 0.0))
    _reader, writer = await _connect(proxy.port)
    try:
        writer.write(b"held")
        await writer.drain()
        # the real condition, polled: the proxy has read the chunk and holds it (the echo
        # server has nothing to send back, so every pending byte is this chunk)
        await _until(lambda: proxy.pending_bytes == len(b"held"), "the delayed chunk is queued")

        proxy.set_delay(Delay())
        # chunks read from now on are due at once; the held one keeps its due time
        assert await _roundtrip(proxy.port, b"ping") == b"ping"
        assert proxy.pending_bytes == len(b"held")
    finally:
        writer.close()


async def test_jittered_delay_never_reorders(proxy: LinkProxy) -> None:
    # jitter as large as the mean: later chunks often draw shorter delays than earlier ones
    proxy.rng = random.Random(7)
    proxy.set_delay(Delay(20.0, 20.0))
    reader, writer = await _connect(proxy.port)
    expected = b""
    try:
        for i in range(40):
            chunk = f"<{i:03d}>".encode() * (i + 1)
            expected += chunk
            writer.write(chunk)
            await writer.drain()
            await asyncio.sleep(0.002)  # separate chunks, each with its own delay draw
        got = await asyncio.wait_for(reader.readexactly(len(expected)), IO_TIMEOUT_S)
    finally:
        writer.close()
    assert got == expected


async def test_stalled_destination_backpressures_the_sender() -> None:
    stalled: list[asyncio.StreamWriter] = []
    release = asyncio.Event()

    async def never_reads(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stalled.append(writer)
        await release.wait()
        writer.close()

    server = await asyncio.start_server(never_reads, HOST, 0)
    p = LinkProxy("a", "b", int(server.sockets[0].getsockname()[1]))
    await p.start()
    writer: asyncio.StreamWriter | None = None
    try:
        _reader, writer = await _connect(p.port)
        block = b"x" * (1024 * 1024)

        async def flood() -> None:
            assert writer is not None
            for _ in range(BACKPRESSURE_TOTAL_BYTES // len(block)):
                writer.write(block)
                await writer.drain()

        with pytest.raises(TimeoutError):
            await asyncio.wait_for(flood(), BACKPRESSURE_WAIT_S)
        assert 0 < p.pending_bytes <= PENDING_BYTES_MAX + READ_CHUNK_BYTES
    finally:
        release.set()
        if writer is not None:
            writer.close()
        await p.close()
        server.close()


async def test_link_proxies_control_each_link(echo_port: int) -> None:
    links = [("a", "b"), ("b", "a"), ("a", "c")]
    proxies = LinkProxies(dict.fromkeys(links, echo_port), rng=random.Random(1))
    await proxies.start()
    try:
        assert len({proxies.port(link) for link in links}) == len(links)
        proxies.block([("a", "b")])
        assert proxies.blocked == frozenset({("a", "b")})
        reader, writer = await _connect(proxies.port(("a", "b")))
        assert await _closed_by_peer(reader)
        writer.close()
        assert await _roundtrip(proxies.port(("b", "a")), b"ok") == b"ok"

        proxies.set_delay(30.0, 5.0, links=[("a", "c")])
        assert proxies.delays()[("a", "c")] == Delay(30.0, 5.0)
        assert proxies.delays()[("b", "a")] == Delay()
        with pytest.raises(ValueError):
            proxies.set_delay(-1.0)

        proxies.unblock_all()
        assert proxies.blocked == frozenset()
        assert await _roundtrip(proxies.port(("a", "b")), b"ok") == b"ok"
    finally:
        with contextlib.suppress(Exception):
            await proxies.close()


def test_delay_samples_stay_in_range_and_non_negative() -> None:
    rng = random.Random(3)
    assert Delay().sample_s(rng) == 0.0
    samples = [Delay(10.0, 20.0).sample_s(rng) for _ in range(1000)]
    assert min(samples) == 0.0
    assert max(samples) <= 0.030
    assert all(s >= 0 for s in samples)


async def test_link_proxies_take_their_ports_from_a_given_range(echo_port: int) -> None:
    links = [("a", "b"), ("b", "a")]
    low = free_port()
    with socket.socket() as squatter:  # a port of the range in use is skipped
        squatter.bind(("127.0.0.1", low))
        span = range(low, low + 40)
        proxies = LinkProxies(dict.fromkeys(links, echo_port), rng=random.Random(1))
        await proxies.start(span)
        try:
            ports = {proxies.port(link) for link in links}
            assert len(ports) == 2 and ports <= set(span) and low not in ports
            assert await _roundtrip(proxies.port(("a", "b")), b"ok") == b"ok"
        finally:
            await proxies.close()
    crowded = LinkProxies(dict.fromkeys(links, echo_port), rng=random.Random(1))
    with pytest.raises(OSError, match="no free port"):
        await crowded.start(range(0))


def test_a_chaos_port_range_must_hold_every_listener() -> None:
    assert ports_needed(3) == 15 and ports_needed(5) == 35
    with pytest.raises(ValueError, match="too small"):
        ChaosOptions(nodes=5, ports=range(20000, 20030)).validate()
    ChaosOptions(nodes=3, ports=range(20000, 20015)).validate()
