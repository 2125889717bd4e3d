"""The Spark session shared by every spark/ test (``local[1]``, two shuffle partitions, no UI,
no console progress bar) and ``RunBuilder``, which writes hand-made run directories.

One session for the whole test session (starting the JVM costs seconds); tests keep their data
tiny, build each planted input once per module and run each transform once (every Spark action
costs a fraction of a second of planning and scheduling, whatever the data size).
``RunBuilder`` writes exactly the files of the run-directory contract; node logs come from raw
rows (any anomaly can be planted) or from the engine itself (``open_stream`` / ``apply``: real
entries and the digests a replica would report, so replays must match).

These tests run in ``make test``; only the end-to-end tests that start their own JVM
(``jetraft analyze`` and ``spark-submit`` as subprocesses) are marked ``slow``.

Must never: start a cluster-mode session or leave the JVM running after the tests.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from engine.entries import (
    BatchCommitEntry,
    DeleteMsgEntry,
    Entry,
    ExpireEntry,
    InboundMsg,
    PublishEntry,
    PurgeEntry,
    encode_entry,
)
from engine.memstore import MemoryStore
from engine.store import StoredMsg
from engine.stream import Stream
from engine.ttl import is_subject_delete_marker
from protocol.models import StreamConfig
from spark.cli import missing_requirement
from spark.session import build_session

TEST_MASTER = "local[1]"
# one task per shuffle stage: the inputs are a few rows, and every task costs milliseconds
TEST_SHUFFLE_PARTITIONS = 1
# a Spark test's budget, fixtures included (the JVM start, its warm-up and a module fixture's
# jobs land in one test): under a minute on an idle 2-core machine, a few on a busy one
SPARK_TEST_TIMEOUT_S = 300
# tiny inputs: compiling code for every query plan costs more than it saves (measured: a small
# run's analysis takes about 1.5x longer with Spark's code generation and adaptive execution)
TEST_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
    # a JVM that lives a minute on 2 cores: the serial collector and the quick (C1) compiler
    # alone leave the cores to the work (measured on this suite against G1 with the optimising
    # compiler: a third less CPU time, and no more wall time)
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}
T0_NS = 1_800_000_000_000_000_000  # every hand-made run starts here
MS = 1_000_000
S = 1_000_000_000


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Spark tests get a longer timeout than the suite's default: the first one starts the JVM
    and pays its warm-up (the JIT compiling Spark's planner), seconds to a minute."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    problem = missing_requirement()  # no Java: a clear message, not a JVM launch failure
    if problem is not None:
        pytest.fail(f"{problem} (`make` installs it where it can)", pytrace=False)
    session = build_session(
        TEST_MASTER, progress=False, shuffle_partitions=TEST_SHUFFLE_PARTITIONS, conf=TEST_CONF
    )
    try:
        yield session
    finally:
        session.stop()


def ns(t_ms: float) -> int:
    return T0_NS + int(t_ms * MS)


def payload(msg_id: str) -> bytes:
    return json.dumps({"id": msg_id}).encode()


def publish_entry(t_ms: float, subject: str, *ids: str, hdr: bytes = b"") -> PublishEntry:
    return PublishEntry(ns(t_ms), tuple(InboundMsg(subject, hdr, payload(i)) for i in ids))


class _Recorder(MemoryStore):
    """A MemoryStore that remembers what one apply appended and removed (as the server's
    ObservedStore does for its apply log)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, Any]] = []

    def append_fields(self, seq: int, subject: str, hdr: bytes, data: bytes, ts_ns: int) -> None:
        super().append_fields(seq, subject, hdr, data, ts_ns)
        self.events.append(("append", StoredMsg(seq, subject, hdr, data, ts_ns)))

    def remove(self, seq: int, *, erase: bool = False) -> bool:
        before = self.load(seq)
        removed = super().remove(seq, erase=erase)
        if removed:
            self.events.append(("remove", (seq, before)))
        return removed

    def remove_through(self, seq: int) -> None:
        super().remove_through(seq)
        self.events.append(("remove_through", seq))


