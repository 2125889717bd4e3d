"""Differential: atomic batch publish (ADR-50), docs/nats-differences.md §4.

Every reply of §4.2 (empty acks, the commit PubAck with ``batch``/``count``, EOB commits, silence
without a reply subject or on a no_ack stream), every error of §4.3 at staging and at commit time,
the stored headers, the abandon advisory of §4.5 (its body, masked only in id and timestamp, and
its key order), the config interactions of §4.6, and the server limits of §4.4 configured low on
freshly started servers (in-flight limits, batch size, a 500 ms idle timeout) so that the timeout
path is checked without waiting 10 s. Batch messages go over raw connections so the exact header
block is what the server sees.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.differential.diff_harness import (
    DIFF_AGAINST_ENV,
    NO_REPLY_TIMEOUT_S,
    Differ,
    Reply,
    Session,
)
from tests.differential.diff_raw import RawConn, header_block, hpub
from tests.servers import ServerProc, start_jetraft, start_nats_server

pytestmark = pytest.mark.differential

BATCH_ID = "Nats-Batch-Id"
BATCH_SEQ = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"
API_LEVEL = "Nats-Required-Api-Level"
MSG_ID = "Nats-Msg-Id"
EXP_STREAM = "Nats-Expected-Stream"
EXP_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXP_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXP_SUBJ_SEQ_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
EXP_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"
TTL = "Nats-TTL"
ADVISORY_PREFIX = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED."
ADVISORY_WAIT_S = 3.0
ADVISORY_EXTRA_WAIT_S = 0.3
DEFAULT_BATCH_MSGS_MAX = 1000
DEFAULT_INFLIGHT_PER_STREAM = 50
CONFIGURED_TIMEOUT_S = 0.5
LIMITS_CONF = (
    "jetstream { limits { batch { max_inflight_per_stream: 2, max_inflight_total: 3, "
    "max_msgs: 5, timeout: 500ms } } }\n"
)
# The timer-reset batch: as many messages as max_msgs allows, so that its steps can be short
# (each gap leaves most of the timeout as margin) and still add up to more than one timeout.
RESET_BATCH_MSGS = 5
RESET_STEP_S = CONFIGURED_TIMEOUT_S * 0.3

Headers = list[tuple[str, str]]


def bh(
    batch_id: str, seq: int | str, commit: str | None = None, *extra: tuple[str, str]
) -> Headers:
    """Batch headers (+ extra headers after them)."""
    headers = [(BATCH_ID, batch_id), (BATCH_SEQ, str(seq))]
    if commit is not None:
        headers.append((BATCH_COMMIT, commit))
    return headers + list(extra)


async def bpub(
    s: Session, tail: str, payload: bytes | str, headers: Headers, *, timeout_s: float = 2.0
) -> None:
    """A batch message with a reply subject; the reply (or its absence) is recorded exactly."""
    data = payload.encode() if isinstance(payload, str) else payload
    shown = [(k[5:] if k.startswith("Nats-") else k, v[:20]) for k, v in headers]
    await s.raw_request(
        s.subj(tail), data, headers=headers, timeout_s=timeout_s, label=f"REQ {tail} {shown}"
    )


async def npub(s: Session, tail: str, payload: str, headers: Headers) -> None:
    """A batch message sent by nats-py (which answers the server's PINGs: for scenarios with
    idle pauses); the reply is recorded."""
    shown = [(k[5:] if k.startswith("Nats-") else k, v[:20]) for k, v in headers]
    await s.publish(s.subj(tail), payload, headers=dict(headers), label=f"REQ {tail} {shown}")


async def quiet(
    s: Session, conn: RawConn, tail: str, payload: bytes | str, headers: Headers
) -> None:
    """A batch message without reply subject; what comes back before PONG is recorded."""
    data = payload.encode() if isinstance(payload, str) else payload
    shown = [(k[5:] if k.startswith("Nats-") else k, v[:20]) for k, v in headers]
    await s.exchange(conn, f"PUB {tail} {shown}", hpub(s.subj(tail), header_block(headers), data))


async def sleep_until(deadline: float) -> None:
    """Sleep until the event loop's clock reaches ``deadline`` (at once if it already has)."""
    loop = asyncio.get_running_loop()
    while (left := deadline - loop.time()) > 0:
        await asyncio.sleep(left)


