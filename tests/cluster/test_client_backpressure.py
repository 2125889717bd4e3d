"""A client that does not keep up is cut off, in process, against a transport whose socket takes
only what the test lets it: ``max_pending`` counts the transport's unsent bytes too (checked
before the bytes are queued, not after), and the write deadline cuts a reader whose socket stops
taking data or drains too slowly, but not one that keeps up."""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

import pytest

from cluster.client_conn import ATTRIBUTES_FAST_MAX, OUT_FLUSH_BYTES, ClientConnection
from cluster.router import Router

INFO: dict[str, Any] = {"server_id": "S", "proto": 1, "headers": True, "max_payload": 1024}
MAX_PENDING = 4096
DEADLINE_S = 0.2
WAIT_S = 3.0
POLL_S = 0.01


class Socketless(asyncio.Transport):
    """A transport whose "socket" accepts ``accept`` bytes per write; the rest stays buffered
    until the test drains it."""

    def __init__(self, accept: int = 0) -> None:
        super().__init__()
        self.accept = accept
        self.buffered = 0
        self.sent = 0
        self.aborted = False
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        taken = 0 if self.buffered else min(self.accept, len(data))
        self.sent += taken
        self.buffered += len(data) - taken

    def drain(self, n: int) -> None:
        n = min(n, self.buffered)
        self.buffered -= n
        self.sent += n

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def abort(self) -> None:
        self.aborted = True
        self.buffered = 0

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.aborted or self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> None:
        self.n += 1


def _connect(transport: Socketless, counter: Counter, **kw: Any) -> ClientConnection:
    conn = ClientConnection(
        Router(), INFO, 1024, 1, max_pending=MAX_PENDING, on_slow_consumer=counter, **kw
    )
    conn.connection_made(transport)
    return conn


async def _until(cond: Any, timeout_s: float = WAIT_S) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


async def test_max_pending_counts_what_the_transport_still_holds() -> None:
    transport, slow = Socketless(accept=0), Counter()
    conn = _connect(transport, slow)
    await asyncio.sleep(0)  # the INFO is flushed into the transport, where it stays
    conn.send_raw(b"x" * (MAX_PENDING - transport.buffered - 10))
    await asyncio.sleep(0)
    assert transport.buffered == MAX_PENDING - 10 and slow.n == 0
    conn.send_raw(b"y" * 20)  # 10 bytes over, counting the transport's buffer
    assert slow.n == 1 and transport.aborted  # at once: the 20 bytes were never queued
    assert transport.buffered == 0 and not transport.closed  # dropped, not delivered
    conn.send_raw(b"z")
    await asyncio.sleep(0)
    assert transport.buffered == 0


async def test_a_burst_within_one_loop_turn_is_cut_before_it_is_flushed() -> None:
    transport, slow = Socketless(accept=1 << 30), Counter()
    conn = _connect(transport, slow)
    await asyncio.sleep(0)
    sent_before = transport.sent
    for _ in range(100):  # like 100 replies built in one turn for a reader that reads nothing
        conn.send_raw(b"m" * 1024)
    assert slow.n == 1
    await asyncio.sleep(0)
    assert transport.sent == sent_before  # nothing of the burst reached the socket


async def test_a_long_burst_starts_reaching_the_socket_within_the_turn() -> None:
    """Replies built in one loop turn are written once OUT_FLUSH_BYTES have gathered, not all
    at the turn's end; everything arrives, in order."""
    transport, slow = Socketless(accept=1 << 30), Counter()
    conn = ClientConnection(Router(), INFO, 1024, 1, max_pending=1 << 26, on_slow_consumer=slow)
    conn.connection_made(transport)
    await asyncio.sleep(0)
    sent_before = transport.sent
    chunk = 1024
    chunks = 3 * OUT_FLUSH_BYTES // chunk
    conn.send_raw(b"a" * chunk)
    assert transport.sent == sent_before  # a small reply waits for the end of the turn
    for _ in range(chunks - 1):
        conn.send_raw(b"b" * chunk)
    written_in_turn = transport.sent - sent_before
    assert written_in_turn >= 2 * OUT_FLUSH_BYTES  # written while the burst was being built
    await asyncio.sleep(0)
    assert transport.sent - sent_before == chunks * chunk and slow.n == 0


async def test_a_socket_that_takes_nothing_is_cut_after_the_write_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport, slow = Socketless(accept=0), Counter()
    caplog.set_level(logging.WARNING, "jetraft.client")
    started = asyncio.get_running_loop().time()
    _connect(transport, slow, write_deadline_s=DEADLINE_S)
    assert await _until(lambda: transport.aborted)
    elapsed = asyncio.get_running_loop().time() - started
    assert DEADLINE_S * 0.9 <= elapsed < DEADLINE_S * 3
    assert slow.n == 1
    assert "Slow Consumer Detected: WriteDeadline of 200ms exceeded with 1 chunks of" in caplog.text


async def test_a_reader_that_keeps_up_is_not_cut() -> None:
    transport, slow = Socketless(accept=0), Counter()
    conn = _connect(transport, slow, write_deadline_s=DEADLINE_S)
    loop = asyncio.get_running_loop()
    end = loop.time() + 5 * DEADLINE_S
    while loop.time() < end:  # the socket is always behind, but everything leaves in time
        conn.send_raw(b"m" * 512)
        await asyncio.sleep(DEADLINE_S / 4)
        transport.drain(transport.buffered)
    assert not transport.aborted and slow.n == 0


async def test_a_reader_that_drains_too_slowly_is_cut() -> None:
    transport, slow = Socketless(accept=0), Counter()
    conn = _connect(transport, slow, write_deadline_s=DEADLINE_S)
    conn.send_raw(b"m" * 2048)
    loop = asyncio.get_running_loop()
    end = loop.time() + 10 * DEADLINE_S
    while loop.time() < end and not transport.aborted:
        transport.drain(8)  # progress, but the bytes queued first take far longer than allowed
        await asyncio.sleep(DEADLINE_S / 10)
    assert transport.aborted and slow.n == 1


async def test_pause_writing_arms_the_deadline() -> None:
    transport, slow = Socketless(accept=1 << 30), Counter()
    conn = _connect(transport, slow, write_deadline_s=DEADLINE_S)
    await asyncio.sleep(0)
    transport.buffered = 100  # the transport found its socket full after the flush
    conn.pause_writing()
    assert await _until(lambda: transport.aborted)
    assert slow.n == 1


async def test_a_connection_stays_within_cpython_s_fast_attribute_limit() -> None:
    """Past ATTRIBUTES_FAST_MAX instance attributes CPython 3.11 stops specializing attribute
    access on the object, and send_raw, run for every delivery, got ~20% slower; checked on a
    TLS connection whose socket fell behind, the most state a connection carries here."""
    transport, slow = Socketless(accept=0), Counter()
    conn = _connect(transport, slow, tls=ssl.create_default_context(ssl.Purpose.CLIENT_AUTH))
    conn.pause_writing()  # as a transport whose socket is full would
    if not hasattr(conn, "__dict__"):
        # compiled (protocol/native.py): fields in a C struct, no such limit; `make test` runs
        # this file again on the pure Python modules
        pytest.skip("compiled ClientConnection")
    assert len(vars(conn)) <= ATTRIBUTES_FAST_MAX, sorted(vars(conn))
    conn.close()
    plain = _connect(Socketless(accept=0), slow)
    plain.send_raw(b"x")
    await asyncio.sleep(0)  # flushed into a socket that takes nothing: a stall
    assert len(vars(plain)) <= ATTRIBUTES_FAST_MAX, sorted(vars(plain))
    plain.close()
