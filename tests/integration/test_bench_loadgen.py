"""The benchmark's load generator stays honest: its parser reads split input exactly, its
percentile is nearest-rank, and a small run completes its checked phases on both servers."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.cpu import pids_meter
from bench.loadgen import PHASES, LoadConfig, percentile, run_load
from bench.rawclient import MsgCallback, RawClient, _NatsProtocol
from tests.servers import HOST, ServerProc

SMALL_RUN_MSGS = 300
SMALL_RUN_WINDOW = 50

WIRE = (
    b"INFO {}\r\n"
    b"MSG a.b 1 4\r\nabcd\r\n"
    b"PING\r\n"
    b"HMSG _INBOX.x.7 2 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    b"MSG r 3 reply.to 0\r\n\r\n"
    b"HMSG s 2 reply 16 16\r\nNATS/1.0 503\r\n\r\n\r\n"
    b"+OK\r\n"
)
EXPECTED = [
    (1, b"a.b", None, None, b"abcd"),
    (2, b"_INBOX.x.7", None, b"NATS/1.0\r\n\r\n", b"hi"),
    (3, b"r", b"reply.to", None, b""),
    (2, b"s", b"reply", b"NATS/1.0 503\r\n\r\n", b""),
]


class _FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        raise AssertionError("the parser closed a healthy connection")


def _parse_in_pieces(cuts: list[int]) -> tuple[list[tuple[Any, ...]], bytes]:
    client = RawClient()
    transport = _FakeTransport()
    protocol = _NatsProtocol(client)
    protocol.connection_made(transport)  # type: ignore[arg-type]
    got: list[tuple[Any, ...]] = []

    def collector(sid: int) -> MsgCallback:
        def collect(subject: bytes, reply: bytes | None, hdr: bytes | None, data: bytes) -> None:
            got.append((sid, subject, reply, hdr, data))

        return collect

    for sid in (1, 2, 3):
        # a fresh client numbers its subscriptions from 1, as the wire frames above assume
        assert client.subscribe(b"sub." + str(sid).encode(), collector(sid)) == sid
    transport.written.clear()  # the SUB lines: only what the parser writes is checked
    bounds = [0, *sorted(set(cuts)), len(WIRE)]
    for start, end in itertools.pairwise(bounds):
        protocol.data_received(WIRE[start:end])
    client.check()
    return got, b"".join(transport.written)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(WIRE) - 1), max_size=12))
def test_raw_client_parses_input_split_anywhere(cuts: list[int]) -> None:
    got, written = _parse_in_pieces(cuts)
    assert got == EXPECTED
    assert written == b"PONG\r\n"


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 500) == 50
    assert percentile(values, 990) == 99
    assert percentile(values, 1000) == 100
    assert percentile([7], 990) == 7
    assert percentile([1, 2, 3], 500) == 2


@pytest.mark.integration
async def test_small_load_run_completes_every_phase(server: ServerProc) -> None:
    config = LoadConfig(msgs=SMALL_RUN_MSGS, window=SMALL_RUN_WINDOW)
    meter = pids_meter([server.pid])
    results = await asyncio.wait_for(run_load(HOST, server.port, config, meter), 60)
    assert [result.name for result in results] == list(PHASES)
    for result in results:
        assert result.ops == SMALL_RUN_MSGS
        assert result.rate_per_s > 0
        # a phase this short may take fewer clock ticks of server CPU than are worth reporting
        assert result.server_cpu_s is None or result.server_cpu_s > 0
    assert results[0].p50_us is not None and results[0].p99_us is not None
    assert results[0].p50_us <= results[0].p99_us
