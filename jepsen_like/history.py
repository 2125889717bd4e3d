"""The operation history of a chaos run: an append-only JSONL file, one operation per line.

An operation is ``{"index", "time_ns", "process", "node", "type", "f", "value"}`` (the run
directory contract of issue 6). A logical process invokes an operation (``type: "invoke"``) and
later completes it with exactly one of ``ok`` (it happened), ``fail`` (it certainly did not
happen) or ``info`` (unknown: it may have happened, at any time after the invoke, or never).
A process has at most one operation outstanding, so a completion is paired with its invoke by
process alone, as in Jepsen. ``index`` is the position in the file and strictly increases; since
one event loop records every operation, index order is a real-time order: an op whose
completion has a lower index than another op's invoke finished before that op began.
``time_ns`` is the harness's wall clock (``time.time_ns``), comparable with the nodes'
``applied_ns`` because every process runs on the same machine (unless a clock nemesis skews a
node).

The names of that record (keys, types, the nemesis process) are ``jepsen_like.contract``'s.
This module writes and reads histories and pairs invokes with completions; it must never
interpret operations (that is the checker's job) or touch the network.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

from jepsen_like.contract import COMPLETION_TYPES as COMPLETION_TYPES
from jepsen_like.contract import INFO, INVOKE
from jepsen_like.contract import NEMESIS_PROCESS as NEMESIS_PROCESS
from jepsen_like.contract import OP_KEYS as OP_KEYS
from jepsen_like.contract import OP_TYPES as OP_TYPES

Process = int | str
CompletionType = Literal["ok", "fail", "info"]  # contract.COMPLETION_TYPES, as a type


class HistoryError(ValueError):
    """An operation that would make the history malformed (e.g. completing an unknown invoke)."""


class History:
    """Append-only writer of ``path`` (created, or appended to if it exists).

    Each operation is written and flushed as one line as soon as it is recorded, so a crash of
    the harness leaves a readable prefix. Only the outstanding invokes are kept in memory.
    """

    def __init__(self, path: Path, clock: Callable[[], int] = time.time_ns) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._next_index = _count_lines(path)
        self._file: IO[str] | None = open(path, "a", encoding="utf-8")
        self._pending: dict[int, dict[str, Any]] = {}
        self._busy: dict[Process, int] = {}  # process -> index of its outstanding invoke
        self.counts: Counter[tuple[str, str]] = Counter()  # (f, type) -> ops, for progress

    # --- recording ----------------------------------------------------------------------------
    def invoke(self, process: Process, node: str | None, f: str, value: Any) -> int:
        """Record that ``process`` (connected to ``node``) begins ``f``; returns its index."""
        if process in self._busy:
            raise HistoryError(
                f"process {process!r} invokes {f!r} while op {self._busy[process]} is outstanding"
            )
        op = self._write(process, node, INVOKE, f, value)
        self._pending[op["index"]] = op
        self._busy[process] = op["index"]
        return int(op["index"])

    def complete(self, invoke_index: int, type: CompletionType, value: Any) -> int:
        """Record the outcome of the outstanding invoke ``invoke_index``: same process, node and
        f; returns the completion's index."""
        if type not in COMPLETION_TYPES:
            raise HistoryError(f"completion type must be ok/fail/info, not {type!r}")
        invoke = self._pending.pop(invoke_index, None)
        if invoke is None:
            raise HistoryError(f"op {invoke_index} is not an outstanding invoke")
        del self._busy[invoke["process"]]
        op = self._write(invoke["process"], invoke["node"], type, invoke["f"], value)
        return int(op["index"])

    def record(
        self, process: Process, node: str | None, type: CompletionType, f: str, value: Any
    ) -> int:
        """An invoke and its completion at once (e.g. a nemesis action that cannot hang)."""
        return self.complete(self.invoke(process, node, f, value), type, value)

    def pending(self) -> list[dict[str, Any]]:
        """The outstanding invokes, oldest first."""
        return [self._pending[i] for i in sorted(self._pending)]

    def close_pending(self, reason: str) -> int:
        """Complete every outstanding invoke as ``info`` (its outcome is unknown), with
        ``value.error = reason``; returns how many there were."""
        todo = self.pending()
        for op in todo:
            value = dict(op["value"]) if isinstance(op["value"], dict) else {"value": op["value"]}
            value["error"] = reason
            self.complete(op["index"], INFO, value)
        return len(todo)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> History:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _write(
        self, process: Process, node: str | None, type: str, f: str, value: Any
    ) -> dict[str, Any]:
        if self._file is None:
            raise HistoryError("history is closed")
        op = {
            "index": self._next_index,
            "time_ns": self._clock(),
            "process": process,
            "node": node,
            "type": type,
            "f": f,
            "value": value,
        }
        # serialise before counting the index, so an unserialisable value leaves no gap
        line = json.dumps(op, separators=(",", ":"), sort_keys=False)
        self._file.write(line + "\n")
        self._file.flush()
        self._next_index += 1
        self.counts[(f, type)] += 1
        return op


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        return sum(1 for _ in fh)