async def keep_alive_then_commit(s: Session, tail: str, batch_id: str) -> None:
    """A batch of RESET_BATCH_MSGS messages (the last commits) whose life spans more than one
    idle timeout while no gap between two of its messages comes near it.

    Each send is due RESET_STEP_S after the previous send, not after its reply: the server
    restarts the timer only once it has the message, after the send, so a slow reply shortens
    the next gap instead of stretching it past the timer (with a pause after each reply, a
    reply late by the margin left the batch abandoned on a correct server). A send is never
    early, so the commit goes out at least (RESET_BATCH_MSGS - 1) steps after the first
    message: later than a timer the messages did not restart would have fired."""
    loop = asyncio.get_running_loop()
    due = loop.time()
    for i in range(1, RESET_BATCH_MSGS + 1):
        await sleep_until(due)
        due = loop.time() + RESET_STEP_S
        await npub(s, tail, "1", bh(batch_id, i, "1" if i == RESET_BATCH_MSGS else None))


async def stored(s: Session, stream: str, seqs: Iterator[int] | range | list[int]) -> None:
    """MSG.GET of each seq (headers base64, time masked) and the stream state."""
    for seq in seqs:
        await s.api(f"STREAM.MSG.GET.{stream}", {"seq": seq}, label=f"GET {stream} {seq}")
    await s.api(f"STREAM.INFO.{stream}", label=f"INFO {stream}")


class Advisories:
    """The batch_abandoned advisories of one stream, collected through nats-py."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    @classmethod
    async def watch(cls, s: Session, stream: str) -> Advisories:
        watcher = cls()
        nc = await s.nc()

        async def on_msg(msg: Any) -> None:
            watcher.bodies.append(msg.data)

        await nc.subscribe(ADVISORY_PREFIX + stream, cb=on_msg)
        await nc.flush()
        return watcher

    async def record(self, s: Session, expected: int, label: str) -> None:
        """Wait (bounded) for `expected` advisories, then record each body and its key order."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ADVISORY_WAIT_S
        while len(self.bodies) < expected and loop.time() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(ADVISORY_EXTRA_WAIT_S)
        bodies, self.bodies = self.bodies, []
        s.record(f"{label}: advisory count", len(bodies))
        for i, body in enumerate(bodies):
            s.record_reply(f"{label}: advisory {i}", Reply("msg", body))
            keys = list(json.loads(body)) if body.startswith(b"{") else None
            s.record(f"{label}: advisory {i} key order", keys)


def atomic_config(s: Session, suffix: str = "", **extra: Any) -> dict[str, Any]:
    tail = suffix.lower() or "m"
    return {
        "name": s.stream(suffix),
        "subjects": [s.subj(f"{tail}.>")],
        "allow_atomic": True,
        **extra,
    }


# ------------------------------------------------------------------------------ replies


