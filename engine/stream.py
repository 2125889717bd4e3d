"""One stream's deterministic state machine: ``state_n = apply(state_{n-1}, entry_n)``.

Owns everything that must be identical on every replica: sequence numbers, timestamps (taken from
the entry, never from a clock: a stored message gets max(entry ts, last ts) so time never goes
backwards), the publish-time header checks in nats-server's exact order and wording, the dedupe
window, discard-new and discard-old limits, rollups, deletes, purges, MaxAge expiry, config
updates, per-message TTL expiry with subject delete markers (``engine/ttl.py``), atomic batch
commits (their checks live in ``engine/batch.py``) and messages a mirror copies from its upstream
(``apply_mirror``: upstream seqs and times kept, no publish checks). It sits on any
``MessageStore`` (memory or file) and answers ``StreamView`` queries from ``engine/index.py``
without scanning. Engine bookkeeping that the store cannot derive (applied index, last_seq across
purges, last msg id, config) is persisted as the store's meta blob after every apply.

Reference behaviour: nats-server v2.15 ``stream.go processJetStreamMsgWithBatch``, ``purgeLocked``,
``memstore.go storeRawMsg/PurgeEx/compact/UpdateConfig`` (probed against the v2.15.1 binary).

Must never: change state outside ``apply``, read a clock, use randomness, or let an entry from the
log raise anything but an ``AssertionError`` on a broken internal invariant.
"""

from __future__ import annotations

import heapq
import json
import struct
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice, takewhile
from typing import Final, NamedTuple

from pydantic import ValidationError

from engine import limits
from engine.batch import HDR_BATCH_COMMIT, BatchResult, CheckedMsg, check_batch_commit
from engine.consumer.consumers import ConsumerSet
from engine.consumer.results import (
    AckResult,
    CreateResult,
    DeleteResult,
    DeliverResult,
    ResetResult,
    SeqRange,
    TimeoutResult,
)
from engine.consumer.results import ApplyResult as ConsumerApplyResult
from engine.consumer.retention import removable_seqs
from engine.counter import check_increment, counter_payload, incr_of, total_of
from engine.digest import (
    MessageSum,
    config_hash,
    content_fingerprint,
    message_hash,
    messages_digest,
    state_digest,
)
from engine.entries import (
    CONSUMER_OPS,
    BatchCommitEntry,
    ConsumerOp,
    DeleteMsgEntry,
    ExpireEntry,
    InboundMsg,
    LogEntry,
    MirroredMsg,
    MirrorEntry,
    PublishEntry,
    PurgeEntry,
    SourceEntry,
    UpdateConfigEntry,
)
from engine.index import MsgMeta, StreamIndex, is_match_all
from engine.schedules import (
    HDR_NEXT as HDR_SCHEDULE_NEXT,
)
from engine.schedules import (
    HDR_SCHEDULER,
    NEXT_PURGE,
    Schedules,
    fired_message,
    fired_next_ns,
    is_scheduled,
)
from engine.schedules import HDR_SOURCE as HDR_SCHEDULE_SOURCE
from engine.schedules import (
    check_publish as check_schedule_headers,
)
from engine.sources import HDR_COUNTER_SOURCES, SourceSpec, sourced_counter
from engine.store import MessageStore, StoredMsg, new_stored
from engine.ttl import (
    HDR_MSG_TTL_BYTES,
    TtlIndex,
    is_subject_delete_marker,
    marker_header,
    marker_ttl_s,
    parse_message_ttl,
    raise_to_marker_floor,
)
from protocol import errors
from protocol.errors import ApiError
from protocol.goconv import go_lower, parse_int64_as_uint64
from protocol.gojson import go_quote
from protocol.headers import (
    append_headers,
    get_header,
    holds,
    occurrences,
    remove_header,
    set_header,
)
from protocol.models import StreamConfig
from protocol.subject_transform import SubjectTransform, seeded_pick
from protocol.subjects import is_valid_literal_subject
from protocol.timefmt import format_rfc3339nano

# Header names nats-server interprets on publish (matched case-sensitively, first occurrence).
HDR_MSG_ID: Final = "Nats-Msg-Id"
HDR_EXPECTED_STREAM: Final = "Nats-Expected-Stream"
HDR_EXPECTED_LAST_SEQ: Final = "Nats-Expected-Last-Sequence"
HDR_EXPECTED_LAST_SUBJ_SEQ: Final = "Nats-Expected-Last-Subject-Sequence"
HDR_EXPECTED_LAST_SUBJ_SEQ_SUBJ: Final = "Nats-Expected-Last-Subject-Sequence-Subject"
HDR_EXPECTED_LAST_MSG_ID: Final = "Nats-Expected-Last-Msg-Id"
HDR_ROLLUP: Final = "Nats-Rollup"
HDR_MSG_TTL: Final = "Nats-TTL"
HDR_STREAM_SOURCE: Final = "Nats-Stream-Source"
HDR_CLIENT_INFO: Final = "Nats-Request-Info"
_HDR_CLIENT_INFO_BYTES: Final = HDR_CLIENT_INFO.encode()
_HDR_NATS_PREFIX: Final = b"Nats-"
_HDR_SCHEDULE_NEXT_PURGE: Final = b"Nats-Schedule-Next: purge"
_HDR_MSG_ID_LINE: Final = b"\r\n" + HDR_MSG_ID.encode() + b":"
_HDR_EXPECTED_PREFIX: Final = b"Nats-Expected-"
_HDR_KEY_BYTES: Final = {
    key: key.encode()
    for key in (
        HDR_MSG_ID,
        HDR_EXPECTED_STREAM,
        HDR_EXPECTED_LAST_SEQ,
        HDR_EXPECTED_LAST_SUBJ_SEQ,
        HDR_EXPECTED_LAST_SUBJ_SEQ_SUBJ,
        HDR_EXPECTED_LAST_MSG_ID,
        HDR_ROLLUP,
        HDR_MSG_TTL,
        HDR_STREAM_SOURCE,
    )
}

ROLLUP_SUBJECT: Final = "sub"
ROLLUP_ALL: Final = "all"

# nats-server store errors surfaced as 10077 / 10057 descriptions.
ERR_MAX_MSGS: Final = "maximum messages exceeded"
ERR_MAX_BYTES: Final = "maximum bytes exceeded"
ERR_MAX_MSGS_PER_SUBJECT: Final = "maximum messages per subject exceeded"
ERR_MSG_TOO_LARGE: Final = "message too large"
ERR_STORE_MSG_NOT_FOUND: Final = "no message found"
ERR_STORE_EOF: Final = "stream store EOF"

META_FORMAT_VERSION: Final = 3  # 3: the sources' positions follow the consumers
META_FORMAT_VERSION_NO_SOURCES: Final = 2  # 2: the consumers' state follows the config
META_FORMAT_VERSION_NO_CONSUMERS: Final = 1
# version, applied index, last_seq, first_seq while empty, last_ts_ns, created_ns
_META_HEAD = struct.Struct(">BQQQqq")
_U32 = struct.Struct(">I")
_UNCAPPED_BYTES: Final = 1 << 64  # "no limit" for the publish hot path's size comparisons


class StreamMetaError(ValueError):
    """The store's meta blob is not one this code wrote."""


class PubResult:
    """The outcome of one message of a publish entry, in input order. A duplicate carries the
    original message's seq; an error carries seq 0. (A plain slotted class: one is made per
    published message, and compiled it is built natively, where a NamedTuple's constructor
    stays an interpreted function.)"""

    __slots__ = ("duplicate", "error", "seq", "val")

    def __init__(
        self,
        seq: int,
        duplicate: bool = False,
        error: ApiError | None = None,
        val: str | None = None,  # a counter stream's new total
    ) -> None:
        self.seq = seq
        self.duplicate = duplicate
        self.error = error
        self.val = val

    def _key(self) -> tuple[int, bool, ApiError | None, str | None]:
        return (self.seq, self.duplicate, self.error, self.val)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PubResult):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"PubResult(seq={self.seq}, duplicate={self.duplicate}, error={self.error!r}, "
            f"val={self.val!r})"
        )


@dataclass(frozen=True, slots=True)
class StreamState:
    """STREAM.INFO ``state`` (timestamps in ns; 0 is Go's zero time)."""

    messages: int
    bytes: int
    first_seq: int
    first_ts_ns: int
    last_seq: int
    last_ts_ns: int
    num_subjects: int
    num_deleted: int


class Republish(NamedTuple):
    """A stored message as RePublish sends it: to ``subject``, with the ``Nats-Stream``,
    ``Nats-Subject``, ``Nats-Sequence``, ``Nats-Time-Stamp`` and ``Nats-Last-Sequence``
    headers (and ``Nats-Msg-Size`` instead of the payload when headers only)."""

    subject: str
    hdr: bytes
    data: bytes


