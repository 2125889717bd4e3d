"""Per-message TTL (ADR-43) and subject delete markers, as nats-server 2.15 implements them.

Owns: reading the ``Nats-TTL`` header exactly as stream.go ``parseMessageTTL`` does (Go durations,
bare seconds, ``never``), the subject-delete-marker floor that raises a short TTL and rewrites the
stored header, the marker's header block, and ``TtlIndex``: the deadline index that finds every
message due by a time without a scan (a sorted list of ``(deadline_ns, seq)``), the set of
``never`` messages (exempt from max_age too), and a cursor that lets the max_age walk skip those.

The stream decides *what* to remove and applies it (``engine/stream.py`` ``apply_expire``): this
module only answers "which seqs are due at ts" from data the log put there. Deadlines use Go's
int64 arithmetic (``ts + ttl * 1s`` wraps), so a huge TTL that overflows is due at once, as on
nats-server (probed: ``Nats-TTL: 9223372037`` expired within a second).

Scheduling state (which due messages could not be removed because their marker was refused, and
when to try again) lives here too. It only steers ``next_expiry_ns`` — when the leader proposes the
next expire entry — and never what an expire entry removes, so a replica that restarted and lost
it still applies every entry exactly as the others do.

Must never: read clocks, touch the store, or remove anything itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, Protocol

from sortedcontainers import SortedList  # type: ignore[import-untyped]

from engine import limits
from engine.index import StreamIndex
from protocol.goconv import go_lower, parse_int64, wrap_int64
from protocol.headers import HDR_LINE_CRLF, append_headers, get_header, holds, remove_header
from protocol.models import StreamConfig
from protocol.timefmt import format_go_duration, parse_go_duration

HDR_MSG_TTL: Final = "Nats-TTL"
HDR_MSG_TTL_BYTES: Final = HDR_MSG_TTL.encode()
HDR_MARKER_REASON: Final = "Nats-Marker-Reason"
HDR_ROLLUP: Final = "Nats-Rollup"
HDR_KV_OPERATION: Final = "KV-Operation"
KV_OPERATION_PURGE: Final = "PURGE"
# The only reason nats-server ever writes (for max_age and Nats-TTL expiry alike).
MARKER_REASON_MAX_AGE: Final = "MaxAge"
MARKER_ROLLUP: Final = "sub"
TTL_NEVER_TEXT: Final = "never"

# parse results: seconds > 0, TTL_NONE (no header, empty value, or "00"), TTL_NEVER.
TTL_NONE: Final = 0
TTL_NEVER: Final = -1

# sdm.go: a removal whose marker could not be stored is proposed again after this long.
MARKER_RETRY_INTERVAL_NS: Final = 2 * limits.NS_PER_S


def duration_seconds(duration_ns: int) -> int:
    """Go ``int64(d.Seconds())``: float64 seconds truncated, rounding exactly as Go does."""
    whole, frac = divmod(abs(duration_ns), limits.NS_PER_S)
    seconds = int(float(whole) + float(frac) / 1e9)
    return -seconds if duration_ns < 0 else seconds


def parse_message_ttl(value: str) -> tuple[int, bool]:
    """stream.go ``parseMessageTTL``: (seconds, ok); -1 = never; (0, True) = no TTL."""
    if go_lower(value) == TTL_NEVER_TEXT:
        return TTL_NEVER, True
    try:
        duration_ns = parse_go_duration(value)
    except ValueError:
        seconds = parse_int64(value)
        if seconds < 0:
            return TTL_NONE, False
        return seconds, True
    if duration_ns < limits.MSG_TTL_MIN_S * limits.NS_PER_S:
        return TTL_NONE, False
    return duration_seconds(duration_ns), True


def header_ttl(hdr: bytes) -> int | None:
    """stream.go ``getMessageTTL`` of a header block: seconds, TTL_NONE, TTL_NEVER, or None
    when the value does not parse."""
    value = get_header(hdr, HDR_MSG_TTL) if holds(hdr, HDR_MSG_TTL_BYTES) else None
    if not value:
        return TTL_NONE
    ttl_s, ok = parse_message_ttl(value)
    return ttl_s if ok else None


def deadline_ns(ts_ns: int, ttl_s: int) -> int:
    """When a message stored at ts_ns with a TTL of ttl_s seconds is due (Go int64 wraps)."""
    return wrap_int64(ts_ns + wrap_int64(ttl_s * limits.NS_PER_S))


def marker_ttl_s(config: StreamConfig) -> int:
    """``int64(cfg.SubjectDeleteMarkerTTL.Seconds())``; 0 when markers are off."""
    if config.subject_delete_marker_ttl <= 0:
        return 0
    return duration_seconds(config.subject_delete_marker_ttl)


def raise_to_marker_floor(hdr: bytes, config: StreamConfig) -> bytes | None:
    """The header with a TTL below the marker TTL raised to it (stream.go: unless
    max_msgs_per_subject is 1): the Nats-TTL line is removed and re-added last, as integer
    seconds (probed: ``Nats-TTL: 1s`` is stored as ``Nats-TTL: 5``). None when unchanged."""
    ttl_s = header_ttl(hdr)
    if ttl_s is None or ttl_s <= 0 or config.max_msgs_per_subject == 1:
        return None
    floor_s = marker_ttl_s(config)
    if ttl_s >= floor_s:
        return None
    return append_headers(remove_header(hdr, HDR_MSG_TTL), [(HDR_MSG_TTL, str(floor_s))])


def marker_header(ttl_s: int) -> bytes:
    """The header block of a subject delete marker (memstore/filestore ``handleRemovalOrSdm``)."""
    ttl_text = format_go_duration(ttl_s * limits.NS_PER_S)
    return (
        HDR_LINE_CRLF
        + f"{HDR_MARKER_REASON}: {MARKER_REASON_MAX_AGE}\r\n".encode()
        + f"{HDR_MSG_TTL}: {ttl_text}\r\n{HDR_ROLLUP}: {MARKER_ROLLUP}\r\n\r\n".encode()
    )


def is_subject_delete_marker(hdr: bytes) -> bool:
    """sdm.go ``isSubjectDeleteMarker``: a non-empty Nats-Marker-Reason, or KV-Operation PURGE
    (exact case). Removing such a message never leaves another marker."""
    if not hdr:
        return False
    return bool(get_header(hdr, HDR_MARKER_REASON)) or (
        get_header(hdr, HDR_KV_OPERATION) == KV_OPERATION_PURGE
    )


class _SortedPairs(Protocol):
    """The part of ``sortedcontainers.SortedList`` used here (the package ships no types)."""

    def add(self, value: tuple[int, int]) -> None: ...
    def remove(self, value: tuple[int, int]) -> None: ...
    def irange(self, maximum: tuple[int, int] | None = None) -> Iterator[tuple[int, int]]: ...
    def __iter__(self) -> Iterator[tuple[int, int]]: ...
    def __len__(self) -> int: ...


def _new_pairs() -> _SortedPairs:
    pairs: _SortedPairs = SortedList()
    return pairs


class TtlIndex:
    """TTL deadlines and ``never`` messages of one stream's live messages.

    Deadlines are kept only while the stream has ``allow_msg_ttl`` (``tracking``), as
    nats-server keeps its timed hash wheel only then; ``never`` is honoured against max_age
    whatever the setting, as nats-server reads the header in its max_age walk.
    """

    __slots__ = (
        "_blocked",
        "_by_deadline",
        "_deadline_of",
        "_mortal_from_seq",
        "_never",
        "_retry_at_ns",
        "tracking",
    )

    def __init__(self, *, tracking: bool) -> None:
        self.tracking = tracking
        self._by_deadline = _new_pairs()
        self._deadline_of: dict[int, int] = {}
        self._never: set[int] = set()
        # Every live seq below it is a "never" message (a cache: only cost depends on it).
        self._mortal_from_seq = 0
        # Scheduling only (see the module docstring): due seqs whose marker was refused.
        self._blocked: set[int] = set()
        self._retry_at_ns = 0

    # ------------------------------------------------------------------ maintenance

    def on_stored(self, seq: int, ts_ns: int, hdr: bytes) -> None:
        """A message with a Nats-TTL header was stored (or found on open) at ts_ns."""
        ttl_s = header_ttl(hdr)
        if ttl_s is None or ttl_s == TTL_NONE:
            return
        if ttl_s == TTL_NEVER:
            self._never.add(seq)
        elif self.tracking:
            deadline = deadline_ns(ts_ns, ttl_s)
            self._deadline_of[seq] = deadline
            self._by_deadline.add((deadline, seq))

    def forget(self, seq: int) -> None:
        """The message is gone (expired, deleted, purged, or removed by a limit)."""
        deadline = self._deadline_of.pop(seq, None)
        if deadline is not None:
            self._by_deadline.remove((deadline, seq))
        if self._never:
            self._never.discard(seq)
        if self._blocked:
            self._blocked.discard(seq)

    def clear(self) -> None:
        """Every message is gone."""
        self._by_deadline = _new_pairs()
        self._deadline_of.clear()
        self._never.clear()
        self._blocked.clear()

    def stop_tracking(self) -> None:
        """TTLs were switched off: drop the deadlines (``never`` still escapes max_age)."""
        self.tracking = False
        self._by_deadline = _new_pairs()
        self._deadline_of.clear()

    @property
    def tracked(self) -> int:
        """How many messages this index knows (0: ``forget`` has nothing to do)."""
        return len(self._deadline_of) + len(self._never) + len(self._blocked)

    # ------------------------------------------------------------------ queries

    def deadline_of(self, seq: int) -> int | None:
        return self._deadline_of.get(seq)

    def is_never(self, seq: int) -> bool:
        return seq in self._never

    def due(self, now_ns: int) -> list[int]:
        """Seqs whose TTL deadline is <= now_ns, ascending by seq (nats-server sorts them)."""
        if not self._deadline_of:
            return []
        return sorted(seq for _, seq in self._by_deadline.irange(maximum=(now_ns, 1 << 64)))

    def max_age_due(self, idx: StreamIndex, cutoff_ns: int) -> list[int]:
        """Live seqs stored at or before cutoff_ns that are not ``never``, ascending.

        Walks from the first live message that is not ``never`` (the cursor moves past leading
        ``never`` messages once, not on every call) and stops at the first one too young."""
        out: list[int] = []
        for seq in self._mortal_seqs(idx):
            meta = idx.get(seq)
            if meta is None or meta.ts_ns > cutoff_ns:
                break
            out.append(seq)
        return out

    def _mortal_seqs(self, idx: StreamIndex) -> Iterator[int]:
        """Live seqs that are not ``never``, ascending from the cursor; moves the cursor past
        the leading ``never`` ones as it meets them."""
        never = self._never
        leading = True
        for seq in idx.seqs(minimum=self._mortal_from_seq):
            if seq in never:
                if leading:
                    self._mortal_from_seq = seq + 1
                continue
            leading = False
            yield seq

    # ------------------------------------------------------------------ scheduling

    def note_blocked(self, seq: int, now_ns: int) -> None:
        """A due message stays because its marker was refused: retry it later, not at once."""
        self._blocked.add(seq)
        self._retry_at_ns = now_ns + MARKER_RETRY_INTERVAL_NS

    def next_expiry_ns(self, idx: StreamIndex, max_age_ns: int) -> int | None:
        """When the next expire entry is worth proposing: the earliest TTL deadline or max_age
        expiry of a message that is not blocked, or the retry time of blocked ones."""
        blocked = self._blocked
        if max_age_ns <= 0 and not blocked and not self._by_deadline:
            return None  # asked after every applied entry: most streams have nothing to expire
        best: int | None = None
        stale: list[int] = []
        for deadline, seq in self._by_deadline:
            if seq not in idx:
                stale.append(seq)
            elif seq not in blocked:
                best = deadline
                break
        stale += [seq for seq in blocked if seq not in idx]
        for seq in stale:  # removed without ``forget``: a seq is never live again, so drop it
            self.forget(seq)
        if max_age_ns > 0:
            for seq in self._mortal_seqs(idx):
                meta = idx.get(seq)
                if seq in blocked or meta is None:
                    continue
                due = meta.ts_ns + max_age_ns
                best = due if best is None else min(best, due)
                break
        if blocked:
            best = self._retry_at_ns if best is None else min(best, self._retry_at_ns)
        return best
