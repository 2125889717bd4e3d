"""How long `jetraft analyze` takes on a big run: synthetic history and replica logs, local[*].

Writes a synthetic run directory (issue 6's contract) into a temporary directory: ``--ops``
history operations (default 1M: publishes, atomic batches, Direct Get and MSG.GET reads,
nemesis kill windows) and, for each of ``--nodes`` nodes (default 5), about as many log rows as
history ops (the op mix is tuned for it: ``store`` rows, TTL ``expire`` rows with their subject
delete ``marker`` rows; no ``open``/``entry`` rows, so the replay stage has nothing to replay), plus
``leaders.jsonl`` samples every 0.5 s. About ``STALE_SHARE`` of the Direct Gets answered by a
follower return the subject's previous message (planted staleness); MSG.GETs are always fresh.
Then it runs the whole analysis job (``spark.job.analyze``: load, agreement, writes, staleness,
report) on ``--master`` (default ``local[*]``) and prints the generation time, each stage's
time and the total, and one JSON line with the numbers. The planted stale reads are counted
while generating, so the printout also says whether the analysis found exactly them.

Run it from the project root: ``python -m bench.spark_bench [--ops N] [--log-rows N]``; it
takes minutes (never run in tests). ``--keep DIR`` writes the run there and keeps it.

Must never: leave its temporary directory behind (unless ``--keep``), or be run by the tests.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

DEFAULT_OPS: Final = 1_000_000
DEFAULT_NODES: Final = 5
DEFAULT_MASTER: Final = "local[*]"
DEFAULT_DRIVER_MEMORY: Final = "4g"
SEED: Final = 7
PROCESSES: Final = 20
IN_FLIGHT: Final = 4  # an op completes after this many later invokes (< PROCESSES)
T0_NS: Final = 1_800_000_000_000_000_000
OP_GAP_NS: Final = 1_000_000  # between invokes: 1M ops span ~8 minutes
LEADER_APPLY_NS: Final = 300_000  # the leader applies an entry this long after the invoke
FOLLOWER_LAG_NS: Final = (200_000, 4_000_000)  # followers apply after the leader
TTL_NS: Final = 2_000_000_000
LEADER_SAMPLE_NS: Final = 500_000_000
KILL_EVERY_NS: Final = 60_000_000_000
KILL_FOR_NS: Final = 10_000_000_000
STALE_SHARE: Final = 0.03  # of follower-served Direct Gets by subject
KV_KEYS: Final = 10
RECENT: Final = 32  # acked seqs a reader picks from
STREAMS: Final = ("JQUEUE", "JBATCH", "JTTL", "JKV")
# the op mix per invoke (cumulative thresholds on one uniform draw)
MIX: Final = (
    ("publish:JQUEUE", 0.18),
    ("publish:JTTL", 0.33),
    ("publish:JKV", 0.43),
    ("batch", 0.55),
    ("direct_get", 0.82),
    ("msg_get", 1.0),
)
# messages per atomic batch, tuned so the log rows per node come near the ops count
BATCH_MIN: Final = 8
BATCH_MAX: Final = 14


@dataclass
class Op:
    index: int  # order of creation (not the history index)
    process: int
    node: str
    f: str
    value: dict[str, Any]
    result: dict[str, Any]
    on_ack: Callable[[], None] | None = None


@dataclass
class Generator:
    """The synthetic cluster: streams' seqs and indexes, acked state, node logs, history."""

    nodes: list[str]
    history: TextIO
    logs: dict[str, TextIO]
    rng: random.Random = field(default_factory=lambda: random.Random(SEED))
    seq: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STREAMS, 0))
    raft_index: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STREAMS, 0))
    leader: dict[str, str] = field(default_factory=dict)
    # acked (seq, id, subject) per stream, the last RECENT; per KV key every acked (seq, id)
    acked_recent: dict[str, deque[tuple[int, str, str]]] = field(default_factory=dict)
    kv_acked: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    ttl_heap: list[tuple[int, int, str, str]] = field(default_factory=list)
    expired: set[int] = field(default_factory=set)  # JTTL seqs
    hist_index: int = 0
    log_rows: int = 0
    planted_stale: int = 0
    reads: int = 0

    def __post_init__(self) -> None:
        for i, s in enumerate(STREAMS):
            self.leader[s] = self.nodes[i % len(self.nodes)]
            self.acked_recent[s] = deque(maxlen=RECENT)

    # --- output ---

    def emit(
        self,
        t: int,
        process: int | str,
        node: str | None,
        type_: str,
        f: str,
        value: dict[str, Any],
    ) -> None:
        row = {
            "index": self.hist_index,
            "time_ns": t,
            "process": process,
            "node": node,
            "type": type_,
            "f": f,
            "value": value,
        }
        self.history.write(json.dumps(row, separators=(",", ":")) + "\n")
        self.hist_index += 1

    def log(
        self,
        stream: str,
        index: int,
        op: str,
        seq: int,
        subject: str,
        mid: str | None,
        batch: str | None,
        ts: int,
        applied: int,
    ) -> None:
        lead = self.leader[stream]
        mid_s = "null" if mid is None else f'"{mid}"'
        batch_s = "null" if batch is None else f'"{batch}"'
        for node in self.nodes:
            at = applied if node == lead else applied + self.rng.randint(*FOLLOWER_LAG_NS)
            self.logs[node].write(
                f'{{"node":"{node}","stream":"{stream}","index":{index},"term":1,"op":"{op}",'
                f'"seq":{seq},"subject":"{subject}","id":{mid_s},"batch":{batch_s},'
                f'"ts_ns":{ts},"applied_ns":{at}}}\n'
            )
        self.log_rows += 1

    # --- the cluster ---

    def expire_until(self, t: int) -> None:
        """Expire entries for TTL messages past their deadline, each with its marker."""
        while self.ttl_heap and self.ttl_heap[0][0] <= t:
            deadline, seq, subject, mid = heapq.heappop(self.ttl_heap)
            self.raft_index["JTTL"] += 1
            index = self.raft_index["JTTL"]
            self.log("JTTL", index, "expire", seq, subject, mid, None, deadline - TTL_NS, t)
            self.seq["JTTL"] += 1
            self.log("JTTL", index, "marker", self.seq["JTTL"], subject, None, None, t, t)
            self.expired.add(seq)

    def store(
        self, stream: str, subjects: list[str], ids: list[str], batch: str | None, t: int
    ) -> list[int]:
        self.raft_index[stream] += 1
        seqs = []
        for subject, mid in zip(subjects, ids, strict=True):
            self.seq[stream] += 1
            seqs.append(self.seq[stream])
            self.log(
                stream,
                self.raft_index[stream],
                "store",
                self.seq[stream],
                subject,
                mid,
                batch,
                t,
                t + LEADER_APPLY_NS,
            )
            if stream == "JTTL":
                heapq.heappush(self.ttl_heap, (t + TTL_NS, self.seq[stream], subject, mid))
        return seqs

    def make_op(self, i: int, t: int) -> Op:
        p = i % PROCESSES
        node = self.nodes[p % len(self.nodes)]
        draw = self.rng.random()
        kind = next(name for name, edge in MIX if draw < edge)
        if kind.startswith("publish:"):
            stream = kind.split(":")[1]
            subject = {
                "JQUEUE": f"jq.p{p}",
                "JTTL": f"jt.p{p}.{i % 7}",
                "JKV": f"jkv.k{self.rng.randrange(KV_KEYS)}",
            }[stream]
            mid = f"m-{i}"
            value: dict[str, Any] = {"stream": stream, "id": mid, "subject": subject}
            if stream == "JTTL":
                value["ttl"] = "2s"
            [seq] = self.store(stream, [subject], [mid], None, t)

            def acked() -> None:
                self.acked_recent[stream].append((seq, mid, subject))
                if stream == "JKV":
                    self.kv_acked.setdefault(subject, []).append((seq, mid))

            return Op(i, p, node, "publish", value, {"seq": seq}, acked)
        if kind == "batch":
            n = self.rng.randint(BATCH_MIN, BATCH_MAX)
            bid = f"b-{i}"
            ids = [f"{bid}.{k}" for k in range(1, n + 1)]
            subject = f"jb.p{p}"
            value = {
                "stream": "JBATCH",
                "batch": bid,
                "ids": ids,
                "subject": subject,
                "abandon": False,
            }
            seqs = self.store("JBATCH", [subject] * n, ids, bid, t)
            result = {"seq": seqs[-1], "count": n, "seqs": seqs}
            return Op(i, p, node, "batch", value, result)
        return self.make_read(i, p, node, kind)

    def make_read(self, i: int, p: int, node: str, kind: str) -> Op:
        self.reads += 1
        if self.rng.random() < 0.5:
            key = f"jkv.k{self.rng.randrange(KV_KEYS)}"
            served = self.rng.choice(self.nodes) if kind == "direct_get" else node
            value = {"stream": "JKV", "request": {"last_by_subj": key}}
            acked = self.kv_acked.get(key, [])
            if not acked:
                return Op(i, p, node, kind, value, {"not_found": True, "served_by": served})
            seq, mid = acked[-1]
            stale = (
                kind == "direct_get"
                and served != self.leader["JKV"]
                and len(acked) > 1
                and self.rng.random() < STALE_SHARE
            )
            if stale:
                seq, mid = acked[-2]
                self.planted_stale += 1
            result = {"seq": seq, "id": mid, "subject": key, "served_by": served}
            return Op(i, p, node, kind, value, result)
        stream = self.rng.choice(("JQUEUE", "JTTL"))
        recent = self.acked_recent[stream]
        seq, mid, subject = recent[self.rng.randrange(len(recent))] if recent else (1, "", "")
        served = self.rng.choice(self.nodes) if kind == "direct_get" else node
        value = {"stream": stream, "request": {"seq": seq}}
        if not recent or (stream == "JTTL" and seq in self.expired):
            return Op(i, p, node, kind, value, {"not_found": True, "served_by": served})
        result = {"seq": seq, "id": mid, "subject": subject, "served_by": served}
        return Op(i, p, node, kind, value, result)

    def complete(self, op: Op, t: int) -> None:
        if op.on_ack is not None:
            op.on_ack()
        self.emit(t, op.process, op.node, "ok", op.f, {**op.value, **op.result})


