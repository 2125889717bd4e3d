"""State transfer: bring a lagging replica's stream up to the leader's state, sending only what
the replica lacks.

The Raft log of a stream is compacted with tiny snapshots ("applied up to index I"), because the
engine's store persists itself. A follower that fell behind the compaction point cannot replay the
log; it sends a ``CatchupRequest`` (its first_seq, last_seq, applied index, and the live count of
each of at most CATCHUP_BUCKETS_MAX buckets of its range) and the leader answers with the chunks
of ``plan_transfer``, which a ``TransferApplier`` on the follower applies to its ``MessageStore``:

* HEADER: the request's checksum, the leader's applied index, first_seq and last_seq, and its
  engine meta blob (``Stream.meta_blob``: config, last_seq across purges, last msg id, times);
* REMOVE (zero or more): the runs of sequences in the follower's range, at or above the leader's
  first_seq, that the leader no longer holds, searched only in buckets whose live counts differ;
  everything below the leader's first_seq is dropped with one ``remove_through``;
* MSGS (zero or more): the leader's stored messages with seq > req.last_seq, as file-store MSG
  records (``engine/records.py``), at most ``chunk_bytes_max`` bytes per chunk (a single larger
  message travels alone);
* END: the number of chunks and messages sent, and the leader's ``digest()``.

Why this is enough: messages are only ever added at the tail, with increasing sequences, and both
replicas applied a prefix of one log. So every message the leader holds at or below the
follower's last_seq, the follower holds too; a sequence there that the follower holds and the
leader does not was removed by a committed entry (delete, purge, expiry, limit, rollup) that the
follower has not applied. What the follower lacks is therefore exactly: those removals, the
messages above its last_seq, and the meta. And since the leader's live set within the range is a
subset of the follower's, a bucket where both count the same messages holds the same messages:
only buckets whose counts differ can hold removals. The follower then reopens its stream from the
store exactly as a restart does (``Stream.open``) and checks its digest against the leader's.

Cost. The leader never walks its stream: it compares the bucket counts with its own (two
O(log n) lookups each, ``Stream.num_pending``), finds the missing runs in the differing buckets
by bisecting live counts (O(runs * log(bucket) * log n)), and reads only the messages it sends
(``Stream.load_next``). Bytes sent are O(meta + 16 per run + the missing messages); the request is
at most 8 KiB. Neither grows with the leader's total size. What is not proportional to what the
follower lacks: in a bucket whose count differs, every run of holes is sent, including the holes
the follower already has (a stream with holes everywhere, e.g. a max_msgs_per_subject=1 stream,
sends about holes / CATCHUP_BUCKETS_MAX runs per differing bucket), and the follower removes each
seq of a run one by one (cheap for absent ones). Runs lie within the follower's range, which only
ever holds sequences once assigned to messages: bounded by its own history. Reopening the stream
afterwards reads the follower's whole store once, as a restart does.

Safety on the follower. Before touching anything it replaces the store's meta with a transfer
marker that ``Stream`` refuses to open (``StreamMetaError``); a transfer cut short (a crash, a bad
chunk) thus never leaves a store that opens as a plausible but wrong state. The marker holds the
request that resumes the transfer (``resume_request``), kept up to date chunk by chunk (a cut in
the middle of a message chunk is covered by ``partial_through``). Only after the END chunk is the
leader's meta written; if the reopened stream's digest differs, the marker is put back and
``TransferError`` raised. The applier flushes after each chunk (bounding the store's buffer);
fsync is the caller's, as for ``apply``.

Known gap, as for a restart: the dedupe window is rebuilt from the stored messages, so msg ids of
messages removed within the window are forgotten.

Must never: do I/O other than through the ``MessageStore`` it is given, read clocks, use
randomness, accept a chunk it cannot fully account for (anything malformed, out of order or
inconsistent raises ``TransferError``), or walk the leader's whole stream.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from engine import records
from engine.checksum import crc32
from engine.digest import DIGEST_BYTES
from engine.limits import SEQ_MAX
from engine.store import MessageStore, StoredMsg
from engine.stream import Stream, StreamMetaError

TRANSFER_FORMAT_VERSION: Final = 1

# Target size of one REMOVE or MSGS chunk, in bytes (a single larger message travels alone).
TRANSFER_CHUNK_BYTES_MAX: Final = 1024 * 1024
# The smallest chunk_bytes_max plan_transfer accepts: room for the chunk framing and one run.
TRANSFER_CHUNK_BYTES_MIN: Final = 64
# A request summarises the follower's range [first_seq, last_seq] by the live count of each of
# at most this many equal buckets of at least CATCHUP_BUCKET_SEQS_MIN seqs (8 KiB at most).
CATCHUP_BUCKETS_MAX: Final = 1024
CATCHUP_BUCKET_SEQS_MIN: Final = 64

KIND_REQUEST: Final = 0
KIND_HEADER: Final = 1
KIND_REMOVE: Final = 2
KIND_MSGS: Final = 3
KIND_END: Final = 4

# The follower's meta while a transfer is under way: Stream refuses it (version 0xFF is unknown).
# The encoded request that resumes the transfer follows it.
TRANSFER_MARKER: Final = b"\xffjetraft-state-transfer\x00"

# Every chunk: version, kind, chunk number, leader applied index | body | crc32 of all before.
_CHUNK_HEAD = struct.Struct(">BBIQ")
_CRC = struct.Struct(">I")
# version, KIND_REQUEST, first_seq, last_seq, applied_index, partial_through, bucket count;
# then a u64 live count per bucket
_REQUEST = struct.Struct(">BBQQQQI")
_U64 = struct.Struct(">Q")
_HEADER = struct.Struct(">IQQI")  # crc32 of the encoded request, leader first/last, meta length
_COUNT = struct.Struct(">I")
_RUN = struct.Struct(">QQ")
_END = struct.Struct(">IQ")  # chunks before END, messages sent; then the digest
_CHUNK_OVERHEAD_BYTES: Final = _CHUNK_HEAD.size + _CRC.size


class TransferError(ValueError):
    """A state transfer cannot proceed: a malformed, tampered, out-of-order or inconsistent
    chunk or request, a leader that moved during the transfer, or a digest mismatch."""


@dataclass(frozen=True, slots=True)
class CatchupRequest:
    """What a follower tells the leader about its stream: ``first_seq`` as ``Stream.first_seq``
    reports it (the first live seq, or last_seq + 1 when empty), ``last_seq`` and
    ``applied_index``. ``live_counts`` (optional) holds the follower's number of live messages
    in each bucket of ``buckets(first_seq, last_seq)``: the leader then looks for removals only in
    buckets where its own count differs (within the follower's range the leader's live set is a
    subset of the follower's, so equal counts mean equal sets). ``partial_through`` is set only
    when resuming a transfer that was cut in the middle of a chunk: the store may then hold some
    of the leader's messages in (last_seq, partial_through] (0: none)."""

    first_seq: int
    last_seq: int
    applied_index: int
    partial_through: int = 0
    live_counts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("first_seq", "last_seq", "applied_index", "partial_through"):
            value = getattr(self, name)
            if not 0 <= value <= SEQ_MAX:
                raise TransferError(f"catchup request {name} {value} out of range")
        if self.first_seq > self.last_seq + 1:
            raise TransferError(
                f"catchup request first_seq {self.first_seq} > last_seq {self.last_seq} + 1"
            )
        if self.live_counts:
            ranges = buckets(self.first_seq, self.last_seq)
            if len(self.live_counts) != len(ranges):
                raise TransferError(
                    f"catchup request has {len(self.live_counts)} live counts for "
                    f"{len(ranges)} buckets"
                )
            for (lo, hi), count in zip(ranges, self.live_counts, strict=True):
                if not 0 <= count <= hi - lo + 1:
                    raise TransferError(f"catchup request live count {count} for [{lo}, {hi}]")

    @classmethod
    def of(cls, stream: Stream) -> CatchupRequest:
        """The request of a follower whose stream is ``stream`` (O(buckets * log n))."""
        first, last = stream.first_seq, stream.last_seq
        pending = stream.num_pending
        counts = tuple(pending(lo) - pending(hi + 1) for lo, hi in buckets(first, last))
        return cls(first, last, stream.applied_index, live_counts=counts)

    @classmethod
    def fresh(cls) -> CatchupRequest:
        """The request of a node with an empty store (no stream yet)."""
        return cls(1, 0, 0)

    @property
    def held_through(self) -> int:
        """The highest seq the follower's store may hold."""
        return max(self.last_seq, self.partial_through)

    def encode(self) -> bytes:
        raw = b"".join(
            (
                _REQUEST.pack(
                    TRANSFER_FORMAT_VERSION,
                    KIND_REQUEST,
                    self.first_seq,
                    self.last_seq,
                    self.applied_index,
                    self.partial_through,
                    len(self.live_counts),
                ),
                *(_U64.pack(count) for count in self.live_counts),
            )
        )
        return raw + _CRC.pack(crc32(raw))

    @classmethod
    def decode(cls, raw: bytes | bytearray | memoryview) -> CatchupRequest:
        raw = bytes(raw)
        if len(raw) < _REQUEST.size + _CRC.size:
            raise TransferError(f"catchup request of {len(raw)} bytes is too short")
        end = len(raw) - _CRC.size
        (crc,) = _CRC.unpack_from(raw, end)
        if crc32(raw[:end]) != crc:
            raise TransferError("catchup request checksum mismatch")
        version, kind, first_seq, last_seq, applied, partial, n = _REQUEST.unpack_from(raw)
        if version != TRANSFER_FORMAT_VERSION or kind != KIND_REQUEST:
            raise TransferError(f"not a catchup request (version {version}, kind {kind})")
        if end != _REQUEST.size + n * _U64.size:
            raise TransferError(f"catchup request length does not match its {n} live counts")
        counts = tuple(_U64.unpack_from(raw, _REQUEST.size + i * _U64.size)[0] for i in range(n))
        return cls(first_seq, last_seq, applied, partial, counts)


def buckets(first_seq: int, last_seq: int) -> list[tuple[int, int]]:
    """The buckets [lo, hi] that a request's ``live_counts`` refer to: [first_seq, last_seq] cut
    in equal parts (the last one shorter) of at least CATCHUP_BUCKET_SEQS_MIN seqs, at most
    CATCHUP_BUCKETS_MAX of them."""
    if first_seq > last_seq:
        return []
    span = last_seq - first_seq + 1
    width = max(CATCHUP_BUCKET_SEQS_MIN, -(-span // CATCHUP_BUCKETS_MAX))
    return [(lo, min(lo + width - 1, last_seq)) for lo in range(first_seq, last_seq + 1, width)]


def resume_request(store: MessageStore) -> CatchupRequest | None:
    """The request that resumes a transfer into ``store`` that was cut short (its meta is still
    the transfer marker), or None when no transfer is pending there."""
    meta = store.get_meta()
    if meta is None or not meta.startswith(TRANSFER_MARKER):
        return None
    return CatchupRequest.decode(meta[len(TRANSFER_MARKER) :])


# ====================================================================== leader side


def plan_transfer(
    leader: Stream, req: CatchupRequest, chunk_bytes_max: int = TRANSFER_CHUNK_BYTES_MAX
) -> Iterator[bytes]:
    """The encoded chunks that bring a follower that sent ``req`` to ``leader``'s state.

    Lazy: the leader must apply no entry until the last chunk is taken (``TransferError`` if it
    does); take them all at once (``list(...)``) to send them while the leader goes on. A follower
    whose applied index is beyond the leader's gets only the HEADER and END chunks (its state
    cannot be rolled back; it stays as it is)."""
    if chunk_bytes_max < TRANSFER_CHUNK_BYTES_MIN:
        raise ValueError(f"chunk_bytes_max {chunk_bytes_max} < {TRANSFER_CHUNK_BYTES_MIN}")
    applied = leader.applied_index
    leader_first, leader_last = leader.first_seq, leader.last_seq
    chunk_no = 0

    def chunk(kind: int, body: bytes) -> bytes:
        nonlocal chunk_no
        if leader.applied_index != applied:
            raise TransferError(
                f"leader applied index moved from {applied} to {leader.applied_index} "
                "during the transfer"
            )
        raw = _CHUNK_HEAD.pack(TRANSFER_FORMAT_VERSION, kind, chunk_no, applied) + body
        chunk_no += 1
        return raw + _CRC.pack(crc32(raw))

    meta = leader.meta_blob()
    head = _HEADER.pack(crc32(req.encode()), leader_first, leader_last, len(meta))
    yield chunk(KIND_HEADER, head + meta)
    sent = 0
    if req.applied_index <= applied:
        runs_max = (chunk_bytes_max - _CHUNK_OVERHEAD_BYTES - _COUNT.size) // _RUN.size
        runs: list[tuple[int, int]] = []
        for run in _removal_runs(leader, req, leader_first):
            runs.append(run)
            if len(runs) == runs_max:
                yield chunk(KIND_REMOVE, _encode_runs(runs))
                runs = []
        if runs:
            yield chunk(KIND_REMOVE, _encode_runs(runs))
        for batch in _message_batches(leader, req.last_seq + 1, chunk_bytes_max):
            sent += batch[0]
            yield chunk(KIND_MSGS, _COUNT.pack(batch[0]) + batch[1])
    digest = leader.digest()
    yield chunk(KIND_END, _END.pack(chunk_no, sent) + digest)


def _removal_runs(
    leader: Stream, req: CatchupRequest, leader_first: int
) -> Iterator[tuple[int, int]]:
    """The runs of seqs the follower may hold and the leader does not, at or above the leader's
    first_seq (below it one remove_through does), ascending and separated (adjacent ones merged).
    """
    floor = max(req.first_seq, leader_first)
    segments: list[tuple[int, int]] = []
    if req.live_counts:
        pending = leader.num_pending
        for (lo, hi), count in zip(
            buckets(req.first_seq, req.last_seq), req.live_counts, strict=True
        ):
            if pending(lo) - pending(hi + 1) != count and max(lo, floor) <= hi:
                segments.append((max(lo, floor), hi))
        if req.held_through > req.last_seq:
            segments.append((max(req.last_seq + 1, floor), req.held_through))
    else:
        segments.append((floor, req.held_through))
    run: tuple[int, int] | None = None
    for lo, hi in segments:
        for a, b in _missing_runs(leader, lo, hi):
            if run is not None and run[1] == a - 1:
                run = (run[0], b)
                continue
            if run is not None:
                yield run
            run = (a, b)
    if run is not None:
        yield run


def _missing_runs(leader: Stream, lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """Maximal runs [a, b] within [lo, hi] holding no live leader message, ascending.

    Bisects the range on live counts (two O(log n) lookups each) and descends only into halves
    that are neither full nor empty: O(runs * log(hi - lo)) lookups, never a walk of the stream.
    """
    pending = leader.num_pending
    run: tuple[int, int] | None = None
    stack = [(lo, hi)] if lo <= hi else []
    while stack:
        a, b = stack.pop()
        live = pending(a) - pending(b + 1)
        if live == b - a + 1:
            continue
        if live == 0:
            if run is not None and run[1] == a - 1:
                run = (run[0], b)
            else:
                if run is not None:
                    yield run
                run = (a, b)
            continue
        mid = (a + b) // 2
        stack.append((mid + 1, b))  # the left half is popped first: runs come out ascending
        stack.append((a, mid))
    if run is not None:
        yield run


def _encode_runs(runs: list[tuple[int, int]]) -> bytes:
    return _COUNT.pack(len(runs)) + b"".join(_RUN.pack(a, b) for a, b in runs)


def _message_batches(
    leader: Stream, start_seq: int, chunk_bytes_max: int
) -> Iterator[tuple[int, bytes]]:
    """The leader's stored messages from ``start_seq`` on, as MSG records packed into bodies of
    at most ``chunk_bytes_max`` chunk bytes (count, records)."""
    budget = chunk_bytes_max - _CHUNK_OVERHEAD_BYTES - _COUNT.size
    buf = bytearray()
    count = 0
    msg = leader.load_next(start_seq)
    while msg is not None:
        record = bytearray()
        _append_record(record, msg)
        if count and len(buf) + len(record) > budget:
            yield count, bytes(buf)
            buf.clear()
            count = 0
        buf += record
        count += 1
        msg = leader.load_next(msg.seq + 1)
    if count:
        yield count, bytes(buf)


def _append_record(buf: bytearray, msg: StoredMsg) -> None:
    try:
        records.append_sendable_msg(buf, msg)
    except ValueError as exc:
        raise TransferError(str(exc)) from None


# ====================================================================== follower side


@dataclass(frozen=True, slots=True)
class _Header:
    leader_applied: int
    leader_first: int
    leader_last: int
    meta: bytes


class TransferApplier:
    """Applies the chunks of one transfer, in order, to the follower's ``store``.

    ``request`` is the request the follower sent (the header must echo it): made with
    ``CatchupRequest.of`` the follower's stream on ``store``, or ``CatchupRequest.fresh`` for an
    empty store, or, when ``store`` holds an interrupted transfer, ``resume_request(store)`` (any
    other request is refused then). Feed every chunk to ``feed``; it returns True after the END
    chunk, when ``stream`` is the follower's stream reopened from the store, with the leader's
    digest. Any problem raises ``TransferError`` and the applier takes no more chunks; the store
    then opens as a stream only if nothing was changed yet (``resume_request`` tells). After a
    digest mismatch resuming cannot help: the store must be emptied and filled by a transfer for
    ``CatchupRequest.fresh()``. A ``Stream`` the follower had on ``store`` before is stale
    afterwards and must be dropped."""

    def __init__(self, store: MessageStore, request: CatchupRequest) -> None:
        resume = resume_request(store)
        if resume is not None and resume != request:
            raise TransferError(
                "the store holds an interrupted transfer: resume it with resume_request(store)"
            )
        self._store = store
        self._request = request
        self._header: _Header | None = None
        self._next_chunk = 0
        self._last_appended = request.last_seq
        # Messages in (last_appended, maybe_through] may already be stored by an interrupted
        # run of this transfer (cut in the middle of a chunk); they are skipped, not appended.
        self._maybe_through = request.held_through
        self._remove_floor = 0  # removal runs must start at or above this (ascending, apart)
        self._appended = 0
        self._stream: Stream | None = None
        self._failed = False
        self._skipped = False

    @property
    def done(self) -> bool:
        return self._stream is not None

    @property
    def skipped(self) -> bool:
        """The follower was ahead of the leader: nothing was changed."""
        return self._skipped

    @property
    def messages_appended(self) -> int:
        return self._appended

    @property
    def stream(self) -> Stream:
        if self._stream is None:
            raise TransferError("the transfer is not complete")
        return self._stream

    def feed(self, chunk: bytes | bytearray | memoryview) -> bool:
        """Apply the next chunk; True when the transfer is complete and verified."""
        if self._failed:
            raise TransferError("the transfer already failed")
        if self._stream is not None:
            raise TransferError("the transfer is already complete")
        try:
            self._feed(bytes(chunk))
        except TransferError:
            self._failed = True
            raise
        return self._stream is not None

    def _feed(self, chunk: bytes) -> None:
        kind, chunk_no, leader_applied, body = _open_chunk(chunk)
        if chunk_no != self._next_chunk:
            raise TransferError(f"chunk {chunk_no} out of order: expected {self._next_chunk}")
        self._next_chunk += 1
        header = self._header
        if header is None:
            if kind != KIND_HEADER:
                raise TransferError(f"first chunk is of kind {kind}, not a header")
            self._on_header(leader_applied, body)
            return
        if leader_applied != header.leader_applied:
            raise TransferError(
                f"chunk of leader index {leader_applied} in a transfer at {header.leader_applied}"
            )
        if kind in (KIND_REMOVE, KIND_MSGS) and self._skipped:
            raise TransferError("data chunk for a follower that is ahead of the leader")
        if kind == KIND_REMOVE:
            self._on_remove(header, body)
        elif kind == KIND_MSGS:
            self._on_msgs(header, body)
        elif kind == KIND_END:
            self._on_end(header, chunk_no, body)
        else:
            raise TransferError(f"unexpected chunk kind {kind}")
        self._store.flush()

    def _on_header(self, leader_applied: int, body: bytes) -> None:
        if len(body) < _HEADER.size:
            raise TransferError("header chunk too short")
        req_crc, leader_first, leader_last, meta_len = _HEADER.unpack_from(body)
        if len(body) != _HEADER.size + meta_len:
            raise TransferError("header chunk length does not match its meta length")
        req = self._request
        if req_crc != crc32(req.encode()):
            raise TransferError("header answers another request than this follower's")
        if leader_first > leader_last + 1:
            raise TransferError(f"leader first_seq {leader_first} > last_seq {leader_last} + 1")
        header = _Header(leader_applied, leader_first, leader_last, body[_HEADER.size :])
        self._header = header
        if req.applied_index > leader_applied:
            self._skipped = True
            return
        self._mark()
        if leader_first > req.first_seq:
            self._store.remove_through(leader_first - 1)
        self._store.flush()

    def _on_remove(self, header: _Header, body: bytes) -> None:
        if self._appended:
            raise TransferError("removal chunk after message chunks")
        if len(body) < _COUNT.size:
            raise TransferError("removal chunk too short")
        (count,) = _COUNT.unpack_from(body)
        if len(body) != _COUNT.size + count * _RUN.size or count == 0:
            raise TransferError(f"removal chunk length does not match its {count} runs")
        lo = max(self._request.first_seq, header.leader_first, self._remove_floor)
        runs = [_RUN.unpack_from(body, _COUNT.size + i * _RUN.size) for i in range(count)]
        for a, b in runs:  # check them all before removing anything
            if not lo <= a <= b <= self._request.held_through:
                raise TransferError(
                    f"removal run [{a}, {b}] outside [{lo}, {self._request.held_through}]"
                )
            lo = b + 2  # ascending and separated: adjacent runs would have been merged
        remove = self._store.remove
        for a, b in runs:
            for seq in range(a, b + 1):
                # Erased: the leader may have erased it (MSG.DELETE), and a purge loses nothing.
                remove(seq, erase=True)
        self._remove_floor = lo

    def _on_msgs(self, header: _Header, body: bytes) -> None:
        if len(body) < _COUNT.size:
            raise TransferError("message chunk too short")
        (count,) = _COUNT.unpack_from(body)
        msgs = _decode_records(body[_COUNT.size :])
        if len(msgs) != count or count == 0:
            raise TransferError(f"message chunk holds {len(msgs)} records, says {count}")
        prev = self._last_appended
        for msg in msgs:
            if not prev < msg.seq <= header.leader_last:
                raise TransferError(f"message seq {msg.seq} not in ({prev}, {header.leader_last}]")
            prev = msg.seq
        store = self._store
        maybe_through = self._maybe_through
        # Marked first: a cut in the middle of the chunk leaves a resumable store.
        self._maybe_through = max(maybe_through, prev)
        self._mark()
        for msg in msgs:
            if msg.seq <= maybe_through:
                stored = store.load(msg.seq)
                if stored is not None:
                    if stored != msg:
                        raise TransferError(f"seq {msg.seq} is stored with other content")
                    continue
            store.append(msg)
        self._last_appended = prev
        self._appended += count
        self._mark()

    def _on_end(self, header: _Header, chunk_no: int, body: bytes) -> None:
        if len(body) != _END.size + DIGEST_BYTES:
            raise TransferError("end chunk has the wrong length")
        chunks_before, sent = _END.unpack_from(body)
        digest = body[_END.size :]
        if chunks_before != chunk_no:
            raise TransferError(f"end chunk counts {chunks_before} chunks, {chunk_no} arrived")
        if sent != self._appended:
            raise TransferError(f"end chunk counts {sent} messages, {self._appended} arrived")
        if self._skipped:
            self._stream = self._open()
            return
        self._store.set_meta(header.meta)
        try:
            stream = self._open()
        except TransferError:
            self._mark()
            raise
        if stream.digest() != digest:
            self._mark()
            raise TransferError(
                f"digest mismatch after the transfer at leader index {header.leader_applied}"
            )
        self._stream = stream

    def _open(self) -> Stream:
        try:
            return Stream.open(self._store)
        except StreamMetaError as exc:
            raise TransferError(f"the stream does not open after the transfer: {exc}") from None

    def _mark(self) -> None:
        """Record in the store's meta that a transfer is under way, and how to resume it."""
        req = self._request
        last = max(req.last_seq, self._last_appended)
        partial = self._maybe_through if self._maybe_through > last else 0
        resume = CatchupRequest(req.first_seq, last, 0, partial)
        self._store.set_meta(TRANSFER_MARKER + resume.encode())


def _open_chunk(chunk: bytes) -> tuple[int, int, int, bytes]:
    """(kind, chunk number, leader applied index, body) of a chunk whose checksum holds."""
    if len(chunk) < _CHUNK_OVERHEAD_BYTES:
        raise TransferError(f"chunk of {len(chunk)} bytes is too short")
    end = len(chunk) - _CRC.size
    (crc,) = _CRC.unpack_from(chunk, end)
    if crc32(memoryview(chunk)[:end]) != crc:
        raise TransferError("chunk checksum mismatch")
    version, kind, chunk_no, leader_applied = _CHUNK_HEAD.unpack_from(chunk)
    if version != TRANSFER_FORMAT_VERSION:
        raise TransferError(f"unknown transfer format version {version}")
    return kind, chunk_no, leader_applied, chunk[_CHUNK_HEAD.size : end]


def _decode_records(buf: bytes) -> list[StoredMsg]:
    try:
        return records.decode_msg_records(buf)
    except ValueError as exc:
        raise TransferError(str(exc)) from None