class _Accepted(NamedTuple):
    """A message that passed every pre-store check, as it will be stored."""

    msg: InboundMsg  # the header may have lost Nats-Request-Info
    msg_id: str
    rollup: str  # "", ROLLUP_SUBJECT or ROLLUP_ALL
    size_bytes: int  # accounting size of msg (limits.msg_size_bytes)
    total: int | None  # a counter stream's new total (msg.data holds it)


ApplyResult = (
    list[PubResult] | ApiError | int | list[int] | BatchResult | ConsumerApplyResult | None
)


def _source_positions(blob: bytes) -> dict[str, int]:
    """The meta's source positions (a JSON object of index name -> upstream seq)."""
    if not blob:
        return {}
    doc = json.loads(blob)
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and type(v) is int and v >= 0 for k, v in doc.items()
    ):
        raise ValueError("source positions are not a map of names to seqs")
    return doc


class _DecodedMeta(NamedTuple):
    config: StreamConfig
    consumers: ConsumerSet
    consumers_blob: bytes
    positions: dict[str, int]
    applied: int
    last_seq: int
    empty_first: int
    last_ts_ns: int
    created_ns: int
    msg_id: str


class Stream:
    """A stream's state machine over a ``MessageStore``; implements ``engine.view.StreamView``."""

    def __init__(self, config: StreamConfig, store: MessageStore, created_ns: int) -> None:
        """Open the stream on ``store``. ``config`` (normalized: -1 for unlimited, duplicate
        window in ns) and ``created_ns`` describe a new stream; when the store already holds
        engine meta, the persisted config (with every applied update) and creation time win."""
        self._store = store
        self._index = StreamIndex()
        self._ttl = TtlIndex(tracking=False)  # per-message TTL deadlines (engine/ttl.py)
        self._schedules = Schedules()  # message schedules (engine/schedules.py)
        self._now_ns = 0  # the time of the entry being applied (schedules reason from it)
        # Contributions of the live messages with seq <= _folded_seq (see digest.py: the rest is
        # folded in when a digest is asked for).
        self._msg_sum = MessageSum()
        self._folded_seq = 0
        self._dedupe: dict[str, tuple[int, int]] = {}  # msg id -> (seq, ts_ns)
        self._dedupe_order: deque[tuple[str, int, int]] = deque()  # (msg id, seq, ts_ns)
        self._applied_index = 0
        self._created_ns = created_ns
        self.mirror_upstream_last_seq = 0  # see apply_mirror
        # sources: the upstream seq through which each source (by index name) has been taken
        self._source_positions: dict[str, int] = {}
        self.source_upstream_last_seq: dict[str, int] = {}  # their lag, as the log told it
        self.mirror_covered_seq = 0
        self._last_seq = config.first_seq - 1 if config.first_seq > 0 else 0
        self._empty_first_seq = config.first_seq  # first_seq reported while empty (0 when new)
        self._last_ts_ns = 0
        self._last_msg_id = ""
        # the stream's consumers: their entries share this log (engine/consumer/)
        self.consumers = ConsumerSet()
        self._consumers_blob = b""  # their snapshot as the meta carries it ("" while none ever)
        # RePublish: what the stored messages are to be published as, until the host takes them
        self._republished: list[Republish] = []
        meta = store.get_meta()
        if meta is not None:
            config = self._restore_meta(meta)
        self._set_config(config)
        self._ttl.tracking = self._config.allow_msg_ttl
        self._rebuild_from_store(has_meta=meta is not None)

    @classmethod
    def open(cls, store: MessageStore) -> Stream:
        """The stream a restart finds on ``store``, which must hold engine meta (else
        ``StreamMetaError``): config, creation time and bookkeeping from the meta, indexes and
        dedupe window rebuilt from the stored messages (used by ``engine/state_transfer.py``)."""
        meta = store.get_meta()
        if meta is None:
            raise StreamMetaError("the store holds no stream meta")
        # The constructor wants a config and creation time although the meta overrides them.
        decoded = _decode_meta(meta)
        return cls(decoded.config, store, decoded.created_ns)

    # ================================================================== apply

    @property
    def applied_index(self) -> int:
        return self._applied_index

    def apply(self, index: int, entry: LogEntry) -> ApplyResult:
        """Apply one committed log entry; see the typed ``apply_*`` methods for the results."""
        if isinstance(entry, PublishEntry):
            return self.apply_publish(index, entry)
        if isinstance(entry, DeleteMsgEntry):
            return self.apply_delete(index, entry)
        if isinstance(entry, PurgeEntry):
            return self.apply_purge(index, entry)
        if isinstance(entry, ExpireEntry):
            return self.apply_expire(index, entry)
        if isinstance(entry, UpdateConfigEntry):
            return self.apply_update(index, entry)
        if isinstance(entry, BatchCommitEntry):
            return self.apply_batch(index, entry)
        if isinstance(entry, MirrorEntry):
            return self.apply_mirror(index, entry)
        if isinstance(entry, SourceEntry):
            return self.apply_source(index, entry)
        if isinstance(entry, CONSUMER_OPS):
            return self.apply_consumer(index, entry)
        raise TypeError(f"not a log entry: {type(entry).__name__}")

    def apply_publish(self, index: int, entry: PublishEntry) -> list[PubResult]:
        self._begin(index)
        ts_ns = max(entry.ts_ns, self._last_ts_ns)
        self._now_ns = ts_ns
        self._expire_dedupe(ts_ns)
        first_new = self._last_seq + 1
        results = self._publish_all(self._transformed(entry.msgs, index), ts_ns)
        self._drop_uninterested(first_new)
        self._end(index)
        return results

    def apply_delete(self, index: int, entry: DeleteMsgEntry) -> ApiError | None:
        self._begin(index)
        error = self._delete(entry.seq, entry.erase)
        self._end(index)
        return error

    def apply_purge(self, index: int, entry: PurgeEntry) -> int | ApiError:
        """Purged count, or the error nats-server's purge API gives."""
        self._begin(index)
        result: int | ApiError
        if self._config.sealed:
            result = ApiError(errors.STREAM_SEALED)
        elif self._config.deny_purge:
            result = ApiError(errors.STREAM_PURGE_FAILED, err="stream purge not permitted")
        else:
            result = self._purge_ex(entry.filter, entry.seq, entry.keep)
            if self.consumers:
                self.consumers.stream_purged(entry.filter, self)
                self._consumers_blob = self.consumers.to_json()
        self._end(index)
        return result

    def apply_expire(self, index: int, entry: ExpireEntry) -> list[int]:
        """Remove every message past max_age (unless its Nats-TTL is ``never``) or past its TTL
        deadline at the entry's time, leaving subject delete markers, then fire the message
        schedules due at that time; the removed seqs."""
        self._begin(index)
        first_new = self._last_seq + 1  # subject delete markers
        removed = self._expire(entry.ts_ns)
        if self._schedules.by_subject:
            self._fire_schedules(max(entry.ts_ns, self._last_ts_ns))
        self._drop_uninterested(first_new)
        self._end(index)
        return removed

    def apply_update(self, index: int, entry: UpdateConfigEntry) -> ApiError | None:
        """Install a new (already validated) config and enforce lowered limits at once."""
        self._begin(index)
        error = self._update_config(entry.config_json)
        self._drop_uninterested(1)  # the retention may have become interest
        self._end(index)
        return error

    def apply_batch(self, index: int, entry: BatchCommitEntry) -> BatchResult:
        """An atomic batch commit (ADR-50): every message passes ``check_batch_commit`` against
        the stream before the batch, then all are stored with contiguous seqs; or none is."""
        self._begin(index)
        ts_ns = max(entry.ts_ns, self._last_ts_ns)
        self._now_ns = ts_ns
        self._expire_dedupe(ts_ns)
        first_new = self._last_seq + 1
        checked = check_batch_commit(
            self._transformed(entry.msgs, index),
            self._config,
            self._index,
            self._dedupe,
            self._last_seq,
            self._counter_total,
        )
        if isinstance(checked, ApiError):
            result = BatchResult(0, 0, checked)
        else:
            last = len(checked) - 1
            for position, item in enumerate(checked):
                self._store_batch_msg(item, ts_ns, entry.eob and position == last)
            result = BatchResult(self._last_seq, len(checked))
        self._drop_uninterested(first_new)
        self._end(index)
        return result

    def _store_batch_msg(self, item: CheckedMsg, ts_ns: int, add_commit: bool) -> None:
        """Store one checked batch message as nats-server's commit does (processJetStreamMsg
        without the consistency checks): Nats-Request-Info stripped, ``Nats-Batch-Commit: 1``
        added to the last message of an EOB commit, a TTL raised to the marker floor, limits
        enforced and the rollup applied."""
        msg = item.msg
        hdr = msg.hdr
        if hdr and holds(hdr, _HDR_CLIENT_INFO_BYTES):
            hdr = remove_header(hdr, HDR_CLIENT_INFO)
        if add_commit:
            hdr = append_headers(hdr, [(HDR_BATCH_COMMIT, "1")])
        if self._marker_ttl_on and holds(hdr, HDR_MSG_TTL_BYTES):
            hdr = raise_to_marker_floor(hdr, self._config) or hdr
        size = item.size_bytes
        if hdr is not msg.hdr:
            msg = InboundMsg(msg.subject, hdr, msg.data)
            size = self._msg_size(msg.subject, hdr, msg.data)
        self._store_msg(msg, ts_ns, item.msg_id, size)
        self._enforce_limits_after_store(msg.subject)
        if self._rollups_on:
            if item.rollup == ROLLUP_SUBJECT:
                self._purge_ex(msg.subject, 0, 1)
            elif item.rollup == ROLLUP_ALL:
                self._purge_ex("", 0, 1)

    def apply_mirror(self, index: int, entry: MirrorEntry) -> list[int]:
        """Messages the mirror's leader fetched from the upstream; the seqs stored.

        nats-server's mirror ingest (stream.go ``processInboundMirrorMsg``, then
        ``processJetStreamMsg`` as a sourced message): each message is stored at exactly its
        upstream seq with its upstream subject (through the first of the mirror's subject
        transforms that matches it, if it has any), header block, payload and timestamp, and:

        * a message at or below ``last_seq`` is skipped, so re-proposing a batch after a leader
          change, or two overlapping fetches, never stores anything twice;
        * a gap below it (messages deleted upstream) is skipped over as deleted, as nats-server's
          ``skipMsgs`` does; into an empty mirror the first message may come at any seq, which
          then is ``first_seq``;
        * no publish-time header check runs: batch, ``Nats-Expected-*``, ``Nats-Msg-Id`` (no
          dedupe) and ``Nats-Rollup`` headers are stored as they are, and so is ``Nats-TTL``,
          whose deadline is tracked (removed by expire entries) only when this stream has
          ``allow_msg_ttl``; a TTL that does not parse is stored with no deadline, never
          refused (stream.go ``!sourced``). Subject delete markers are ordinary messages here;
        * the mirror's own limits apply: max_msgs_per_subject, and max_msgs / max_bytes with
          discard old, drop the oldest after the store, as for a publish (max_age comes with
          expire entries). A message the mirror cannot take (over max_msg_size, too large for a
          file record, or past a limit with discard new) is skipped: its seq still advances and
          counts as deleted. nats-server would instead stall the mirror on that message,
          retrying for ever; jetraft prefers progress, and a later message that fits is stored;
        * a sealed mirror takes nothing (its seqs do not move).

        Timestamps stay the upstream's (``last_ts`` never goes back), so the index's
        non-decreasing-time order holds as long as the upstream's does."""
        self._begin(index)
        # not state (no digest, not persisted): the lag a replica reports, learned from the log
        self.mirror_upstream_last_seq = max(self.mirror_upstream_last_seq, entry.upstream_last_seq)
        self.mirror_covered_seq = max(self.mirror_covered_seq, entry.covered_seq)
        stored: list[int] = []
        first_new = self._last_seq + 1
        if not self._config.sealed:
            last_ts_ns = self._last_ts_ns
            for msg in entry.msgs:
                if msg.seq > self._last_seq and self._store_mirrored(msg):
                    stored.append(msg.seq)
                    last_ts_ns = max(last_ts_ns, msg.ts_ns)
                    self._last_ts_ns = last_ts_ns
            # The ids are kept for a promotion (mirror removed by an update); forgetting those a
            # window older than last_ts bounds them, and leaves what a reopen rebuilds.
            self._expire_dedupe(self._last_ts_ns)
        self._drop_uninterested(first_new)
        self._end(index)
        return stored

    def _store_mirrored(self, msg: MirroredMsg) -> bool:
        """Store one mirrored message at ``msg.seq`` (> last_seq), or skip it when this stream
        cannot take it; either way last_seq becomes ``msg.seq``."""
        cfg, seq = self._config, msg.seq
        subject, hdr, data = msg.subject, msg.hdr, msg.data
        if self._mirror_spec is not None:  # the mirror's subject transforms
            subject = self._mirror_spec.subject(subject, seq)
        self._last_seq = seq - 1  # the gap: deleted upstream, deleted here
        inbound = InboundMsg(subject, hdr, data)
        size = self._msg_size(subject, hdr, data)
        if (
            (cfg.storage == "file" and limits.filestore_record_too_large(size))
            or 0 <= cfg.max_msg_size < len(hdr) + len(data)
            or self._discard_new_error(inbound, "", size) is not None
        ):
            self._last_seq = seq
            if not self._index:
                self._empty_first_seq = seq + 1
            return False
        msg_id = (_header(hdr, HDR_MSG_ID) or "") if hdr else ""
        self._store_msg(inbound, msg.ts_ns, msg_id, size)
        self._enforce_limits_after_store(subject)
        return True

    def apply_source(self, index: int, entry: SourceEntry) -> list[PubResult]:
        """Messages the leader fetched from one of the stream's sources (engine/sources.py);
        the outcome of each one taken.

        Each message above the source's position is stored like a publish, at the entry's
        time, and the position moves past it whether it was stored or refused (a limit with
        discard new, a duplicate Nats-Msg-Id): re-proposing a batch after a leader change or a
        restart takes nothing twice. nats-server retries a refused message for ever; jetraft
        moves on. An entry for a source no longer configured takes nothing."""
        self._begin(index)
        self.source_upstream_last_seq[entry.source] = max(
            self.source_upstream_last_seq.get(entry.source, 0), entry.upstream_last_seq
        )
        spec = self._sources.get(entry.source)
        results: list[PubResult] = []
        first_new = self._last_seq + 1
        if spec is not None:
            ts_ns = max(entry.ts_ns, self._last_ts_ns)
            self._now_ns = ts_ns
            self._expire_dedupe(ts_ns)
            position = self._source_positions.get(entry.source, 0)
            for msg in entry.msgs:
                if msg.seq <= position:
                    continue
                position = msg.seq
                hdr = spec.header(msg.hdr, msg.seq, msg.subject, entry.ident)
                sourced = InboundMsg(spec.subject(msg.subject, msg.seq), hdr, msg.data)
                results.append(self._publish_one(sourced, ts_ns, sourced=True))
            self._source_positions[entry.source] = position
        self._drop_uninterested(first_new)
        self._end(index)
        return results

    def source_position(self, iname: str) -> int:
        """The upstream seq through which the source named ``iname`` has been taken."""
        return self._source_positions.get(iname, 0)

    def apply_consumer(self, index: int, entry: ConsumerOp) -> ConsumerApplyResult:
        """A consumer operation; with interest or work-queue retention, the messages it leaves
        no consumer wanting are removed in the same apply (the same on every replica)."""
        self._begin(index)
        result = self.consumers.apply(index, entry, self)
        if isinstance(result, DeliverResult | AckResult | TimeoutResult | DeleteResult):
            self._remove_unwanted(result.released)
        elif isinstance(result, CreateResult) and not result.created:
            self._after_consumer_update(result.name)
        elif isinstance(result, ResetResult) and self._config.retention == "interest":
            # what the reset consumer skipped and nobody else wants (nats-server checks the
            # interest stream's state after a reset); a work queue keeps them, as nats-server
            if self._index:
                self._remove_unwanted([SeqRange(self.state_first_seq(), self._last_seq)])
        self._consumers_blob = self.consumers.to_json()
        self._end(index)
        return result

    def _after_consumer_update(self, name: str) -> None:
        """An interest stream drops what an updated consumer (a filter changed) no longer owes
        and nobody else needs, from its ack floor on (nats-server cleanupNoInterestMessages)."""
        consumer = self.consumers.get(name)
        if self._config.retention != "interest" or consumer is None or not self._index:
            return
        start = max(consumer.ack_floor.stream_seq + 1, self.state_first_seq())
        self._remove_unwanted([SeqRange(start, self._last_seq)])

    def _remove_unwanted(self, candidates: tuple[SeqRange, ...] | list[SeqRange]) -> None:
        retention = self._config.retention
        if retention == "limits" or not candidates:
            return
        for seq in removable_seqs(retention, self.consumers, self, candidates):
            self._remove(seq)

    def _drop_uninterested(self, first_new: int) -> None:
        """An interest stream keeps a new message only if some consumer sees it (nats-server does
        not store it otherwise)."""
        if self._config.retention != "interest" or self._last_seq < first_new:
            return
        if not self.consumers:
            if self._index:
                self._purge_all()
            return
        self._remove_unwanted([SeqRange(first_new, self._last_seq)])

    def _begin(self, index: int) -> None:
        if not index > self._applied_index:
            raise AssertionError(f"apply index {index} not after {self._applied_index}")

    def _end(self, index: int) -> None:
        self._applied_index = index
        self._check_invariants()
        self._store.set_meta(self._encode_meta())

    def _check_invariants(self) -> None:
        idx = self._index
        if idx and not idx.last_live_seq <= self._last_seq:
            raise AssertionError(f"live seq {idx.last_live_seq} beyond last_seq {self._last_seq}")
        if not idx and not self._empty_first_seq <= self._last_seq + 1:
            raise AssertionError(f"empty first_seq {self._empty_first_seq} > {self._last_seq}+1")
        if idx.bytes_total < 0:
            raise AssertionError(f"negative bytes {idx.bytes_total}")

    # ================================================================== publish

    def _transformed(self, msgs: tuple[InboundMsg, ...], index: int) -> tuple[InboundMsg, ...]:
        """The stream's ``subject_transform`` applied to incoming subjects (a subject it does
        not match is stored as it came). ``{{random(n)}}`` draws from a generator seeded by the
        entry's index, so every replica stores the same subject."""
        transform = self._input_transform
        if transform is None:
            return msgs
        pick = seeded_pick(index)
        out: list[InboundMsg] = []
        for msg in msgs:
            subject = transform.match(msg.subject, pick)
            out.append(msg if subject is None else InboundMsg(subject, msg.hdr, msg.data))
        return tuple(out)

    def _counter_total(self, subject: str) -> int | ApiError:  # for atomic batches
        """The subject's current counter total (0 when it has none yet)."""
        return self._counter_last(subject)[1]

    def _counter_last(self, subject: str) -> tuple[StoredMsg | None, int | ApiError]:
        """The subject's latest message and the counter total it holds (None and 0 before the
        first; 10172 when it holds no total)."""
        last = self._index.last_seq(subject)
        stored = self._store.load(last) if last else None
        return stored, (total_of(stored.data) if stored is not None else 0)

    def take_republished(self) -> list[Republish]:
        """What the entries applied since the last call are to be republished as (the stream
        leader sends them; a follower drops them)."""
        out, self._republished = self._republished, []
        return out

    def _publish_all(self, msgs: tuple[InboundMsg, ...], ts_ns: int) -> list[PubResult]:
        """Every message of a publish entry, in order.

        The hot path: a message whose only nats-server header is a new Nats-Msg-Id, or that has
        none (the common publishes), and that is within every size limit is stored right here,
        with the entry-wide lookups done once; anything else goes through ``_publish_one``, the
        full nats-server check sequence. The shortcut's conditions only ever send a message to
        the full checks, never past them, and it leaves the same state behind (``_publish_one``
        of such a message runs exactly these steps)."""
        cfg = self._config
        if cfg.sealed or cfg.allow_msg_counter:
            return [self._publish_one(msg, ts_ns) for msg in msgs]
        publish_one = self._publish_one
        storage = cfg.storage
        # The accounting size is linear in subject and payload length (limits.msg_size_bytes).
        size_base = limits.msg_size_bytes(storage, 0, 0, 0)
        size_cap = limits.FILESTORE_RECORD_BYTES_MAX if storage == "file" else _UNCAPPED_BYTES
        payload_cap = cfg.max_msg_size if cfg.max_msg_size >= 0 else _UNCAPPED_BYTES
        discard_new = cfg.discard == "new"
        enforce = self._per_subject_max > 0 or self._old_msgs_max > 0 or self._old_bytes_max > 0
        store_msg = self._store_msg
        results: list[PubResult] = []
        add_result = results.append
        for msg in msgs:
            subject, hdr, data = msg.subject, msg.hdr, msg.data
            subject_len = len(subject) if subject.isascii() else _utf8_len(subject)
            if hdr:
                msg_id = self._plain_msg_id(hdr)
                if msg_id is None:
                    add_result(publish_one(msg, ts_ns))
                    continue
                size = limits.msg_size_bytes(storage, subject_len, len(hdr), len(data))
            else:
                msg_id = ""
                size = size_base + subject_len + len(data)
            if (
                size > size_cap
                or len(hdr) + len(data) > payload_cap
                or (discard_new and self._discard_new_error(msg, "", size) is not None)
            ):
                add_result(publish_one(msg, ts_ns))
                continue
            seq = store_msg(msg, ts_ns, msg_id, size)
            if enforce:
                self._enforce_limits_after_store(subject)
            add_result(PubResult(seq))
        return results

    def _plain_msg_id(self, hdr: bytes) -> str | None:
        """For a header block of at most HEADER_BYTES_MAX whose only ``Nats-`` text is a
        Nats-Msg-Id key (or that has none): the id ("" for none), unless it is a duplicate.
        None when the message needs ``_check_publish``. (No other header nats-server acts on
        can be present: every one of them starts with ``Nats-``.)"""
        if len(hdr) > limits.HEADER_BYTES_MAX:
            return None
        count = occurrences(hdr, _HDR_NATS_PREFIX)
        if count == 0:
            return ""
        if count > 1 or not holds(hdr, _HDR_MSG_ID_LINE):
            return None
        msg_id = get_header(hdr, HDR_MSG_ID) or ""
        if msg_id and self._config.mirror is None and msg_id in self._dedupe:
            return None
        return msg_id

    def _publish_one(self, msg: InboundMsg, ts_ns: int, sourced: bool = False) -> PubResult:
        checked = self._check_publish(msg, sourced)
        if isinstance(checked, PubResult):
            return checked
        msg = checked.msg
        seq = self._store_msg(msg, ts_ns, checked.msg_id, checked.size_bytes)
        self._enforce_limits_after_store(msg.subject)
        if checked.rollup == ROLLUP_SUBJECT:
            self._purge_ex(msg.subject, 0, 1)
        elif checked.rollup == ROLLUP_ALL:
            self._purge_ex("", 0, 1)
        if msg.hdr and _HDR_SCHEDULE_NEXT_PURGE in msg.hdr:
            scheduler = get_header(msg.hdr, HDR_SCHEDULER)
            if scheduler and get_header(msg.hdr, HDR_SCHEDULE_NEXT) == NEXT_PURGE:
                self._purge_ex(scheduler, 0, 0)  # a one-off schedule goes once it fired
        if checked.total is not None:
            return PubResult(seq, val=str(checked.total))
        return PubResult(seq)

    def _check_publish(self, msg: InboundMsg, sourced: bool = False) -> PubResult | _Accepted:
        """nats-server's publish checks, in the order the v2.15.1 binary applies them (probed;
        see docs/nats-differences.md §5: the main-branch source checks the sizes later).
        ``sourced``: the message came from one of the stream's sources (engine/sources.py),
        which lifts the checks nats-server lifts for those (its own source header, TTLs the
        stream does not enforce, increments that are totals)."""
        cfg = self._config
        hdr = msg.hdr
        size = self._msg_size(msg.subject, hdr, msg.data)
        if cfg.storage == "file" and limits.filestore_record_too_large(size):
            return _error(ApiError(errors.STREAM_STORE_FAILED, err=ERR_MSG_TOO_LARGE))
        if cfg.sealed:
            return _error(ApiError(errors.STREAM_SEALED))
        if hdr and holds(hdr, _HDR_CLIENT_INFO_BYTES):
            # stream.go strips it (it is the server's own cross-account request info); probed:
            # the stored message lacks it and the size checks see the stripped header.
            hdr = remove_header(hdr, HDR_CLIENT_INFO)
            msg = InboundMsg(msg.subject, hdr, msg.data)
            size = self._msg_size(msg.subject, hdr, msg.data)
        # The v2.15.1 binary checks both sizes before any header (probed: an oversized message
        # with a duplicate Nats-Msg-Id or a wrong Nats-Expected-Stream still gets 10054/10097).
        if cfg.max_msg_size >= 0 and len(hdr) + len(msg.data) > cfg.max_msg_size:
            return _error(ApiError(errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM))
        if len(hdr) > limits.HEADER_BYTES_MAX:
            return _error(ApiError(errors.STREAM_HEADER_EXCEEDS_MAXIMUM))
        msg_id, rollup, ttl_invalid, incr = "", "", False, None
        if hdr and holds(hdr, _HDR_NATS_PREFIX):
            checked = self._check_headers(msg, sourced)
            if isinstance(checked, PubResult):
                return checked
            msg_id, rollup, ttl_invalid, incr, checked_hdr = checked
            if checked_hdr is not hdr:
                hdr = checked_hdr
                msg = InboundMsg(msg.subject, hdr, msg.data)
                size = self._msg_size(msg.subject, hdr, msg.data)
        total: int | None = None
        if cfg.allow_msg_counter:
            if incr is None:
                return _error(ApiError(errors.MESSAGE_INCR_MISSING))
            counted = self._count(msg.subject, hdr, msg.data, incr, sourced)
            if isinstance(counted, ApiError):
                return _error(counted)
            hdr, total = counted
            msg = InboundMsg(msg.subject, hdr, counter_payload(total))
            size = self._msg_size(msg.subject, hdr, msg.data)
        if ttl_invalid and not sourced:
            return _error(ApiError(errors.MESSAGE_TTL_INVALID))
        if self._marker_ttl_on and holds(hdr, HDR_MSG_TTL_BYTES):
            raised = raise_to_marker_floor(hdr, cfg)
            if raised is not None:  # the stored header (and so the size) changes
                msg = InboundMsg(msg.subject, raised, msg.data)
                size = self._msg_size(msg.subject, raised, msg.data)
        limit_error = self._discard_new_error(msg, rollup, size)
        if limit_error is not None:
            return _error(ApiError(errors.STREAM_STORE_FAILED, err=limit_error))
        return _Accepted(msg, msg_id, rollup, size, total)

    def _count(
        self, subject: str, hdr: bytes, data: bytes, incr: int, sourced: bool
    ) -> tuple[bytes, int] | ApiError:
        """A counter message's header and new total: the increment added to the subject's
        total, or for a sourced message the change in its source's total."""
        previous, total = self._counter_last(subject)
        if isinstance(total, ApiError):
            return total
        previous_hdr = previous.hdr if previous is not None else None
        if sourced and get_header(hdr, HDR_STREAM_SOURCE):
            return sourced_counter(hdr, data, previous_hdr, total)
        # the totals seen from sources stay recorded on the subject's latest message
        seen = get_header(previous_hdr, HDR_COUNTER_SOURCES) if previous_hdr else None
        if seen:
            hdr = set_header(hdr, HDR_COUNTER_SOURCES, seen)
        return hdr, total + incr

    def _check_headers(
        self, msg: InboundMsg, sourced: bool = False
    ) -> PubResult | tuple[str, str, bool, int | None, bytes]:
        """The header checks, from Nats-Incr to Nats-Rollup; returns the msg id, the rollup,
        whether Nats-TTL failed to parse (reported later, as nats-server does), a counter
        increment and the header to store (a schedule gains a rollup)."""
        cfg, hdr = self._config, msg.hdr
        if sourced:
            incr = incr_of(hdr)
        else:
            incr = check_increment(hdr, msg.data, cfg.allow_msg_counter)
        if isinstance(incr, ApiError):
            return _error(incr)
        has_expected = holds(hdr, _HDR_EXPECTED_PREFIX)
        expected_stream = _header(hdr, HDR_EXPECTED_STREAM) if has_expected else None
        if expected_stream and expected_stream != cfg.name:
            return _error(ApiError(errors.STREAM_NOT_MATCH))
        ttl_invalid = False
        ttl_value = _header(hdr, HDR_MSG_TTL)
        if ttl_value:
            # A TTL that does not parse passes this check (ttl_s 0) and fails later with 10165,
            # even on a stream without TTLs (stream.go standalone order; probed).
            ttl_s, ttl_ok = parse_message_ttl(ttl_value)
            if ttl_s != 0 and not cfg.allow_msg_ttl and not sourced:
                return _error(ApiError(errors.MESSAGE_TTL_DISABLED))
            ttl_invalid = not ttl_ok
        error = self._check_expected_seqs(msg) if has_expected else None
        if error is not None:
            return _error(error)
        if not sourced and is_scheduled(hdr):
            scheduled = check_schedule_headers(
                hdr,
                msg.subject,
                allowed=cfg.allow_msg_schedules,
                allow_ttl=cfg.allow_msg_ttl,
                stream_subjects=cfg.subjects or [],
                last_on=self.load_last,
                now_ns=self._now_ns,
            )
            if isinstance(scheduled, ApiError):
                return _error(scheduled)
            hdr = scheduled
        if not sourced and _header(hdr, HDR_STREAM_SOURCE):
            return _error(ApiError(errors.MESSAGE_SOURCE_HEADER_NOT_ALLOWED))
        msg_id = _header(hdr, HDR_MSG_ID) or ""
        if msg_id and cfg.mirror is None:
            seen = self._dedupe.get(msg_id)
            if seen is not None:
                return PubResult(seen[0], duplicate=True)
        expected_msg_id = _header(hdr, HDR_EXPECTED_LAST_MSG_ID) if has_expected else None
        if expected_msg_id and expected_msg_id != self._last_msg_id:
            return _error(ApiError(errors.STREAM_WRONG_LAST_MSG_ID, id=self._last_msg_id))
        rollup = ""
        rollup_value = _header(hdr, HDR_ROLLUP)
        if rollup_value:
            if not self._rollups_on:
                return _error(ApiError(errors.STREAM_ROLLUP_FAILED, err="rollup not permitted"))
            rollup = go_lower(rollup_value)
            if rollup not in (ROLLUP_SUBJECT, ROLLUP_ALL):
                err = f"rollup value invalid: {go_quote(rollup)}"
                return _error(ApiError(errors.STREAM_ROLLUP_FAILED, err=err))
        return msg_id, rollup, ttl_invalid, incr, hdr

    def _check_expected_seqs(self, msg: InboundMsg) -> ApiError | None:
        hdr = msg.hdr
        subj_seq = _header(hdr, HDR_EXPECTED_LAST_SUBJ_SEQ)
        subj_override = _header(hdr, HDR_EXPECTED_LAST_SUBJ_SEQ_SUBJ)
        if subj_seq:
            found = self._index.last_seq(subj_override or msg.subject) or 0
            if found != parse_int64_as_uint64(subj_seq):
                return ApiError(errors.STREAM_WRONG_LAST_SEQUENCE, seq=found)
        elif subj_override:
            return ApiError(errors.STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY)
        last_seq = _header(hdr, HDR_EXPECTED_LAST_SEQ)
        if last_seq and parse_int64_as_uint64(last_seq) != self._last_seq:
            return ApiError(errors.STREAM_WRONG_LAST_SEQUENCE, seq=self._last_seq)
        return None

    def _discard_new_error(self, msg: InboundMsg, rollup: str, size: int) -> str | None:
        """memstore/filestore storeRawMsg with DiscardNew: the limit a new message of accounting
        size ``size`` would break."""
        cfg, idx = self._config, self._index
        if cfg.discard != "new":
            return None
        per_subject_max = cfg.max_msgs_per_subject
        at_subject_limit = per_subject_max > 0 and idx.subject_count(msg.subject) >= per_subject_max
        if at_subject_limit and cfg.discard_new_per_subject and not rollup:
            return ERR_MAX_MSGS_PER_SUBJECT
        if cfg.max_msgs > 0 and len(idx) >= cfg.max_msgs and not at_subject_limit:
            return ERR_MAX_MSGS
        if cfg.max_bytes > 0:
            if idx.bytes_total + size > cfg.max_bytes:
                if not at_subject_limit:
                    return ERR_MAX_BYTES
                # At the subject limit the subject's oldest message will make room: enough?
                oldest = idx.get(idx.subject_first_seq(msg.subject))
                if oldest is None or oldest.size_bytes < size:
                    return ERR_MAX_BYTES
        return None

    def _store_msg(self, msg: InboundMsg, ts_ns: int, msg_id: str, size: int) -> int:
        seq = self._last_seq + 1
        subject, hdr, data = msg.subject, msg.hdr, msg.data
        if self._republish is not None:
            self._queue_republish(seq, subject, hdr, data, ts_ns)
        self._store.append_fields(seq, subject, hdr, data, ts_ns)
        self._index.add(seq, subject, ts_ns, size, content_fingerprint(hdr, data))
        if self._schedules_on:
            stored = new_stored((seq, subject, hdr, data, ts_ns))
            self._schedules.on_stored(stored, max(ts_ns, self._now_ns))
        if hdr and holds(hdr, HDR_MSG_TTL_BYTES):
            self._ttl.on_stored(seq, ts_ns, hdr)
        self._last_seq = seq
        self._last_ts_ns = ts_ns
        self._last_msg_id = msg_id
        if msg_id and self._dedupe_window_ns > 0:
            self._dedupe[msg_id] = (seq, ts_ns)
            self._dedupe_order.append((msg_id, seq, ts_ns))
        return seq

    def _queue_republish(self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int) -> None:
        """RePublish of a message about to be stored as ``seq``: ``Nats-Last-Sequence`` is the
        subject's last seq before it (read now, before a per-subject limit can remove it)."""
        assert self._republish is not None
        target = self._republish.match(subject, seeded_pick(seq))
        if target is None or not is_valid_literal_subject(target):
            return
        cfg = self._config
        assert cfg.republish is not None
        items = [
            ("Nats-Stream", cfg.name),
            ("Nats-Subject", subject),
            ("Nats-Sequence", str(seq)),
            ("Nats-Time-Stamp", format_rfc3339nano(ts)),
            ("Nats-Last-Sequence", str(self._index.last_seq(subject) or 0)),
        ]
        if cfg.republish.headers_only:
            items.append(("Nats-Msg-Size", str(len(data))))
            data = b""
        self._republished.append(Republish(target, append_headers(hdr, items), data))

    def _index_msg(self, seq: int, subject: str, hdr: bytes, data: bytes, ts_ns: int) -> None:
        size = self._msg_size(subject, hdr, data)
        self._index.add(seq, subject, ts_ns, size, content_fingerprint(hdr, data))
        if self._schedules_on and hdr:
            self._schedules.on_stored(StoredMsg(seq, subject, hdr, data, ts_ns), ts_ns)
        if hdr and holds(hdr, HDR_MSG_TTL_BYTES):
            self._ttl.on_stored(seq, ts_ns, hdr)

    def _expire_dedupe(self, now_ns: int) -> None:
        """Forget msg ids stored a full duplicate window ago (stream.go purgeMsgIds)."""
        window_ns = self._dedupe_window_ns
        order, dedupe = self._dedupe_order, self._dedupe
        while order and now_ns - order[0][2] >= window_ns:
            msg_id, seq, _ = order.popleft()
            current = dedupe.get(msg_id)
            if current is not None and current[0] == seq:
                del dedupe[msg_id]

    # ================================================================== limits and removal

    def _enforce_limits_after_store(self, subject: str) -> None:
        """Per-subject limit always drops the subject's oldest; msgs/bytes only with discard old."""
        per_subject_max = self._per_subject_max
        if per_subject_max > 0:
            self._enforce_subject_limit(subject, per_subject_max)
        self._enforce_discard_old()

    def _enforce_subject_limit(self, subject: str, per_subject_max: int) -> None:
        idx = self._index
        while idx.subject_count(subject) > per_subject_max:
            self._remove(idx.subject_first_seq(subject))

    def _enforce_discard_old(self) -> None:
        idx = self._index
        msgs_max, bytes_max = self._old_msgs_max, self._old_bytes_max
        if msgs_max > 0:
            while len(idx) > msgs_max:
                self._remove(idx.first_seq)
        if bytes_max > 0:
            while idx.bytes_total > bytes_max:
                self._remove(idx.first_seq)

    def _remove(self, seq: int, erase: bool = False) -> bool:
        meta = self._index.remove(seq)
        if meta is None:
            return False
        if not self._store.remove(seq, erase=erase):
            raise AssertionError(f"seq {seq} indexed but not in the store")
        self._unfold(seq, meta)
        if self._ttl.tracked:
            self._ttl.forget(seq)
        if self._schedules.by_seq:
            self._schedules.drop_seq(seq)
        if not self._index:
            self._empty_first_seq = self._last_seq + 1
        return True

    def _delete(self, seq: int, erase: bool) -> ApiError | None:
        cfg = self._config
        if cfg.sealed:
            return ApiError(errors.STREAM_SEALED)
        if cfg.deny_delete:
            return ApiError(errors.STREAM_MSG_DELETE_FAILED, err="message delete not permitted")
        if self._remove(seq, erase):
            return None
        if cfg.storage == "file":
            # filestore.go removeMsg: out-of-range seqs fail before the block lookup.
            idx = self._index
            if seq == 0:
                return ApiError(errors.STREAM_MSG_DELETE_FAILED, err=ERR_STORE_MSG_NOT_FOUND)
            if not idx or seq < idx.first_seq or seq > self._last_seq:
                err = ERR_STORE_MSG_NOT_FOUND if seq <= self._last_seq else ERR_STORE_EOF
                return ApiError(errors.STREAM_MSG_DELETE_FAILED, err=err)
        return ApiError(errors.SEQUENCE_NOT_FOUND, seq=seq)

    # ================================================================== expiry (ADR-43)

    def _expire(self, now_ns: int) -> list[int]:
        """filestore/memstore ``expireMsgs`` as of now_ns: first the max_age walk in seq order,
        then the TTL deadlines due, in seq order (so markers get their seqs in that order)."""
        ttl = self._ttl
        max_age_ns = self._config.max_age
        due = ttl.max_age_due(self._index, now_ns - max_age_ns) if max_age_ns > 0 else []
        removed = [seq for seq in due if self._expire_one(seq, now_ns)]
        removed += [seq for seq in ttl.due(now_ns) if self._expire_one(seq, now_ns)]
        return removed

    def _expire_one(self, seq: int, now_ns: int) -> bool:
        """Remove one due message; when it is the last of its subject and markers are on, the
        marker replaces it (its ``Nats-Rollup: sub`` removes it), unless it is a marker itself.
        False when it is already gone or its marker was refused (then it stays)."""
        idx = self._index
        meta = idx.get(seq)
        if meta is None:
            return False
        marker_s = marker_ttl_s(self._config)
        if marker_s > 0 and idx.subject_count(meta.subject) == 1:
            msg = self._store.load(seq)
            if msg is not None and not is_subject_delete_marker(msg.hdr):
                if not self._store_marker(meta.subject, now_ns, marker_s):
                    self._ttl.note_blocked(seq, now_ns)
                    return False
                return seq not in idx
        self._remove(seq)
        return True

    def _store_marker(self, subject: str, now_ns: int, marker_s: int) -> bool:
        """Store a subject delete marker as nats-server ingests it (like a sourced message: no
        TTL or rollup permission checks, but sealed, size and discard-new limits apply), then
        roll the subject up to it. False when the stream refuses it."""
        cfg = self._config
        msg = InboundMsg(subject, marker_header(marker_s), b"")
        size = self._msg_size(subject, msg.hdr, msg.data)
        if cfg.sealed or 0 <= cfg.max_msg_size < len(msg.hdr):
            return False
        if cfg.storage == "file" and limits.filestore_record_too_large(size):
            return False
        if self._discard_new_error(msg, ROLLUP_SUBJECT, size) is not None:
            return False
        self._store_msg(msg, max(now_ns, self._last_ts_ns), "", size)
        self._enforce_limits_after_store(subject)
        self._purge_ex(subject, 0, 1)
        return True

    def _track_ttls(self, tracking: bool) -> None:
        """allow_msg_ttl changed: find the deadlines of the stored messages (memstore.go
        ``recoverTTLState``, a scan of the store, as rare as the update) or drop them."""
        if not tracking:
            self._ttl.stop_tracking()
            return
        self._ttl = TtlIndex(tracking=True)
        for msg in self._store.scan():
            if msg.hdr and HDR_MSG_TTL_BYTES in msg.hdr and msg.seq in self._index:
                self._ttl.on_stored(msg.seq, msg.ts_ns, msg.hdr)

    # ================================================================== purge

    def _purge_ex(self, subject_filter: str, seq: int, keep: int) -> int:
        """memstore.go PurgeEx: ``seq`` purges below it (exclusive), ``keep`` keeps the newest."""
        if seq == 1:
            return 0
        if is_match_all(subject_filter):
            if keep == 0 and seq == 0:
                return self._purge_all()
            if seq > 1:
                return self._compact(seq)
            subject_filter = ">"
        idx = self._index
        matched = idx.count(0, subject_filter)
        if matched == 0:
            return 0
        to_purge = matched
        if keep > 0:
            if keep >= matched:
                return 0
            to_purge = matched - keep
        ceiling = seq - 1 if seq >= 1 else None
        victims = list(islice(self._matching_seqs(subject_filter, ceiling), to_purge))
        for victim in victims:
            self._remove(victim)
        return len(victims)

    def _matching_seqs(self, subject_filter: str, ceiling: int | None) -> Iterator[int]:
        """Live seqs <= ceiling matching the filter, ascending (copied: callers remove)."""
        idx = self._index
        if is_match_all(subject_filter):
            return iter(list(idx.seqs(maximum=ceiling)))
        per_subject = [idx.subject_seqs(s) for s in idx.matching_subjects(subject_filter)]
        merged = heapq.merge(*per_subject)
        if ceiling is None:
            return merged
        return takewhile(lambda s: s <= ceiling, merged)

    def _purge_all(self) -> int:
        purged = len(self._index)
        if purged:
            self._store.remove_through(self._last_seq)
        self._index.clear()
        self._ttl.clear()
        self._schedules = Schedules()
        self._msg_sum.reset()
        self._empty_first_seq = self._last_seq + 1
        return purged

    def _compact(self, seq: int) -> int:
        """memstore.go compact: remove everything below seq; past the end it moves last_seq."""
        if self.state_first_seq() > seq:
            return 0
        if seq <= self._last_seq:
            victims = list(self._index.seqs(maximum=seq - 1))
            for victim in victims:
                meta = self._index.remove(victim)
                if meta is None:
                    raise AssertionError(f"seq {victim} vanished from the index")
                self._unfold(victim, meta)
                self._ttl.forget(victim)
                self._schedules.drop_seq(victim)
            if victims:
                self._store.remove_through(seq - 1)
            if not self._index:
                self._empty_first_seq = self._last_seq + 1
            return len(victims)
        purged = self._purge_all()
        self._empty_first_seq = seq
        self._last_seq = seq - 1
        return purged

    # ================================================================== config

    @property
    def config(self) -> StreamConfig:
        return self._config

    def _set_config(self, config: StreamConfig) -> None:
        self._config = config
        # read for every stored message: kept as plain fields (a config attribute is a lookup in
        # the model's dict each time)
        self._schedules_on = config.allow_msg_schedules
        self._dedupe_window_ns = config.duplicate_window
        self._per_subject_max = max(0, config.max_msgs_per_subject)
        discard_old = config.discard == "old"
        self._old_msgs_max = max(0, config.max_msgs) if discard_old else 0
        self._old_bytes_max = max(0, config.max_bytes) if discard_old else 0
        self._marker_ttl_on = config.subject_delete_marker_ttl > 0
        self._rollups_on = config.allow_rollup_hdrs and not config.deny_purge
        # the config passed validation, so the transforms compile
        transform, republish = config.subject_transform, config.republish
        self._input_transform = (
            SubjectTransform.compile(transform.src, transform.dest) if transform else None
        )
        self._republish = (
            SubjectTransform.compile(republish.src, republish.dest) if republish else None
        )
        self._sources = {spec.iname: spec for spec in map(SourceSpec.of, config.sources or ())}
        mirror = config.mirror
        self._mirror_spec = SourceSpec.of(mirror) if mirror and mirror.subject_transforms else None
        self._config_json = config.model_dump_json(exclude_defaults=True).encode()
        self._config_digest = config_hash(self._config_json)

    def _update_config(self, config_json: bytes) -> ApiError | None:
        try:
            new = StreamConfig.model_validate_json(config_json)
        except ValidationError as exc:
            return ApiError(errors.STREAM_INVALID_CONFIG, err=f"invalid config: {exc.errors()}")
        old = self._config
        if new.name != old.name:
            err = "stream configuration name must match original"
            return ApiError(errors.STREAM_INVALID_CONFIG, err=err)
        if new.storage != old.storage:
            err = "stream configuration update can not change storage type"
            return ApiError(errors.STREAM_INVALID_CONFIG, err=err)
        self._set_config(new)
        if new.allow_msg_ttl != self._ttl.tracking:
            self._track_ttls(new.allow_msg_ttl)
        if new.allow_msg_schedules and not old.allow_msg_schedules:
            for stored in self._store.scan():
                if stored.hdr:
                    self._schedules.on_stored(stored, stored.ts_ns)
        # memstore.go UpdateConfig: msgs and bytes limits (discard old only), then per subject
        # when that limit was lowered or newly set.
        self._enforce_discard_old()
        new_max, old_max = new.max_msgs_per_subject, old.max_msgs_per_subject
        if new_max > 0 and (old_max <= 0 or new_max < old_max):
            for subject in self._index.matching_subjects(">"):
                self._enforce_subject_limit(subject, new_max)
        return None

    # ================================================================== state

    @property
    def store(self) -> MessageStore:
        """The store this stream sits on, for inspecting what it holds (tests, state transfer
        onto it, reopening it as a restart would). Change it only through :meth:`apply`: a
        write behind the stream's back leaves its indexes and meta out of step."""
        return self._store

    @property
    def created_ns(self) -> int:
        return self._created_ns

    @property
    def last_msg_id(self) -> str:
        return self._last_msg_id

    def state_first_seq(self) -> int:
        """first_seq as STREAM.INFO reports it (0 for a stream that never held anything)."""
        return self._index.first_seq if self._index else self._empty_first_seq

    def state(self) -> StreamState:
        idx = self._index
        messages = len(idx)
        first_seq = self.state_first_seq()
        first_ts_ns = _ts_of(idx, first_seq) if messages else 0
        num_deleted = self._last_seq - first_seq + 1 - messages if messages else 0
        return StreamState(
            messages=messages,
            bytes=idx.bytes_total,
            first_seq=first_seq,
            first_ts_ns=first_ts_ns,
            last_seq=self._last_seq,
            last_ts_ns=self._last_ts_ns,
            num_subjects=idx.num_subjects,
            num_deleted=num_deleted,
        )

    def deleted_seqs(self) -> list[int]:
        """Sequences in [first_seq, last_seq] that are not live (STREAM.INFO deleted_details)."""
        if not self._index:
            return []
        out: list[int] = []
        prev = self._index.first_seq - 1
        for seq in self._index.seqs():
            if seq > prev + 1:
                out.extend(range(prev + 1, seq))
            prev = seq
        out.extend(range(prev + 1, self._last_seq + 1))
        return out

    def subjects_state(self, subject_filter: str) -> dict[str, int]:
        """Message count per subject matching the filter (STREAM.INFO subjects_filter)."""
        return self._index.subjects_state(subject_filter)

    def next_expiry_ns(self) -> int | None:
        """When the next message passes max_age or its TTL deadline (the leader proposes an
        ExpireEntry then); None when nothing will ever expire. May be in the past."""
        if not self._index:
            return None
        return self._ttl.next_expiry_ns(self._index, self._config.max_age)

    def next_schedule_ns(self) -> int | None:
        """When the next message schedule is due (an ExpireEntry fires it); None when none is
        waiting. May be in the past."""
        return self._schedules.next_fire_ns()

    def _fire_schedules(self, now_ns: int) -> None:
        """Publish what every schedule due at ``now_ns`` fires (nats-server's scheduler; the
        messages are stored as sourced ones: no publish-time checks of schedule headers)."""
        self._now_ns = now_ns
        self._expire_dedupe(now_ns)
        for seq, subject in self._schedules.due(now_ns):
            schedule = self._store.load(seq)
            if schedule is None:
                self._schedules.drop_seq(seq)
                continue
            source = get_header(schedule.hdr, HDR_SCHEDULE_SOURCE)
            source_last = self.load_last(source) if source else None
            fired, repeat = fired_message(schedule, source_last, now_ns)
            if fired is None:
                self._schedules.drop_subject(subject)
                continue
            result = self._publish_one(fired, now_ns, sourced=True)
            if result.error is not None:
                # a fired message the stream refuses must not fire again at once
                if repeat:
                    self._schedules.move(subject, fired_next_ns(fired.hdr, now_ns))
                else:
                    self._schedules.drop_subject(subject)

    def _unfold(self, seq: int, meta: MsgMeta) -> None:
        """Take a removed message out of the digest sum, if it was folded in."""
        if seq <= self._folded_seq:
            self._msg_sum.remove(_msg_hash(seq, meta))

    def _fold(self) -> None:
        """Add the messages stored since the last digest to the sum. Only a cache moves: the sum
        over the live messages is the same whenever (and how often) this runs."""
        idx = self._index
        if not idx or idx.last_live_seq <= self._folded_seq:
            return
        msg_sum = self._msg_sum
        for seq in idx.seqs(minimum=self._folded_seq + 1):
            meta = idx.get(seq)
            if meta is None:
                raise AssertionError(f"seq {seq} listed but has no metadata")
            msg_sum.add(_msg_hash(seq, meta))
        self._folded_seq = idx.last_live_seq

    def digest(self) -> bytes:
        """State digest at the applied index; equal on every replica that applied the same log."""
        self._fold()
        state = self.state()
        return state_digest(
            msg_sum=self._msg_sum.value,
            applied_index=self._applied_index,
            first_seq=state.first_seq,
            last_seq=state.last_seq,
            first_ts_ns=state.first_ts_ns,
            last_ts_ns=state.last_ts_ns,
            messages=state.messages,
            bytes_total=state.bytes,
            last_msg_id=self._last_msg_id,
            config_digest=self._config_digest,
            consumers_digest=self.consumers.digest() if self._consumers_blob else b"",
            sources_digest=self._sources_digest(),
        )

    def _sources_digest(self) -> bytes:
        """The sources' positions (where each source resumes): replicas that disagree on them
        would take messages twice or skip them after a leader change."""
        if not self._source_positions:
            return b""
        return json.dumps(self._source_positions, sort_keys=True).encode()

    def content_digest(self) -> bytes:
        """Digest of the live messages alone (seq, subject, ts, size, content of each), without
        seq bookkeeping, applied index or config: equal on a mirror and its upstream once they
        hold the same messages at the same seqs (same storage type: sizes are hashed)."""
        self._fold()
        idx = self._index
        return messages_digest(
            msg_sum=self._msg_sum.value, messages=len(idx), bytes_total=idx.bytes_total
        )

    # ================================================================== StreamView

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def first_seq(self) -> int:
        return self._index.first_seq if self._index else self._last_seq + 1

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def load(self, seq: int) -> StoredMsg | None:
        return self._store.load(seq) if seq in self._index else None

    def load_next(self, start_seq: int, subject_filter: str = "") -> StoredMsg | None:
        while True:
            seq = self._index.next_seq(start_seq, subject_filter)
            if seq is None:
                return None
            msg = self._store.load(seq)
            if msg is not None:
                return msg
            start_seq = seq + 1  # a record that failed its checksum is never served

    def load_last(self, subject_filter: str, up_to_seq: int = 0) -> StoredMsg | None:
        ceiling: int | None = up_to_seq if up_to_seq > 0 else None
        while True:
            seq = self._index.last_seq(subject_filter, ceiling)
            if seq is None:
                return None
            msg = self._store.load(seq)
            if msg is not None:
                return msg
            ceiling = seq - 1

    def seq_for_time(self, ts_ns: int) -> int:
        return self._index.seq_for_time(ts_ns) or 0

    def next_seq(self, start_seq: int, subject_filter: str = "") -> int | None:
        return self._index.next_seq(start_seq, subject_filter)

    def count_from(self, start_seq: int, subject_filter: str = "") -> int:
        return self._index.count(start_seq, subject_filter)

    def subject_of(self, seq: int) -> str | None:
        """The subject of the live message at ``seq`` (the consumers' view of the stream)."""
        meta = self._index.get(seq)
        return meta.subject if meta is not None else None

    def num_pending(self, start_seq: int, subject_filter: str = "") -> int:
        return self._index.count(start_seq, subject_filter)

    def multi_last(self, filters: list[str], up_to_seq: int, limit: int) -> list[int] | None:
        ceiling = up_to_seq if up_to_seq > 0 else self._last_seq
        return self._index.multi_last(filters, ceiling, limit)

    # ================================================================== persistence

    def _msg_size(self, subject: str, hdr: bytes, data: bytes) -> int:
        return limits.msg_size_bytes(self._config.storage, _utf8_len(subject), len(hdr), len(data))

    def adopt(self, index: int, num_replicas: int) -> None:
        """Make this stream (a restored backup) the state of a new log at ``index`` with
        ``num_replicas``: its applied index came from the log it was taken from, which means
        nothing to the new one, and the replica count is the restore's. Persists the meta.

        Only for the one replica that seeds a new group; the others copy its state by transfer,
        so this is no entry every replica must apply alike."""
        if index < 0:
            raise ValueError(f"adopted at index {index}")
        if num_replicas != self._config.num_replicas:
            self._set_config(self._config.model_copy(update={"num_replicas": num_replicas}))
        self._applied_index = index
        self._store.set_meta(self._encode_meta())

    def drop_consumers(self) -> None:
        """Forget every consumer (a backup restored without them) and persist the meta."""
        self.consumers = ConsumerSet()
        self._consumers_blob = b""
        self._store.set_meta(self._encode_meta())

    def meta_blob(self) -> bytes:
        """The engine meta blob exactly as ``apply`` persists it (state transfer ships it)."""
        return self._encode_meta()

    def _encode_meta(self) -> bytes:
        msg_id = self._last_msg_id.encode("utf-8", "surrogatepass")
        positions = (
            json.dumps(self._source_positions, sort_keys=True).encode()
            if self._source_positions
            else b""
        )
        return b"".join(
            (
                _META_HEAD.pack(
                    META_FORMAT_VERSION,
                    self._applied_index,
                    self._last_seq,
                    self._empty_first_seq,
                    self._last_ts_ns,
                    self._created_ns,
                ),
                _U32.pack(len(msg_id)),
                msg_id,
                _U32.pack(len(self._config_json)),
                self._config_json,
                _U32.pack(len(self._consumers_blob)),
                self._consumers_blob,
                _U32.pack(len(positions)),
                positions,
            )
        )

    def _restore_meta(self, meta: bytes) -> StreamConfig:
        decoded = _decode_meta(meta)
        self.consumers = decoded.consumers
        self._consumers_blob = decoded.consumers_blob
        self._source_positions = decoded.positions
        self._applied_index = decoded.applied
        self._last_seq = decoded.last_seq
        self._empty_first_seq = decoded.empty_first
        self._last_ts_ns = decoded.last_ts_ns
        self._created_ns = decoded.created_ns
        self._last_msg_id = decoded.msg_id
        return decoded.config

    def _rebuild_from_store(self, *, has_meta: bool) -> None:
        """Rebuild the indexes and the dedupe window from the stored messages."""
        window_ns = self._dedupe_window_ns
        ids: list[tuple[str, int, int]] = []
        last: StoredMsg | None = None
        for msg in self._store.scan():
            self._index_msg(msg.seq, msg.subject, msg.hdr, msg.data, msg.ts_ns)
            if msg.hdr and window_ns > 0:
                msg_id = get_header(msg.hdr, HDR_MSG_ID)
                if msg_id:
                    ids.append((msg_id, msg.seq, msg.ts_ns))
            last = msg
        if last is not None and last.seq > self._last_seq:
            # Stored past what the meta recorded (no meta yet, or meta written behind the data).
            self._last_seq = last.seq
            self._last_ts_ns = max(self._last_ts_ns, last.ts_ns)
            if not has_meta:
                self._last_msg_id = (get_header(last.hdr, HDR_MSG_ID) or "") if last.hdr else ""
        # The window as the last publish left it: ids younger than window at last_ts.
        for msg_id, seq, ts_ns in ids:
            if self._last_ts_ns - ts_ns < window_ns:
                self._dedupe[msg_id] = (seq, ts_ns)
                self._dedupe_order.append((msg_id, seq, ts_ns))
        self._check_invariants()


