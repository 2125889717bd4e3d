"""``$JS.API.STREAM.MSG.GET.<stream>``: one stored message as JSON, answered from a StreamView.

Mirrors nats-server's ``jsMsgGetRequest`` after its stream-independent checks: the body is decoded
strictly (:mod:`engine.get_request`, errors as ``10025 invalid JSON: <Go text>``), ``batch`` /
``max_bytes`` and conflicting selectors are ``10003 bad request``, a miss is ``10037 no message
found``. The response keeps Go's key order (``subject, seq, hdrs, data, time``); ``hdrs`` is the
base64 of the whole stored header block and, like ``data``, is left out when empty.

The caller owns what comes before: the API-level header (10185), and the stream lookup (10059).
In a standalone nats-server the stream is looked up *after* the body checks, so a bad body to a
missing stream is 10003/10025, not 10059: call :func:`parse_msg_get_request` first, then look the
stream up, then :func:`answer_msg_get`. :func:`msg_get` does both halves for a known stream.

Must never: mutate the view, or read a clock.
"""

from __future__ import annotations

import base64
from typing import Any, Final

from engine.get_request import GetRequestError, MsgGetRequest, decode_get_request
from engine.store import StoredMsg
from engine.view import StreamView
from protocol.errors import BAD_REQUEST, INVALID_JSON, NO_MESSAGE_FOUND, ApiError, ErrorSpec
from protocol.timefmt import format_rfc3339nano

MSG_GET_RESPONSE_TYPE: Final = "io.nats.jetstream.api.v1.stream_msg_get_response"


def error_response(spec: ErrorSpec, **fmt: Any) -> dict[str, Any]:
    """``{"type": ..., "error": {"code", "err_code", "description"}}``."""
    return {"type": MSG_GET_RESPONSE_TYPE, "error": ApiError(spec, **fmt).to_json()}


def parse_msg_get_request(payload: bytes) -> MsgGetRequest | dict[str, Any]:
    """The decoded, validated request, or the error response to send (10003 / 10025)."""
    try:
        req = decode_get_request(payload, strict=True)
    except GetRequestError as err:
        return error_response(INVALID_JSON, err=str(err))
    if req.batch > 0 or req.max_bytes > 0:
        return error_response(BAD_REQUEST)
    has_start = req.start_time_ns is not None
    if (
        (req.seq > 0 and req.last_by_subj)
        or (req.seq == 0 and not req.last_by_subj and not req.next_by_subj and not has_start)
        or (req.seq > 0 and has_start)
        or (has_start and req.last_by_subj)
        or (req.last_by_subj and req.next_by_subj)
    ):
        return error_response(BAD_REQUEST)
    return req


def seq_from_time(view: StreamView, ts_ns: int) -> int:
    """nats-server's ``GetSeqFromTime``: the first message at or after ``ts_ns``, else
    last_seq + 1 (never 0, so a time that matches nothing still selects "beyond the end")."""
    seq = view.seq_for_time(ts_ns)
    return seq if seq > 0 else view.last_seq + 1


def lookup(view: StreamView, req: MsgGetRequest) -> StoredMsg | None:
    """The single-message lookup shared with Direct Get (``seq`` / ``next_by_subj`` /
    ``last_by_subj`` / ``start_time``), in nats-server's branch order."""
    seq = req.seq if req.start_time_ns is None else seq_from_time(view, req.start_time_ns)
    if req.next_by_subj:
        return view.load_next(seq, req.next_by_subj)
    if seq > 0:
        return view.load(seq)
    return view.load_last(req.last_by_subj)


def message_object(msg: StoredMsg, *, with_headers: bool) -> dict[str, Any]:
    """Go's ``StoredMsg`` JSON: subject, seq, hdrs (omitempty), data (omitempty), time."""
    obj: dict[str, Any] = {"subject": msg.subject, "seq": msg.seq}
    if with_headers and msg.hdr:
        obj["hdrs"] = base64.b64encode(msg.hdr).decode("ascii")
    if msg.data:
        obj["data"] = base64.b64encode(msg.data).decode("ascii")
    obj["time"] = format_rfc3339nano(msg.ts_ns)
    return obj


def answer_msg_get(view: StreamView, req: MsgGetRequest) -> dict[str, Any]:
    """The response for an already validated request."""
    msg = lookup(view, req)
    if msg is None:
        return error_response(NO_MESSAGE_FOUND)
    return {
        "type": MSG_GET_RESPONSE_TYPE,
        "message": message_object(msg, with_headers=not req.no_hdr),
    }


def msg_get(view: StreamView, payload: bytes) -> dict[str, Any]:
    """The full MSG.GET response for ``payload`` against an existing stream."""
    req = parse_msg_get_request(payload)
    if isinstance(req, dict):
        return req
    return answer_msg_get(view, req)
