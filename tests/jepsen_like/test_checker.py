"""The chaos harness's history writer and fast checkers, on hand-made runs (issue 6's "proof that
the checkers can fail").

A clean scenario (publishes acked, failed and indeterminate; an atomic batch and an abandoned
one; a TTL message that expires and leaves a marker; compare-and-set writes; fresh reads; final
reads from every node; identical node logs) must pass. Each test then plants one anomaly — a
lost acked write, a duplicate, a split-brain node, a partial batch, a gap in a log, a stale
MSG.GET, an expired message read back, ... — and asserts that it is caught, with the right
detail, and that nothing else is reported. The same runs are also written as run directories
and checked through ``load_run`` / ``check_run``.
Must never: start a server (these are pure functions over data).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jepsen_like import checker
from jepsen_like.checker import check, check_run, load_run
from jepsen_like.history import History, HistoryError, load, pair, problems

T0 = 1_700_000_000_000_000_000
STEP_NS = 1_000_000  # 1 ms between two recorded operations
NODES = ("n1", "n2", "n3")
FINAL_PROCESS_BASE = 10_000


# --- a hand-made run ----------------------------------------------------------------------------


class Scenario:
    """Builds a history, node logs and run.json by hand. Every op is one ms after the previous
    one; a log row is applied at the time of the op that caused it."""

    def __init__(self, nodes: tuple[str, ...] = NODES) -> None:
        self.nodes = list(nodes)
        self.ops: list[dict[str, Any]] = []
        self.rows: dict[str, list[dict[str, Any]]] = {n: [] for n in nodes}
        self.final: dict[str, dict[str, Any]] = {}  # stream -> explicit final read values
        self.streams: list[str] = []
        self.run: dict[str, Any] = {"nodes": self.nodes, "seed": 1, "nemeses": []}
        self._index: dict[str, int] = {}

    def now(self) -> int:
        return T0 + len(self.ops) * STEP_NS

    def op(self, process: Any, type: str, f: str, value: dict[str, Any]) -> dict[str, Any]:
        node = self.nodes[process % len(self.nodes)] if isinstance(process, int) else None
        op = {
            "index": len(self.ops),
            "time_ns": self.now(),
            "process": process,
            "node": node,
            "type": type,
            "f": f,
            "value": value,
        }
        self.ops.append(op)
        return op

    def _stream(self, stream: str) -> None:
        if stream not in self.streams:
            self.streams.append(stream)

    def next_index(self, stream: str) -> int:
        self._index[stream] = self._index.get(stream, 0) + 1
        return self._index[stream]

    def row(
        self,
        stream: str,
        op: str,
        seq: int | None,
        index: int,
        msg_id: str | None = None,
        subject: str | None = None,
        batch: str | None = None,
        nodes: list[str] | None = None,
        applied_ns: int | None = None,
    ) -> None:
        self._stream(stream)
        for node in self.nodes if nodes is None else nodes:
            self.rows[node].append(
                {
                    "node": node,
                    "stream": stream,
                    "index": index,
                    "term": 1,
                    "op": op,
                    "seq": seq,
                    "subject": subject,
                    "id": msg_id,
                    "batch": batch,
                    "ts_ns": self.now(),
                    "applied_ns": self.now() if applied_ns is None else applied_ns,
                }
            )

    def publish(
        self,
        p: int,
        stream: str,
        msg_id: str,
        subject: str,
        outcome: str = "ok",
        seq: int | None = None,
        stored: bool | None = None,
        ttl: str | None = None,
        expected: int | None = None,
    ) -> None:
        """A publish; ``seq`` is where it is stored (and acked, if ok); stored defaults to
        ``outcome == "ok"``."""
        self._stream(stream)
        value: dict[str, Any] = {"stream": stream, "id": msg_id, "subject": subject}
        if ttl is not None:
            value["ttl"] = ttl
        if expected is not None:
            value["expected_last_subject_seq"] = expected
        self.op(p, "invoke", "publish", value)
        if stored if stored is not None else outcome == "ok":
            assert seq is not None
            self.row(stream, "store", seq, self.next_index(stream), msg_id, subject)
        done = dict(value)
        if outcome == "ok":
            done["seq"] = seq
        elif outcome == "fail":
            done["error"] = {"code": 400, "err_code": 10071, "description": "wrong last sequence"}
        else:
            done["error"] = "timeout"
        self.op(p, outcome, "publish", done)

    def batch(
        self,
        p: int,
        stream: str,
        batch: str,
        size: int,
        subject: str,
        first_seq: int | None = None,
        outcome: str = "ok",
        abandoned: bool = False,
    ) -> list[str]:
        self._stream(stream)
        ids = [f"{batch}.{i}" for i in range(1, size + 1)]
        value: dict[str, Any] = {"stream": stream, "batch": batch, "ids": ids, "subject": subject}
        value["abandon"] = abandoned
        self.op(p, "invoke", "batch", value)
        done: dict[str, Any] = dict(value)
        if outcome == "ok":
            assert first_seq is not None
            index = self.next_index(stream)
            for i, msg_id in enumerate(ids):
                self.row(stream, "store", first_seq + i, index, msg_id, subject, batch)
            last = first_seq + size - 1
            done.update(seq=last, count=size, seqs=list(range(first_seq, last + 1)))
        elif abandoned:
            done.update(abandoned=True, sent=size)
        self.op(p, outcome, "batch", done)
        return ids

    def read(
        self,
        p: int,
        f: str,
        stream: str,
        request: dict[str, Any],
        found: tuple[int, str | None, str] | None,
    ) -> None:
        """A read that returns (seq, id, subject), or not found when ``found`` is None."""
        value = {"stream": stream, "request": request}
        self.op(p, "invoke", f, value)
        served_by = self.nodes[p % len(self.nodes)] if f == "msg_get" else None
        result: dict[str, Any]
        if found is None:
            result = {"not_found": True}
        else:
            result = {"seq": found[0], "id": found[1], "subject": found[2]}
        self.op(p, "ok", f, {**value, **result, "served_by": served_by})

    def final_from_logs(self, stream: str, node: str = "n1") -> dict[str, Any]:
        """What a read_all of ``stream`` returns if the cluster holds ``node``'s log state."""
        state: dict[int, dict[str, Any]] = {}
        for row in self.rows[node]:
            if row["stream"] != stream:
                continue
            if row["op"] in ("store", "marker"):
                state[row["seq"]] = {"seq": row["seq"], "id": row["id"], "subject": row["subject"]}
            elif row["op"] in ("expire", "delete", "purge"):
                if row["seq"] is None:
                    state = {k: v for k, v in state.items() if k > row["through"]}
                state.pop(row["seq"], None)
        last = max(
            (
                r["seq"]
                for r in self.rows[node]
                if r["stream"] == stream and r["op"] in ("store", "marker")
            ),
            default=0,
        )
        return {
            "first_seq": 1,
            "last_seq": last,
            "messages": [state[s] for s in sorted(state)],
            "missing": [s for s in range(1, last + 1) if s not in state],
            "unknown": [],
        }

    def build(self) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], dict[str, Any]]:
        """The history (with final reads of every stream from every node appended), the node
        logs and run.json."""
        ops = list(self.ops)
        saved = self.ops
        self.ops = ops
        for i, node in enumerate(self.nodes):
            for stream in self.streams:
                final = self.final.get(stream) or self.final_from_logs(stream)
                self.op(FINAL_PROCESS_BASE + i, "invoke", "read_all", {"stream": stream})
                self.ops[-1]["node"] = node
                self.op(
                    FINAL_PROCESS_BASE + i,
                    "ok",
                    "read_all",
                    {"stream": stream, **json.loads(json.dumps(final)), "served_by": node},
                )
                self.ops[-1]["node"] = node
        self.ops = saved
        logs = {n: [dict(r) for r in rows] for n, rows in self.rows.items()}
        return ops, logs, dict(self.run)