def _payload_id(data: bytes) -> str | None:
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return str(doc["id"]) if isinstance(doc, dict) and "id" in doc else None


class RunBuilder:
    """A run directory under construction; ``write()`` puts it on disk and returns its path."""

    def __init__(
        self,
        root: Path,
        nodes: Sequence[str] = ("n1", "n2", "n3"),
        *,
        nemeses: Sequence[str] = (),
        system: str = "jetraft",
    ) -> None:
        self.root = root
        self.nodes = list(nodes)
        self.nemeses = list(nemeses)
        self.system = system
        self.history: list[dict[str, Any]] = []
        self.logs: dict[str, list[dict[str, Any]]] = {n: [] for n in self.nodes}
        self.leaders: list[dict[str, Any]] = []
        self.streams: set[str] = set()
        self.replicas: dict[tuple[str, str], tuple[Stream, _Recorder]] = {}

    # --- history -------------------------------------------------------------------------------
    def op(
        self, t_ms: float, process: int | str, node: str | None, type_: str, f: str, **value: Any
    ) -> int:
        index = len(self.history)
        self.history.append(
            {
                "index": index,
                "time_ns": ns(t_ms),
                "process": process,
                "node": node,
                "type": type_,
                "f": f,
                "value": value,
            }
        )
        return index

    def publish(
        self,
        msg_id: str,
        stream: str,
        subject: str,
        *,
        t_ms: float,
        seq: int | None = None,
        outcome: str = "ok",
        ttl: str | None = None,
        process: int = 0,
        node: str = "n1",
    ) -> int:
        value: dict[str, Any] = {"stream": stream, "id": msg_id, "subject": subject}
        if ttl is not None:
            value["ttl"] = ttl
        invoke = self.op(t_ms, process, node, "invoke", "publish", **value)
        extra = {"seq": seq} if outcome == "ok" else {}
        self.op(t_ms + 1, process, node, outcome, "publish", **value, **extra)
        return invoke

    def batch(
        self,
        batch_id: str,
        ids: Sequence[str],
        stream: str,
        subject: str,
        *,
        t_ms: float,
        seqs: Sequence[int] | None = None,
        outcome: str = "ok",
        abandon: bool = False,
        process: int = 0,
        node: str = "n1",
    ) -> int:
        value: dict[str, Any] = {
            "stream": stream,
            "batch": batch_id,
            "ids": list(ids),
            "subject": subject,
            "abandon": abandon,
        }
        invoke = self.op(t_ms, process, node, "invoke", "batch", **value)
        extra: dict[str, Any] = {}
        if outcome == "ok" and seqs is not None:
            extra = {"seq": seqs[-1], "count": len(seqs), "seqs": list(seqs)}
        if abandon:
            extra = {"abandoned": True, "sent": 1}
        self.op(t_ms + 1, process, node, outcome, "batch", **value, **extra)
        return invoke

    def read(
        self,
        f: str,
        stream: str,
        request: dict[str, Any],
        *,
        t_ms: float,
        served_by: str | None,
        seq: int | None = None,
        msg_id: str | None = None,
        process: int = 1,
        node: str = "n1",
    ) -> int:
        invoke = self.op(t_ms, process, node, "invoke", f, stream=stream, request=request)
        answer: dict[str, Any] = (
            {"seq": seq, "id": msg_id, "subject": "x"} if seq is not None else {"not_found": True}
        )
        self.op(
            t_ms + 1,
            process,
            node,
            "ok",
            f,
            stream=stream,
            request=request,
            served_by=served_by,
            **answer,
        )
        return invoke

    def leader(self, t_ms: float, stream: str, leader: str | None) -> None:
        self.leaders.append({"time_ns": ns(t_ms), "stream": stream, "leader": leader})

    # --- node logs: raw rows -------------------------------------------------------------------
    def row(
        self, node: str, stream: str, index: int, op: str, *, t_ms: float, **fields: Any
    ) -> None:
        self.streams.add(stream)
        row: dict[str, Any] = {
            "node": node,
            "stream": stream,
            "index": index,
            "term": 1,
            "op": op,
            "seq": None,
        }
        if op not in ("open", "entry", "transfer"):
            row.update(subject=None, id=None, batch=None, ts_ns=None)
        row.update(fields)
        row["applied_ns"] = ns(t_ms)
        self.logs[node].append(row)

    def store(
        self,
        nodes: Sequence[str],
        stream: str,
        index: int,
        seq: int,
        msg_id: str | None,
        *,
        t_ms: float,
        ts_ms: float | None = None,
        batch: str | None = None,
    ) -> None:
        for node in nodes:
            self.row(
                node,
                stream,
                index,
                "store",
                t_ms=t_ms,
                seq=seq,
                subject="x",
                id=msg_id,
                batch=batch,
                ts_ns=ns(t_ms if ts_ms is None else ts_ms),
            )

    # --- node logs: through the engine ---------------------------------------------------------
    def open_stream(
        self,
        stream: str,
        nodes: Sequence[str] | None = None,
        *,
        t_ms: float = 0,
        index: int = 0,
        fresh: bool = True,
        **config: Any,
    ) -> None:
        """An ``open`` row per node (``fresh``: a new replica; else the replica as it is, as
        after a restart that kept its state)."""
        cfg = StreamConfig(name=stream, subjects=[f"{stream.lower()}.>"], **config)
        for node in nodes or self.nodes:
            if fresh or (node, stream) not in self.replicas:
                store = _Recorder()
                self.replicas[(node, stream)] = (Stream(cfg, store, T0_NS), store)
            replica, _ = self.replicas[(node, stream)]
            self.row(
                node,
                stream,
                index,
                "open",
                t_ms=t_ms,
                term=0,
                config=json.loads(cfg.model_dump_json()),
                created_ns=T0_NS,
                digest=replica.digest().hex(),
            )

    def apply(
        self,
        stream: str,
        index: int,
        entry: Entry,
        nodes: Sequence[str] | None = None,
        *,
        t_ms: float,
        logged: bool = True,
        digest: str | None = None,
    ) -> None:
        """Apply ``entry`` at ``index`` on each node's replica and log it as the server does
        (``logged`` False: apply silently, as a state transfer's effect; ``digest``: report
        this instead of the true one)."""
        raw = encode_entry(entry)
        for node in nodes or self.nodes:
            replica, store = self.replicas[(node, stream)]
            store.events.clear()
            replica.apply(index, entry)
            if not logged:
                continue
            self.row(
                node,
                stream,
                index,
                "entry",
                t_ms=t_ms,
                entry=base64.b64encode(raw).decode(),
                digest=digest or replica.digest().hex(),
            )
            self._message_rows(node, stream, index, entry, store.events, t_ms)

    def transfer(self, stream: str, node: str, index: int, *, t_ms: float) -> None:
        replica, _ = self.replicas[(node, stream)]
        self.row(node, stream, index, "transfer", t_ms=t_ms, term=0, digest=replica.digest().hex())

    def _message_rows(
        self,
        node: str,
        stream: str,
        index: int,
        entry: Entry,
        events: list[tuple[str, Any]],
        t_ms: float,
    ) -> None:
        if isinstance(entry, ExpireEntry):
            removal = "expire"
        elif isinstance(entry, DeleteMsgEntry):
            removal = "delete"
        elif isinstance(entry, PurgeEntry):
            removal = "purge"
        else:
            removal = "limit"
        batch = entry.batch_id if isinstance(entry, BatchCommitEntry) else None
        for kind, item in events:
            if kind == "append":
                marker = bool(item.hdr) and is_subject_delete_marker(item.hdr)
                self.row(
                    node,
                    stream,
                    index,
                    "marker" if marker else "store",
                    t_ms=t_ms,
                    seq=item.seq,
                    subject=item.subject,
                    id=None if marker else _payload_id(item.data),
                    batch=batch,
                    ts_ns=item.ts_ns,
                )
            elif kind == "remove":
                seq, gone = item
                extra = {"reason": "limit"} if removal == "limit" else {}
                self.row(
                    node,
                    stream,
                    index,
                    "delete" if removal == "limit" else removal,
                    t_ms=t_ms,
                    seq=seq,
                    subject=gone.subject if gone else None,
                    id=_payload_id(gone.data) if gone else None,
                    ts_ns=gone.ts_ns if gone else None,
                    **extra,
                )
            else:
                self.row(node, stream, index, "purge", t_ms=t_ms, through=item)

    # --- on disk -------------------------------------------------------------------------------
    def write(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        meta = {
            "version": 1,
            "nodes": self.nodes,
            "seed": 1,
            "workload": "mix",
            "nemeses": self.nemeses,
            "system": self.system,
            "streams": sorted(self.streams),
            "started_ns": T0_NS,
            "ended_ns": ns(60_000),
        }
        (self.root / "run.json").write_text(json.dumps(meta, indent=2))
        _write_jsonl(self.root / "history.jsonl", self.history)
        if self.leaders:
            _write_jsonl(self.root / "leaders.jsonl", self.leaders)
        for node, rows in self.logs.items():
            if rows:
                path = self.root / "nodes" / node / "log.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                _write_jsonl(path, rows)
        return self.root


def spark_findings(
    results: dict[str, Any], keys: dict[str, tuple[str, str]]
) -> set[tuple[str, str, str]]:
    """(checker kind, stream, identifying field) of every finding of ``results``' checks, each
    check named in ``keys`` with its checker kind and the field that identifies a finding; a
    check must list every finding it counts (else a comparison would miss some)."""
    found: set[tuple[str, str, str]] = set()
    for check, (kind, key) in keys.items():
        res = results[check]
        assert res["count"] == len(res["examples"]), f"{check}: more findings than examples"
        found |= {(kind, e["stream"], str(e[key])) for e in res["examples"]}
    return found


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))


