"""Differential: stream subject transforms, RePublish and counter streams (ADR-49).

Config errors of ``subject_transform`` and ``republish`` destinations (the mapping grammar),
the subjects a transform stores (every mapping function, read back through Direct Get), the
messages RePublish sends (subject, headers in order with the timestamp masked, payload; headers
only; ``Nats-Last-Sequence`` across a per-subject limit), and counters: PubAck ``val``, the stored
``{"val":…}`` payload, every increment error and where it sits in the header checks.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.sources import stream_identity
from protocol.timefmt import parse_rfc3339_unix_ns
from tests.differential.diff_harness import (
    REPLY_TIMEOUT_S,
    Differ,
    Session,
    state_is,
    wait_state,
)
from tests.differential.diff_mask import TS_MASK, mask_json

pytestmark = pytest.mark.differential

TIME_STAMP = "Nats-Time-Stamp"
INCR = "Nats-Incr"
COUNTER_SOURCES = "Nats-Counter-Sources"

BAD_DESTINATIONS = [
    "{{wildcard(3)}}.x",
    "{{wildcard()}}.x",
    "{{wildcard(1,2)}}.x",
    "{{wildcard(a)}}.x",
    "{{partition()}}.x",
    "{{partition(a,1)}}.x",
    "{{unknown(1)}}.x",
    "{{left(1,2)}}.x",
    "{{right(1,2)}}.x",
    "{{splitfromleft(1)}}.x",
    "{{splitfromleft(1,2,3)}}.x",
    "{{split(1)}}.x",
    "{{split(1,a b)}}.x",
    "{{random()}}.x",
    "a..b",
    "a.>.b",
    "a.*",
    "a b.c",
]

GOOD_DESTINATIONS = [
    "o.$2.$1",
    "o.{{wildcard(2)}}.{{Wildcard(1)}}",
    "o.{{partition(7,1)}}.{{partition(3,1,2)}}.{{partition(5)}}",
    "o.{{splitfromleft(1,2)}}.{{SplitFromRight(2,3)}}",
    "o.{{slicefromleft(1,2)}}.{{SliceFromRight(2,3)}}",
    "o.{{split(1,-)}}.{{ wildcard( 2 ) }}",
]
SUBJECT_TAILS = ["ab-cd.efghij", "x.y", "--a-b.1234567", "longtoken.z"]


async def test_subject_transform_config_errors(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        for i, dest in enumerate(BAD_DESTINATIONS):
            body = {
                "name": s.stream(f"B{i}"),
                "subjects": [s.subj(f"b{i}.*.*")],
                "subject_transform": {"src": s.subj(f"b{i}.*.*"), "dest": dest},
            }
            await s.create(body, label=f"CREATE transform to {dest!r}")
        bad_src = {
            "name": s.stream("BS"),
            "subjects": [s.subj("bs.>")],
            "subject_transform": {"src": "a..b", "dest": "x"},
        }
        await s.create(bad_src, label="CREATE bad transform source")
        for i, dest in enumerate(BAD_DESTINATIONS[:6]):
            body = {
                "name": s.stream(f"R{i}"),
                "subjects": [s.subj(f"r{i}.*.*")],
                "republish": {"src": s.subj(f"r{i}.*.*"), "dest": dest},
            }
            await s.create(body, label=f"CREATE republish to {dest!r}")
        origin = s.stream("O")
        await s.create({"name": origin, "subjects": [s.subj("o.>")]}, label="CREATE origin")
        for i, dest in enumerate(BAD_DESTINATIONS[:4]):
            transform = [{"src": s.subj("o.*"), "dest": dest}]
            sourced = {"name": s.stream(f"S{i}"), "sources": [{"name": origin}]}
            sourced["sources"][0]["subject_transforms"] = transform
            await s.create(sourced, label=f"CREATE source transform to {dest!r}")
            mirrored = {"name": s.stream(f"M{i}"), "mirror": {"name": origin}}
            mirrored["mirror"]["subject_transforms"] = transform
            await s.create(mirrored, label=f"CREATE mirror transform to {dest!r}")

    await diff.run(scenario)


async def test_subject_transform_stores_transformed_subjects(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        for i, dest in enumerate(GOOD_DESTINATIONS):
            name = s.stream(f"T{i}")
            prefix = s.subj(f"t{i}")
            target = dest.replace("o.", f"{s.subj(f'o{i}')}.", 1)
            body = {
                "name": name,
                "subjects": [f"{prefix}.>"],
                "allow_direct": True,
                "subject_transform": {"src": f"{prefix}.*.*", "dest": target},
            }
            await s.create(body, label=f"CREATE transform to {dest!r}")
            for tail in [*SUBJECT_TAILS, "only1", "a.b.c"]:
                await s.publish(f"{prefix}.{tail}", b"m", label=f"PUB t{i} {tail}")
            await s.api(f"STREAM.INFO.{name}", {"subjects_filter": ">"}, label=f"INFO t{i}")
            for seq in range(1, len(SUBJECT_TAILS) + 3):
                await s.direct_get(name, {"seq": seq}, label=f"DG t{i} {seq}")

    await diff.run(scenario)


async def _collect(
    s: Session, subject: str, publish: list[tuple[str, dict[str, str] | None]]
) -> None:
    """Subscribe to ``subject``, publish each (subject, headers) with a PubAck, and record every
    republished message that arrives (subject, headers with the timestamp masked, payload)."""
    nc = await s.nc()
    sub = await nc.subscribe(subject)
    await nc.flush()
    for i, (target, headers) in enumerate(publish):
        await s.publish(target, f"p{i}".encode(), headers=headers, label=f"PUB {i} {target}")
    got: list[Any] = []
    while True:
        try:
            msg = await sub.next_msg(timeout=REPLY_TIMEOUT_S if not got else 0.5)
        except TimeoutError:
            break
        headers = [(k, TS_MASK if k == TIME_STAMP else v) for k, v in (msg.headers or {}).items()]
        got.append((msg.subject, headers, msg.data))
    await sub.unsubscribe()
    s.record(f"republished on {subject}", got)
    assert got, f"nothing was republished on {subject}"


async def test_republish(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create(
            {
                "name": name,
                "subjects": [s.subj("in.>")],
                "max_msgs_per_subject": 1,
                "republish": {"src": s.subj("in.*.>"), "dest": s.subj("out.{{wildcard(1)}}.>")},
            }
        )
        await _collect(
            s,
            s.subj("out.>"),
            [
                (s.subj("in.a.x"), None),
                (s.subj("in.a.x"), {"Foo": "bar"}),
                (s.subj("in.b.y.z"), None),
                (s.subj("in.c"), None),  # does not match the republish source
                (s.subj("in.a.x"), {"Nats-Msg-Id": "m1"}),
                (s.subj("in.a.x"), {"Nats-Msg-Id": "m1"}),  # a duplicate is not republished
            ],
        )
        headers_only = s.stream("HO")
        await s.create(
            {
                "name": headers_only,
                "subjects": [s.subj("ho.>")],
                "republish": {"src": ">", "dest": s.subj("rho.>"), "headers_only": True},
            },
            label="CREATE headers only",
        )
        await _collect(s, s.subj("rho.>"), [(s.subj("ho.1"), None), (s.subj("ho.2"), {"A": "b"})])

    await diff.run(scenario)


async def test_counter_stream(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create(
            {
                "name": name,
                "subjects": [s.subj(">")],
                "allow_msg_counter": True,
                "allow_direct": True,
            }
        )
        rows: list[tuple[str, dict[str, str] | None, bytes]] = [
            ("a", {INCR: "5"}, b""),
            ("a", {INCR: "+3"}, b""),
            ("a", {INCR: "-10"}, b""),
            ("b", {INCR: "123456789012345678901234567890"}, b""),
            ("b", {INCR: "1"}, b""),
            ("a", {INCR: "0"}, b""),
            ("a", {INCR: "abc"}, b""),
            ("a", {INCR: "1.5"}, b""),
            ("a", {INCR: " 2"}, b""),
            ("a", {INCR: "1"}, b"payload"),
            ("a", None, b""),
            ("a", {"Foo": "bar"}, b""),
            ("a", {INCR: "1", "Nats-Expected-Stream": name}, b""),
            ("a", {INCR: "1", "Nats-Expected-Last-Sequence": "6"}, b""),
            ("a", {INCR: "1", "Nats-Rollup": "sub"}, b""),
            ("a", {INCR: "1", "Nats-Msg-Id": "d1"}, b""),
            ("a", {INCR: "1", "Nats-Msg-Id": "d1"}, b""),
            ("a", {INCR: "abc", "Nats-Expected-Stream": "other"}, b""),
            ("a", {INCR: "1", "Nats-TTL": "1h"}, b""),
        ]
        acks: list[bytes] = []
        for i, (tail, headers, payload) in enumerate(rows):
            ack = await s.publish(
                s.subj(tail), payload, headers=headers, label=f"PUB {i} {tail} {headers}"
            )
            acks.append(ack.data)
        assert b'"val":"-2"' in acks[2], acks[2]
        await s.direct_get(name, {"last_by_subj": s.subj("a")}, label="DG last a")
        await s.direct_get(name, {"last_by_subj": s.subj("b")}, label="DG last b")
        await s.api(f"STREAM.INFO.{name}", label="INFO")
        # Nats-Incr on a stream without counters
        plain = s.stream("P")
        await s.create({"name": plain, "subjects": [s.subj("p.>")]}, label="CREATE plain")
        await s.publish(s.subj("p.x"), b"", headers={INCR: "1"}, label="PUB incr on plain")
        await s.publish(s.subj("p.x"), b"", headers={INCR: "zz"}, label="PUB bad incr on plain")
        # A counter stream cannot turn counting off
        await s.api(
            f"STREAM.UPDATE.{name}",
            {"name": name, "subjects": [s.subj(">")], "allow_direct": True},
            label="UPDATE counters off",
        )

    await diff.run(scenario)


async def _identities(s: Session, *streams: str) -> dict[str, str]:
    """What each stream's identity is, derived from its creation time as jetraft derives it."""
    out = {}
    for name in streams:
        info = (await s.api(f"STREAM.INFO.{name}", record=False)).json
        out[name] = stream_identity(parse_rfc3339_unix_ns(info["created"]))
    return out


