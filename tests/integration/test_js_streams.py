"""Stream API through nats-py 2.16: publish/PubAck, MSG.GET, Direct Get, info, update, purge,
message delete and stream delete — the same assertions on nats-server and on jetraft."""

from __future__ import annotations

from typing import Any

import pytest
from nats.errors import NoRespondersError
from nats.js.api import StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, BadRequestError, NoStreamResponseError, NotFoundError

pytestmark = pytest.mark.integration

STREAM = "ORDERS"
SUBJECTS = ["orders.>"]


async def _stream(js: JetStreamContext, **config: Any) -> None:
    await js.add_stream(name=STREAM, subjects=SUBJECTS, **config)


async def test_publish_returns_pub_ack_with_sequences(js: JetStreamContext) -> None:
    await _stream(js)
    first = await js.publish("orders.new", b"one")
    second = await js.publish("orders.paid", b"two")
    assert (first.stream, first.seq, first.duplicate) == (STREAM, 1, None)
    assert (second.stream, second.seq) == (STREAM, 2)


async def test_duplicate_msg_id_is_acked_with_the_original_seq(js: JetStreamContext) -> None:
    await _stream(js)
    await js.publish("orders.new", b"a")
    original = await js.publish("orders.new", b"b", headers={"Nats-Msg-Id": "m-1"})
    repeat = await js.publish("orders.new", b"b", headers={"Nats-Msg-Id": "m-1"})
    assert original.seq == 2 and not original.duplicate
    assert repeat.seq == 2 and repeat.duplicate is True
    info = await js.stream_info(STREAM)
    assert info.state.messages == 2


async def test_publish_to_a_subject_without_stream_has_no_responders(
    js: JetStreamContext,
) -> None:
    await _stream(js)
    with pytest.raises(NoStreamResponseError):
        await js.publish("elsewhere.x", b"lost")


async def test_msg_get_by_seq_and_last_by_subject(js: JetStreamContext) -> None:
    await _stream(js)
    await js.publish("orders.new", b"n1", headers={"Foo": "bar"})
    await js.publish("orders.paid", b"p1")
    await js.publish("orders.new", b"n2")

    by_seq = await js.get_msg(STREAM, seq=1)
    assert (by_seq.subject, by_seq.seq, by_seq.data) == ("orders.new", 1, b"n1")
    assert by_seq.headers == {"Foo": "bar"}
    assert by_seq.time is not None

    last = await js.get_msg(STREAM, subject="orders.new")
    assert (last.subject, last.seq, last.data, last.headers) == ("orders.new", 3, b"n2", None)

    with pytest.raises(NotFoundError) as missing:
        await js.get_msg(STREAM, seq=99)
    assert missing.value.err_code == 10037


async def test_direct_get_by_subject_and_by_seq(js: JetStreamContext) -> None:
    await _stream(js, allow_direct=True)
    await js.publish("orders.new", b"n1", headers={"Foo": "bar"})
    await js.publish("orders.paid", b"p1")

    last = await js.get_msg(STREAM, subject="orders.new", direct=True)
    assert (last.subject, last.seq, last.data) == ("orders.new", 1, b"n1")
    assert last.headers is not None
    assert last.headers["Foo"] == "bar"
    assert last.headers["Nats-Stream"] == STREAM
    assert last.headers["Nats-Sequence"] == "1"
    assert last.time is not None

    by_seq = await js.get_msg(STREAM, seq=2, direct=True)
    assert (by_seq.subject, by_seq.seq, by_seq.data) == ("orders.paid", 2, b"p1")

    with pytest.raises(NotFoundError):
        await js.get_msg(STREAM, seq=3, direct=True)
    with pytest.raises(NotFoundError):
        await js.get_msg(STREAM, subject="orders.none", direct=True)


async def test_stream_info_reports_config_and_state(js: JetStreamContext) -> None:
    created = await js.add_stream(
        name=STREAM, subjects=SUBJECTS, storage=StorageType.FILE, allow_direct=True
    )
    assert created.config.name == STREAM
    assert created.state.messages == 0
    for payload in (b"a", b"bb", b"ccc"):
        await js.publish("orders.x", payload)
    info = await js.stream_info(STREAM)
    assert info.config.subjects == SUBJECTS
    assert info.config.allow_direct is True
    assert info.config.storage == StorageType.FILE
    assert info.config.max_msgs == -1
    assert info.config.duplicate_window == 120.0
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (3, 1, 3)
    assert info.state.bytes > 0


async def test_update_stream_toggles_direct_get(js: JetStreamContext) -> None:
    await _stream(js, allow_direct=True)
    await js.publish("orders.new", b"n1")
    assert (await js.get_msg(STREAM, seq=1, direct=True)).data == b"n1"

    off = await js.update_stream(StreamConfig(name=STREAM, subjects=SUBJECTS, allow_direct=False))
    assert off.config.allow_direct is False
    with pytest.raises(NoRespondersError):
        await js.get_msg(STREAM, seq=1, direct=True)
    assert (await js.get_msg(STREAM, seq=1)).data == b"n1"  # MSG.GET is unaffected

    on = await js.update_stream(StreamConfig(name=STREAM, subjects=SUBJECTS, allow_direct=True))
    assert on.config.allow_direct is True
    assert (await js.get_msg(STREAM, seq=1, direct=True)).data == b"n1"


async def test_add_stream_with_a_different_config_is_rejected(js: JetStreamContext) -> None:
    await _stream(js)
    with pytest.raises(BadRequestError) as conflict:
        await js.add_stream(name=STREAM, subjects=["other.>"])
    assert conflict.value.err_code == 10058


async def test_purge_stream_all_and_by_subject(js: JetStreamContext) -> None:
    await _stream(js)
    for subject in ("orders.a", "orders.b", "orders.a", "orders.b"):
        await js.publish(subject, b"x")
    assert await js.purge_stream(STREAM, subject="orders.a") is True
    info = await js.stream_info(STREAM)
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (2, 2, 4)
    with pytest.raises(NotFoundError):
        await js.get_msg(STREAM, subject="orders.a")

    assert await js.purge_stream(STREAM) is True
    info = await js.stream_info(STREAM)
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (0, 5, 4)
    ack = await js.publish("orders.a", b"after")
    assert ack.seq == 5


@pytest.mark.parametrize(
    ("storage", "code", "err_code", "description"),
    [
        # Probed on nats-server 2.15.1: the two stores answer a repeated delete differently.
        (StorageType.FILE, 500, 10057, "no message found"),
        (StorageType.MEMORY, 400, 10043, "sequence 1 not found"),
    ],
)
async def test_delete_msg(
    js: JetStreamContext, storage: StorageType, code: int, err_code: int, description: str
) -> None:
    await _stream(js, storage=storage)
    await js.publish("orders.a", b"first")
    await js.publish("orders.a", b"second")
    assert await js.delete_msg(STREAM, 1) is True
    with pytest.raises(NotFoundError):
        await js.get_msg(STREAM, seq=1)
    info = await js.stream_info(STREAM)
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (1, 2, 2)

    with pytest.raises(APIError) as again:
        await js.delete_msg(STREAM, 1)
    assert (again.value.code, again.value.err_code) == (code, err_code)
    assert again.value.description == description


async def test_delete_stream(js: JetStreamContext) -> None:
    await _stream(js)
    await js.publish("orders.a", b"x")
    assert await js.delete_stream(STREAM) is True
    with pytest.raises(NotFoundError) as gone:
        await js.stream_info(STREAM)
    assert gone.value.err_code == 10059
    with pytest.raises(NoStreamResponseError):
        await js.publish("orders.a", b"x")
