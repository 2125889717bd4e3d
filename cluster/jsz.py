"""JetStream's monitoring documents: nats-server's ``/jsz`` (monitor.go ``JSInfo``, with its
``accounts``, ``streams``, ``consumers``, ``config``, ``raft``, ``acc``, ``offset``/``limit``,
``leader-only`` and ``stream-leader-only`` forms), the ``jetstream`` block of ``/varz``, and
jetraft's own ``/jetraftz``: every stream replica on this node with its Raft position and state
digests, which the cluster tests, the chaos harness and ``jetraft cluster status`` compare.

Keys and JSON types are nats-server 2.15.1's (probed); what jetraft has no counterpart for is
left out as nats-server leaves out an unset key, and listed in docs/nats-differences.md.

Must never: change state, wait, or read anything but this node's hosts and counters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.jetstream import JetStream
from cluster.stream_host import AnyStreamHost
from engine.batch import BatchLimits
from protocol.stream_config import SERVER_API_LEVEL
from protocol.timefmt import format_rfc3339nano

ACCOUNT = "$G"  # jetraft's one account, under nats-server's name for the global account
# an account without JetStream limits, as nats-server writes it: uint64(-1)
UNLIMITED_RESERVATION = 2**64 - 1
UNLIMITED = -1  # jetraft sets no server-wide memory or storage limit (nats-server: bytes)
JSZ_LIMIT_DEFAULT = 1024
NOT_LEADER = "filtered response: not leader"  # nats-server's leader-only refusal (400)
META_GROUP_NAME = "_meta_"  # how a meta follower's statsz names the group (nats-server's name)


class JszError(ValueError):
    """A /jsz request nats-server answers with 400 and this text."""


@dataclass(frozen=True)
class JszOptions:
    """``/jsz``'s query options, as HandleJsz decodes them."""

    accounts: bool = False
    streams: bool = False
    consumers: bool = False
    config: bool = False
    raft: bool = False
    leader_only: bool = False
    stream_leader_only: bool = False
    account: str = ""
    offset: int = 0
    limit: int = 0


@dataclass(frozen=True)
class JetStreamSetup:
    """What /jsz reports of this node's JetStream configuration."""

    server_id: str
    server_name: str
    store_dir: Path
    batch_limits: BatchLimits


def _now() -> str:
    return format_rfc3339nano(time.time_ns())


def disabled_jsz(server_id: str) -> dict[str, Any]:
    """nats-server's /jsz without JetStream (probed): zeros, ``disabled`` and API level 0."""
    return {
        **_stats(0, 0, 0, 0, 0, 0, 0),
        "server_id": server_id,
        "now": _now(),
        "disabled": True,
        "config": {"max_memory": 0, "max_storage": 0},
        "streams": 0,
        "consumers": 0,
        "messages": 0,
        "bytes": 0,
        "total": 0,
    }


def _stats(
    memory: int, storage: int, reserved: int, accounts: int, ha: int, total: int, errors: int
) -> dict[str, Any]:
    """nats-server's ``JetStreamStats`` (the API level is 0 without JetStream and per account)."""
    level = SERVER_API_LEVEL if accounts else 0
    return {
        "memory": memory,
        "storage": storage,
        "reserved_memory": reserved,
        "reserved_storage": reserved,
        "accounts": accounts,
        "ha_assets": ha,
        "api": {"level": level, "total": total, "errors": errors},
    }


def _usage(hosts: list[AnyStreamHost]) -> tuple[int, int]:
    """(memory, storage): the bytes this node's memory and file streams hold."""
    memory = storage = 0
    for host in hosts:
        size = host.stream.state().bytes
        if host.config.storage == "memory":
            memory += size
        else:
            storage += size
    return memory, storage


def _hosts(js: JetStream) -> list[AnyStreamHost]:
    return [js.authority.hosts[name] for name in sorted(js.authority.hosts)]


