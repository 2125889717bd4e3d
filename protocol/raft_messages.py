"""The typed schema of every Raft message a peer may send, checked before consensus sees it.

Raft messages travel as MessagePack inside ``RAFT`` route frames (protocol/route_frames.py).
MessagePack decodes to plain values, but pysyncobj trusts what it is handed: a ``transmission``
field makes it ``pickle.loads`` the concatenated chunks (code execution), a term of 2**64-1 is
persisted and makes every later election overflow, a commit index of ``'zz'`` lands in its state.
So every message is rebuilt here from an exact schema — the message types pysyncobj sends, their
exact keys, exact types (a bool is not an int) and ranges — and anything else is refused with
``RaftMessageError``: the route link is closed and nothing reaches pysyncobj or the disk.

Must never: import pysyncobj or do I/O; pass through a value it did not check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Terms, indexes and ids stay below this. It leaves 2**62 elections of headroom under the
# journal's u64 fields, so even the largest accepted term can never make term + 1 overflow
# (a forged 2**64-1 term used to make every later election fail, across restarts).
RAFT_VALUE_MAX = 2**62
RAFT_ENTRIES_MAX = 1_000_000  # entries in one append; the sender bounds appends by bytes first
# The bytes of one append's entries together (and of one forwarded command). A route frame is at
# most 256 MiB (protocol/route_frames.py FRAME_BYTES_MAX) so nothing larger can arrive; stating
# the bound here keeps the codec safe on its own (tests, another transport).
RAFT_ENTRY_BYTES_MAX = 256 * 1024 * 1024
RAFT_SNAPSHOT_CHUNK_BYTES_MAX = 64 * 1024 * 1024  # pysyncobj's chunks are 64 KiB by default
RAFT_FAIL_REASON_MAX = 64  # pysyncobj FAIL_REASON codes are small integers
_SHOWN_CHARS_MAX = 80  # of a refused value in an error: a peer must not be able to flood the log

# The first byte of every log entry is pysyncobj's command type (its ``_COMMAND_TYPE``, checked
# against pysyncobj in tests/protocol/test_raft_messages.py). jetraft only ever creates REGULAR
# entries (proposals) and NO_OP entries (one per election); pysyncobj's MEMBERSHIP and VERSION
# commands are pickles, so they are refused here and can never reach a log.
COMMAND_REGULAR = 0
COMMAND_NO_OP = 1
_ENTRY_COMMAND_TYPES = frozenset({COMMAND_REGULAR, COMMAND_NO_OP})

TIMEOUT_NOW = "timeout_now"
REQUEST_VOTE = "request_vote"
RESPONSE_VOTE = "response_vote"
APPEND_ENTRIES = "append_entries"
NEXT_NODE_IDX = "next_node_idx"
APPLY_COMMAND = "apply_command"
APPLY_COMMAND_RESPONSE = "apply_command_response"


class RaftMessageError(ValueError):
    """A peer sent something that is not a Raft message jetraft sends; drop the link."""


def _show(value: object) -> str:
    """``repr`` of a refused value, cut short: it ends up in a WARNING line."""
    text = repr(value)
    if len(text) > _SHOWN_CHARS_MAX:
        return text[:_SHOWN_CHARS_MAX] + f"... ({len(text)} chars)"
    return text


def _uint(message: dict[Any, Any], key: str, maximum: int = RAFT_VALUE_MAX) -> int:
    value = message.get(key)
    if type(value) is not int or not 0 <= value <= maximum:
        raise RaftMessageError(f"{key} must be an integer in [0, {maximum}], not {_show(value)}")
    return value


def _bool(message: dict[Any, Any], key: str) -> bool:
    value = message.get(key)
    if type(value) is not bool:
        raise RaftMessageError(f"{key} must be a boolean, not {_show(value)}")
    return value


def _keys(message: dict[Any, Any], required: frozenset[str], optional: frozenset[str]) -> None:
    keys = set(message)
    missing = required - keys
    extra = keys - required - optional
    if missing or extra:
        raise RaftMessageError(
            f"{_show(message.get('type'))}: missing {sorted(missing)}, unexpected "
            f"{_show(sorted(map(str, extra)))}"
        )


def _command(data: object, what: str, types: frozenset[int]) -> bytes:
    if type(data) is not bytes or not data or len(data) > RAFT_ENTRY_BYTES_MAX:
        raise RaftMessageError(f"{what} must be non-empty bytes within the size limit")
    if data[0] not in types:
        raise RaftMessageError(f"{what}: command type {data[0]} is not one jetraft uses")
    return data


def _entries(value: object, prev_index: int) -> list[tuple[bytes, int, int]]:
    if type(value) is not list or len(value) > RAFT_ENTRIES_MAX:
        raise RaftMessageError("entries must be a list of [data, index, term]")
    out: list[tuple[bytes, int, int]] = []
    expected = prev_index + 1
    total = 0
    for entry in value:
        if type(entry) is not list or len(entry) != 3:
            raise RaftMessageError("an entry must be [data, index, term]")
        data, index, term = entry
        data = _command(data, "entry data", _ENTRY_COMMAND_TYPES)
        total += len(data)
        if total > RAFT_ENTRY_BYTES_MAX:
            raise RaftMessageError(f"entries exceed {RAFT_ENTRY_BYTES_MAX} bytes")
        for name, number in (("index", index), ("term", term)):
            if type(number) is not int or not 0 <= number <= RAFT_VALUE_MAX:
                raise RaftMessageError(f"entry {name} out of range: {_show(number)}")
        # the entries a leader sends are the ones right after prevLogIdx, in order
        if index != expected:
            raise RaftMessageError(f"entry index {index} does not follow {expected - 1}")
        expected += 1
        out.append((data, index, term))
    return out


def _serialized(value: object) -> tuple[bytes, bool, bool] | None:
    if value is None:
        return None
    if type(value) is not list or len(value) != 3:
        raise RaftMessageError("serialized must be None or [data, first, last]")
    data, first, last = value
    if type(data) is not bytes or len(data) > RAFT_SNAPSHOT_CHUNK_BYTES_MAX:
        raise RaftMessageError("snapshot chunk must be bytes within the chunk limit")
    if type(first) is not bool or type(last) is not bool:
        raise RaftMessageError("snapshot chunk flags must be booleans")
    return data, first, last


_TERM = frozenset({"type", "term"})
_APPEND_COMMON = frozenset({"type", "term", "commit_index"})
_APPEND_REGULAR = _APPEND_COMMON | {"prevLogIdx", "prevLogTerm", "entries"}
_APPEND_SNAPSHOT = _APPEND_COMMON | {"serialized"}


def validate_raft_message(obj: object) -> dict[str, Any]:
    """A fresh, checked copy of a decoded Raft message, or RaftMessageError."""
    if type(obj) is not dict:
        raise RaftMessageError(f"a Raft message is a map, not {type(obj).__name__}")
    kind = obj.get("type")
    if kind in (TIMEOUT_NOW, RESPONSE_VOTE):
        _keys(obj, _TERM, frozenset())
        return {"type": kind, "term": _uint(obj, "term")}
    if kind == REQUEST_VOTE:
        _keys(obj, _TERM | {"last_log_index", "last_log_term"}, frozenset())
        return {
            "type": kind,
            "term": _uint(obj, "term"),
            "last_log_index": _uint(obj, "last_log_index"),
            "last_log_term": _uint(obj, "last_log_term"),
        }
    if kind == APPEND_ENTRIES:
        if "transmission" in obj:
            # pysyncobj would unpickle the chunks; jetraft never sends them (cluster/raft/)
            raise RaftMessageError("append_entries transmission chunks are refused")
        if "serialized" in obj:
            _keys(obj, _APPEND_SNAPSHOT, frozenset())
            return {
                "type": kind,
                "term": _uint(obj, "term"),
                "commit_index": _uint(obj, "commit_index"),
                "serialized": _serialized(obj["serialized"]),
            }
        _keys(obj, _APPEND_REGULAR, frozenset())
        prev_index = _uint(obj, "prevLogIdx")
        return {
            "type": kind,
            "term": _uint(obj, "term"),
            "commit_index": _uint(obj, "commit_index"),
            "prevLogIdx": prev_index,
            "prevLogTerm": _uint(obj, "prevLogTerm"),
            "entries": _entries(obj["entries"], prev_index),
        }
    if kind == NEXT_NODE_IDX:
        _keys(obj, frozenset({"type", "next_node_idx", "reset", "success"}), frozenset())
        return {
            "type": kind,
            "next_node_idx": _uint(obj, "next_node_idx"),
            "reset": _bool(obj, "reset"),
            "success": _bool(obj, "success"),
        }
    if kind == APPLY_COMMAND:
        _keys(obj, frozenset({"type", "command"}), frozenset({"request_id"}))
        # only the meta group takes forwarded proposals (``forward_proposals`` in cluster/raft/)
        command = _command(obj.get("command"), "command", frozenset({COMMAND_REGULAR}))
        out: dict[str, Any] = {"type": kind, "command": command}
        if "request_id" in obj:
            out["request_id"] = _uint(obj, "request_id")
        return out
    if kind == APPLY_COMMAND_RESPONSE:
        # pysyncobj sends either the error or where the command went in the log, never both
        if "error" in obj:
            _keys(obj, frozenset({"type", "request_id", "error"}), frozenset())
            return {
                "type": kind,
                "request_id": _uint(obj, "request_id"),
                "error": _uint(obj, "error", RAFT_FAIL_REASON_MAX),
            }
        _keys(obj, frozenset({"type", "request_id", "log_idx", "log_term"}), frozenset())
        return {
            "type": kind,
            "request_id": _uint(obj, "request_id"),
            "log_idx": _uint(obj, "log_idx"),
            "log_term": _uint(obj, "log_term"),
        }
    raise RaftMessageError(f"unknown Raft message type {_show(kind)}")


# --- state transfer between the replicas of one group (``CATCHUP`` route frames) -------------
CATCHUP_REQUEST = "req"  # a follower asks the leader for the state it lacks
CATCHUP_CHUNK = "chunk"  # one chunk of the answer (engine/state_transfer.py decodes it)
CATCHUP_ERROR = "error"  # the leader cannot answer; data is its reason, UTF-8
_CATCHUP_PARTS = frozenset({CATCHUP_REQUEST, CATCHUP_CHUNK, CATCHUP_ERROR})
CATCHUP_GROUP_CHARS_MAX = 512  # a group name: "S.<stream name>.<creation ns>"


@dataclass(frozen=True, slots=True)
class CatchupMessage:
    """One state-transfer message for group ``group``: its body is checked again, with a CRC, by
    the state transfer itself; here only its shape."""

    group: str
    transfer_id: int
    part: str
    data: bytes


def validate_catchup_message(obj: object) -> CatchupMessage:
    """The checked ``[group, transfer id, part, data]`` of a CATCHUP frame, or RaftMessageError."""
    if type(obj) is not list or len(obj) != 4:
        raise RaftMessageError(f"a catch-up message is [group, id, part, data], not {_show(obj)}")
    group, transfer_id, part, data = obj
    if type(group) is not str or not group or len(group) > CATCHUP_GROUP_CHARS_MAX:
        raise RaftMessageError(f"catch-up group must be a short string, not {_show(group)}")
    if type(transfer_id) is not int or not 0 <= transfer_id <= RAFT_VALUE_MAX:
        raise RaftMessageError(f"catch-up id must be an integer, not {_show(transfer_id)}")
    if part not in _CATCHUP_PARTS:
        raise RaftMessageError(f"catch-up part must be one of {sorted(_CATCHUP_PARTS)}")
    if type(data) is not bytes:
        raise RaftMessageError(f"catch-up data must be bytes, not {type(data).__name__}")
    return CatchupMessage(group, transfer_id, part, data)
