"""JetStream API response bodies and request parsers, shaped exactly as nats-server's.

Responses are plain dicts whose key order is Go's struct field order (embedded structs inlined
where Go inlines them); ``encode`` turns one into the bytes nats-server would send (compact,
HTML-escaped). Error responses carry the zero values of the response type's non-omitempty
fields (``"total":0,…`` on INFO, ``"purged":0`` on PURGE, ``"streams":null`` on NAMES). PubAcks
are built byte-for-byte as nats-server builds them by hand, including the famous
``"duplicate": true`` with a space.

Request parsers follow each handler's own rules: INFO/NAMES/LIST/PURGE only decode a body that
starts with ``{`` or ``[`` (anything else is ignored), MSG.DELETE rejects an empty body or
``{}`` with 10003, STREAM.DELETE demands an empty one (10038).

Must never: do I/O, read clocks (timestamps are arguments), or build error JSON by hand.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import errors
from protocol.errors import ApiError
from protocol.gojson import encode, go_quote
from protocol.models import (
    MsgDeleteRequest,
    MsgGetRequest,
    StreamConfig,
    StreamInfoRequest,
    StreamListRequest,
    StreamNamesRequest,
    StreamPurgeRequest,
)
from protocol.stream_config import (
    SERVER_API_LEVEL,
    SERVER_VERSION,
    config_to_json,
    decode_strict,
)
from protocol.timefmt import format_rfc3339nano

_PREFIX = "io.nats.jetstream.api.v1."
ACCOUNT_INFO_RESPONSE = _PREFIX + "account_info_response"
STREAM_CREATE_RESPONSE = _PREFIX + "stream_create_response"
STREAM_UPDATE_RESPONSE = _PREFIX + "stream_update_response"
STREAM_INFO_RESPONSE = _PREFIX + "stream_info_response"
STREAM_DELETE_RESPONSE = _PREFIX + "stream_delete_response"
STREAM_NAMES_RESPONSE = _PREFIX + "stream_names_response"
STREAM_LIST_RESPONSE = _PREFIX + "stream_list_response"
STREAM_PURGE_RESPONSE = _PREFIX + "stream_purge_response"
STREAM_MSG_GET_RESPONSE = _PREFIX + "stream_msg_get_response"
STREAM_MSG_DELETE_RESPONSE = _PREFIX + "stream_msg_delete_response"
STREAM_LEADER_STEPDOWN_RESPONSE = _PREFIX + "stream_leader_stepdown_response"
CONSUMER_CREATE_RESPONSE = _PREFIX + "consumer_create_response"
CONSUMER_INFO_RESPONSE = _PREFIX + "consumer_info_response"
CONSUMER_NAMES_RESPONSE = _PREFIX + "consumer_names_response"
CONSUMER_LIST_RESPONSE = _PREFIX + "consumer_list_response"
CONSUMER_DELETE_RESPONSE = _PREFIX + "consumer_delete_response"
CONSUMER_PAUSE_RESPONSE = _PREFIX + "consumer_pause_response"
CONSUMER_STEPDOWN_RESPONSE = _PREFIX + "consumer_leader_stepdown_response"
CONSUMER_UNPIN_RESPONSE = _PREFIX + "consumer_unpin_response"
CONSUMER_RESET_RESPONSE = _PREFIX + "consumer_reset_response"
STREAM_REMOVE_PEER_RESPONSE = _PREFIX + "stream_remove_peer_response"
STREAM_EVACUATE_PEER_RESPONSE = _PREFIX + "stream_evacuate_peer_response"
STREAM_CANCEL_MOVE_RESPONSE = _PREFIX + "stream_cancel_move_response"
STREAM_SNAPSHOT_RESPONSE = _PREFIX + "stream_snapshot_response"
STREAM_RESTORE_RESPONSE = _PREFIX + "stream_restore_response"
META_LEADER_STEPDOWN_RESPONSE = _PREFIX + "meta_leader_stepdown_response"
META_SERVER_REMOVE_RESPONSE = _PREFIX + "meta_server_remove_response"
META_SERVER_EVACUATE_RESPONSE = _PREFIX + "meta_server_evacuate_response"
META_RESCUE_RESPONSE = _PREFIX + "meta_rescue_response"
ACCOUNT_PURGE_RESPONSE = _PREFIX + "account_purge_response"

NAMES_LIMIT = 1024  # JSApiNamesLimit
LIST_LIMIT = 256  # JSApiListLimit
SUBJECT_DETAILS_LIMIT = 100_000  # JSMaxSubjectDetails

StreamStateJson = dict[str, Any]

# Fields of each response type that Go always writes (not omitempty), with their zero values.
_ERROR_ZERO_FIELDS: dict[str, dict[str, Any]] = {
    STREAM_INFO_RESPONSE: {"total": 0, "offset": 0, "limit": 0},
    STREAM_NAMES_RESPONSE: {"total": 0, "offset": 0, "limit": 0, "streams": None},
    STREAM_LIST_RESPONSE: {"total": 0, "offset": 0, "limit": 0, "streams": []},
    STREAM_PURGE_RESPONSE: {"purged": 0},
    CONSUMER_NAMES_RESPONSE: {"total": 0, "offset": 0, "limit": 0, "consumers": []},
    CONSUMER_LIST_RESPONSE: {"total": 0, "offset": 0, "limit": 0, "consumers": []},
    CONSUMER_PAUSE_RESPONSE: {"paused": False, "pause_until": "0001-01-01T00:00:00Z"},
    STREAM_RESTORE_RESPONSE: {"deliver_subject": ""},
    CONSUMER_RESET_RESPONSE: {"reset_seq": 0},
}


def error_response(type_: str, err: ApiError, **zero_fields: Any) -> dict[str, Any]:
    """``{"type":…,"error":{…}}`` plus the type's zero-valued fields (overridable)."""
    out: dict[str, Any] = {"type": type_, "error": err.to_json()}
    out.update(_ERROR_ZERO_FIELDS.get(type_, {}))
    out.update(zero_fields)
    return out


