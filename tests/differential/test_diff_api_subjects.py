"""Differential: every $JS.API subject nats-server answers gets jetraft's answer at once (issue
17), docs/nats-differences.md §5 and "Deliberate differences".

The subjects beyond the stream and consumer basics, on a single server: STREAM.PEER.REMOVE and
STREAM.PEER.EVACUATE, STREAM.CANCEL_MOVE (10010: they need a cluster), STREAM.SNAPSHOT and
STREAM.RESTORE (every check nats-server makes before the transfer; the transfer's shapes:
tests/differential/test_diff_stream_backup.py), CONSUMER.UNPIN (no consumer has a priority
group), and the subjects nats-server keeps for its system account: silent on a single server
but for ACCOUNT.PURGE, which jetraft's one account may send (compared with nats-server's
system account). Subjects nats-server does not know (CONSUMER.RESET, the old STREAM.TEMPLATE
API) stay unanswered. The cluster side of these subjects: tests/cluster/test_admin_api_cluster.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.differential.conftest import candidate_side, system_url
from tests.differential.diff_harness import (
    TIMEOUT,
    Differ,
    Session,
    diff_report,
)
from tests.servers import ServerProc

pytestmark = pytest.mark.differential

API_LEVEL = "Nats-Required-Api-Level"
TOO_HIGH = {API_LEVEL: "99"}
BAD_BODIES: list[bytes | dict[str, Any]] = [b"", b"{}", b"{x", b"[]", b"x", {"bogus": 1}]
PURGE_WAIT_S = 10.0


async def _stream_with_consumer(s: Session) -> str:
    name = s.stream()
    await s.create({"name": name, "subjects": [s.subj(">")]}, record=False)
    await s.publish(s.subj("a"), "one", record=False)
    body = {"stream_name": name, "config": {"durable_name": "C", "ack_policy": "explicit"}}
    await s.api(f"CONSUMER.CREATE.{name}.C", body, record=False)
    return name


async def test_peer_and_move_requests_need_a_cluster(diff: Differ) -> None:
    """STREAM.PEER.REMOVE/EVACUATE and STREAM.CANCEL_MOVE answer 10010 on a single server,
    whatever the body, the stream or the required API level."""

    async def scenario(s: Session) -> None:
        name = await _stream_with_consumer(s)
        for endpoint in ("STREAM.PEER.REMOVE", "STREAM.PEER.EVACUATE", "STREAM.CANCEL_MOVE"):
            for stream in (name, s.stream("NOPE")):
                for body in [*BAD_BODIES, {"peer": "x"}]:
                    await s.api(f"{endpoint}.{stream}", body)
                await s.api(f"{endpoint}.{stream}", {"peer": "x"}, headers=TOO_HIGH)

    await diff.run(scenario)


async def test_snapshot_request_checks(diff: Differ) -> None:
    """STREAM.SNAPSHOT: the API level, an empty body (10003), the stream (10059), then the
    body (10025) and the deliver subject (10015), in that order."""

    async def scenario(s: Session) -> None:
        name = await _stream_with_consumer(s)
        for stream in (name, s.stream("NOPE")):
            endpoint = f"STREAM.SNAPSHOT.{stream}"
            for body in [
                *BAD_BODIES,
                {"deliver_subject": ""},
                {"deliver_subject": "a.*"},
                {"deliver_subject": "a.>"},
                {"deliver_subject": "a b"},
                {"deliver_subject": "a..b"},
                {"deliver_subject": 5},
                {"deliver_subject": "x", "chunk_size": "big"},
                {"deliver_subject": "x", "bogus": True},
            ]:
                await s.api(endpoint, body)
            await s.api(endpoint, {"deliver_subject": "x"}, headers=TOO_HIGH)

    await diff.run(scenario)


async def test_restore_request_checks(diff: Differ) -> None:
    """STREAM.RESTORE: the API level, an empty body, strict decoding of config and state, the
    name (10056, 10128), the config checks of a create, then a stream that exists (10130)."""

    async def scenario(s: Session) -> None:
        name = await _stream_with_consumer(s)
        new = s.stream("NEW")
        endpoint = f"STREAM.RESTORE.{new}"
        state = {"messages": 1, "bytes": 33, "first_seq": 1, "last_seq": 1, "consumer_count": 1}
        for body in [
            *BAD_BODIES,
            {"config": {"name": s.stream("OTHER")}},
            {"config": {"name": new, "bogus": 1}},
            {"config": {"name": new, "max_msgs": "5"}},
            {"config": {"name": new, "retention": "bogus"}},
            {"config": {"name": new, "pedantic": True}},
            {"state": {"bogus": 1}},
            {"state": {"subjects": {"a": "x"}}},
            {"state": {"first_ts": "yesterday"}},
            {"config": {"name": new, "max_age": -1}, "state": state},
            {"config": {"subjects": [s.subj("x..y")]}},
            {"config": {"name": new, "discard_new_per_subject": True}},
            {"config": {"name": new, "mirror": {"name": name}, "subjects": ["m"]}},
        ]:
            await s.api(endpoint, body)
        await s.api(endpoint, {"config": {"name": new, "max_age": -1}}, headers=TOO_HIGH)
        await s.api(f"STREAM.RESTORE.{name}", {"config": {"name": name}, "state": state})
        await s.api(f"STREAM.RESTORE.{name}", {"config": {"subjects": [s.subj("other")]}})
        await s.api("STREAM.RESTORE.a\\b", {"config": {}})
        await s.api("STREAM.RESTORE.a/b", {"config": {"name": "a/b"}})

    await diff.run(scenario)


async def test_unpin_request_checks(diff: Differ) -> None:
    """CONSUMER.UNPIN: Go's json.Unmarshal of the body (its own error texts), the group's name,
    the stream and the consumer, then 10160 (jetraft's consumers have no priority groups)."""

    async def scenario(s: Session) -> None:
        name = await _stream_with_consumer(s)
        for stream, consumer in ((name, "C"), (name, "NOPE"), (s.stream("NOPE"), "C")):
            endpoint = f"CONSUMER.UNPIN.{stream}.{consumer}"
            for body in [
                *BAD_BODIES,
                b"  ",
                b"null",
                b'"x"',
                b"{} x",
                b"{}{}",
                b'{"group":',
                {"group": 5},
                {"group": ""},
                {"group": "bad name"},
                {"group": "g" * 17},
                {"group": "g-1/_="},
                {"GROUP": "g", "bogus": 1},
            ]:
                await s.api(endpoint, body)
            await s.api(endpoint, {"group": "g"}, headers=TOO_HIGH)

    await diff.run(scenario)


async def test_reset_request_checks(diff: Differ) -> None:
    """CONSUMER.RESET, answered by the consumer itself (nobody answers for a consumer that does
    not exist): the API level, Go's json.Unmarshal of a non-empty body, then a ``seq`` the
    deliver policy does not allow (10204). Valid resets: test_diff_consumer.py."""

    async def scenario(s: Session) -> None:
        name = await _stream_with_consumer(s)
        for seq in range(3):
            await s.publish(s.subj("b"), str(seq), record=False)
        policies: dict[str, dict[str, Any]] = {
            "SEQ": {"deliver_policy": "by_start_sequence", "opt_start_seq": 3},
            "NEW": {"deliver_policy": "new"},
            "LAST": {"deliver_policy": "last"},
            "LPS": {"deliver_policy": "last_per_subject"},
            "TIME": {"deliver_policy": "by_start_time", "opt_start_time": "2100-01-01T00:00:00Z"},
        }
        for durable, extra in policies.items():
            config = {"durable_name": durable, "ack_policy": "explicit", **extra}
            body = {"stream_name": name, "config": config}
            await s.api(f"CONSUMER.CREATE.{name}.{durable}", body, record=False)
        for body in [b"{x", b"  ", b"[]", b'"x"', b"{} x", {"seq": -1}, {"seq": "1"}]:
            await s.api(f"CONSUMER.RESET.{name}.C", body)
        await s.api(f"CONSUMER.RESET.{name}.C", b"", headers=TOO_HIGH)
        for durable, seq in [("SEQ", 2), ("SEQ", 1), ("NEW", 2), ("LAST", 1), ("LPS", 9)]:
            await s.api(f"CONSUMER.RESET.{name}.{durable}", {"seq": seq})
        await s.api(f"CONSUMER.RESET.{name}.TIME", {"seq": 4})  # below the stream's end + 1

    await diff.run(scenario)


async def test_silent_subjects(diff: Differ) -> None:
    """What nats-server leaves unanswered on a single server: the system account's cluster
    subjects (for any account), subjects it does not know, and wrong token counts."""

    async def scenario(s: Session) -> None:
        name = await _stream_with_consumer(s)
        requests: list[tuple[str, bytes | dict[str, Any]]] = [
            ("META.LEADER.STEPDOWN", b""),
            ("META.LEADER.STEPDOWN", {"placement": {"preferred": "x"}}),
            ("META.RESCUE", {"quorum_needed": 1}),
            ("SERVER.REMOVE", {"peer": "x"}),
            ("SERVER.EVACUATE", {"peer": "x"}),
            (f"ACCOUNT.STREAM.MOVE.$G.{name}", b""),
            (f"ACCOUNT.STREAM.CANCEL_MOVE.$G.{name}", b""),
            (f"CONSUMER.RESET.{name}.NOPE", b""),
            (f"CONSUMER.RESET.{s.stream('NOPE')}.C", b""),
            (f"CONSUMER.RESET.{name}", b""),
            (f"CONSUMER.UNPIN.{name}", {"group": "g"}),
            (f"CONSUMER.UNPIN.{name}.C.x", {"group": "g"}),
            ("STREAM.TEMPLATE.NAMES", b""),
            (f"STREAM.TEMPLATE.CREATE.{name}", b"{}"),
            (f"STREAM.TEMPLATE.INFO.{name}", b""),
            (f"STREAM.TEMPLATE.DELETE.{name}", b""),
            ("STREAM.PEER.REMOVE", {"peer": "x"}),
            (f"STREAM.PEER.REMOVE.{name}.x", {"peer": "x"}),
            (f"STREAM.PEER.{name}", {"peer": "x"}),
            (f"STREAM.SNAPSHOT.{name}.x", {"deliver_subject": "x"}),
            ("STREAM.RESTORE", {"config": {}}),
            (f"STREAM.CANCEL_MOVE.{name}.x", b""),
            ("ACCOUNT.PURGE", b""),
            ("ACCOUNT.INFO", b""),
            ("META", b""),
            ("SERVER", b""),
        ]
        await s.api_unanswered(requests)

    transcript = await diff.run(scenario)
    assert all(step.key == TIMEOUT for step in transcript), [s.shown for s in transcript]


# --- ACCOUNT.PURGE: jetraft's one account against nats-server's system account ----------------


SystemScenario = Callable[[Session, Session], Awaitable[None]]


async def _run_with_system(pair: tuple[ServerProc, ServerProc], scenario: SystemScenario) -> None:
    """Run ``scenario(account, system)`` on both servers: ``system`` is nats-server's system
    account user, and on jetraft the same user, in its one account like ``account``."""

    async def side(label: str, server: ServerProc) -> Any:
        account = Session(label, server.port, "P001")
        system = Session(label, server.port, "P001")
        system.url = system_url(server)
        system.transcript = account.transcript  # one transcript, in request order
        try:
            await scenario(account, system)
        finally:
            await account.close()
            await system.close()
        return account.transcript

    oracle, candidate = pair
    transcripts = await asyncio.gather(side("oracle", oracle), side(candidate_side(), candidate))
    report = diff_report(*transcripts)
    assert report is None, report


async def _stream_names(s: Session) -> list[str]:
    reply = await s.api("STREAM.NAMES", record=False)
    return list(reply.get("streams") or [])


async def test_account_purge_deletes_every_stream(
    system_pair: tuple[ServerProc, ServerProc],
) -> None:
    """ACCOUNT.PURGE, which nats-server answers for its system account only (and jetraft for
    its one account): a path separator is 10051, an unknown account has nothing to purge, and
    the global account ``$G`` loses every stream and consumer."""

    async def scenario(s: Session, system: Session) -> None:
        await _stream_with_consumer(s)
        await s.create({"name": s.stream("B"), "storage": "memory"}, record=False)
        s.record_reply("names before", await s.api("STREAM.NAMES", record=False))
        await system.api("ACCOUNT.PURGE.a/b")
        await system.api("ACCOUNT.PURGE.a\\b")
        await system.api("ACCOUNT.PURGE.NOPE", b"ignored")
        await system.api("ACCOUNT.PURGE.$G")
        deadline = asyncio.get_running_loop().time() + PURGE_WAIT_S
        while await _stream_names(s) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        await s.api("STREAM.NAMES")
        await s.api(f"CONSUMER.INFO.{s.stream()}.C")
        await s.create({"name": s.stream(), "subjects": [s.subj(">")]})

    await _run_with_system(system_pair, scenario)
