"""The administrative JetStream API subjects in a real 3-node cluster (issue 17;
docs/nats-differences.md "Deliberate differences").

Every request gets one answer at once, from the node nats-server would answer from (the meta
leader; the stream leader for a snapshot; every node for META.RESCUE), with the type, err_code
and description a 3-node nats-server 2.15.1 cluster gives (probed; its system account's
requests sent from jetraft's one account), up to where jetraft refuses what nats-server would
carry out: then the description says so. META.LEADER.STEPDOWN and ACCOUNT.PURGE are carried out.

Must never: sleep blindly (waits poll with deadlines), or leave a node running.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from tests.integration.clients import connect
from tests.servers import JetraftCluster

pytestmark = pytest.mark.integration

STREAM = "ADM"
ANSWER_WAIT_S = 2.0  # "at once": an answer later than this is a failure
MORE_ANSWERS_WAIT_S = 0.3  # after the first answer: long enough to catch a second node's
SETTLE_TIMEOUT_S = 30.0
POLL_S = 0.1
T = "io.nats.jetstream.api.v1."
NOT_YET = "not supported by jetraft yet"


async def _answers(
    nc: NATS,
    subject: str,
    body: bytes | dict[str, Any] = b"",
    wait_s: float = ANSWER_WAIT_S,
    headers: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every reply to one request to $JS.API.<subject>: the first within ``wait_s``, then any
    others that follow shortly (a second answering node would be a bug)."""
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    inbox = nc.new_inbox()
    replies: list[dict[str, Any]] = []
    first = asyncio.Event()

    async def on_reply(msg: Msg) -> None:
        replies.append(json.loads(msg.data))
        first.set()

    sub = await nc.subscribe(inbox, cb=on_reply)
    try:
        await nc.publish(f"$JS.API.{subject}", payload, reply=inbox, headers=headers)
        try:
            await asyncio.wait_for(first.wait(), wait_s)
        except TimeoutError:
            return []
        await asyncio.sleep(MORE_ANSWERS_WAIT_S)
        return replies
    finally:
        await sub.unsubscribe()


async def _one(nc: NATS, subject: str, body: bytes | dict[str, Any] = b"") -> dict[str, Any]:
    replies = await _answers(nc, subject, body)
    assert len(replies) == 1, (subject, body, replies)
    return replies[0]


def _error(type_: str, err_code: int, code: int, description: str) -> dict[str, Any]:
    return {
        "type": T + type_,
        "error": {"code": code, "err_code": err_code, "description": description},
    }


