"""Asking an upstream stream's replicas for a batch of messages: the mirror fetch request and
its reply (``engine/mirror_fetch.py``) over the node's router, for mirrors and sources alike.

Must never: wait for a reply past ``FETCH_TIMEOUT_S``, or keep a waiter after it was answered
or gave up.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Final

from cluster.mirror_fetch_responder import MIRROR_FETCH_PREFIX
from cluster.router import Router
from engine.entries import MirroredMsg
from engine.mirror_fetch import (
    FETCH_MSGS_MAX,
    FetchError,
    FetchReply,
    FetchRequest,
    decode_reply,
)
from protocol.errors import ApiError
from protocol.models import StreamSource
from protocol.timefmt import parse_rfc3339_unix_ns

FETCH_TIMEOUT_S: Final = 2.0
IDLE_POLL_S: Final = 0.05  # caught up: ask again after this long
NOT_LEADER_POLL_S: Final = 4 * IDLE_POLL_S  # a replica that may not propose looks again
RETRY_MIN_S: Final = 0.1  # an upstream that does not answer is asked again after this...
RETRY_MAX_S: Final = 2.0  # ...doubling up to this
_INBOX_PREFIX: Final = "$JSC.MR."
_STATUS_PREFIX: Final = b"NATS/1.0 "


class UpstreamClient:
    """One private inbox on the router, and the fetches waiting for their replies on it."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._inbox = f"{_INBOX_PREFIX}{secrets.token_hex(6)}"
        self._inbox_sub = router.subscribe_internal(self._inbox + ".*", self._on_reply)
        self._next_reply = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[tuple[bytes | None, bytes]]] = {}

    def close(self) -> None:
        self.router.remove(self._inbox_sub)
        for future in self._waiting.values():
            future.cancel()

    async def fetch(self, upstream: str, request: FetchRequest) -> FetchReply:
        """The upstream's answer; TimeoutError when nobody answers, FetchError for a refusal
        or a reply that cannot be used."""
        hdr, data = await self._request(MIRROR_FETCH_PREFIX + upstream, request.encode())
        if hdr and hdr.startswith(_STATUS_PREFIX) and not data:
            status = hdr.split(b"\r\n", 1)[0][len(_STATUS_PREFIX) :]
            raise FetchError(status.decode(errors="replace"))
        return decode_reply(data)

    async def _request(self, subject: str, payload: bytes) -> tuple[bytes | None, bytes]:
        reply = f"{self._inbox}.{next(self._next_reply)}"
        future: asyncio.Future[tuple[bytes | None, bytes]] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting[reply] = future
        try:
            if not self.router.publish(subject, reply, None, payload):
                raise TimeoutError("no responders")
            return await asyncio.wait_for(future, FETCH_TIMEOUT_S)
        finally:
            self._waiting.pop(reply, None)

    def _on_reply(self, subject: str, _reply: str | None, hdr: bytes | None, data: bytes) -> None:
        future = self._waiting.get(subject)
        if future is not None and not future.done():
            future.set_result((hdr, data))


async def follow(
    step: Callable[[], Awaitable[bool]],
    *,
    ready: Callable[[], bool],
    closing: Callable[[], bool],
    failed: Callable[[str | None], None],
) -> None:
    """Run ``step`` (one fetch and its proposal; whether it moved) until ``closing``: only while
    ``ready`` (the host may propose), again at once while it moves, every ``IDLE_POLL_S`` while
    caught up, with backoff while the upstream does not answer (``failed`` is told why, and
    None once it answers again). A proposal refused because leadership moved is retried."""
    delay = RETRY_MIN_S
    while not closing():
        if not ready():
            await asyncio.sleep(NOT_LEADER_POLL_S)
            continue
        try:
            moved = await step()
        except (TimeoutError, FetchError) as exc:
            failed(str(exc) or "timeout")
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
            continue
        except ApiError:
            await asyncio.sleep(IDLE_POLL_S)  # lost leadership meanwhile
            continue
        failed(None)
        delay = RETRY_MIN_S
        if not moved:
            await asyncio.sleep(IDLE_POLL_S)


def fetch_request(seq: int, since_ns: int, filters: tuple[str, ...]) -> FetchRequest:
    """A fetch of everything from ``seq`` (or, with seq 0, from ``since_ns``) matching
    ``filters`` (none: everything), a full batch at most."""
    return FetchRequest(
        seq=seq,
        start_time_ns=since_ns,
        filter=filters[0] if len(filters) == 1 else "",
        filters=filters if len(filters) > 1 else (),
        max_msgs=FETCH_MSGS_MAX,
    )


def fresh_msgs(reply: FetchReply, above: int) -> tuple[MirroredMsg, ...]:
    """The reply's messages above upstream seq ``above``, as log entries carry them."""
    return tuple(
        MirroredMsg(m.seq, m.subject, m.hdr, m.data, m.ts_ns) for m in reply.msgs if m.seq > above
    )


def config_info(config: StreamSource) -> dict[str, Any]:
    """The parts of a mirror's or source's config its StreamSourceInfo repeats."""
    out: dict[str, Any] = {}
    if config.filter_subject:
        out["filter_subject"] = config.filter_subject
    if config.subject_transforms:
        out["subject_transforms"] = [
            {"src": tr.src, "dest": tr.dest} for tr in config.subject_transforms
        ]
    return out


def start_time_ns(value: str | None) -> int:
    """``opt_start_time`` (RFC 3339, validated with the config) in ns; 0 when unset."""
    if not value:
        return 0
    try:
        return max(parse_rfc3339_unix_ns(value), 0)
    except ValueError:
        return 0
