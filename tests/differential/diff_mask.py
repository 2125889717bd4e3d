"""Normalise server replies so that two servers' answers can be compared.

Owns: the list of values that legitimately differ between two servers (timestamps, ids,
versions, the leader's server name) and how they are masked; the canonical, comparable form of
JSON replies (with or without key order) and of header blocks.
Must never: mask anything that a client could rely on (sequences, counts, sizes, texts, codes,
key presence). A timestamp is masked only if it is well-formed RFC 3339 with nanoseconds
(Go's RFC3339Nano, UTC); the zero time is kept, so "zero vs set" is still compared.
"""

from __future__ import annotations

import json
import re
from typing import Any

ZERO_TIME = "0001-01-01T00:00:00Z"
TS_MASK = "<ts>"

# Go RFC3339Nano in UTC: fractional digits present only when non-zero, trailing zeros trimmed.
RFC3339_NANO_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{0,8}[1-9])?Z")

TIMESTAMP_KEYS = frozenset(
    {"created", "ts", "first_ts", "last_ts", "time", "timestamp", "leader_since"}
)
ID_KEYS = frozenset({"id", "server_id", "client_id", "xkey", "nonce"})
VERSION_KEYS = frozenset({"_nats.ver", "version", "git_commit", "go"})
SERVER_IDENTITY_KEYS = frozenset({"server_name", "port"})
# (parent key, key): masked only inside that parent object.
# a mirror's or source's "active" is nanoseconds since it last heard from its upstream
NESTED_MASKED_KEYS = frozenset({("cluster", "leader"), ("mirror", "active"), ("sources", "active")})

TIME_STAMP_HEADER = re.compile(rb"(?m)^(Nats-Time-Stamp: )([^\r\n]*)(\r?)$")


def mask_timestamp(value: Any) -> Any:
    """Replace a well-formed non-zero RFC3339Nano string by TS_MASK; keep anything else."""
    if isinstance(value, str) and value != ZERO_TIME and RFC3339_NANO_UTC.fullmatch(value):
        return TS_MASK
    return value


def _mask_value(parent: str | None, key: str, value: Any) -> Any:
    if key in TIMESTAMP_KEYS:
        return mask_timestamp(value)
    if key in ID_KEYS or key in VERSION_KEYS or key in SERVER_IDENTITY_KEYS:
        return f"<{key}:{type(value).__name__}>"
    if parent is not None and (parent, key) in NESTED_MASKED_KEYS:
        return f"<{key}:{type(value).__name__}>"
    return mask_json(value, key)


def mask_json(value: Any, parent: str | None = None) -> Any:
    """A copy of a decoded JSON value with the per-server values masked; dict order kept."""
    if isinstance(value, dict):
        return {k: _mask_value(parent, k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_json(v, parent) for v in value]
    return value


def ordered(value: Any) -> str:
    """Order-sensitive comparable text of a decoded JSON value (true != 1, 1.0 != 1)."""
    return json.dumps(value, separators=(",", ":"))


def unordered(value: Any) -> str:
    """Comparable text of a decoded JSON value that ignores object key order."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def mask_header_block(block: bytes) -> bytes:
    """The header block with well-formed Nats-Time-Stamp values replaced by TS_MASK."""

    def repl(m: re.Match[bytes]) -> bytes:
        value = m.group(2).decode("utf-8", "replace")
        masked = str(mask_timestamp(value))
        return m.group(1) + masked.encode() + m.group(3)

    return TIME_STAMP_HEADER.sub(repl, block)


def try_json(data: bytes) -> Any | None:
    """The decoded JSON object in data, or None if data is not a JSON object."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def needs_exact_bytes(obj: dict[str, Any]) -> bool:
    """PubAcks and API errors are compared byte for byte (key order, spacing included)."""
    is_pub_ack = "type" not in obj and "stream" in obj
    return is_pub_ack or "error" in obj


def comparable_json_reply(data: bytes) -> tuple[str, Any]:
    """How a JSON (or not) reply payload is compared: a mode name and the comparable value.

    * PubAcks and errors: the exact bytes, or the key-ordered masked form when something in
      them had to be masked;
    * any other JSON object: the masked object, key order ignored;
    (JSON values are compared as canonical text so that true != 1 and 1.0 != 1)
    * not JSON: the bytes.
    """
    obj = try_json(data)
    if obj is None:
        return "bytes", data
    masked = mask_json(obj)
    if needs_exact_bytes(obj):
        if masked == obj:
            return "bytes", data
        return "ordered-json", ordered(masked)
    return "json", unordered(masked)


def pretty(data: bytes, limit: int = 4000) -> str:
    """A readable rendering of a payload for failure messages."""
    text = data.decode("utf-8", "backslashreplace")
    if len(text) > limit:
        text = text[:limit] + f"... ({len(data)} bytes)"
    return text
