"""A mirror stream following its upstream, and answering the upstream's Direct Gets.

One ``MirrorFollower`` is attached to every host (replica) of a stream whose config has
``mirror``. What each does:

* **Following** (on the host that may propose: the single server, or the mirror group's leader):
  ask the upstream's replicas for everything above the mirror's position with one mirror fetch
  (``engine/mirror_fetch.py``, on ``$JSC.MF.<upstream>``, answered by any caught-up upstream
  replica), and propose what came back as one ``MirrorEntry``: the messages keep their upstream
  sequences, subjects, headers and timestamps, and applying skips anything at or below the
  mirror's last sequence, so a re-proposal after a leader change or a restart of either side
  neither duplicates nor leaves a gap. Far behind, each round trip moves up to
  ``FETCH_MSGS_MAX`` messages; caught up, it polls every ``IDLE_POLL_S``; when the upstream
  does not answer (offline), it retries with backoff and reports the error
  (``mirror/upstream.py``'s ``follow`` loop, shared with sources).
* **Mirror Direct Get** (every replica, ``mirror_direct``): once fewer than
  ``MIRROR_DIRECT_CAUGHT_UP_PENDING`` upstream messages are missing (nats-server's
  ``dgetCaughtUpThresh``) and the replica itself is caught up, queue-subscribe in ``_sys_`` to
  ``$JS.API.DIRECT.GET.<upstream>`` and its subject-appended form, and answer from the mirror's
  own engine with the mirror's name in ``Nats-Stream`` — so reads spread over mirror nodes too
  and keep working while the upstream is offline.

``external`` upstreams (another domain or account) are not followed: jetraft has no leaf nodes
or domains, so nothing would route the fetch; the mirror reports that in ``mirror.error``.

Must never: store anything but what the upstream returned, or propose from a non-leader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final

from cluster.extensions import StreamAttachment
from cluster.router import Router
from cluster.stream_host import AnyStreamHost
from engine.entries import MirrorEntry
from engine.sources import SourceSpec
from mirror.upstream import (
    UpstreamClient,
    config_info,
    fetch_request,
    follow,
    fresh_msgs,
    start_time_ns,
)

log = logging.getLogger("jetraft.mirror")

MIRROR_DIRECT_CAUGHT_UP_PENDING: Final = 10  # nats-server's dgetCaughtUpThresh
MIRROR_ACTIVE_NEVER: Final = -1


class MirrorFollower(StreamAttachment):
    def __init__(self, host: AnyStreamHost) -> None:
        mirror = host.config.mirror
        assert mirror is not None
        self.host = host
        self.router: Router = host.router
        self.upstream = mirror.name
        self._filters = SourceSpec.of(mirror).filters  # the filter, or the transforms' sources
        self.external = mirror.external is not None
        self.error: str | None = None
        self.upstream_last_seq = 0
        self.position = 0  # the highest upstream seq known to be covered (stored or nothing live)
        self.last_contact_ns = 0
        self._closing = False
        self._upstream = UpstreamClient(self.router)
        self._task: asyncio.Task[None] | None = None

    # --- StreamAttachment ---------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._set_direct(False)
        self._upstream.close()

    def info(self) -> dict[str, Any]:
        """STREAM.INFO's ``mirror`` object (nats-server's StreamSourceInfo)."""
        now = time.time_ns()
        out: dict[str, Any] = {"name": self.upstream}
        out["lag"] = self.pending
        out["active"] = now - self.last_contact_ns if self.last_contact_ns else MIRROR_ACTIVE_NEVER
        mirror = self.host.config.mirror
        if mirror is not None:
            out.update(config_info(mirror))
        if self.error:
            out["error"] = {"code": 503, "description": self.error}
        return {"mirror": out}

    def on_tick(self) -> None:
        self._refresh_direct()

    # --- state --------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Upstream messages above what this replica holds (the mirror's lag). A follower knows
        what the leader wrote into the log (``MirrorEntry.upstream_last_seq``/``covered_seq``);
        the leader also what its latest fetch told it."""
        stream = self.host.stream
        known = max(self.upstream_last_seq, stream.mirror_upstream_last_seq)
        covered = max(self.position, stream.last_seq, stream.mirror_covered_seq)
        return max(0, known - covered)

    def _logged_pending(self) -> int:
        """The lag a follower derives from the log alone."""
        stream = self.host.stream
        covered = max(stream.last_seq, stream.mirror_covered_seq)
        return max(0, stream.mirror_upstream_last_seq - covered)

    def _may_propose(self) -> bool:
        return self.host.is_leader and not self.host.offline

    # --- following ----------------------------------------------------------------------------
    async def _run(self) -> None:
        if self.external:
            self.error = "external upstreams are not supported by jetraft (no domains)"
        await follow(
            self._follow_once,
            ready=self._ready_to_follow,
            closing=lambda: self._closing,
            failed=self._failed,
        )

    def _ready_to_follow(self) -> bool:
        self._refresh_direct()
        return not self.external and self._may_propose()

    def _failed(self, why: str | None) -> None:
        self.error = None if why is None else f"upstream {self.upstream} unavailable: {why}"

    async def _follow_once(self) -> bool:
        """One fetch and (when it brought anything new) one proposal; whether it moved."""
        stream = self.host.stream
        start = max(stream.last_seq, self.position) + 1
        mirror_cfg = self.host.config.mirror
        assert mirror_cfg is not None
        if stream.last_seq == 0 and self.position == 0:
            if mirror_cfg.opt_start_seq:
                start = mirror_cfg.opt_start_seq
            elif mirror_cfg.opt_start_time is not None:
                start = 0
        since_ns = start_time_ns(mirror_cfg.opt_start_time) if start == 0 else 0
        request = fetch_request(start, since_ns, self._filters)
        reply = await self._upstream.fetch(self.upstream, request)
        self.last_contact_ns = time.time_ns()
        self.upstream_last_seq = reply.last_seq
        fresh = fresh_msgs(reply, stream.last_seq)
        covered = reply.last_seq if reply.complete else 0
        if fresh:
            await self.host.propose(MirrorEntry(time.time_ns(), fresh, reply.last_seq, covered))
            return True
        if reply.complete:
            # nothing live (or matching) above ``start`` upstream: covered through its last seq
            self.position = max(self.position, reply.last_seq)
        if self._followers_misjudge():
            # tell the replicas through the log, or they would not serve the upstream's reads
            await self.host.propose(MirrorEntry(time.time_ns(), (), reply.last_seq, self.position))
        return False

    def _followers_misjudge(self) -> bool:
        """Whether the log leaves the mirror's followers wrong about being nearly caught up
        (after a restart they know nothing; a filter or upstream deletions leave gaps)."""
        threshold = MIRROR_DIRECT_CAUGHT_UP_PENDING
        if self.host.stream.mirror_upstream_last_seq == 0 and self.upstream_last_seq > 0:
            return True
        return (self._logged_pending() >= threshold) != (self.pending >= threshold)

    # --- mirror Direct Get --------------------------------------------------------------------
    def _refresh_direct(self) -> None:
        want = (
            self.host.config.mirror_direct
            and not self._closing
            and self.host.caught_up
            and self.pending < MIRROR_DIRECT_CAUGHT_UP_PENDING
            # a replica that has not heard of the upstream yet knows nothing of its lag
            and (self.last_contact_ns > 0 or self.host.stream.mirror_upstream_last_seq > 0)
        )
        self._set_direct(bool(want))

    def _set_direct(self, want: bool) -> None:
        # the host's own responder answers for the upstream's name too (same engine, same
        # parked read-your-writes requests); stopping answers what is parked under that name
        self.host.direct.serve(self.upstream, want)


def attach(host: AnyStreamHost) -> MirrorFollower | None:
    """The ``jetraft.stream_extensions`` entry point: a follower for every mirror stream."""
    if host.config.mirror is None:
        return None
    return MirrorFollower(host)