# --- Stream state and info ---------------------------------------------------------------------


def state_json(
    *,
    messages: int,
    bytes: int,  # shadows the builtin on purpose: it is the JSON key
    first_seq: int,
    first_ts_ns: int,
    last_seq: int,
    last_ts_ns: int,
    num_subjects: int = 0,
    subjects: Mapping[str, int] | None = None,
    num_deleted: int = 0,
    deleted: Sequence[int] | None = None,
    lost_msgs: Sequence[int] | None = None,
    lost_bytes: int = 0,
    consumer_count: int = 0,
) -> StreamStateJson:
    """The StreamInfo ``state`` object (server/store.go ``StreamState``).

    Timestamps are ns since the epoch, 0 for "none" (written as Go's zero time). ``subjects`` is
    sorted by key as Go sorts maps; empty collections and zero counts are omitted.
    """
    out: StreamStateJson = {
        "messages": messages,
        "bytes": bytes,
        "first_seq": first_seq,
        "first_ts": format_rfc3339nano(first_ts_ns),
        "last_seq": last_seq,
        "last_ts": format_rfc3339nano(last_ts_ns),
    }
    if num_subjects:
        out["num_subjects"] = num_subjects
    if subjects:
        out["subjects"] = dict(sorted(subjects.items()))
    if num_deleted:
        out["num_deleted"] = num_deleted
    if deleted:
        out["deleted"] = list(deleted)
    if lost_msgs is not None or lost_bytes:
        out["lost"] = {
            "msgs": list(lost_msgs) if lost_msgs is not None else None,
            "bytes": lost_bytes,
        }
    out["consumer_count"] = consumer_count
    return out


