"""The run-directory contract (issue 6) in one place: file names, the history's record, op names,
which ops write, read or remove, what a batch record holds, and the node logs' row ops.

The chaos harness writes runs (``history.py``, ``runner.py``), its checker (``checker.py``) and
the Spark analysis (``spark/``) read them; every name either side matches on is defined here.
Values are tuples so one constant serves both ``x in WRITE_FS`` and Spark's
``F.col("f").isin(*WRITE_FS)``.

Layering: this is the one module of ``jepsen_like`` that ``spark/`` may import
(``tests/test_architecture.py``), and ``spark/session.py`` ships it, alone with the package's
empty ``__init__``, to Spark's executors next to ``protocol``, ``engine`` and ``spark``.

Must never: import anything (the contract is data, readable by any layer, and an executor has
none of the harness it could import), or change a value without the writers (workloads, the
nodes' apply log) changing with it.
"""

from __future__ import annotations

from typing import Final

# --- the run directory ------------------------------------------------------------------------
RUN_FILE: Final = "run.json"
HISTORY_FILE: Final = "history.jsonl"
LEADERS_FILE: Final = "leaders.jsonl"
NODES_DIR: Final = "nodes"  # RUN/nodes/<node>/...
LOG_FILE: Final = "log.jsonl"  # a node's apply log, RUN/nodes/<node>/log.jsonl

# --- a history record -------------------------------------------------------------------------
# {"index", "time_ns", "process", "node", "type", "f", "value"}, one per line of history.jsonl
OP_KEYS: Final = ("index", "time_ns", "process", "node", "type", "f", "value")
INVOKE: Final = "invoke"
OK: Final = "ok"  # it happened
FAIL: Final = "fail"  # it certainly did not happen
INFO: Final = "info"  # unknown: it may have happened, or not
COMPLETION_TYPES: Final = (OK, FAIL, INFO)
OP_TYPES: Final = (INVOKE, *COMPLETION_TYPES)
NEMESIS_PROCESS: Final = "nemesis"  # the process of fault ops, whose values are free-form

# --- op names (``f``) -------------------------------------------------------------------------
PUBLISH: Final = "publish"  # value {"stream", "id", "subject", "ttl"?}; ok adds "seq"
BATCH: Final = "batch"  # see BATCH_* below
DIRECT_GET: Final = "direct_get"  # value {"stream", "request"}; ok adds "seq", "id" or not_found
MSG_GET: Final = "msg_get"
READ_ALL: Final = "read_all"  # the final read: ok {"first_seq", "last_seq", "messages", ...}
# a pull from a durable consumer, each message then acked with a confirmed (double) ack: value
# {"stream", "consumer"}; ok adds "msgs" [[seq, id, deliveries, consumer seq], ...] and
# "acked" [seq, ...] (the acks the server confirmed, each before the op completed)
CONSUME: Final = "consume"
WRITE_FS: Final = (PUBLISH, BATCH)
READ_FS: Final = (DIRECT_GET, MSG_GET)
# --- counter streams (ADR-49) -------------------------------------------------------------
# one attempt at one increment: value {"stream", "subject", "id", "incr", "attempt"}: ``id`` is
# the increment's Nats-Msg-Id, the same on every retry of it (the server dedupes them), ``incr``
# an integer, ``attempt`` 1, 2, ...; ok adds "seq" and "val" (the subject's total after it, a
# decimal string) or "duplicate": true (the server had applied an earlier attempt; no val)
INCREMENT: Final = "increment"
# the final read of one counter subject (MSG.GET last_by_subj): value {"stream", "subject"}; ok
# adds "seq" and "val" (decimal string; null when the payload holds no counter value) or
# "not_found": true, and "served_by"
COUNTER_READ: Final = "counter_read"
COUNTER_FS: Final = (INCREMENT, COUNTER_READ)
# the counter check is exact (a subset sum of the indeterminate increments) while their count
# times the span of their possible sums stays under this, else it checks the bounds of that span;
# the checker and spark/ judge by the same rule, so they choose the same way
COUNTER_EXACT_WORK: Final = 1_000_000
CLIENT_FS: Final = (*WRITE_FS, *READ_FS, READ_ALL, CONSUME, *COUNTER_FS)

# --- a batch record ---------------------------------------------------------------------------
# invoke {"stream", "batch", "ids", "subject", "abandon"}; ok adds {"seq", "count", "seqs"}
# (``seqs[i]`` is the seq of ``ids[i]``); a batch the workload gave up before its commit
# completes fail with {"abandoned": true}: none of its ids may be stored
BATCH_INVOKE_KEYS: Final = ("stream", "batch", "ids", "subject", "abandon")
BATCH_OK_KEYS: Final = ("seq", "count", "seqs")
ABANDONED: Final = "abandoned"

# --- a node's log row -------------------------------------------------------------------------
# {"node", "stream", "index", "term", "op", "seq", "subject", "id", "batch", "ts_ns",
# "applied_ns"} (+ "reason", "through" for removals; "config", "digest", "entry" for replays)
LOG_ROW_KEYS: Final = (
    "node",
    "stream",
    "index",
    "term",
    "op",
    "seq",
    "subject",
    "id",
    "batch",
    "ts_ns",
    "applied_ns",
)
STORE: Final = "store"
MARKER: Final = "marker"  # a subject delete marker: takes a seq, has no id
EXPIRE: Final = "expire"
DELETE: Final = "delete"
PURGE: Final = "purge"  # one seq, or (no seq) every seq through ``through``
OPEN: Final = "open"
ENTRY: Final = "entry"
TRANSFER: Final = "transfer"  # an op (a state transfer installed) and a removal's ``reason``
SEQ_OPS: Final = (STORE, MARKER)  # rows that take a new stream sequence
REMOVAL_OPS: Final = (EXPIRE, DELETE, PURGE)
MESSAGE_OPS: Final = (*SEQ_OPS, EXPIRE, DELETE)  # rows that always name one seq
REPLAY_OPS: Final = (OPEN, ENTRY, TRANSFER)  # rows a replay of the engine consumes
LOG_OPS: Final = (*MESSAGE_OPS, PURGE, *REPLAY_OPS)
REASON_LIMIT: Final = "limit"  # a delete the stream's limits made, not a MSG.DELETE
REASON_TRANSFER: Final = TRANSFER  # rows a state transfer wrote: a diff, never a cause

# --- run.json ---------------------------------------------------------------------------------
CLOCK_NEMESIS: Final = "clock"  # in ``nemeses``: node clocks were skewed, applied_ns lies