def server_stats(js: JetStream) -> dict[str, Any]:
    """``JetStreamStats`` of this node: what /jsz and /varz's ``jetstream.stats`` show."""
    hosts = _hosts(js)
    memory, storage = _usage(hosts)
    # jetraft's Raft groups on this node: the meta group and one per stream replica
    ha = 1 + len(hosts) if js.authority.clustered else 0
    return _stats(memory, storage, 0, 1, ha, js.api_total, js.api_errors)


def config(setup: JetStreamSetup) -> dict[str, Any]:
    """nats-server's ``JetStreamConfig``: no server-wide limits (-1), every write synced."""
    return {
        "max_memory": UNLIMITED,
        "max_storage": UNLIMITED,
        "store_dir": str(setup.store_dir.resolve() / "jetstream"),
        "sync_always": True,
        "strict": True,
    }


def limits(setup: JetStreamSetup) -> dict[str, Any]:
    """nats-server's ``JSLimitOpts``: the batch limits the config sets (unset keys omitted)."""
    given, default = setup.batch_limits, BatchLimits()
    out: dict[str, Any] = {}
    if given.inflight_per_stream_max != default.inflight_per_stream_max:
        out["max_batch_inflight_per_stream"] = given.inflight_per_stream_max
    if given.inflight_total_max != default.inflight_total_max:
        out["max_batch_inflight_total"] = given.inflight_total_max
    if given.msgs_max != default.msgs_max:
        out["max_batch_size"] = given.msgs_max
    if given.idle_timeout_ns != default.idle_timeout_ns:
        out["max_batch_timeout"] = given.idle_timeout_ns
    return out


def varz_jetstream(js: JetStream | None, setup: JetStreamSetup) -> dict[str, Any]:
    """/varz's ``jetstream`` object (``JetStreamVarz``): empty without JetStream."""
    if js is None:
        return {}
    out: dict[str, Any] = {"config": config(setup), "stats": server_stats(js)}
    meta = js.authority.meta_cluster()
    if meta is not None:
        out["meta"] = meta
    out["limits"] = limits(setup)
    return out


def statsz_jetstream(js: JetStream | None, setup: JetStreamSetup) -> dict[str, Any] | None:
    """The ``jetstream`` object of a server's statsz (``$SYS.REQ.SERVER.PING``): /varz's
    without the store directory, and the meta group in full on its leader only; a follower
    names the group as nats-server's followers do and leaves the replicas out."""
    if js is None:
        return None
    cfg = {k: v for k, v in config(setup).items() if k != "store_dir"}
    out: dict[str, Any] = {"config": cfg, "stats": server_stats(js)}
    meta = js.authority.meta_cluster()
    if meta is not None:
        if meta.get("leader") != setup.server_name:
            meta = {k: v for k, v in meta.items() if k != "replicas"}
            meta["name"] = META_GROUP_NAME
        out["meta"] = meta
    out["limits"] = limits(setup)
    return out


def jsz(js: JetStream | None, setup: JetStreamSetup, opts: JszOptions) -> dict[str, Any]:
    """The /jsz document (monitor.go ``Jsz``); JszError where nats-server answers 400."""
    if js is None:
        if opts.leader_only:
            raise JszError(NOT_LEADER)
        return disabled_jsz(setup.server_id)
    streams, accounts = opts.streams or opts.consumers, opts.accounts
    if streams and not opts.account:
        accounts = True
    meta = js.authority.meta_cluster()
    if opts.leader_only and meta is not None and meta.get("leader") != setup.server_name:
        raise JszError(NOT_LEADER)
    hosts = _hosts(js)
    out = server_stats(js)
    out["server_id"] = setup.server_id
    out["now"] = _now()
    out["config"] = config(setup)
    out["limits"] = limits(setup)
    out["streams"] = len(hosts)
    led = [h for h in hosts if h.is_leader] if opts.raft else []
    if led:  # (omitted when 0, as Go's omitempty does)
        out["streams_leader"] = len(led)
    out["consumers"] = sum(len(h.stream.consumers) for h in hosts)
    if sum(len(h.stream.consumers) for h in led):
        # a consumer's leader is its stream's
        out["consumers_leader"] = sum(len(h.stream.consumers) for h in led)
    states = [h.stream.state() for h in hosts]
    out["messages"] = sum(st.messages for st in states)
    out["bytes"] = sum(st.bytes for st in states)
    if meta is not None:
        out["meta_cluster"] = meta
    # one account: a page of the sorted accounts holds it unless the offset skips it
    limit = opts.limit or JSZ_LIMIT_DEFAULT
    if opts.account == ACCOUNT or (accounts and (limit < 0 or opts.offset < 1)):
        detail = _account_detail(js, setup, hosts, opts, streams)
        out["account_details"] = [detail]
    out["total"] = 1
    return out


