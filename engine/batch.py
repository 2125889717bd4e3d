"""Atomic batch publish (ADR-50): the staging rules and the commit-time checks, without I/O.

Owns the two decisions nats-server 2.15 makes for a message that carries ``Nats-Batch-Id``
(stream.go ``processJetStreamAtomicBatchMsg``, jetstream_batching.go
``checkMsgHeadersPreClusteredProposal``), in the server's exact order and wording:

* ``BatchStager`` (one per stream, where the stream takes publishes): each batch message is
  staged (empty ack), rejected (an error PubAck, perhaps dropping its batch and naming the
  reason for a ``batch_abandoned`` advisory), or completes the batch (``CommitReady``: the staged
  messages, to be proposed as one ``BatchCommitEntry``). Staged messages live in memory only.
  Time arrives as ``now_ns`` from the caller, who also runs the idle timer (``expire``).
* ``check_batch_commit``, called by ``Stream.apply`` for a ``BatchCommitEntry``: every staged
  message checked against the stream as it was before the batch plus the batch's own running
  state (sequence, subjects, msg ids, sizes). Any failure rejects the whole batch, so a batch is
  stored whole with contiguous sequences, or not at all.

Every limit is a named constant here; a server config (``jetstream.limits.batch``) overrides
them through ``BatchLimits``.

Must never: read a clock, store or persist anything, or import from ``engine/stream.py`` (the
stream imports this module).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Final

from engine import limits
from engine.counter import check_increment, counter_payload
from engine.entries import BatchCommitEntry, InboundMsg
from engine.index import StreamIndex
from engine.ttl import parse_message_ttl
from protocol import errors
from protocol.errors import ApiError
from protocol.goconv import INT64_MAX, INT64_MIN, go_lower, parse_int64_as_uint64
from protocol.gojson import go_quote
from protocol.headers import get_header, holds, occurrences, remove_header
from protocol.models import StreamConfig

# ---------------------------------------------------------------------------------- headers

HDR_BATCH_ID: Final = "Nats-Batch-Id"
HDR_BATCH_SEQ: Final = "Nats-Batch-Sequence"
HDR_BATCH_COMMIT: Final = "Nats-Batch-Commit"
HDR_REQUIRED_API_LEVEL: Final = "Nats-Required-Api-Level"
COMMIT_STORE: Final = "1"  # store this message and commit
COMMIT_EOB: Final = "eob"  # commit without storing this message (2.14+)

_HDR_MSG_ID: Final = "Nats-Msg-Id"
_HDR_EXPECTED_STREAM: Final = "Nats-Expected-Stream"
_HDR_EXPECTED_LAST_SEQ: Final = "Nats-Expected-Last-Sequence"
_HDR_EXPECTED_LAST_SUBJ_SEQ: Final = "Nats-Expected-Last-Subject-Sequence"
_HDR_EXPECTED_LAST_SUBJ_SEQ_SUBJ: Final = "Nats-Expected-Last-Subject-Sequence-Subject"
_HDR_EXPECTED_LAST_MSG_ID: Final = "Nats-Expected-Last-Msg-Id"
_HDR_ROLLUP: Final = "Nats-Rollup"
_HDR_MSG_TTL: Final = "Nats-TTL"
_HDR_STREAM_SOURCE: Final = "Nats-Stream-Source"

# "\r\n<key>:": a key at the start of a header line (every block opens with NATS/1.0\r\n), so
# the first find of this is exactly the header nats-server's sliceHeader reads (staging hot path).
_BATCH_ID_LINE: Final = b"\r\n" + HDR_BATCH_ID.encode() + b":"
_BATCH_SEQ_LINE: Final = b"\r\n" + HDR_BATCH_SEQ.encode() + b":"
_COMMIT_LINE: Final = b"\r\n" + HDR_BATCH_COMMIT.encode() + b":"
_API_LEVEL_KEY: Final = HDR_REQUIRED_API_LEVEL.encode() + b":"
_NATS_PREFIX: Final = b"Nats-"
_BATCH_PREFIX: Final = b"Nats-Batch-"  # Nats-Batch-Id, -Sequence, -Commit: not checked at commit
_SCHEDULE_PREFIX: Final = b"Nats-Schedule"  # Nats-Schedule*, Nats-Scheduler

# ---------------------------------------------------------------------------------- limits

BATCH_ID_BYTES_MAX: Final = 64
BATCH_MSGS_MAX: Final = 1000  # stored messages per batch (an EOB commit message not counted)
BATCH_INFLIGHT_PER_STREAM_MAX: Final = 50
BATCH_INFLIGHT_TOTAL_MAX: Final = 1000  # open batches on the whole server
BATCH_IDLE_TIMEOUT_NS: Final = 10 * limits.NS_PER_S  # reset by every message of the batch
# The JetStream API level this server implements (jetstream_versioning.go JSApiLevel, v2.15).
JS_API_LEVEL: Final = 5

# ``reason`` of the batch_abandoned advisory (jetstream_events.go BatchAbandonReason).
ABANDON_TIMEOUT: Final = "timeout"
ABANDON_LARGE: Final = "large"
ABANDON_INCOMPLETE: Final = "incomplete"
ABANDON_UNSUPPORTED: Final = "unsupported"

# Store errors nats-server reports as 10077 (the same texts as engine/stream.py's).
_ERR_MAX_MSGS: Final = "maximum messages exceeded"
_ERR_MAX_BYTES: Final = "maximum bytes exceeded"
_ERR_MAX_MSGS_PER_SUBJECT: Final = "maximum messages per subject exceeded"
_ERR_MSG_TOO_LARGE: Final = "message too large"

ROLLUP_SUBJECT: Final = "sub"
ROLLUP_ALL: Final = "all"

_UINT64_MAX: Final = (1 << 64) - 1
_GO_ATOI: Final = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """The atomic batch limits in force (defaults as nats-server; server config overrides)."""

    inflight_per_stream_max: int = BATCH_INFLIGHT_PER_STREAM_MAX
    inflight_total_max: int = BATCH_INFLIGHT_TOTAL_MAX
    msgs_max: int = BATCH_MSGS_MAX
    idle_timeout_ns: int = BATCH_IDLE_TIMEOUT_NS

    def __post_init__(self) -> None:
        for name in ("inflight_per_stream_max", "inflight_total_max", "msgs_max"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.idle_timeout_ns < 1:
            raise ValueError("idle_timeout_ns must be positive")


@dataclass(slots=True)
class InflightCounter:
    """Open atomic batches on the whole server (nats-server ``globalInflightAtomicBatches``);
    one object shared by every stream's stager."""

    count: int = 0

    def try_acquire(self, limit: int) -> bool:
        if self.count + 1 > limit:
            return False
        self.count += 1
        return True

    def release(self) -> None:
        if self.count <= 0:
            raise AssertionError("released an atomic batch that was never counted")
        self.count -= 1


