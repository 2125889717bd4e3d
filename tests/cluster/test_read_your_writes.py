"""Read-your-writes Direct Get (``min_last_seq``): never answered from a state that lacks it.

Three levels:

* one ``StreamHost`` on a bare router (no network): a request waits for the apply that reaches its
  ``min_last_seq`` and is answered then; past ``DIRECT_GET_MIN_SEQ_WAIT_S`` it gets ``412 Min
  Last Sequence Not Applied``; past ``DIRECT_GET_WAITERS_MAX`` parked requests, at once; closing
  answers the parked ones;
* an in-process R3 cluster: under publish load every read asking for the client's own PubAck
  sequence sees it, while followers still serve reads; a follower made to lag (its Raft group
  paused) answers 412 after the wait, not stale data, answers once it applies, and answers 412
  when it drops its Direct Get subscription;
* a jetraft process used by nats-py: wait-then-answer and 412 on a single server.

Must never: sleep blindly (waits poll a condition with a deadline) or leave a process running.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS

from cluster import raft_log
from cluster.direct_get_responder import (
    DIRECT_GET_MIN_SEQ_WAIT_S,
    SERVED_BY_HEADER,
    DirectGetLimits,
)
from cluster.local_log import LocalLog
from cluster.router import Router
from cluster.stream_host import StreamHost
from engine.entries import UpdateConfigEntry
from engine.memstore import MemoryStore
from engine.stream import Stream
from protocol.headers import get_header
from protocol.models import StreamConfig
from tests.cluster.inprocess import InProcessCluster, wait_for
from tests.servers import ServerProc, start_jetraft

DG = "$JS.API.DIRECT.GET."
NOT_APPLIED = b"NATS/1.0 412 Min Last Sequence Not Applied\r\n\r\n"
NOT_APPLIED_DESCRIPTION = "Min Last Sequence Not Applied"
REQUEST_TIMEOUT_S = 5.0
HOST_WAIT_S = 5.0
SHORT_WAIT_S = 0.05
LONG_WAIT_S = 10.0  # "forever" for a test that releases the wait itself
ASK_SERVED_BY = {SERVED_BY_HEADER: "1"}
WRITERS = 3
WRITES_PER_WRITER = 50
ROUND_REQUESTS = 12
# The queue group spreads requests over the replicas at random: tests that need one replica to
# get a request send rounds of them until it has, for at most this long (far more than needed).
ROUTED_DEADLINE_S = 60.0
# Under load, the writers go on past WRITES_PER_WRITER until a follower has answered a read and a
# read has waited for its sequence, for at most this long.
LOAD_DEADLINE_S = 60.0
ANSWERED_SHARE_MIN = 0.5


# ---- one host on a bare router ----------------------------------------------------------------


@dataclass
class Rig:
    router: Router
    host: StreamHost
    replies: dict[str, list[tuple[bytes | None, bytes]]]

    def ask(self, reply: str, body: dict[str, Any], hdr: bytes | None = None) -> None:
        self.router.publish(DG + "S", reply, hdr, json.dumps(body).encode())

    def write(self, data: bytes, subject: str = "s.a") -> None:
        self.router.publish(subject, None, None, data)

    async def written(self, last_seq: int) -> None:
        await wait_for(lambda: self.host.stream.last_seq >= last_seq, "apply", HOST_WAIT_S)

    async def answered(self, reply: str) -> tuple[bytes | None, bytes]:
        await wait_for(lambda: reply in self.replies, f"an answer on {reply}", HOST_WAIT_S)
        [answer] = self.replies[reply]
        return answer


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    router = Router()
    replies: dict[str, list[tuple[bytes | None, bytes]]] = {}

    def on_reply(subject: str, _reply: str | None, hdr: bytes | None, payload: bytes) -> None:
        replies.setdefault(subject, []).append((hdr, payload))

    router.subscribe_internal("_INBOX.>", on_reply)
    config = StreamConfig(name="S", subjects=["s.>"], storage="memory", allow_direct=True)
    store = MemoryStore()
    host = StreamHost(
        Stream(config, store, 1),
        store,
        router,
        lambda owner: LocalLog(owner, store, durable=False),
        node_name="solo",
    )
    host.start()
    try:
        yield Rig(router, host, replies)
    finally:
        await host.close()


def seq_of(hdr: bytes | None) -> int:
    assert hdr is not None and hdr.startswith(b"NATS/1.0\r\n"), hdr
    return int(get_header(hdr, "Nats-Sequence") or 0)


async def test_host_answers_once_the_sequence_is_applied(rig: Rig) -> None:
    rig.write(b"one")
    await rig.written(1)
    rig.ask("_INBOX.1", {"last_by_subj": "s.a", "min_last_seq": 2})
    rig.ask("_INBOX.2", {"seq": 1, "batch": 5, "min_last_seq": 3})
    rig.ask("_INBOX.3", {"last_by_subj": "s.a", "min_last_seq": 1})  # already there
    assert list(rig.replies) == ["_INBOX.3"] and seq_of(rig.replies["_INBOX.3"][0][0]) == 1
    rig.write(b"two")
    hdr, data = await rig.answered("_INBOX.1")
    assert (seq_of(hdr), data) == (2, b"two")
    assert "_INBOX.2" not in rig.replies  # still waiting for 3
    rig.write(b"three", "s.b")
    await wait_for(lambda: len(rig.replies.get("_INBOX.2", [])) == 4, "the batch", HOST_WAIT_S)
    batch = rig.replies["_INBOX.2"]
    assert [seq_of(h) for h, _ in batch[:3]] == [1, 2, 3]  # computed when answered: all three
    assert batch[3][0] is not None and batch[3][0].startswith(b"NATS/1.0 204 EOB\r\n")
    assert rig.host.direct.waiting == 0


async def test_host_answers_412_after_the_wait(rig: Rig) -> None:
    rig.host.direct.limits = DirectGetLimits(wait_s=SHORT_WAIT_S)
    rig.write(b"one")
    await rig.written(1)
    started = time.monotonic()
    rig.ask("_INBOX.1", {"seq": 1, "min_last_seq": 5})
    rig.ask("_INBOX.2", {"seq": 1, "min_last_seq": 5}, b"NATS/1.0\r\nJetraft-Served-By: 1\r\n\r\n")
    assert await rig.answered("_INBOX.1") == (NOT_APPLIED, b"")
    assert time.monotonic() - started >= SHORT_WAIT_S
    hdr, _ = await rig.answered("_INBOX.2")
    assert hdr == b"NATS/1.0 412 Min Last Sequence Not Applied\r\nJetraft-Served-By: solo\r\n\r\n"
    assert rig.host.direct.waiting == 0 and rig.host.direct.waiting_bytes == 0


async def test_host_parks_a_bounded_number(rig: Rig) -> None:
    rig.host.direct.limits = DirectGetLimits(waiters_max=3, wait_s=LONG_WAIT_S)
    for i in range(4):
        rig.ask(f"_INBOX.{i}", {"last_by_subj": "s.a", "min_last_seq": 1})
    assert list(rig.replies) == ["_INBOX.3"]  # the fourth, at once
    assert rig.replies["_INBOX.3"] == [(NOT_APPLIED, b"")]
    rig.write(b"one")
    for i in range(3):
        hdr, data = await rig.answered(f"_INBOX.{i}")
        assert (seq_of(hdr), data) == (1, b"one")


async def test_host_parks_a_bounded_number_of_bytes(
    rig: Rig,
) -> None:
    rig.host.direct.limits = DirectGetLimits(waiters_bytes_max=100, wait_s=LONG_WAIT_S)
    rig.ask("_INBOX.0", {"last_by_subj": "s.a", "min_last_seq": 1})
    rig.ask("_INBOX.1", {"last_by_subj": "s." + "x" * 100, "min_last_seq": 1})
    assert rig.replies == {"_INBOX.1": [(NOT_APPLIED, b"")]}
    rig.write(b"one")
    assert seq_of((await rig.answered("_INBOX.0"))[0]) == 1


async def test_expired_waiters_do_not_pile_up(rig: Rig) -> None:
    rig.host.direct.limits = DirectGetLimits(waiters_max=2, wait_s=0.0)
    for i in range(8):
        rig.ask(f"_INBOX.{i}", {"seq": 1, "min_last_seq": 1000})
        assert await rig.answered(f"_INBOX.{i}") == (NOT_APPLIED, b"")
        assert rig.host.direct.heap_size <= 2 * 2
    assert rig.host.direct.waiting == 0


async def test_closing_answers_parked_requests(rig: Rig) -> None:
    rig.host.direct.limits = DirectGetLimits(wait_s=LONG_WAIT_S)
    rig.ask("_INBOX.1", {"seq": 1, "min_last_seq": 1})
    started = time.monotonic()
    await rig.host.close()
    assert rig.replies == {"_INBOX.1": [(NOT_APPLIED, b"")]}
    assert time.monotonic() - started < LONG_WAIT_S / 2
    rig.ask("_INBOX.2", {"seq": 1, "min_last_seq": 1})  # unsubscribed: nobody answers
    assert "_INBOX.2" not in rig.replies


async def test_allow_direct_off_answers_parked_requests(
    rig: Rig,
) -> None:
    rig.host.direct.limits = DirectGetLimits(wait_s=LONG_WAIT_S)
    rig.ask("_INBOX.1", {"seq": 1, "min_last_seq": 1})
    off = rig.host.config.model_copy(update={"allow_direct": False})
    # the update's apply does not reach the sequence, but it turns Direct Get off: the host
    # refreshes its subscriptions and the parked request is answered rather than left to time out
    await rig.host.propose(UpdateConfigEntry(1, off.model_dump_json().encode()))
    await wait_for(
        lambda: "_INBOX.1" in rig.replies, "the parked request's answer", LONG_WAIT_S / 2
    )
    assert rig.replies == {"_INBOX.1": [(NOT_APPLIED, b"")]}
    assert not rig.host.direct.serving(rig.host.name)


# ---- an in-process R3 cluster ------------------------------------------------------------------


@dataclass
class Read:
    served_by: str
    status: str | None
    description: str | None
    seq: int
    data: bytes
    elapsed_s: float


async def direct_get(nc: NATS, stream: str, body: dict[str, Any]) -> Read:
    started = time.monotonic()
    msg = await nc.request(
        DG + stream, json.dumps(body).encode(), REQUEST_TIMEOUT_S, headers=ASK_SERVED_BY
    )
    headers = msg.headers or {}
    return Read(
        served_by=headers[SERVED_BY_HEADER],
        status=headers.get("Status"),
        description=headers.get("Description"),
        seq=int(headers.get("Nats-Sequence", "0")),
        data=msg.data,
        elapsed_s=time.monotonic() - started,
    )


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[InProcessCluster, list[NATS]]]:
    c = InProcessCluster(tmp_path, 3)
    await c.start()
    conns: list[NATS] = []
    try:
        conns = [await nats.connect(url) for url in c.urls]
        js = conns[0].jetstream(timeout=REQUEST_TIMEOUT_S)
        await js.add_stream(name="RYW", subjects=["ryw.>"], num_replicas=3, allow_direct=True)

        def all_serve() -> bool:
            hosts = [c.replica(i, "RYW") for i in c.live()]
            return all(h is not None and h.direct.serving("RYW") for h in hosts)

        await wait_for(all_serve, "every replica to answer Direct Get")
        yield c, conns
    finally:
        for nc in conns:
            await nc.close()
        await c.stop()


async def test_reads_under_load_are_never_stale_and_spread(
    cluster: tuple[InProcessCluster, list[NATS]],
) -> None:
    c, conns = cluster
    last_ack: dict[str, int] = {}
    reads: list[tuple[Read, str]] = []  # (read, name of the leader when it was answered)
    stale_without_min = 0
    plain_reads = 0
    deadline = time.monotonic() + LOAD_DEADLINE_S

    def parked_reads() -> int:
        return sum(h.direct.parked for i in c.live() if (h := c.replica(i, "RYW")))

    def answered_by_followers() -> int:
        return sum(1 for r, leader in reads if r.status is None and r.served_by != leader)

    def seen_enough() -> bool:
        """What the test must see besides fresh reads: followers answering, a read waiting."""
        return answered_by_followers() > 0 and parked_reads() > 0

    async def writer(w: int) -> None:
        nonlocal stale_without_min, plain_reads
        js = conns[w % len(conns)].jetstream(timeout=REQUEST_TIMEOUT_S)
        own = f"ryw.w{w}"
        other = f"ryw.w{(w + 1) % WRITERS}"
        i = 0
        # which replica answers is up to the queue group: a fixed count of writes may by chance
        # never show a follower answering or a read parked, so go on until both were seen
        while i < WRITES_PER_WRITER or not seen_enough():
            if time.monotonic() > deadline:
                break  # the assertions below say what was never seen
            ack = await js.publish(own, f"{w}-{i}".encode())
            last_ack[own] = ack.seq
            nc = conns[(w + i) % len(conns)]
            # my own write, at once: exactly it (nobody else writes this subject)
            mine = await direct_get(nc, "RYW", {"last_by_subj": own, "min_last_seq": ack.seq})
            reads.append((mine, _leader_name(c)))
            if mine.status is None:
                assert (mine.seq, mine.data) == (ack.seq, f"{w}-{i}".encode()), mine
            # someone else's subject, asking for the newest sequence acknowledged to anyone:
            # every write to it acknowledged before the read started must be visible
            known, newest = last_ack.get(other, 0), max(last_ack.values())
            theirs = await direct_get(nc, "RYW", {"last_by_subj": other, "min_last_seq": newest})
            reads.append((theirs, _leader_name(c)))
            if theirs.status is None:
                assert theirs.seq >= known, (theirs, known)
            elif theirs.status == "404":
                assert known == 0
            # the same read without the field: may be stale (counted, for the report)
            plain = await direct_get(nc, "RYW", {"last_by_subj": own})
            plain_reads += 1
            if plain.seq < ack.seq:
                stale_without_min += 1
            i += 1

    async def stall_a_follower() -> None:
        """Stop one follower's applies until a read needing a sequence it does not have yet is
        parked there (a replica lagging under load, exaggerated), let it catch up and answer,
        again and again. Each stall ends on what it waits for, not after a set time, so the
        parked reads are answered (well within DIRECT_GET_MIN_SEQ_WAIT_S) once it applies."""
        leader = c.leader_of("RYW")
        follower = next(i for i in c.live() if i != leader)
        host = c.replica(follower, "RYW")
        assert host is not None
        try:
            while not done.is_set():
                host.log.group.paused = True
                await wait_for(
                    lambda: host.direct.waiting > 0 or done.is_set(),
                    "a read parked on the stalled follower",
                    LOAD_DEADLINE_S,
                )
                _resume(c, follower)
                await wait_for(
                    lambda: host.direct.waiting == 0 or done.is_set(),
                    "the stalled follower to answer its parked reads",
                    LOAD_DEADLINE_S,
                )
        finally:
            _resume(c, follower)

    done = asyncio.Event()
    nemesis = asyncio.create_task(stall_a_follower())
    try:
        await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    finally:
        done.set()
        await nemesis
    answered = [r for r, _ in reads if r.status in (None, "404")]
    refused = [r for r, _ in reads if r.status == "412"]
    assert len(answered) + len(refused) == len(reads), [r.status for r, _ in reads]
    assert all(r.description == NOT_APPLIED_DESCRIPTION for r in refused)
    assert len(answered) >= ANSWERED_SHARE_MIN * len(reads)
    by_followers = answered_by_followers()
    parked = parked_reads()
    print(
        f"\nread-your-writes under load: {len(reads)} reads, {len(refused)} x 412, "
        f"{by_followers} answered by followers, {parked} waited for their sequence; "
        f"{stale_without_min} of {plain_reads} reads without min_last_seq were stale"
    )
    assert by_followers > 0  # reads still spread over the replicas
    assert parked > 0  # and some of them did wait for their sequence


def _leader_name(c: InProcessCluster) -> str:
    leader = c.leader_of("RYW")
    return "" if leader is None else f"n{leader}"


async def _lagging_follower(c: InProcessCluster, conns: list[NATS]) -> tuple[int, int, int]:
    """Publish "old", let every replica apply it, pause one follower's Raft group, publish
    "new" and let the other replicas apply it. Returns (follower index, seq of old, seq of
    new)."""
    js = conns[0].jetstream(timeout=REQUEST_TIMEOUT_S)
    old = await js.publish("ryw.lag", b"old")
    await wait_for(
        lambda: all((h := c.replica(i, "RYW")) and h.stream.last_seq >= old.seq for i in c.live()),
        "every replica to apply the first write",
    )
    leader = c.leader_of("RYW")
    follower = next(i for i in c.live() if i != leader)
    host = c.replica(follower, "RYW")
    assert host is not None
    host.log.group.paused = True  # the driver skips its ticks: nothing more is applied there
    new = await js.publish("ryw.lag", b"new")
    assert host.stream.last_seq == old.seq
    # the other follower too, so that only the paused one can answer late (not a slow apply)
    await wait_for(
        lambda: all(
            (h := c.replica(i, "RYW")) and h.stream.last_seq >= new.seq
            for i in c.live()
            if i != follower
        ),
        "the other replicas to apply the second write",
    )
    return follower, old.seq, new.seq


def _resume(c: InProcessCluster, follower: int) -> None:
    host = c.replica(follower, "RYW")
    assert host is not None
    host.log.group.paused = False
    host.log.driver.kick(host.log.group.group_name)


async def test_a_lagging_follower_answers_412_not_stale_data(
    cluster: tuple[InProcessCluster, list[NATS]],
) -> None:
    c, conns = cluster
    follower, old, new = await _lagging_follower(c, conns)
    lagging = f"n{follower}"
    with_min: list[Read] = []
    without_min: list[Read] = []
    deadline = time.monotonic() + ROUTED_DEADLINE_S
    while not (
        any(r.served_by == lagging for r in with_min)
        and any(r.served_by == lagging for r in without_min)
    ):
        if time.monotonic() > deadline:
            break  # the assertions below say which kind it never got
        body = {"last_by_subj": "ryw.lag"}
        batch = await asyncio.gather(
            *(
                direct_get(conns[k % 3], "RYW", {**body, "min_last_seq": new})
                for k in range(ROUND_REQUESTS)
            ),
            *(direct_get(conns[k % 3], "RYW", body) for k in range(ROUND_REQUESTS)),
        )
        with_min += batch[:ROUND_REQUESTS]
        without_min += batch[ROUND_REQUESTS:]
    by_lagging = [r for r in with_min if r.served_by == lagging]
    assert by_lagging, "the lagging follower never got a request"
    for r in by_lagging:
        assert (r.status, r.description, r.data) == ("412", NOT_APPLIED_DESCRIPTION, b"")
        assert r.elapsed_s >= DIRECT_GET_MIN_SEQ_WAIT_S * 0.9
    for r in with_min:
        if r.served_by != lagging:
            assert (r.status, r.seq, r.data) == (None, new, b"new")
    # without the field the same follower does answer, from its old state: the lag was real
    stale = [r for r in without_min if r.served_by == lagging]
    assert stale and all((r.seq, r.data) == (old, b"old") for r in stale)
    _resume(c, follower)


async def _parked_on_a_lagging_follower(
    cluster: tuple[InProcessCluster, list[NATS]], monkeypatch: pytest.MonkeyPatch
) -> tuple[InProcessCluster, int, Any, list[asyncio.Task[Read]], int]:
    """Reads parked (long wait) on a paused follower for the seq it lacks: (cluster, follower,
    its host, the read tasks, that seq)."""
    c, conns = cluster
    follower, _old, new = await _lagging_follower(c, conns)
    host = c.replica(follower, "RYW")
    assert host is not None
    host.direct.limits = DirectGetLimits(wait_s=LONG_WAIT_S)
    tasks = await _park_at(host, conns, {"last_by_subj": "ryw.lag", "min_last_seq": new})
    return c, follower, host, tasks, new


async def test_a_lagging_follower_answers_once_it_applies(
    cluster: tuple[InProcessCluster, list[NATS]], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, follower, _host, tasks, new = await _parked_on_a_lagging_follower(cluster, monkeypatch)
    _resume(c, follower)
    reads = await asyncio.gather(*tasks)
    assert any(r.served_by == f"n{follower}" for r in reads)
    for r in reads:
        assert (r.status, r.seq, r.data) == (None, new, b"new"), r
        assert r.elapsed_s < LONG_WAIT_S / 2


async def test_a_follower_dropping_direct_get_answers_its_parked_requests(
    cluster: tuple[InProcessCluster, list[NATS]], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, follower, host, tasks, new = await _parked_on_a_lagging_follower(cluster, monkeypatch)
    # any lag is now too much: the next tick unsubscribes the paused follower from Direct Get
    monkeypatch.setattr(raft_log, "DIRECT_GET_LAG_MAX", 0)
    reads = await asyncio.gather(*tasks)
    by_follower = [r for r in reads if r.served_by == f"n{follower}"]
    assert by_follower and not host.direct.serving("RYW")
    for r in by_follower:
        assert (r.status, r.description) == ("412", NOT_APPLIED_DESCRIPTION)
        assert r.elapsed_s < LONG_WAIT_S / 2
    for r in reads:
        if r.served_by != f"n{follower}":
            assert (r.status, r.seq) == (None, new)
    monkeypatch.undo()
    _resume(c, follower)


async def _park_at(
    host: StreamHost[raft_log.RaftLog], conns: list[NATS], body: dict[str, Any]
) -> list[asyncio.Task[Read]]:
    """Send requests (spread by the queue group) until ``host`` holds one of them parked."""
    tasks: list[asyncio.Task[Read]] = []
    deadline = time.monotonic() + ROUTED_DEADLINE_S
    while time.monotonic() < deadline:
        tasks.extend(
            asyncio.create_task(direct_get(conns[k % 3], "RYW", body))
            for k in range(ROUND_REQUESTS)
        )
        await wait_for(
            lambda: host.direct.waiting > 0 or all(t.done() for t in tasks),
            "requests answered or parked",
        )
        if host.direct.waiting > 0:
            return tasks
    raise AssertionError("the follower never got a request")


# ---- a single jetraft server, through nats-py --------------------------------------------------


@pytest.fixture
def jetraft(tmp_path: Path) -> Iterator[ServerProc]:
    proc = start_jetraft(tmp_path)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.mark.integration
async def test_single_server_waits_then_answers_or_412(jetraft: ServerProc) -> None:
    nc = await nats.connect(jetraft.url)
    try:
        js = nc.jetstream(timeout=REQUEST_TIMEOUT_S)
        await js.add_stream(name="S1", subjects=["one.>"], allow_direct=True)
        first = await js.publish("one.k", b"v1")
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        # The request, then the write, on one connection: the server reads them in this order,
        # so the request arrives while the stream lacks the sequence, and must wait for it.
        body = {"last_by_subj": "one.k", "min_last_seq": first.seq + 1}
        await nc.publish(DG + "S1", json.dumps(body).encode(), reply=inbox)
        await nc.publish("one.k", b"v2")
        msg = await sub.next_msg(REQUEST_TIMEOUT_S)
        assert msg.headers is not None and "Status" not in msg.headers
        assert (msg.headers["Nats-Sequence"], msg.data) == (str(first.seq + 1), b"v2")
        # satisfied at once: the plain answer
        now = await direct_get(nc, "S1", {"last_by_subj": "one.k", "min_last_seq": first.seq})
        assert (now.status, now.seq, now.served_by) == (None, first.seq + 1, "j1")
        # never reached: 412 after the wait, with an empty payload
        late = await direct_get(nc, "S1", {"last_by_subj": "one.k", "min_last_seq": 100})
        assert (late.status, late.description, late.data) == ("412", NOT_APPLIED_DESCRIPTION, b"")
        assert late.elapsed_s >= DIRECT_GET_MIN_SEQ_WAIT_S * 0.9
        # alone it selects nothing (408, as nats-server); MSG.GET refuses the field (10025)
        alone = await nc.request(DG + "S1", b'{"min_last_seq":1}', REQUEST_TIMEOUT_S)
        assert alone.headers is not None and alone.headers["Status"] == "408"
        refused = await nc.request(
            "$JS.API.STREAM.MSG.GET.S1", b'{"seq":1,"min_last_seq":1}', REQUEST_TIMEOUT_S
        )
        assert json.loads(refused.data)["error"] == {
            "code": 400,
            "err_code": 10025,
            "description": 'invalid JSON: json: unknown field "min_last_seq"',
        }
    finally:
        await nc.close()
