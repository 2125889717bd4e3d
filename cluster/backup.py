"""Stream backups: STREAM.SNAPSHOT's chunked download and STREAM.RESTORE's chunked upload, paced
as nats-server paces them (``server/jetstream_api.go``).

The bytes are jetraft's own format (a nats-server backup cannot be restored here, nor the other
way round): the engine's state transfer (``engine/state_transfer.py``) for a fresh store, which
carries the stream's engine meta (config, bookkeeping, every consumer's state) and its messages,
each chunk with its CRC-32 and the last with the stream's digest, framed as

    MAGIC (8 bytes) | u32 header length | header JSON | (u32 length | transfer chunk)* | u32 0
    | CRC-32 of everything before (u32)

The header names the stream and says whether consumers are to be left out (``no_consumers``:
the restore drops them; the transfer carries the meta whole).

Download (``send_snapshot``): the whole archive is taken at once (the stream goes on meanwhile)
and published to the deliver subject in ``chunk_size`` pieces; every full piece carries the ack
subject ``$JS.SNAPSHOT.ACK.<stream>.<id>.<len>.<index>`` as its reply, and at most ``window_size
/ chunk_size`` pieces are unacked at a time; the short last piece goes without a reply; then an
empty message with the status header ``204`` (``408 No Interest`` when nobody listens, ``408 No
Flow Response`` after SNAPSHOT_ACK_TIMEOUT_S without an ack).

Upload (``RestoreSession``): chunks on ``$JS.SNAPSHOT.RESTORE.<stream>.<id>`` each with a reply
subject, answered empty; an empty chunk ends the upload and is answered with the
STREAM.CREATE response of the restored stream (or a 10062 error). The transfer is applied to a
staging store as the chunks arrive; anything malformed ends the session with a 10062 error and
removes the staging store, so a bad upload leaves no stream. RESTORE_IDLE_S without a chunk
(nats-server's activity interval) ends it silently. What happens to a whole upload is the
authority's (``RestoreUploads``' finisher): a single server hosts the staging store as the
stream; a cluster's meta leader creates the stream's group and seeds it (``cluster/raft_log.py``).

Must never: leave a half-restored stream, or accept bytes whose checksums do not hold.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cluster.batching import new_event_id
from cluster.router import Router, Subscription
from engine.checksum import crc32
from engine.state_transfer import CatchupRequest, TransferApplier, TransferError, plan_transfer
from engine.store import MessageStore
from engine.stream import Stream
from protocol import api_json, gojson
from protocol import errors as E
from protocol.errors import ApiError
from protocol.models import StreamConfig, StreamSnapshotRequest

log = logging.getLogger("jetraft.backup")

MAGIC: Final = b"JRSNAP\x00\x01"
FORMAT_VERSION: Final = 1
# nats-server's defaults and clamps (jetstream_api.go streamSnapshot)
DEFAULT_CHUNK_SIZE: Final = 128 * 1024
DEFAULT_WINDOW_SIZE: Final = 8 * 1024 * 1024
CHUNK_SIZE_RANGE: Final = (1024, 1024 * 1024)
WINDOW_SIZE_RANGE: Final = (1024, 32 * 1024 * 1024)
SNAPSHOT_ACK_TIMEOUT_S: Final = 5.0
SNAPSHOT_INTEREST_WAIT_S: Final = 2.0
RESTORE_IDLE_S: Final = 5.0  # nats-server's activityInterval
RESTORES_IN_PROGRESS_MAX: Final = 8  # uploads from the network at once (each a staging store)
# an upload from the network never fills the disk: it must leave this much free
RESTORE_DISK_RESERVE_BYTES: Final = 256 * 1024 * 1024
# One frame of the archive: a transfer chunk (1 MiB of records, or one larger message).
FRAME_BYTES_MAX: Final = 64 * 1024 * 1024
_U32 = struct.Struct(">I")
_POLL_S: Final = 0.05
STATUS_EOF: Final = b"NATS/1.0 204\r\n\r\n"
STATUS_NO_INTEREST: Final = b"NATS/1.0 408 No Interest\r\n\r\n"
STATUS_NO_FLOW: Final = b"NATS/1.0 408 No Flow Response\r\n\r\n"


class ArchiveError(ValueError):
    """The uploaded bytes are not a whole, intact jetraft snapshot of the stream."""


# ====================================================================== the archive


def encode_archive(stream: Stream, no_consumers: bool) -> bytes:
    """The whole snapshot of ``stream`` as it is now."""
    header = json.dumps(
        {"version": FORMAT_VERSION, "stream": stream.config.name, "no_consumers": no_consumers}
    ).encode()
    parts = [MAGIC, _U32.pack(len(header)), header]
    for chunk in plan_transfer(stream, CatchupRequest.fresh()):
        parts += (_U32.pack(len(chunk)), chunk)
    parts.append(_U32.pack(0))
    raw = b"".join(parts)
    return raw + _U32.pack(crc32(raw))


class ArchiveReader:
    """Applies an archive fed in arbitrary pieces to an empty ``store``; ``finish`` checks the
    end and returns the restored stream."""

    def __init__(self, store: MessageStore, stream_name: str) -> None:
        self._applier = TransferApplier(store, CatchupRequest.fresh())
        self._store = store
        self._name = stream_name
        self._buf = bytearray()
        self._crc = 0
        self._header: dict[str, Any] | None = None
        self._ended = False  # the zero-length frame arrived

    def feed(self, data: bytes) -> None:
        self._buf += data
        try:
            self._drain()
        except TransferError as exc:
            raise ArchiveError(str(exc)) from None

    def _take(self, n: int) -> bytes | None:
        if len(self._buf) < n:
            return None
        out = bytes(self._buf[:n])
        del self._buf[:n]
        self._crc = crc32(out, self._crc)
        return out

    def _drain(self) -> None:
        while not self._ended:
            if self._header is None and self._crc == 0 and len(self._buf) >= len(MAGIC):
                if self._take(len(MAGIC)) != MAGIC:
                    raise ArchiveError("not a jetraft stream snapshot")
            if len(self._buf) < _U32.size:
                return
            (n,) = _U32.unpack_from(self._buf)
            if n > FRAME_BYTES_MAX:
                raise ArchiveError(f"frame of {n} bytes is too large")
            if len(self._buf) < _U32.size + n:
                return
            self._take(_U32.size)
            frame = self._take(n) or b""
            if self._header is None:
                self._header = _decode_header(frame, self._name)
            elif n == 0:
                self._ended = True
            elif self._applier.done:
                raise ArchiveError("data after the end of the transfer")
            else:
                self._applier.feed(frame)
        if len(self._buf) > _U32.size:
            raise ArchiveError("data after the end of the snapshot")

    def finish(self) -> Stream:
        if not self._ended or len(self._buf) != _U32.size:
            raise ArchiveError("the snapshot is incomplete")
        (crc,) = _U32.unpack_from(self._buf)
        if crc != self._crc:
            raise ArchiveError("snapshot checksum mismatch")
        if not self._applier.done:
            raise ArchiveError("the snapshot's transfer is incomplete")
        stream = self._applier.stream
        if stream.config.name != self._name:
            raise ArchiveError(f"the snapshot is of stream {stream.config.name!r}")
        if self._header is not None and self._header["no_consumers"]:
            stream.drop_consumers()
        return stream


def _decode_header(frame: bytes, name: str) -> dict[str, Any]:
    try:
        doc = json.loads(frame)
    except ValueError:
        raise ArchiveError("bad snapshot header") from None
    if (
        type(doc) is not dict
        or doc.get("version") != FORMAT_VERSION
        or type(doc.get("no_consumers")) is not bool
        or type(doc.get("stream")) is not str
    ):
        raise ArchiveError("bad snapshot header")
    if doc["stream"] != name:
        raise ArchiveError(f"the snapshot is of stream {doc['stream']!r}")
    return doc


# ====================================================================== download


@dataclass(frozen=True, slots=True)
class Pacing:
    chunk_size: int
    window: int  # chunks unacked at most

    @classmethod
    def of(cls, req: StreamSnapshotRequest) -> Pacing:
        lo, hi = CHUNK_SIZE_RANGE
        chunk = min(max(lo, req.chunk_size or DEFAULT_CHUNK_SIZE), hi)
        lo, hi = WINDOW_SIZE_RANGE
        wnd = max(min(max(lo, req.window_size or DEFAULT_WINDOW_SIZE), hi), chunk)
        return cls(chunk, wnd // chunk)


async def send_snapshot(
    router: Router, stream: str, deliver: str, archive: bytes, pacing: Pacing
) -> None:
    """Publish ``archive`` to ``deliver``, paced by the receiver's acks."""
    waited = 0.0
    while not router.sublist.match(deliver).plain and waited < SNAPSHOT_INTEREST_WAIT_S:
        await asyncio.sleep(_POLL_S)
        waited += _POLL_S
    slots = asyncio.Semaphore(pacing.window)
    ack_subject = f"$JS.SNAPSHOT.ACK.{stream}.{new_event_id()}"
    ack_sub = router.subscribe_internal(ack_subject + ".>", lambda *_: slots.release())
    status = STATUS_EOF
    try:
        size = pacing.chunk_size
        for index, pos in enumerate(range(0, len(archive), size), start=1):
            try:
                await asyncio.wait_for(slots.acquire(), SNAPSHOT_ACK_TIMEOUT_S)
            except TimeoutError:
                status = STATUS_NO_FLOW
                break
            chunk = archive[pos : pos + size]
            reply = f"{ack_subject}.{len(chunk)}.{index}" if len(chunk) == size else None
            if router.publish(deliver, reply, None, chunk) == 0:
                status = STATUS_NO_INTEREST
                break
    finally:
        router.remove(ack_sub)
    router.publish(deliver, None, status, b"")


