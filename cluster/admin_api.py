"""The administrative half of the JetStream API: peers and placement, the meta group, backups.

Subjects: ``STREAM.PEER.REMOVE|EVACUATE.<stream>``, ``STREAM.CANCEL_MOVE.<stream>``,
``STREAM.SNAPSHOT.<stream>``, ``STREAM.RESTORE.<stream>``, and those nats-server answers only
for its system account: ``META.LEADER.STEPDOWN``, ``META.RESCUE``, ``SERVER.REMOVE|EVACUATE``,
``ACCOUNT.PURGE.<account>``, ``ACCOUNT.STREAM.MOVE|CANCEL_MOVE.<account>.<stream>``. jetraft
has one account and no system account: that one account plays the system account's part here.

Every request gets nats-server's answer for what nats-server refuses (the same checks in the
same order, the same errors), and then either the operation or a refusal:

* carried out: META.LEADER.STEPDOWN (the meta group's leadership moves to a caught-up peer,
  the placement's if it names one), ACCOUNT.PURGE (every stream of the account is deleted),
  STREAM.CANCEL_MOVE and ACCOUNT.STREAM.CANCEL_MOVE (no move is ever in progress: 10129),
  STREAM.SNAPSHOT and STREAM.RESTORE (``cluster/backup.py``; in a cluster the stream leader
  sends a snapshot and the meta leader takes an upload and seeds the new stream's group);
* refused with the closest error of nats-server's catalogue and a description saying that
  jetraft does not support it: STREAM.PEER.REMOVE|EVACUATE, ACCOUNT.STREAM.MOVE and
  SERVER.EVACUATE (10005: a stream's peers are fixed), SERVER.REMOVE (10041: so is the
  cluster's membership) and META.RESCUE (10224).

As nats-server, a single server answers the stream subjects (10010 for those that need a
cluster) and ACCOUNT.PURGE, and stays silent on the other system subjects.

Must never: change a cluster's membership or a stream's placement.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol, runtime_checkable

from cluster import backup
from cluster.authority import StreamAuthority
from cluster.router import Router
from protocol import api_json
from protocol import errors as E
from protocol.errors import ApiError
from protocol.models import (
    LeaderStepdownRequest,
    MetaRescueRequest,
    MetaServerRemoveRequest,
    MetaServerStreamMoveRequest,
    Placement,
    StreamRemovePeerRequest,
    StreamRestoreRequest,
    StreamSnapshotRequest,
)
from protocol.session import GLOBAL_ACCOUNT
from protocol.stream_config import check_stream_config, decode_strict
from protocol.subjects import is_valid_literal_subject

Handler = Callable[[str, bytes], Awaitable[dict[str, Any]]]
Route = tuple[Handler, str, str, str]  # handler, response type, stream, op (authority.answers)

# Operations whose handler checks Nats-Required-Api-Level itself, at nats-server's place: after
# the "needs a cluster" answer (peer removal, cancel move), after the account name's check
# (ACCOUNT.PURGE, which a single server never checks it for), or in a reply naming the server
# (META.RESCUE). The dispatcher checks it first for every other operation.
LEVEL_CHECKED_BY_HANDLER: Final = frozenset(
    {"PEER_REMOVE", "CANCEL_MOVE", "ACCOUNT_PURGE", "META_RESCUE"}
)
_PATH_SEPARATORS: Final = frozenset("\\/")
_NOT_YET: Final = "not supported by jetraft yet"  # the end of every refusal's description
_RESCUE_BAD_QUORUM: Final = "raft: rescue quorum must be between 1 and current quorum"
_RESCUE_LEADER_KNOWN: Final = "raft: leader is known"


@runtime_checkable
class MetaGroup(Protocol):
    """What the cluster-only subjects ask of the meta group (``cluster/meta_streams.py``)."""

    server_name: str
    cluster_name: str
    peers: list[str]  # the cluster's servers, by name (jetraft's peer ids are the names)

    @property
    def meta_leader(self) -> str | None: ...

    def stream_peers(self, name: str) -> list[str] | None:
        """The servers ``name`` is placed on; None if there is no such stream."""
        ...

    def step_down_meta(self, placement: Placement | None) -> str:
        """Hand the meta group's leadership over (this node leads it); the peer asked."""
        ...


