"""Key-value buckets through nats-py 2.16 (``js.create_key_value``): a KV bucket is a stream with
``max_msgs_per_subject`` = history, and its optimistic concurrency is the
``Nats-Expected-Last-Subject-Sequence`` publish check. Same assertions on both servers.

``kv.history``/``kv.keys``/watchers are left out: nats-py builds them on an ordered consumer.
"""

from __future__ import annotations

import pytest
from nats.js.client import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

pytestmark = pytest.mark.integration

BUCKET = "cfg"
KV_STREAM = f"KV_{BUCKET}"
HISTORY = 3


async def test_put_get_update_and_revision_conflict(js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket=BUCKET, history=HISTORY)
    first = await kv.put("color", b"red")
    assert first == 1
    entry = await kv.get("color")
    assert (entry.key, entry.value, entry.revision) == ("color", b"red", 1)

    second = await kv.update("color", b"green", last=first)
    assert second == 2
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.update("color", b"blue", last=first)  # stale revision
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.create("color", b"blue")  # key exists
    assert (await kv.get("color")).value == b"green"

    created = await kv.create("size", b"L")
    assert created == 3
    with pytest.raises(KeyNotFoundError):
        await kv.get("missing")


async def test_delete_then_old_revisions_and_recreate(js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket=BUCKET, history=HISTORY)
    r1 = await kv.put("k", b"v1")
    r2 = await kv.put("k", b"v2")
    await kv.delete("k")
    with pytest.raises(KeyNotFoundError) as deleted:
        await kv.get("k")
    assert deleted.value.op == "DEL"
    assert deleted.value.entry is not None and deleted.value.entry.revision == 3

    assert (await kv.get("k", revision=r1)).value == b"v1"
    assert (await kv.get("k", revision=r2)).value == b"v2"
    marker = await js.get_msg(KV_STREAM, seq=3)
    assert marker.headers == {"KV-Operation": "DEL"}
    assert marker.data is None

    recreated = await kv.create("k", b"again")  # create after a delete uses the marker's seq
    assert recreated == 4
    assert (await kv.get("k")).value == b"again"


async def test_history_limit_keeps_only_the_newest_revisions(js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket=BUCKET, history=HISTORY)
    for value in (b"1", b"2", b"3", b"4", b"5"):
        await kv.put("k", value)
    info = await js.stream_info(KV_STREAM)
    assert info.config.max_msgs_per_subject == HISTORY
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (3, 3, 5)
    with pytest.raises(KeyNotFoundError):
        await kv.get("k", revision=2)
    assert (await kv.get("k", revision=3)).value == b"3"
    assert (await kv.get("k")).revision == 5