def _checked_ident(value: str, identities: dict[str, str]) -> str:
    """A Nats-Stream-Source value with its trailing identity (a hash of the source's creation
    time, different on each server) replaced by whether it is the source's identity."""
    head, _, ident = value.rpartition(" ")
    return f"{head} <identity {'ok' if identities.get(head.split(' ')[0]) == ident else ident}>"


async def _stored(s: Session, stream: str, count: int, identities: dict[str, str]) -> list[Any]:
    """Every message of ``stream`` (seqs 1..count) as (subject, headers, payload), sorted: two
    sources feed a stream in no fixed order, so the seqs each message gets may differ."""
    nc = await s.nc()
    out = []
    for seq in range(1, count + 1):
        msg = await nc.request(
            f"$JS.API.DIRECT.GET.{stream}", f'{{"seq":{seq}}}'.encode(), timeout=REPLY_TIMEOUT_S
        )
        headers = [
            (k, _checked_ident(v, identities) if k == "Nats-Stream-Source" else v)
            for k, v in (msg.headers or {}).items()
            if k not in (TIME_STAMP, "Nats-Sequence")
        ]
        out.append((msg.headers.get("Nats-Subject") if msg.headers else None, headers, msg.data))
    return sorted(out, key=repr)


async def _record_sorted_sources(s: Session, label: str, reply: Any) -> None:
    """A reply with its ``sources`` state in name order (nats-server lists them in map order)."""
    body = mask_json(reply.json)
    if isinstance(body.get("sources"), list):
        body["sources"] = sorted(body["sources"], key=lambda item: item.get("name", ""))
    s.record(label, body)