def subjects_page(
    totals: Mapping[str, int], offset: int
) -> tuple[dict[str, int] | None, dict[str, int]]:
    """STREAM.INFO ``subjects_filter`` paging: (state ``subjects``, ``total/offset/limit``).

    With no matching subject the paging fields stay 0 and no map is sent (nats-server).
    """
    if not totals:
        return None, {"total": 0, "offset": 0, "limit": 0}
    paged = {"total": len(totals), "offset": offset, "limit": SUBJECT_DETAILS_LIMIT}
    if offset == 0 and len(totals) <= SUBJECT_DETAILS_LIMIT:
        return dict(totals), paged
    names = sorted(totals)
    start = min(offset, len(names))
    chosen = names[start : start + SUBJECT_DETAILS_LIMIT]
    return ({n: totals[n] for n in chosen} or None), paged


def stream_info(
    cfg: StreamConfig,
    state: StreamStateJson,
    created_ns: int,
    now_ns: int,
    server_name: str = "",
    *,
    type_: str,
    did_create: bool | None = None,
    cluster: dict[str, Any] | None = None,
    paged: Mapping[str, int] | None = None,
    domain: str = "",
    mirror: dict[str, Any] | None = None,
    sources: list[dict[str, Any]] | None = None,
    dynamic_metadata: bool = True,
    server_version: str = SERVER_VERSION,
    api_level: int = SERVER_API_LEVEL,
) -> dict[str, Any]:
    """A StreamInfo response (CREATE / UPDATE / INFO), or with ``type_=""`` a bare StreamInfo
    (a STREAM.LIST entry: pass ``dynamic_metadata=False`` as standalone nats-server does).

    STREAM.INFO adds ``total/offset/limit`` (``paged``, default zeros) after ``type`` and a
    ``cluster`` object (default ``{"leader": server_name}``, also in standalone mode); CREATE
    ends with ``did_create``.
    """
    out: dict[str, Any] = {"type": type_} if type_ else {}
    if type_ == STREAM_INFO_RESPONSE:
        page = paged or {}
        out["total"] = page.get("total", 0)
        out["offset"] = page.get("offset", 0)
        out["limit"] = page.get("limit", 0)
        if cluster is None:
            cluster = {"leader": server_name}
    out["config"] = config_to_json(
        cfg,
        server_version=server_version,
        api_level=api_level,
        dynamic_metadata=dynamic_metadata,
    )
    out["created"] = format_rfc3339nano(created_ns)
    out["state"] = state
    if domain:
        out["domain"] = domain
    if cluster is not None:
        out["cluster"] = cluster
    if mirror is not None:
        out["mirror"] = mirror
    if sources:
        out["sources"] = sources
    out["ts"] = format_rfc3339nano(now_ns)
    if did_create:
        out["did_create"] = True
    return out


# --- Other responses ---------------------------------------------------------------------------


def names_response(names: Sequence[str], offset: int) -> dict[str, Any]:
    """STREAM.NAMES: sorted, paged by ``offset`` (clamped), at most 1024, null when none."""
    ordered = sorted(names)
    start = min(max(offset, 0), len(ordered))
    page = ordered[start : start + NAMES_LIMIT]
    return {
        "type": STREAM_NAMES_RESPONSE,
        "total": len(ordered),
        "offset": start,
        "limit": NAMES_LIMIT,
        "streams": page or None,
    }


def list_page(total: int, offset: int) -> tuple[int, int]:
    """The (start, stop) slice of the name-sorted streams a STREAM.LIST page covers."""
    start = min(max(offset, 0), total)
    return start, min(start + LIST_LIMIT, total)


