"""The streams of a single server: their on-disk layout and the hosts that serve them.

Each stream has a directory under ``<store_dir>/jetstream/streams/<name>``: ``config.json`` (the
config and creation time, replaced atomically) and the message store in ``msgs/``. A server
answers every request about its own streams.

Must never: leave a config file half-written, or open a stream twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cluster.backup import RestoreSession, RestoreUploads
from cluster.batching import BatchContext
from cluster.extension_loader import attach_all, load_attachers
from cluster.local_log import LocalLog
from cluster.router import Router
from cluster.stream_host import AnyStreamHost, StreamHost
from cluster.stream_info import host_info
from engine import disk
from engine.filestore import FileStore, segment_bytes_for
from engine.memstore import MemoryStore
from engine.store import MessageStore
from engine.stream import Stream
from protocol import api_json, gojson
from protocol import errors as E
from protocol.errors import ApiError
from protocol.models import StreamConfig
from protocol.stream_config import check_restorable

log = logging.getLogger("jetraft.jetstream")

CONFIG_FILE = "config.json"
MSGS_DIR = "msgs"
RESTORE_DIR = "restore"  # STREAM.RESTORE's staging stores, one per upload


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file, whole."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        disk.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        disk.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def offline_stream(hosts: Mapping[str, AnyStreamHost]) -> str | None:
    """The health problem of the first stream that went offline (a failed fsync or apply)."""
    for name, host in sorted(hosts.items()):
        if host.offline:
            return f"JetStream stream '{name}' is offline"
    return None


def streams_dir(store_dir: Path) -> Path:
    """Where each stream's directory lives, on a single server and on a cluster's replicas."""
    return store_dir / "jetstream" / "streams"


def open_store(cfg: StreamConfig, stream_dir: Path) -> MessageStore:
    """The message store a stream's config asks for (file stores live in ``msgs/``)."""
    if cfg.storage == "file":
        return FileStore(
            stream_dir / MSGS_DIR,
            meta_commits=True,
            segment_bytes_max=segment_bytes_for(cfg.max_bytes),
        )
    return MemoryStore()


