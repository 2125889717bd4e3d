"""The fast checkers of a chaos run: pure functions from (history, node logs, run) to a verdict.

Inputs (the run directory contract of issue 6, whose names are ``jepsen_like.contract``'s):
``history`` — the operations of ``RUN/history.jsonl`` (see ``jepsen_like.history`` and
``jepsen_like.workloads`` for their values); ``node_logs`` — ``{node: rows of
RUN/nodes/<node>/log.jsonl}``, each row ``{"node", "stream", "index", "term", "op", "seq",
"subject", "id", "batch", "ts_ns", "applied_ns"}`` in the order the node applied them, ``index``
being the stream's Raft log index (the same entry has the same index on every node); ``run`` —
``RUN/run.json``. Empty ``node_logs`` (a nats-server calibration run) skips every check that needs
them, and the verdict says so under ``skipped``.

Words used below. A *write* is a message a publish or a batch tried to store, known by its
unique ``id``. It is *acked* when its op completed ``ok`` (its seq is ``value.seq``, or
``value.seqs[i]`` for ``value.ids[i]`` of a batch), *failed* when it completed ``fail`` (the
server refused it, or the workload abandoned the batch before its commit), *indeterminate*
otherwise (``info`` or never completed: it may be stored, or not — both are fine). A seq is
*removed* when some node logged an ``expire``, ``delete`` (by MSG.DELETE, or ``reason: "limit"``)
or ``purge`` row for it (a range purge is one row with no seq, removing every seq through its
``through``). Rows a state transfer wrote (``reason: "transfer"``: the diff that brought a
lagging replica to the leader's state) describe that node, not a cause: they excuse nothing.
*Final reads* are the ``read_all`` ops (MSG.GET of every seq from first_seq to last_seq); a seq
is *read absent* by a read_all when it was below first_seq, above last_seq, or answered "no
message found", and *unknown* when every read of it failed. "Before" means real time: op A is
before op B when A's completion index is lower than B's invoke index (one event loop records
the history).

Anomalies (``type``), each with a ``detail``, the ``ops`` and the ``log_rows`` that show it:

* ``malformed-history`` — the history itself is broken (``history.problems``).
* ``no-final-read`` — a stream has acked writes but no ``read_all`` succeeded, so nothing below
  could be verified for it.
* ``lost`` — an acked write whose id no final read found, whose seq a final read saw absent
  (or holding another message), and that no log explains: a ``delete``/``purge`` of its seq,
  or an ``expire`` of its seq when it was published with a TTL (without node logs, a TTL alone
  excuses it). A write whose seq was unknown to every final read is counted as
  ``unverified``, not lost.
* ``ack-mismatch`` — something (a final read, a read, a node's log) shows another message at an
  acked write's seq, or the acked id at another seq.
* ``unexpected`` — an id that a read or a node's log shows stored, but that no publish or batch
  invoked (``never-published``) or whose op failed (``failed``) or was abandoned
  (``abandoned``).
* ``duplicate`` — one id stored at two or more seqs (over final reads, reads and every log).
* ``split-brain`` — replaying each node's log up to the highest index every replica reached,
  a node whose set of (seq, id) differs from the majority's: it ``lacks`` messages the majority
  holds, holds ``extra`` ones, holds ``different`` ones, or there is ``no-majority``.
* ``partial-batch`` — a batch acked with ``count`` != its size; or stored only in part (some ids
  found, others read absent and not removed); or at seqs that are not its ids' order of
  contiguous seqs; or, in one node's log, spread over several Raft entries, with the wrong
  number of rows, or at non-contiguous seqs.
* ``non-contiguous`` — in one node's log, a stored message or marker whose seq is not the last
  stored seq + 1 (a gap, or a seq reused). Rows repeated after a restart (same index, op, seq)
  are replays and skipped; after a state transfer's rows the next stored seq only has to be
  higher than every seq before (the transferred state may end with removed seqs).
* ``expired-readable`` — a read that returned a removed message: (a) a MSG.GET that began after
  a write was acked whose store entry comes after the removal's entry in the Raft log
  (linearizable reads must see that state; clock-free); (b) any read that began more than
  ``EXPIRE_SLACK_NS`` after every replica's log shows the seq removed (and none re-stored it
  during the read) — wall-clock, so skipped when the run used the clock nemesis.
* ``stale-read`` — a MSG.GET that began after a write to that seq (or to that subject) was
  acked, yet returned "not found" (or, by subject, an older seq) — unless the write's seq was
  removed (or, without logs, had a TTL). Direct Get is allowed to be stale (ADR-31).
* ``consumer-lost`` — with ``consume`` ops (a durable consumer, drained at the end: the last
  consume op brought nothing): an acked write to the consumer's stream that no consume op ever
  delivered, and that no log row removed.
* ``redelivered-after-ack`` — a consume op that began after another completed with a confirmed
  ack of seq s, yet delivered s again.
* ``consumer-order`` — first deliveries (delivery count 1) of one consumer, in consumer seq
  order (the server's delivery order, also across concurrent pulls), whose stream seqs do not
  increase.
* ``cas-violation`` — a write acked with ``Nats-Expected-Last-Subject-Sequence: E`` at seq s
  while the final reads show another message on its subject between E and s (or, E = 0,
  before s; or seq E holding another subject).
* ``counter`` — counter streams (``increment`` and ``counter_read`` ops). An *increment* is
  known by its msg id over all its attempts: acked when an attempt completed ``ok`` (with the
  PubAck's ``val``, or ``duplicate``), failed when every attempt completed ``fail``,
  indeterminate otherwise. Per subject, ``detail.kind``: ``final-total`` — a final read's total
  minus the acked increments' sum is no subset sum of the indeterminate increments (checked
  ``exact``ly while their count times the span of their sums is under
  ``contract.COUNTER_EXACT_WORK``, else only against that span's ``bounds``; ``detail.method``
  says which); ``unread`` — acked increments but no final read of the subject succeeded;
  ``acked-total`` — an acked ``val`` that is not the previous acked ``val`` of its subject (or 0)
  plus the increments acked at seqs in between and its own, where every seq in between is an
  acked increment's (so none of unknown subject could lie there); ``seq-shared`` — two
  increments acked at one seq.

The verdict is ``{"valid", "anomalies", "anomaly_counts", "stats", "skipped", "checks"}``; at
most ``MAX_ANOMALIES_PER_TYPE`` anomalies of a type are listed (``anomaly_counts`` has the
totals), and each cites at most ``MAX_CITED`` ops and rows.

Must never: talk to a server, read anything but its arguments (``load_run`` reads a run
directory), or call a run valid when a check could not look at its data (that is an anomaly
or a ``skipped`` entry).
"""

from __future__ import annotations

import itertools
import json
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from jepsen_like.contract import (
    BATCH,
    CLOCK_NEMESIS,
    CONSUME,
    COUNTER_EXACT_WORK,
    COUNTER_READ,
    EXPIRE,
    FAIL,
    HISTORY_FILE,
    INCREMENT,
    INFO,
    LOG_FILE,
    MARKER,
    MSG_GET,
    NODES_DIR,
    OK,
    OPEN,
    PUBLISH,
    PURGE,
    READ_ALL,
    READ_FS,
    REASON_TRANSFER,
    REMOVAL_OPS,
    RUN_FILE,
    SEQ_OPS,
    STORE,
)
from jepsen_like.history import load_jsonl, pair, problems

Op = dict[str, Any]
Row = dict[str, Any]
Anomaly = dict[str, Any]
Logs = Mapping[str, Sequence[Row]]

