"""The batched read a mirror uses to follow its upstream: one request, many messages, exact bytes.

A mirror must store the upstream's messages exactly (sequence, subject, header block, payload,
timestamp). Direct Get could carry them, but one NATS message per stored message, with headers
appended to each, costs a mirror catching up from far behind one round of parsing per message;
and a mirror's own replicas answer the upstream's Direct Get subjects (``mirror_direct``), so a
mirror would sometimes be answered by itself. Mirrors therefore ask the upstream's replicas on a
subject only those answer (``$JSC.MF.<stream>``, the cluster's business) with this request, and get
one reply holding up to ``FETCH_MSGS_MAX`` messages in the file store's checksummed record format.

Request (JSON, small): ``{"seq": N}`` or ``{"start_time_ns": T}`` (the first message at or after
it), optional ``"filter"`` (subject filter; empty = all) or ``"filters"`` (a message matching any
of them; a source with several subject transforms asks so), ``"max_msgs"``, ``"max_bytes"``.
Reply (binary): ``version u8 | first_seq u64 | last_seq u64 | complete u8 | count u32 |
created_ns i64 | records...`` where first/last are the upstream's state when it answered (for the
mirror's lag), created_ns when the upstream was created (a source's identity: a recreated
upstream is a different one),
``complete`` says the reply holds every matching message through ``last_seq`` (the limits did not
cut it), then ``count`` MSG records in ascending seq order, every message at or after the start
that matches the filter, up to the limits (at least one message when any matches, however big).

Must never: look at anything but the ``StreamView`` and the request; raise anything but
``FetchError`` on a bad request or reply.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

from engine import records
from engine.store import StoredMsg
from engine.view import StreamView

FETCH_FORMAT_VERSION: Final = 2
FETCH_MSGS_MAX: Final = 1024  # one reply carries at most this many messages...
FETCH_BYTES_MAX: Final = 4 * 1024 * 1024  # ...and stops after this many record bytes
FETCH_REQUEST_BYTES_MAX: Final = 64 * 1024
FETCH_FILTERS_MAX: Final = 256
_HEAD = struct.Struct("<BQQBIq")  # version, first, last, complete, count, created_ns


class FetchError(ValueError):
    """A fetch request or reply that cannot be used."""


@dataclass(frozen=True, slots=True)
class FetchRequest:
    seq: int = 0  # start at this sequence (0: use start_time_ns, or the first message)
    start_time_ns: int = 0
    filter: str = ""
    max_msgs: int = FETCH_MSGS_MAX
    max_bytes: int = FETCH_BYTES_MAX
    filters: tuple[str, ...] = ()

    def encode(self) -> bytes:
        doc: dict[str, object] = {"max_msgs": self.max_msgs, "max_bytes": self.max_bytes}
        if self.seq:
            doc["seq"] = self.seq
        if self.start_time_ns:
            doc["start_time_ns"] = self.start_time_ns
        if self.filter:
            doc["filter"] = self.filter
        if self.filters:
            doc["filters"] = list(self.filters)
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> FetchRequest:
        if len(raw) > FETCH_REQUEST_BYTES_MAX:
            raise FetchError(f"fetch request of {len(raw)} bytes")
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FetchError(f"fetch request is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise FetchError("fetch request is not an object")
        ints = {}
        for key, default, low, high in (
            ("seq", 0, 0, (1 << 64) - 1),
            ("start_time_ns", 0, 0, (1 << 63) - 1),
            ("max_msgs", FETCH_MSGS_MAX, 1, FETCH_MSGS_MAX),
            ("max_bytes", FETCH_BYTES_MAX, 1, FETCH_BYTES_MAX),
        ):
            value = doc.get(key, default)
            if type(value) is not int or not low <= value <= high:
                raise FetchError(f"fetch request {key} {value!r} not in [{low}, {high}]")
            ints[key] = value
        subject_filter = doc.get("filter", "")
        if not isinstance(subject_filter, str):
            raise FetchError("fetch request filter is not a string")
        filters = doc.get("filters", [])
        if (
            not isinstance(filters, list)
            or len(filters) > FETCH_FILTERS_MAX
            or not all(isinstance(f, str) and f for f in filters)
        ):
            raise FetchError(f"fetch request filters are not up to {FETCH_FILTERS_MAX} subjects")
        return cls(filter=subject_filter, filters=tuple(filters), **ints)


@dataclass(frozen=True, slots=True)
class FetchReply:
    first_seq: int  # the upstream's state when it answered
    last_seq: int
    msgs: list[StoredMsg]
    complete: bool = True  # every matching message through last_seq is in msgs
    created_ns: int = 0  # when the upstream was created

    def pending_after(self, seq: int) -> int:
        """Upper bound of the upstream messages above ``seq`` (the mirror's lag)."""
        return max(0, self.last_seq - seq)


def answer(view: StreamView, raw_request: bytes) -> bytes:
    """The reply to a fetch request, from the upstream's ``view``."""
    req = FetchRequest.decode(raw_request)
    start = req.seq
    if not start:
        start = view.seq_for_time(req.start_time_ns) if req.start_time_ns else view.first_seq
    body = bytearray()
    count = 0
    seq = max(start, 1)
    complete = False
    while True:
        msg = _next_matching(view, seq, req)
        if msg is None:
            complete = True
            break
        if count >= req.max_msgs or len(body) >= req.max_bytes:
            break
        try:
            records.append_sendable_msg(body, msg)
        except ValueError as exc:
            raise FetchError(str(exc)) from None
        count += 1
        seq = msg.seq + 1
    head = _HEAD.pack(
        FETCH_FORMAT_VERSION, view.first_seq, view.last_seq, complete, count, view.created_ns
    )
    return head + bytes(body)


def _next_matching(view: StreamView, seq: int, req: FetchRequest) -> StoredMsg | None:
    if not req.filters:
        return view.load_next(seq, req.filter)
    found = [m for f in req.filters if (m := view.load_next(seq, f)) is not None]
    return min(found, key=lambda m: m.seq) if found else None


def decode_reply(raw: bytes) -> FetchReply:
    if len(raw) < _HEAD.size:
        raise FetchError(f"fetch reply of {len(raw)} bytes is too short")
    version, first_seq, last_seq, complete, count, created_ns = _HEAD.unpack_from(raw)
    if version != FETCH_FORMAT_VERSION:
        raise FetchError(f"unknown fetch reply version {version}")
    try:
        msgs = records.decode_msg_records(raw[_HEAD.size :])
    except ValueError as exc:
        raise FetchError(str(exc)) from None
    if len(msgs) != count:
        raise FetchError(f"fetch reply holds {len(msgs)} messages, says {count}")
    if any(b.seq <= a.seq for a, b in pairwise(msgs)):
        raise FetchError("fetch reply messages are not in ascending order")
    if complete > 1:
        raise FetchError(f"fetch reply complete flag {complete}")
    return FetchReply(first_seq, last_seq, msgs, bool(complete), created_ns)
