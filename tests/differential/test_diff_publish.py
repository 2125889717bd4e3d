"""Differential: publishing into streams, docs/nats-differences.md §5.

PubAcks (byte for byte, including the `"duplicate": true` spacing), every Nats-Expected-*
header and its error, the order in which the checks run, rollups, max_msg_size, the header
size limit, discard-new limits and no_ack streams. Header-sensitive publishes go over the raw
connection so that the exact header block (empty values, case) is what the server sees.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.differential.diff_harness import NO_REPLY_TIMEOUT_S, Differ, Session

pytestmark = pytest.mark.differential

HEADER_BYTES_MAX = 65535
DEDUPE_WINDOW_NS = 100_000_000
DEDUPE_EXPIRY_WAIT_S = 0.6

MSG_ID = "Nats-Msg-Id"
EXP_STREAM = "Nats-Expected-Stream"
EXP_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXP_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXP_SUBJ_SEQ_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
EXP_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"


async def hpub(s: Session, tail: str, payload: bytes | str, headers: list[tuple[str, str]]) -> None:
    """A publish with an exact header block over the raw connection; the ack is recorded."""
    data = payload.encode() if isinstance(payload, str) else payload
    await s.raw_request(
        s.subj(tail), data, headers=headers, label=f"HPUB {tail} {data[:40]!r} {headers}"
    )


async def state(s: Session, name: str, label: str) -> None:
    await s.api(f"STREAM.INFO.{name}", label=f"INFO {label}")


async def test_puback_and_duplicates(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj(">")]})
        await s.publish(s.subj("a"), "one")
        await s.publish(s.subj("a"), "two", headers={MSG_ID: "m1"})
        await s.publish(s.subj("a"), "two", headers={MSG_ID: "m1"})
        await s.publish(s.subj("b"), "other payload", headers={MSG_ID: "m1"})
        await s.publish(s.subj("a"), "three", headers={MSG_ID: "m2"})
        await s.publish(s.subj("a"), "again", headers={MSG_ID: "m1"})
        await hpub(s, "a", "lower", [("nats-msg-id", "m1")])
        await hpub(s, "a", "lower", [("nats-msg-id", "m1")])
        await hpub(s, "a", "empty id", [(MSG_ID, "")])
        await hpub(s, "a", "empty id", [(MSG_ID, "")])
        await hpub(s, "a", "spaced", [(MSG_ID, "  m3")])
        await hpub(s, "a", "spaced", [(MSG_ID, "m3")])
        await hpub(s, "a", "first wins", [(MSG_ID, "m4"), (MSG_ID, "m5")])
        await hpub(s, "a", "first wins", [(MSG_ID, "m5")])
        await s.raw_request(s.subj("a"), b"raw ack", label="PUB raw ack")
        await s.publish(s.subj("a"), b"")
        await s.publish_quiet(s.subj("quiet"), "no reply subject")
        await s.publish(s.subj("a"), "after quiet")
        await state(s, name, "end")

    await diff.run(scenario)


async def test_duplicate_window_expiry(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        config = {"name": name, "subjects": [s.subj()], "duplicate_window": DEDUPE_WINDOW_NS}
        await s.create(config)
        await s.publish(s.subj(), "x", headers={MSG_ID: "d"})
        await s.publish(s.subj(), "x", headers={MSG_ID: "d"})
        await asyncio.sleep(DEDUPE_EXPIRY_WAIT_S)
        await s.publish(s.subj(), "x", headers={MSG_ID: "d"})
        await s.publish(s.subj(), "x", headers={MSG_ID: "d"})

    await diff.run(scenario)


async def test_expected_stream_and_last_sequence(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj(">")]})
        await hpub(s, "a", "x", [(EXP_LAST_SEQ, "0")])
        await hpub(s, "a", "x", [(EXP_LAST_SEQ, "0")])
        await hpub(s, "a", "x", [(EXP_LAST_SEQ, "1")])
        await hpub(s, "a", "x", [(EXP_LAST_SEQ, "5")])
        await hpub(s, "a", "x", [(EXP_LAST_SEQ, "abc")])
        await hpub(s, "a", "x", [(EXP_LAST_SEQ, "")])
        await hpub(s, "a", "x", [(EXP_LAST_SEQ, " 2")])
        await hpub(s, "a", "x", [(EXP_LAST_SEQ, "3 ")])
        await hpub(s, "a", "x", [(EXP_LAST_SEQ.lower(), "99")])
        await hpub(s, "a", "x", [(EXP_STREAM, name)])
        await hpub(s, "a", "x", [(EXP_STREAM, "OTHER")])
        await hpub(s, "a", "x", [(EXP_STREAM, name.lower())])
        await hpub(s, "a", "x", [(EXP_STREAM, "")])
        # Check order: expected stream before last sequence, last sequence before dedupe.
        await hpub(s, "a", "x", [(EXP_LAST_SEQ, "99"), (EXP_STREAM, "OTHER")])
        await hpub(s, "a", "x", [(MSG_ID, "dd")])
        await hpub(s, "a", "x", [(MSG_ID, "dd"), (EXP_LAST_SEQ, "1")])
        await hpub(s, "a", "x", [(MSG_ID, "dd"), (EXP_STREAM, "OTHER")])
        await hpub(s, "a", "x", [(MSG_ID, "dd")])
        await state(s, name, "end")

    await diff.run(scenario)


async def test_expected_last_subject_sequence(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj(">")]})
        await hpub(s, "a", "x", [(EXP_SUBJ_SEQ, "0")])
        await hpub(s, "a", "x", [(EXP_SUBJ_SEQ, "0")])
        await hpub(s, "b", "x", [(EXP_SUBJ_SEQ, "0")])
        await hpub(s, "a", "x", [(EXP_SUBJ_SEQ, "2")])
        await hpub(s, "a", "x", [(EXP_SUBJ_SEQ, "1")])
        await hpub(s, "c", "x", [(EXP_SUBJ_SEQ, "4")])
        await hpub(s, "a", "x", [(EXP_SUBJ_SEQ, "abc")])
        await hpub(s, "a", "x", [(EXP_SUBJ_SEQ, "")])
        # The subject named by the -Subject header (wildcards allowed) is checked instead.
        await hpub(s, "a", "x", [(EXP_SUBJ_SEQ, "3"), (EXP_SUBJ_SEQ_SUBJ, s.subj("b"))])
        await hpub(s, "a", "x", [(EXP_SUBJ_SEQ, "0"), (EXP_SUBJ_SEQ_SUBJ, s.subj("b"))])
        await hpub(s, "c", "x", [(EXP_SUBJ_SEQ, "0"), (EXP_SUBJ_SEQ_SUBJ, s.subj("zzz.*"))])
        await hpub(s, "c", "x", [(EXP_SUBJ_SEQ, "1"), (EXP_SUBJ_SEQ_SUBJ, s.subj("*"))])
        last = await s.api(f"STREAM.INFO.{name}", record=False)
        last_seq = str(last.get("state", "last_seq"))
        await hpub(s, "c", "x", [(EXP_SUBJ_SEQ, last_seq), (EXP_SUBJ_SEQ_SUBJ, s.subj("*"))])
        await hpub(s, "c", "x", [(EXP_SUBJ_SEQ_SUBJ, s.subj("b"))])
        await hpub(s, "c", "x", [(EXP_SUBJ_SEQ_SUBJ, "")])
        await hpub(s, "a", "x", [(EXP_SUBJ_SEQ, "99"), (EXP_LAST_SEQ, "99")])
        await hpub(s, "a", "x", [(EXP_SUBJ_SEQ, "99"), (EXP_STREAM, "OTHER")])
        await state(s, name, "end")

    await diff.run(scenario)


async def test_expected_last_msg_id_and_stream_source(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj(">")]})
        await hpub(s, "a", "x", [(EXP_LAST_MSG_ID, "")])
        await hpub(s, "a", "x", [(EXP_LAST_MSG_ID, "nope")])
        await hpub(s, "a", "x", [(MSG_ID, "id1")])
        await hpub(s, "a", "x", [(EXP_LAST_MSG_ID, "id1")])
        await hpub(s, "a", "x", [(EXP_LAST_MSG_ID, "id1")])
        await hpub(s, "a", "x", [(EXP_LAST_MSG_ID, "")])
        await hpub(s, "a", "x", [(MSG_ID, "id2"), (EXP_LAST_MSG_ID, "")])
        await hpub(s, "a", "x", [(MSG_ID, "id3"), (EXP_LAST_MSG_ID, "id1")])
        await hpub(s, "a", "x", [(MSG_ID, "id2"), (EXP_LAST_MSG_ID, "wrong")])
        await hpub(s, "a", "x", [("Nats-Stream-Source", "X 1 > >")])
        await hpub(s, "a", "x", [("Nats-Stream-Source", "")])
        await hpub(s, "a", "x", [("Nats-Stream-Source", "X"), (MSG_ID, "id2")])
        await hpub(s, "a", "x", [("Nats-Stream-Source", "X"), (EXP_LAST_SEQ, "1")])
        await state(s, name, "end")

    await diff.run(scenario)


async def test_rollup(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj("r.>")], "allow_rollup_hdrs": True})
        for tail in ["a", "b", "a", "b", "a"]:
            await s.publish(s.subj(f"r.{tail}"), tail, record=False)
        await hpub(s, "r.a", "rollup sub", [(ROLLUP, "sub")])
        await state(s, name, "after sub")
        await hpub(s, "r.b", "rollup SUB", [(ROLLUP, "SUB")])
        await state(s, name, "after SUB")
        await hpub(s, "r.c", "rollup foo", [(ROLLUP, "foo")])
        await hpub(s, "r.c", "rollup empty", [(ROLLUP, "")])
        await hpub(s, "r.c", "rollup all", [(ROLLUP, "all")])
        await state(s, name, "after all")
        await hpub(s, "r.d", "rollup All", [(ROLLUP, "All"), (MSG_ID, "r1")])
        await hpub(s, "r.d", "rollup All", [(ROLLUP, "All"), (MSG_ID, "r1")])
        await state(s, name, "after All")
        await s.api(f"STREAM.MSG.GET.{name}", {"last_by_subj": s.subj("r.d")})
        plain = s.stream("NOROLL")
        await s.create({"name": plain, "subjects": [s.subj("nr.>")]})
        await s.publish(s.subj("nr.a"), "x")
        await hpub(s, "nr.a", "x", [(ROLLUP, "sub")])
        await hpub(s, "nr.a", "x", [(ROLLUP, "all")])
        await hpub(s, "nr.a", "x", [(ROLLUP, "foo")])
        await state(s, plain, "no rollup")

    await diff.run(scenario)


async def test_max_msg_size_and_header_size(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj("m.>")], "max_msg_size": 10})
        await s.publish(s.subj("m.a"), b"x" * 10)
        await s.publish(s.subj("m.a"), b"x" * 11)
        await s.publish(s.subj("m.a"), b"x" * 5, headers={"H": "v"})
        await s.publish(s.subj("m.a"), b"", headers={"H": "x" * 20})
        await hpub(s, "m.a", b"x" * 11, [(MSG_ID, "big"), (EXP_LAST_SEQ, "1")])
        big = s.stream("HDR")
        await s.create({"name": big, "subjects": [s.subj("hdr")]})
        await s.publish(s.subj("hdr"), "x", headers={"Big": "v" * (HEADER_BYTES_MAX - 100)})
        await s.publish(s.subj("hdr"), "x", headers={"Big": "v" * HEADER_BYTES_MAX})
        await state(s, big, "hdr")

    await diff.run(scenario)


async def test_discard_new_limits(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        msgs = s.stream("MSGS")
        await s.create({"name": msgs, "subjects": [s.subj("m.>")], "max_msgs": 2, "discard": "new"})
        for i in range(3):
            await s.publish(s.subj("m.a"), f"m{i}")
        await hpub(s, "m.a", "dup check", [(MSG_ID, "x"), (EXP_LAST_SEQ, "2")])
        byts = s.stream("BYTES")
        await s.create(
            {"name": byts, "subjects": [s.subj("b.>")], "max_bytes": 100, "discard": "new"}
        )
        for i in range(4):
            await s.publish(s.subj("b.a"), b"y" * 30, label=f"PUB bytes {i}")
        per = s.stream("PER")
        await s.create(
            {
                "name": per,
                "subjects": [s.subj("p.>")],
                "max_msgs_per_subject": 1,
                "discard": "new",
                "discard_new_per_subject": True,
            }
        )
        await s.publish(s.subj("p.a"), "1")
        await s.publish(s.subj("p.a"), "2")
        await s.publish(s.subj("p.b"), "3")
        per_old = s.stream("PEROLD")
        await s.create({"name": per_old, "subjects": [s.subj("po.>")], "max_msgs_per_subject": 1})
        await s.publish(s.subj("po.a"), "1")
        await s.publish(s.subj("po.a"), "2")
        old = s.stream("OLD")
        await s.create({"name": old, "subjects": [s.subj("o.>")], "max_msgs": 2})
        for i in range(4):
            await s.publish(s.subj("o.a"), f"o{i}")
        for stream in (msgs, byts, per, per_old, old):
            await state(s, stream, stream)

    await diff.run(scenario)


async def test_sealed_and_no_ack(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        sealed = s.stream("SEAL")
        config: dict[str, Any] = {"name": sealed, "subjects": [s.subj("s")]}
        await s.create(config)
        await s.publish(s.subj("s"), "before")
        await s.api(f"STREAM.UPDATE.{sealed}", {**config, "sealed": True})
        await s.publish(s.subj("s"), "after")
        await hpub(s, "s", "x", [(EXP_STREAM, "OTHER")])
        await hpub(s, "s", "x", [(MSG_ID, "z"), (EXP_LAST_SEQ, "9")])
        quiet = s.stream("NOACK")
        await s.create({"name": quiet, "subjects": [s.subj("n")], "no_ack": True})
        await s.publish(s.subj("n"), "x", timeout_s=NO_REPLY_TIMEOUT_S)
        await s.wait_messages(quiet, 1)
        await state(s, quiet, "no_ack")

    await diff.run(scenario)