async def _settled(
    nc: NATS, subject: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """One request retried while nobody answers (an election in progress)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not (replies := await _answers(nc, subject, body, headers=headers)):
        assert time.monotonic() < deadline, f"no answer to {subject} {body}"
        await asyncio.sleep(POLL_S)
    assert len(replies) == 1, replies
    return replies[0]


async def _meta_leader_becomes(nc: NATS, name: str) -> None:
    """Ask the meta leader to hand over to ``name`` until it says ``name`` is the leader."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    already = f'preferred server "{name}" is already leader'
    while True:
        reply = await _settled(nc, "META.LEADER.STEPDOWN", {"placement": {"preferred": name}})
        if reply.get("error", {}).get("description") == already:
            return
        assert reply.get("success") is True, reply
        assert time.monotonic() < deadline, f"{name} never became the meta leader"
        await asyncio.sleep(POLL_S)


@pytest.fixture
async def nc(jetraft_cluster: JetraftCluster) -> Any:
    client = await connect(jetraft_cluster.urls[2])
    try:
        created = await _settled(
            client,
            f"STREAM.CREATE.{STREAM}",
            {"name": STREAM, "subjects": ["adm.>"], "num_replicas": 3},
        )
        assert "error" not in created, created
        body = {"stream_name": STREAM, "config": {"durable_name": "C", "ack_policy": "explicit"}}
        created = await _settled(client, f"CONSUMER.CREATE.{STREAM}.C", body)
        assert "error" not in created, created
        yield client
    finally:
        await client.close()


async def test_stream_peer_and_move_requests(nc: NATS) -> None:
    """A stream's peers cannot be removed, nor the stream moved: nats-server's checks, then
    jetraft's refusal (10005); a move is never in progress, so there is none to cancel."""
    peer_remove, evacuate = "stream_remove_peer_response", "stream_evacuate_peer_response"
    cancel, update = "stream_cancel_move_response", "stream_update_response"
    bad_json = "invalid JSON: invalid character 'x' looking for beginning of object key string"
    cases: list[tuple[str, bytes | dict[str, Any], dict[str, Any]]] = [
        (f"STREAM.PEER.REMOVE.{STREAM}", b"", _error(peer_remove, 10003, 400, "bad request")),
        (f"STREAM.PEER.REMOVE.{STREAM}", {}, _error(peer_remove, 10003, 400, "bad request")),
        (
            f"STREAM.PEER.REMOVE.{STREAM}",
            b"{x",
            _error(peer_remove, 10025, 400, f"{bad_json} at offset 2"),
        ),
        (
            f"STREAM.PEER.REMOVE.{STREAM}",
            {"peer": "x", "y": 1},
            _error(peer_remove, 10025, 400, 'invalid JSON: json: unknown field "y"'),
        ),
        (
            f"STREAM.PEER.REMOVE.{STREAM}",
            {"peer": ""},
            _error(peer_remove, 10003, 400, "bad request"),
        ),
        (
            f"STREAM.PEER.REMOVE.{STREAM}",
            {"peer": "x"},
            _error(peer_remove, 10040, 400, "peer not a member"),
        ),
        (
            "STREAM.PEER.REMOVE.NOPE",
            {"peer": "x"},
            _error(peer_remove, 10059, 404, "stream not found"),
        ),
        (
            f"STREAM.PEER.REMOVE.{STREAM}",
            {"peer": "n1"},
            _error(peer_remove, 10005, 400, f"removing a stream's peer is {NOT_YET}"),
        ),
        (
            f"STREAM.PEER.EVACUATE.{STREAM}",
            {"peer": "n2"},
            _error(evacuate, 10005, 400, f"evacuating a stream's peer is {NOT_YET}"),
        ),
        (
            f"STREAM.CANCEL_MOVE.{STREAM}",
            b"{x",
            _error(cancel, 10129, 400, "stream reconfiguration not in progress"),
        ),
        ("STREAM.CANCEL_MOVE.NOPE", b"", _error(cancel, 10059, 404, "stream not found")),
        (
            f"ACCOUNT.STREAM.MOVE.$G.{STREAM}",
            b"{x",
            _error(update, 10025, 400, f"{bad_json} at offset 2"),
        ),
        (
            f"ACCOUNT.STREAM.MOVE.$G.{STREAM}",
            {"server": "nope"},
            _error(update, 10044, 400, "server is not a member of the cluster"),
        ),
        ("ACCOUNT.STREAM.MOVE.$G.NOPE", b"", _error(update, 10059, 404, "stream not found")),
        (
            f"ACCOUNT.STREAM.MOVE.OTHER.{STREAM}",
            b"",
            _error(update, 10035, 503, "account not found"),
        ),
        (
            f"ACCOUNT.STREAM.MOVE.$G.{STREAM}",
            {"server": "n1"},
            _error(update, 10005, 400, f"moving a stream is {NOT_YET}"),
        ),
        (
            f"ACCOUNT.STREAM.CANCEL_MOVE.$G.{STREAM}",
            b"",
            _error(cancel, 10129, 400, "stream reconfiguration not in progress"),
        ),
        ("ACCOUNT.STREAM.CANCEL_MOVE.$G.NOPE", b"", _error(cancel, 10059, 404, "stream not found")),
        (
            f"ACCOUNT.STREAM.CANCEL_MOVE.OTHER.{STREAM}",
            b"",
            _error(cancel, 10035, 503, "account not found"),
        ),
    ]
    for subject, body, expected in cases:
        assert await _one(nc, subject, body) == expected, (subject, body)


async def test_server_requests(nc: NATS) -> None:
    """SERVER.REMOVE and SERVER.EVACUATE: nats-server's checks, then jetraft's refusal (the
    membership is fixed); META.RESCUE, answered by every node for itself, naming it."""
    remove, evacuate = "meta_server_remove_response", "meta_server_evacuate_response"
    not_member = "server is not a member of the cluster"
    cases: list[tuple[str, bytes | dict[str, Any], dict[str, Any]]] = [
        ("SERVER.REMOVE", {}, _error(remove, 10003, 400, "bad request")),
        (
            "SERVER.REMOVE",
            {"server": "n3"},
            _error(remove, 10025, 400, 'invalid JSON: json: unknown field "server"'),
        ),
        ("SERVER.REMOVE", {"peer": ""}, _error(remove, 10044, 400, not_member)),
        ("SERVER.REMOVE", {"peer_id": "zz", "peer": "n3"}, _error(remove, 10044, 400, not_member)),
        (
            "SERVER.REMOVE",
            {"peer": "n3"},
            _error(remove, 10041, 500, f"removing a server from the cluster is {NOT_YET}"),
        ),
        ("SERVER.EVACUATE", {"peer": "nope"}, _error(evacuate, 10044, 400, not_member)),
        (
            "SERVER.EVACUATE",
            {"peer_id": "n2"},
            _error(evacuate, 10005, 400, f"evacuating a server is {NOT_YET}"),
        ),
    ]
    for subject, body, expected in cases:
        assert await _one(nc, subject, body) == expected, (subject, body)
    rescue = "JetStream system rescue not applied: raft: "
    for body, err_code, code, description in [
        (b"", 10003, 400, "bad request"),
        (
            {"quorum_needed": 0},
            10224,
            400,
            rescue + "rescue quorum must be between 1 and current quorum",
        ),
        (
            {"quorum_needed": 3},
            10224,
            400,
            rescue + "rescue quorum must be between 1 and current quorum",
        ),
        ({"quorum_needed": 2}, 10224, 400, rescue + "leader is known"),
    ]:
        replies = await _answers(nc, "META.RESCUE", body)
        assert sorted(r.pop("server") for r in replies) == ["n1", "n2", "n3"], replies
        for reply in replies:
            assert reply.pop("server_id").startswith("N"), reply
            assert reply == _error("meta_rescue_response", err_code, code, description)


async def test_backup_and_consumer_requests(nc: NATS) -> None:
    """STREAM.SNAPSHOT (the stream leader answers, its checks first: the snapshot itself is
    tests/integration/test_stream_backup.py's; nobody for a stream that does not exist),
    STREAM.RESTORE (the meta leader), CONSUMER.UNPIN and CONSUMER.RESET (the stream leader)."""
    snapshot, restore = "stream_snapshot_response", "stream_restore_response"
    unpin = "consumer_unpin_response"
    cases: list[tuple[str, bytes | dict[str, Any], dict[str, Any]]] = [
        (f"STREAM.SNAPSHOT.{STREAM}", b"", _error(snapshot, 10003, 400, "bad request")),
        (
            f"STREAM.SNAPSHOT.{STREAM}",
            {"deliver_subject": "a.*"},
            _error(snapshot, 10015, 400, "deliver subject not valid"),
        ),
        (
            "STREAM.RESTORE.NEW",
            {"config": {"name": "OTHER"}},
            {
                **_error(restore, 10056, 400, "stream name in subject does not match request"),
                "deliver_subject": "",
            },
        ),
        (
            f"STREAM.RESTORE.{STREAM}",
            {"config": {"name": STREAM}},
            {
                **_error(restore, 10130, 400, "stream name already in use, cannot restore"),
                "deliver_subject": "",
            },
        ),
        (
            "STREAM.RESTORE.NEW",
            {"config": {"name": "NEW", "num_replicas": 5}},
            {
                **_error(restore, 10005, 400, "no suitable peers for placement"),
                "deliver_subject": "",
            },
        ),
        (
            f"CONSUMER.UNPIN.{STREAM}.C",
            {"group": "g"},
            _error(unpin, 10160, 400, "Provided priority group does not exist for this consumer"),
        ),
        (f"CONSUMER.UNPIN.{STREAM}.NOPE", b"{x", _error(unpin, 10014, 404, "consumer not found")),
        ("CONSUMER.UNPIN.NOPE.C", {"group": "g"}, _error(unpin, 10059, 404, "stream not found")),
    ]
    for subject, body, expected in cases:
        assert await _one(nc, subject, body) == expected, (subject, body)
    # the reset goes through the stream's log; the stream leader answers with the info
    reset = await _one(nc, f"CONSUMER.RESET.{STREAM}.C", {"seq": 1})
    assert "error" not in reset, reset
    assert (reset["type"], reset["name"], reset["reset_seq"]) == (
        T + "consumer_reset_response",
        "C",
        1,
    )
    assert reset["delivered"] == reset["ack_floor"] == {"consumer_seq": 0, "stream_seq": 0}
    for subject, body in [
        ("STREAM.SNAPSHOT.NOPE", {"deliver_subject": "x"}),
        (f"CONSUMER.RESET.{STREAM}.NOPE", b""),
    ]:
        assert await _answers(nc, subject, body, wait_s=1.0) == [], subject


async def test_meta_leader_stepdown(nc: NATS) -> None:
    """META.LEADER.STEPDOWN hands the meta group to a caught-up peer: the preferred one when
    the placement names it; placement errors as nats-server's."""
    stepdown = "meta_leader_stepdown_response"
    await _meta_leader_becomes(nc, "n1")
    no_peer = "no replacement peer connected"
    cases: list[tuple[bytes | dict[str, Any], dict[str, Any]]] = [
        (
            {"placement": {"preferred": "nope"}},
            _error(stepdown, 10005, 400, 'preferred server "nope" not known'),
        ),
        (
            {"placement": {"preferred": "n1"}},
            _error(stepdown, 10005, 400, 'preferred server "n1" is already leader'),
        ),
        ({"placement": {"cluster": "other"}}, _error(stepdown, 10005, 400, no_peer)),
        ({"placement": {"tags": ["t"]}}, _error(stepdown, 10005, 400, no_peer)),
        ({"x": 1}, _error(stepdown, 10025, 400, 'invalid JSON: json: unknown field "x"')),
    ]
    for body, expected in cases:
        assert await _one(nc, "META.LEADER.STEPDOWN", body) == expected, body
    plain = await _answers(nc, "META.LEADER.STEPDOWN", b"")
    assert plain == [{"type": T + stepdown, "success": True}], plain
    # n1 handed over to someone; asking for n1 back succeeds, so n1 was no longer the leader
    await _meta_leader_becomes(nc, "n1")
    reply = await _settled(nc, "META.LEADER.STEPDOWN", {"placement": {"preferred": "n2"}})
    assert reply == {"type": T + stepdown, "success": True}, reply
    await _meta_leader_becomes(nc, "n2")
    reply = await _settled(nc, "META.LEADER.STEPDOWN", {"placement": {"cluster": "c"}})
    assert reply == {"type": T + stepdown, "success": True}, reply
    headers = {"Nats-Required-Api-Level": "99"}
    reply = await _settled(nc, "META.LEADER.STEPDOWN", {}, headers=headers)
    assert reply == _error(stepdown, 10185, 412, "JetStream minimum api level required")


async def test_account_purge_deletes_every_stream(nc: NATS) -> None:
    """ACCOUNT.PURGE of jetraft's one account ($G) deletes every stream and consumer."""
    created = await _settled(nc, "STREAM.CREATE.ADM2", {"name": "ADM2", "storage": "memory"})
    assert "error" not in created, created
    reply = await _settled(nc, "ACCOUNT.PURGE.a/b", {})
    assert reply == _error(
        "account_purge_response", 10051, 500, "account name can not contain path separators"
    )
    reply = await _settled(nc, "ACCOUNT.PURGE.$G", {})
    assert reply == {"type": T + "account_purge_response", "initiated": True}, reply
    names = await _settled(nc, "STREAM.NAMES", {})
    assert names["streams"] is None, names