def generate(run: Path, ops: int, nodes: int) -> dict[str, int]:
    """Writes the run directory; returns what was planted and how much was written."""
    names = [f"n{k}" for k in range(1, nodes + 1)]
    (run / "nodes").mkdir(parents=True)
    logs: dict[str, TextIO] = {}
    for name in names:
        (run / "nodes" / name).mkdir()
        logs[name] = open(run / "nodes" / name / "log.jsonl", "w", encoding="utf-8")
    history = open(run / "history.jsonl", "w", encoding="utf-8")
    leaders = open(run / "leaders.jsonl", "w", encoding="utf-8")
    gen = Generator(names, history, logs)
    pending: deque[Op] = deque()
    next_sample = T0_NS
    next_kill = T0_NS + KILL_EVERY_NS
    killed: tuple[str, int] | None = None
    t = T0_NS
    pairs = ops // 2
    try:
        for i in range(pairs):
            t += OP_GAP_NS
            while next_sample <= t:
                for s in STREAMS:
                    leaders.write(
                        json.dumps({"time_ns": next_sample, "stream": s, "leader": gen.leader[s]})
                        + "\n"
                    )
                next_sample += LEADER_SAMPLE_NS
            if killed is None and t >= next_kill:
                victim = gen.rng.choice(names)
                gen.emit(t, "nemesis", None, "invoke", "kill-start", {"nodes": [victim]})
                gen.emit(t + 1, "nemesis", None, "info", "kill-start", {"nodes": [victim]})
                for s in STREAMS:  # its leaderships move on
                    if gen.leader[s] == victim:
                        gen.leader[s] = names[(names.index(victim) + 1) % len(names)]
                killed = (victim, t + KILL_FOR_NS)
            elif killed is not None and t >= killed[1]:
                gen.emit(t, "nemesis", None, "invoke", "kill-stop", {"nodes": [killed[0]]})
                gen.emit(t + 1, "nemesis", None, "info", "kill-stop", {"nodes": [killed[0]]})
                killed = None
                next_kill = t + KILL_EVERY_NS
            gen.expire_until(t)
            op = gen.make_op(i, t)
            gen.emit(t, op.process, op.node, "invoke", op.f, op.value)
            pending.append(op)
            if len(pending) > IN_FLIGHT:
                gen.complete(pending.popleft(), t + 1)
        while pending:
            t += OP_GAP_NS
            gen.complete(pending.popleft(), t)
    finally:
        history.close()
        leaders.close()
        for f in logs.values():
            f.close()
    meta = {
        "version": 1,
        "nodes": names,
        "seed": SEED,
        "workload": "synthetic",
        "nemeses": ["kill"],
        "system": "jetraft",
        "streams": list(STREAMS),
        "started_ns": T0_NS,
        "ended_ns": t,
    }
    (run / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
    return {
        "history_ops": gen.hist_index,
        "log_rows_per_node": gen.log_rows,
        "reads": gen.reads,
        "planted_stale_direct_gets": gen.planted_stale,
    }


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    from spark.job import Progress, analyze
    from spark.session import build_session

    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="spark-bench-"))
    run = base / "run"
    if run.exists():
        shutil.rmtree(run)
    try:
        started = time.monotonic()
        planted = generate(run, args.ops, args.nodes)
        gen_s = time.monotonic() - started
        size = sum(f.stat().st_size for f in run.rglob("*.jsonl"))
        print(f"generated {planted} ({size / 1e6:.0f} MB) in {gen_s:.1f}s", flush=True)
        spark = build_session(
            args.master, progress=False, conf={"spark.driver.memory": args.driver_memory}
        )
        try:
            progress = Progress()
            started = time.monotonic()
            results, _json, _html = analyze(spark, [run], base / "analysis", progress)
            total = time.monotonic() - started
            cores = spark.sparkContext.defaultParallelism
        finally:
            spark.stop()
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    dg = results["staleness"]["by_kind"]["direct_get"]
    return {
        "bench": "spark_analyze",
        "master": args.master,
        "cores": cores,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        **planted,
        "input_mb": round(size / 1e6),
        "generate_s": round(gen_s, 1),
        "analyze_s": round(total, 1),
        "stages_s": progress.timings,
        "direct_get_stale_found": dg["stale"],
        "found_exactly_the_planted": dg["stale"] == planted["planted_stale_direct_gets"],
        "msg_get_violations": results["staleness"]["msg_get_violations"]["count"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--ops", type=int, default=DEFAULT_OPS, help="history operations")
    parser.add_argument("--nodes", type=int, default=DEFAULT_NODES)
    parser.add_argument("--master", default=DEFAULT_MASTER)
    parser.add_argument("--driver-memory", default=DEFAULT_DRIVER_MEMORY)
    parser.add_argument("--keep", help="write the run directory here and keep it")
    args = parser.parse_args(argv)
    out = run_bench(args)
    print(
        f"analysis of {out['history_ops']} history ops and {args.nodes} x "
        f"{out['log_rows_per_node']} log rows on {out['master']} ({out['cores']} cores): "
        f"{out['analyze_s']}s; stages {out['stages_s']}"
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