# ---------------------------------------------------------------------------------- outcomes


@dataclass(frozen=True, slots=True)
class Staged:
    """The message is staged; a reply subject gets an empty payload."""


STAGED: Final = Staged()


@dataclass(frozen=True, slots=True)
class Rejected:
    """An error PubAck. ``dropped``: the message's batch (if open) is gone; ``abandon_reason``:
    the reason of the advisory to publish, or None when nats-server sends none."""

    error: ApiError
    dropped: bool = False
    abandon_reason: str | None = None


@dataclass(frozen=True, slots=True)
class CommitReady:
    """The batch is complete: propose ``entry(ts_ns)``; its reply gets the commit's PubAck."""

    batch_id: str
    msgs: tuple[InboundMsg, ...]
    eob: bool

    def entry(self, ts_ns: int) -> BatchCommitEntry:
        return BatchCommitEntry(ts_ns, self.batch_id, self.msgs, self.eob)


StageOutcome = Staged | Rejected | CommitReady


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What applying a ``BatchCommitEntry`` did: the seq of the last stored message and how many
    were stored, or the error that rejected the whole batch (seq and count 0)."""

    seq: int
    count: int
    error: ApiError | None = None


# ---------------------------------------------------------------------------------- staging


def batch_id_of(hdr: bytes) -> str:
    """The message's ``Nats-Batch-Id`` ("" for none: an empty value is a plain publish)."""
    return _line_value(hdr, _BATCH_ID_LINE) or "" if hdr else ""


