"""Stream ``sources``: how a message fetched from a source becomes a message of the sourcing
stream, as nats-server's ``processInboundSourceMsg`` makes it.

The message keeps its payload and headers, less any ``Nats-Stream-Source`` of its own (sources
may chain), ``Nats-Expected-*`` (a sourced message is not a conditional publish) and
``Nats-Batch-*``; it gains ``Nats-Stream-Source: <source> <upstream seq> <filters>
<destinations> <original subject>``; and its subject goes through the first of the source's
subject transforms that matches it. It is then stored like a publish under the sourcing stream's
next seq and time (its limits, dedupe and counters apply).

For counter streams a sourced message carries the source's running total, not an increment:
the sourcing stream adds the difference to what it last saw from that source and subject, and
records per source what it saw in ``Nats-Counter-Sources`` (ADR-49).

Must never: do I/O or read clocks.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from engine.counter import HDR_INCR, total_of
from protocol import errors
from protocol.errors import ApiError
from protocol.headers import (
    append_headers,
    get_header,
    remove_header,
    remove_prefixed_headers,
    set_header,
)
from protocol.models import StreamSource
from protocol.stream_config import source_index_name
from protocol.subject_transform import SubjectTransform, seeded_pick
from protocol.timefmt import format_rfc3339nano

HDR_STREAM_SOURCE = "Nats-Stream-Source"
HDR_COUNTER_SOURCES = "Nats-Counter-Sources"
_STRIPPED_PREFIXES = (b"Nats-Expected-", b"Nats-Batch-")
_FULL_WILDCARD = ">"
IDENTITY_CHARS = 8
_HASH_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """One configured source, compiled."""

    iname: str
    name: str
    filters: tuple[str, ...]  # what to fetch (empty: everything)
    transforms: tuple[SubjectTransform, ...]

    @classmethod
    def of(cls, src: StreamSource) -> SourceSpec:
        transforms: list[SubjectTransform] = []
        if src.subject_transforms:
            filters = tuple(tr.src or _FULL_WILDCARD for tr in src.subject_transforms)
            for tr in src.subject_transforms:
                compiled = SubjectTransform.compile(tr.src, tr.dest)
                if compiled is not None:
                    transforms.append(compiled)
        else:
            filters = (src.filter_subject,) if src.filter_subject else ()
        if _FULL_WILDCARD in filters:
            filters = ()
        return cls(source_index_name(src), src.name, filters, tuple(transforms))

    def subject(self, original: str, upstream_seq: int) -> str:
        """The subject a sourced message is stored under (a ``random()`` partition is drawn
        from the upstream seq, so every replica draws the same)."""
        pick = seeded_pick(upstream_seq)
        for transform in self.transforms:
            mapped = transform.match(original, pick)
            if mapped is not None:
                return mapped
        return original

    def header(self, hdr: bytes, upstream_seq: int, original_subject: str, ident: str) -> bytes:
        """The sourced message's header block."""
        if hdr:
            hdr = remove_header(hdr, HDR_STREAM_SOURCE)
            for prefix in _STRIPPED_PREFIXES:
                if prefix in hdr:
                    hdr = remove_prefixed_headers(hdr, prefix)
        _, filters, dests = self.iname.split(" ")
        value = f"{self.name} {upstream_seq} {filters} {dests} {original_subject}"
        if ident:
            value += f" {ident}"
        return append_headers(hdr, [(HDR_STREAM_SOURCE, value)])


def stream_identity(created_ns: int) -> str:
    """A stream's identity as nats-server derives it (``getHash`` of its creation time in
    RFC 3339): 8 characters of base 62 from the SHA-256. A recreated upstream has a new one."""
    digest = hashlib.sha256(format_rfc3339nano(created_ns).encode()).digest()
    return "".join(_HASH_DIGITS[b % len(_HASH_DIGITS)] for b in digest[:IDENTITY_CHARS])


def sourced_counter(
    hdr: bytes, data: bytes, previous_hdr: bytes | None, previous_total: int
) -> tuple[bytes, int] | ApiError:
    """A sourced counter message: the header to store (``Nats-Incr`` replaced by the difference
    from what this source last reported for the subject, ``Nats-Counter-Sources`` updated) and
    the new total; 10172 when a total cannot be read."""
    source_value = get_header(hdr, HDR_STREAM_SOURCE) or ""
    fields = source_value.split(" ")
    origin_stream = fields[0]
    origin_subject = fields[4] if len(fields) >= 5 else ""
    sourced_total = total_of(data)
    if isinstance(sourced_total, ApiError):
        return sourced_total
    seen: dict[str, dict[str, str]] = {}
    recorded = get_header(previous_hdr, HDR_COUNTER_SOURCES) if previous_hdr else None
    if recorded:
        try:
            parsed = json.loads(recorded)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or not all(
            isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
            for v in parsed.values()
        ):
            return ApiError(errors.MESSAGE_COUNTER_BROKEN)
        seen = parsed
    per_stream = seen.setdefault(origin_stream, {})
    before = per_stream.get(origin_subject, "")
    per_stream[origin_subject] = str(sourced_total)
    increment = sourced_total - (int(before) if before.lstrip("+-").isdigit() else 0)
    hdr = set_header(hdr, HDR_INCR, str(increment))
    hdr = set_header(
        hdr, HDR_COUNTER_SOURCES, json.dumps(seen, separators=(",", ":"), sort_keys=True)
    )
    return hdr, previous_total + increment
