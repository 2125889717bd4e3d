"""``cluster/batching.py`` and the stream host's batch path, without a network: replies, the
abandon advisory, the idle timeout on an injected clock (and once on the real timer), allow_atomic
switched off, the ``jetstream.limits.batch`` config block, and a whole batch through StreamHost."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from cluster.batching import (
    ADVISORY_SUBJECT_PREFIX,
    ADVISORY_TYPE,
    AtomicBatches,
    BatchConfigError,
    BatchContext,
    batch_limits_from_config,
    parse_batch_limits,
)
from cluster.cli import options_from
from cluster.config_file import parse_config
from cluster.local_log import LocalLog
from cluster.router import Router
from cluster.stream_host import StreamHost
from engine.batch import BatchLimits, CommitReady
from engine.entries import InboundMsg, UpdateConfigEntry
from engine.memstore import MemoryStore
from engine.stream import Stream
from protocol.models import StreamConfig
from tests.engine.batch.batch_builders import bmsg, hdr
from tests.engine.stream.harness import make_config

MS = 1_000_000
RFC3339_NANO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")
Published = list[tuple[str, bytes]]


class Clock:
    def __init__(self) -> None:
        self.now_ns = 1_000 * MS

    def __call__(self) -> int:
        return self.now_ns


def capture(router: Router) -> Published:
    """Everything published on the router (subject, payload)."""
    seen: Published = []

    def on_msg(subject: str, _reply: str | None, _hdr: bytes | None, payload: bytes) -> None:
        seen.append((subject, payload))

    router.subscribe_internal(">", on_msg)
    return seen


def batches(
    limits: BatchLimits | None = None, name: str = "S"
) -> tuple[AtomicBatches, Published, Clock]:
    router = Router()
    seen = capture(router)
    clock = Clock()
    context = BatchContext(limits or BatchLimits())
    return AtomicBatches(lambda: name, router, context, clock_ns=clock), seen, clock


def send(ab: AtomicBatches, msg: InboundMsg, reply: str | None, config: StreamConfig) -> Any:
    batch_id = msg.hdr.split(b"Nats-Batch-Id: ")[1].split(b"\r\n")[0].decode()
    return ab.on_message(msg, reply, batch_id, config)


ATOMIC = make_config(allow_atomic=True)


async def test_staged_messages_get_an_empty_reply_only_if_they_asked() -> None:
    ab, seen, _ = batches()
    assert send(ab, bmsg("b", 1), "r.1", ATOMIC) is None
    assert send(ab, bmsg("b", 2), None, ATOMIC) is None
    assert seen == [("r.1", b"")]
    ready = send(ab, bmsg("b", 3, "1"), "r.3", ATOMIC)
    assert isinstance(ready, CommitReady) and len(ready.msgs) == 3
    assert seen == [("r.1", b"")]  # the commit's PubAck is the host's, after the apply


async def test_errors_are_pub_acks_and_abandons_are_advised_first() -> None:
    ab, seen, _ = batches()
    send(ab, bmsg("b", 1), None, ATOMIC)
    send(ab, bmsg("b", 3), "r.gap", ATOMIC)
    (adv_subject, adv_body), (reply, body) = seen
    assert reply == "r.gap"
    assert body == (
        b'{"error":{"code":400,"err_code":10176,"description":"atomic publish batch is '
        b'incomplete"},"stream":"S","seq":0}'
    )
    assert adv_subject == ADVISORY_SUBJECT_PREFIX + "S"
    advisory = json.loads(adv_body)
    assert list(advisory) == ["type", "id", "timestamp", "stream", "batch", "reason"]
    assert (
        advisory["type"] == ADVISORY_TYPE == "io.nats.jetstream.advisory.v1.stream_batch_abandoned"
    )
    assert (advisory["stream"], advisory["batch"], advisory["reason"]) == ("S", "b", "incomplete")
    assert re.fullmatch(r"[0-9A-Za-z]{22}", advisory["id"])
    assert RFC3339_NANO.fullmatch(advisory["timestamp"])


async def test_rejections_without_an_advisory() -> None:
    ab, seen, _ = batches()
    send(ab, bmsg("b", 2), "r.1", make_config(allow_atomic=False))
    send(ab, bmsg("b", 1, "nope"), "r.2", ATOMIC)
    assert [subject for subject, _ in seen] == ["r.1", "r.2"]
    assert b"10174" in seen[0][1] and b"10200" in seen[1][1]


async def test_no_ack_stream_gets_no_replies_but_advisories() -> None:
    ab, seen, _ = batches()
    quiet = make_config(allow_atomic=True, no_ack=True)
    send(ab, bmsg("b", 1), "r.1", quiet)
    send(ab, bmsg("b", 3), "r.2", quiet)
    assert [subject for subject, _ in seen] == [ADVISORY_SUBJECT_PREFIX + "S"]


async def test_idle_timeout_abandons_with_an_advisory_and_no_reply() -> None:
    ab, seen, clock = batches(BatchLimits(idle_timeout_ns=100 * MS))
    send(ab, bmsg("a", 1), None, ATOMIC)
    clock.now_ns += 60 * MS
    send(ab, bmsg("b", 1), None, ATOMIC)
    clock.now_ns += 50 * MS
    assert ab.expire_due() == ["a"]
    clock.now_ns += 50 * MS
    assert ab.expire_due() == ["b"]
    assert [json.loads(body)["reason"] for _, body in seen] == ["timeout", "timeout"]
    seen.clear()
    send(ab, bmsg("a", 2, "1"), "r.late", ATOMIC)
    assert [subject for subject, _ in seen] == ["r.late"]
    assert b"10176" in seen[0][1]


async def test_the_real_timer_fires_and_rearms() -> None:
    router = Router()
    seen = capture(router)
    ab = AtomicBatches(lambda: "S", router, BatchContext(BatchLimits(idle_timeout_ns=30 * MS)))
    send(ab, bmsg("a", 1), None, ATOMIC)
    await asyncio.sleep(0.01)
    send(ab, bmsg("b", 1), None, ATOMIC)
    for _ in range(100):
        if len(seen) == 2:
            break
        await asyncio.sleep(0.01)
    assert [json.loads(body)["batch"] for _, body in seen] == ["a", "b"]
    assert len(ab.stager) == 0
    ab.close()


async def test_switching_allow_atomic_off_drops_open_batches_silently() -> None:
    ab, seen, _ = batches()
    context_counter = ab.stager
    send(ab, bmsg("a", 1), None, ATOMIC)
    ab.config_changed(ATOMIC)
    assert len(context_counter) == 1
    ab.config_changed(make_config(allow_atomic=False))
    assert len(context_counter) == 0 and seen == []
    send(ab, bmsg("a", 2), "r.off", make_config(allow_atomic=False))
    send(ab, bmsg("a", 2), "r.on", ATOMIC)
    assert [b"10174" in seen[0][1], b"10176" in seen[1][1]] == [True, True]


# ------------------------------------------------------------------------------ config


def test_batch_limits_config_block() -> None:
    conf = parse_config(
        "jetstream { store_dir: /tmp/x\n limits { BATCH { max_inflight_per_stream: 2,"
        " Max_Inflight_Total = 3\n max_msgs 5, timeout: 500ms } } }"
    )
    assert batch_limits_from_config(conf) == BatchLimits(2, 3, 5, 500 * MS)
    quoted = parse_config('jetstream { limits { batch { timeout: "1m30s" } } }')
    assert batch_limits_from_config(quoted) == BatchLimits(idle_timeout_ns=90_000 * MS)
    assert batch_limits_from_config(parse_config("jetstream { store_dir: x }")) is None
    assert batch_limits_from_config(parse_config("port: 4222")) is None


def test_non_positive_values_keep_the_defaults() -> None:
    limits = parse_batch_limits({"max_msgs": 0, "max_inflight_total": -1, "timeout": "-1s"})
    assert limits == BatchLimits()


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"timeout": 2}, "expected a duration"),
        ({"timeout": "abc"}, "invalid duration"),
        ({"max_msgs": "5"}, "expected an integer"),
        ({"max_msgs": True}, "expected an integer"),
        ({"max_batch": 5}, "unknown field"),
        ("batch", "Expected a map"),
    ],
)
def test_bad_batch_config_is_an_error(block: Any, message: str) -> None:
    with pytest.raises(BatchConfigError, match=message):
        parse_batch_limits(block)


def _args(config: Path) -> argparse.Namespace:
    return argparse.Namespace(
        addr=None, port=None, server_name=None, store_dir=None, http_port=None, config=str(config)
    )


def test_cli_reads_the_batch_limits(tmp_path: Path) -> None:
    conf = tmp_path / "j.conf"
    conf.write_text("jetstream { limits { batch { max_msgs: 7, timeout: 2s } } }\n")
    opts = options_from(_args(conf))
    assert opts.batch_limits == BatchLimits(msgs_max=7, idle_timeout_ns=2_000 * MS)
    conf.write_text("jetstream { limits { batch { timeout: 2 } } }\n")
    with pytest.raises(SystemExit, match="timeout"):
        options_from(_args(conf))


# ------------------------------------------------------------------------------ stream host


async def test_a_batch_through_the_stream_host() -> None:
    router = Router()
    replies: Published = []

    def on_reply(subject: str, _reply: str | None, _hdr: bytes | None, payload: bytes) -> None:
        replies.append((subject, payload))

    router.subscribe_internal("_INBOX.>", on_reply)
    config = make_config(allow_atomic=True)
    store = MemoryStore()
    host = StreamHost(
        Stream(config, store, 1),
        store,
        router,
        lambda owner: LocalLog(owner, store, durable=False),
    )
    host.start()
    try:
        publish = router.publish
        publish("S.a", "_INBOX.1", bmsg("b", 1).hdr, b"one")
        publish("S.b", None, bmsg("b", 2).hdr, b"two")
        publish("S.a", None, b"", b"plain")
        publish("S.a", "_INBOX.3", bmsg("b", 3, "1").hdr, b"three")
        publish("S.a", "_INBOX.4", bmsg("c", 1, "1", ("Nats-Expected-Stream", "X")).hdr, b"x")
        publish("S.a", "_INBOX.5", bmsg("d", 1).hdr, b"d1")
        publish("S.a", "_INBOX.6", bmsg("d", 2, "eob").hdr, b"")
        publish("S.a", "_INBOX.7", hdr(("Nats-Batch-Id", ""), ("Nats-Batch-Sequence", "1")), b"p")
        for _ in range(200):
            if len(replies) == 6:
                break
            await asyncio.sleep(0.005)
        assert dict(replies) == {
            "_INBOX.1": b"",
            "_INBOX.3": b'{"stream":"S","seq":4,"batch":"b","count":3}',
            "_INBOX.4": b'{"error":{"code":400,"err_code":10060,"description":"expected stream '
            b'does not match"},"stream":"S","seq":0}',
            "_INBOX.5": b"",
            "_INBOX.6": b'{"stream":"S","seq":5,"batch":"d","count":1}',
            "_INBOX.7": b'{"stream":"S","seq":6}',
        }
        stored = [(m.seq, m.subject, m.data) for m in store.scan()]
        assert stored == [
            (1, "S.a", b"plain"),
            (2, "S.a", b"one"),
            (3, "S.b", b"two"),
            (4, "S.a", b"three"),
            (5, "S.a", b"d1"),
            (6, "S.a", b"p"),
        ]
        publish("S.a", None, bmsg("e", 1).hdr, b"open")
        off = config.model_copy(update={"allow_atomic": False})
        await host.propose(UpdateConfigEntry(2, off.model_dump_json().encode()))
        publish("S.a", "_INBOX.8", bmsg("e", 2, "1").hdr, b"late")
        assert replies[-1][0] == "_INBOX.8" and b"10174" in replies[-1][1]
    finally:
        await host.close()