def _line_value_py(hdr: bytes, line_key: bytes) -> str | None:
    """``get_header`` for a key given as ``b"\r\n<key>:"``: the value after leading spaces, up to
    the line's CRLF; None when absent. Three lookups a batch message: the native build answers
    them in C (``protocol/_parser_c.c``; tests/engine/test_batch_native.py holds the two equal)."""
    start = hdr.find(line_key)
    if start < 0:
        return None
    start += len(line_key)
    end = hdr.find(b"\r\n", start)
    value = hdr[start:end] if end >= 0 else hdr[start:]
    return value.lstrip(b" ").decode("utf-8", "surrogateescape")


def _native_line_value() -> Callable[[bytes, bytes], str | None] | None:
    try:
        from protocol._parser_c import header_line_value
    except ImportError:  # no native build, or not one of the current sources
        return None
    return header_line_value


_line_value: Final[Callable[[bytes, bytes], str | None]] = _native_line_value() or _line_value_py


@dataclass(frozen=True, slots=True)
class _StageFacts:
    sealed: bool
    max_msg_size: int
    allow_atomic: bool


@dataclass(slots=True)
class _OpenBatch:
    deadline_ns: int
    last_seq: int = 0
    msgs: list[InboundMsg] = field(default_factory=list)


class BatchStager:
    """One stream's open atomic batches and the staging rules (nats-server's order)."""

    def __init__(self, batch_limits: BatchLimits, counter: InflightCounter) -> None:
        self._limits = batch_limits
        self._counter = counter
        self._open: dict[str, _OpenBatch] = {}
        # The config facts every staged message reads, taken once per config object (configs
        # are replaced, never changed in place; a model attribute is a dict lookup each time).
        self._facts_of: StreamConfig | None = None
        self._facts = _StageFacts(False, -1, False)

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, batch_id: object) -> bool:
        return batch_id in self._open

    @property
    def limits(self) -> BatchLimits:
        return self._limits

    def staged_count(self, batch_id: str) -> int:
        """Messages staged so far for an open batch (0 if it is not open)."""
        batch = self._open.get(batch_id)
        return len(batch.msgs) if batch is not None else 0

    def stage(
        self, msg: InboundMsg, batch_id: str, config: StreamConfig, now_ns: int
    ) -> StageOutcome:
        """Decide what a message with a non-empty ``Nats-Batch-Id`` does (see module doc)."""
        hdr = msg.hdr
        facts = self._facts
        if config is not self._facts_of:
            facts = self._facts = _StageFacts(
                config.sealed, config.max_msg_size, config.allow_atomic
            )
            self._facts_of = config
        if facts.sealed:
            return Rejected(ApiError(errors.STREAM_SEALED))
        max_size = facts.max_msg_size
        if max_size >= 0 and (len(hdr) > max_size or len(msg.data) > max_size - len(hdr)):
            return Rejected(ApiError(errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM))
        if not facts.allow_atomic:
            return Rejected(ApiError(errors.ATOMIC_PUBLISH_DISABLED))
        if len(batch_id) > BATCH_ID_BYTES_MAX // 4 and _byte_len(batch_id) > BATCH_ID_BYTES_MAX:
            return Rejected(ApiError(errors.ATOMIC_PUBLISH_INVALID_BATCH_ID))
        seq = parse_uint64(_line_value(hdr, _BATCH_SEQ_LINE))
        if seq is None:
            return Rejected(ApiError(errors.ATOMIC_PUBLISH_MISSING_SEQ))
        commit_value = _line_value(hdr, _COMMIT_LINE)
        eob = commit_value == COMMIT_EOB
        size = seq - 1 if eob else seq  # an EOB message is not counted
        batch = self._open.get(batch_id)
        if batch is None:
            if seq != 1:
                if size > self._limits.msgs_max:
                    return self._too_large()
                return Rejected(ApiError(errors.ATOMIC_PUBLISH_INCOMPLETE_BATCH))
            rejected = self._open_batch(batch_id, now_ns)
            if rejected is not None:
                return rejected
            batch = self._open[batch_id]
        if commit_value is not None and not eob and commit_value != COMMIT_STORE:
            self._drop(batch_id)
            return Rejected(ApiError(errors.ATOMIC_PUBLISH_INVALID_BATCH_COMMIT), dropped=True)
        if holds(hdr, _API_LEVEL_KEY):
            level = get_header(hdr, HDR_REQUIRED_API_LEVEL)
            if level:
                if not api_level_supported(level):
                    self._drop(batch_id)
                    error = ApiError(errors.REQUIRED_API_LEVEL)
                    return Rejected(error, dropped=True, abandon_reason=ABANDON_UNSUPPORTED)
                msg = InboundMsg(msg.subject, remove_header(hdr, HDR_REQUIRED_API_LEVEL), msg.data)
        # The idle timer is reset here; one already due has (in nats-server) begun its cleanup.
        timed_out = now_ns >= batch.deadline_ns
        batch.deadline_ns = now_ns + self._limits.idle_timeout_ns
        batch.last_seq += 1
        if batch.last_seq != seq or timed_out or (seq == 1 and eob):
            self._drop(batch_id)
            error = ApiError(errors.ATOMIC_PUBLISH_INCOMPLETE_BATCH)
            return Rejected(error, dropped=True, abandon_reason=ABANDON_INCOMPLETE)
        if size > self._limits.msgs_max:
            self._drop(batch_id)
            return self._too_large(abandon=True)
        if commit_value is None:
            batch.msgs.append(msg)
            return STAGED
        if not eob:
            batch.msgs.append(msg)
        self._drop(batch_id)
        return CommitReady(batch_id, tuple(batch.msgs), eob)

    def _open_batch(self, batch_id: str, now_ns: int) -> Rejected | None:
        if len(self._open) + 1 > self._limits.inflight_per_stream_max:
            return Rejected(ApiError(errors.ATOMIC_PUBLISH_TOO_MANY_INFLIGHT))
        if not self._counter.try_acquire(self._limits.inflight_total_max):
            return Rejected(ApiError(errors.ATOMIC_PUBLISH_TOO_MANY_INFLIGHT))
        self._open[batch_id] = _OpenBatch(now_ns + self._limits.idle_timeout_ns)
        return None

    def _too_large(self, *, abandon: bool = False) -> Rejected:
        error = ApiError(errors.ATOMIC_PUBLISH_TOO_LARGE_BATCH, size=self._limits.msgs_max)
        if abandon:
            return Rejected(error, dropped=True, abandon_reason=ABANDON_LARGE)
        return Rejected(error)

    def _drop(self, batch_id: str) -> None:
        if self._open.pop(batch_id, None) is not None:
            self._counter.release()

    # ------------------------------------------------------------------ the idle timer

    def next_deadline_ns(self) -> int | None:
        """When the earliest open batch passes its idle timeout (None: nothing open)."""
        if not self._open:
            return None
        return min(batch.deadline_ns for batch in self._open.values())

    def expire(self, now_ns: int) -> list[str]:
        """Abandon every batch idle past its timeout; their ids (advisory reason ``timeout``)."""
        due = [bid for bid, batch in self._open.items() if batch.deadline_ns <= now_ns]
        for batch_id in due:
            self._drop(batch_id)
        return due

    def abandon(self, batch_id: str) -> bool:
        """Drop one open batch (no reply is owed to anyone); False if it was not open."""
        if batch_id not in self._open:
            return False
        self._drop(batch_id)
        return True

    def clear(self) -> list[str]:
        """Drop every open batch silently (allow_atomic switched off, stream closed): their ids."""
        dropped = list(self._open)
        for batch_id in dropped:
            self._drop(batch_id)
        return dropped


