"""The streams of a cluster: the meta group, stream placement, and who answers which API request.

The **meta group** is a Raft group over every node. Its log holds stream assignments
(``cluster/meta_state.py``): name, config, peers. Every node applies it and opens a local replica
(a ``StreamHost`` over a ``RaftLog``: its own Raft group) for each stream it is a peer of. This
is the stream authority (``cluster/authority.py``) the JetStream API asks in a cluster.

Every node subscribes to ``$JS.API.>`` and interest travels over the routes, so every request
reaches every node; exactly one answers, the one nats-server would answer from:

* the meta leader: account ``INFO``, ``STREAM.NAMES``, ``STREAM.LIST``, ``STREAM.CREATE``,
  ``STREAM.DELETE``, ``STREAM.RESTORE``, the administrative requests (``cluster/admin_api.py``)
  and any stream request for a stream that does not exist (but ``STREAM.SNAPSHOT``, which
  nobody answers then);
* the stream's leader: ``STREAM.INFO``, ``STREAM.UPDATE``, ``STREAM.PURGE``, ``STREAM.MSG.GET``
  (after a read barrier), ``STREAM.MSG.DELETE``, ``STREAM.SNAPSHOT`` and consumer requests;
* every node: ``META.RESCUE`` (nats-server's servers each answer it for themselves).

With no leader (an election in progress) nobody answers and the client times out, as with
nats-server. The meta leader gathers stream info it does not hold from each stream's leader with
an internal request on ``$JSC.SI.<stream>``.

Must never: answer a request another node answers too, or change an assignment except through the
meta log.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cluster.apply_log import ApplyLog, observe_applies
from cluster.backup import RestoreSession, RestoreUploads
from cluster.batching import BatchContext
from cluster.extension_loader import attach_all, load_attachers
from cluster.local_streams import (
    MSGS_DIR,
    RESTORE_DIR,
    offline_stream,
    open_store,
    streams_dir,
    write_atomic,
)
from cluster.meta_state import Assignment, MetaState, decode_meta_command, encode_meta_command
from cluster.raft import NotLeaderError, RaftDriver, RaftGroup
from cluster.raft_log import RaftLog
from cluster.router import Router, Subscription
from cluster.routes import RouteManager
from cluster.stream_host import AnyStreamHost, StreamHost
from cluster.stream_info import host_info
from engine.filestore import FileStore
from engine.state_transfer import resume_request
from engine.store import MessageStore
from engine.stream import Stream
from protocol import api_json, gojson
from protocol import errors as E
from protocol.errors import ApiError
from protocol.models import Placement, StreamConfig
from protocol.stream_config import check_restorable
from protocol.timefmt import format_rfc3339nano

log = logging.getLogger("jetraft.cluster")

META_GROUP = "META"
PEERS_FILE = "peers.json"
INTERNAL_REQUEST_TIMEOUT_S = 1.0
CREATE_LEADER_WAIT_S = 10.0  # a new stream's group elects a leader before CREATE is answered
CREATE_LEADER_POLL_S = 0.05
UNDO_WAIT_S = 10.0  # removing the stream of a failed restore
INCARNATION_FILE = "incarnation"  # in a replica's directory: the assignment it belongs to
STREAM_INFO_SUBJECT = "$JSC.SI."
_META_OPS = {
    *("ACCOUNT_INFO", "NAMES", "LIST", "CREATE", "DELETE", "RESTORE"),
    # cluster administration (cluster/admin_api.py)
    *("PEER_REMOVE", "CANCEL_MOVE", "META_STEPDOWN", "SERVER_REMOVE", "ACCOUNT_PURGE"),
    "ACCOUNT_STREAM_MOVE",
}
_EVERY_NODE_OPS = {"META_RESCUE"}  # nats-server: every server answers for itself
_STREAM_LEADER_ONLY_OPS = {"SNAPSHOT"}  # nobody answers for a stream that does not exist


class MetaStreams:
    clustered = True

    def __init__(
        self,
        router: Router,
        store_dir: Path,
        server_name: str,
        routes: RouteManager,
        cluster_name: str,
        driver: RaftDriver,
        batch_context: BatchContext,
        apply_log: ApplyLog | None = None,
    ) -> None:
        self.router = router
        self.server_name = server_name
        self.batch_context = batch_context
        self.streams_dir = streams_dir(store_dir)
        self.attachers = load_attachers()  # stream extensions (mirror/): cluster/extensions.py
        self.apply_log = apply_log
        self.routes = routes
        self.cluster_name = cluster_name
        self.driver = driver
        self.meta_dir = store_dir / "jetstream" / "meta"
        self.meta: RaftGroup | None = None
        self.state = MetaState()
        self.peers: list[str] = []
        self.replicas: dict[str, StreamHost[RaftLog]] = {}
        self._leader_subs: dict[str, Subscription] = {}
        self._inbox_seq = 0
        self._form_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._removing: set[str] = set()  # replicas being closed and wiped (their directory too)
        self._restores = RestoreUploads(router, store_dir / "jetstream" / RESTORE_DIR, open_store)
        self.ready = asyncio.Event()

    @property
    def hosts(self) -> Mapping[str, AnyStreamHost]:
        return self.replicas

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self.streams_dir.mkdir(parents=True, exist_ok=True)
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        self._restores.clear()
        self.driver.start()
        self.driver.tick_callbacks.append(self._on_tick)
        self._form_task = asyncio.get_running_loop().create_task(self._form_meta())
        self._form_task.add_done_callback(_log_failure)

    async def _form_meta(self) -> None:
        """Start the meta group once its membership is known: from disk after the first start,
        else from the names behind every route URL (every node must be reachable once)."""
        peers_path = self.meta_dir / PEERS_FILE
        if peers_path.is_file():
            peers = list(json.loads(peers_path.read_bytes())["peers"])
        else:
            await self.routes.all_resolved.wait()
            peers = sorted(set(self.routes.resolved.values()) | {self.server_name})
            write_atomic(peers_path, json.dumps({"v": 1, "peers": peers}).encode())
        self.peers = peers
        log.info("meta group over %s", ", ".join(peers))
        self.meta = RaftGroup(
            META_GROUP,
            self.server_name,
            peers,
            self.meta_dir / "raft",
            self.routes,
            self.driver,
            self._apply_meta,
            snapshot_fn=lambda _i: self.state.to_json(),
            restore_fn=self._restore_meta,
            # a stream leader records its config updates in the meta log from any node; applying
            # one twice changes nothing (add and delete are guarded by their outcome)
            forward_proposals=True,
        )
        self.driver.add(self.meta)

    async def close(self) -> None:
        self._closing = True
        if self._form_task is not None:
            self._form_task.cancel()
        for task in list(self._tasks):
            await asyncio.wait({task}, timeout=5)
        for host in list(self.replicas.values()):
            await host.close()
        self.replicas.clear()
        await self.driver.close()
        if self.apply_log is not None:
            self.apply_log.close()

    def _on_tick(self) -> None:
        meta = self.meta
        if meta is not None and not self.ready.is_set() and meta.leader_id is not None:
            self.ready.set()
        for host in self.replicas.values():
            host.on_tick()

    @property
    def meta_leader(self) -> str | None:
        return None if self.meta is None else self.meta.leader_id

    @property
    def is_meta_leader(self) -> bool:
        return self.meta is not None and self.meta.is_leader

    # --- the meta state machine ---------------------------------------------------------------
    def _apply_meta(self, _index: int, payload: bytes) -> Any:
        cmd = decode_meta_command(payload)
        result = self.state.apply(cmd)
        asyncio.get_running_loop().call_soon(self._reconcile)
        return result

    def _restore_meta(self, _index: int, state: dict[str, Any]) -> None:
        self.state = MetaState.from_json(state)
        asyncio.get_running_loop().call_soon(self._reconcile)

    def _reconcile(self) -> None:
        """Open a replica for every assignment this node is a peer of; drop the others, and
        those of an earlier incarnation of a stream (deleted and created again while this node
        applied both at once, or was away), whose place the new one takes once they are gone."""
        if self._closing:
            return
        for name, sa in self.state.assignments.items():
            host = self.replicas.get(name)
            if host is not None and host.log.incarnation != sa.created_ns:
                self._drop_replica(name)
                continue
            if name in self._removing:
                continue  # opened once the old replica's directory is gone
            if self.server_name in sa.peers and name not in self.replicas:
                try:
                    self._open_replica(sa)
                except Exception:
                    log.exception("stream %s: replica could not be opened", name)
        for name in [n for n in self.replicas if n not in self.state.assignments]:
            self._drop_replica(name)

    def _drop_replica(self, name: str) -> None:
        """Close and wipe this node's replica of ``name``; a replica of a newer incarnation is
        opened in its directory only once it is gone (``_reconcile`` waits for it)."""
        host = self.replicas.pop(name)
        self._drop_leader_sub(name)
        self._removing.add(name)
        task = asyncio.get_running_loop().create_task(self._remove_replica(name, host))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _remove_replica(self, name: str, host: StreamHost[RaftLog]) -> None:
        try:
            await host.close()
            shutil.rmtree(self.streams_dir / name, ignore_errors=True)
        finally:
            self._removing.discard(name)
            self._reconcile()

    def _open_replica(self, sa: Assignment) -> StreamHost[RaftLog]:
        cfg = StreamConfig.model_validate(sa.config)
        stream_dir = self.streams_dir / cfg.name
        _claim_for_incarnation(stream_dir, sa.created_ns)
        store = open_store(cfg, stream_dir)
        if isinstance(store, FileStore):
            damaged = store.corrupt_records()
            if damaged:
                # The replicas hold the same state: rebuild this one from the Raft log or, when
                # the log is compacted, by a state transfer from the leader, rather than serve
                # a state that lacks messages the others have.
                log.warning(
                    "stream %s: %d damaged records (first %s): rebuilding the replica",
                    cfg.name,
                    len(damaged),
                    damaged[0],
                )
            if damaged or resume_request(store) is not None:
                # (or) a state transfer was cut short by a crash: start the store over; Raft's
                # snapshot then asks for a complete transfer
                log.warning("stream %s: starting the store over", cfg.name)
                store.close()
                shutil.rmtree(stream_dir / MSGS_DIR)
                store = open_store(cfg, stream_dir)
        store, apply_observer = observe_applies(self.apply_log, cfg.name, store)
        stream = Stream(cfg, store, sa.created_ns)
        host = StreamHost(
            stream,
            store,
            self.router,
            lambda owner: RaftLog(
                owner,
                store,
                raft_dir=stream_dir / "raft",
                self_id=self.server_name,
                peers=sa.peers,
                incarnation=sa.created_ns,
                transport=self.routes,
                driver=self.driver,
                apply_observer=apply_observer,
            ),
            batch_context=self.batch_context,
            node_name=self.server_name,
            on_role_change=self._stream_leader_changed,
        )
        self.replicas[cfg.name] = host
        if sa.restoring:
            host.await_seed()
        host.start()
        attach_all(host, self.attachers)
        return host

    def _stream_leader_changed(self, host: StreamHost[RaftLog]) -> None:
        name = host.name
        if host.is_leader and name not in self._leader_subs:
            self._leader_subs[name] = self.router.subscribe_internal(
                STREAM_INFO_SUBJECT + name, functools.partial(self._answer_internal_info, name)
            )
        elif not host.is_leader:
            self._drop_leader_sub(name)

    def _drop_leader_sub(self, name: str) -> None:
        sub = self._leader_subs.pop(name, None)
        if sub is not None:
            self.router.remove(sub)

    def _answer_internal_info(
        self, name: str, _subject: str, reply: str | None, _hdr: bytes | None, _data: bytes
    ) -> None:
        host = self.replicas.get(name)
        if reply and host is not None and host.is_leader and not host.awaiting_seed:
            info = self.host_info(host, "", dynamic_metadata=False)
            self.router.publish(reply, None, None, gojson.encode(info))

    # --- who answers --------------------------------------------------------------------------
    def answers(self, op: str, stream_name: str) -> bool:
        if op in _META_OPS:
            return self.is_meta_leader
        if op in _EVERY_NODE_OPS:
            return True
        if stream_name not in self.state.assignments:
            if op in _STREAM_LEADER_ONLY_OPS:
                return False
            return self.is_meta_leader  # "stream not found" comes from the meta leader
        host = self.replicas.get(stream_name)
        return host is not None and host.is_leader

    # --- internal requests --------------------------------------------------------------------
    async def _internal_request(self, subject: str, timeout_s: float) -> bytes | None:
        self._inbox_seq += 1
        inbox = f"$JSC.R.{self.server_name}.{self._inbox_seq}"
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def on_reply(_s: str, _r: str | None, _h: bytes | None, data: bytes) -> None:
            if not future.done():
                future.set_result(data)

        sub = self.router.subscribe_internal(inbox, on_reply)
        try:
            self.router.publish(subject, inbox, None, b"")
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return None
        finally:
            self.router.remove(sub)

    async def leader_info(self, name: str) -> dict[str, Any] | None:
        host = self.replicas.get(name)
        if host is not None and host.is_leader:
            if host.awaiting_seed:
                return None  # no state to describe yet (nor do the others answer for it)
            return self.host_info(host, "", dynamic_metadata=False)
        data = await self._internal_request(STREAM_INFO_SUBJECT + name, INTERNAL_REQUEST_TIMEOUT_S)
        if data is None:
            return None
        info: dict[str, Any] = json.loads(data)
        return info

    # --- info with the cluster object ---------------------------------------------------------
    def host_info(self, host: AnyStreamHost, type_: str, **kw: Any) -> dict[str, Any]:
        replica = self.replicas.get(host.name)
        if replica is host and "cluster" not in kw:
            kw["cluster"] = self._cluster_info(replica)
        return host_info(host, self.server_name, type_, **kw)

    def _cluster_info(self, host: StreamHost[RaftLog]) -> dict[str, Any]:
        group = host.log.group
        out: dict[str, Any] = {"name": self.cluster_name, "raft_group": group.group_name}
        leader = group.leader_id
        if leader is not None:
            out["leader"] = leader
            out["leader_since"] = format_rfc3339nano(group.last_leader_change_ns)
        if group.is_leader:
            out["replicas"] = self._replicas(group)
        return out

    def _replicas(self, group: RaftGroup) -> list[dict[str, Any]]:
        """The other peers as nats-server's ``PeerInfo``: on the leader with their progress;
        on a follower, which knows none, the leader current while its route is up and the
        others not known to be (``current`` false, ``active`` 0, as a nats-server follower)."""
        if group.is_leader:
            last = group.last_log_index
            progress = sorted(group.peer_progress().items())
        else:
            last = 0
            progress = [(p, (0, 0.0)) for p in group.peer_ids if p != group.self_id]
        replicas = []
        for peer, (match, idle_s) in progress:
            lag = max(0, last - match)
            connected = self.routes.connected(peer)
            if group.is_leader:
                current = lag == 0 and connected
            else:
                current = peer == group.leader_id and connected
            entry: dict[str, Any] = {
                "name": peer,
                "current": current,
                "active": int(idle_s * 1e9),
            }
            if not connected:
                entry["offline"] = True
            if lag:
                entry["lag"] = lag
            entry["peer"] = peer
            replicas.append(entry)
        return replicas

    # --- StreamAuthority: the meta leader's part ------------------------------------------------
    def configs(self, exclude: str = "") -> dict[str, StreamConfig]:
        return {
            n: StreamConfig.model_validate(sa.config)
            for n, sa in self.state.assignments.items()
            if n != exclude
        }

    def _online_nodes(self) -> list[str]:
        """Where a new stream may go: reachable nodes not in lame duck mode (they are leaving)."""
        routes = self.routes
        return sorted(
            p
            for p in self.peers
            if (p == self.server_name and not routes.lame_duck)
            or (routes.connected(p) and p not in routes.lame_duck_peers)
        )

    def _place(self, replicas: int, include: str | None = None) -> list[str]:
        """The ``replicas`` online nodes with the fewest streams; the first is the preferred
        leader, so leaders spread as streams are added. ``include``: a node that must be among
        them, as the preferred leader (the one holding a restore's upload)."""
        load = {p: 0 for p in self._online_nodes()}
        leads = {p: 0 for p in load}
        for sa in self.state.assignments.values():
            for i, p in enumerate(sa.peers):
                if p in load:
                    load[p] += 1
                    if i == 0:
                        leads[p] += 1
        if replicas > len(load):
            detail = "no suitable peers for placement"
            if len(load) < len(self.peers):
                detail += ", peer offline"
            raise ApiError(E.CLUSTER_NO_PEERS, err=detail)
        ranked = sorted(load, key=lambda p: (include != p, load[p], p))
        chosen = ranked[:replicas]
        chosen.sort(key=lambda p: (include != p, leads[p], load[p], p))
        return chosen

    async def _propose_meta(self, command: dict[str, Any]) -> Any:
        if self.meta is None:
            raise ApiError(E.CLUSTER_NOT_AVAIL)
        future = self.meta.propose(encode_meta_command(command))
        self.driver.kick(META_GROUP)
        try:
            return await future
        except NotLeaderError:
            raise ApiError(E.CLUSTER_NOT_LEADER) from None

    async def create(self, cfg: StreamConfig) -> tuple[dict[str, Any], bool]:
        name = cfg.name
        created = name not in self.state.assignments
        if created:
            peers = self._place(max(1, cfg.num_replicas))
            cmd = {
                "op": "add",
                "name": name,
                "config": cfg.model_dump(mode="json"),
                "peers": peers,
                "created_ns": time.time_ns(),
            }
            outcome = await self._propose_meta(cmd)
            if outcome is not None:
                raise ApiError(E.STREAM_NAME_EXIST)
        # Answer once the preferred peer leads: whoever wins the first election hands over to it
        # shortly after, and publishes sent during that handover would go unanswered. Should
        # the handover not happen in time, the stream is still usable under its current leader.
        sa = self.state.assignments.get(name)
        preferred = sa.peers[0] if sa is not None and sa.peers else None
        deadline = time.monotonic() + CREATE_LEADER_WAIT_S
        info: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            info = await self.leader_info(name)
            leader = None if info is None else info.get("cluster", {}).get("leader")
            if info is not None and (preferred is None or leader == preferred):
                break
            await asyncio.sleep(CREATE_LEADER_POLL_S)
        if info is None:
            raise ApiError(E.CLUSTER_NOT_AVAIL)
        return {"type": api_json.STREAM_CREATE_RESPONSE, **info, "did_create": True}, created

    # --- STREAM.RESTORE ------------------------------------------------------------------------
    def begin_restore(self, cfg: StreamConfig) -> RestoreSession:
        """An upload of a snapshot of ``cfg.name`` into a staging store on this node (the meta
        leader); once whole, ``_adopt_restored`` makes it a stream of ``cfg.num_replicas``."""
        return self._restores.begin(cfg, functools.partial(self._adopt_restored, cfg))

    async def _adopt_restored(
        self, request: StreamConfig, staging: Path, store: MessageStore, restored: Stream
    ) -> dict[str, Any]:
        """Create the stream's group on this node and the placement's others, waiting for the
        restored state (``Assignment.restoring``), and seed it from here: this node's replica
        copies the upload and every other replica fetches it by state transfer. Answered once
        this replica holds it durably and the seed is committed; the stream is deleted again if
        it cannot be seeded."""
        replicas = max(1, request.num_replicas)
        cfg = restored.config.model_copy(update={"num_replicas": replicas})
        check_restorable(cfg, self.configs())
        store.flush()
        store.fsync()
        incarnation = time.time_ns()  # the group's; the stream keeps its own creation time
        cmd = {
            "op": "add",
            "name": cfg.name,
            "config": cfg.model_dump(mode="json"),
            "peers": self._place(replicas, include=self.server_name),
            "created_ns": incarnation,
            "restoring": True,
        }
        try:
            if await self._propose_meta(cmd) is not None:
                raise ApiError(E.STREAM_NAME_EXIST_RESTORE_FAILED)
            host = await self._leading_replica(cfg.name)
            await host.log.prepare_seed(restored)
            await host.log.seed()
        except Exception:
            # (a proposal reported as failed may still have committed: undo what is ours)
            await self._undo_restore(cfg.name, incarnation)
            raise
        store.close()
        shutil.rmtree(staging, ignore_errors=True)
        return self.host_info(host, api_json.STREAM_CREATE_RESPONSE)

    async def _leading_replica(self, name: str) -> StreamHost[RaftLog]:
        """This node's replica of ``name`` once it leads (it is the preferred peer)."""
        deadline = time.monotonic() + CREATE_LEADER_WAIT_S
        while time.monotonic() < deadline:
            host = self.replicas.get(name)
            if host is not None and host.is_leader:
                return host
            await asyncio.sleep(CREATE_LEADER_POLL_S)
        raise ApiError(E.STREAM_RESTORE, err="the restored stream's group did not elect this node")

    async def _undo_restore(self, name: str, incarnation: int) -> None:
        """Delete the stream a failed restore created: the assignment of this incarnation, should
        it exist or commit later (an add reported as failed may still commit, ordered before
        this delete; another stream of that name is left alone)."""
        cmd = {"op": "del", "name": name, "created_ns": incarnation}
        try:
            await asyncio.wait_for(self._propose_meta(cmd), UNDO_WAIT_S)
        except Exception:
            log.exception("stream %s: a failed restore could not be undone", name)

    async def delete(self, name: str) -> None:
        if name not in self.state.assignments:
            raise ApiError(E.STREAM_NOT_FOUND)
        await self._propose_meta({"op": "del", "name": name})

    def stream_peers(self, name: str) -> list[str] | None:
        """The servers ``name`` is placed on; None if there is no such stream."""
        sa = self.state.assignments.get(name)
        return None if sa is None else list(sa.peers)

    def step_down_meta(self, placement: Placement | None) -> str:
        """META.LEADER.STEPDOWN on the meta leader: hand the meta group's leadership to a
        caught-up peer, the one ``placement`` picks if it names one; the peer asked."""
        meta = self.meta
        if meta is None or not meta.is_leader:
            raise ApiError(E.CLUSTER_NOT_LEADER)
        wanted = self._stepdown_candidates(placement)
        caught_up = meta.caught_up_followers()
        # the placement's peers first; nats-server falls back to any healthy peer
        for peer in [p for p in caught_up if p in wanted] + caught_up:
            if meta.transfer_leadership(peer):
                log.info("meta group: stepping down to %s", peer)
                return peer
        raise ApiError(E.RAFT_GENERAL, err="no replica is caught up to take over")

    def _stepdown_candidates(self, placement: Placement | None) -> list[str]:
        """The peers a stepdown ``placement`` allows (nats-server
        ``getStepDownPreferredPlacement``): the ``preferred`` server alone, else the connected
        peers in the placement's cluster with all its tags (jetraft servers have none);
        without a placement every peer. 10005 when it leaves none."""
        if placement is None:
            return list(self.peers)
        if placement.preferred:
            name = placement.preferred
            if name not in self.peers:
                detail = f"preferred server {gojson.go_quote(name)} not known"
                raise ApiError(E.CLUSTER_NO_PEERS, err=detail)
            if name == self.server_name:
                detail = f"preferred server {gojson.go_quote(name)} is already leader"
                raise ApiError(E.CLUSTER_NO_PEERS, err=detail)
            return [name]
        wanted = [p for p in self.peers if p != self.server_name and self.routes.connected(p)]
        if (placement.cluster and placement.cluster != self.cluster_name) or placement.tags:
            wanted = []
        if not wanted:
            raise ApiError(E.CLUSTER_NO_PEERS, err="no replacement peer connected")
        return wanted

    # --- StreamAuthority: the stream leader's part ----------------------------------------------
    def writer(self, name: str) -> AnyStreamHost:
        return self._leading(name)

    def _leading(self, name: str, *, serving: bool = True) -> StreamHost[RaftLog]:
        """This node's replica of ``name``, which leads; ``serving``: and holds a state to
        answer from (not a restored stream's replica still waiting for it)."""
        host = self.replicas.get(name)
        if host is None:
            raise ApiError(E.STREAM_NOT_FOUND)
        if not host.is_leader:
            raise ApiError(E.CLUSTER_NOT_LEADER)
        if serving and host.awaiting_seed:
            # elected before a restored backup's state reached it: it holds nothing to answer
            raise ApiError(E.STREAM_OFFLINE)
        return host

    def check_update(self, old: StreamConfig, new: StreamConfig) -> None:
        if new.num_replicas != old.num_replicas:
            raise ApiError(
                E.CLUSTER_NO_PEERS, err="changing num_replicas is not supported by jetraft yet"
            )

    async def updated(self, host: AnyStreamHost) -> None:
        await self._propose_meta(
            {"op": "upd", "name": host.name, "config": host.config.model_dump(mode="json")}
        )

    def health(self) -> str | None:
        why = self.meta_health()
        if why is not None:
            return why
        offline = offline_stream(self.replicas)
        if offline is not None:
            return offline
        for name in sorted(self.replicas):
            why = self.stream_health(name)
            if why is not None:
                return why
        return None

    def meta_health(self) -> str | None:
        meta = self.meta
        if meta is not None and meta.failed is not None:
            return f"JetStream meta group stopped on this node: {meta.failed}"
        no_leader = "JetStream has not established contact with a meta leader"
        if meta is None or meta.leader_id is None:
            return no_leader
        members = set(self.peers) | {self.server_name}
        reachable = 1 + sum(
            1 for p in members if p != self.server_name and self.routes.connected(p)
        )
        if reachable * 2 <= len(members):
            return (
                f"JetStream cannot reach a majority of the cluster ({reachable} of {len(members)})"
            )
        leader = meta.leader_id
        if leader != self.server_name and not self.routes.connected(leader):
            return no_leader
        return None

    def stream_health(self, name: str) -> str | None:
        host = self.replicas.get(name)
        if host is None:
            return None
        if host.offline:
            return f"JetStream stream '{name}' is offline"
        group = host.log.group
        if group.failed is not None:
            return f"JetStream stream '{name}' is stopped on this node: {group.failed}"
        # a stream whose group has no leader (its replicas lack a majority) is unavailable,
        # which no restart of this node can help: it does not hold this node back
        if group.leader_id is not None and (not host.caught_up or group.paused):
            return f"JetStream stream '$G > {name}' is not current"
        return None

    def hand_off_leaderships(self) -> int:
        handed = sum(
            1 for host in self.replicas.values() if host.is_leader and host.log.step_down()
        )
        meta = self.meta
        if meta is not None and meta.is_leader:
            try:
                self.step_down_meta(None)
                handed += 1
            except ApiError as exc:  # no caught-up peer: it stays until the shutdown
                log.warning("meta group: cannot hand on leadership: %s", exc)
        return handed

    def step_down(self, name: str) -> None:
        host = self._leading(name, serving=False)  # a leader without the state may hand it on
        if host.log.step_down() is None:
            raise ApiError(E.RAFT_GENERAL, err="no replica is caught up to take over")

    async def read_barrier(self, host: AnyStreamHost) -> None:
        await self._leading(host.name).log.read_barrier()

    # --- monitoring ---------------------------------------------------------------------------
    def meta_cluster(self) -> dict[str, Any] | None:
        meta = self.meta
        size = len(self.peers)
        out: dict[str, Any] = {"name": self.cluster_name}
        leader = meta.leader_id if meta is not None else None
        if leader is not None:
            out["leader"] = leader
            out["peer"] = leader  # jetraft names peers by server name (nats-server: a hash)
        if meta is not None:
            out["replicas"] = self._replicas(meta)
        out["cluster_size"] = size
        out["quorum_needed"] = size // 2 + 1
        # API requests are answered as they come (no queue of routed requests to report)
        out["pending"] = 0
        out["pending_requests"] = 0
        out["pending_infos"] = 0
        out["snapshot"] = _snapshot_stats(meta)
        return out

    def cluster_view(self) -> dict[str, Any]:
        return {
            "name": self.cluster_name,
            "meta_leader": self.meta_leader,
            "peers": self.peers,
            "connected": self.routes.connected_peers(),
            # every stream the meta group assigned and its replicas' nodes, so a tool can name
            # a stream none of whose replicas is up (no node then reports it)
            "assignments": {
                name: list(sa.peers) for name, sa in sorted(self.state.assignments.items())
            },
        }

    def raft_view(self, host: AnyStreamHost) -> dict[str, Any]:
        replica = self.replicas.get(host.name)
        if replica is not host or replica is None:
            return {}
        group = replica.log.group
        return {
            "leader": group.leader_id,
            "replicas": replica.log.peers,
            "preferred_leader": replica.log.preferred,
            "raft_group": group.group_name,
            "term": group.term,
            "raft_applied": group.last_applied,
            "commit_index": group.commit_index,
            "lag": replica.log.lag(),
        }


def _snapshot_stats(meta: RaftGroup | None) -> dict[str, Any]:
    """nats-server's ``MetaSnapshotStats``: the meta log's entries since its last snapshot,
    the journal's bytes and when that snapshot was written (Go's zero time: never)."""
    if meta is None:
        return {"pending_entries": 0, "pending_size": 0, "last_time": format_rfc3339nano(0)}
    status = meta.status()
    try:
        taken_ns = meta.snapshot_path.stat().st_mtime_ns
    except OSError:
        taken_ns = 0
    return {
        "pending_entries": max(0, status.last_log_index - status.first_log_index),
        "pending_size": meta.journal.size_bytes,
        "last_time": format_rfc3339nano(taken_ns),
    }


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.critical("the meta group could not be started", exc_info=task.exception())


def _claim_for_incarnation(stream_dir: Path, incarnation: int) -> None:
    """Make ``stream_dir`` the directory of this incarnation of its stream: what an earlier one
    left there (its store and Raft journal: it was deleted while this node was away) goes."""
    marker = stream_dir / INCARNATION_FILE
    try:
        held: int | None = int(marker.read_text())
    except (OSError, ValueError):
        # new, written before the marker existed, or unreadable: kept (a replica is rebuilt
        # from its peers should it not be this incarnation's, a sole one could not be)
        held = None
    if held == incarnation:
        return
    if held is not None:
        log.warning("stream directory %s: an earlier incarnation's data removed", stream_dir)
        shutil.rmtree(stream_dir, ignore_errors=True)
    stream_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(marker, str(incarnation).encode())