class LocalStreams:
    clustered = False

    def __init__(
        self,
        router: Router,
        store_dir: Path,
        server_name: str,
        batch_context: BatchContext,
    ) -> None:
        self.router = router
        self.server_name = server_name
        self.batch_context = batch_context
        self.streams_dir = streams_dir(store_dir)
        self._restores = RestoreUploads(router, store_dir / "jetstream" / RESTORE_DIR, open_store)
        self._hosts: dict[str, StreamHost[LocalLog]] = {}
        self.ready = asyncio.Event()
        self.attachers = load_attachers()  # stream extensions (mirror/): cluster/extensions.py

    @property
    def hosts(self) -> Mapping[str, AnyStreamHost]:
        return self._hosts

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self.streams_dir.mkdir(parents=True, exist_ok=True)
        self._restores.clear()
        for stream_dir in sorted(self.streams_dir.iterdir()):
            cfg_path = stream_dir / CONFIG_FILE
            if not cfg_path.is_file():
                continue
            try:
                doc = json.loads(cfg_path.read_bytes())
                cfg = StreamConfig.model_validate(doc["config"])
                self._open_stream(cfg, stream_dir, int(doc["created_ns"]))
            except Exception:
                log.exception("stream in %s could not be opened; skipping it", stream_dir)
        self.ready.set()

    def hand_off_leaderships(self) -> int:
        return 0  # no Raft groups on a single server

    async def close(self) -> None:
        for host in list(self._hosts.values()):
            await host.close()
        self._hosts.clear()

    def _open_stream(
        self,
        cfg: StreamConfig,
        stream_dir: Path,
        created_ns: int,
        store: MessageStore | None = None,
    ) -> StreamHost[LocalLog]:
        if store is None:
            store = open_store(cfg, stream_dir)
        durable = cfg.storage == "file"
        host = StreamHost(
            Stream(cfg, store, created_ns),
            store,
            self.router,
            lambda owner: LocalLog(owner, store, durable=durable),
            batch_context=self.batch_context,
            node_name=self.server_name,
        )
        self._hosts[cfg.name] = host
        host.start()
        attach_all(host, self.attachers)
        for note in store.recovery_notes():
            log.warning("stream %s: %s", cfg.name, note)
        for bad in store.corrupt_records():
            log.error("stream %s: corrupt record %s (%s)", cfg.name, bad.location, bad.reason)
        return host

    def _persist_config(self, cfg: StreamConfig, created_ns: int) -> Path:
        stream_dir = self.streams_dir / cfg.name
        stream_dir.mkdir(parents=True, exist_ok=True)
        doc = {"config": cfg.model_dump(mode="json"), "created_ns": created_ns}
        write_atomic(stream_dir / CONFIG_FILE, gojson.encode(doc))
        return stream_dir

    # --- StreamAuthority ------------------------------------------------------------------------
    def answers(self, _op: str, _stream: str) -> bool:
        return True

    def configs(self, exclude: str = "") -> dict[str, StreamConfig]:
        return {n: h.config for n, h in self._hosts.items() if n != exclude}

    async def create(self, cfg: StreamConfig) -> tuple[dict[str, Any], bool]:
        host = self._hosts.get(cfg.name)
        created = host is None  # else the config was found identical (or refused before)
        if host is None:
            created_ns = time.time_ns()
            host = self._open_stream(cfg, self._persist_config(cfg, created_ns), created_ns)
        return self.host_info(host, api_json.STREAM_CREATE_RESPONSE, did_create=True), created

    async def delete(self, name: str) -> None:
        host = self.writer(name)
        del self._hosts[name]
        await host.close()
        shutil.rmtree(self.streams_dir / name, ignore_errors=True)

    # --- STREAM.RESTORE (cluster/backup.py) ------------------------------------------------------
    def begin_restore(self, cfg: StreamConfig) -> RestoreSession:
        """An upload of a snapshot of ``cfg.name`` (cluster/backup.py)."""
        return self._restores.begin(cfg, self._adopt)

    async def _adopt(self, staging: Path, store: MessageStore, restored: Stream) -> dict[str, Any]:
        """Host the stream an upload restored (STREAM.CREATE's response), unless its name or
        subjects are taken meanwhile."""
        cfg = restored.config
        check_restorable(cfg, self.configs())
        store.flush()
        store.fsync()
        target = self.streams_dir / cfg.name
        reuse: MessageStore | None = store
        if cfg.storage == "file":
            store.close()
            os.replace(staging, target)
            reuse = None  # reopened from its new place
        else:
            staging.rmdir()
        self._persist_config(cfg, restored.created_ns)
        host = self._open_stream(cfg, target, restored.created_ns, reuse)
        return self.host_info(host, api_json.STREAM_CREATE_RESPONSE)

    def writer(self, name: str) -> AnyStreamHost:
        host = self._hosts.get(name)
        if host is None:
            raise ApiError(E.STREAM_NOT_FOUND)
        return host

    def check_update(self, old: StreamConfig, new: StreamConfig) -> None:
        return None  # every change normalize_update let through is carried out by the engine

    async def updated(self, host: AnyStreamHost) -> None:
        self._persist_config(host.config, host.stream.created_ns)

    def health(self) -> str | None:
        return offline_stream(self._hosts)

    def meta_health(self) -> str | None:
        return None

    def stream_health(self, name: str) -> str | None:
        host = self._hosts.get(name)
        return offline_stream({name: host}) if host is not None else None

    def step_down(self, name: str) -> None:
        raise ApiError(E.CLUSTER_REQUIRED)

    async def read_barrier(self, host: AnyStreamHost) -> None:
        return None  # one server: its engine is the stream

    def host_info(self, host: AnyStreamHost, type_: str, **kw: Any) -> dict[str, Any]:
        return host_info(host, self.server_name, type_, **kw)

    async def leader_info(self, name: str) -> dict[str, Any] | None:
        host = self._hosts.get(name)
        if host is None:
            return None
        return self.host_info(host, "", dynamic_metadata=False)

    def meta_cluster(self) -> dict[str, Any] | None:
        return None

    def cluster_view(self) -> dict[str, Any]:
        return {}

    def raft_view(self, host: AnyStreamHost) -> dict[str, Any]:
        return {"leader": self.server_name}