def parse_uint64(value: str | None) -> int | None:
    """util.go ``parseUint64``: ASCII decimal digits only, no sign, at most 2^64-1."""
    if not value or not value.isascii() or not value.isdigit():
        return None
    number = int(value)
    return number if number <= _UINT64_MAX else None


def api_level_supported(value: str) -> bool:
    """jetstream_versioning.go ``errorOnRequiredApiLevel`` inverted: Go ``strconv.Atoi`` must
    parse the value (optional sign, decimal digits, int64 range) and it must be <= our level."""
    if not value.isascii() or _GO_ATOI.fullmatch(value) is None:
        return False
    level = int(value)
    return INT64_MIN <= level <= INT64_MAX and level <= JS_API_LEVEL


def _byte_len(text: str) -> int:
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogateescape"))


# ---------------------------------------------------------------------------------- commit


class CheckedMsg:
    """A batch message that passed the commit checks, as it will be stored. (A slotted class,
    not a NamedTuple, whose constructor stays interpreted in a compiled module: one is built per
    message of every committed batch.)"""

    __slots__ = ("msg", "msg_id", "rollup", "size_bytes", "ttl_s")

    def __init__(
        self, msg: InboundMsg, msg_id: str, rollup: str, size_bytes: int, ttl_s: int
    ) -> None:
        self.msg = msg
        self.msg_id = msg_id
        self.rollup = rollup  # "", ROLLUP_SUBJECT or ROLLUP_ALL
        self.size_bytes = size_bytes  # accounting size (limits.msg_size_bytes)
        self.ttl_s = ttl_s  # Nats-TTL in seconds: 0 none, -1 never


