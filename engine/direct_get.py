"""Direct Get (ADR-31): the replies to ``$JS.API.DIRECT.GET.<stream>[.<subject>]``, as data.

A pure function of a StreamView and one request, so that every replica and mirror answers from
its local state with exactly nats-server 2.15.1's bytes (stream.go ``processDirectGetRequest``,
``processDirectGetLastBySubjectRequest``, ``getDirectRequest``, ``getDirectMulti``): the same
validation order and status lines (412, 408 Empty / Malformed / Bad Request, 404 Message Not
Found / No Results, 413, 204 EOB), the same appended headers in the same order, the same batch
and multi-last walks, quirks included (``no_hdr`` never decrements the EOB's pending count; a
batch whose first lookup misses is a lone 404 without EOB; a negative ``batch`` sends only the
EOB; ``up_to_seq`` past the last sequence is "No Results", as nats-server's file store says).

Beyond nats-server (read-your-writes): a request may carry ``min_last_seq``, the lowest stream
sequence its answer must reflect. A valid request whose ``min_last_seq`` is above the view's
``last_seq`` is not answered from that view: :func:`try_direct_get` says so (:class:`NotApplied`)
so that the host can wait for its applies, and :func:`direct_get` answers ``412 Min Last Sequence
Not Applied``. Invalid requests get nats-server's error whatever ``min_last_seq`` says, and a
request whose ``min_last_seq`` is met gets exactly nats-server's answer (which ignores the key).

Not reproduced: nats-server recomputes the EOB's pending count when the stream grew while the
batch was being sent; a view is a snapshot, so it never grows here.

Must never: mutate the view, read a clock, or answer a request without a reply subject (the
caller drops those, as nats-server does).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final, NamedTuple

from engine.get_request import (
    INT64_MAX,
    INT64_MIN,
    GetRequestError,
    MsgGetRequest,
    decode_get_request,
)
from engine.msg_get import lookup, seq_from_time
from engine.store import StoredMsg
from engine.view import StreamView
from protocol.headers import get_header
from protocol.timefmt import format_rfc3339nano

DIRECT_GET_GROUP: Final = "_sys_"  # nats-server dgetGroup = sysGroup
DIRECT_GET_PREFIX: Final = "$JS.API.DIRECT.GET."
REQUIRED_API_LEVEL_HEADER: Final = "Nats-Required-Api-Level"
JS_API_LEVEL: Final = 5  # nats-server 2.15's JSApiLevel
# stream.go getDirectMulti: const maxAllowedResponses = 1024
MAX_ALLOWED_RESPONSES: Final = 1024
# Default max_bytes of a batch: the server's max_pending (MAX_PENDING_SIZE, 64 MiB).
MAX_PENDING_SIZE_BYTES: Final = 64 * 1024 * 1024

_STATUS_412: Final = b"NATS/1.0 412 Required Api Level\r\n\r\n"
_STATUS_412_MIN_SEQ: Final = b"NATS/1.0 412 Min Last Sequence Not Applied\r\n\r\n"
_STATUS_408_EMPTY: Final = b"NATS/1.0 408 Empty Request\r\n\r\n"
_STATUS_408_MALFORMED: Final = b"NATS/1.0 408 Malformed Request\r\n\r\n"
_STATUS_408_BAD: Final = b"NATS/1.0 408 Bad Request\r\n\r\n"
_STATUS_404_NOT_FOUND: Final = b"NATS/1.0 404 Message Not Found\r\n\r\n"
_STATUS_404_NO_RESULTS: Final = b"NATS/1.0 404 No Results\r\n\r\n"
_STATUS_413: Final = b"NATS/1.0 413 Too Many Results\r\n\r\n"
_HDR_LINE: Final = b"NATS/1.0\r\n"
_CRLF_LEN: Final = 2
# The headers a reply appends to the stored block (minus its final CRLF), as one bytes format:
# (stored block, "Nats-Stream: <name>\r\nNats-Subject: ", subject, seq, timestamp[, pending, last]).
_APPENDED: Final = b"%s%s%s\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n"
_APPENDED_SINGLE: Final = _APPENDED + b"\r\n"
_APPENDED_BATCH: Final = _APPENDED + b"Nats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n\r\n"
# The body of a get by sequence (``{"seq":N}``, nats-py's ``{"seq": N}``) is answered without the
# JSON decoder: one object whose only key is exactly "seq", a positive integer without leading
# zeros (at most 19 digits always fit a uint64), JSON whitespace anywhere between tokens. Go's
# json.Unmarshal reads exactly that as a seq-only request; any other body takes the full path.
_SEQ_ONLY_BODY: Final = re.compile(
    rb'[ \t\r\n]*\{[ \t\r\n]*"seq"[ \t\r\n]*:[ \t\r\n]*([1-9][0-9]{0,18})[ \t\r\n]*\}[ \t\r\n]*'
)
# Replies cluster in time (a publish entry stamps all its messages alike): format each once.
TIMESTAMP_CACHE_SIZE: Final = 4096
STREAM_NAME_CACHE_SIZE: Final = 256


class DirectReply:
    """One message to publish to the requester's reply subject.

    ``hdr`` None means a plain MSG (``no_hdr``); otherwise an HMSG with this header block.
    (A slotted class: one is made per reply, and compiled it is built natively, where a
    NamedTuple's constructor stays an interpreted function.)
    """

    __slots__ = ("data", "hdr")

    def __init__(self, hdr: bytes | None, data: bytes) -> None:
        self.hdr = hdr
        self.data = data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DirectReply):
            return NotImplemented
        return self.hdr == other.hdr and self.data == other.data

    def __hash__(self) -> int:
        return hash((self.hdr, self.data))

    def __repr__(self) -> str:
        return f"DirectReply(hdr={self.hdr!r}, data={self.data!r})"


REPLY_412: Final = DirectReply(_STATUS_412, b"")
REPLY_EMPTY: Final = DirectReply(_STATUS_408_EMPTY, b"")
REPLY_MALFORMED: Final = DirectReply(_STATUS_408_MALFORMED, b"")
REPLY_BAD: Final = DirectReply(_STATUS_408_BAD, b"")
REPLY_NOT_FOUND: Final = DirectReply(_STATUS_404_NOT_FOUND, b"")
REPLY_NO_RESULTS: Final = DirectReply(_STATUS_404_NO_RESULTS, b"")
REPLY_TOO_MANY: Final = DirectReply(_STATUS_413, b"")
# jetraft's own status: the responder has not applied the request's min_last_seq (never stale)
REPLY_MIN_SEQ_NOT_APPLIED: Final = DirectReply(_STATUS_412_MIN_SEQ, b"")


class NotApplied(NamedTuple):
    """A valid request asking for a later state than the view's: ``last_seq < min_last_seq``."""

    min_last_seq: int


def direct_get_subjects(stream: str) -> tuple[str, str]:
    """The two subjects every responder queue-subscribes to (in group ``_sys_``)."""
    base = DIRECT_GET_PREFIX + stream
    return base, base + ".>"


def parse_direct_subject(subject: str) -> tuple[str, str | None] | None:
    """(stream, key) for a Direct Get subject; key None for the JSON form, "" when the subject
    ends with the dot after the stream name. None if it is not a Direct Get subject."""
    if not subject.startswith(DIRECT_GET_PREFIX):
        return None
    stream, dot, key = subject[len(DIRECT_GET_PREFIX) :].partition(".")
    if not stream:
        return None
    return stream, (key if dot else None)


def _api_level_too_high(request_hdr: bytes | None) -> bool:
    """``errorOnRequiredApiLevel``: a present header must be an int (strconv.Atoi) <= 5."""
    if not request_hdr:
        return False
    value = get_header(request_hdr, REQUIRED_API_LEVEL_HEADER)
    if not value:
        return False
    digits = value[1:] if value[0] in "+-" else value
    if not digits or not digits.isascii() or not digits.isdigit():
        return True
    level = int(value)
    return not INT64_MIN <= level <= INT64_MAX or level > JS_API_LEVEL


def _conflicts(req: MsgGetRequest) -> bool:
    """Row 5 of the validation table: options nats-server refuses to combine."""
    has_start = req.start_time_ns is not None
    return bool(
        (req.seq > 0 and req.last_by_subj)
        or (req.seq > 0 and has_start)
        or (has_start and req.last_by_subj)
        or (req.last_by_subj and req.next_by_subj)
        or (req.last_by_subj and req.batch > 0)
        or (req.last_by_subj and req.multi_last)
        or (req.next_by_subj and req.multi_last)
        or (req.up_to_seq > 0 and req.up_to_time_ns is not None)
    )


def _appended_form_fields_set(req: MsgGetRequest) -> bool:
    return bool(
        req.last_by_subj
        or req.next_by_subj
        or req.multi_last
        or req.seq
        or req.batch
        or req.start_time_ns is not None
        or req.up_to_seq
        or req.up_to_time_ns is not None
    )


def _subject_len(subject: str) -> int:
    return len(subject) if subject.isascii() else len(subject.encode("utf-8", "surrogateescape"))


def _text_bytes(text: str) -> bytes:
    """A subject or stream name as it goes on the wire (parsers keep bad bytes as escapes)."""
    return text.encode() if text.isascii() else text.encode("utf-8", "surrogateescape")


@lru_cache(maxsize=TIMESTAMP_CACHE_SIZE)
def _timestamp_bytes(ts_ns: int) -> bytes:
    return format_rfc3339nano(ts_ns).encode()


@lru_cache(maxsize=STREAM_NAME_CACHE_SIZE)
def _stream_lines(name: str) -> bytes:
    return b"Nats-Stream: " + _text_bytes(name) + b"\r\nNats-Subject: "


def _reply_header(
    name: str, msg: StoredMsg, pending: int | None = None, last_seq: int = 0
) -> bytes:
    """The stored header block with nats-server's headers appended (``genHeader`` order)."""
    hdr = msg.hdr
    head = hdr[:-_CRLF_LEN] if len(hdr) > _CRLF_LEN else _HDR_LINE
    subject = msg.subject
    subject_b = subject.encode() if subject.isascii() else _text_bytes(subject)
    fields = (head, _stream_lines(name), subject_b, msg.seq, _timestamp_bytes(msg.ts_ns))
    if pending is None:
        return _APPENDED_SINGLE % fields
    return _APPENDED_BATCH % (*fields, pending, last_seq)


def _eob(pending: int, last_seq: int, up_to_seq: int | None = None) -> DirectReply:
    if up_to_seq is None:
        text = f"NATS/1.0 204 EOB\r\nNats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last_seq}"
    else:
        text = (
            f"NATS/1.0 204 EOB\r\nNats-Num-Pending: {pending}\r\n"
            f"Nats-Last-Sequence: {last_seq}\r\nNats-UpTo-Sequence: {up_to_seq}"
        )
    return DirectReply((text + "\r\n\r\n").encode(), b"")


def _sent_bytes(msg: StoredMsg) -> int:
    """What nats-server adds to its running total per message: subject + stored hdr + data."""
    return _subject_len(msg.subject) + len(msg.hdr) + len(msg.data)


def _single(view: StreamView, name: str, req: MsgGetRequest) -> list[DirectReply]:
    msg = lookup(view, req)
    if msg is None:
        return [REPLY_NOT_FOUND]
    if req.no_hdr:
        return [DirectReply(None, msg.data)]
    return [DirectReply(_reply_header(name, msg), msg.data)]


def _found(name: str, msg: StoredMsg | None) -> list[DirectReply]:
    """``_single``'s reply for a request with nothing but a selector (no ``no_hdr``)."""
    if msg is None:
        return [REPLY_NOT_FOUND]
    return [DirectReply(_reply_header(name, msg), msg.data)]


def _batch(view: StreamView, name: str, req: MsgGetRequest) -> list[DirectReply]:
    """``getDirectRequest`` with ``batch != 0``: walk "next >= seq" from the start."""
    seq = req.seq if req.start_time_ns is None else seq_from_time(view, req.start_time_ns)
    pending = view.num_pending(seq, req.next_by_subj)
    max_bytes = req.max_bytes or MAX_PENDING_SIZE_BYTES
    replies: list[DirectReply] = []
    last_seq = 0
    sent_bytes = 0
    for _ in range(max(req.batch, 0)):
        if seq > 0 or req.next_by_subj:
            msg = view.load_next(seq, req.next_by_subj)
        else:  # reachable only when nothing selects a start: nats-server loads the last
            msg = view.load_last(req.last_by_subj)
        if msg is None:
            if not replies:
                return [REPLY_NOT_FOUND]  # the first lookup failed: no EOB
            break
        seq = msg.seq + 1
        if req.no_hdr:
            replies.append(DirectReply(None, msg.data))
        else:
            pending = max(pending - 1, 0)
            replies.append(DirectReply(_reply_header(name, msg, pending, last_seq), msg.data))
        last_seq = msg.seq
        sent_bytes += _sent_bytes(msg)
        if sent_bytes >= max_bytes:
            break
    replies.append(_eob(pending, last_seq))
    return replies


def _multi_ceiling(view: StreamView, req: MsgGetRequest) -> int | None:
    """The ``up_to`` sequence of a multi-last read, or None for "404 No Results"."""
    if req.up_to_time_ns is not None:
        up_to = seq_from_time(view, req.up_to_time_ns)
        if up_to <= view.first_seq:
            return None
        return up_to - 1
    if req.up_to_seq == 0:
        return view.last_seq
    if req.up_to_seq > view.last_seq:
        return None  # filestore: a ceiling past the last sequence selects no block
    return req.up_to_seq


def _multi(view: StreamView, name: str, req: MsgGetRequest) -> list[DirectReply]:
    """``getDirectMulti``: the last message per matching subject, ascending, then EOB."""
    up_to = _multi_ceiling(view, req)
    if up_to is None:
        return [REPLY_NO_RESULTS]
    filters = [f for f in req.multi_last or () if f]  # "" matches no subject in nats-server
    seqs = view.multi_last(filters, up_to, MAX_ALLOWED_RESPONSES) if filters else []
    if seqs is None:
        return [REPLY_TOO_MANY]
    if not seqs:
        return [REPLY_NO_RESULTS]
    max_bytes = req.max_bytes or MAX_PENDING_SIZE_BYTES
    replies: list[DirectReply] = []
    pending = len(seqs)
    last_seq = 0
    sent_bytes = 0
    for seq in seqs:
        pending -= 1
        if seq < req.seq:
            continue
        msg = view.load(seq)
        if msg is None:  # resolved but failed to load: nats-server folds it into a 404
            replies.append(REPLY_NOT_FOUND)
            return replies
        replies.append(DirectReply(_reply_header(name, msg, pending, last_seq), msg.data))
        last_seq = seq
        sent_bytes += _sent_bytes(msg)
        if sent_bytes >= max_bytes or (req.batch > 0 and len(replies) >= req.batch):
            break
    replies.append(_eob(pending, last_seq, up_to))
    return replies


def _answer(view: StreamView, name: str, req: MsgGetRequest) -> list[DirectReply]:
    if req.multi_last:
        return _multi(view, name, req)
    if req.batch != 0:
        return _batch(view, name, req)
    return _single(view, name, req)


def direct_get(
    view: StreamView,
    *,
    reply_stream_name: str,
    request_hdr: bytes | None,
    payload: bytes,
    subject_key: str | None,
) -> list[DirectReply]:
    """The replies, in order, to one Direct Get request, answered at once: a request whose
    ``min_last_seq`` the view has not reached gets ``412 Min Last Sequence Not Applied``.

    ``subject_key`` is None for ``$JS.API.DIRECT.GET.<stream>`` and the text after
    ``$JS.API.DIRECT.GET.<stream>.`` for the subject-appended form. ``reply_stream_name`` goes
    into ``Nats-Stream`` (a mirror answering for its origin puts its own name there).
    """
    replies = try_direct_get(
        view,
        reply_stream_name=reply_stream_name,
        request_hdr=request_hdr,
        payload=payload,
        subject_key=subject_key,
    )
    return [REPLY_MIN_SEQ_NOT_APPLIED] if isinstance(replies, NotApplied) else replies


def try_direct_get(
    view: StreamView,
    *,
    reply_stream_name: str,
    request_hdr: bytes | None,
    payload: bytes,
    subject_key: str | None,
) -> list[DirectReply] | NotApplied:
    """:func:`direct_get`, except that a valid request whose ``min_last_seq`` is above the view's
    ``last_seq`` is not answered: the caller may wait for that sequence and ask again."""
    if request_hdr and _api_level_too_high(request_hdr):
        return [REPLY_412]
    if subject_key is not None:
        if subject_key and not payload:  # KV get: the same as last_by_subj=<key> alone
            return _found(reply_stream_name, view.load_last(subject_key))
        return _direct_get_by_subject(view, reply_stream_name, payload, subject_key)
    if not payload:
        return [REPLY_EMPTY]
    seq_only = _SEQ_ONLY_BODY.fullmatch(payload)
    if seq_only is not None:  # what lookup() does for a seq-only request
        return _found(reply_stream_name, view.load(int(seq_only[1])))
    try:
        req = decode_get_request(payload, strict=False)
    except GetRequestError:
        return [REPLY_MALFORMED]
    if (
        req.seq == 0
        and not req.last_by_subj
        and not req.next_by_subj
        and not req.multi_last
        and req.start_time_ns is None
    ):
        return [REPLY_EMPTY]
    if _conflicts(req):
        return [REPLY_BAD]
    if req.min_last_seq > view.last_seq:
        return NotApplied(req.min_last_seq)
    return _answer(view, reply_stream_name, req)


def _direct_get_by_subject(
    view: StreamView, name: str, payload: bytes, key: str
) -> list[DirectReply] | NotApplied:
    """``processDirectGetLastBySubjectRequest``: a ``last_by_subj=<key>`` single get; a body may
    only carry ``no_hdr`` / ``max_bytes`` (and keys nats-server ignores, ``min_last_seq`` among
    them: honoured here, so a KV get can read its own writes too)."""
    req = MsgGetRequest()
    if payload:
        try:
            req = decode_get_request(payload, strict=False)
        except GetRequestError:
            return [REPLY_MALFORMED]
    if not key:
        return [REPLY_BAD]
    if _appended_form_fields_set(req):
        return [REPLY_BAD]
    if req.min_last_seq > view.last_seq:
        return NotApplied(req.min_last_seq)
    req.last_by_subj = key
    return _single(view, name, req)
