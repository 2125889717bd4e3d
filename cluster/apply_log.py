"""The applied-entry log: one JSON row per message event, as each replica applies the Raft log.

Enabled by ``jetraft server --apply_log [PATH]`` (default ``<store_dir>/jetstream/applied.jsonl``)
for the chaos harness and Spark jobs (issue 6's run-directory contract). Rows:
``{"node","stream","index","term","op","seq","subject","id","batch","ts_ns","applied_ns"}`` with
``op`` one of ``store`` (a message stored), ``marker`` (a subject delete marker stored), ``expire``
(removed by an expire entry), ``delete`` (removed by MSG.DELETE, or by a limit while a publish
was applied: then ``reason`` is ``"limit"``; by interest or work-queue retention when a consumer
entry was applied: ``"retention"``), ``purge`` (removed by a purge; a purge of a whole
range is one row with ``through``). ``id`` is the payload's ``id`` when the payload is a JSON
object that has one; ``batch`` the atomic batch id; ``applied_ns`` this node's wall clock.

Besides the message events, three kinds of rows let a reader replay each replica through the
engine itself (issue 7's Spark jobs): ``open`` when a replica opens its stream (``config`` as
JSON, ``created_ns``, the applied ``index`` it opened at and its ``digest``); ``entry`` for every
applied entry (``entry``: the engine entry bytes, base64; ``digest``: this replica's state digest
after applying it, hex); ``transfer`` when a state transfer brought the replica to ``index``
(entries before it are not in this node's log). These rows have ``seq`` null.

The rows come from watching the store under the engine (``ObservedStore``): what the engine
appended and removed while applying one entry is exactly that entry's effect, so the log cannot
drift from the state. Rows are written (flushed to the OS) after each apply, not fsynced: a kill
may lose the last rows, never invent one.

A replica reports its apply path to an ``ApplyObserver`` unconditionally; ``observe_applies``
picks it when the replica is built: with an apply log, an ``ApplyLogObserver`` over the replica's
store wrapped in an ``ObservedStore``; without, ``NO_APPLY_OBSERVER`` and the store untouched.

Must never: change what is stored, or cost anything when disabled (the store is then not
wrapped, and the apply path makes a few calls that do nothing per entry, none per message).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TextIO

from engine.entries import (
    CONSUMER_OPS,
    BatchCommitEntry,
    DeleteMsgEntry,
    ExpireEntry,
    LogEntry,
    PurgeEntry,
)
from engine.store import CorruptRecord, MessageStore, StoredMsg, new_stored
from engine.stream import Stream
from engine.ttl import is_subject_delete_marker

DEFAULT_NAME = "applied.jsonl"


# One store event: ("append", StoredMsg), ("remove", (seq, StoredMsg | None)) or
# ("remove_through", seq).
StoreEvent = tuple[str, Any]


class ObservedStore:
    """A ``MessageStore`` over another that records appends and removals for the apply log.

    Every method of the interface is written out, none forwarded by attribute lookup: the type
    checker holds this class to ``MessageStore`` where ``observe_applies`` returns it as one, so
    a method added to the interface must be added here too."""

    __slots__ = ("_events", "_inner")

    def __init__(self, inner: MessageStore) -> None:
        self._inner = inner
        self._events: list[StoreEvent] = []

    def take_events(self) -> list[StoreEvent]:
        """What was appended and removed since the last take (or forget), oldest first."""
        events, self._events = self._events, []
        return events

    def forget_events(self) -> None:
        self._events.clear()

    # --- the events -----------------------------------------------------------------------
    def append(self, msg: StoredMsg) -> None:
        self.append_fields(msg.seq, msg.subject, msg.hdr, msg.data, msg.ts_ns)

    def append_fields(self, seq: int, subject: str, hdr: bytes, data: bytes, ts_ns: int) -> None:
        self._inner.append_fields(seq, subject, hdr, data, ts_ns)
        self._events.append(("append", new_stored((seq, subject, hdr, data, ts_ns))))

    def remove(self, seq: int, *, erase: bool = False) -> bool:
        before = self._inner.load(seq)  # what is removed, for the row (only while logging)
        removed = self._inner.remove(seq, erase=erase)
        if removed:
            self._events.append(("remove", (seq, before)))
        return removed

    def remove_through(self, seq: int) -> None:
        self._inner.remove_through(seq)
        self._events.append(("remove_through", seq))

    # --- the rest of the interface, unobserved ----------------------------------------------
    def load(self, seq: int) -> StoredMsg | None:
        return self._inner.load(seq)

    def scan(self) -> Iterator[StoredMsg]:
        return self._inner.scan()

    def set_meta(self, meta: bytes) -> None:
        self._inner.set_meta(meta)

    def get_meta(self) -> bytes | None:
        return self._inner.get_meta()

    def flush(self) -> None:
        self._inner.flush()

    def fsync(self) -> None:
        self._inner.fsync()

    def sync(self) -> None:
        self._inner.sync()

    def corrupt_records(self) -> list[CorruptRecord]:
        return self._inner.corrupt_records()

    def recovery_notes(self) -> list[str]:
        return self._inner.recovery_notes()

    def close(self) -> None:
        self._inner.close()


def _payload_id(data: bytes) -> str | None:
    if not data.startswith(b"{"):
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    value = doc.get("id") if isinstance(doc, dict) else None
    return None if value is None else str(value)


class ApplyLog:
    def __init__(self, path: Path, node: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.node = node
        self._file: TextIO = open(path, "a", encoding="utf-8")

    def record(
        self,
        stream: str,
        index: int,
        term: int,
        entry: LogEntry | None,
        events: list[StoreEvent],
    ) -> None:
        """Rows for what applying ``entry`` at ``index`` did; ``entry`` None means a state
        transfer brought the replica to ``index`` (removals then carry ``reason: transfer``)."""
        if not events:
            return
        if entry is None:
            removal = "transfer"
        elif isinstance(entry, ExpireEntry):
            removal = "expire"
        elif isinstance(entry, DeleteMsgEntry):
            removal = "delete"
        elif isinstance(entry, PurgeEntry):
            removal = "purge"
        elif isinstance(entry, CONSUMER_OPS):
            removal = "retention"  # interest / work-queue retention (an ack, a delete...)
        else:
            removal = "limit"
        batch = entry.batch_id if isinstance(entry, BatchCommitEntry) else None
        now = time.time_ns()
        base = {"node": self.node, "stream": stream, "index": index, "term": term}
        lines = []
        for kind, item in events:
            row: dict[str, Any] = dict(base)
            if kind == "append":
                msg: StoredMsg = item
                if entry is None:
                    row["reason"] = "transfer"
                marker = bool(msg.hdr) and is_subject_delete_marker(msg.hdr)
                row.update(
                    op="marker" if marker else "store",
                    seq=msg.seq,
                    subject=msg.subject,
                    id=None if marker else _payload_id(msg.data),
                    batch=batch,
                    ts_ns=msg.ts_ns,
                )
            elif kind == "remove":
                seq, gone = item
                reasoned = removal in ("limit", "retention", "transfer")
                row.update(op="delete" if reasoned else removal, seq=seq)
                if reasoned:
                    row["reason"] = removal
                row.update(
                    subject=gone.subject if gone else None,
                    id=_payload_id(gone.data) if gone else None,
                    batch=None,
                    ts_ns=gone.ts_ns if gone else None,
                )
            else:
                row.update(op="purge", seq=None, through=item)
                row.update(subject=None, id=None, batch=None, ts_ns=None)
            row["applied_ns"] = now
            lines.append(json.dumps(row, separators=(",", ":")))
        self._file.write("\n".join(lines) + "\n")
        self._file.flush()

    def record_marker(self, stream: str, op: str, index: int, **fields: Any) -> None:
        """An ``open``, ``entry`` or ``transfer`` row (see the module docstring)."""
        row: dict[str, Any] = {
            "node": self.node,
            "stream": stream,
            "index": index,
            "term": fields.pop("term", 0),
            "op": op,
            "seq": None,
            **fields,
            "applied_ns": time.time_ns(),
        }
        self._file.write(json.dumps(row, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class ApplyObserver(Protocol):
    """What a replica's apply path reports, whether or not anyone logs it."""

    def opened(self, stream: Stream) -> None:
        """The replica opened ``stream`` (before it applies anything)."""
        ...

    def applying(self) -> None:
        """An entry is about to be applied: store changes made before it are not its effect."""
        ...

    def applied(
        self, stream: Stream, index: int, term_of: Callable[[int], int], raw: bytes, entry: LogEntry
    ) -> None:
        """``entry`` (encoded: ``raw``) was applied at ``index``; ``term_of(index)`` is its term,
        asked only by an observer that needs it."""
        ...

    def transferred(self, stream: Stream) -> None:
        """A state transfer brought ``stream`` to its applied index."""
        ...