@dataclass(slots=True)
class _Running:
    """The batch's own state while it is checked (nats-server ``batchStagedDiff``)."""

    # the config facts every message's check reads, taken once per batch (a config attribute is
    # a lookup in the model's dict each time)
    storage: str = "file"
    counters_on: bool = False
    discard_new: bool = False
    msg_ids: set[str] = field(default_factory=set)
    subject_ops: dict[str, int] = field(default_factory=dict)
    msgs: int = 0
    size_bytes: int = 0
    expected_per_subject: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)  # totals the batch has written


CounterTotal = Callable[[str], int | ApiError]  # a subject's counter total before the batch


def _no_counters(_subject: str) -> int | ApiError:
    return 0


def check_batch_commit(
    msgs: Sequence[InboundMsg],
    config: StreamConfig,
    index: StreamIndex,
    dedupe: Container[str],
    last_seq: int,
    counter_total: CounterTotal = _no_counters,
) -> list[CheckedMsg] | ApiError:
    """Every message of a batch against the stream before it (``index``, ``dedupe``,
    ``last_seq``, ``counter_total``) and the messages before it in the batch; the first failure
    is the answer. On a counter stream each checked message carries its new total."""
    if not config.allow_atomic:
        return ApiError(errors.ATOMIC_PUBLISH_DISABLED)
    if not msgs:
        return ApiError(errors.ATOMIC_PUBLISH_INCOMPLETE_BATCH)
    running = _Running(config.storage, config.allow_msg_counter, config.discard == "new")
    checked: list[CheckedMsg] = []
    for position, msg in enumerate(msgs):
        hdr = msg.hdr
        # Headers other than the batch's own are rare; only they need the lookups below.
        interpreted = bool(hdr) and occurrences(hdr, _NATS_PREFIX) != occurrences(
            hdr, _BATCH_PREFIX
        )
        if interpreted and get_header(hdr, _HDR_EXPECTED_LAST_MSG_ID):
            header = _HDR_EXPECTED_LAST_MSG_ID
            return ApiError(errors.ATOMIC_PUBLISH_UNSUPPORTED_HEADER_BATCH, header=header)
        if interpreted and holds(hdr, _SCHEDULE_PREFIX):
            # jetraft does not check schedules inside a batch yet: refused, not stored unchecked
            header = _SCHEDULE_PREFIX.decode()
            return ApiError(errors.ATOMIC_PUBLISH_UNSUPPORTED_HEADER_BATCH, header=header)
        outcome = _check_one(
            msg, config, index, dedupe, last_seq + position, running, interpreted, counter_total
        )
        if isinstance(outcome, ApiError):
            return outcome
        checked.append(outcome)
    return checked


