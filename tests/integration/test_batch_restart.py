"""Atomic batches through a crash: a batch staged but not committed when the server is SIGKILLed
leaves no trace after the restart (and its next message finds the batch unknown), while a batch
whose commit was acknowledged is there whole, on contiguous sequences.

Runs on nats-server first (it removes its staging directory on start) and then on jetraft (which
stages in memory and commits a batch as one log entry).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from tests.integration.clients import JETRAFT_KIND, NATS_KIND, SERVER_KINDS, connect
from tests.servers import ServerProc, jetraft_proc, nats_server_proc

pytestmark = pytest.mark.integration

STREAM = "ATOMIC"
REQUEST_TIMEOUT_S = 5.0
COMMITTED_MSGS = 40
STAGED_MSGS = 7

_PROCS: dict[str, Callable[[Path], ServerProc]] = {
    NATS_KIND: lambda tmp: nats_server_proc(tmp),
    JETRAFT_KIND: lambda tmp: jetraft_proc(tmp),
}


def _headers(batch_id: str, seq: int, commit: bool = False) -> dict[str, str]:
    headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(seq)}
    if commit:
        headers["Nats-Batch-Commit"] = "1"
    return headers


async def _api(nc: NATS, subject: str, body: dict[str, object] | None = None) -> dict[str, object]:
    payload = json.dumps(body).encode() if body is not None else b""
    msg = await nc.request(f"$JS.API.{subject}", payload, timeout=REQUEST_TIMEOUT_S)
    reply: dict[str, object] = json.loads(msg.data)
    return reply


async def _before_crash(url: str) -> None:
    nc = await connect(url)
    try:
        created = await _api(
            nc,
            f"STREAM.CREATE.{STREAM}",
            {"name": STREAM, "subjects": ["at.>"], "allow_atomic": True},
        )
        assert "error" not in created, created
        for seq in range(1, COMMITTED_MSGS + 1):
            last = seq == COMMITTED_MSGS
            subject = f"at.done.{seq % 3}"
            if last:
                msg = await nc.request(
                    subject,
                    f"done-{seq}".encode(),
                    timeout=REQUEST_TIMEOUT_S,
                    headers=_headers("done", seq, commit=True),
                )
                ack = json.loads(msg.data)
                assert ack == {
                    "stream": STREAM,
                    "seq": COMMITTED_MSGS,
                    "batch": "done",
                    "count": COMMITTED_MSGS,
                }
            else:
                await nc.publish(subject, f"done-{seq}".encode(), headers=_headers("done", seq))
        for seq in range(1, STAGED_MSGS + 1):
            msg = await nc.request(
                "at.open",
                f"open-{seq}".encode(),
                timeout=REQUEST_TIMEOUT_S,
                headers=_headers("open", seq),
            )
            assert msg.data == b""  # staged
    finally:
        await nc.close()


async def _after_restart(url: str) -> None:
    nc = await connect(url)
    try:
        info = await _api(nc, f"STREAM.INFO.{STREAM}")
        state = info["state"]
        assert isinstance(state, dict)
        assert (state["messages"], state["first_seq"], state["last_seq"]) == (
            COMMITTED_MSGS,
            1,
            COMMITTED_MSGS,
        )
        for seq in range(1, COMMITTED_MSGS + 1):
            got = await _api(nc, f"STREAM.MSG.GET.{STREAM}", {"seq": seq})
            message = got["message"]
            assert isinstance(message, dict)
            assert message["subject"] == f"at.done.{seq % 3}"
        late = await nc.request(
            "at.open",
            b"open-late",
            timeout=REQUEST_TIMEOUT_S,
            headers=_headers("open", STAGED_MSGS + 1, commit=True),
        )
        error = json.loads(late.data)["error"]
        assert error["err_code"] == 10176
        info = await _api(nc, f"STREAM.INFO.{STREAM}")
        state = info["state"]
        assert isinstance(state, dict) and state["messages"] == COMMITTED_MSGS
    finally:
        await nc.close()


@pytest.mark.parametrize("kind", SERVER_KINDS)
async def test_sigkill_keeps_committed_batches_whole_and_staged_ones_gone(
    kind: str, tmp_path: Path
) -> None:
    proc = _PROCS[kind](tmp_path)
    proc.start()
    try:
        await _before_crash(proc.url)
        proc.kill()
        proc.start()
        await _after_restart(proc.url)
    finally:
        proc.stop()