MAX_CITED: Final = 20
MAX_ANOMALIES_PER_TYPE: Final = 100
MAX_LISTED_SEQS: Final = 50
EXPIRE_SLACK_NS: Final = 50_000_000  # a read this long after every replica removed the seq
PENDING: Final = "pending"  # a write's status while its op never completed (not a history type)
MARKER_VALUE: Final = "<marker>"  # what a stored subject delete marker holds (it has no id)
# where an observation of a stored message came from, when it was a history op (else a node)
READ_OPS: Final = (*READ_FS, READ_ALL)

ANOMALY_TYPES: Final = (
    "malformed-history",
    "no-final-read",
    "lost",
    "ack-mismatch",
    "unexpected",
    "duplicate",
    "split-brain",
    "partial-batch",
    "non-contiguous",
    "expired-readable",
    "stale-read",
    "cas-violation",
    "consumer-lost",
    "redelivered-after-ack",
    "consumer-order",
    "counter",
)


# --- loading ----------------------------------------------------------------------------------


@dataclass
class RunData:
    history: list[Op]
    node_logs: dict[str, list[Row]]
    run: dict[str, Any]
    unparsed_lines: dict[str, int] = field(default_factory=dict)  # file -> torn lines


def load_run(path: Path) -> RunData:
    """``RUN/history.jsonl``, every ``RUN/nodes/<n>/log.jsonl`` and ``RUN/run.json``.

    ``node_logs`` is empty when no node has a log.jsonl (nats-server); once one has, every node
    directory is listed (a node without the file has logged nothing)."""
    history, bad = load_jsonl(path / HISTORY_FILE)
    unparsed = {HISTORY_FILE: bad} if bad else {}
    node_logs: dict[str, list[Row]] = {}
    nodes_dir = path / NODES_DIR
    node_dirs = sorted(p for p in nodes_dir.iterdir() if p.is_dir()) if nodes_dir.is_dir() else []
    if any((d / LOG_FILE).exists() for d in node_dirs):
        for d in node_dirs:
            log = d / LOG_FILE
            rows, bad = load_jsonl(log) if log.exists() else ([], 0)
            node_logs[d.name] = rows
            if bad:
                unparsed[f"{NODES_DIR}/{d.name}/{LOG_FILE}"] = bad
    run_file = path / RUN_FILE
    run = json.loads(run_file.read_text()) if run_file.exists() else {}
    return RunData(history, node_logs, run if isinstance(run, dict) else {}, unparsed)


def check_run(path: Path, write: bool = True) -> dict[str, Any]:
    """Load the run directory ``path``, check it and (``write``) save ``RUN/verdict.json``."""
    data = load_run(path)
    verdict = check(data.history, data.node_logs, data.run)
    if data.unparsed_lines:
        verdict["stats"]["unparsed_lines"] = data.unparsed_lines
    if write:
        write_verdict(path, verdict)
    return verdict


def write_verdict(path: Path, verdict: Mapping[str, Any]) -> Path:
    out = path / "verdict.json"
    out.write_text(json.dumps(verdict, indent=1, sort_keys=True) + "\n")
    return out


# --- the facts every checker uses -------------------------------------------------------------


@dataclass
class Write:
    id: str
    stream: str
    subject: str | None
    status: str  # ok / fail / info / pending
    invoke: Op
    completion: Op | None
    seq: int | None = None  # acked seq
    ttl: str | None = None
    batch: str | None = None
    expected: int | None = None  # Nats-Expected-Last-Subject-Sequence
    abandoned: bool = False

    @property
    def acked(self) -> bool:
        return self.status == OK and self.seq is not None

    @property
    def done(self) -> int:
        """The completion's index (only meaningful for acked writes)."""
        return int(self.completion["index"]) if self.completion is not None else -1

    def ops(self) -> list[Op]:
        return [self.invoke] + ([self.completion] if self.completion is not None else [])


@dataclass
class Batch:
    id: str
    stream: str
    ids: list[str]
    status: str
    invoke: Op
    completion: Op | None
    count: int | None = None
    seqs: list[int] | None = None


@dataclass
class Increment:
    """One counter increment, over every attempt at it (one msg id)."""

    id: str
    stream: str
    subject: str
    incr: int
    status: str  # ok / fail / info (an attempt never completed counts as info)
    ops: list[Op]  # every attempt's invoke and completion
    seq: int | None = None  # from the ok attempt
    val: int | None = None  # its PubAck's total (None for a duplicate ack)
    attempts: int = 0

    def merge(self, invoke: Op, completion: Op | None) -> None:
        """Fold in one attempt: ok wins, then unknown; failed only if every attempt failed."""
        self.attempts += 1
        self.ops += [invoke] + ([completion] if completion is not None else [])
        status = PENDING if completion is None else str(completion.get("type"))
        if self.status == OK:
            return
        if status == OK:
            done = completion["value"] if completion is not None else {}
            seq, val = done.get("seq"), done.get("val")
            self.status = OK
            self.seq = seq if isinstance(seq, int) else None
            self.val = _integer(val)
        elif status != FAIL:
            self.status = INFO


def _integer(text: Any) -> int | None:
    """A decimal total (a string, as the server sends it), else None."""
    try:
        return int(text) if isinstance(text, str) else None
    except ValueError:
        return None


@dataclass
class Read:
    f: str
    stream: str
    request: dict[str, Any]
    invoke: Op
    completion: Op  # ok

    @property
    def found(self) -> bool:
        return not self.completion["value"].get("not_found") and self.seq is not None

    @property
    def seq(self) -> int | None:
        seq = self.completion["value"].get("seq")
        return seq if isinstance(seq, int) else None

    @property
    def id(self) -> str | None:
        value = self.completion["value"].get("id")
        return value if isinstance(value, str) else None


@dataclass
class FinalRead:
    op: Op  # the ok completion
    first: int
    last: int
    found: dict[int, dict[str, Any]]  # seq -> {"seq", "id", "subject"}
    unknown: set[int]

    def absent(self, seq: int) -> bool:
        return seq not in self.found and seq not in self.unknown

    def holds(self, seq: int, msg_id: str) -> bool:
        """False when this read saw ``seq`` absent or holding another message."""
        if seq in self.found:
            return self.found[seq].get("id") == msg_id
        return seq in self.unknown


@dataclass
class NodeReplay:
    """One node's log of one stream, replayed."""

    rows: list[Row]
    final: dict[int, Row]  # seq -> the store/marker row present at the end
    removals: list[tuple[int, Row]]  # (seq, row) for every removal, purges expanded
    max_index: int


