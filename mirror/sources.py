"""A stream taking the messages of its ``sources``.

One ``SourcesFollower`` is attached to every stream host; it does something only while the
stream's config has sources and the host may propose (the single server, or the stream group's
leader). For each source it runs the mirror's loop (``mirror/follower.py``): ask the source's
replicas for everything above the source's position with one mirror fetch (``$JSC.MF.<name>``,
filtered by the source's ``filter_subject`` or its transforms' sources), and propose what came
back as one ``SourceEntry``. The engine stores each message under the stream's next seq and
moves the source's position past it, in the same apply (``engine/stream.py``), so a
re-proposal after a leader change or a restart takes nothing twice; the positions are part of
the stream's meta, so they survive restarts and travel with snapshots.

``external`` sources and source ``consumer`` settings are refused when the stream is created
(jetraft has no domains, and fetches need no consumer).

Must never: propose from a non-leader, or take a message below a source's position.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from cluster.extensions import StreamAttachment
from cluster.stream_host import AnyStreamHost
from engine.entries import SourceEntry
from engine.sources import SourceSpec, stream_identity
from mirror.follower import MIRROR_ACTIVE_NEVER
from mirror.upstream import (
    UpstreamClient,
    config_info,
    fetch_request,
    follow,
    fresh_msgs,
    start_time_ns,
)
from protocol.models import StreamSource

log = logging.getLogger("jetraft.sources")


class _Source:
    """One source's follower state (the position itself is the engine's)."""

    def __init__(self, config: StreamSource) -> None:
        self.config = config
        self.spec = SourceSpec.of(config)
        self.upstream_last_seq = 0
        self.covered = 0  # upstream seq through which nothing matching is left to take
        self.last_contact_ns = 0
        self.error: str | None = None
        self.task: asyncio.Task[None] | None = None


class SourcesFollower(StreamAttachment):
    def __init__(self, host: AnyStreamHost) -> None:
        self.host = host
        # made with the first source: every stream but a mirror gets a follower, most never
        # have sources, and an inbox subscription per stream would be wasted
        self._upstream: UpstreamClient | None = None
        self._sources: dict[str, _Source] = {}
        self._closing = False

    # --- StreamAttachment ---------------------------------------------------------------------
    def start(self) -> None:
        self.config_changed()

    def config_changed(self) -> None:
        """Start following new sources, stop following removed ones."""
        if self._closing:
            return
        wanted = {SourceSpec.of(src).iname: src for src in self.host.config.sources or ()}
        for iname in list(self._sources):
            if iname not in wanted:
                source = self._sources.pop(iname)
                if source.task is not None:
                    source.task.cancel()
        loop = asyncio.get_running_loop()
        for iname, config in wanted.items():
            if iname not in self._sources:
                if self._upstream is None:
                    self._upstream = UpstreamClient(self.host.router)
                source = _Source(config)
                source.task = loop.create_task(self._run(source))
                self._sources[iname] = source

    async def close(self) -> None:
        self._closing = True
        tasks = [s.task for s in self._sources.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._upstream is not None:
            self._upstream.close()

    def info(self) -> dict[str, Any]:
        """STREAM.INFO's ``sources`` list (nats-server's StreamSourceInfo for each)."""
        if not self._sources:
            return {}
        now = time.time_ns()
        out = []
        for source in self._sources.values():
            cfg = source.config
            position = self.host.stream.source_position(source.spec.iname)
            item: dict[str, Any] = {"name": cfg.name, "lag": self._lag(source)}
            if position:
                item["seq"] = position
            contact = source.last_contact_ns
            item["active"] = now - contact if contact else MIRROR_ACTIVE_NEVER
            item.update(config_info(cfg))
            if source.error:
                item["error"] = {"code": 503, "description": source.error}
            out.append(item)
        return {"sources": out}

    # --- following ----------------------------------------------------------------------------
    def _lag(self, source: _Source) -> int:
        stream = self.host.stream
        iname = source.spec.iname
        known = max(source.upstream_last_seq, stream.source_upstream_last_seq.get(iname, 0))
        return max(0, known - max(stream.source_position(iname), source.covered))

    def _may_propose(self) -> bool:
        return self.host.is_leader and not self.host.offline

    async def _run(self, source: _Source) -> None:
        def failed(why: str | None) -> None:
            source.error = (
                None if why is None else f"source {source.config.name} unavailable: {why}"
            )

        await follow(
            lambda: self._follow_once(source),
            ready=self._may_propose,
            closing=lambda: self._closing,
            failed=failed,
        )

    async def _follow_once(self, source: _Source) -> bool:
        """One fetch and (when it brought anything new) one proposal; whether it moved."""
        iname, cfg = source.spec.iname, source.config
        position = self.host.stream.source_position(iname)
        start, since_ns = position + 1, 0
        if position == 0:
            if cfg.opt_start_seq:
                start = cfg.opt_start_seq
            elif cfg.opt_start_time is not None:
                start, since_ns = 0, start_time_ns(cfg.opt_start_time)
        request = fetch_request(start, since_ns, source.spec.filters)
        assert self._upstream is not None, "made before the first source's task"
        reply = await self._upstream.fetch(cfg.name, request)
        source.last_contact_ns = time.time_ns()
        source.upstream_last_seq = reply.last_seq
        fresh = fresh_msgs(reply, position)
        if fresh:
            ident = stream_identity(reply.created_ns) if reply.created_ns else ""
            entry = SourceEntry(time.time_ns(), iname, fresh, reply.last_seq, ident)
            await self.host.propose(entry)
            return True
        if reply.complete:
            source.covered = max(source.covered, reply.last_seq)
        return False


def attach(host: AnyStreamHost) -> SourcesFollower | None:
    """The ``jetraft.stream_extensions`` entry point: every stream but a mirror may gain sources
    by an update, so every other host gets a follower (idle while it has none)."""
    if host.config.mirror is not None:
        return None
    return SourcesFollower(host)
