"""Who holds the streams and who answers: what the one JetStream API (``cluster/jetstream.py``)
asks of a single server (``cluster/local_streams.py``) or of the cluster's meta group
(``cluster/meta_streams.py``).

The API's handlers are written once against this interface; the two authorities differ only in
where a stream's truth lives (a directory on this node, or a Raft group placed by the meta log)
and in which node answers a request.

Must never: let two nodes answer the same request (``answers``), or change a stream's state other
than through its host's proposals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from cluster.backup import RestoreSession
from cluster.stream_host import AnyStreamHost
from protocol.models import StreamConfig


class StreamAuthority(Protocol):
    clustered: bool  # what nats-server's config validation and error choices depend on
    ready: asyncio.Event  # set once this node can answer (a cluster: a meta leader is known)

    @property
    def hosts(self) -> Mapping[str, AnyStreamHost]:
        """The one registry: every stream with a host (a replica, in a cluster) on this node."""
        ...

    def start(self) -> None: ...

    def health(self) -> str | None:
        """Why this node should not take clients now (``/healthz`` answers 503 with it), or
        None: the meta layer's problem (``meta_health``), else the first hosted stream's
        (``stream_health``)."""
        ...

    def meta_health(self) -> str | None:
        """In a cluster: no meta leader, or no majority in reach; a single server: None."""
        ...

    def stream_health(self, name: str) -> str | None:
        """The hosted stream ``name`` went offline or (in a cluster) is catching up with its
        leader; None when it is well (or not hosted here)."""
        ...

    async def close(self) -> None: ...

    def hand_off_leaderships(self) -> int:
        """Lame duck mode: hand every Raft group this node leads (the streams', the meta
        group's) to a caught-up follower; how many were handed on (a single server: none)."""
        ...

    def answers(self, op: str, stream: str) -> bool:
        """Whether this node answers API operation ``op`` (``ACCOUNT_INFO``, ``NAMES``, ``LIST``
        or a STREAM sub-operation) about ``stream`` ("" for none)."""
        ...

    def configs(self, exclude: str = "") -> dict[str, StreamConfig]:
        """Every stream's config (cluster-wide), but ``exclude``'s."""
        ...

    async def create(self, cfg: StreamConfig) -> tuple[dict[str, Any], bool]:
        """Create the (normalized) stream, or find it identical: its CREATE response, and whether
        this call created it."""
        ...

    async def delete(self, name: str) -> None: ...

    def begin_restore(self, cfg: StreamConfig) -> RestoreSession:
        """STREAM.RESTORE: take an upload of a backup of ``cfg.name`` (``cluster/backup.py``)."""
        ...

    def writer(self, name: str) -> AnyStreamHost:
        """The host that proposes for ``name`` here; else ``STREAM_NOT_FOUND`` or
        ``CLUSTER_NOT_LEADER``."""
        ...

    def check_update(self, old: StreamConfig, new: StreamConfig) -> None:
        """Refuse a config change this authority cannot carry out."""
        ...

    async def updated(self, host: AnyStreamHost) -> None:
        """Record the config ``host`` has just applied wherever stream configs are kept."""
        ...

    def step_down(self, name: str) -> None:
        """STREAM.LEADER.STEPDOWN (and a consumer's, whose leader is its stream's): this node,
        the stream's leader, hands leadership to a caught-up replica; else ``CLUSTER_REQUIRED``
        (a single server) or ``RAFT_GENERAL``."""
        ...

    async def read_barrier(self, host: AnyStreamHost) -> None:
        """Return once ``host`` reflects every write acknowledged before the call."""
        ...

    def host_info(self, host: AnyStreamHost, type_: str, **kw: Any) -> dict[str, Any]:
        """A local host's StreamInfo (``cluster/stream_info.py``), with the cluster object."""
        ...

    async def leader_info(self, name: str) -> dict[str, Any] | None:
        """A bare StreamInfo of ``name`` from wherever it is answered; None if nobody did."""
        ...

    def meta_cluster(self) -> dict[str, Any] | None:
        """The meta group as nats-server's /jsz ``meta_cluster`` shows it; None on a single
        server (nats-server leaves the key out there)."""
        ...

    def cluster_view(self) -> dict[str, Any]:
        """``/jetraftz``'s ``cluster`` object: the cluster's name, the meta leader, the meta
        group's peers and the peers this node's routes reach."""
        ...

    def raft_view(self, host: AnyStreamHost) -> dict[str, Any]:
        """``/jetraftz``'s Raft fields of one local replica (leader, peers, term, indexes,
        lag); on a single server the leader only."""
        ...