# ====================================================================== upload

# finish(stream) hosts the restored stream and returns its STREAM.CREATE response
Finisher = Callable[[Stream], Awaitable[dict[str, Any]]]
# the authority's part: (staging dir, staging store, restored stream) -> STREAM.CREATE response;
# it owns the staging store once it returns, and leaves it to the session when it raises
Adopter = Callable[[Path, MessageStore, Stream], Awaitable[dict[str, Any]]]


class RestoreUploads:
    """This node's uploads in progress, at most RESTORES_IN_PROGRESS_MAX, each into a staging
    store of its own under ``root`` (emptied at start: uploads a restart cut short)."""

    def __init__(
        self, router: Router, root: Path, open_store: Callable[[StreamConfig, Path], MessageStore]
    ) -> None:
        self._router = router
        self._root = root
        self._open_store = open_store
        self._sessions: list[RestoreSession] = []

    def clear(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)

    def begin(self, cfg: StreamConfig, adopt: Adopter) -> RestoreSession:
        self._sessions = [r for r in self._sessions if r.active]
        if len(self._sessions) >= RESTORES_IN_PROGRESS_MAX:
            raise ApiError(
                E.STREAM_RESTORE, err=f"{RESTORES_IN_PROGRESS_MAX} restores are already in progress"
            )
        staging = self._root / new_event_id()
        staging.mkdir(parents=True)
        store = self._open_store(cfg, staging)

        async def finish(restored: Stream) -> dict[str, Any]:
            return await adopt(staging, store, restored)

        session = RestoreSession(self._router, cfg.name, staging, store, finish)
        self._sessions.append(session)
        return session


