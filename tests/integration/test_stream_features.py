"""Stream features through nats-py, on nats-server and on jetraft: a KV bucket's republish
(the clients' ``republish`` option), counters read back as a client would, and the settings
jetraft does not act on yet, which it refuses naming them instead of accepting and ignoring."""

from __future__ import annotations

import asyncio
import json

import pytest
from nats.aio.client import Client as NATS
from nats.js.api import KeyValueConfig, RePublish, StreamConfig, StreamSource
from nats.js.client import JetStreamContext

from tests.integration.clients import connect
from tests.servers import ServerProc

REPLY_TIMEOUT_S = 5.0
SCHEDULE_WAIT_S = 5.0


async def test_a_kv_bucket_republishes_its_updates(nc: NATS, js: JetStreamContext) -> None:
    kv = await js.create_key_value(
        KeyValueConfig(bucket="B", republish=RePublish(src=">", dest="watch.>"))
    )
    sub = await nc.subscribe("watch.>")
    await kv.put("k", b"v1")
    await kv.put("k", b"v2")
    first = await sub.next_msg(timeout=REPLY_TIMEOUT_S)
    second = await sub.next_msg(timeout=REPLY_TIMEOUT_S)
    assert first.subject == second.subject == "watch.$KV.B.k"
    assert (first.data, second.data) == (b"v1", b"v2")
    assert second.headers is not None
    assert second.headers["Nats-Stream"] == "KV_B"
    assert second.headers["Nats-Sequence"] == "2"
    assert second.headers["Nats-Last-Sequence"] == "1"


async def test_a_counter_answers_its_total(nc: NATS, js: JetStreamContext) -> None:
    await nc.request(
        "$JS.API.STREAM.CREATE.C",
        json.dumps({"name": "C", "subjects": ["c.>"], "allow_msg_counter": True}).encode(),
        timeout=REPLY_TIMEOUT_S,
    )
    totals = []
    for step in ("5", "3", "-1"):
        ack = await nc.request("c.x", b"", headers={"Nats-Incr": step}, timeout=REPLY_TIMEOUT_S)
        totals.append(json.loads(ack.data)["val"])
    assert totals == ["5", "8", "7"]
    stored = await js.get_last_msg("C", "c.x")
    assert json.loads(stored.data or b"") == {"val": "7"}


async def test_a_stream_sources_two_others(js: JetStreamContext) -> None:
    await js.add_stream(name="A", subjects=["a.>"])
    await js.add_stream(name="B", subjects=["b.>"])
    await js.publish("a.1", b"from a")
    await js.publish("b.1", b"from b")
    await js.add_stream(
        StreamConfig(
            name="BOTH",
            sources=[StreamSource(name="A"), StreamSource(name="B", filter_subject="b.1")],
        )
    )
    await js.publish("a.2", b"later")
    deadline = asyncio.get_running_loop().time() + REPLY_TIMEOUT_S
    while (await js.stream_info("BOTH")).state.messages < 3:
        assert asyncio.get_running_loop().time() < deadline, "sources did not arrive"
        await asyncio.sleep(0.05)
    info = await js.stream_info("BOTH")
    assert sorted(src.name for src in info.sources or []) == ["A", "B"]
    got = sorted([(await js.get_msg("BOTH", seq)).data or b"" for seq in (1, 2, 3)])
    assert got == [b"from a", b"from b", b"later"]


async def test_a_repeating_schedule_publishes_every_second(nc: NATS, js: JetStreamContext) -> None:
    await nc.request(
        "$JS.API.STREAM.CREATE.SCH",
        json.dumps({"name": "SCH", "subjects": ["sch.>"], "allow_msg_schedules": True}).encode(),
        timeout=REPLY_TIMEOUT_S,
    )
    headers = {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "sch.out"}
    ack = await nc.request("sch.tick", b"beat", headers=headers, timeout=REPLY_TIMEOUT_S)
    assert "error" not in json.loads(ack.data)
    sub = await js.subscribe("sch.out", ordered_consumer=True)
    first = await sub.next_msg(timeout=SCHEDULE_WAIT_S)
    second = await sub.next_msg(timeout=SCHEDULE_WAIT_S)
    for msg in (first, second):
        assert msg.data == b"beat"
        assert (msg.headers or {}).get("Nats-Scheduler") == "sch.tick"
    assert first.metadata.timestamp < second.metadata.timestamp
    await sub.unsubscribe()


@pytest.mark.parametrize(
    ("setting", "extra"),
    [
        ("sources[].external", {"sources": [{"name": "O", "external": {"api": "$JS.x.API"}}]}),
        ("allow_batched", {"allow_batched": True}),
    ],
)
async def test_settings_jetraft_does_not_act_on_are_refused_by_name(
    jetraft_server: ServerProc, setting: str, extra: dict[str, object]
) -> None:
    client = await connect(jetraft_server.url)
    try:
        body = {"name": "S", "subjects": ["s.>"], **extra}
        reply = await client.request(
            "$JS.API.STREAM.CREATE.S", json.dumps(body).encode(), timeout=REPLY_TIMEOUT_S
        )
        error = json.loads(reply.data)["error"]
        assert error["err_code"] == 10052
        assert setting in error["description"]
        names = await client.request("$JS.API.STREAM.NAMES", b"", timeout=REPLY_TIMEOUT_S)
        assert json.loads(names.data)["streams"] is None
    finally:
        await client.close()