class Facts:
    """The history and the logs, indexed once for every checker."""

    def __init__(self, history: Sequence[Op], node_logs: Logs | None, run: Mapping[str, Any]):
        self.history = list(history)
        self.run = dict(run)
        self.logs: dict[str, list[Row]] = {
            node: [r for r in rows if _valid_row(r)] for node, rows in (node_logs or {}).items()
        }
        self.bad_rows = sum(len(rows) for rows in (node_logs or {}).values()) - sum(
            len(rows) for rows in self.logs.values()
        )
        self.has_logs = bool(self.logs)
        self.pairs = pair(self.history)
        self.writes: dict[str, Write] = {}
        self.batches: dict[str, Batch] = {}
        self.reads: list[Read] = []
        self.final_reads: dict[str, list[FinalRead]] = defaultdict(list)
        self.increments: dict[str, Increment] = {}
        # (stream, subject) -> every counter_read (invoke, completion)
        self.counter_reads: dict[tuple[str, str], list[tuple[Op, Op | None]]] = defaultdict(list)
        self.streams: set[str] = set()
        for invoke, completion in self.pairs:
            self._add(invoke, completion)
        # logs by stream and node
        self.log_streams: dict[str, dict[str, list[Row]]] = defaultdict(dict)
        for node, rows in self.logs.items():
            for row in rows:
                self.log_streams[row["stream"]].setdefault(node, []).append(row)
        for per_node in self.log_streams.values():
            for node, rows in per_node.items():
                per_node[node] = without_rolled_back(rows)
        self.streams |= set(self.log_streams)
        self.replays: dict[str, dict[str, NodeReplay]] = {
            stream: {node: _replay(rows) for node, rows in by_node.items()}
            for stream, by_node in self.log_streams.items()
        }
        # per (stream, node): rows by seq, range purges, and batch messages, in file order
        self.rows_by_seq: dict[tuple[str, str], dict[int, list[Row]]] = {}
        self.range_purges: dict[tuple[str, str], list[Row]] = {}
        self.batch_rows: dict[tuple[str, str], dict[str, list[Row]]] = {}
        self.position: dict[int, int] = {}  # id(row) -> its line among its node's rows
        for stream, node_rows in self.log_streams.items():
            for node, rows in node_rows.items():
                by_seq: dict[int, list[Row]] = defaultdict(list)
                purges: list[Row] = []
                batches: dict[str, list[Row]] = defaultdict(list)
                for i, row in enumerate(rows):
                    self.position[id(row)] = i
                    if row.get("seq") is not None:
                        by_seq[row["seq"]].append(row)
                    elif row["op"] == PURGE:
                        purges.append(row)
                    if row["op"] == STORE and row.get("reason") != REASON_TRANSFER:
                        key = row.get("batch") or (row.get("id") or "").rpartition(".")[0]
                        if key:
                            batches[key].append(row)
                self.rows_by_seq[(stream, node)] = by_seq
                self.range_purges[(stream, node)] = purges
                self.batch_rows[(stream, node)] = batches
        self._final_ids: dict[str, dict[str, list[tuple[int, Op]]]] = {}
        self.removed: dict[tuple[str, int], list[Row]] = defaultdict(list)
        for stream, by_node in self.replays.items():
            for replay in by_node.values():
                for seq, row in replay.removals:
                    # a state transfer's removal only mirrors the leader's: not a cause
                    if row.get("reason") != REASON_TRANSFER:
                        self.removed[(stream, seq)].append(row)

    def _add(self, invoke: Op, completion: Op | None) -> None:
        f, value = invoke.get("f"), invoke.get("value")
        if not isinstance(value, dict) or not isinstance(value.get("stream"), str):
            return
        stream = value["stream"]
        self.streams.add(stream)
        status = PENDING if completion is None else str(completion.get("type"))
        done = completion.get("value") if completion is not None else None
        done = done if isinstance(done, dict) else {}
        if f == PUBLISH and isinstance(value.get("id"), str):
            seq = done.get("seq") if status == OK else None
            self.writes[value["id"]] = Write(
                id=value["id"],
                stream=stream,
                subject=value.get("subject"),
                status=status,
                invoke=invoke,
                completion=completion,
                seq=seq if isinstance(seq, int) else None,
                ttl=value.get("ttl"),
                expected=value.get("expected_last_subject_seq"),
            )
        elif f == BATCH and isinstance(value.get("ids"), list):
            ids = [str(i) for i in value["ids"]]
            seqs = done.get("seqs") if status == OK else None
            seqs = [int(s) for s in seqs] if isinstance(seqs, list) else None
            batch_id = str(value.get("batch"))
            count = done.get("count") if status == OK else None
            self.batches[batch_id] = Batch(
                batch_id, stream, ids, status, invoke, completion, count, seqs
            )
            for i, msg_id in enumerate(ids):
                seq = seqs[i] if seqs is not None and i < len(seqs) else None
                self.writes[msg_id] = Write(
                    id=msg_id,
                    stream=stream,
                    subject=value.get("subject"),
                    status=status if status != OK or seq is not None else INFO,
                    invoke=invoke,
                    completion=completion,
                    seq=seq,
                    batch=batch_id,
                    abandoned=bool(done.get("abandoned")),
                )
        elif f == INCREMENT and isinstance(value.get("id"), str):
            incr = value.get("incr")
            if not isinstance(incr, int) or isinstance(incr, bool):
                return
            inc = self.increments.get(value["id"])
            if inc is None:
                inc = Increment(value["id"], stream, str(value.get("subject")), incr, FAIL, [])
                self.increments[value["id"]] = inc
            inc.merge(invoke, completion)
        elif f == COUNTER_READ:
            self.counter_reads[(stream, str(value.get("subject")))].append((invoke, completion))
        elif f in READ_FS and completion is not None and status == OK:
            request = value.get("request")
            self.reads.append(
                Read(
                    str(f), stream, request if isinstance(request, dict) else {}, invoke, completion
                )
            )
        elif f == READ_ALL and completion is not None and status == OK:
            self.final_reads[stream].append(
                FinalRead(
                    op=completion,
                    first=int(done.get("first_seq") or 1),
                    last=int(done.get("last_seq") or 0),
                    found={
                        int(m["seq"]): m
                        for m in done.get("messages", [])
                        if isinstance(m, dict) and isinstance(m.get("seq"), int)
                    },
                    unknown={int(s) for s in done.get("unknown", [])},
                )
            )

    # --- derived views ------------------------------------------------------------------------
    def final_ids(self, stream: str) -> dict[str, list[tuple[int, Op]]]:
        """id -> every (seq, read_all op) at which the final reads of ``stream`` found it."""
        cached = self._final_ids.get(stream)
        if cached is None:
            cached = defaultdict(list)
            for fr in self.final_reads.get(stream, []):
                for seq, m in fr.found.items():
                    if m.get("id"):
                        cached[str(m["id"])].append((seq, fr.op))
            self._final_ids[stream] = cached
        return cached

    def acked(self) -> list[Write]:
        return [w for w in self.writes.values() if w.acked]

    def replicas(self, stream: str) -> list[str]:
        """Every node with a log, unless ``run["replicas"]`` says the streams have fewer
        replicas than there are nodes: then the nodes that logged something for the stream."""
        replicas = self.run.get("replicas")
        if isinstance(replicas, int) and replicas < len(self.logs):
            return sorted(self.log_streams.get(stream, {}))
        return sorted(self.logs)

    def excused(self, write: Write, seq: int | None = None) -> list[Row] | None:
        """The log rows that explain why ``write`` (at ``seq``, default its acked seq) may be
        gone, [] when its TTL explains it without logs, None when nothing does."""
        seq = write.seq if seq is None else seq
        if seq is None:
            return None
        rows = [
            r
            for r in self.removed.get((write.stream, seq), [])
            if r["op"] != EXPIRE or write.ttl is not None
        ]
        if rows:
            return rows
        if not self.has_logs and write.ttl is not None:
            return []
        return None

    def clock_skewed(self) -> bool:
        nemeses = self.run.get("nemeses") or []
        if isinstance(nemeses, str):
            nemeses = nemeses.split(",")
        return CLOCK_NEMESIS in nemeses

    def observations(self, stream: str) -> Iterable[tuple[int, str | None, str, Op | Row]]:
        """Every (seq, id, where, evidence) showing a message stored in ``stream``: final
        reads, found reads, and store/marker rows of every node."""
        for fr in self.final_reads.get(stream, []):
            for seq, m in fr.found.items():
                yield seq, m.get("id"), READ_ALL, fr.op
        for r in self.reads:
            if r.stream == stream and r.found and r.seq is not None:
                yield r.seq, r.id, r.f, r.completion
        for node, rows in self.log_streams.get(stream, {}).items():
            for row in rows:
                if row["op"] in SEQ_OPS:
                    yield row["seq"], row.get("id"), node, row