class AdminApi:
    def __init__(self, authority: StreamAuthority, router: Router, server_id: str) -> None:
        self.authority = authority
        self.router = router
        self._tasks: set[asyncio.Task[None]] = set()  # snapshots being sent
        self.meta = authority if isinstance(authority, MetaGroup) else None
        self.server_id = server_id

    def route(self, tokens: list[str], level_ok: bool) -> Route | None:
        """The route of an administrative subject, or None (nats-server stays silent).
        ``level_ok``: whether the request's Nats-Required-Api-Level is satisfied."""
        n = len(tokens)
        area = tokens[2] if n > 2 else ""
        partial = functools.partial
        if area == "STREAM" and n in (5, 6):
            return self._stream_route(tokens, level_ok)
        if area == "ACCOUNT" and n == 5 and tokens[3] == "PURGE":
            purge = partial(self._account_purge, tokens[4], level_ok)
            return purge, api_json.ACCOUNT_PURGE_RESPONSE, "", "ACCOUNT_PURGE"
        meta = self.meta
        if meta is None:
            return None  # nats-server answers these only in a cluster
        if area == "META" and tokens[3:] == ["LEADER", "STEPDOWN"]:
            stepdown = partial(self._meta_stepdown, meta)
            return stepdown, api_json.META_LEADER_STEPDOWN_RESPONSE, "", "META_STEPDOWN"
        if area == "META" and tokens[3:] == ["RESCUE"]:
            rescue = partial(self._meta_rescue, meta, level_ok)
            return rescue, api_json.META_RESCUE_RESPONSE, "", "META_RESCUE"
        if area == "SERVER" and n == 4 and tokens[3] in ("REMOVE", "EVACUATE"):
            evacuate = tokens[3] == "EVACUATE"
            remove = partial(self._server_remove, meta, evacuate)
            type_ = (
                api_json.META_SERVER_EVACUATE_RESPONSE
                if evacuate
                else api_json.META_SERVER_REMOVE_RESPONSE
            )
            return remove, type_, "", "SERVER_REMOVE"
        if area == "ACCOUNT" and n == 7 and tokens[3] == "STREAM":
            account, stream = tokens[5], tokens[6]
            if tokens[4] == "MOVE":
                move = partial(self._account_stream_move, meta, account)
                return move, api_json.STREAM_UPDATE_RESPONSE, stream, "ACCOUNT_STREAM_MOVE"
            if tokens[4] == "CANCEL_MOVE":
                cancel = partial(self._account_stream_cancel_move, meta, account)
                return cancel, api_json.STREAM_CANCEL_MOVE_RESPONSE, stream, "ACCOUNT_STREAM_MOVE"
        return None

    def _stream_route(self, tokens: list[str], level_ok: bool) -> Route | None:
        op = tokens[3]
        if len(tokens) == 6:
            if op != "PEER" or tokens[4] not in ("REMOVE", "EVACUATE"):
                return None
            evacuate = tokens[4] == "EVACUATE"
            type_ = (
                api_json.STREAM_EVACUATE_PEER_RESPONSE
                if evacuate
                else api_json.STREAM_REMOVE_PEER_RESPONSE
            )
            remove = functools.partial(self._peer_remove, level_ok, evacuate)
            return remove, type_, tokens[5], "PEER_REMOVE"
        stream = tokens[4]
        if op == "CANCEL_MOVE":
            cancel = functools.partial(self._cancel_move, level_ok)
            return cancel, api_json.STREAM_CANCEL_MOVE_RESPONSE, stream, "CANCEL_MOVE"
        if op == "SNAPSHOT":
            return self._snapshot, api_json.STREAM_SNAPSHOT_RESPONSE, stream, "SNAPSHOT"
        if op == "RESTORE":
            return self._restore, api_json.STREAM_RESTORE_RESPONSE, stream, "RESTORE"
        return None

    def _cluster_first(self, level_ok: bool) -> MetaGroup:
        """A stream reconfiguration exists only in a cluster (10010), then the API level."""
        if self.meta is None:
            raise ApiError(E.CLUSTER_REQUIRED)
        if not level_ok:
            raise ApiError(E.REQUIRED_API_LEVEL)
        return self.meta

    # --- a stream's peers and placement ---------------------------------------------------------
    async def _peer_remove(
        self, level_ok: bool, evacuate: bool, stream: str, body: bytes
    ) -> dict[str, Any]:
        """STREAM.PEER.REMOVE|EVACUATE (nats-server ``jsStreamRemapPeerRequest``)."""
        meta = self._cluster_first(level_ok)
        if api_json.is_empty_request(body):
            raise ApiError(E.BAD_REQUEST)
        req = decode_strict(body, StreamRemovePeerRequest)
        if not req.peer:
            raise ApiError(E.BAD_REQUEST)
        peers = meta.stream_peers(stream)
        if peers is None:
            raise ApiError(E.STREAM_NOT_FOUND)
        if req.peer not in peers:
            raise ApiError(E.CLUSTER_PEER_NOT_MEMBER)
        what = "evacuating a stream's peer" if evacuate else "removing a stream's peer"
        raise ApiError(E.CLUSTER_NO_PEERS, err=f"{what} is {_NOT_YET}")

    async def _cancel_move(self, level_ok: bool, stream: str, _body: bytes) -> dict[str, Any]:
        """STREAM.CANCEL_MOVE: jetraft never reconfigures a stream's peers, so there is nothing
        to cancel."""
        meta = self._cluster_first(level_ok)
        if meta.stream_peers(stream) is None:
            raise ApiError(E.STREAM_NOT_FOUND)
        raise ApiError(E.STREAM_RECONFIGURE_NOT_IN_PROGRESS)

    async def _account_stream_move(
        self, meta: MetaGroup, account: str, stream: str, body: bytes
    ) -> dict[str, Any]:
        """ACCOUNT.STREAM.MOVE (nats-server ``jsLeaderServerStreamMoveRequest``)."""
        req = decode_strict(body, MetaServerStreamMoveRequest)
        source = req.server
        if source and (
            source not in meta.peers
            or req.cluster not in ("", meta.cluster_name)
            or req.domain  # jetraft has no JetStream domains
        ):
            raise ApiError(E.CLUSTER_SERVER_NOT_MEMBER)
        if account != GLOBAL_ACCOUNT:
            raise ApiError(E.NO_ACCOUNT)
        peers = meta.stream_peers(stream)
        if peers is None:
            raise ApiError(E.STREAM_NOT_FOUND)
        if source and source not in peers:
            raise ApiError(E.CLUSTER_PEER_NOT_MEMBER)
        raise ApiError(E.CLUSTER_NO_PEERS, err=f"moving a stream is {_NOT_YET}")

    async def _account_stream_cancel_move(
        self, meta: MetaGroup, account: str, stream: str, _body: bytes
    ) -> dict[str, Any]:
        if account != GLOBAL_ACCOUNT:
            raise ApiError(E.NO_ACCOUNT)
        if meta.stream_peers(stream) is None:
            raise ApiError(E.STREAM_NOT_FOUND)
        raise ApiError(E.STREAM_RECONFIGURE_NOT_IN_PROGRESS)

    # --- backups --------------------------------------------------------------------------------
    async def _snapshot(self, stream: str, body: bytes) -> dict[str, Any]:
        """STREAM.SNAPSHOT (``jsStreamSnapshotRequest``): the stream is looked up before the
        body is decoded. The reply (config and state) goes out before the first chunk: the
        sending task starts once this handler has returned (``cluster/backup.py``)."""
        if api_json.is_empty_request(body):
            raise ApiError(E.BAD_REQUEST)
        host = self.authority.writer(stream)
        req = decode_strict(body, StreamSnapshotRequest)
        if not is_valid_literal_subject(req.deliver_subject):
            raise ApiError(E.SNAPSHOT_DELIVER_SUBJECT_INVALID)
        # in a cluster this is the stream's leader (it answers SNAPSHOT): its applied state
        archive = backup.encode_archive(host.stream, req.no_consumers)
        info = self.authority.host_info(host, "", dynamic_metadata=False)
        send = backup.send_snapshot(
            self.router, stream, req.deliver_subject, archive, backup.Pacing.of(req)
        )
        task = asyncio.get_running_loop().create_task(send)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return {
            "type": api_json.STREAM_SNAPSHOT_RESPONSE,
            "config": info["config"],
            "state": info["state"],
        }

    async def _restore(self, stream: str, body: bytes) -> dict[str, Any]:
        """STREAM.RESTORE (``jsStreamRestoreRequest``): every check before the upload."""
        if api_json.is_empty_request(body):
            raise ApiError(E.BAD_REQUEST)
        config = decode_strict(body, StreamRestoreRequest).config
        if not config.name:
            config = config.model_copy(update={"name": stream})
        if config.name != stream:
            raise ApiError(E.STREAM_MISMATCH)
        if not _PATH_SEPARATORS.isdisjoint(stream):
            raise ApiError(E.STREAM_NAME_CONTAINS_PATH_SEPARATORS)
        existing = self.authority.configs()
        check_stream_config(config, pedantic=False, existing=existing)
        if stream in existing:
            raise ApiError(E.STREAM_NAME_EXIST_RESTORE_FAILED)
        if self.meta is not None and config.num_replicas > len(self.meta.peers):
            raise ApiError(E.CLUSTER_NO_PEERS, err="no suitable peers for placement")
        session = self.authority.begin_restore(config)
        return {"type": api_json.STREAM_RESTORE_RESPONSE, "deliver_subject": session.subject}

    # --- the system account's subjects ----------------------------------------------------------
    async def _account_purge(
        self, account: str, level_ok: bool, _stream: str, _body: bytes
    ) -> dict[str, Any]:
        """ACCOUNT.PURGE: delete every stream (and so every consumer) of the account. Any
        other account name has nothing to purge, which nats-server reports as initiated too."""
        if not _PATH_SEPARATORS.isdisjoint(account):
            raise ApiError(E.STREAM_GENERAL, err="account name can not contain path separators")
        if self.meta is not None and not level_ok:
            raise ApiError(E.REQUIRED_API_LEVEL)
        if account == GLOBAL_ACCOUNT:
            for name in sorted(self.authority.configs()):
                try:
                    await self.authority.delete(name)
                except ApiError as err:
                    if err.spec is not E.STREAM_NOT_FOUND:  # else deleted meanwhile
                        raise
        return {"type": api_json.ACCOUNT_PURGE_RESPONSE, "initiated": True}

    async def _meta_stepdown(self, meta: MetaGroup, _stream: str, body: bytes) -> dict[str, Any]:
        """META.LEADER.STEPDOWN: an optional body with a ``placement`` choosing the next
        leader (``preferred``, or ``cluster`` and ``tags``)."""
        placement = None
        if api_json.is_json_object_or_array(body):
            placement = decode_strict(body, LeaderStepdownRequest).placement
        meta.step_down_meta(placement)
        return api_json.success_response(api_json.META_LEADER_STEPDOWN_RESPONSE)

    async def _server_remove(
        self, meta: MetaGroup, evacuate: bool, _stream: str, body: bytes
    ) -> dict[str, Any]:
        """SERVER.REMOVE|EVACUATE: the server by ``peer_id`` if given, else by name."""
        if api_json.is_empty_request(body):
            raise ApiError(E.BAD_REQUEST)
        req = decode_strict(body, MetaServerRemoveRequest)
        if (req.peer_id or req.peer) not in meta.peers:
            raise ApiError(E.CLUSTER_SERVER_NOT_MEMBER)
        if evacuate:
            raise ApiError(E.CLUSTER_NO_PEERS, err=f"evacuating a server is {_NOT_YET}")
        detail = f"removing a server from the cluster is {_NOT_YET}"
        raise ApiError(E.RAFT_GENERAL, err=detail)

    async def _meta_rescue(
        self, meta: MetaGroup, level_ok: bool, _stream: str, body: bytes
    ) -> dict[str, Any]:
        """META.RESCUE, which every server answers for itself, naming itself: nats-server's
        checks of the requested quorum, then a refusal (the meta group's quorum stays)."""
        try:
            if not level_ok:
                raise ApiError(E.REQUIRED_API_LEVEL)
            if api_json.is_empty_request(body):
                raise ApiError(E.BAD_REQUEST)
            wanted = decode_strict(body, MetaRescueRequest).quorum_needed
            if not 1 <= wanted <= len(meta.peers) // 2 + 1:
                raise ApiError(E.CLUSTER_RESCUE, err=_RESCUE_BAD_QUORUM)
            if meta.meta_leader is not None:
                raise ApiError(E.CLUSTER_RESCUE, err=_RESCUE_LEADER_KNOWN)
            detail = f"lowering the meta group's quorum is {_NOT_YET}"
            raise ApiError(E.CLUSTER_RESCUE, err=detail)
        except ApiError as err:
            return api_json.error_response(
                api_json.META_RESCUE_RESPONSE,
                err,
                server=meta.server_name,
                server_id=self.server_id,
            )