def list_response(
    infos: Sequence[dict[str, Any]],
    *,
    total: int,
    offset: int,
    missing: Sequence[str] | None = None,
    offline: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """STREAM.LIST: ``infos`` are bare StreamInfos of the page (``list_page``), ``[]`` if none."""
    out: dict[str, Any] = {
        "type": STREAM_LIST_RESPONSE,
        "total": total,
        "offset": min(max(offset, 0), total),
        "limit": LIST_LIMIT,
        "streams": list(infos),
    }
    if missing:
        out["missing"] = list(missing)
    if offline:
        out["offline"] = dict(sorted(offline.items()))
    return out


def purge_response(purged: int) -> dict[str, Any]:
    return {"type": STREAM_PURGE_RESPONSE, "success": True, "purged": purged}


def success_response(type_: str) -> dict[str, Any]:
    """``{"type":…,"success":true}`` (STREAM.DELETE, MSG.DELETE, LEADER.STEPDOWN)."""
    return {"type": type_, "success": True}


def msg_get_response(
    subject: str, seq: int, hdrs: bytes | None, data: bytes, ts_ns: int
) -> dict[str, Any]:
    """STREAM.MSG.GET success: ``hdrs`` (whole header block) and ``data`` base64, omitted when
    empty (pass ``hdrs=None`` for ``no_hdr``)."""
    message: dict[str, Any] = {"subject": subject, "seq": seq}
    if hdrs:
        message["hdrs"] = base64.b64encode(hdrs).decode("ascii")
    if data:
        message["data"] = base64.b64encode(data).decode("ascii")
    message["time"] = format_rfc3339nano(ts_ns)
    return {"type": STREAM_MSG_GET_RESPONSE, "message": message}


ACCOUNT_LIMITS_UNLIMITED: dict[str, Any] = {
    "max_memory": -1,
    "max_storage": -1,
    "max_streams": -1,
    "max_consumers": -1,
    "max_ack_pending": -1,
    "memory_max_stream_bytes": -1,
    "storage_max_stream_bytes": -1,
    "max_bytes_required": False,
}


def account_info(
    *,
    memory: int,
    storage: int,
    streams: int,
    consumers: int,
    api_total: int,
    api_errors: int,
    reserved_memory: int = 0,
    reserved_storage: int = 0,
    limits: Mapping[str, Any] | None = None,
    domain: str = "",
    api_level: int = SERVER_API_LEVEL,
) -> dict[str, Any]:
    """``$JS.API.INFO`` (JetStreamAccountStats with its embedded tier)."""
    out: dict[str, Any] = {
        "type": ACCOUNT_INFO_RESPONSE,
        "memory": memory,
        "storage": storage,
        "reserved_memory": reserved_memory,
        "reserved_storage": reserved_storage,
        "streams": streams,
        "consumers": consumers,
        "limits": dict(limits if limits is not None else ACCOUNT_LIMITS_UNLIMITED),
    }
    if domain:
        out["domain"] = domain
    out["api"] = {"level": api_level, "total": api_total, "errors": api_errors}
    return out


# --- PubAck bytes ------------------------------------------------------------------------------


# a PubAck names its stream on every publish: quote each stream name once
_quote_stream = functools.lru_cache(maxsize=4096)(go_quote)


def pub_ack_json(
    stream: str,
    seq: int,
    duplicate: bool = False,
    batch: str | None = None,
    count: int | None = None,
    domain: str | None = None,
    val: str | None = None,
) -> bytes:
    """The PubAck nats-server writes by hand (``fmt`` ``%q`` quoting, not JSON escaping):
    ``{"stream":"S","seq":1}``, ``…,"duplicate": true}``, ``…,"batch":"b","count":4}``,
    ``…,"val":"3"}`` for counters, with ``"domain"`` between stream and seq."""
    head = f'{{"stream":{_quote_stream(stream)},'
    if domain:
        head += f'"domain":{go_quote(domain)},'
    text = f'{head}"seq":{seq}'
    if duplicate:
        text += ',"duplicate": true'
    if batch:
        text += f',"batch":{go_quote(batch)},"count":{count or 0}'
    elif val is not None and not duplicate:
        text += f',"val":{go_quote(val)}'
    return (text + "}").encode("utf-8", "surrogateescape")


def pub_ack_head(stream: str) -> bytes:
    """What every plain PubAck of ``stream`` starts with: ``pub_ack_json(stream, seq)`` is this,
    the seq in decimal, and ``}``. Built once per group commit, not once per acknowledgement."""
    return f'{{"stream":{_quote_stream(stream)},"seq":'.encode("utf-8", "surrogateescape")


def pub_ack_error_json(stream: str, err: ApiError) -> bytes:
    """``{"error":{…},"stream":"S","seq":0}`` (json.Marshal of JSPubAckResponse)."""
    return encode({"error": err.to_json(), "stream": stream, "seq": 0})


# --- Request parsers ----------------------------------------------------------------------------

_JSON_WS = b" \t\n\r"


def is_json_object_or_array(body: bytes) -> bool:
    """nats-server ``isJSONObjectOrArray``: first non-blank byte is ``{`` or ``[``."""
    stripped = body.lstrip(_JSON_WS)
    return stripped[:1] in (b"{", b"[")


def is_empty_request(body: bytes) -> bool:
    """nats-server ``isEmptyRequest``: no bytes, or one JSON value that is an empty object."""
    if not body or body == b"{}":
        return True
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and not value


def check_empty_request(body: bytes) -> None:
    """STREAM.DELETE accepts only an empty request (10038 otherwise)."""
    if not is_empty_request(body):
        raise ApiError(errors.NOT_EMPTY_REQUEST)


def parse_info_request(body: bytes) -> tuple[bool, str, int]:
    """STREAM.INFO → (deleted_details, subjects_filter, offset ≥ 0)."""
    if not is_json_object_or_array(body):
        return False, "", 0
    req = decode_strict(body, StreamInfoRequest)
    return req.deleted_details, req.subjects_filter, max(req.offset, 0)


def parse_names_request(body: bytes) -> tuple[int, str]:
    """STREAM.NAMES → (offset ≥ 0, subject filter or "")."""
    if not is_json_object_or_array(body):
        return 0, ""
    req = decode_strict(body, StreamNamesRequest)
    return max(req.offset, 0), req.subject


def parse_list_request(body: bytes) -> tuple[int, str]:
    """STREAM.LIST → (offset ≥ 0, subject filter or "")."""
    if not is_json_object_or_array(body):
        return 0, ""
    req = decode_strict(body, StreamListRequest)
    return max(req.offset, 0), req.subject


def parse_purge_request(body: bytes) -> tuple[str, int, int]:
    """STREAM.PURGE → (filter, seq, keep); ``seq`` purges below it. seq with keep → 10003."""
    if not is_json_object_or_array(body):
        return "", 0, 0
    req = decode_strict(body, StreamPurgeRequest)
    if req.seq > 0 and req.keep > 0:
        raise ApiError(errors.BAD_REQUEST)
    return req.filter, req.seq, req.keep


def parse_msg_delete_request(body: bytes) -> tuple[int, bool]:
    """STREAM.MSG.DELETE → (seq, no_erase). Empty body or ``{}`` → 10003 (checked before the
    stream lookup, as nats-server does)."""
    if is_empty_request(body):
        raise ApiError(errors.BAD_REQUEST)
    req = decode_strict(body, MsgDeleteRequest)
    return req.seq, req.no_erase


def parse_msg_get_request(body: bytes) -> MsgGetRequest:
    """STREAM.MSG.GET (``jsMsgGetRequest``): empty or ``{}`` → 10003, strict decoding (10025),
    then 10003 for ``batch``/``max_bytes`` and for conflicting or missing selectors. Valid:
    ``seq`` · ``last_by_subj`` · ``next_by_subj`` [+ ``seq``] · ``start_time`` [+ ``next_by_subj``].
    """
    if is_empty_request(body):
        raise ApiError(errors.BAD_REQUEST)
    req = decode_strict(body, MsgGetRequest)
    if req.batch > 0 or req.max_bytes > 0:
        raise ApiError(errors.BAD_REQUEST)
    seq, last, nxt, start = req.seq, req.last_by_subj, req.next_by_subj, req.start_time
    if (
        (seq > 0 and last)
        or (seq == 0 and not last and not nxt and start is None)
        or (seq > 0 and start is not None)
        or (start is not None and last)
        or (last and nxt)
    ):
        raise ApiError(errors.BAD_REQUEST)
    return req