def _valid_row(row: Any) -> bool:
    return (
        isinstance(row, dict)
        and isinstance(row.get("stream"), str)
        and isinstance(row.get("index"), int)
        and isinstance(row.get("op"), str)
        and (row.get("seq") is None or isinstance(row.get("seq"), int))
        and (row["op"] not in SEQ_OPS or isinstance(row.get("seq"), int))
    )


def without_rolled_back(rows: list[Row]) -> list[Row]:
    """One node's rows of one stream minus those a crash rolled back.

    A node logs an entry's effects when it applies it, but its store persists them lazily; after
    a kill the reopened store may hold an earlier state. The ``open`` row it writes on restart
    names the applied index it reopened at: rows logged before it with a higher index described
    effects the node no longer has (it re-applies those entries, logging them again, or receives
    their outcome by state transfer)."""
    kept: list[Row] = []
    for row in rows:
        if row["op"] == OPEN:
            reopened_at = row["index"]
            kept = [r for r in kept if r["index"] <= reopened_at]
        kept.append(row)
    return kept


def _replay(rows: list[Row], upto_index: int | None = None) -> NodeReplay:
    """Apply ``rows`` in file order (replays after a restart re-apply the same rows, so the
    end state is the node's own), only those with index <= ``upto_index`` if given."""
    final: dict[int, Row] = {}
    removals: list[tuple[int, Row]] = []
    max_index = 0
    for row in rows:
        if upto_index is not None and row["index"] > upto_index:
            continue
        max_index = max(max_index, row["index"])
        op = row["op"]
        seq: int | None = row.get("seq")
        if op in SEQ_OPS and seq is not None:
            final[seq] = row
        elif op in REMOVAL_OPS:
            if seq is None and op == PURGE:
                through = row.get("through")
                gone = [s for s in final if not isinstance(through, int) or s <= through]
                for s in gone:
                    del final[s]
                removals += [(s, row) for s in gone]
            elif seq is not None:
                final.pop(seq, None)
                removals.append((seq, row))
    return NodeReplay(rows, final, removals, max_index)


def _purges(row: Row, seq: int) -> bool:
    """Whether a range purge row (no seq) removed ``seq``."""
    through = row.get("through")
    return not isinstance(through, int) or seq <= through


def _value(row: Row | None) -> str | None:
    """What a stored row holds, for comparing replicas: the id, or MARKER_VALUE."""
    if row is None:
        return None
    return MARKER_VALUE if row["op"] == MARKER else (row.get("id") or f"<seq {row['seq']} no id>")


def _cite(op: Op) -> Op:
    """An op without the bulk of a read_all's value."""
    value = op.get("value")
    if op.get("f") == READ_ALL and isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in ("messages", "missing", "unknown")}
        return {**op, "value": value}
    return op


def _anomaly(
    kind: str, detail: dict[str, Any], ops: Iterable[Op] = (), rows: Iterable[Row] = ()
) -> Anomaly:
    cited_ops: list[Op] = []
    seen: set[Any] = set()
    for op in ops:
        key = op.get("index")
        if key in seen:
            continue
        seen.add(key)
        cited_ops.append(_cite(op))
        if len(cited_ops) >= MAX_CITED:
            break
    return {"type": kind, "detail": detail, "ops": cited_ops, "log_rows": list(rows)[:MAX_CITED]}


# --- the checkers -----------------------------------------------------------------------------


def _malformed(fx: Facts) -> list[Anomaly]:
    found = problems(fx.history)
    if not found:
        return []
    return [
        _anomaly("malformed-history", {"problems": found[:MAX_LISTED_SEQS], "count": len(found)})
    ]


def _no_final_read(fx: Facts) -> list[Anomaly]:
    out = []
    for stream in sorted({w.stream for w in fx.acked()}):
        if not fx.final_reads.get(stream):
            failed = [
                op
                for inv, op in fx.pairs
                if op is not None
                and inv.get("f") == READ_ALL
                and isinstance(inv.get("value"), dict)
                and inv["value"].get("stream") == stream
            ]
            out.append(
                _anomaly(
                    "no-final-read",
                    {"stream": stream, "why": "no read_all of this stream succeeded"},
                    failed,
                )
            )
    return out


def _lost(fx: Facts, stats: dict[str, Any] | None = None) -> list[Anomaly]:
    found_ids: dict[str, set[str]] = defaultdict(set)
    for stream, frs in fx.final_reads.items():
        for fr in frs:
            found_ids[stream].update(str(m["id"]) for m in fr.found.values() if m.get("id"))
    out: list[Anomaly] = []
    unverified = excused = 0
    for w in fx.acked():
        assert w.seq is not None
        frs = fx.final_reads.get(w.stream, [])
        if not frs or w.id in found_ids[w.stream]:
            continue
        absent_in = [fr for fr in frs if not fr.holds(w.seq, w.id)]
        if not absent_in:
            unverified += 1
            continue
        rows = fx.excused(w)
        if rows is not None:
            excused += 1
            continue
        expired_no_ttl = [r for r in fx.removed.get((w.stream, w.seq), []) if r["op"] == EXPIRE]
        detail = {
            "id": w.id,
            "stream": w.stream,
            "seq": w.seq,
            "batch": w.batch,
            "why": "acked, absent from the final reads, and no log row removed it"
            if not expired_no_ttl
            else "acked without a TTL, yet expired",
            "read_absent_by": [fr.op.get("node") for fr in absent_in],
        }
        out.append(_anomaly("lost", detail, w.ops() + [fr.op for fr in absent_in], expired_no_ttl))
    if stats is not None:
        stats["unverified"] = unverified
        stats["removed_acked"] = excused
    return out


def _ack_mismatch(fx: Facts) -> list[Anomaly]:
    by_stream: dict[str, dict[int, Write]] = defaultdict(dict)
    for w in fx.acked():
        assert w.seq is not None
        by_stream[w.stream][w.seq] = w
    conflicts: dict[str, list[tuple[int, str | None, str, Op | Row]]] = defaultdict(list)
    for stream, acked_at in by_stream.items():
        acked_ids = {w.id: w for w in acked_at.values()}
        for seq, msg_id, where, ev in fx.observations(stream):
            at_seq = acked_at.get(seq)
            if at_seq is not None and msg_id != at_seq.id:
                conflicts[at_seq.id].append((seq, msg_id, where, ev))
            if msg_id is not None and msg_id in acked_ids and acked_ids[msg_id].seq != seq:
                conflicts[msg_id].append((seq, msg_id, where, ev))
    out = []
    for msg_id, seen in conflicts.items():
        w = fx.writes[msg_id]
        detail = {
            "id": msg_id,
            "stream": w.stream,
            "acked_seq": w.seq,
            "seen": [{"seq": s, "id": i, "where": where} for s, i, where, _ in seen][:MAX_CITED],
        }
        ops = w.ops() + [ev for _, _, where, ev in seen if where in READ_OPS]
        rows = [ev for _, _, where, ev in seen if where not in READ_OPS]
        out.append(_anomaly("ack-mismatch", detail, ops, rows))
    return out


