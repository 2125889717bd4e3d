"""Differential: per-message TTL and subject delete markers (ADR-43), docs/nats-differences.md §3.

Config rules of §3.1/§3.4 (pedantic and not), every ``Nats-TTL`` row of §3.2 with the stored
header read back through Direct Get, the publish errors of §3.3 and where they fall in the check
order, and expiry: TTL and max_age removals, ``never``, markers (content, sequence, their own TTL,
max_age, no marker for markers / KV purges / limits / purge / delete), markers refused by a
sealed or full stream, and no delivery of markers to core subscribers.

Expiry is observed by polling STREAM.INFO under a deadline, never by sleeping a fixed time: every
stream of the expiry scenario is filled first, so their clocks run together and the whole
scenario waits about as long as its slowest stream (~4 s). A negative ("still there") is checked
only after a positive on a stream that started at the same moment with the same TTL.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.msg import Msg

from tests.differential.diff_harness import (
    REPLY_TIMEOUT_S,
    Differ,
    Session,
    info,
    state_is,
    wait_state,
)
from tests.differential.diff_mask import TS_MASK

pytestmark = pytest.mark.differential

S_NS = 1_000_000_000
TTL = "Nats-TTL"
MSG_ID = "Nats-Msg-Id"
EXP_STREAM = "Nats-Expected-Stream"
EXP_LAST_SEQ = "Nats-Expected-Last-Sequence"
ROLLUP = "Nats-Rollup"
KV_OP = "KV-Operation"
MARKER_REASON = "Nats-Marker-Reason"
TIME_STAMP = "Nats-Time-Stamp"


# (value, what nats-server does with it on a TTL-enabled stream): docs/nats-differences.md §3.
TTL_ROWS = [
    "never",
    "NEVER",
    "1s",
    "5m",
    "1h30m",
    "1.5s",
    "30",
    " 10",
    "0",
    "0s",
    "500ms",
    "-1",
    "+5",
    "1e3",
    "abc",
    "10 ",
    "",
    "00",
    "1000000000.999999999s",
    "-5s",
    "1h 5m",
]
DISABLED_ROWS = ["never", "1h", "30", "-1", "0", "abc", "", "00", "500ms"]


async def hpub(
    s: Session, tail: str, headers: list[tuple[str, str]], payload: bytes = b"x"
) -> None:
    """A publish with an exact header block (raw connection); the PubAck is recorded."""
    await s.raw_request(s.subj(tail), payload, headers=headers, label=f"HPUB {tail} {headers}")


async def dg_last(s: Session, stream: str, tail: str) -> None:
    """Direct Get of the last message on a subject: shows the stored header block."""
    await s.direct_get(stream, {"last_by_subj": s.subj(tail)}, label=f"DG last {tail}")


async def dg_seq(s: Session, stream: str, seq: int) -> None:
    """Direct Get through nats-py, for scenarios that last seconds: nats-server PINGs a raw
    connection about a second after it connects, which a raw request would take as its reply.
    The reply headers are recorded in order, with Nats-Time-Stamp masked."""
    nc = await s.nc()
    subject = f"$JS.API.DIRECT.GET.{stream}"
    msg = await nc.request(subject, json.dumps({"seq": seq}).encode(), timeout=REPLY_TIMEOUT_S)
    headers = [(k, TS_MASK if k == TIME_STAMP else v) for k, v in (msg.headers or {}).items()]
    s.record(f"DG {stream[-3:]} seq {seq}", (headers, msg.data))


# ---------------------------------------------------------------------------------- config


async def test_ttl_and_marker_config_rules(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        subj = [s.subj("base.>")]

        async def create(suffix: str, **cfg: Any) -> None:
            body = {"name": s.stream(suffix), "subjects": [s.subj(suffix.lower() + ".>")], **cfg}
            await s.create(body, label=f"CREATE {suffix} {cfg}")

        await s.create({"name": s.stream(), "subjects": subj, "allow_msg_ttl": True})
        await create("SDM", subject_delete_marker_ttl=S_NS)
        await create("SDMP", subject_delete_marker_ttl=S_NS, deny_purge=True)
        await create(
            "SDMR", subject_delete_marker_ttl=S_NS, allow_rollup_hdrs=True, deny_purge=True
        )
        await create("SDMS", subject_delete_marker_ttl=S_NS // 2)
        await create("SDMN", subject_delete_marker_ttl=-1)
        await create("SDM15", subject_delete_marker_ttl=3 * S_NS // 2)
        await create("PED1", subject_delete_marker_ttl=S_NS, pedantic=True)
        await create("PED2", subject_delete_marker_ttl=S_NS, allow_msg_ttl=True, pedantic=True)
        await create(
            "PED3",
            subject_delete_marker_ttl=S_NS,
            allow_msg_ttl=True,
            allow_rollup_hdrs=True,
            pedantic=True,
        )
        await create("CNT", allow_msg_counter=True, allow_msg_ttl=True)
        await create("CNTS", allow_msg_counter=True, subject_delete_marker_ttl=S_NS)
        await create("OLD", limits_ttl=S_NS)
        mirror = {"name": s.stream("MIR"), "mirror": {"name": s.stream()}}
        await s.create({**mirror, "subject_delete_marker_ttl": S_NS}, label="CREATE mirror SDM")
        # Updates: TTLs can be switched on (also by a marker TTL), never off.
        plain = {"name": s.stream("UPD"), "subjects": [s.subj("upd.>")]}
        await s.create(plain)
        await s.api(f"STREAM.UPDATE.{s.stream('UPD')}", {**plain, "allow_msg_ttl": True})
        await s.api(f"STREAM.UPDATE.{s.stream('UPD')}", {**plain, "allow_msg_ttl": False})
        plain2 = {"name": s.stream("UPD2"), "subjects": [s.subj("upd2.>")]}
        await s.create(plain2)
        await s.api(
            f"STREAM.UPDATE.{s.stream('UPD2')}", {**plain2, "subject_delete_marker_ttl": 2 * S_NS}
        )
        await s.api(f"STREAM.INFO.{s.stream('UPD2')}")
        await s.api(f"STREAM.INFO.{s.stream()}")

    await diff.run(scenario)


# ---------------------------------------------------------------------------------- publish


async def test_ttl_header_rows_and_stored_headers(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj(">")], "allow_direct": True})
        await s.api(
            f"STREAM.UPDATE.{name}",
            {"name": name, "subjects": [s.subj(">")], "allow_direct": True, "allow_msg_ttl": True},
            record=False,
        )
        for i, value in enumerate(TTL_ROWS):
            await hpub(s, f"r{i}", [("Foo", "bar"), (TTL, value)])
            await dg_last(s, name, f"r{i}")
        await hpub(s, "lower", [("nats-ttl", "abc")])
        await hpub(s, "first", [(TTL, "abc"), (TTL, "1h")])
        await hpub(s, "first2", [(TTL, "1h"), (TTL, "abc")])
        await dg_last(s, name, "first2")
        # No STREAM.INFO here: the 1 s rows may be expiring while the scenario runs.

    await diff.run(scenario)


async def test_ttl_on_stream_without_ttls(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj(">")], "allow_direct": True})
        for i, value in enumerate(DISABLED_ROWS):
            await hpub(s, f"d{i}", [(TTL, value)])
        await dg_last(s, name, f"d{DISABLED_ROWS.index('00')}")
        # Where the two TTL errors sit in the check order (§5.4: disabled is 3rd, invalid 13th).
        await hpub(s, "o", [(TTL, "1h"), (EXP_LAST_SEQ, "99")])
        await hpub(s, "o", [(TTL, "abc"), (EXP_LAST_SEQ, "99")])
        await hpub(s, "o", [(TTL, "1h"), (EXP_STREAM, "OTHER")])
        await hpub(s, "o", [(TTL, "abc"), (ROLLUP, "sub")])
        await info(s, name, "disabled")

    await diff.run(scenario)


async def test_ttl_errors_in_check_order(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        config = {
            "name": name,
            "subjects": [s.subj(">")],
            "allow_msg_ttl": True,
            "max_msg_size": 64,
        }
        await s.create(config)
        await hpub(s, "a", [(MSG_ID, "m1"), (TTL, "1h")])
        await hpub(s, "a", [(MSG_ID, "m1"), (TTL, "abc")])
        await hpub(s, "a", [(TTL, "abc"), (EXP_LAST_SEQ, "99")])
        await hpub(s, "a", [(TTL, "abc"), (ROLLUP, "sub")])
        await hpub(s, "a", [(TTL, "abc")], b"y" * 64)
        await hpub(s, "a", [(TTL, "never"), (EXP_LAST_SEQ, "1")])
        await info(s, name, "order")

    await diff.run(scenario)


async def test_marker_ttl_floor_rewrites_the_stored_header(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        base = {"name": name, "subjects": [s.subj("f.>")], "allow_direct": True}
        await s.create({**base, "subject_delete_marker_ttl": 5 * S_NS})
        rows = ["1s", "1.9s", "4", "5", "5s", "6", "1h", "never", "abc"]
        for i, value in enumerate(rows):
            await hpub(s, f"f.{i}", [(TTL, value)])
            await dg_last(s, name, f"f.{i}")
        await hpub(s, "f.order", [("Foo", "bar"), (TTL, "1s"), ("Baz", "qux")])
        await dg_last(s, name, "f.order")
        # max_msgs_per_subject 1 keeps the value as sent; a 1.5 s marker TTL floors at 1 s.
        one = {"name": s.stream("ONE"), "subjects": [s.subj("one.>")], "allow_direct": True}
        await s.create({**one, "subject_delete_marker_ttl": 5 * S_NS, "max_msgs_per_subject": 1})
        await hpub(s, "one.a", [(TTL, "1s")])
        await dg_last(s, s.stream("ONE"), "one.a")
        frac = {"name": s.stream("FRAC"), "subjects": [s.subj("frac.>")], "allow_direct": True}
        await s.create({**frac, "subject_delete_marker_ttl": 3 * S_NS // 2})
        await hpub(s, "frac.a", [(TTL, "1s")])
        await dg_last(s, s.stream("FRAC"), "frac.a")
        await info(s, name, "floor")

    await diff.run(scenario)


async def test_limits_purge_and_delete_leave_no_marker(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create(
            {
                "name": name,
                "subjects": [s.subj(">")],
                "subject_delete_marker_ttl": 60 * S_NS,
                "max_msgs_per_subject": 1,
                "allow_direct": True,
            }
        )
        await hpub(s, "a", [(TTL, "1h")])
        await hpub(s, "a", [(TTL, "1h")])
        await hpub(s, "b", [])
        await hpub(s, "c", [])
        await s.api(f"STREAM.MSG.DELETE.{name}", {"seq": 3})
        await s.api(f"STREAM.PURGE.{name}", {"filter": s.subj("c")})
        await info(s, name, "no markers")

    await diff.run(scenario)


# ---------------------------------------------------------------------------------- expiry


async def test_expiry_and_subject_delete_markers(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        def cfg(suffix: str, **extra: Any) -> dict[str, Any]:
            subjects = [s.subj(suffix.lower() + ".>")]
            return {"name": s.stream(suffix), "subjects": subjects, "allow_direct": True, **extra}

        mk, ma, mam, flo = s.stream("MK"), s.stream("MA"), s.stream("MAM"), s.stream("FLO")
        sld, sln, full, big = s.stream("SLD"), s.stream("SLN"), s.stream("FULL"), s.stream("BIG")
        # A core subscriber on MK's subjects: it sees the publishes, never the markers.
        nc = await s.nc()
        seen: list[tuple[str, Any, bytes]] = []

        async def on_msg(msg: Msg) -> None:
            seen.append((msg.subject, msg.headers, msg.data))

        await nc.subscribe(s.subj("mk.>"), cb=on_msg)
        await nc.flush()
        # MK: markers when the last message of a subject expires by TTL; not for a subject that
        # keeps a message, nor for markers / KV purges; KV-Operation is case-sensitive.
        await s.create(cfg("MK", subject_delete_marker_ttl=S_NS))
        await hpub(s, "mk.a", [(TTL, "1s")])
        await hpub(s, "mk.b", [])
        await hpub(s, "mk.b", [(TTL, "1s")])
        await hpub(s, "mk.c", [(TTL, "1s"), (KV_OP, "PURGE")])
        await hpub(s, "mk.d", [(TTL, "1s"), (MARKER_REASON, "Remove")])
        await hpub(s, "mk.e", [(TTL, "1s"), (KV_OP, "purge")])
        await hpub(s, "mk.f", [(TTL, "1s"), (MARKER_REASON, "")])
        # MA: max_age removes everything but "never"; a TTL longer than max_age does not help.
        await s.create(cfg("MA", max_age=S_NS, allow_msg_ttl=True))
        await hpub(s, "ma.a", [(TTL, "never")])
        await hpub(s, "ma.b", [])
        await hpub(s, "ma.c", [(TTL, "1h")])
        # MAM: a max_age removal leaves a marker, and the marker is subject to max_age itself.
        await s.create(cfg("MAM", max_age=S_NS, subject_delete_marker_ttl=2 * S_NS))
        await hpub(s, "mam.a", [])
        # FLO: a 1 s TTL raised to the 2 s marker TTL; the marker expires 2 s later.
        await s.create(cfg("FLO", subject_delete_marker_ttl=2 * S_NS))
        await hpub(s, "flo.a", [(TTL, "1s")])
        await dg_seq(s, flo, 1)
        # SLD (sealed, markers on): the marker is refused, so the message stays.
        # SLN (sealed, no markers): the TTL still removes it.
        # FULL (discard new, max_msgs 1): the marker does not fit, the message stays.
        # BIG: huge TTLs overflow Go's int64 deadline and are due at once.
        await s.create(cfg("SLD", subject_delete_marker_ttl=S_NS))
        await s.create(cfg("SLN", allow_msg_ttl=True))
        await s.create(cfg("FULL", subject_delete_marker_ttl=S_NS, max_msgs=1, discard="new"))
        await s.create(cfg("BIG", allow_msg_ttl=True))
        await hpub(s, "sld.a", [(TTL, "1s")])
        await hpub(s, "sln.a", [(TTL, "1s")])
        await hpub(s, "full.a", [(TTL, "1s")])
        await hpub(s, "big.a", [(TTL, "99999999999999999999")])
        await hpub(s, "big.b", [(TTL, "9223372037")])
        for stream in (sld, sln):
            sealed = {**cfg(stream[len(s.stream()) :]), "sealed": True}
            if stream == sld:
                sealed["subject_delete_marker_ttl"] = S_NS
            else:
                sealed["allow_msg_ttl"] = True
            await s.api(f"STREAM.UPDATE.{stream}", sealed, label=f"SEAL {stream[-3:]}")

        await wait_state(s, big, "BIG", state_is(0, 2))
        await wait_state(s, mam, "MAM marker", lambda st: st.get("last_seq") == 2)
        await dg_seq(s, mam, 2)
        await wait_state(s, mk, "MK markers", state_is(4, 10))
        for seq in (8, 9, 10):
            await dg_seq(s, mk, seq)
        await s.api(f"STREAM.MSG.GET.{mk}", {"seq": 8}, label="MSG.GET marker")
        await wait_state(s, sln, "SLN", state_is(0, 1))
        await info(s, sld, "SLD still there")
        await info(s, full, "FULL still there")
        await wait_state(s, ma, "MA", state_is(1, 3))
        await dg_seq(s, ma, 1)
        await wait_state(s, mk, "MK markers gone", state_is(1, 10))
        await wait_state(s, flo, "FLO marker", state_is(1, 2))
        await dg_seq(s, flo, 2)
        await wait_state(s, mam, "MAM empty", state_is(0, 2))
        await wait_state(s, flo, "FLO empty", state_is(0, 2))
        await nc.flush()
        s.record("core subscriber", seen)

    await diff.run(scenario)