async def test_sources(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        o1, o2 = s.stream("O1"), s.stream("O2")
        await s.create({"name": o1, "subjects": [s.subj("o1.>")]}, label="CREATE O1")
        await s.create({"name": o2, "subjects": [s.subj("o2.>")]}, label="CREATE O2")
        await s.publish(s.subj("o1.a"), b"1", headers={"Foo": "bar"}, label="PUB o1.a")
        await s.publish(s.subj("o1.b"), b"2", label="PUB o1.b")
        await s.publish(s.subj("o2.a"), b"3", headers={"Nats-Msg-Id": "x"}, label="PUB o2.a")
        await s.publish(s.subj("o2.b"), b"4", label="PUB o2.b")
        identities = await _identities(s, o1, o2)
        both = s.stream("S")
        created = await s.create(
            {
                "name": both,
                "subjects": [s.subj("s.>")],
                "allow_direct": True,
                "sources": [{"name": o1}, {"name": o2, "filter_subject": s.subj("o2.a")}],
            },
            record=False,
        )
        await _record_sorted_sources(s, "CREATE sourcing two", created)
        await s.wait_messages(both, 3)
        s.record("S stored", await _stored(s, both, 3, identities))
        await s.publish(s.subj("o1.c"), b"5", label="PUB o1.c after")
        await s.wait_messages(both, 4)
        s.record("S stored after", await _stored(s, both, 4, identities))
        await _record_sorted_sources(s, "INFO S", await s.api(f"STREAM.INFO.{both}", record=False))
        transformed = s.stream("T")
        await s.create(
            {
                "name": transformed,
                "allow_direct": True,
                "sources": [
                    {
                        "name": o1,
                        "opt_start_seq": 2,
                        "subject_transforms": [
                            {"src": s.subj("o1.*"), "dest": s.subj("t.{{wildcard(1)}}")}
                        ],
                    }
                ],
            },
            label="CREATE sourcing with transform",
        )
        await s.wait_messages(transformed, 2)
        s.record("T stored", await _stored(s, transformed, 2, identities))
        await s.api(f"STREAM.INFO.{transformed}", label="INFO T")

    await diff.run(scenario)


async def test_counter_sourcing_counters(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        a, b, total = s.stream("A"), s.stream("B"), s.stream("SUM")
        for name, prefix in ((a, "a"), (b, "b")):
            body = {"name": name, "subjects": [s.subj(f"{prefix}.*")], "allow_msg_counter": True}
            await s.create(body, label=f"CREATE {prefix}")
        await s.publish(s.subj("a.x"), b"", headers={INCR: "5"}, label="INCR a.x 5")
        await s.publish(s.subj("b.x"), b"", headers={INCR: "2"}, label="INCR b.x 2")
        sources = [
            {
                "name": name,
                "subject_transforms": [
                    {"src": s.subj(f"{prefix}.*"), "dest": s.subj("sum.{{wildcard(1)}}")}
                ],
            }
            for name, prefix in ((a, "a"), (b, "b"))
        ]
        created = await s.create(
            {
                "name": total,
                "subjects": [s.subj("sum.*")],
                "allow_msg_counter": True,
                "allow_direct": True,
                "sources": sources,
            },
            record=False,
        )
        await _record_sorted_sources(s, "CREATE sum", created)
        await s.wait_messages(total, 2)
        await s.publish(s.subj("a.x"), b"", headers={INCR: "3"}, label="INCR a.x 3")
        await s.wait_messages(total, 3)
        await s.publish(s.subj("sum.x"), b"", headers={INCR: "10"}, label="INCR sum.x 10")
        nc = await s.nc()
        last = await nc.request(
            f"$JS.API.DIRECT.GET.{total}",
            json.dumps({"last_by_subj": s.subj("sum.x")}).encode(),
            timeout=REPLY_TIMEOUT_S,
        )
        headers = dict(last.headers or {})
        s.record("sum.x total", (last.data, headers.get(INCR), headers.get(COUNTER_SOURCES)))

    await diff.run(scenario)


async def test_mirror_subject_transforms(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        origin, mirror = s.stream("O"), s.stream("M")
        await s.create({"name": origin, "subjects": [s.subj("o.>")]}, label="CREATE origin")
        for tail in ("a.1", "b.2", "c.3", "a.4"):
            await s.publish(s.subj(f"o.{tail}"), tail.encode(), label=f"PUB {tail}")
        transforms = [
            {"src": s.subj("o.a.*"), "dest": s.subj("ma.{{wildcard(1)}}")},
            {"src": s.subj("o.b.*"), "dest": ""},
        ]
        await s.create(
            {
                "name": mirror,
                "allow_direct": True,
                "mirror": {"name": origin, "subject_transforms": transforms},
            },
            label="CREATE mirror with transforms",
        )
        await s.wait_messages(mirror, 3)
        for seq in (1, 2, 3, 4):
            await s.direct_get(mirror, {"seq": seq}, label=f"DG mirror {seq}")
        await s.api(f"STREAM.INFO.{mirror}", label="INFO mirror")

    await diff.run(scenario)


SCHEDULE = "Nats-Schedule"
TARGET = "Nats-Schedule-Target"


async def test_message_schedule_errors(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create(
            {"name": name, "subjects": [s.subj(">")], "allow_msg_schedules": True},
            label="CREATE schedules",
        )
        target = s.subj("target")
        at = "@at 2099-01-01T00:00:00Z"
        rows: list[dict[str, str]] = [
            {SCHEDULE: at},
            {SCHEDULE: at, TARGET: s.subj("sched.a")},
            {SCHEDULE: at, TARGET: "not.in.stream"},
            {SCHEDULE: at, TARGET: "bad subject"},
            {SCHEDULE: "@at tomorrow", TARGET: target},
            {SCHEDULE: "@every 500ms", TARGET: target},
            {SCHEDULE: "@every 5s", TARGET: target, "Nats-Schedule-Time-Zone": "UTC"},
            {SCHEDULE: "0 0 * * *", TARGET: target},
            {SCHEDULE: "0 0 0 * * *", TARGET: target, "Nats-Schedule-Time-Zone": "Mars/Base"},
            {SCHEDULE: "0 0 0 * * *", TARGET: target, "Nats-Schedule-Time-Zone": ""},
            {SCHEDULE: "0 0 9 * * mon-fri", TARGET: target, "Nats-Schedule-TTL": "5m"},
            {SCHEDULE: at, TARGET: target, "Nats-Schedule-TTL": "bogus"},
            {SCHEDULE: at, TARGET: target, "Nats-Schedule-Rollup": "all"},
            {SCHEDULE: at, TARGET: target, "Nats-Schedule-Source": target},
            {SCHEDULE: at, TARGET: target, "Nats-Rollup": "all"},
            {SCHEDULE: "@hourly", TARGET: target, "Nats-Schedule-Source": s.subj("src")},
            {"Nats-Scheduler": s.subj("sched.a")},
            {"Nats-Schedule-Next": "later", "Nats-Scheduler": s.subj("sched.a")},
            {"Nats-Schedule-Next": "purge"},
            {"Nats-Schedule-Next": "purge", "Nats-Scheduler": s.subj("plain")},
        ]
        await s.publish(s.subj("plain"), b"p", label="PUB plain")
        for i, headers in enumerate(rows):
            await s.publish(s.subj("sched.a"), b"x", headers=headers, label=f"PUB {i} {headers}")
        await s.direct_get(name, {"last_by_subj": s.subj("sched.a")}, label="DG schedule")
        plain = s.stream("P")
        await s.create({"name": plain, "subjects": [s.subj("p.>")]}, label="CREATE plain")
        await s.publish(
            s.subj("p.s"), b"", headers={SCHEDULE: at, TARGET: s.subj("p.t")}, label="PUB off"
        )
        await s.publish(
            s.subj("p.s"), b"", headers={SCHEDULE: "nonsense"}, label="PUB bad pattern off"
        )

    await diff.run(scenario)


async def test_message_schedules_fire(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create(
            {
                "name": name,
                "subjects": [s.subj(">")],
                "allow_msg_schedules": True,
                "allow_msg_ttl": True,
                "allow_direct": True,
            },
            label="CREATE schedules",
        )
        await s.publish(s.subj("src"), b"from source", headers={"Foo": "bar"}, label="PUB src")
        once = {SCHEDULE: "@at 2001-01-01T00:00:00Z", TARGET: s.subj("once")}
        await s.publish(s.subj("sched.once"), b"payload", headers=once, label="PUB once")
        sourced = {
            SCHEDULE: "@at 2001-01-01T00:00:00Z",
            TARGET: s.subj("copied"),
            "Nats-Schedule-Source": s.subj("src"),
            "Nats-Schedule-TTL": "1h",
        }
        await s.publish(s.subj("sched.copy"), b"own", headers=sourced, label="PUB sourced")
        # src, once and copied are left: a one-off schedule goes once it fired
        await wait_state(s, name, "fired", state_is(3, 5))
        nc = await s.nc()
        for subject in ("once", "copied", "sched.once", "sched.copy"):
            reply = await nc.request(
                f"$JS.API.DIRECT.GET.{name}",
                json.dumps({"last_by_subj": s.subj(subject)}).encode(),
                timeout=REPLY_TIMEOUT_S,
            )
            headers = [
                (k, TS_MASK if k == TIME_STAMP else v)
                for k, v in (reply.headers or {}).items()
                if k != "Nats-Sequence"
            ]
            s.record(f"DG last {subject}", (headers, reply.data))

    await diff.run(scenario)