# --- reading ----------------------------------------------------------------------------------


def load_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of ``path``, one per line, and the number of lines that were not one
    (a line torn by a kill, or two such lines glued together by an append after a restart)."""
    rows: list[dict[str, Any]] = []
    bad = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                bad += 1
    return rows, bad


def load(path: Path) -> list[dict[str, Any]]:
    """The operations of the history file ``path``, in file order (torn lines dropped)."""
    ops, _bad = load_jsonl(path)
    return ops


def pair(
    history: Iterable[dict[str, Any]],
) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Every invoke with its completion (None if it never completed), in invoke order.

    Completions are matched to the outstanding invoke of the same process; a completion with no
    outstanding invoke is ignored here (``problems`` reports it)."""
    pairs: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    open_by_process: dict[Any, int] = {}
    for op in history:
        process = _hashable(op.get("process"))
        if op.get("type") == INVOKE:
            open_by_process[process] = len(pairs)
            pairs.append((op, None))
        elif process in open_by_process:
            at = open_by_process.pop(process)
            pairs[at] = (pairs[at][0], op)
    return pairs


def problems(history: Iterable[dict[str, Any]]) -> list[str]:
    """Why ``history`` is not well-formed (empty when it is): missing keys or bad types, indexes
    not strictly increasing, a completion without an outstanding invoke of its process or with
    another f, an invoke while the process has one outstanding, an invoke never completed."""
    found: list[str] = []
    last_index: int | None = None
    outstanding: dict[Any, dict[str, Any]] = {}
    for op in history:
        missing = [k for k in OP_KEYS if k not in op]
        if missing:
            found.append(f"op {op.get('index')} lacks {missing}")
            continue
        index = op["index"]
        if not isinstance(index, int) or (last_index is not None and index <= last_index):
            found.append(f"op index {index!r} does not increase (after {last_index!r})")
        if isinstance(index, int):
            last_index = index
        process = _hashable(op["process"])
        kind = op["type"]
        if kind not in OP_TYPES:
            found.append(f"op {index} has type {kind!r}")
        elif kind == INVOKE:
            if process in outstanding:
                found.append(
                    f"op {index}: process {op['process']!r} invokes while op "
                    f"{outstanding[process]['index']} is outstanding"
                )
            outstanding[process] = op
        else:
            invoke = outstanding.pop(process, None)
            if invoke is None:
                found.append(f"op {index}: {kind} without an outstanding invoke")
            elif invoke["f"] != op["f"]:
                found.append(f"op {index}: completes {invoke['f']!r} as {op['f']!r}")
    found += [f"op {op['index']} ({op['f']}) never completed" for op in outstanding.values()]
    return found


def _hashable(process: Any) -> Any:
    return process if isinstance(process, (int, str)) or process is None else repr(process)