# ====================================================================== helpers


def _header(hdr: bytes, key: str) -> str | None:
    """``get_header`` behind a C-speed substring test: a message carries few of the keys."""
    return get_header(hdr, key) if holds(hdr, _HDR_KEY_BYTES[key]) else None


def _msg_hash(seq: int, meta: MsgMeta) -> int:
    return message_hash(seq, meta.subject, meta.ts_ns, meta.size_bytes, meta.digest)


def _error(error: ApiError) -> PubResult:
    return PubResult(0, False, error)


def _ts_of(idx: StreamIndex, seq: int) -> int:
    meta = idx.get(seq)
    if meta is None:
        raise AssertionError(f"seq {seq} not live")
    return meta.ts_ns


def _utf8_len(text: str) -> int:
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return len(text.encode("utf-8", "surrogatepass"))


def _decode_meta(meta: bytes) -> _DecodedMeta:
    """The engine meta written by ``Stream._meta_bytes``; raises StreamMetaError."""
    try:
        head = _META_HEAD.unpack_from(meta, 0)
        version, applied, last_seq, empty_first, last_ts_ns, created_ns = head
        if version not in (
            META_FORMAT_VERSION,
            META_FORMAT_VERSION_NO_SOURCES,
            META_FORMAT_VERSION_NO_CONSUMERS,
        ):
            raise StreamMetaError(f"unknown meta version {version}")
        pos = _META_HEAD.size
        (id_len,) = _U32.unpack_from(meta, pos)
        pos += _U32.size
        msg_id = meta[pos : pos + id_len].decode("utf-8", "surrogatepass")
        pos += id_len
        (cfg_len,) = _U32.unpack_from(meta, pos)
        pos += _U32.size
        config_json = meta[pos : pos + cfg_len]
        pos += cfg_len
        consumers_blob = positions_blob = b""
        if version >= META_FORMAT_VERSION_NO_SOURCES:
            (blob_len,) = _U32.unpack_from(meta, pos)
            pos += _U32.size
            consumers_blob = meta[pos : pos + blob_len]
            pos += blob_len
        if version >= META_FORMAT_VERSION:
            (blob_len,) = _U32.unpack_from(meta, pos)
            pos += _U32.size
            positions_blob = meta[pos : pos + blob_len]
            pos += blob_len
        if pos != len(meta):
            raise StreamMetaError("meta length mismatch")
        config = StreamConfig.model_validate_json(config_json)
        consumers = ConsumerSet.from_json(consumers_blob) if consumers_blob else ConsumerSet()
        positions = _source_positions(positions_blob)
    except (struct.error, UnicodeDecodeError, ValidationError, ValueError) as exc:
        raise StreamMetaError(f"bad stream meta: {exc}") from None
    return _DecodedMeta(
        config,
        consumers,
        bytes(consumers_blob),
        positions,
        applied,
        last_seq,
        empty_first,
        last_ts_ns,
        created_ns,
        msg_id,
    )
