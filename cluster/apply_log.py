"""The applied-entry log: one JSON row per message event, as each replica applies the Raft log.

Enabled by ``jetraft server --apply_log [PATH]`` (default ``<store_dir>/jetstream/applied.jsonl``)
for the chaos harness and Spark jobs (issue 6's run-directory contract). Rows:
``{"node","stream","index","term","op","seq","subject","id","batch","ts_ns","applied_ns"}`` with
``op`` one of ``store`` (a message stored), ``marker`` (a subject delete marker stored), ``expire``
(removed by an expire entry), ``delete`` (removed by MSG.DELETE, or by a limit while a publish
was applied: then ``reason`` is ``"limit"``), ``purge`` (removed by a purge; a purge of a whole
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

Must never: change what is stored, or cost anything when disabled.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

from engine.entries import (
    BatchCommitEntry,
    DeleteMsgEntry,
    Entry,
    ExpireEntry,
    PurgeEntry,
)
from engine.store import MessageStore, StoredMsg
from engine.ttl import is_subject_delete_marker

DEFAULT_NAME = "applied.jsonl"


class ObservedStore:
    """A ``MessageStore`` that records appends and removals for the apply log."""

    def __init__(self, inner: MessageStore) -> None:
        self._inner = inner
        self.events: list[tuple[str, Any]] = []

    def append(self, msg: StoredMsg) -> None:
        self._inner.append(msg)
        self.events.append(("append", msg))

    def remove(self, seq: int, *, erase: bool = False) -> bool:
        before = self._inner.load(seq)  # what is removed, for the row (only while logging)
        removed = self._inner.remove(seq, erase=erase)
        if removed:
            self.events.append(("remove", (seq, before)))
        return removed

    def remove_through(self, seq: int) -> None:
        self._inner.remove_through(seq)
        self.events.append(("remove_through", seq))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


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
        entry: Entry | None,
        events: list[tuple[str, Any]],
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
                reasoned = removal in ("limit", "transfer")
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
