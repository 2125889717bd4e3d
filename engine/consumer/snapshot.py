"""Consumer state as JSON: the snapshot a replica restores from, and what the digest hashes.

The encoding is canonical (sorted keys, no spaces, pending and redelivered as lists sorted by
stream seq, consumers sorted by name), so two replicas with the same state write the same bytes.
Deadlines are not stored: they follow from the config and the pending timestamps.

Must never: accept a document it cannot fully account for (every problem raises
``ConsumerSnapshotError``), or store anything that would differ between equal states.
"""

from __future__ import annotations

import json
from typing import Any, Final

from engine.consumer.config import (
    ConsumerConfigError,
    canonical_json,
    check_consumer_name,
    parse_config,
)
from engine.consumer.consumer import Consumer
from engine.consumer.pending import Pending
from engine.consumer.results import SeqPair

SNAPSHOT_FORMAT_VERSION: Final = 1
_CONSUMER_KEYS: Final = frozenset(
    {
        "name",
        "created_ns",
        "config",
        "delivered",
        "ack_floor",
        "pending",
        "redelivered",
        "skip_seqs",
        "resume_seq",
        "active",
    }
)


class ConsumerSnapshotError(ValueError):
    """The document is not a consumer snapshot this code wrote."""


def consumer_to_obj(consumer: Consumer) -> dict[str, Any]:
    return {
        "name": consumer.name,
        "created_ns": consumer.created_ns,
        "config": consumer.config.to_obj(),
        "delivered": list(consumer.delivered),
        "ack_floor": list(consumer.ack_floor),
        "pending": [[seq, p.consumer_seq, p.ts_ns] for seq, p in consumer.pending.items()],
        "redelivered": [[seq, n] for seq, n in sorted(consumer.redelivered.items())],
        "skip_seqs": consumer.skip_seqs,
        "resume_seq": consumer.resume_seq,
        "active": [consumer.delivered_active_ns, consumer.acked_active_ns],
    }


def snapshot_obj(applied_index: int, consumers: list[Consumer]) -> dict[str, Any]:
    return {
        "version": SNAPSHOT_FORMAT_VERSION,
        "applied_index": applied_index,
        "consumers": [consumer_to_obj(c) for c in sorted(consumers, key=lambda c: c.name)],
    }


def snapshot_bytes(applied_index: int, consumers: list[Consumer]) -> bytes:
    return canonical_json(snapshot_obj(applied_index, consumers))


def _int(value: object, what: str, lo: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConsumerSnapshotError(f"bad {what}: {value!r}")
    return value


def _ints(value: object, n: int, what: str, signed_last: bool = False) -> list[int]:
    if not isinstance(value, list) or len(value) != n:
        raise ConsumerSnapshotError(f"bad {what}: {value!r}")
    out = [_int(v, what) for v in value[:-1]] if signed_last else [_int(v, what) for v in value]
    if signed_last:
        out.append(_int(value[-1], what, lo=-(1 << 127)))
    return out


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConsumerSnapshotError(f"bad {what}")
    return value


def consumer_from_obj(obj: object) -> Consumer:
    if not isinstance(obj, dict) or set(obj) != _CONSUMER_KEYS:
        raise ConsumerSnapshotError("bad consumer record")
    name = obj["name"]
    if not isinstance(name, str):
        raise ConsumerSnapshotError("bad consumer name")
    try:
        check_consumer_name(name)
        config = parse_config(canonical_json(obj["config"]))
    except ConsumerConfigError as exc:
        raise ConsumerSnapshotError(f"bad consumer config: {exc}") from None
    pending: list[tuple[int, Pending]] = []
    for item in _list(obj["pending"], "pending"):
        seq, consumer_seq, ts_ns = _ints(item, 3, "pending", signed_last=True)
        pending.append((seq, Pending(consumer_seq, ts_ns)))
    redelivered: dict[int, int] = {}
    for item in _list(obj["redelivered"], "redelivered"):
        seq, count = _ints(item, 2, "redelivered")
        redelivered[seq] = count
    seqs = [seq for seq, _ in pending]
    if seqs != sorted(set(seqs)) or len(redelivered) != len(_list(obj["redelivered"], "")):
        raise ConsumerSnapshotError("pending or redelivered seqs repeat or are out of order")
    skip = [_int(s, "skip seq", lo=1) for s in _list(obj["skip_seqs"], "skip_seqs")]
    if skip != sorted(set(skip)):
        raise ConsumerSnapshotError("skip seqs out of order")
    return Consumer.restore(
        name,
        config,
        _int(obj["created_ns"], "created_ns", lo=-(1 << 63)),
        delivered=SeqPair(*_ints(obj["delivered"], 2, "delivered")),
        ack_floor=SeqPair(*_ints(obj["ack_floor"], 2, "ack_floor")),
        pending=pending,
        redelivered=redelivered,
        skip_seqs=skip,
        resume_seq=_int(obj["resume_seq"], "resume_seq"),
        active=tuple(_ints(obj["active"], 2, "active")),
    )


def parse_snapshot(raw: bytes) -> tuple[int, list[Consumer]]:
    """(applied index, consumers) from ``snapshot_bytes`` output."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConsumerSnapshotError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or set(doc) != {"version", "applied_index", "consumers"}:
        raise ConsumerSnapshotError("not a consumer snapshot")
    if doc["version"] != SNAPSHOT_FORMAT_VERSION:
        raise ConsumerSnapshotError(f"unknown snapshot version {doc['version']!r}")
    consumers = [consumer_from_obj(c) for c in _list(doc["consumers"], "consumers")]
    names = [c.name for c in consumers]
    if names != sorted(set(names)):
        raise ConsumerSnapshotError("consumer names repeat or are out of order")
    return _int(doc["applied_index"], "applied_index"), consumers