def _check_one(
    msg: InboundMsg,
    config: StreamConfig,
    index: StreamIndex,
    dedupe: Container[str],
    running_seq: int,
    running: _Running,
    interpreted: bool,
    counter_total: CounterTotal,
) -> CheckedMsg | ApiError:
    """checkMsgHeadersPreClusteredProposal for one message (schedules aside: jetraft has none).
    ``interpreted``: the header has a ``Nats-`` key besides the batch's."""
    subject, hdr, data = msg.subject, msg.hdr, msg.data
    subject_len = _byte_len(subject)
    storage = running.storage
    size = limits.msg_size_bytes(storage, subject_len, len(hdr), len(data))
    if storage == "file" and limits.filestore_record_too_large(size):
        return ApiError(errors.STREAM_STORE_FAILED, err=_ERR_MSG_TOO_LARGE)
    msg_id, rollup, ttl_s, incr = "", "", 0, None
    if hdr:
        if len(hdr) > limits.HEADER_BYTES_MAX:
            return ApiError(errors.STREAM_HEADER_EXCEEDS_MAXIMUM)
        if interpreted:
            outcome = _check_headers(msg, config, index, dedupe, running_seq, running)
            if isinstance(outcome, ApiError):
                return outcome
            msg_id, rollup, ttl_s, incr = outcome
    if running.counters_on:
        if incr is None:
            return ApiError(errors.MESSAGE_INCR_MISSING)
        previous = running.counters.get(subject)
        if previous is None:
            before = counter_total(subject)
            if isinstance(before, ApiError):
                return before
            previous = before
        running.counters[subject] = total = previous + incr
        msg = InboundMsg(subject, hdr, counter_payload(total))
        size = limits.msg_size_bytes(storage, subject_len, len(hdr), len(msg.data))
    running.subject_ops[subject] = running.subject_ops.get(subject, 0) + 1
    running.msgs += 1
    running.size_bytes += size
    if running.discard_new:
        error = _discard_new_error(msg, config, index, running)
        if error is not None:
            return ApiError(errors.STREAM_STORE_FAILED, err=error)
    return CheckedMsg(msg, msg_id, rollup, size, ttl_s)


def _check_headers(
    msg: InboundMsg,
    config: StreamConfig,
    index: StreamIndex,
    dedupe: Container[str],
    running_seq: int,
    running: _Running,
) -> tuple[str, str, int, int | None] | ApiError:
    """The header checks of one batch message: (msg id, rollup, ttl seconds, counter
    increment) or the error."""
    hdr = msg.hdr
    incr = check_increment(hdr, msg.data, config.allow_msg_counter)
    if isinstance(incr, ApiError):
        return incr
    expected_stream = get_header(hdr, _HDR_EXPECTED_STREAM)
    if expected_stream and expected_stream != config.name:
        return ApiError(errors.STREAM_NOT_MATCH)
    ttl_s = 0
    ttl_value = get_header(hdr, _HDR_MSG_TTL)
    if ttl_value:
        ttl_s, ttl_ok = parse_message_ttl(ttl_value)
        if ttl_s != 0 or not ttl_ok:
            if not config.allow_msg_ttl:
                return ApiError(errors.MESSAGE_TTL_DISABLED)
            if not ttl_ok:
                return ApiError(errors.MESSAGE_TTL_INVALID)
    msg_id = get_header(hdr, _HDR_MSG_ID) or ""
    if msg_id:
        if msg_id in running.msg_ids or msg_id in dedupe:
            return ApiError(errors.ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE)
        running.msg_ids.add(msg_id)
    if get_header(hdr, _HDR_STREAM_SOURCE):
        return ApiError(errors.MESSAGE_SOURCE_HEADER_NOT_ALLOWED)
    error = _check_expected_seqs(msg, index, running_seq, running)
    if error is not None:
        return error
    rollup_value = get_header(hdr, _HDR_ROLLUP)
    rollup = go_lower(rollup_value) if rollup_value else ""
    if rollup:
        error = _check_rollup(msg.subject, rollup, config, running)
        if error is not None:
            return error
    return msg_id, rollup, ttl_s, incr