class _NoApplyObserver:
    """The observer of a replica without an apply log: nothing to do."""

    def opened(self, stream: Stream) -> None:
        pass

    def applying(self) -> None:
        pass

    def applied(
        self, stream: Stream, index: int, term_of: Callable[[int], int], raw: bytes, entry: LogEntry
    ) -> None:
        pass

    def transferred(self, stream: Stream) -> None:
        pass


NO_APPLY_OBSERVER: ApplyObserver = _NoApplyObserver()


class ApplyLogObserver:
    """Writes one replica's rows to the apply log, from what its ``ObservedStore`` saw."""

    def __init__(self, log: ApplyLog, stream_name: str, store: ObservedStore) -> None:
        self._log = log
        self._name = stream_name  # a stream is never renamed: fixed for the replica's life
        self._store = store

    def opened(self, stream: Stream) -> None:
        self._log.record_marker(
            self._name,
            "open",
            stream.applied_index,
            config=json.loads(stream.config.model_dump_json()),
            created_ns=stream.created_ns,
            digest=stream.digest().hex(),
        )

    def applying(self) -> None:
        # a state transfer cut short, or the engine opening on the store, changed it outside
        # any entry: not this entry's effect
        self._store.forget_events()

    def applied(
        self, stream: Stream, index: int, term_of: Callable[[int], int], raw: bytes, entry: LogEntry
    ) -> None:
        term = term_of(index)
        self._log.record_marker(
            self._name,
            "entry",
            index,
            term=term,
            entry=base64.b64encode(raw).decode(),
            digest=stream.digest().hex(),
        )
        self._log.record(self._name, index, term, entry, self._store.take_events())

    def transferred(self, stream: Stream) -> None:
        index = stream.applied_index
        self._log.record(self._name, index, 0, None, self._store.take_events())
        self._log.record_marker(self._name, "transfer", index, digest=stream.digest().hex())


def observe_applies(
    log: ApplyLog | None, stream_name: str, store: MessageStore
) -> tuple[MessageStore, ApplyObserver]:
    """The store a replica's engine should write to and the observer of its apply path: chosen
    once, when the replica is built, so the apply path never asks whether a log is kept."""
    if log is None:
        return store, NO_APPLY_OBSERVER
    observed = ObservedStore(store)
    return observed, ApplyLogObserver(log, stream_name, observed)
