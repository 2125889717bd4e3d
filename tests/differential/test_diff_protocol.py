"""Differential: the core client protocol over raw sockets, docs/nats-differences.md §6.

INFO and the async INFO after the first PING, CONNECT validation and defaults, verbose +OK,
pedantic checks, every -ERR text and whether the connection is closed, malformed arguments,
subject matching, queue groups, echo, headers relayed verbatim and no-responders statuses.
Each case is a list of exchanges on one connection; every frame the server sends is compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.differential.diff_harness import Differ, Session
from tests.differential.diff_raw import DEFAULT_CONNECT, connect_line, hpub, pub

pytestmark = pytest.mark.differential

MAX_PAYLOAD_BYTES = 1048576
MAX_CONTROL_LINE_BYTES = 4096
QUIET_S = 0.3


@dataclass(frozen=True)
class Send:
    """Bytes to send; expect_close waits for the close instead of appending a PING.

    sid_aliases hides which member of a queue group got a message (a random choice)."""

    data: bytes
    expect_close: bool = False
    sid_aliases: dict[str, str] | None = None


def opts(**kw: Any) -> dict[str, Any]:
    return {**DEFAULT_CONNECT, **kw}


# connect: options dict -> handshake with CONNECT; None -> raw, nothing sent yet.
CASES: dict[str, tuple[dict[str, Any] | None, list[Send]]] = {
    "ops_before_connect": (
        None,
        [Send(b"SUB x 1\r\n" + pub("x", b"hi")), Send(b"UNSUB 1\r\n" + pub("x", b"hi"))],
    ),
    "connect_empty_defaults_verbose_pedantic": (
        None,
        [
            Send(b"CONNECT {}\r\n"),
            Send(b"SUB foo.* 1\r\n"),
            Send(pub("foo.*", b"wild")),
            Send(pub("foo.bar", b"ok")),
            Send(hpub("foo.h", b"NATS/1.0\r\nA: b\r\n\r\n", b"p")),
            Send(b"UNSUB 1\r\n"),
        ],
    ),
    "verbose_ok_per_op": (
        opts(verbose=True),
        [
            Send(b"SUB v 1\r\n"),
            Send(pub("v", b"x")),
            Send(hpub("v", b"NATS/1.0\r\nK: v\r\n\r\n", b"x")),
            Send(b"UNSUB 1\r\n"),
            Send(b"UNSUB 99\r\n"),
            Send(b"SUB bad..subj 2\r\n"),
        ],
    ),
    "pedantic_publish_subjects": (
        opts(pedantic=True),
        [
            Send(b"SUB > 1\r\n"),
            Send(pub("p.*", b"a")),
            Send(pub("p.>", b"b")),
            Send(pub("p..q", b"c")),
            Send(pub("p.ok", b"d")),
        ],
    ),
    "connect_protocol_2": (None, [Send(connect_line(opts(protocol=2)), expect_close=True)]),
    "connect_no_responders_without_headers": (
        None,
        [Send(connect_line(opts(headers=False, no_responders=True)), expect_close=True)],
    ),
    "connect_bad_json": (None, [Send(b"CONNECT {x\r\n", expect_close=True)]),
    "connect_unknown_field": (None, [Send(b'CONNECT {"zzz":1,"verbose":false}\r\n')]),
    "connect_twice": (opts(), [Send(connect_line(opts(verbose=True)) + b"SUB t 1\r\n")]),
    "unknown_op": (opts(), [Send(b"FOO bar\r\n", expect_close=True)]),
    "unknown_op_lowercase": (opts(), [Send(b"hello\r\n", expect_close=True)]),
    "payload_longer_than_declared": (
        opts(),
        [Send(b"PUB x 2\r\nhello\r\n", expect_close=True)],
    ),
    "max_payload_pub": (
        opts(),
        [Send(f"PUB x {MAX_PAYLOAD_BYTES + 1}\r\n".encode(), expect_close=True)],
    ),
    "max_payload_exact_is_fine": (
        opts(),
        [Send(b"SUB x 1\r\n" + pub("x", b"z" * MAX_PAYLOAD_BYTES))],
    ),
    "max_payload_hpub_total": (
        opts(),
        [Send(f"HPUB x 12 {MAX_PAYLOAD_BYTES + 1}\r\n".encode(), expect_close=True)],
    ),
    "max_control_line": (
        opts(),
        [Send(b"PUB " + b"a" * (MAX_CONTROL_LINE_BYTES + 100) + b" 1\r\nx\r\n", expect_close=True)],
    ),
    "invalid_sub_subjects_stay_open": (
        opts(),
        [
            Send(b"SUB foo..bar 1\r\n"),
            Send(b"SUB foo.>.bar 2\r\n"),
            Send(b"SUB .foo 3\r\n"),
            Send(b"SUB foo. 4\r\n"),
            Send(b"SUB foo*.bar 5\r\n" + pub("foo*.bar", b"literal")),
        ],
    ),
    "sys_queue_forbidden": (
        opts(),
        [Send(b"SUB foo _sys_ 1\r\n" + pub("foo", b"x")), Send(b"SUB foo q 2\r\n")],
    ),
    "pub_missing_size": (opts(), [Send(b"PUB foo\r\n", expect_close=True)]),
    "pub_bad_size": (opts(), [Send(b"PUB foo abc\r\n", expect_close=True)]),
    "hpub_header_larger_than_total": (opts(), [Send(b"HPUB foo 10 5\r\n", expect_close=True)]),
    "hpub_without_headers_support": (
        opts(headers=False, no_responders=False),
        [Send(hpub("foo", b"NATS/1.0\r\n\r\n", b"x"), expect_close=True)],
    ),
    "sub_missing_sid": (opts(), [Send(b"SUB foo\r\n", expect_close=True)]),
    "unsub_missing_sid": (opts(), [Send(b"UNSUB\r\n", expect_close=True)]),
    "ops_case_and_tabs": (
        opts(),
        [
            Send(b"sub lower 1\r\npub lower 2\r\nhi\r\n"),
            Send(b"SUB\ttab\t2\r\nPUB\ttab\t2\r\nhi\r\n"),
            Send(b"Sub mixed  3\r\nPuB mixed   2\r\nhi\r\n"),
            Send(b"ping\r\n"),
        ],
    ),
    "duplicate_sid_and_unsub": (
        opts(),
        [
            Send(b"SUB a 1\r\nSUB b 1\r\n" + pub("a", b"to-a") + pub("b", b"to-b")),
            Send(b"UNSUB 77\r\n"),
            Send(b"SUB c 2\r\nUNSUB 2 2\r\n" + b"".join(pub("c", b"%d" % i) for i in range(4))),
            Send(b"SUB d 3\r\n" + pub("d", b"1") + b"UNSUB 3 2\r\n" + pub("d", b"2")),
            Send(pub("d", b"3")),
        ],
    ),
    "echo_false": (
        opts(echo=False),
        [Send(b"SUB e 1\r\n" + pub("e", b"self"))],
    ),
    "hpub_zero_header_and_verbatim": (
        opts(),
        [
            Send(b"SUB h.> 1\r\n"),
            Send(hpub("h.zero", b"", b"payload")),
            Send(hpub("h.raw", b"XYZ\r\n\r\n", b"p")),
            Send(hpub("h.status", b"NATS/1.0 503\r\n\r\n", b"")),
            Send(hpub("h.multi", b"NATS/1.0\r\nA: 1\r\nA: 2\r\na:  3 \r\n\r\n", b"p")),
            Send(b"HPUB h.empty 0 0\r\n\r\n"),
            Send(b"PUB h.empty.pub 0\r\n\r\n"),
        ],
    ),
    "subject_matching": (
        opts(),
        [
            Send(b"SUB a.> 1\r\nSUB a.* 2\r\nSUB > 3\r\nSUB a.b.c 4\r\n"),
            Send(pub("a", b"1")),
            Send(pub("a.b", b"2")),
            Send(pub("a.b.c", b"3")),
            Send(pub("foo..bar", b"dropped")),
            Send(pub(".foo", b"dropped")),
            Send(pub("a.*", b"literal star")),
        ],
    ),
    "queue_group_one_member": (
        opts(),
        [
            Send(b"SUB q.x grp 1\r\nSUB q.x grp 2\r\nSUB q.x 3\r\n"),
            Send(pub("q.x", b"one"), sid_aliases={"1": "grp", "2": "grp"}),
            Send(b"UNSUB 1\r\n" + pub("q.x", b"two")),
        ],
    ),
    "no_responders": (
        opts(),
        [
            Send(b"SUB _INBOX.me.> 1\r\n"),
            Send(pub("nobody.here", b"req", "_INBOX.me.1")),
            Send(hpub("nobody.h", b"NATS/1.0\r\nK: v\r\n\r\n", b"req", "_INBOX.me.2")),
            Send(pub("nobody.here", b"req", "_INBOX.other.1")),
            Send(pub("nobody.here", b"")),
            Send(b"SUB svc 2\r\n" + pub("svc", b"req", "_INBOX.me.3")),
        ],
    ),
    "no_responders_off": (
        opts(no_responders=False),
        [Send(b"SUB _INBOX.me.> 1\r\n" + pub("nobody.here", b"req", "_INBOX.me.1"))],
    ),
    "ping_pong_no_connect": (None, [Send(b"PING\r\n"), Send(b"PING\r\n")]),
    "pong_from_client_ignored": (opts(), [Send(b"PONG\r\n")]),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_protocol(diff: Differ, case: str) -> None:
    connect, sends = CASES[case]

    async def scenario(s: Session) -> None:
        conn = await s.raw(connect, label="handshake")
        for i, send in enumerate(sends):
            label = f"{i}: {send.data[:120]!r}"
            await s.exchange(
                conn,
                label,
                send.data,
                expect_close=send.expect_close,
                sid_aliases=send.sid_aliases,
            )
            if conn.closed:
                break

    await diff.run(scenario)


@pytest.mark.parametrize(
    "connect",
    [opts(), opts(protocol=0), opts(verbose=True), {"verbose": False}],
    ids=["protocol1", "protocol0", "verbose", "minimal"],
)
async def test_info_and_async_info(diff: Differ, connect: dict[str, Any]) -> None:
    """INFO keys and values (ids masked), and the async INFO after the first PING."""

    async def scenario(s: Session) -> None:
        conn = await s.raw(connect, label="handshake", record_info=True)
        await s.exchange(conn, "third ping", b"PING\r\n")

    await diff.run(scenario)


async def test_messages_between_connections(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        sub = await s.raw(opts(), label="sub handshake")
        pub_conn = await s.raw(opts(), label="pub handshake")
        await s.exchange(sub, "subscribe", b"SUB m.* 5\r\nSUB m.* qq 6\r\nSUB m.* qq 7\r\n")
        await s.exchange(pub_conn, "publish", pub("m.1", b"one", "r.1") + pub("m.2", b"two"))
        # The publisher's PONG means its messages were routed; the subscriber's PING flushes.
        grp = {"6": "grp", "7": "grp"}
        await s.exchange(sub, "receive", b"", sid_aliases=grp)
        req = await s.raw(opts(), label="req handshake")
        await s.exchange(req, "request", b"SUB rr.> 1\r\n" + pub("m.3", b"q", "rr.1"))
        await s.exchange(sub, "request arrives", b"", sid_aliases=grp)

    await diff.run(scenario)


async def test_queue_group_distribution_across_connections(diff: Differ) -> None:
    """Each message goes to exactly one member of a queue group (members may be anywhere)."""

    async def scenario(s: Session) -> None:
        members = [await s.raw(opts()) for _ in range(3)]
        for i, member in enumerate(members):
            await member.send(f"SUB qd grp {i + 1}\r\nPING\r\n".encode())
            await member.read_until_pong()
        sender = await s.raw(opts())
        messages = 30
        batch = b"".join(pub("qd", b"%d" % i) for i in range(messages))
        await s.exchange(sender, "publish", batch)
        received: list[bytes] = []
        for member in members:
            await member.send(b"PING\r\n")
            frames = await member.read_until_pong()
            received += [f.payload for f in frames if f.op == "MSG"]
        s.record("deliveries", len(received))
        s.record("distinct", sorted(int(p) for p in received) == list(range(messages)))

    await diff.run(scenario)