def _check_expected_seqs(
    msg: InboundMsg, index: StreamIndex, running_seq: int, running: _Running
) -> ApiError | None:
    """Nats-Expected-Last-Sequence against the running seq (only the first message may carry a
    matching one), then Nats-Expected-Last-Subject-Sequence (not on a subject the batch already
    wrote; one lookup per subject, cached for the rest of the batch)."""
    hdr = msg.hdr
    last_seq_value = get_header(hdr, _HDR_EXPECTED_LAST_SEQ)
    if last_seq_value:
        if parse_int64_as_uint64(last_seq_value) != running_seq:
            return ApiError(errors.STREAM_WRONG_LAST_SEQUENCE, seq=running_seq)
        if running.subject_ops:
            return ApiError(errors.STREAM_WRONG_LAST_SEQUENCE_CONSTANT)
    subj_seq_value = get_header(hdr, _HDR_EXPECTED_LAST_SUBJ_SEQ)
    override = get_header(hdr, _HDR_EXPECTED_LAST_SUBJ_SEQ_SUBJ)
    if subj_seq_value:
        expected = parse_int64_as_uint64(subj_seq_value)
        seq_subject = override or msg.subject
        if seq_subject in running.subject_ops:
            return ApiError(errors.STREAM_WRONG_LAST_SEQUENCE_CONSTANT)
        found = running.expected_per_subject.get(seq_subject)
        if found is None:
            found = index.last_seq(seq_subject) or 0
            if found != expected:
                return ApiError(errors.STREAM_WRONG_LAST_SEQUENCE, seq=found)
            running.expected_per_subject[seq_subject] = found
        elif found != expected:
            return ApiError(errors.STREAM_WRONG_LAST_SEQUENCE, seq=found)
    elif override:
        return ApiError(errors.STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY)
    return None


def _check_rollup(
    subject: str, rollup: str, config: StreamConfig, running: _Running
) -> ApiError | None:
    if not config.allow_rollup_hdrs or config.deny_purge:
        return ApiError(errors.STREAM_ROLLUP_FAILED, err="rollup not permitted")
    if rollup == ROLLUP_SUBJECT:
        if subject in running.subject_ops:
            return ApiError(errors.STREAM_ROLLUP_FAILED, err="batch rollup sub invalid")
        return None
    if rollup == ROLLUP_ALL:
        if running.subject_ops:
            return ApiError(errors.STREAM_ROLLUP_FAILED, err="batch rollup all invalid")
        return None
    return ApiError(errors.STREAM_ROLLUP_FAILED, err=f"rollup value invalid: {go_quote(rollup)}")


def _discard_new_error(
    msg: InboundMsg, config: StreamConfig, index: StreamIndex, running: _Running
) -> str | None:
    """Discard-new limits for the stream plus the batch so far (this message included)."""
    if config.discard != "new":
        return None
    if config.max_msgs > 0 and len(index) + running.msgs > config.max_msgs:
        return _ERR_MAX_MSGS
    if config.max_bytes > 0 and index.bytes_total + running.size_bytes > config.max_bytes:
        return _ERR_MAX_BYTES
    per_subject_max = config.max_msgs_per_subject
    if config.discard_new_per_subject and per_subject_max > 0:
        if not get_header(msg.hdr, _HDR_ROLLUP):
            in_batch = running.subject_ops[msg.subject]
            if index.subject_count(msg.subject) + in_batch > per_subject_max:
                return _ERR_MAX_MSGS_PER_SUBJECT
    return None