def _account_detail(
    js: JetStream,
    setup: JetStreamSetup,
    hosts: list[AnyStreamHost],
    opts: JszOptions,
    streams: bool,
) -> dict[str, Any]:
    memory, storage = _usage(hosts)
    detail: dict[str, Any] = {"name": ACCOUNT, "id": ACCOUNT}
    detail.update(_stats(memory, storage, UNLIMITED_RESERVATION, 0, 0, js.api_total, js.api_errors))
    if streams:
        shown = [
            _stream_detail(js, setup, h, opts)
            for h in hosts
            if not opts.stream_leader_only or h.is_leader
        ]
        if shown:
            detail["stream_detail"] = shown
    return detail


def _stream_detail(
    js: JetStream, setup: JetStreamSetup, host: AnyStreamHost, opts: JszOptions
) -> dict[str, Any]:
    """nats-server's ``StreamDetail`` from the stream's own StreamInfo."""
    info = js.authority.host_info(host, "", dynamic_metadata=False)
    cluster = info.get("cluster") or {"leader": setup.server_name}
    out: dict[str, Any] = {"name": host.name, "created": info["created"], "cluster": cluster}
    if opts.config:
        out["config"] = info["config"]
    out["state"] = info["state"]
    if opts.consumers:
        consumers = []
        for name in sorted(host.consumers.names()):
            consumer = host.consumers.info(name, info.get("cluster"))
            if consumer is None:
                continue
            if not opts.config:
                consumer.pop("config", None)
            consumers.append(consumer)
        if consumers:
            out["consumer_detail"] = consumers
    for key in ("mirror", "sources"):
        if key in info:
            out[key] = info[key]
    group = cluster.get("raft_group")
    if opts.raft and group:
        out["stream_raft_group"] = group
        # a consumer's state lives in its stream's log: its group is the stream's
        out["consumer_raft_groups"] = [
            {"name": name, "raft_group": group} for name in sorted(host.consumers.names())
        ]
    return out


def jetraftz(js: JetStream | None, setup: JetStreamSetup) -> dict[str, Any]:
    """jetraft's own view (``/jetraftz``): the meta group as this node sees it and, for every
    stream replica here, its leader, Raft position, state digests (equal on every replica at
    the same applied index), Direct Gets served and damaged store records."""
    out: dict[str, Any] = {"server_name": setup.server_name, "now": _now()}
    if js is None:
        out["streams"] = []
        return out
    meta = js.authority.meta_cluster()
    if meta is not None:
        out["cluster"] = js.authority.cluster_view()
    out["streams"] = [_replica(js, h) for h in _hosts(js)]
    return out


def _replica(js: JetStream, host: AnyStreamHost) -> dict[str, Any]:
    stream = host.stream
    st = stream.state()
    return {
        "name": host.name,
        "is_leader": host.is_leader,
        **js.authority.raft_view(host),
        "applied_index": stream.applied_index,
        "digest": stream.digest().hex(),
        # messages only (no config, no index): equal on a mirror and its upstream
        "content_digest": stream.content_digest().hex(),
        "direct_gets_served": host.direct.served,
        **host.attachment_info(),
        "state": {
            "messages": st.messages,
            "bytes": st.bytes,
            "first_seq": st.first_seq,
            "last_seq": st.last_seq,
        },
        "corrupt_records": [
            {"seq": c.seq, "location": c.location, "reason": c.reason}
            for c in host.store.corrupt_records()
        ],
    }