def clean() -> Scenario:
    """A run where everything went right (see the module docstring)."""
    sc = Scenario()
    sc.publish(0, "S", "a1", "s.a", seq=1)
    sc.publish(1, "S", "a2", "s.a", seq=2)
    sc.publish(2, "S", "a3", "s.b", outcome="info", seq=3, stored=True)  # timed out, stored
    sc.publish(0, "S", "a4", "s.b", outcome="fail")  # refused: never stored
    sc.publish(1, "S", "a5", "s.b", outcome="info")  # timed out, never stored
    sc.publish(0, "S", "a6", "s.c", seq=4, ttl="1s")
    sc.batch(1, "S", "B1", 3, "s.batch", first_seq=5)
    sc.batch(2, "S", "B2", 2, "s.batch", outcome="fail", abandoned=True)
    expire = sc.next_index("S")  # the TTL expiry removes seq 4 and leaves a marker at seq 8
    sc.row("S", "expire", 4, expire, "a6", "s.c")
    sc.row("S", "marker", 8, expire, None, "s.c")
    sc.publish(0, "S", "a7", "s.b", seq=9)
    sc.read(1, "msg_get", "S", {"seq": 1}, (1, "a1", "s.a"))
    sc.read(2, "msg_get", "S", {"last_by_subj": "s.b"}, (9, "a7", "s.b"))
    sc.read(0, "direct_get", "S", {"seq": 2}, (2, "a2", "s.a"))
    sc.read(1, "msg_get", "S", {"seq": 4}, None)  # expired: fine
    sc.read(2, "direct_get", "S", {"seq": 8}, (8, None, "s.c"))  # the marker
    # compare-and-set on a key
    sc.read(0, "msg_get", "K", {"last_by_subj": "k.x"}, None)
    sc.publish(0, "K", "k1", "k.x", seq=1, expected=0)
    sc.publish(1, "K", "k2", "k.x", outcome="fail", expected=0)
    sc.read(1, "msg_get", "K", {"last_by_subj": "k.x"}, (1, "k1", "k.x"))
    sc.publish(1, "K", "k3", "k.x", seq=2, expected=1)
    return sc


def verdict_of(sc: Scenario) -> dict[str, Any]:
    history, logs, run = sc.build()
    return check(history, logs, run)