def _unexpected(fx: Facts) -> list[Anomaly]:
    seen: dict[tuple[str, str], list[tuple[int, str, Op | Row]]] = defaultdict(list)
    for stream in sorted(fx.streams):
        for seq, msg_id, where, ev in fx.observations(stream):
            if msg_id is None:
                continue
            w = fx.writes.get(msg_id)
            if w is None or w.status == FAIL:
                seen[(stream, msg_id)].append((seq, where, ev))
    out = []
    for (stream, msg_id), where_seen in seen.items():
        w = fx.writes.get(msg_id)
        reason = "never-published" if w is None else "abandoned" if w.abandoned else "failed"
        detail = {
            "id": msg_id,
            "stream": stream,
            "reason": reason,
            "seen": sorted({f"{where}@{seq}" for seq, where, _ in where_seen})[:MAX_CITED],
        }
        ops = (w.ops() if w else []) + [ev for _, where, ev in where_seen if where in READ_OPS]
        rows = [ev for _, where, ev in where_seen if where not in READ_OPS]
        out.append(_anomaly("unexpected", detail, ops, rows))
    return out


def _duplicates(fx: Facts) -> list[Anomaly]:
    out = []
    for stream in sorted(fx.streams):
        seqs: dict[str, dict[int, list[tuple[str, Op | Row]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for seq, msg_id, where, ev in fx.observations(stream):
            if msg_id is not None:
                seqs[msg_id][seq].append((where, ev))
        for msg_id, at in seqs.items():
            if len(at) < 2:
                continue
            w = fx.writes.get(msg_id)
            detail = {
                "id": msg_id,
                "stream": stream,
                "seqs": sorted(at),
                "where": {str(s): sorted({wh for wh, _ in evs}) for s, evs in sorted(at.items())},
            }
            evidence = [ev for evs in at.values() for _, ev in evs]
            ops = (w.ops() if w else []) + [e for e in evidence if "f" in e]
            rows = [e for e in evidence if "f" not in e]
            out.append(_anomaly("duplicate", detail, ops, rows))
    return out


def _split_brain(fx: Facts) -> list[Anomaly]:
    out = []
    for stream in sorted(fx.log_streams):
        nodes = fx.replicas(stream)
        if len(nodes) < 2:
            continue
        full = fx.replays[stream]
        # compare at the highest index every replica with rows reached: the tail beyond it is
        # lag (e.g. expiries applied while the nodes were being stopped), not divergence; a
        # replica with no rows at all is compared as empty
        common = min(full[n].max_index for n in nodes if n in full)
        states = {n: _replay(full[n].rows, common).final if n in full else {} for n in nodes}
        seqs = sorted(set().union(*(s.keys() for s in states.values())))
        issues: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        rows: dict[tuple[str, str], list[Row]] = defaultdict(list)
        for seq in seqs:
            values = {n: _value(states[n].get(seq)) for n in nodes}
            top, votes = Counter(values.values()).most_common(1)[0]
            has_majority = votes > len(nodes) // 2
            for n, v in values.items():
                if has_majority and v == top:
                    continue
                if not has_majority:
                    kind = "no-majority"
                elif v is None:
                    kind = "lacks"
                elif top is None:
                    kind = "extra"
                else:
                    kind = "different"
                issues[(n, kind)].append(
                    {"seq": seq, "node_has": v, "majority_has": top if has_majority else None}
                )
                rows[(n, kind)] += [r for m in nodes if (r := states[m].get(seq)) is not None]
        for (node, kind), items in sorted(issues.items()):
            detail = {
                "stream": stream,
                "node": node,
                "kind": kind,
                "count": len(items),
                "compared_up_to_index": common,
                "seqs": [i["seq"] for i in items][:MAX_LISTED_SEQS],
                "examples": items[:MAX_CITED],
            }
            out.append(_anomaly("split-brain", detail, (), rows[(node, kind)]))
    return out


def _partial_batches(fx: Facts) -> list[Anomaly]:
    out = []
    for b in fx.batches.values():
        ops = [b.invoke] + ([b.completion] if b.completion else [])
        if b.status == OK and (
            b.count != len(b.ids) or b.seqs is None or len(b.seqs) != len(b.ids)
        ):
            detail = {
                "batch": b.id,
                "stream": b.stream,
                "why": "acked count is not the batch size",
                "size": len(b.ids),
                "count": b.count,
            }
            out.append(_anomaly("partial-batch", detail, ops))
        out += _partial_in_final_reads(fx, b, ops)
        out += _partial_in_logs(fx, b, ops)
    return out


def _partial_in_final_reads(fx: Facts, b: Batch, ops: list[Op]) -> list[Anomaly]:
    frs = fx.final_reads.get(b.stream, [])
    if not frs:
        return []
    at: dict[str, int] = {}
    evidence: list[Op] = []
    for msg_id in b.ids:
        for seq, op in fx.final_ids(b.stream).get(msg_id, []):
            at.setdefault(msg_id, seq)
            evidence.append(op)
    if not at:
        return []
    position = {msg_id: i for i, msg_id in enumerate(b.ids)}
    bases = {seq - position[msg_id] for msg_id, seq in at.items()}
    detail: dict[str, Any]
    if len(bases) > 1:
        detail = {
            "batch": b.id,
            "stream": b.stream,
            "why": "not at contiguous seqs in id order",
            "found": {i: at[i] for i in b.ids if i in at},
        }
        return [_anomaly("partial-batch", detail, ops + evidence)]
    base = bases.pop()
    missing = []
    for offset, msg_id in enumerate(b.ids):
        seq = base + offset
        if msg_id in at:
            continue
        w = fx.writes.get(msg_id)
        if any(fr.absent(seq) for fr in frs) and (w is None or fx.excused(w, seq) is None):
            missing.append({"id": msg_id, "seq": seq})
    if not missing:
        return []
    detail = {
        "batch": b.id,
        "stream": b.stream,
        "why": "stored only in part",
        "found": {i: at[i] for i in b.ids if i in at},
        "missing": missing,
    }
    return [_anomaly("partial-batch", detail, ops + evidence)]


def _partial_in_logs(fx: Facts, b: Batch, ops: list[Op]) -> list[Anomaly]:
    out = []
    position = {msg_id: i for i, msg_id in enumerate(b.ids)}
    for node in sorted(fx.log_streams.get(b.stream, {})):
        # rows carrying the batch id, or an id of the batch (its ids are "<batch>.<n>"); a
        # state transfer's rows are left out: they install what the leader holds, not the entry
        mine: dict[int, Row] = {}
        for row in fx.batch_rows[(b.stream, node)].get(b.id, []):
            if row.get("batch") == b.id or row.get("id") in position:
                mine.setdefault(row["seq"], row)
        if not mine:
            continue
        found = sorted(mine.values(), key=lambda r: r["seq"])
        why = []
        if len({r["index"] for r in found}) > 1:
            why.append("spread over several log entries")
        if len(found) != len(b.ids):
            why.append(f"{len(found)} of {len(b.ids)} messages stored")
        first = found[0]["seq"] - position.get(found[0].get("id") or "", 0)
        if any(r.get("id") in position and r["seq"] != first + position[r["id"]] for r in found):
            why.append("not at contiguous seqs in id order")
        if why:
            detail = {"batch": b.id, "stream": b.stream, "node": node, "why": "; ".join(why)}
            out.append(_anomaly("partial-batch", detail, ops, found))
    return out


def _non_contiguous(fx: Facts) -> list[Anomaly]:
    out = []
    for stream, by_node in sorted(fx.log_streams.items()):
        for node, rows in sorted(by_node.items()):
            seen: set[tuple[int, str, int | None]] = set()
            last = 0
            resync = False  # after a state transfer the next seq may follow removed ones
            problems_: list[dict[str, Any]] = []
            cited: list[Row] = []
            for row in rows:
                key = (row["index"], row["op"], row.get("seq"))
                if key in seen:
                    continue
                seen.add(key)
                if row.get("reason") == REASON_TRANSFER:
                    resync = True
                    if row["op"] in SEQ_OPS:
                        last = max(last, row["seq"])
                    continue
                if row["op"] not in SEQ_OPS:
                    continue
                if resync and row["seq"] > last:
                    resync, last = False, row["seq"]
                    continue
                if row["seq"] != last + 1:
                    kind = "gap" if row["seq"] > last + 1 else "reused"
                    problems_.append(
                        {
                            "kind": kind,
                            "expected": last + 1,
                            "seq": row["seq"],
                            "index": row["index"],
                        }
                    )
                    cited.append(row)
                last = max(last, row["seq"])
            if problems_:
                detail = {
                    "stream": stream,
                    "node": node,
                    "count": len(problems_),
                    "problems": problems_[:MAX_CITED],
                }
                out.append(_anomaly("non-contiguous", detail, (), cited))
    return out


def _store_index(fx: Facts) -> dict[tuple[str, str], int]:
    """(stream, id) -> the Raft index of the entry that stored it (lowest over nodes)."""
    index: dict[tuple[str, str], int] = {}
    for stream, by_node in fx.log_streams.items():
        for rows in by_node.values():
            for row in rows:
                if row["op"] == STORE and row.get("id"):
                    key = (stream, row["id"])
                    index[key] = min(index.get(key, row["index"]), row["index"])
    return index


def _expired_readable(fx: Facts, skipped: list[dict[str, str]] | None = None) -> list[Anomaly]:
    if not fx.has_logs:
        return []
    out = []
    # (a) MSG.GET after an acked write whose entry follows the removal's entry
    stored_at = _store_index(fx)
    acked = sorted(
        ((w.done, w) for w in fx.acked() if (w.stream, w.id) in stored_at), key=lambda t: t[0]
    )
    removal_index: dict[tuple[str, int], tuple[int, Row]] = {}
    for key, rows in fx.removed.items():
        first = min(rows, key=lambda r: r["index"])
        removal_index[key] = (first["index"], first)
    floor: dict[str, tuple[int, Write]] = {}
    reads = sorted(
        (r for r in fx.reads if r.f == MSG_GET and r.found), key=lambda r: r.invoke["index"]
    )
    k = 0
    flagged: set[int] = set()
    for r in reads:
        while k < len(acked) and acked[k][0] < r.invoke["index"]:
            w = acked[k][1]
            idx = stored_at[(w.stream, w.id)]
            if w.stream not in floor or idx > floor[w.stream][0]:
                floor[w.stream] = (idx, w)
            k += 1
        assert r.seq is not None
        removal = removal_index.get((r.stream, r.seq))
        if removal is None or r.stream not in floor:
            continue
        f_index, w = floor[r.stream]
        if removal[0] <= f_index:
            detail = {
                "stream": r.stream,
                "seq": r.seq,
                "id": r.id,
                "rule": "linearizable",
                "removed_at_index": removal[0],
                "acked_write": w.id,
                "acked_write_index": f_index,
            }
            out.append(
                _anomaly(
                    "expired-readable", detail, [r.invoke, r.completion, *w.ops()], [removal[1]]
                )
            )
            flagged.add(r.invoke["index"])
    # (b) any read that began after every replica had removed the seq (wall clock)
    if fx.clock_skewed():
        if skipped is not None:
            skipped.append(
                {
                    "check": "expired-readable (wall clock)",
                    "reason": "the clock nemesis skews the nodes' applied_ns",
                }
            )
        return out
    for r in fx.reads:
        if not r.found or r.invoke["index"] in flagged:
            continue
        assert r.seq is not None
        if (r.stream, r.seq) not in fx.removed:
            continue
        start = int(r.invoke["time_ns"]) - EXPIRE_SLACK_NS
        end = int(r.completion["time_ns"]) + EXPIRE_SLACK_NS
        evidence: list[Row] = []
        could_serve = False
        for node in fx.replicas(r.stream):
            node_key = (r.stream, node)
            rows = fx.rows_by_seq.get(node_key, {}).get(r.seq, []) + [
                p for p in fx.range_purges.get(node_key, []) if _purges(p, r.seq)
            ]
            rows.sort(key=lambda row: fx.position[id(row)])
            before = [row for row in rows if int(row.get("applied_ns") or 0) < start]
            during = [row for row in rows if start <= int(row.get("applied_ns") or 0) <= end]
            if (before and before[-1]["op"] in SEQ_OPS) or any(
                row["op"] in SEQ_OPS for row in during
            ):
                could_serve = True
                break
            if before:
                evidence.append(before[-1])
        if not could_serve and evidence:
            detail = {
                "stream": r.stream,
                "seq": r.seq,
                "id": r.id,
                "rule": "every replica removed it",
                "read": r.f,
                "read_invoked_ns": r.invoke["time_ns"],
                "slack_ns": EXPIRE_SLACK_NS,
            }
            out.append(_anomaly("expired-readable", detail, [r.invoke, r.completion], evidence))
    return out


def _stale_reads(fx: Facts) -> list[Anomaly]:
    by_seq: dict[tuple[str, int], Write] = {}
    by_subject: dict[tuple[str, str], list[Write]] = defaultdict(list)
    for w in fx.acked():
        assert w.seq is not None
        by_seq[(w.stream, w.seq)] = w
        if w.subject:
            by_subject[(w.stream, w.subject)].append(w)
    # per subject: acked writes by completion, and the latest (highest seq) among the first k
    done_at: dict[tuple[str, str], list[int]] = {}
    latest_of: dict[tuple[str, str], list[Write]] = {}
    for key, ws in by_subject.items():
        ws.sort(key=lambda w: w.done)
        done_at[key] = [w.done for w in ws]
        running: list[Write] = []
        for w in ws:
            running.append(
                w if not running or (w.seq or 0) > (running[-1].seq or 0) else running[-1]
            )
        latest_of[key] = running
    out = []
    for r in fx.reads:
        if r.f != MSG_GET:
            continue
        began = int(r.invoke["index"])
        if "seq" in r.request:
            acked = by_seq.get((r.stream, r.request["seq"]))
            if acked is None or acked.done >= began or r.found or fx.excused(acked) is not None:
                continue
            w = acked
            detail = {
                "stream": r.stream,
                "request": r.request,
                "acked_id": w.id,
                "acked_seq": w.seq,
                "returned": "not found",
            }
            out.append(_anomaly("stale-read", detail, [*w.ops(), r.invoke, r.completion]))
        elif "last_by_subj" in r.request:
            subject_key = (r.stream, str(r.request["last_by_subj"]))
            count = bisect_left(done_at.get(subject_key, []), began)  # acked before it began
            if not count:
                continue
            latest = latest_of[subject_key][count - 1]
            if r.found and (r.seq or 0) >= (latest.seq or 0):
                continue
            if fx.excused(latest) is not None:
                continue
            detail = {
                "stream": r.stream,
                "request": r.request,
                "acked_id": latest.id,
                "acked_seq": latest.seq,
                "returned": {"seq": r.seq, "id": r.id} if r.found else "not found",
            }
            out.append(_anomaly("stale-read", detail, [*latest.ops(), r.invoke, r.completion]))
    return out


def _consumers(fx: Facts) -> list[Anomaly]:
    """``consumer-lost``, ``redelivered-after-ack`` and ``consumer-order``."""
    by_consumer: dict[tuple[str, str], list[tuple[Op, Op]]] = defaultdict(list)
    for invoke, completion in fx.pairs:
        if invoke.get("f") != CONSUME or completion is None or completion.get("type") != OK:
            continue
        value = completion.get("value") or {}
        key = (str(value.get("stream")), str(value.get("consumer")))
        by_consumer[key].append((invoke, completion))
    out: list[Anomaly] = []
    for (stream, consumer), ops in sorted(by_consumer.items()):
        ops.sort(key=lambda p: p[0]["index"])
        confirmed: dict[int, Op] = {}  # seq -> the earliest completion confirming its ack
        delivered_ids: set[str] = set()
        firsts: list[tuple[int, int, Op]] = []  # (consumer seq, stream seq, op) of 1st deliveries
        for invoke, completion in ops:
            value = completion["value"]
            for seq, msg_id, deliveries, cseq in value.get("msgs") or []:
                if msg_id is not None:
                    delivered_ids.add(str(msg_id))
                ack = confirmed.get(seq)
                if ack is not None and ack["index"] < invoke["index"]:
                    detail = {"stream": stream, "consumer": consumer, "seq": seq}
                    out.append(_anomaly("redelivered-after-ack", detail, [ack, completion]))
                if deliveries == 1:
                    firsts.append((cseq, seq, completion))
            for seq in value.get("acked") or []:
                confirmed.setdefault(seq, completion)
        # concurrent pulls share the deliveries: their order is the consumer seq's
        firsts.sort(key=lambda f: f[0])
        for (_c1, seq1, op1), (_c2, seq2, op2) in itertools.pairwise(firsts):
            if seq2 <= seq1:
                detail = {"stream": stream, "consumer": consumer, "seq": seq2, "after": seq1}
                out.append(_anomaly("consumer-order", detail, [op1, op2]))
        drained = not (ops[-1][1]["value"].get("msgs") or [])
        if not drained:
            continue
        for w in fx.acked():
            if w.stream != stream or w.id in delivered_ids or fx.excused(w) is not None:
                continue
            detail = {
                "stream": stream,
                "consumer": consumer,
                "id": w.id,
                "seq": w.seq,
                "why": "acked, never delivered to the consumer, and no log row removed it",
            }
            out.append(_anomaly("consumer-lost", detail, w.ops()))
    return out


def _cas(fx: Facts) -> list[Anomaly]:
    out = []
    found_in: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    on_subject: dict[tuple[str, str], list[int]] = defaultdict(list)
    for stream, frs in fx.final_reads.items():
        for fr in frs:
            for seq, m in fr.found.items():
                found_in[stream].setdefault(seq, m)
        for seq, m in sorted(found_in[stream].items()):
            on_subject[(stream, str(m.get("subject")))].append(seq)
    for w in fx.acked():
        if w.expected is None or w.subject is None:
            continue
        assert w.seq is not None
        frs = fx.final_reads.get(w.stream, [])
        found = found_in[w.stream]
        seqs = on_subject.get((w.stream, w.subject), [])
        between = [
            found[seq] for seq in seqs[bisect_right(seqs, w.expected) : bisect_left(seqs, w.seq)]
        ]
        wrong_subject = (
            w.expected > 0 and w.expected in found and found[w.expected].get("subject") != w.subject
        )
        if between or wrong_subject:
            detail = {
                "id": w.id,
                "stream": w.stream,
                "subject": w.subject,
                "seq": w.seq,
                "expected_last_subject_seq": w.expected,
                "why": "another message on the subject in between"
                if between
                else "the expected seq holds another subject",
                "in_between": sorted(m["seq"] for m in between)[:MAX_LISTED_SEQS],
            }
            ops = w.ops() + [fr.op for fr in frs]
            out.append(_anomaly("cas-violation", detail, ops))
    return out


def subset_sums(values: Sequence[int]) -> tuple[int, int, int | None]:
    """``(lo, hi, bits)``: every subset sum of ``values`` lies in ``lo..hi``; ``bits`` has bit
    ``s - lo`` set for each sum ``s`` some subset makes, or is None when that would take more than
    ``COUNTER_EXACT_WORK`` steps (then only the bounds are known)."""
    lo = sum(v for v in values if v < 0)
    hi = sum(v for v in values if v > 0)
    if len(values) * (hi - lo) > COUNTER_EXACT_WORK:
        return lo, hi, None
    bits = 1 << -lo  # the empty subset: sum 0
    for v in values:
        bits |= bits << v if v >= 0 else bits >> -v
    return lo, hi, bits


def _counters(fx: Facts, stats: dict[str, Any] | None = None) -> list[Anomaly]:
    by_subject: dict[tuple[str, str], list[Increment]] = defaultdict(list)
    for inc in fx.increments.values():
        by_subject[(inc.stream, inc.subject)].append(inc)
    out: list[Anomaly] = []
    totals: dict[str, dict[str, Any]] = {}
    for stream, subject in sorted(set(by_subject) | set(fx.counter_reads)):
        incs = by_subject.get((stream, subject), [])
        acked = [i for i in incs if i.status == OK]
        unknown = [i for i in incs if i.status == INFO]
        base = sum(i.incr for i in acked)
        lo, hi, bits = subset_sums([i.incr for i in unknown])
        reads = [(inv, c) for inv, c in fx.counter_reads.get((stream, subject), []) if c]
        reads = [(inv, c) for inv, c in reads if c.get("type") == OK]
        detail: dict[str, Any] = {
            "stream": stream,
            "subject": subject,
            "acked": len(acked),
            "acked_sum": base,
            "indeterminate": len(unknown),
            "explainable": [base + lo, base + hi],
            "method": "exact" if bits is not None else "bounds",
        }
        finals = [(c, _final_total(c)) for _inv, c in reads]
        totals[subject] = {**detail, "final": sorted({str(t) for _c, t in finals})}
        if not reads:
            if acked:
                why = "acked increments, but no final read of the subject succeeded"
                failed = [c for _inv, c in fx.counter_reads.get((stream, subject), []) if c]
                out.append(_anomaly("counter", {**detail, "kind": "unread", "why": why}, failed))
            continue
        bad = [
            (c, total)
            for c, total in finals
            if total is None
            or not lo <= total - base <= hi
            or (bits is not None and not bits >> (total - base - lo) & 1)
        ]
        if bad:
            detail |= {
                "kind": "final-total",
                "why": "the final total is not the acked increments' sum plus some of the "
                "indeterminate ones",
                "finals": [{"node": _served_by(c), "total": str(t)} for c, t in bad],
            }
            ops = [c for c, _t in bad] + [op for i in acked + unknown for op in i.ops]
            out.append(_anomaly("counter", detail, ops))
    out += _acked_totals(fx)
    if stats is not None:
        incs = list(fx.increments.values())
        stats["counter_increments"] = len(incs)
        stats["counter_acked"] = sum(1 for i in incs if i.status == OK)
        stats["counter_failed"] = sum(1 for i in incs if i.status == FAIL)
        stats["counter_indeterminate"] = sum(1 for i in incs if i.status == INFO)
        stats["counter_retries"] = sum(i.attempts - 1 for i in incs)
        if totals:
            stats["counter_totals"] = totals
    return out


def _served_by(read: Op) -> Any:
    return (read.get("value") or {}).get("served_by") or read.get("node")


def _final_total(read: Op) -> int | None:
    """The total a final counter read saw: 0 when the subject has no message yet."""
    value = read.get("value") or {}
    return 0 if value.get("not_found") else _integer(value.get("val"))


def _acked_totals(fx: Facts) -> list[Anomaly]:
    """``acked-total`` and ``seq-shared`` (see the module docstring)."""
    by_stream: dict[str, list[Increment]] = defaultdict(list)
    for inc in fx.increments.values():
        if inc.status == OK and inc.seq is not None:
            by_stream[inc.stream].append(inc)
    out: list[Anomaly] = []
    for stream, incs in sorted(by_stream.items()):
        incs.sort(key=lambda i: (i.seq, i.id))
        known = sorted({i.seq for i in incs if i.seq is not None})
        rank = {seq: n for n, seq in enumerate(known, start=1)}  # seq 0 (none yet) ranks 0
        at_seq: dict[int, list[Increment]] = defaultdict(list)
        for inc in incs:
            assert inc.seq is not None
            at_seq[inc.seq].append(inc)
        for seq, shared in sorted(at_seq.items()):
            if len(shared) > 1:
                detail = {"stream": stream, "kind": "seq-shared", "seq": seq}
                detail["ids"] = [i.id for i in shared]
                out.append(_anomaly("counter", detail, [op for i in shared for op in i.ops]))
        # per subject: (seq, total, running sum of its acked increments) of the last acked val
        last: dict[str, tuple[int, int, int, Increment | None]] = {}
        running: dict[str, int] = defaultdict(int)
        for inc in incs:
            assert inc.seq is not None
            running[inc.subject] += inc.incr
            if inc.val is None:
                continue
            prev_seq, prev_val, prev_sum, prev = last.get(inc.subject, (0, 0, 0, None))
            last[inc.subject] = (inc.seq, inc.val, running[inc.subject], inc)
            if rank[inc.seq] - rank.get(prev_seq, 0) != inc.seq - prev_seq:
                continue  # a seq in between is unaccounted for: it may hold this subject's
            expected = prev_val + running[inc.subject] - prev_sum
            if inc.val != expected:
                detail = {
                    "stream": stream,
                    "subject": inc.subject,
                    "kind": "acked-total",
                    "id": inc.id,
                    "seq": inc.seq,
                    "incr": inc.incr,
                    "val": str(inc.val),
                    "expected": str(expected),
                    "after": {"id": prev.id, "seq": prev_seq, "val": str(prev_val)}
                    if prev is not None
                    else {"seq": 0, "val": "0"},
                }
                ops = inc.ops + (prev.ops if prev is not None else [])
                out.append(_anomaly("counter", detail, ops))
    return out


# --- public: one function per anomaly type, and the verdict -----------------------------------


def check_well_formed(history: Sequence[Op]) -> list[Anomaly]:
    """``malformed-history``: the history's own problems."""
    return _malformed(Facts(history, None, {}))


def check_final_reads(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``no-final-read``: streams with acked writes that no read_all read."""
    return _no_final_read(Facts(history, node_logs, run or {}))


def check_lost(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``lost``: acked writes gone without a logged removal."""
    return _lost(Facts(history, node_logs, run or {}))


def check_ack_mismatch(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``ack-mismatch``: another message at an acked seq, or the acked id elsewhere."""
    return _ack_mismatch(Facts(history, node_logs, run or {}))


def check_unexpected(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``unexpected``: stored ids never published, or whose publish failed."""
    return _unexpected(Facts(history, node_logs, run or {}))


def check_duplicates(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``duplicate``: one id stored at several seqs."""
    return _duplicates(Facts(history, node_logs, run or {}))


def check_split_brain(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``split-brain``: a node whose replayed log differs from the majority's."""
    return _split_brain(Facts(history, node_logs, run or {}))


def check_partial_batches(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``partial-batch``: batches not stored whole at contiguous seqs in one entry."""
    return _partial_batches(Facts(history, node_logs, run or {}))


def check_contiguous(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``non-contiguous``: gaps or reused seqs in a node's log."""
    return _non_contiguous(Facts(history, node_logs, run or {}))


def check_expired_readable(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``expired-readable``: reads that returned a message already removed."""
    return _expired_readable(Facts(history, node_logs, run or {}))


def check_stale_reads(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``stale-read``: MSG.GETs that missed a write acked before they began."""
    return _stale_reads(Facts(history, node_logs, run or {}))


def check_consumers(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``consumer-lost``, ``redelivered-after-ack`` and ``consumer-order``."""
    return _consumers(Facts(history, node_logs, run or {}))


def check_cas(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``cas-violation``: expected-last-subject-sequence writes that should have failed."""
    return _cas(Facts(history, node_logs, run or {}))


def check_counters(
    history: Sequence[Op], node_logs: Logs | None = None, run: Mapping[str, Any] | None = None
) -> list[Anomaly]:
    """``counter``: final totals and acked totals of counter subjects."""
    return _counters(Facts(history, node_logs, run or {}))


LOG_CHECKS: Final = ("split-brain", "non-contiguous", "expired-readable")


def check(
    history: Sequence[Op], node_logs: Logs | None, run: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The verdict of a run (see the module docstring)."""
    fx = Facts(history, node_logs, run or {})
    stats: dict[str, Any] = {}
    skipped: list[dict[str, str]] = []
    anomalies: list[Anomaly] = []
    anomalies += _malformed(fx)
    anomalies += _no_final_read(fx)
    anomalies += _lost(fx, stats)
    anomalies += _ack_mismatch(fx)
    anomalies += _unexpected(fx)
    anomalies += _duplicates(fx)
    anomalies += _partial_batches(fx)
    anomalies += _stale_reads(fx)
    anomalies += _cas(fx)
    anomalies += _consumers(fx)
    anomalies += _counters(fx, stats)
    if fx.has_logs:
        anomalies += _split_brain(fx)
        anomalies += _non_contiguous(fx)
        anomalies += _expired_readable(fx, skipped)
    else:
        skipped += [
            {"check": name, "reason": "no node logs (e.g. a nats-server run)"}
            for name in LOG_CHECKS
        ]
        skipped.append(
            {
                "check": "log evidence in lost/unexpected/duplicate/partial-batch",
                "reason": "no node logs: final reads and client reads only",
            }
        )
    counts = Counter(a["type"] for a in anomalies)
    listed: list[Anomaly] = []
    per_type: Counter[str] = Counter()
    for a in anomalies:
        per_type[a["type"]] += 1
        if per_type[a["type"]] <= MAX_ANOMALIES_PER_TYPE:
            listed.append(a)
    stats.update(_stats(fx))
    return {
        "valid": not anomalies,
        "anomalies": listed,
        "anomaly_counts": dict(sorted(counts.items())),
        "stats": stats,
        "skipped": skipped,
        "checks": [t for t in ANOMALY_TYPES if t not in LOG_CHECKS or fx.has_logs],
    }


def _stats(fx: Facts) -> dict[str, Any]:
    ops: Counter[str] = Counter()
    for op in fx.history:
        ops[f"{op.get('f')}:{op.get('type')}"] += 1
    acked = fx.acked()
    return {
        "ops": len(fx.history),
        "by_f_type": dict(sorted(ops.items())),
        "writes": len(fx.writes),
        "acked_writes": len(acked),
        "failed_writes": sum(1 for w in fx.writes.values() if w.status == FAIL),
        "indeterminate_writes": sum(1 for w in fx.writes.values() if w.status in (INFO, PENDING)),
        "batches": len(fx.batches),
        "reads": len(fx.reads),
        "final_reads": {s: len(frs) for s, frs in sorted(fx.final_reads.items())},
        "streams": sorted(fx.streams),
        "nodes_with_logs": sorted(fx.logs),
        "log_rows": sum(len(rows) for rows in fx.logs.values()),
        "log_rows_malformed": fx.bad_rows,
    }