class RestoreSession:
    """One upload into a staging store under ``staging``; ``finish`` adopts the result."""

    def __init__(
        self,
        router: Router,
        stream: str,
        staging: Path,
        store: MessageStore,
        finish: Finisher,
    ) -> None:
        self.router = router
        self.stream = stream
        self.subject = f"$JS.SNAPSHOT.RESTORE.{stream}.{new_event_id()}"
        self._staging = staging
        self._store = store
        self._finish = finish
        self._reader = ArchiveReader(store, stream)
        self._sub: Subscription | None = router.subscribe_internal(self.subject, self._on_chunk)
        loop = asyncio.get_running_loop()
        self._idle = loop.call_later(RESTORE_IDLE_S, self._stalled)
        self._finishing: asyncio.Task[None] | None = None
        self.total = 0

    def _on_chunk(self, _subject: str, reply: str | None, _hdr: bytes | None, data: bytes) -> None:
        if self._sub is None:
            return
        if not reply:
            log.warning("restore of stream %s: a chunk without a reply subject", self.stream)
            self._abort()
            return
        self._idle.cancel()
        if data:
            self.total += len(data)
            if self._disk_free() - len(data) < RESTORE_DISK_RESERVE_BYTES:
                self._fail(reply, "insufficient storage resources available")
                return
            try:
                self._reader.feed(data)
            except ArchiveError as exc:
                self._fail(reply, str(exc))
                return
            self._idle = asyncio.get_running_loop().call_later(RESTORE_IDLE_S, self._stalled)
            self.router.publish(reply, None, None, b"")
            return
        try:
            restored = self._reader.finish()
        except ArchiveError as exc:
            self._fail(reply, str(exc))
            return
        self._close_sub()
        self._finishing = asyncio.get_running_loop().create_task(self._complete(reply, restored))

    async def _complete(self, reply: str, restored: Stream) -> None:
        try:
            body = await self._finish(restored)
        except ApiError as err:
            log.warning("restore of stream %s failed: %s", self.stream, err)
            self._abort()
            self._reply(reply, api_json.error_response(api_json.STREAM_CREATE_RESPONSE, err))
            return
        except Exception as exc:
            log.exception("restore of stream %s failed", self.stream)
            self._fail(reply, f"restore failed: {exc}")
            return
        log.info("restored stream %s from %d bytes", self.stream, self.total)
        self._reply(reply, body)

    @property
    def active(self) -> bool:
        """Still taking chunks or finishing (not done, failed or dropped as idle)."""
        return self._sub is not None or (self._finishing is not None and not self._finishing.done())

    def _disk_free(self) -> int:
        try:
            return shutil.disk_usage(self._staging).free
        except OSError:
            return 0

    def _reply(self, reply: str, body: dict[str, Any]) -> None:
        self.router.publish(reply, None, None, gojson.encode(body))

    def _fail(self, reply: str, why: str) -> None:
        log.warning("restore of stream %s failed: %s", self.stream, why)
        self._abort()
        err = ApiError(E.STREAM_RESTORE, err=why)
        self._reply(reply, api_json.error_response(api_json.STREAM_CREATE_RESPONSE, err))

    def _stalled(self) -> None:
        log.warning("restore for stream %s is stalled", self.stream)
        self._abort()

    def _close_sub(self) -> None:
        self._idle.cancel()
        if self._sub is not None:
            self.router.remove(self._sub)
            self._sub = None

    def _abort(self) -> None:
        """Drop the staging store: a failed upload leaves nothing behind."""
        self._close_sub()
        self._store.close()
        shutil.rmtree(self._staging, ignore_errors=True)