def only(verdict: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The anomalies of ``kind``, after asserting that there are some and no other kind."""
    kinds = {a["type"] for a in verdict["anomalies"]}
    assert kinds == {kind}, json.dumps(verdict["anomalies"], indent=1)[:4000]
    assert verdict["valid"] is False
    return [a for a in verdict["anomalies"] if a["type"] == kind]


def drop_rows(sc: Scenario, pred: Callable[[dict[str, Any]], bool], nodes: Any = None) -> None:
    for node in sc.nodes if nodes is None else nodes:
        sc.rows[node] = [r for r in sc.rows[node] if not pred(r)]


# --- the clean run ------------------------------------------------------------------------------


def test_a_clean_run_is_valid() -> None:
    verdict = verdict_of(clean())
    assert verdict["anomalies"] == []
    assert verdict["valid"] is True
    stats = verdict["stats"]
    assert stats["acked_writes"] == 9  # a1 a2 a6 a7, B1 x3, k1 k3
    assert stats["failed_writes"] == 4  # a4, B2 x2, k2
    assert stats["indeterminate_writes"] == 2
    assert stats["removed_acked"] == 1  # a6, expired with its TTL
    assert stats["unverified"] == 0
    assert stats["nodes_with_logs"] == list(NODES)
    assert verdict["skipped"] == []
    assert set(verdict["checks"]) == set(checker.ANOMALY_TYPES)


def test_every_checker_passes_the_clean_run_on_its_own() -> None:
    history, logs, run = clean().build()
    for fn in (
        checker.check_final_reads,
        checker.check_lost,
        checker.check_ack_mismatch,
        checker.check_unexpected,
        checker.check_duplicates,
        checker.check_split_brain,
        checker.check_partial_batches,
        checker.check_contiguous,
        checker.check_expired_readable,
        checker.check_stale_reads,
        checker.check_cas,
    ):
        assert fn(history, logs, run) == [], fn.__name__
    assert checker.check_well_formed(history) == []


# --- lost, mismatched, unexpected, duplicated ---------------------------------------------------


def without(final: dict[str, Any], seq: int) -> dict[str, Any]:
    """A final read that found nothing at ``seq``."""
    final["messages"] = [m for m in final["messages"] if m["seq"] != seq]
    final["missing"] = sorted([*final["missing"], seq])
    return final


def test_a_lost_acked_write_is_caught() -> None:
    sc = clean()
    sc.final["S"] = without(sc.final_from_logs("S"), 2)  # every node applied it, yet it is gone
    (lost,) = only(verdict_of(sc), "lost")
    assert lost["detail"]["id"] == "a2"
    assert lost["detail"]["seq"] == 2
    assert lost["detail"]["read_absent_by"] == list(NODES)
    assert [op["type"] for op in lost["ops"][:2]] == ["invoke", "ok"]
    assert all("messages" not in op["value"] for op in lost["ops"])  # read_all ops trimmed
    # had no node ever stored it, the logs would show the hole too
    sc = clean()
    drop_rows(sc, lambda r: r["id"] == "a2")
    verdict = verdict_of(sc)
    assert {a["type"] for a in verdict["anomalies"]} == {"lost", "non-contiguous"}


def test_an_acked_write_without_ttl_that_expired_is_lost() -> None:
    sc = clean()
    sc.row("S", "expire", 1, sc.next_index("S"), "a1", "s.a")
    # the msg_get of seq 1 happened earlier and found it: still fine
    (lost,) = only(verdict_of(sc), "lost")
    assert lost["detail"]["id"] == "a1"
    assert "without a TTL" in lost["detail"]["why"]
    assert [r["op"] for r in lost["log_rows"]] == ["expire"] * 3


def test_a_deleted_acked_write_is_not_lost_and_an_unread_seq_is_unverified() -> None:
    sc = clean()
    sc.row("S", "delete", 1, sc.next_index("S"), "a1", "s.a")
    final = sc.final_from_logs("S")
    final["unknown"] = [2]  # every read of seq 2 failed
    final["messages"] = [m for m in final["messages"] if m["seq"] != 2]
    sc.final["S"] = final
    verdict = verdict_of(sc)
    assert verdict["valid"], verdict["anomalies"]
    assert verdict["stats"]["unverified"] == 1
    assert verdict["stats"]["removed_acked"] == 2


def test_an_acked_seq_holding_another_message_is_an_ack_mismatch() -> None:
    sc = clean()
    final = sc.final_from_logs("S")
    final["messages"] = [
        {**m, "id": "a3"} if m["seq"] == 1 else m for m in final["messages"] if m["seq"] != 3
    ]
    final["missing"].append(3)
    sc.final["S"] = final
    verdict = verdict_of(sc)
    # a3 sits at seq 3 in the logs and at seq 1 in the final reads: a duplicate too
    assert {a["type"] for a in verdict["anomalies"]} == {"ack-mismatch", "lost", "duplicate"}
    (mismatch,) = [a for a in verdict["anomalies"] if a["type"] == "ack-mismatch"]
    assert mismatch["detail"]["id"] == "a1"
    assert {"seq": 1, "id": "a3", "where": "read_all"} in mismatch["detail"]["seen"]
    (lost,) = [a for a in verdict["anomalies"] if a["type"] == "lost"]
    assert lost["detail"]["id"] == "a1"  # the final reads hold a3 at a1's seq, a1 nowhere


def test_a_stored_message_that_was_never_published_or_failed_is_unexpected() -> None:
    sc = clean()
    final = sc.final_from_logs("S")
    final["messages"].append({"seq": 10, "id": "ghost", "subject": "s.a"})
    final["last_seq"] = 10
    sc.final["S"] = final
    # the refused publish a4 shows up in a read
    sc.read(2, "direct_get", "S", {"seq": 11}, (11, "a4", "s.b"))
    verdict = verdict_of(sc)
    found = {a["detail"]["id"]: a for a in only(verdict, "unexpected")}
    assert found["ghost"]["detail"]["reason"] == "never-published"
    assert found["ghost"]["detail"]["seen"] == ["read_all@10"]
    assert found["a4"]["detail"]["reason"] == "failed"
    assert found["a4"]["detail"]["seen"] == ["direct_get@11"]
    assert [op["type"] for op in found["a4"]["ops"][:2]] == ["invoke", "fail"]


def test_an_abandoned_batch_in_a_node_log_is_unexpected() -> None:
    sc = clean()
    sc.row("S", "store", 10, sc.next_index("S"), "B2.1", "s.batch", "B2", nodes=["n2"])
    verdict = verdict_of(sc)
    kinds = {a["type"] for a in verdict["anomalies"]}
    # and half a batch; (the entry is beyond what the others applied: lag, not split-brain)
    assert kinds == {"unexpected", "partial-batch"}
    (unexpected,) = [a for a in verdict["anomalies"] if a["type"] == "unexpected"]
    assert unexpected["detail"] == {
        "id": "B2.1",
        "stream": "S",
        "reason": "abandoned",
        "seen": ["n2@10"],
    }
    assert unexpected["log_rows"][0]["node"] == "n2"


def test_a_duplicate_is_caught_in_final_reads_and_in_logs() -> None:
    sc = clean()
    sc.row("S", "store", 10, sc.next_index("S"), "a1", "s.a")  # stored again
    final = sc.final_from_logs("S")
    sc.final["S"] = final
    verdict = verdict_of(sc)
    assert {a["type"] for a in verdict["anomalies"]} == {"duplicate", "ack-mismatch"}
    (dup,) = [a for a in verdict["anomalies"] if a["type"] == "duplicate"]
    assert dup["detail"]["id"] == "a1"
    assert dup["detail"]["seqs"] == [1, 10]
    assert dup["detail"]["where"]["10"] == ["n1", "n2", "n3", "read_all"]
    assert len(dup["log_rows"]) >= 3


# --- per node -----------------------------------------------------------------------------------


def test_a_split_brain_node_that_lacks_a_message_is_caught() -> None:
    sc = clean()
    drop_rows(sc, lambda r: r["id"] == "a2", nodes=["n3"])
    # entry 8: n1 and n2 delete seq 3, but n3 applied something else there (never published)
    index = sc.next_index("S")
    sc.row("S", "delete", 3, index, "a3", "s.b", nodes=["n1", "n2"])
    sc.row("S", "store", 10, index, "a9", "s.a", nodes=["n3"])
    verdict = verdict_of(sc)
    kinds = {a["type"] for a in verdict["anomalies"]}
    assert kinds == {"split-brain", "unexpected", "non-contiguous"}
    brain = {
        a["detail"]["kind"]: a["detail"] for a in verdict["anomalies"] if a["type"] == "split-brain"
    }
    assert brain["lacks"]["node"] == "n3"
    assert brain["lacks"]["seqs"] == [2]
    assert brain["lacks"]["examples"][0] == {"seq": 2, "node_has": None, "majority_has": "a2"}
    assert brain["extra"]["node"] == "n3"
    assert brain["extra"]["seqs"] == [3, 10]
    assert brain["extra"]["compared_up_to_index"] == 8
    (unexpected,) = [a for a in verdict["anomalies"] if a["type"] == "unexpected"]
    assert unexpected["detail"]["seen"] == ["n3@10"]
    (gap,) = [a for a in verdict["anomalies"] if a["type"] == "non-contiguous"]
    assert gap["detail"]["node"] == "n3"
    assert gap["detail"]["problems"][0] == {"kind": "gap", "expected": 2, "seq": 3, "index": 3}


def test_replicas_holding_different_messages_at_one_seq_are_split_brain() -> None:
    sc = clean()
    for row in sc.rows["n2"]:
        if row["stream"] == "S" and row["seq"] == 3 and row["op"] == "store":
            row["id"] = "a5"  # n2 stored the (indeterminate) a5 where the others have a3
    (brain,) = only(verdict_of(sc), "split-brain")
    assert brain["detail"]["node"] == "n2"
    assert brain["detail"]["kind"] == "different"
    assert brain["detail"]["examples"] == [{"seq": 3, "node_has": "a5", "majority_has": "a3"}]


def test_a_node_behind_at_the_end_is_lag_not_split_brain_and_replays_are_skipped() -> None:
    sc = clean()
    sc.publish(0, "S", "a8", "s.a", seq=10)
    drop_rows(sc, lambda r: r["id"] == "a8", nodes=["n3"])  # n3 was stopped before applying
    # n2 restarted and re-applied its last entries: the same rows again
    sc.rows["n2"] += [dict(r) for r in sc.rows["n2"] if r["stream"] == "S" and r["index"] >= 6]
    verdict = verdict_of(sc)
    assert verdict["valid"], verdict["anomalies"]


def test_a_gap_or_a_reused_seq_in_a_node_log_is_non_contiguous() -> None:
    sc = clean()
    sc.row("S", "store", 11, sc.next_index("S"), "a10", "s.a")  # 10 skipped on every node
    sc.publish(0, "S", "a10", "s.a", seq=11, stored=False)
    gaps = only(verdict_of(sc), "non-contiguous")
    assert [a["detail"]["node"] for a in gaps] == list(NODES)
    gap = gaps[0]
    assert gap["detail"]["problems"] == [{"kind": "gap", "expected": 10, "seq": 11, "index": 8}]
    assert gap["log_rows"][0]["seq"] == 11

    sc = clean()
    sc.row("S", "store", 9, sc.next_index("S"), "a10", "s.a", nodes=["n1"])  # seq 9 again
    history, logs, run = sc.build()
    (reused,) = checker.check_contiguous(history, logs, run)
    assert reused["detail"]["node"] == "n1"
    assert reused["detail"]["problems"][0]["kind"] == "reused"


def test_a_state_transfer_resyncs_the_sequence_count_and_excuses_nothing() -> None:
    sc = clean()
    # n3 was down from entry 5 on and caught up by a state transfer at index 7: the diff is the
    # batch and a7 stored, seq 4 deleted (it had expired on the leader), and the marker
    drop_rows(sc, lambda r: r["stream"] == "S" and r["index"] >= 5, nodes=["n3"])
    for row in [r for r in sc.rows["n1"] if r["stream"] == "S" and r["index"] >= 5]:
        if row["op"] == "expire":
            row = {**row, "op": "delete"}
        sc.rows["n3"].append({**row, "node": "n3", "index": 7, "term": 0, "reason": "transfer"})
    sc.publish(0, "S", "a8", "s.a", seq=10)
    history, logs, run = sc.build()
    assert check(history, logs, run)["valid"]
    # the transfer's removal of seq 4 would not have excused an acked write without a TTL
    sc = clean()
    sc.rows["n3"].append(
        {**sc.rows["n3"][0], "op": "delete", "index": 7, "reason": "transfer", "term": 0}
    )
    sc.final["S"] = without(sc.final_from_logs("S"), 1)
    verdict = verdict_of(sc)
    assert {a["type"] for a in verdict["anomalies"]} == {"lost", "split-brain"}


def test_a_range_purge_removes_every_seq_through_its_bound() -> None:
    sc = clean()
    sc.row("S", "purge", None, sc.next_index("S"))
    for node in sc.nodes:
        sc.rows[node][-1]["through"] = 3
    final = sc.final_from_logs("S")
    for seq in (1, 2, 3):
        final = without(final, seq)
    final["first_seq"] = 4
    sc.final["S"] = final
    verdict = verdict_of(sc)
    assert verdict["valid"], verdict["anomalies"]
    assert verdict["stats"]["removed_acked"] == 3  # a1, a2 by the purge; a6 by its TTL


# --- batches ------------------------------------------------------------------------------------


def test_a_partial_batch_is_caught_in_final_reads_and_in_logs() -> None:
    sc = clean()
    drop_rows(sc, lambda r: r["id"] == "B1.2")  # only 2 of its 3 messages stored anywhere
    verdict = verdict_of(sc)
    assert {a["type"] for a in verdict["anomalies"]} == {"partial-batch", "lost", "non-contiguous"}
    partial = [a for a in verdict["anomalies"] if a["type"] == "partial-batch"]
    in_reads = [a["detail"] for a in partial if "node" not in a["detail"]]
    assert in_reads == [
        {
            "batch": "B1",
            "stream": "S",
            "why": "stored only in part",
            "found": {"B1.1": 5, "B1.3": 7},
            "missing": [{"id": "B1.2", "seq": 6}],
        }
    ]
    in_logs = {a["detail"]["node"]: a["detail"]["why"] for a in partial if "node" in a["detail"]}
    assert in_logs == {n: "2 of 3 messages stored" for n in NODES}
    (lost,) = [a for a in verdict["anomalies"] if a["type"] == "lost"]
    assert lost["detail"]["batch"] == "B1"


def test_a_batch_split_over_two_entries_or_acked_with_a_wrong_count_is_partial() -> None:
    sc = clean()
    for row in sc.rows["n2"]:
        if row.get("id") == "B1.3":
            row["index"] += 100
    history, logs, run = sc.build()
    (split,) = checker.check_partial_batches(history, logs, run)
    assert split["detail"]["node"] == "n2"
    assert split["detail"]["why"] == "spread over several log entries"

    sc = clean()
    for op in sc.ops:
        if op["f"] == "batch" and op["type"] == "ok":
            op["value"]["count"] = 2
    history, logs, run = sc.build()
    (count,) = checker.check_partial_batches(history, logs, run)
    assert count["detail"]["why"] == "acked count is not the batch size"
    assert (count["detail"]["size"], count["detail"]["count"]) == (3, 2)


def test_a_batch_at_non_contiguous_seqs_is_partial() -> None:
    sc = clean()
    final = sc.final_from_logs("S")
    for m in final["messages"]:
        if m["id"] == "B1.3":
            m["seq"] = 9  # and a7 moved... the read shows B1.3 after a gap
    final["messages"] = [m for m in final["messages"] if m["id"] != "a7"]
    sc.final["S"] = final
    history, logs, run = sc.build()
    (partial,) = checker.check_partial_batches(history, logs, run)
    assert partial["detail"]["why"] == "not at contiguous seqs in id order"
    assert partial["detail"]["found"] == {"B1.1": 5, "B1.2": 6, "B1.3": 9}


# --- reads ----------------------------------------------------------------------------------------


def test_a_stale_msg_get_is_caught_but_a_concurrent_one_is_not() -> None:
    sc = clean()
    sc.read(2, "msg_get", "S", {"seq": 2}, None)  # a2 was acked long before
    sc.read(0, "msg_get", "S", {"last_by_subj": "s.b"}, (3, "a3", "s.b"))  # a7 (seq 9) acked
    # concurrent: invoked before a8's ack arrived, so not finding it is fine
    sc.op(1, "invoke", "msg_get", {"stream": "S", "request": {"seq": 10}})
    sc.op(0, "invoke", "publish", {"stream": "S", "id": "a8", "subject": "s.a"})
    sc.row("S", "store", 10, sc.next_index("S"), "a8", "s.a")
    sc.op(0, "ok", "publish", {"stream": "S", "id": "a8", "subject": "s.a", "seq": 10})
    sc.op(1, "ok", "msg_get", {"stream": "S", "request": {"seq": 10}, "not_found": True})
    stale = only(verdict_of(sc), "stale-read")
    assert [a["detail"] for a in stale] == [
        {
            "stream": "S",
            "request": {"seq": 2},
            "acked_id": "a2",
            "acked_seq": 2,
            "returned": "not found",
        },
        {
            "stream": "S",
            "request": {"last_by_subj": "s.b"},
            "acked_id": "a7",
            "acked_seq": 9,
            "returned": {"seq": 3, "id": "a3"},
        },
    ]
    assert [op["f"] for op in stale[0]["ops"]] == ["publish", "publish", "msg_get", "msg_get"]


def test_a_stale_direct_get_is_allowed() -> None:
    sc = clean()
    sc.read(2, "direct_get", "S", {"seq": 2}, None)
    sc.read(0, "direct_get", "S", {"last_by_subj": "s.b"}, (3, "a3", "s.b"))
    assert verdict_of(sc)["valid"]


def test_a_msg_get_of_an_expired_message_after_a_later_acked_write_is_caught() -> None:
    sc = clean()
    # a7 (acked) was stored at index 7, after the expiry of seq 4 at index 6
    sc.read(2, "msg_get", "S", {"seq": 4}, (4, "a6", "s.c"))
    (expired,) = only(verdict_of(sc), "expired-readable")
    detail = expired["detail"]
    assert detail["rule"] == "linearizable"
    assert (detail["seq"], detail["removed_at_index"], detail["acked_write"]) == (4, 6, "a7")
    assert expired["log_rows"][0]["op"] == "expire"


def test_a_direct_get_of_a_message_every_replica_expired_is_caught() -> None:
    sc = clean()
    for _ in range(60):  # 60 ms of other ops: the expiry is well behind
        sc.op(5, "invoke", "direct_get", {"stream": "S", "request": {"seq": 1}})
        sc.op(
            5,
            "ok",
            "direct_get",
            {
                "stream": "S",
                "request": {"seq": 1},
                "seq": 1,
                "id": "a1",
                "subject": "s.a",
                "served_by": None,
            },
        )
    sc.read(0, "direct_get", "S", {"seq": 4}, (4, "a6", "s.c"))
    (expired,) = only(verdict_of(sc), "expired-readable")
    assert expired["detail"]["rule"] == "every replica removed it"
    assert expired["detail"]["read"] == "direct_get"
    assert sorted(r["node"] for r in expired["log_rows"]) == list(NODES)
    # one replica had not applied the expiry yet when the read began: it may serve the message
    late = clean()
    for row in late.rows["n3"]:
        if row["op"] == "expire":
            row["applied_ns"] = T0 + 10**12
    late.read(0, "direct_get", "S", {"seq": 4}, (4, "a6", "s.c"))
    history, logs, run = late.build()
    assert checker.check_expired_readable(history, logs, run) == []
    # and under the clock nemesis the wall-clock rule is skipped, saying so
    sc.run["nemeses"] = ["kill", "clock"]
    verdict = verdict_of(sc)
    assert verdict["valid"]
    assert verdict["skipped"][0]["check"] == "expired-readable (wall clock)"


def test_a_cas_write_that_should_have_failed_is_caught() -> None:
    sc = clean()
    sc.publish(2, "K", "k4", "k.x", seq=3, expected=1)  # k3 at seq 2 was already on k.x
    (cas,) = only(verdict_of(sc), "cas-violation")
    assert cas["detail"]["id"] == "k4"
    assert cas["detail"]["in_between"] == [2]


# --- the harness's own mistakes -------------------------------------------------------------------


def test_a_stream_without_final_reads_is_not_valid() -> None:
    sc = clean()
    history, logs, run = sc.build()
    history = [op for op in history if not (op["f"] == "read_all" and op["value"]["stream"] == "K")]
    verdict = check(history, logs, run)
    (missing,) = verdict["anomalies"]
    assert missing["type"] == "no-final-read"
    assert missing["detail"]["stream"] == "K"


def test_a_malformed_history_is_reported() -> None:
    sc = clean()
    dangling = sc.op(3, "invoke", "publish", {"stream": "S", "id": "dangling", "subject": "s.a"})
    history, logs, run = sc.build()
    history.append({**history[-1], "index": history[-1]["index"]})  # index not increasing
    (bad,) = only(check(history, logs, run), "malformed-history")
    assert f"op {dangling['index']} (publish) never completed" in bad["detail"]["problems"]
    assert any("does not increase" in p for p in bad["detail"]["problems"])


def test_without_node_logs_the_per_node_checks_are_skipped_and_ttl_excuses() -> None:
    sc = clean()
    history, _logs, run = sc.build()
    verdict = check(history, {}, run)
    assert verdict["valid"], verdict["anomalies"]
    assert {s["check"] for s in verdict["skipped"]} >= set(checker.LOG_CHECKS)
    assert not set(checker.LOG_CHECKS) & set(verdict["checks"])
    # a lost write is still caught from the final reads alone
    drop_rows(sc, lambda r: r["id"] == "a1")
    history, _logs, run = sc.build()
    (lost,) = only(check(history, {}, run), "lost")
    assert lost["detail"]["id"] == "a1"


# --- run directories on disk --------------------------------------------------------------------


def write_run(path: Path, sc: Scenario, logs: bool = True) -> Path:
    history, node_logs, run = sc.build()
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps(run))
    (path / "history.jsonl").write_text("".join(json.dumps(op) + "\n" for op in history))
    for node, rows in node_logs.items():
        (path / "nodes" / node).mkdir(parents=True)
        (path / "nodes" / node / "server.log").write_text("started\n")
        if logs:
            text = "".join(json.dumps(r) + "\n" for r in rows)
            (path / "nodes" / node / "log.jsonl").write_text(text)
    return path


def planted() -> Scenario:
    """Every anomaly the issue names, at once."""
    sc = clean()
    drop_rows(sc, lambda r: r["id"] == "a2")  # lost
    sc.row("S", "store", 10, sc.next_index("S"), "a1", "s.a")  # duplicate
    for row in sc.rows["n3"]:  # split-brain: n3 holds another message at seq 3
        if row["stream"] == "S" and row["seq"] == 3:
            row["id"] = "zz"
    drop_rows(sc, lambda r: r["id"] == "B1.2")  # partial batch
    sc.read(2, "msg_get", "S", {"seq": 1}, None)  # stale MSG.GET
    return sc


def test_run_directories_are_loaded_and_checked(tmp_path: Path) -> None:
    good = check_run(write_run(tmp_path / "good", clean()))
    assert good["valid"], good["anomalies"]
    assert json.loads((tmp_path / "good" / "verdict.json").read_text()) == good

    bad = check_run(write_run(tmp_path / "bad", planted()))
    assert not bad["valid"]
    assert set(bad["anomaly_counts"]) >= {
        "lost",
        "duplicate",
        "split-brain",
        "partial-batch",
        "stale-read",
        "non-contiguous",
        "unexpected",
    }
    saved = json.loads((tmp_path / "bad" / "verdict.json").read_text())
    assert saved["anomaly_counts"] == bad["anomaly_counts"]
    # the in-memory check of the same run gives the same verdict
    history, logs, run = planted().build()
    assert check(history, logs, run) == bad


def test_a_run_directory_without_node_logs_and_with_a_torn_line(tmp_path: Path) -> None:
    path = write_run(tmp_path / "nats", clean(), logs=False)
    data = load_run(path)
    assert data.node_logs == {}
    with open(path / "history.jsonl", "a") as fh:
        fh.write('{"index": 99, "ti')  # the harness was killed mid-line
    verdict = check_run(path)
    assert verdict["valid"], verdict["anomalies"]
    assert verdict["stats"]["unparsed_lines"] == {"history.jsonl": 1}
    assert {s["check"] for s in verdict["skipped"]} >= set(checker.LOG_CHECKS)


def test_a_node_without_a_log_file_lacks_everything(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run", clean())
    (path / "nodes" / "n2" / "log.jsonl").unlink()
    data = load_run(path)
    assert data.node_logs["n2"] == []
    kinds = {
        a["detail"]["kind"] for a in check_run(path)["anomalies"] if a["type"] == "split-brain"
    }
    assert kinds == {"lacks"}


# --- the history writer ---------------------------------------------------------------------------


def test_history_writes_pairs_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "h" / "history.jsonl"
    clock = iter(range(100, 200))
    with History(path, clock=lambda: next(clock)) as h:
        a = h.invoke(0, "n1", "publish", {"id": "x"})
        b = h.invoke(1, "n2", "msg_get", {"request": {"seq": 1}})
        assert (a, b) == (0, 1)
        with pytest.raises(HistoryError):
            h.invoke(0, "n1", "publish", {"id": "y"})  # process 0 is busy
        assert h.complete(a, "ok", {"id": "x", "seq": 1}) == 2
        with pytest.raises(HistoryError):
            h.complete(a, "ok", {})  # already completed
        with pytest.raises(HistoryError):
            h.complete(b, "done", {})  # type: ignore[arg-type]
        h.record("nemesis", None, "info", "kill", {"node": "n3"})
        assert [op["index"] for op in h.pending()] == [1]
        assert h.close_pending("run ended") == 1
        assert h.counts[("msg_get", "info")] == 1
    ops = load(path)
    assert [op["index"] for op in ops] == list(range(6))
    assert [op["time_ns"] for op in ops] == list(range(100, 106))
    assert ops[2] == {
        "index": 2,
        "time_ns": 102,
        "process": 0,
        "node": "n1",
        "type": "ok",
        "f": "publish",
        "value": {"id": "x", "seq": 1},
    }
    assert ops[-1]["value"] == {"request": {"seq": 1}, "error": "run ended"}
    assert problems(ops) == []
    assert [(i["index"], c["index"] if c else None) for i, c in pair(ops)] == [
        (0, 2),
        (1, 5),
        (3, 4),
    ]
    # appending to an existing history continues its indexes
    with History(path) as h:
        assert h.invoke(0, "n1", "publish", {"id": "z"}) == 6
    assert problems(load(path)) == ["op 6 (publish) never completed"]


def test_history_problems_name_each_defect() -> None:
    ok: dict[str, Any] = {"time_ns": 0, "node": None, "value": {}}
    found = problems(
        [
            {**ok, "index": 0, "process": 0, "type": "invoke", "f": "publish"},
            {**ok, "index": 1, "process": 0, "type": "ok", "f": "msg_get"},
            {**ok, "index": 2, "process": 1, "type": "ok", "f": "publish"},
            {**ok, "index": 2, "process": 2, "type": "weird", "f": "publish"},
            {"index": 3},
        ]
    )
    assert found == [
        "op 1: completes 'publish' as 'msg_get'",
        "op 2: ok without an outstanding invoke",
        "op index 2 does not increase (after 2)",
        "op 2 has type 'weird'",
        "op 3 lacks ['time_ns', 'process', 'node', 'type', 'f', 'value']",
    ]


# --- scale --------------------------------------------------------------------------------------

SCALE_WRITES = 6000  # about a 300 s run of a few processes
SCALE_TIME_LIMIT_S = 10.0  # about 0.5 s here; generous for a shared 2-core machine


def test_a_long_run_is_checked_in_seconds() -> None:
    sc = Scenario()
    seq = 0
    latest: dict[str, tuple[int, str]] = {}  # subject -> its last (seq, id)
    for k in range(SCALE_WRITES):
        p, subject = k % 5, f"s.{k % 7}"
        if k % 10 == 9:
            ids = sc.batch(p, "S", f"B{k}", 5, subject, first_seq=seq + 1)
            seq += len(ids)
            latest[subject] = (seq, ids[-1])
        elif k % 3 == 0:  # with a TTL, and every other one expires at once
            seq += 1
            sc.publish(p, "S", f"w{k}", "t.x", seq=seq, ttl="1s")
            if k % 2 == 0:
                sc.row("S", "expire", seq, sc.next_index("S"), f"w{k}", "t.x")
            found = None if k % 2 == 0 else (seq, f"w{k}", "t.x")
            sc.read(p, "msg_get", "S", {"seq": seq}, found)
        else:
            seq += 1
            sc.publish(p, "S", f"w{k}", subject, seq=seq)
            latest[subject] = (seq, f"w{k}")
        last_seq, last_id = latest.get(subject, (0, ""))
        sc.read(
            (p + 1) % 5,
            "msg_get",
            "S",
            {"last_by_subj": subject},
            (last_seq, last_id, subject) if last_seq else None,
        )
    history, logs, run = sc.build()
    started = time.monotonic()
    verdict = check(history, logs, run)
    elapsed = time.monotonic() - started
    assert elapsed < SCALE_TIME_LIMIT_S, elapsed
    print(f"checked {len(history)} ops and {verdict['stats']['log_rows']} rows in {elapsed:.2f}s")
    assert verdict["valid"], verdict["anomaly_counts"]
    assert verdict["stats"]["log_rows"] > 3 * SCALE_WRITES
    # and a few planted anomalies in it are still found
    sc.final["S"] = without(sc.final_from_logs("S"), 8)  # w7, a plain publish
    history, logs, run = sc.build()
    assert check(history, logs, run)["anomaly_counts"] == {"lost": 1}


def test_rows_a_crash_rolled_back_are_not_split_brain() -> None:
    """n3 logged storing seq 2 at index 6, was killed before its store persisted it, reopened
    at index 5 and reached index 9 by state transfer (seq 2 had expired meanwhile): its state
    matches the others'. Without the ``open`` row the same log is a split brain."""

    def r(node: str, index: int, op: str, seq: int | None, **kw: object) -> dict[str, object]:
        return {"node": node, "stream": "S", "index": index, "term": 1, "op": op, "seq": seq, **kw}

    common = [r("x", 5, "store", 1, id="a"), r("x", 6, "store", 2, id="b")]
    expired = r("x", 8, "expire", 2, id="b")
    logs = {
        "n1": [{**row, "node": "n1"} for row in [*common, expired]],
        "n2": [{**row, "node": "n2"} for row in [*common, expired]],
        "n3": [
            *({**row, "node": "n3"} for row in common),
            r("n3", 5, "open", None),
            r("n3", 9, "transfer", None),
        ],
    }
    assert checker.check_split_brain([], logs) == []
    no_open = {**logs, "n3": [row for row in logs["n3"] if row["op"] != "open"]}
    found = checker.check_split_brain([], no_open)
    assert [a["detail"]["node"] for a in found] == ["n3"]


def test_the_completion_type_annotation_is_the_contracts() -> None:
    # history.CompletionType is a Literal for the type checker; the values live in the contract
    from typing import get_args

    from jepsen_like.contract import COMPLETION_TYPES
    from jepsen_like.history import CompletionType

    assert get_args(CompletionType) == COMPLETION_TYPES


def test_the_contract_and_its_package_import_nothing() -> None:
    # spark/ imports jepsen_like.contract and its executors get only that file and the package's
    # __init__ (spark/session.py): an import of anything else there breaks the analysis
    import ast

    package = Path(__file__).resolve().parents[2] / "jepsen_like"
    for path in (package / "__init__.py", package / "contract.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add("." * node.level + (node.module or ""))
        assert imported <= {"__future__", "typing"}, path.name


# --- consumers ----------------------------------------------------------------------------------


def _consume(
    sc: Scenario, p: int, msgs: list[tuple[int, str, int, int]], acked: list[int] | None = None
) -> None:
    value = {"stream": "C", "consumer": "D"}
    sc.op(p, "invoke", "consume", value)
    done = {**value, "msgs": [list(m) for m in msgs], "acked": [m[0] for m in msgs]}
    if acked is not None:
        done["acked"] = acked
    sc.op(p, "ok", "consume", done)


def consumed() -> Scenario:
    """Three acked publishes, each delivered once and acked, then an empty drain."""
    sc = Scenario()
    for i in (1, 2, 3):
        sc.publish(0, "C", f"c{i}", "c.x", seq=i)
    _consume(sc, 1, [(1, "c1", 1, 1), (2, "c2", 1, 2)])
    _consume(sc, 2, [(3, "c3", 1, 3)])
    _consume(sc, FINAL_PROCESS_BASE, [])
    return sc


def test_a_clean_consumer_run_is_valid() -> None:
    verdict = verdict_of(consumed())
    assert verdict["anomalies"] == [] and verdict["valid"] is True
    assert {"consumer-lost", "redelivered-after-ack", "consumer-order"} <= set(verdict["checks"])


def test_an_acked_publish_the_drained_consumer_never_delivered_is_consumer_lost() -> None:
    sc = Scenario()
    for i in (1, 2, 3):
        sc.publish(0, "C", f"c{i}", "c.x", seq=i)
    _consume(sc, 1, [(1, "c1", 1, 1), (3, "c3", 1, 2)])
    _consume(sc, FINAL_PROCESS_BASE, [])
    (found,) = only(checker.check(*sc.build()), "consumer-lost")
    assert found["detail"]["id"] == "c2"
    # not drained (the last pull still brought something): not judged
    sc2 = Scenario()
    sc2.publish(0, "C", "c1", "c.x", seq=1)
    sc2.publish(0, "C", "c2", "c.x", seq=2)
    _consume(sc2, 1, [(1, "c1", 1, 1)])
    assert checker.check_consumers(sc2.build()[0]) == []


def test_a_redelivery_after_a_confirmed_ack_is_caught_but_not_after_an_unconfirmed_one() -> None:
    sc = consumed()
    _consume(sc, 1, [(2, "c2", 2, 4)])  # seq 2's ack was confirmed earlier
    _consume(sc, FINAL_PROCESS_BASE, [])
    (found,) = only(checker.check(*sc.build()), "redelivered-after-ack")
    assert found["detail"]["seq"] == 2
    sc2 = Scenario()
    sc2.publish(0, "C", "c1", "c.x", seq=1)
    _consume(sc2, 1, [(1, "c1", 1, 1)], acked=[])  # the ack was never confirmed
    _consume(sc2, 1, [(1, "c1", 2, 2)])
    _consume(sc2, FINAL_PROCESS_BASE, [])
    assert checker.check_consumers(sc2.build()[0]) == []


def test_first_deliveries_out_of_stream_order_are_caught() -> None:
    sc = Scenario()
    for i in (1, 2):
        sc.publish(0, "C", f"c{i}", "c.x", seq=i)
    _consume(sc, 1, [(2, "c2", 1, 1)])
    _consume(sc, 2, [(1, "c1", 1, 2)])
    _consume(sc, FINAL_PROCESS_BASE, [])
    (found,) = only(checker.check(*sc.build()), "consumer-order")
    assert found["detail"] == {"stream": "C", "consumer": "D", "seq": 1, "after": 2}
    # concurrent pulls: history order differs from the delivery order, which is what counts
    sc2 = Scenario()
    for i in (1, 2, 3):
        sc2.publish(0, "C", f"c{i}", "c.x", seq=i)
    _consume(sc2, 2, [(2, "c2", 1, 2)])
    _consume(sc2, 1, [(1, "c1", 1, 1), (3, "c3", 1, 3)])
    _consume(sc2, FINAL_PROCESS_BASE, [])
    assert checker.check_consumers(sc2.build()[0]) == []


# --- counters -----------------------------------------------------------------------------------

COUNTER = "N"


def _incr(
    sc: Scenario,
    p: int,
    msg_id: str,
    subject: str,
    incr: int,
    outcome: str = "ok",
    seq: int | None = None,
    val: int | None = None,
    attempt: int = 1,
) -> None:
    """One increment attempt; ok with ``val`` None is a duplicate ack."""
    value = {"stream": COUNTER, "subject": subject, "id": msg_id, "incr": incr}
    value["attempt"] = attempt
    sc.op(p, "invoke", "increment", value)
    done: dict[str, Any] = dict(value)
    if outcome == "ok":
        done["seq"] = seq
        done |= {"duplicate": True} if val is None else {"val": str(val)}
    elif outcome == "fail":
        done["error"] = {"code": 503, "err_code": 10008, "description": "no leader"}
    else:
        done["error"] = "timeout"
    sc.op(p, outcome, "increment", done)


def _finals(sc: Scenario, totals: dict[str, int | None], nodes: int = 3) -> None:
    """Final counter reads of every subject from ``nodes`` nodes (None: not found)."""
    for i in range(nodes):
        for subject, total in totals.items():
            value = {"stream": COUNTER, "subject": subject}
            sc.op(FINAL_PROCESS_BASE + i, "invoke", "counter_read", value)
            found = {"not_found": True} if total is None else {"seq": 9, "val": str(total)}
            served = {"served_by": sc.nodes[i]}
            sc.op(FINAL_PROCESS_BASE + i, "ok", "counter_read", {**value, **found, **served})


def counted(a_total: int = 14, b_total: int = 2) -> Scenario:
    """Subject n.a: a1 +5, a2 -3 acked (seqs 1, 2); a3 +2 timed out, then acked as a duplicate
    of seq 4; a4 +7 refused; a5 +1 unknown twice (never stored); a6 +10 acked at seq 5: 14.
    Subject n.b: b1 +4 acked at seq 3; b2 -2 unknown (stored at seq 6): 2. Then the final reads
    of both subjects from every node."""
    sc = Scenario()
    _incr(sc, 0, "a1", "n.a", 5, seq=1, val=5)
    _incr(sc, 1, "a2", "n.a", -3, seq=2, val=2)
    _incr(sc, 2, "b1", "n.b", 4, seq=3, val=4)
    _incr(sc, 0, "a3", "n.a", 2, outcome="info")
    _incr(sc, 0, "a3", "n.a", 2, seq=4, attempt=2)
    _incr(sc, 1, "a4", "n.a", 7, outcome="fail")
    _incr(sc, 2, "a5", "n.a", 1, outcome="info")
    _incr(sc, 2, "a5", "n.a", 1, outcome="info", attempt=2)
    _incr(sc, 0, "a6", "n.a", 10, seq=5, val=14)
    _incr(sc, 1, "b2", "n.b", -2, outcome="info")
    _finals(sc, {"n.a": a_total, "n.b": b_total})
    return sc


def counter_anomalies(sc: Scenario) -> list[dict[str, Any]]:
    return [a["detail"] for a in only(checker.check(*sc.build()), "counter")]


def test_a_clean_counter_run_is_valid_and_counted() -> None:
    verdict = checker.check(*counted().build())
    assert verdict["anomalies"] == [] and verdict["valid"] is True
    stats = verdict["stats"]
    assert stats["counter_increments"] == 8
    assert stats["counter_acked"] == 5  # a1 a2 a3 a6 b1
    assert stats["counter_failed"] == 1  # a4
    assert stats["counter_indeterminate"] == 2  # a5 b2
    assert stats["counter_retries"] == 2  # a3 and a5, once each
    a = stats["counter_totals"]["n.a"]
    assert (a["acked_sum"], a["indeterminate"], a["method"], a["final"]) == (14, 1, "exact", ["14"])
    assert stats["acked_writes"] == 0  # increments are not the writes of the other checks


def test_indeterminate_increments_may_count_or_not() -> None:
    for a_total, b_total in ((15, 2), (14, 4), (15, 4)):  # a5 and b2 applied, or not
        assert checker.check_counters(counted(a_total, b_total).build()[0]) == []


def test_a_lost_acked_increment_is_caught() -> None:
    (found,) = counter_anomalies(counted(a_total=4))  # a6's +10 is gone
    assert found["kind"] == "final-total" and found["subject"] == "n.a"
    assert found["acked_sum"] == 14 and found["explainable"] == [14, 15]
    assert found["method"] == "exact"
    assert [f["total"] for f in found["finals"]] == ["4", "4", "4"]


def test_a_refused_increment_must_not_count() -> None:
    (found,) = counter_anomalies(counted(a_total=21))  # a4's refused +7 applied
    assert found["kind"] == "final-total"


def test_a_final_total_between_the_bounds_but_no_subset_sum_is_caught_exactly() -> None:
    # b2's -2 makes n.b 4 or 2: 3 lies between the bounds, yet no subset of {-2} sums to -1
    (found,) = counter_anomalies(counted(b_total=3))
    assert (found["subject"], found["explainable"], found["method"]) == ("n.b", [2, 4], "exact")


def test_one_node_reading_a_wrong_total_is_named() -> None:
    sc = counted()
    sc.op(FINAL_PROCESS_BASE + 5, "invoke", "counter_read", {"stream": COUNTER, "subject": "n.b"})
    sc.op(
        FINAL_PROCESS_BASE + 5,
        "ok",
        "counter_read",
        {"stream": COUNTER, "subject": "n.b", "seq": 6, "val": "7", "served_by": "n3"},
    )
    (found,) = counter_anomalies(sc)
    assert found["finals"] == [{"node": "n3", "total": "7"}]


def test_a_retried_increment_applied_twice_is_caught() -> None:
    # a3's first attempt was stored (seq 4), its retry applied again at seq 5 instead of being
    # answered as a duplicate: n.a ends at 16, which no subset of the unknown a5 (+1) explains
    sc = Scenario()
    _incr(sc, 0, "a1", "n.a", 5, seq=1, val=5)
    _incr(sc, 1, "a2", "n.a", -3, seq=2, val=2)
    _incr(sc, 0, "a3", "n.a", 2, outcome="info")
    _incr(sc, 0, "a3", "n.a", 2, seq=5, val=6, attempt=2)
    _incr(sc, 2, "a5", "n.a", 1, outcome="info")
    _finals(sc, {"n.a": 6})
    (found,) = counter_anomalies(sc)
    assert (found["kind"], found["acked_sum"], found["explainable"]) == ("final-total", 4, [4, 5])


def test_an_acked_total_that_counts_an_increment_twice_is_caught() -> None:
    sc = Scenario()
    _incr(sc, 0, "a1", "n.a", 5, seq=1, val=5)
    _incr(sc, 1, "b1", "n.b", 1, seq=2, val=1)
    _incr(sc, 0, "a2", "n.a", -3, seq=3, val=-1)  # 5 - 3 is 2: the server subtracted twice
    _finals(sc, {"n.a": 2, "n.b": 1})
    (found,) = counter_anomalies(sc)
    assert found == {
        "stream": COUNTER,
        "subject": "n.a",
        "kind": "acked-total",
        "id": "a2",
        "seq": 3,
        "incr": -3,
        "val": "-1",
        "expected": "2",
        "after": {"id": "a1", "seq": 1, "val": "5"},
    }
    # a first total counts from 0
    sc2 = Scenario()
    _incr(sc2, 0, "a1", "n.a", 5, seq=1, val=6)
    _finals(sc2, {"n.a": 5})
    (found,) = counter_anomalies(sc2)
    assert (found["kind"], found["expected"], found["after"]) == (
        "acked-total",
        "5",
        {"seq": 0, "val": "0"},
    )


def test_acked_totals_are_not_judged_across_a_seq_no_ack_accounts_for() -> None:
    # seq 2 may hold an unknown increment of n.a (a2's): a1 -> a3 is not judged, and the final
    # total explains a2 as applied
    sc = Scenario()
    _incr(sc, 0, "a1", "n.a", 5, seq=1, val=5)
    _incr(sc, 1, "a2", "n.a", 4, outcome="info")
    _incr(sc, 0, "a3", "n.a", 1, seq=3, val=10)
    _finals(sc, {"n.a": 10})
    assert checker.check_counters(sc.build()[0]) == []


def test_two_increments_acked_at_one_seq_are_caught() -> None:
    sc = Scenario()
    _incr(sc, 0, "a1", "n.a", 5, seq=1, val=5)
    _incr(sc, 1, "b1", "n.b", 1, seq=1, val=1)
    _finals(sc, {"n.a": 5, "n.b": 1})
    (found,) = counter_anomalies(sc)
    assert (found["kind"], found["seq"], found["ids"]) == ("seq-shared", 1, ["a1", "b1"])


def test_acked_increments_without_a_final_read_are_unread() -> None:
    sc = Scenario()
    _incr(sc, 0, "a1", "n.a", 5, seq=1, val=5)
    sc.op(FINAL_PROCESS_BASE, "invoke", "counter_read", {"stream": COUNTER, "subject": "n.a"})
    sc.op(FINAL_PROCESS_BASE, "info", "counter_read", {"stream": COUNTER, "subject": "n.a"})
    (found,) = counter_anomalies(sc)
    assert found["kind"] == "unread"
    # a subject nobody incremented reads as not found: fine
    sc2 = Scenario()
    _finals(sc2, {"n.a": None})
    assert checker.check_counters(sc2.build()[0]) == []


def test_many_indeterminate_increments_are_checked_against_their_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sc = Scenario()
    _incr(sc, 0, "a1", "n.a", 10, outcome="info")
    _incr(sc, 1, "a2", "n.a", 10, outcome="info")
    _finals(sc, {"n.a": 5})  # between 0 and 20, but neither 0, 10 nor 20
    (found,) = counter_anomalies(sc)
    assert (found["method"], found["explainable"]) == ("exact", [0, 20])
    monkeypatch.setattr(checker, "COUNTER_EXACT_WORK", 10)  # 2 increments x a span of 20
    verdict = checker.check(*sc.build())
    assert verdict["valid"], verdict["anomalies"]
    assert verdict["stats"]["counter_totals"]["n.a"]["method"] == "bounds"
    _finals(sc, {"n.a": 21})
    (found,) = counter_anomalies(sc)
    assert found["method"] == "bounds"


def test_subset_sums() -> None:
    lo, hi, bits = checker.subset_sums([-5, 3, 3])
    assert (lo, hi) == (-5, 6) and bits is not None
    assert {s for s in range(lo, hi + 1) if bits >> (s - lo) & 1} == {-5, -2, 0, 1, 3, 6}
    assert checker.subset_sums([]) == (0, 0, 1)