@pytest.fixture
def run_builder(tmp_path: Path) -> RunBuilder:
    return RunBuilder(tmp_path / "run")


def tiny_run(root: Path, *, lose_a_write: bool = False) -> Path:
    """A small correct run on disk (3 nodes, stream S: two publishes through the engine, a
    Direct Get and a MSG.GET); ``lose_a_write`` adds an acknowledged publish (m3, seq 3) that
    no node stored. Its numbers are TINY_RUN_COUNTS (+ TINY_LOST_WRITE_COUNTS)."""
    b = RunBuilder(root)
    b.open_stream("S")
    for i in (1, 2):
        b.publish(f"m{i}", "S", "s.x", t_ms=10 * i, seq=i)
        b.apply("S", i, publish_entry(10 * i, "s.x", f"m{i}"), t_ms=10 * i + 5)
        b.leader(10 * i, "S", "n1")
    b.read("direct_get", "S", {"seq": 1}, t_ms=40, served_by="n2", seq=1, msg_id="m1")
    b.read("msg_get", "S", {"last_by_subj": "s.x"}, t_ms=50, served_by="n1", seq=2, msg_id="m2")
    if lose_a_write:
        b.publish("m3", "S", "s.x", t_ms=60, seq=3)  # acknowledged, stored nowhere
    return b.write()


# what the analysis must count in a tiny_run: history ops, log rows (open + 2 x (entry, store)
# per node), leader samples, acknowledged writes, judged reads, replayed rows
TINY_RUN_COUNTS = {
    "history": 8,
    "log": 3 * 5,
    "leaders": 2,
    "ok": 2,
    "direct_get": 1,
    "msg_get": 1,
    "replayed": 3 * 3,
}
TINY_LOST_WRITE_COUNTS = {"history": 2, "ok": 1}
