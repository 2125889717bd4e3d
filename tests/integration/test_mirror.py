"""Mirror streams through nats-py, on nats-server (the oracle) and jetraft alike: the mirror holds
the upstream's messages exactly (seq, subject, headers, payload, time), STREAM.INFO reports the
mirror's lag, ``mirror_direct`` follows the origin's ``allow_direct``, and once caught up the
mirror answers Direct Gets addressed to the upstream with its own name in ``Nats-Stream``."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig, StreamSource
from nats.js.client import JetStreamContext

from tests.integration.clients import connect
from tests.servers import ServerProc

pytestmark = pytest.mark.integration

UPSTREAM = "DG"
MIRROR = "DGM"
CATCH_UP_DEADLINE_S = 10.0
POLL_S = 0.05
DIRECT_GETS = 60


async def _api(nc: NATS, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    msg = await nc.request(subject, json.dumps(body).encode(), timeout=5)
    doc: dict[str, Any] = json.loads(msg.data)
    return doc


async def _wait_mirrored(nc: NATS, last_seq: int) -> dict[str, Any]:
    """STREAM.INFO of the mirror once it holds everything through ``last_seq``."""
    deadline = time.monotonic() + CATCH_UP_DEADLINE_S
    while True:
        info = await _api(nc, f"$JS.API.STREAM.INFO.{MIRROR}", {})
        if info["state"]["last_seq"] >= last_seq and info.get("mirror", {}).get("lag") == 0:
            return info
        assert time.monotonic() < deadline, f"mirror not caught up: {info}"
        await asyncio.sleep(POLL_S)


async def _make_upstream(js: JetStreamContext, count: int) -> None:
    await js.add_stream(
        StreamConfig(name=UPSTREAM, subjects=["dg.>"], allow_direct=True, duplicate_window=60)
    )
    for i in range(1, count + 1):
        headers = {"X-Index": str(i)}
        if i % 3 == 0:
            headers["Nats-Msg-Id"] = f"id-{i}"
        await js.publish(f"dg.k{i % 4}", f"payload-{i}".encode(), headers=headers)


async def test_mirror_holds_the_upstream_messages_exactly(nc: NATS, js: JetStreamContext) -> None:
    await _make_upstream(js, 20)
    await js.delete_msg(UPSTREAM, 5)
    created = await _api(
        nc, f"$JS.API.STREAM.CREATE.{MIRROR}", {"name": MIRROR, "mirror": {"name": UPSTREAM}}
    )
    assert "error" not in created, created
    assert created["config"]["mirror_direct"] is True  # forced to the origin's allow_direct
    info = await _wait_mirrored(nc, 20)
    assert info["mirror"]["name"] == UPSTREAM and info["mirror"]["lag"] == 0
    assert info["state"]["messages"] == 19
    for seq in range(1, 21):
        if seq == 5:
            continue
        up = await js.get_msg(UPSTREAM, seq)
        down = await js.get_msg(MIRROR, seq)
        assert (down.seq, down.subject, down.data, down.headers) == (
            up.seq,
            up.subject,
            up.data,
            up.headers,
        )
        assert down.time == up.time  # type: ignore[attr-defined]
    await js.publish("dg.late", b"after")  # and it keeps following
    await _wait_mirrored(nc, 21)
    assert (await js.get_msg(MIRROR, 21)).data == b"after"


async def test_a_mirror_answers_the_upstreams_direct_gets_with_its_own_name(
    nc: NATS, js: JetStreamContext
) -> None:
    await _make_upstream(js, 8)
    await js.add_stream(StreamConfig(name=MIRROR, mirror=StreamSource(name=UPSTREAM)))
    await _wait_mirrored(nc, 8)
    served: Counter[str] = Counter()
    deadline = time.monotonic() + CATCH_UP_DEADLINE_S
    while len(served) < 2:  # the mirror subscribes once caught up: poll until both answered
        assert time.monotonic() < deadline, served
        for _ in range(DIRECT_GETS):
            body = json.dumps({"last_by_subj": "dg.k1"}).encode()
            reply = await nc.request(f"$JS.API.DIRECT.GET.{UPSTREAM}", body, timeout=5)
            assert reply.headers is not None
            assert reply.headers["Nats-Sequence"] == "5"
            assert reply.data == b"payload-5"
            served[reply.headers["Nats-Stream"]] += 1
    assert set(served) == {UPSTREAM, MIRROR}


async def test_a_filtered_mirror_from_a_start_sequence(nc: NATS, js: JetStreamContext) -> None:
    await _make_upstream(js, 12)
    await js.add_stream(
        StreamConfig(
            name=MIRROR, mirror=StreamSource(name=UPSTREAM, opt_start_seq=4, filter_subject="dg.k2")
        )
    )
    expected = [6, 10]  # dg.k2 at 2, 6, 10; from seq 4 on
    deadline = time.monotonic() + CATCH_UP_DEADLINE_S
    while True:
        info = await _api(nc, f"$JS.API.STREAM.INFO.{MIRROR}", {})
        if info["state"]["messages"] == len(expected):
            break
        assert time.monotonic() < deadline, info
        await asyncio.sleep(POLL_S)
    assert [(await js.get_msg(MIRROR, s)).seq for s in expected] == expected
    assert info["mirror"]["filter_subject"] == "dg.k2"
    assert info["state"]["first_seq"] == 6


@pytest.mark.parametrize(
    ("config", "err_code"),
    [
        ({"subjects": ["x"], "mirror": {"name": UPSTREAM}}, 10034),
        ({"mirror_direct": True}, 10052),
        ({"mirror": {"name": UPSTREAM}, "allow_atomic": True}, 10198),
    ],
)
async def test_mirror_config_errors(nc: NATS, config: dict[str, Any], err_code: int) -> None:
    reply = await _api(nc, f"$JS.API.STREAM.CREATE.{MIRROR}", {"name": MIRROR, **config})
    assert reply["error"]["err_code"] == err_code, reply


async def test_publishing_into_a_mirror_is_not_possible(nc: NATS, js: JetStreamContext) -> None:
    await _make_upstream(js, 2)
    await js.add_stream(StreamConfig(name=MIRROR, mirror=StreamSource(name=UPSTREAM)))
    await _wait_mirrored(nc, 2)
    # a mirror has no subjects: a publish to the upstream's subject lands in the upstream only
    ack = await js.publish("dg.k0", b"x")
    assert ack.stream == UPSTREAM
    await _wait_mirrored(nc, 3)


MANY = 3000  # several fetches of FETCH_MSGS_MAX: the kill lands in the middle of the catch-up


async def test_a_mirror_killed_mid_catch_up_resumes_without_gap_or_duplicate(
    jetraft_server: ServerProc,
) -> None:
    """jetraft only (a kill -9 of the one process that holds both streams): the mirror restarts
    from what its store committed and fetches the rest; every upstream message is in the mirror
    exactly once, at its upstream sequence."""
    nc = await connect(jetraft_server.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(StreamConfig(name=UPSTREAM, subjects=["dg.>"], allow_direct=True))
        acks = [js.publish(f"dg.k{i % 5}", f"p{i}".encode()) for i in range(MANY)]
        await asyncio.gather(*acks)
        await js.add_stream(StreamConfig(name=MIRROR, mirror=StreamSource(name=UPSTREAM)))
        deadline = time.monotonic() + CATCH_UP_DEADLINE_S
        while (await _api(nc, f"$JS.API.STREAM.INFO.{MIRROR}", {}))["state"]["last_seq"] == 0:
            assert time.monotonic() < deadline, "the mirror never started"
            await asyncio.sleep(0.005)
    finally:
        await nc.close()
    jetraft_server.kill()
    jetraft_server.restart()
    nc = await connect(jetraft_server.url)
    try:
        js = nc.jetstream(timeout=10)
        info = await _wait_mirrored(nc, MANY)
        assert info["state"]["messages"] == MANY and info["state"]["first_seq"] == 1
        for seq in (1, MANY // 2, MANY):
            assert (await js.get_msg(MIRROR, seq)).data == f"p{seq - 1}".encode()
    finally:
        await nc.close()