async def test_replies_commit_and_stored_headers(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create(atomic_config(s))
        conn = await s.raw()
        await bpub(s, "m.a", "1", bh("b1", 1))
        await bpub(s, "m.b", "2", bh("b1", 2))
        await bpub(s, "m.a", "3", bh("b1", 3, "1"))
        await bpub(s, "m.a", "e1", bh("b2", 1))
        await quiet(s, conn, "m.a", "e2", bh("b2", 2))
        await bpub(s, "m.a", "eob", bh("b2", 3, "eob"))
        await bpub(s, "m.c", "single", bh("b3", 1, "1"))
        await bpub(s, "m.a", "lvl", bh("b4", 1, None, (API_LEVEL, "5")))
        await bpub(s, "m.a", "lvl", bh("b4", 2, None, (API_LEVEL, " 2")))
        await bpub(s, "m.a", "lvl", bh("b4", 3, "1", (API_LEVEL, "")))
        await quiet(s, conn, "m.q", "q1", bh("b5", 1))
        await quiet(s, conn, "m.q", "q2", bh("b5", 2, "1"))
        await s.wait_messages(name, 11)
        await bpub(s, "m.a", "long id", bh("x" * 64, 1, "1"))
        await bpub(s, "m.a", "id spaces", bh("  sp ", 1))
        await bpub(s, "m.a", "id spaces", bh("sp ", 2, "1"))
        # Not batch messages: empty id, lower-case key, commit header alone.
        await bpub(s, "m.p", "plain", [(BATCH_ID, ""), (BATCH_SEQ, "1")])
        await bpub(s, "m.p", "plain", [(BATCH_ID, " "), (BATCH_SEQ, "7")])
        await bpub(s, "m.p", "plain", [(BATCH_ID.lower(), "b9"), (BATCH_SEQ, "1")])
        await bpub(s, "m.p", "plain", [(BATCH_COMMIT, "1")])
        await bpub(s, "m.p", "plain", [(API_LEVEL, "99")])
        await bpub(s, "m.p", "plain", [])
        await stored(s, name, range(1, 20))

    await diff.run(scenario)


async def test_msg_ids_in_batches_feed_the_dedupe_window(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create(atomic_config(s))
        await bpub(s, "m.a", "1", bh("d1", 1, None, (MSG_ID, "id-1")))
        await bpub(s, "m.a", "2", bh("d1", 2, "1", (MSG_ID, "id-2")))
        await s.publish(s.subj("m.a"), "dup", headers={MSG_ID: "id-1"})
        await s.publish(s.subj("m.a"), "dup", headers={MSG_ID: "id-2"})
        await s.publish(s.subj("m.a"), "new", headers={MSG_ID: "id-3"})
        await stored(s, name, [])

    await diff.run(scenario)


# ------------------------------------------------------------------------------ staging errors


async def test_staging_errors_and_advisories(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create(atomic_config(s))
        adv = await Advisories.watch(s, name)
        await bpub(s, "m.a", "x", bh("x" * 65, 1))
        for bad in ["", "abc", "1 ", "-1", "+1", "0x1", "18446744073709551616"]:
            await bpub(s, "m.a", "x", bh("seq", bad))
        await bpub(s, "m.a", "x", [(BATCH_ID, "noseq")])
        await bpub(s, "m.a", "x", bh("u", 2))
        await bpub(s, "m.a", "x", bh("u", 0))
        await bpub(s, "m.a", "x", bh("u", 2, "1"))
        await bpub(s, "m.a", "x", bh("big", DEFAULT_BATCH_MSGS_MAX + 1, "1"))
        await bpub(s, "m.a", "x", bh("big", DEFAULT_BATCH_MSGS_MAX + 1, "eob"))
        await bpub(s, "m.a", "x", bh("big", DEFAULT_BATCH_MSGS_MAX + 2, "eob"))
        await bpub(s, "m.a", "x", bh("big", "18446744073709551615"))
        await adv.record(s, 0, "unknown batches")
        # Gaps and repeats drop the batch (advisory "incomplete"); a later message is unknown.
        await bpub(s, "m.a", "x", bh("g", 1))
        await bpub(s, "m.a", "x", bh("g", 3))
        await bpub(s, "m.a", "x", bh("g", 2, "1"))
        await bpub(s, "m.a", "x", bh("r", 1))
        await bpub(s, "m.a", "x", bh("r", 1))
        await bpub(s, "m.a", "x", bh("e", 1, "eob"))
        await bpub(s, "m.a", "x", bh("e", 2, "1"))
        await adv.record(s, 3, "gaps")
        # An invalid commit value drops the batch without an advisory.
        for value in ["2", "", "EOB", "1 ", "true"]:
            await bpub(s, "m.a", "x", bh(f"c{value}", 1))
            await bpub(s, "m.a", "x", bh(f"c{value}", 2, value))
            await bpub(s, "m.a", "x", bh(f"c{value}", 3, "1"))
        await bpub(s, "m.a", "x", bh("c1", 1, "yes"))
        await adv.record(s, 0, "commit values")
        # Nats-Required-Api-Level: checked on every message, "unsupported" advisory.
        await bpub(s, "m.a", "x", bh("l1", 1, None, (API_LEVEL, "6")))
        await bpub(s, "m.a", "x", bh("l2", 1, None, (API_LEVEL, "-1")))
        await bpub(s, "m.a", "x", bh("l2", 2, None, (API_LEVEL, "+5")))
        await bpub(s, "m.a", "x", bh("l2", 3, None, (API_LEVEL, "05")))
        await bpub(s, "m.a", "x", bh("l2", 4, None, (API_LEVEL, "5 ")))
        await bpub(s, "m.a", "x", bh("l2", 5, "1"))
        await bpub(s, "m.a", "x", bh("l3", 1, None, (API_LEVEL, "abc")))
        await bpub(s, "m.a", "x", bh("l4", 1, "1", (API_LEVEL, "9223372036854775808")))
        await adv.record(s, 4, "api level")
        await stored(s, name, [])

    await diff.run(scenario)


async def test_batch_size_limit_and_large_advisory(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create(atomic_config(s))
        adv = await Advisories.watch(s, name)
        conn = await s.raw()
        burst = b"".join(
            hpub(s.subj("m.a"), header_block(bh("L", seq)), b"x")
            for seq in range(1, DEFAULT_BATCH_MSGS_MAX + 1)
        )
        await s.exchange(conn, "1000 staged without replies", burst)
        await bpub(s, "m.a", "x", bh("L", DEFAULT_BATCH_MSGS_MAX + 1, "1"))
        await adv.record(s, 1, "large")
        await s.exchange(conn, "1000 staged again", burst.replace(b": L\r\n", b": M\r\n"))
        await bpub(s, "m.a", "eob", bh("M", DEFAULT_BATCH_MSGS_MAX + 1, "eob"))
        await adv.record(s, 0, "full batch")
        await stored(s, name, [1, DEFAULT_BATCH_MSGS_MAX])

    await diff.run(scenario)


async def test_staging_checks_before_the_batch_rules(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        plain = s.stream("NA")
        await s.create({"name": plain, "subjects": [s.subj("na.>")]})
        await bpub(s, "na.a", "x", bh("n1", 1))
        await bpub(s, "na.a", "x", [(BATCH_ID, "x" * 70)])
        await bpub(s, "na.a", "x", bh("n1", 1, "1", (EXP_STREAM, "OTHER")))
        await stored(s, plain, [])
        small = atomic_config(s, "SZ", max_msg_size=100)
        await s.create(small)
        await bpub(s, "sz.a", "x", bh("s1", 1))
        await bpub(s, "sz.a", "y" * 200, bh("s1", 2))
        await bpub(s, "sz.a", "x", bh("s1", 2, "1"))
        await bpub(s, "sz.a", "y" * 200, bh("s2", 1))
        await bpub(s, "sz.a", "x", bh("s2", 2, "1"))
        await stored(s, small["name"], [1, 2])
        sealed = atomic_config(s, "SL")
        await s.create(sealed)
        await bpub(s, "sl.a", "x", bh("z1", 1))
        await s.api(f"STREAM.UPDATE.{sealed['name']}", {**sealed, "sealed": True})
        await bpub(s, "sl.a", "x", bh("z1", 2, "1"))
        await bpub(s, "sl.a", "x", bh("z2", 1, "1"))
        await stored(s, sealed["name"], [])

    await diff.run(scenario)


async def test_inflight_limit_per_stream(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create(atomic_config(s))
        for i in range(DEFAULT_INFLIGHT_PER_STREAM):
            await bpub(s, "m.a", "x", bh(f"i{i}", 1))
        await bpub(s, "m.a", "x", bh("over", 1))
        await bpub(s, "m.a", "x", bh("over", 1, "1"))
        await bpub(s, "m.a", "x", bh("i0", 2, "1"))
        await bpub(s, "m.a", "x", bh("over", 1, "1"))
        await bpub(s, "m.a", "x", bh("over2", 1, "2"))
        for i in range(1, DEFAULT_INFLIGHT_PER_STREAM):  # drop the rest (a gap)
            await bpub(s, "m.a", "x", bh(f"i{i}", 3))
        await stored(s, name, [])

    await diff.run(scenario)


# ------------------------------------------------------------------------------ commit checks


async def staged_then_commit(s: Session, tail: str, bid: str, msgs: list[Headers]) -> None:
    """Messages 1..n of batch `bid` (each with its extra headers), the last one committing."""
    for i, extra in enumerate(msgs, start=1):
        commit = "1" if i == len(msgs) else None
        await bpub(s, tail, f"{bid}-{i}", bh(bid, i, commit, *extra))


async def test_commit_time_header_checks(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create(atomic_config(s, allow_rollup_hdrs=True))
        await s.publish(s.subj("m.a"), "seed", headers={MSG_ID: "w1"})
        await s.publish(s.subj("m.b"), "seed")
        await staged_then_commit(s, "m.a", "lmid", [[], [(EXP_LAST_MSG_ID, "w1")], []])
        await staged_then_commit(s, "m.a", "lmid0", [[(EXP_LAST_MSG_ID, "")], []])
        await staged_then_commit(s, "m.a", "dup", [[(MSG_ID, "d1")], [(MSG_ID, "d1")]])
        await staged_then_commit(s, "m.a", "win", [[(MSG_ID, "d2")], [(MSG_ID, "w1")]])
        await staged_then_commit(s, "m.a", "els1", [[(EXP_LAST_SEQ, "1")], []])
        await staged_then_commit(s, "m.a", "els2", [[(EXP_LAST_SEQ, "2")], [(EXP_LAST_SEQ, "3")]])
        await staged_then_commit(s, "m.a", "els3", [[], [(EXP_LAST_SEQ, "9")]])
        await staged_then_commit(s, "m.a", "els4", [[], [(EXP_LAST_SEQ, "abc")]])
        await staged_then_commit(s, "m.a", "ess1", [[], [(EXP_SUBJ_SEQ, "1")]])
        await staged_then_commit(s, "m.a", "ess2", [[(EXP_SUBJ_SEQ, "2")], []])
        await staged_then_commit(s, "m.c", "ess3", [[(EXP_SUBJ_SEQ, "0")], [(EXP_SUBJ_SEQ, "0")]])
        b = s.subj("m.b")
        await staged_then_commit(
            s, "m.c", "ess4", [[(EXP_SUBJ_SEQ, "2"), (EXP_SUBJ_SEQ_SUBJ, b)], []]
        )
        await staged_then_commit(s, "m.c", "ess5", [[], [(EXP_SUBJ_SEQ_SUBJ, b)]])
        await staged_then_commit(s, "m.c", "stream", [[], [(EXP_STREAM, "OTHER")]])
        await staged_then_commit(s, "m.c", "source", [[], [("Nats-Stream-Source", "X 1")]])
        await staged_then_commit(s, "m.c", "ttl", [[], [(TTL, "1h")]])
        await staged_then_commit(s, "m.c", "ttlbad", [[], [(TTL, "abc")]])
        await staged_then_commit(s, "m.c", "rall", [[], [(ROLLUP, "all")]])
        await staged_then_commit(s, "m.c", "rsub", [[], [(ROLLUP, "sub")]])
        await staged_then_commit(s, "m.c", "rfoo", [[(ROLLUP, "foo")], []])
        await staged_then_commit(s, "m.c", "order", [[(EXP_STREAM, "OTHER"), (MSG_ID, "w1")], []])
        await staged_then_commit(s, "m.c", "first", [[(EXP_STREAM, "OTHER")], [(MSG_ID, "w1")]])
        await stored(s, name, [])
        # Passing checks: the whole batch is stored; counted per subject sequence, rollups.
        await staged_then_commit(
            s,
            "m.d",
            "ok1",
            [
                [(EXP_LAST_SEQ, "6"), (EXP_SUBJ_SEQ, "0")],
                [(EXP_SUBJ_SEQ, "2"), (EXP_SUBJ_SEQ_SUBJ, b)],
            ],
        )
        await staged_then_commit(s, "m.e", "ok2", [[(ROLLUP, "sub")], []])
        await staged_then_commit(s, "m.a", "ok3", [[(ROLLUP, "SUB")], [(MSG_ID, "d3")]])
        await s.publish(s.subj("m.a"), "dup", headers={MSG_ID: "d3"})
        await stored(s, name, range(1, 13))
        await staged_then_commit(s, "m.f", "ok4", [[(ROLLUP, "all")], []])
        await stored(s, name, range(10, 15))
        bare = atomic_config(s, "NR")
        await s.create(bare)
        await staged_then_commit(s, "nr.a", "nr", [[], [(ROLLUP, "all")]])
        await staged_then_commit(s, "nr.a", "nr2", [[(ROLLUP, "foo")]])
        await stored(s, bare["name"], [])

    await diff.run(scenario)


async def test_commit_time_ttl_checks(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        ttl = atomic_config(s, "T", allow_msg_ttl=True)
        await s.create(ttl)
        await staged_then_commit(s, "t.a", "bad", [[], [(TTL, "abc")]])
        await staged_then_commit(s, "t.a", "sub", [[], [(TTL, "500ms")]])
        await staged_then_commit(s, "t.a", "ok", [[(TTL, "1h")], [(TTL, "never")], [(TTL, "60")]])
        await stored(s, ttl["name"], [1, 2, 3])

    await diff.run(scenario)


async def test_commit_time_limits(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        msgs = atomic_config(s, "MX", max_msgs=3, discard="new")
        await s.create(msgs)
        await s.publish(s.subj("mx.a"), "seed")
        await staged_then_commit(s, "mx.a", "four", [[], [], []])
        await staged_then_commit(s, "mx.a", "two", [[], []])
        await staged_then_commit(s, "mx.a", "one", [[]])
        await stored(s, msgs["name"], [])
        size = atomic_config(s, "BY", max_bytes=200, discard="new")
        await s.create(size)
        await staged_then_commit(s, "by.a", "b1", [[], [], [], []])
        await staged_then_commit(s, "by.a", "b2", [[]])
        await stored(s, size["name"], [])
        per = atomic_config(
            s, "PS", max_msgs_per_subject=2, discard="new", discard_new_per_subject=True
        )
        await s.create(per)
        await s.publish(s.subj("ps.a"), "seed")
        await staged_then_commit(s, "ps.a", "p1", [[], []])
        await staged_then_commit(s, "ps.b", "p2", [[], []])
        await stored(s, per["name"], [])
        old = atomic_config(s, "OL", max_msgs=2)
        await s.create(old)
        await staged_then_commit(s, "ol.a", "o1", [[], [], []])
        await stored(s, old["name"], [1, 2, 3])
        interest = atomic_config(s, "IN", retention="interest")
        await s.create(interest)
        await staged_then_commit(s, "in.a", "i1", [[], []])
        await stored(s, interest["name"], [])

    await diff.run(scenario)


# ------------------------------------------------------------------------------ config


async def test_allow_atomic_toggled_by_update(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        config = atomic_config(s)
        name = config["name"]
        await s.create(config)
        adv = await Advisories.watch(s, name)
        await bpub(s, "m.a", "x", bh("g1", 1))
        await bpub(s, "m.a", "x", bh("g1", 2))
        await s.api(f"STREAM.UPDATE.{name}", {**config, "allow_atomic": False})
        await bpub(s, "m.a", "x", bh("g1", 3))
        await bpub(s, "m.a", "x", bh("g1", 3, "1"))
        await bpub(s, "m.a", "x", bh("g2", 1, "1"))
        await s.api(f"STREAM.UPDATE.{name}", config)
        await bpub(s, "m.a", "x", bh("g1", 3, "1"))
        await bpub(s, "m.a", "x", bh("g3", 1))
        await s.api(f"STREAM.UPDATE.{name}", {**config, "max_msgs": 100})
        await bpub(s, "m.a", "x", bh("g3", 2, "1"))
        await adv.record(s, 0, "toggle")
        await stored(s, name, [1, 2])

    await diff.run(scenario)


async def test_no_ack_stream_sends_no_replies(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        config = atomic_config(s, no_ack=True)
        await s.create(config)
        await bpub(s, "m.a", "x", bh("q", 1), timeout_s=NO_REPLY_TIMEOUT_S)
        await bpub(s, "m.a", "x", bh("q", 2, "1"), timeout_s=NO_REPLY_TIMEOUT_S)
        await bpub(s, "m.a", "x", bh("q", 5), timeout_s=NO_REPLY_TIMEOUT_S)
        await s.wait_messages(config["name"], 2)
        await stored(s, config["name"], [1, 2])

    await diff.run(scenario)


async def test_config_interactions(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        config = atomic_config(s)
        await s.create(config)
        name = config["name"]
        await s.api(f"STREAM.UPDATE.{name}", {**config, "allow_atomic": False})
        await s.api(f"STREAM.UPDATE.{name}", config)
        await s.create(
            {"name": s.stream("MI"), "mirror": {"name": name}, "allow_atomic": True},
            label="mirror + allow_atomic",
        )
        await s.create(
            {**atomic_config(s, "AS"), "persist_mode": "async"}, label="async + allow_atomic"
        )
        await s.create({**atomic_config(s, "MEM"), "storage": "memory"})
        await staged_then_commit(s, "mem.a", "m", [[], []])
        await stored(s, s.stream("MEM"), [1, 2])

    await diff.run(scenario)


# ------------------------------------------------------------------------------ server limits


@pytest.fixture
def limited_diff(tmp_path: Path) -> Iterator[Differ]:
    """Both servers started for this test with low jetstream.limits.batch settings."""
    conf = tmp_path / "batch-limits.conf"
    conf.write_text(LIMITS_CONF)
    args = ["-c", str(conf)]
    oracle = start_nats_server(tmp_path / "oracle", name="oracle", extra_args=args)
    against = os.environ.get(DIFF_AGAINST_ENV, "jetraft")
    candidate: ServerProc | None = None
    try:
        if against == "nats":
            candidate = start_nats_server(tmp_path / "candidate", name="candidate", extra_args=args)
        else:
            candidate = start_jetraft(tmp_path / "candidate", name="candidate", extra_args=args)
        side = "jetraft" if against != "nats" else "nats-b"
        yield Differ(oracle.port, candidate.port, side, "L001")
    finally:
        if candidate is not None:
            candidate.stop()
        oracle.stop()


async def test_configured_limits_and_idle_timeout(limited_diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        first = atomic_config(s, "A")
        second = atomic_config(s, "B")
        await s.create(first)
        await s.create(second)
        adv_a = await Advisories.watch(s, first["name"])
        adv_b = await Advisories.watch(s, second["name"])
        await npub(s, "a.x", "1", bh("a1", 1))
        await npub(s, "a.x", "1", bh("a2", 1))
        await npub(s, "a.x", "1", bh("a3", 1))
        await npub(s, "b.x", "1", bh("u1", 1))
        await npub(s, "b.x", "1", bh("u2", 1))
        await adv_a.record(s, 2, "timeout A")
        await adv_b.record(s, 1, "timeout B")
        await npub(s, "a.x", "1", bh("a1", 2, "1"))
        for i in range(1, 7):
            await npub(s, "a.x", "1", bh("big", i, "1" if i == 6 else None))
        await adv_a.record(s, 1, "large")
        for i in range(1, 7):
            await npub(s, "a.x", "1", bh("fits", i, "eob" if i == 6 else None))
        await npub(s, "a.x", "1", bh("u", 6, "eob"))
        await npub(s, "a.x", "1", bh("u", 7, "eob"))
        # Every message restarts the idle timer: the batch outlives one timeout, no gap nears it.
        await keep_alive_then_commit(s, "a.x", "r")
        await adv_a.record(s, 0, "reset")
        await stored(s, first["name"], range(1, 6 + RESET_BATCH_MSGS))  # "fits", then "r"

    await limited_diff.run(scenario)
