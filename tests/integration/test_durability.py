"""Durability through a real process: an acknowledged publish survives SIGKILL and a torn final
record, and SIGTERM is a clean shutdown with exit code 0.

The kill tests are jetraft-only: jetraft acknowledges only after its write is synced, which is a
promise nats-server does not make. The SIGTERM test runs on both servers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from nats.js.api import StorageType
from nats.js.errors import NotFoundError

from tests.integration.clients import JETRAFT_KIND, NATS_KIND, connect
from tests.servers import ServerProc, jetraft_proc, nats_server_proc, probe_ready

pytestmark = pytest.mark.integration

STREAM = "DURABLE"
SUBJECTS = ["dur.>"]
ACKED_MSGS = 120
GARBAGE = bytes(range(256))[::-7] * 3  # not a valid record of any sane format
READY_TIMEOUT_S = 20.0
SIGTERM_EXIT_TIMEOUT_S = 5.0
POLL_INTERVAL_S = 0.05

Acked = list[tuple[int, str, bytes]]


def _payload(i: int) -> bytes:
    return f"payload-{i}-".encode() * (1 + i % 7)


async def _publish_acked(url: str, count: int) -> Acked:
    nc = await connect(url)
    try:
        js = nc.jetstream(timeout=5.0)
        await js.add_stream(name=STREAM, subjects=SUBJECTS, storage=StorageType.FILE)
        acked: Acked = []
        for i in range(count):
            subject = f"dur.{i % 5}"
            ack = await js.publish(subject, _payload(i))
            acked.append((ack.seq, subject, _payload(i)))
        return acked
    finally:
        await nc.close()


async def _assert_all_present(url: str, acked: Acked) -> None:
    nc = await connect(url)
    try:
        js = nc.jetstream(timeout=5.0)
        info = await js.stream_info(STREAM)
        assert info.state.messages == len(acked)
        assert (info.state.first_seq, info.state.last_seq) == (1, len(acked))
        for seq, subject, payload in acked:
            msg = await js.get_msg(STREAM, seq=seq)
            assert (msg.seq, msg.subject, msg.data) == (seq, subject, payload)
        after = await js.publish("dur.after", b"after restart")
        assert after.seq == len(acked) + 1
        assert (await js.get_msg(STREAM, seq=after.seq)).data == b"after restart"
    finally:
        await nc.close()


def _newest_file(root: Path) -> Path:
    files = [path for path in root.rglob("*") if path.is_file() and not path.is_symlink()]
    assert files, f"no files under {root}"
    return max(files, key=lambda path: path.stat().st_mtime_ns)


def newest_stream_file(store_dir: Path, stream: str) -> Path:
    """The newest regular file under the stream's directory, or under the whole store dir."""
    stream_dirs = [path for path in store_dir.rglob(stream) if path.is_dir()]
    roots = [d for d in stream_dirs if any(p.is_file() for p in d.rglob("*"))]
    return _newest_file(roots[0] if roots else store_dir)


async def test_acked_messages_survive_sigkill(jetraft_server: ServerProc) -> None:
    acked = await _publish_acked(jetraft_server.url, ACKED_MSGS)
    assert [seq for seq, _, _ in acked] == list(range(1, ACKED_MSGS + 1))
    jetraft_server.kill()
    jetraft_server.start()
    await _assert_all_present(jetraft_server.url, acked)


async def test_torn_final_record_is_tolerated(jetraft_server: ServerProc) -> None:
    acked = await _publish_acked(jetraft_server.url, ACKED_MSGS)
    jetraft_server.kill()
    victim = newest_stream_file(jetraft_server.store_dir, STREAM)
    size_before = victim.stat().st_size
    with open(victim, "ab") as file:
        file.write(GARBAGE)
    assert victim.stat().st_size == size_before + len(GARBAGE)
    jetraft_server.start()
    await _assert_all_present(jetraft_server.url, acked)


def _wait(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(POLL_INTERVAL_S)
    return predicate()


@pytest.mark.parametrize("kind", [NATS_KIND, JETRAFT_KIND])
async def test_sigterm_exits_zero_and_keeps_data(kind: str, tmp_path: Path) -> None:
    proc = (nats_server_proc if kind == NATS_KIND else jetraft_proc)(tmp_path)
    with open(proc.log_path, "ab") as log:
        popen = subprocess.Popen(
            proc.argv, cwd=proc.cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
    try:
        assert _wait(lambda: popen.poll() is None and probe_ready(proc.port), READY_TIMEOUT_S)
        acked = await _publish_acked(proc.url, 10)
        nc = await connect(proc.url)  # a connected client must not hold up the shutdown
        try:
            os.kill(popen.pid, signal.SIGTERM)
            code = popen.wait(timeout=SIGTERM_EXIT_TIMEOUT_S)
        finally:
            await nc.close()
        assert code == 0, proc.log_tail()
    finally:
        if popen.poll() is None:
            os.kill(popen.pid, signal.SIGKILL)
            popen.wait(timeout=SIGTERM_EXIT_TIMEOUT_S)
    proc.start()
    try:
        await _assert_all_present(proc.url, acked)
    finally:
        proc.stop()


async def test_corrupt_record_is_reported_and_never_served(jetraft_server: ServerProc) -> None:
    acked = await _publish_acked(jetraft_server.url, ACKED_MSGS)
    jetraft_server.kill()
    victim_seq, _, victim_payload = acked[50]
    segment = newest_stream_file(jetraft_server.store_dir, STREAM)
    data = bytearray(segment.read_bytes())
    at = data.find(victim_payload)
    assert at > 0 and data.find(victim_payload, at + 1) < 0
    data[at + 3] ^= 0x40  # one flipped bit inside the payload of one record
    segment.write_bytes(bytes(data))
    jetraft_server.start()
    nc = await connect(jetraft_server.url)
    try:
        js = nc.jetstream(timeout=5.0)
        info = await js.stream_info(STREAM)
        assert info.state.messages == ACKED_MSGS - 1
        assert info.state.lost is not None and info.state.lost.msgs == [victim_seq]
        with pytest.raises(NotFoundError):
            await js.get_msg(STREAM, seq=victim_seq)
        for seq, _, payload in (acked[49], acked[51]):
            assert (await js.get_msg(STREAM, seq=seq)).data == payload
        after = await js.publish("dur.after", b"still writable")
        assert after.seq == ACKED_MSGS + 1
    finally:
        await nc.close()
    assert "corrupt record" in jetraft_server.log_tail()
