"""The chaos harness's workloads: what they send, how they record outcomes, and that a correct
system passes the checker.

Unit part (no server): every workload's steps run against a small in-memory JetStream stand-in
(``FakeServer``), which can also answer with errors, time out before or after applying, or drop
an acknowledged write. Checked: same seed, same intended operations (whatever the outcomes);
errors are ``fail``, timeouts ``info``, abandoned batches ``fail``; the checker passes a correct
server even when many outcomes are unknown, and catches the one that drops an acked write.
Integration part: each workload runs ~3 s against a real 3-node jetraft cluster (with apply logs)
and a real nats-server; the history must be well-formed and the verdict valid.
Must never: leave a server running (fixtures stop them by pid) or sleep blindly.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats.errors
import pytest
from nats.aio.msg import Msg

from jepsen_like import workloads
from jepsen_like.checker import check
from jepsen_like.history import History, load, load_jsonl, pair, problems
from jepsen_like.workloads import Client, CounterWorkload, Workload, make_workload, read_all
from tests.servers import JetraftCluster, ServerProc, start_nats_server

STEPS = 60  # per process, in the unit tests
PROCESSES = 3
RUN_S = 3.0
RUN_PROCESSES = 3
MIN_OK_OPS = 20
MAX_BATCH_STEPS = 1000  # a run of RUN_S must get at least this many ok operations through


# --- an in-memory JetStream ---------------------------------------------------------------------


class FakeServer:
    """Streams as lists; publishes, atomic batches (one commit), expected-last-subject-sequence,
    counter increments (deduplicated by Nats-Msg-Id), Direct Get, MSG.GET and STREAM.INFO, all
    answered like a correct server; with ``forget_ids``, a server that applies a retried
    increment again."""

    def __init__(
        self,
        wl: Workload,
        faults: random.Random | None = None,
        drop: int = 0,
        forget_ids: bool = False,
    ):
        self.streams: dict[str, dict[int, tuple[str, bytes]]] = {}
        self.roots: dict[str, str] = {}
        for config in wl.stream_configs(1):
            self.streams[config["name"]] = {}
            self.roots[config["subjects"][0].split(".")[0]] = config["name"]
        self.last: dict[str, int] = dict.fromkeys(self.streams, 0)
        self.staged: dict[str, list[tuple[str, bytes]]] = {}
        self.roll = faults.random if faults is not None else None  # draws that pick a fault
        self.drop = drop  # drop the acked write that gets this seq (0: never)
        self.up = True
        self.requests = 0
        self.down_after: int | None = None  # requests answered before the server dies
        self.msg_ids: dict[str, int] = {}  # Nats-Msg-Id -> seq
        self.forget_ids = forget_ids

    def _json(self, body: Any, headers: dict[str, str] | None = None) -> Msg:
        return Msg(_client=None, data=json.dumps(body).encode(), headers=headers)  # type: ignore[arg-type]

    def _store(self, stream: str, subject: str, data: bytes) -> int:
        self.last[stream] += 1
        self.streams[stream][self.last[stream]] = (subject, data)
        return self.last[stream]

    def handle(self, subject: str, data: bytes, headers: dict[str, str] | None) -> Msg:
        headers = headers or {}
        api = "$JS.API."
        if subject.startswith(api + "DIRECT.GET."):
            stream = subject.removeprefix(api + "DIRECT.GET.")
            found = self._find(stream, json.loads(data))
            if found is None:
                return Msg(_client=None, headers={"Status": "404"})  # type: ignore[arg-type]
            seq, (subj, payload) = found
            hdrs = {"Nats-Stream": stream, "Nats-Subject": subj, "Nats-Sequence": str(seq)}
            return Msg(_client=None, data=payload, headers=hdrs)  # type: ignore[arg-type]
        if subject.startswith(api + "STREAM.MSG.GET."):
            stream = subject.removeprefix(api + "STREAM.MSG.GET.")
            found = self._find(stream, json.loads(data))
            if found is None:
                return self._json({"error": {"code": 404, "err_code": 10037}})
            seq, (subj, payload) = found
            message = {"subject": subj, "seq": seq, "data": base64.b64encode(payload).decode()}
            return self._json({"message": message})
        if subject.startswith(api + "STREAM.INFO."):
            stream = subject.removeprefix(api + "STREAM.INFO.")
            seqs = sorted(self.streams[stream])
            state = {"first_seq": seqs[0] if seqs else 1, "last_seq": self.last[stream]}
            return self._json({"state": state})
        stream = self.roots[subject.split(".")[0]]
        batch = headers.get("Nats-Batch-Id")
        if batch is not None:
            self.staged.setdefault(batch, []).append((subject, data))
            if "Nats-Batch-Commit" not in headers:
                return self._json({})
            msgs = self.staged.pop(batch)
            seq = 0
            for subj, payload in msgs:
                seq = self._store(stream, subj, payload)
            return self._json({"stream": stream, "seq": seq, "batch": batch, "count": len(msgs)})
        incr = headers.get("Nats-Incr")
        if incr is not None:
            return self._increment(stream, subject, int(incr), headers["Nats-Msg-Id"])
        expected = headers.get("Nats-Expected-Last-Subject-Sequence")
        if expected is not None:
            last = self._find(stream, {"last_by_subj": subject})
            if (last[0] if last else 0) != int(expected):
                return self._json({"error": {"code": 400, "err_code": 10071}})
        seq = self._store(stream, subject, data)
        if seq == self.drop:
            del self.streams[stream][seq]
        return self._json({"stream": stream, "seq": seq})

    def _increment(self, stream: str, subject: str, incr: int, msg_id: str) -> Msg:
        if msg_id in self.msg_ids and not self.forget_ids:
            return self._json({"stream": stream, "seq": self.msg_ids[msg_id], "duplicate": True})
        last = self._find(stream, {"last_by_subj": subject})
        total = (int(json.loads(last[1][1])["val"]) if last else 0) + incr
        seq = self._store(stream, subject, json.dumps({"val": str(total)}).encode())
        self.msg_ids[msg_id] = seq
        return self._json({"stream": stream, "seq": seq, "val": str(total)})

    def _find(self, stream: str, req: dict[str, Any]) -> tuple[int, tuple[str, bytes]] | None:
        msgs = self.streams[stream]
        if "seq" in req:
            return (req["seq"], msgs[req["seq"]]) if req["seq"] in msgs else None
        on_subject = [s for s, (subj, _) in msgs.items() if subj == req["last_by_subj"]]
        return (max(on_subject), msgs[max(on_subject)]) if on_subject else None


class FakeClient(Client):
    """A Client whose requests go to a FakeServer; with ``faults``, some requests time out
    before reaching it, some after it applied them, and some get an error reply."""

    def __init__(self, server: FakeServer, process: int, history: History, rng: random.Random):
        super().__init__(process, f"n{process % 3 + 1}", "nats://fake", history, rng)
        self.server = server

    async def request(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None
    ) -> Msg:
        server = self.server
        server.requests += 1
        if server.down_after is not None and server.requests > server.down_after:
            server.up = False
        if not server.up:
            raise nats.errors.ConnectionClosedError
        roll = server.roll() if server.roll is not None else 1.0
        if roll < 0.1:
            raise nats.errors.TimeoutError  # lost on the way
        if roll < 0.15:
            raise nats.errors.NoRespondersError
        reply = self.server.handle(subject, payload, headers)
        if roll < 0.25:
            raise nats.errors.TimeoutError  # applied, but the reply was lost
        return reply

    async def send(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        self.server.handle(subject, payload, headers)

    async def ensure_connected(self) -> bool:
        return self.server.up


async def fake_run(
    tmp_path: Path,
    name: str,
    seed: int,
    faults: int | None = None,
    drop: int = 0,
    forget_ids: bool = False,
) -> tuple[list[dict[str, Any]], FakeServer]:
    """STEPS steps of each of PROCESSES processes (interleaved), then the final reads."""
    wl = make_workload(name)
    server = FakeServer(wl, None if faults is None else random.Random(faults), drop, forget_ids)
    path = tmp_path / f"{name}-{seed}-{faults}-{drop}-{len(list(tmp_path.iterdir()))}.jsonl"
    rng = random.Random(seed)
    with History(path) as history:
        clients = [
            FakeClient(server, p, history, random.Random(rng.getrandbits(64)))
            for p in range(PROCESSES)
        ]
        for _ in range(STEPS):
            for c in clients:
                await wl.step(c)
        server.roll = None  # the final reads see the truth
        final = FakeClient(server, workloads.FINAL_PROCESS_BASE, history, random.Random(0))
        await wl.read_back(final)
    return load(path), server


def intended(history: list[dict[str, Any]]) -> dict[Any, list[tuple[str, Any]]]:
    """Per process, the writes it invoked: (f, ids and subject, ttl or increment)."""
    out: dict[Any, list[tuple[str, Any]]] = {}
    for op in history:
        v = op["value"]
        if op["type"] == "invoke" and op["f"] in ("publish", "batch", "increment"):
            if v.get("attempt", 1) > 1:
                continue  # a retry: what happened to the first attempt, not an intention
            out.setdefault(op["process"], []).append(
                (
                    op["f"],
                    (v.get("id") or tuple(v["ids"]), v["subject"], v.get("ttl"), v.get("incr")),
                )
            )
    return out


# --- unit: determinism, outcomes, agreement with the checker ------------------------------------


@pytest.mark.parametrize("name", sorted(workloads.WORKLOADS))
async def test_the_same_seed_gives_the_same_operations(tmp_path: Path, name: str) -> None:
    first, _ = await fake_run(tmp_path, name, seed=7)
    again, _ = await fake_run(tmp_path, name, seed=7)
    strip = [{k: v for k, v in op.items() if k != "time_ns"} for op in first]
    assert strip == [{k: v for k, v in op.items() if k != "time_ns"} for op in again]
    if name != "queue":  # a queue's publishes are the same for every seed (only pauses vary)
        other, _ = await fake_run(tmp_path, name, seed=8)
        assert intended(other) != intended(first)
    if name in ("queue", "batch", "ttl", "counter"):
        # their writes do not depend on what happened to earlier operations
        faulty, _ = await fake_run(tmp_path, name, seed=7, faults=1)
        assert intended(faulty) == intended(first)


@pytest.mark.parametrize("name", sorted(workloads.WORKLOADS))
async def test_a_correct_server_passes_even_with_unknown_outcomes(
    tmp_path: Path, name: str
) -> None:
    for faults in (None, 3):
        history, _server = await fake_run(tmp_path, name, seed=11, faults=faults)
        assert problems(history) == []
        verdict = check(history, {}, {})
        assert verdict["valid"], json.dumps(verdict["anomalies"])[:3000]
        types = {op["type"] for op in history}
        assert "ok" in types
        if faults is not None:
            assert {"info", "fail"} <= types


async def test_a_server_that_drops_an_acked_write_is_caught(tmp_path: Path) -> None:
    history, _server = await fake_run(tmp_path, "queue", seed=5, drop=17)
    verdict = check(history, {}, {})
    assert verdict["anomaly_counts"] == {"lost": 1}
    (lost,) = verdict["anomalies"]
    assert lost["detail"]["seq"] == 17


async def test_a_server_that_applies_a_retried_increment_again_is_caught(tmp_path: Path) -> None:
    history, _server = await fake_run(tmp_path, "counter", seed=11, faults=3)
    retries = [op for op in history if op["f"] == "increment" and op["value"]["attempt"] > 1]
    duplicates = [op for op in history if op["type"] == "ok" and op["value"].get("duplicate")]
    assert retries and duplicates  # applied, its ack lost, retried: answered as a duplicate
    assert check(history, {}, {})["valid"]
    history, _server = await fake_run(tmp_path, "counter", seed=11, faults=3, forget_ids=True)
    verdict = check(history, {}, {})
    assert set(verdict["anomaly_counts"]) == {"counter"}, verdict["anomaly_counts"]


async def test_increments_record_the_total_or_the_duplicate(tmp_path: Path) -> None:
    wl = make_workload("counter")
    server = FakeServer(wl)
    stream = wl.streams[0]
    with History(tmp_path / "h.jsonl") as history:
        client = FakeClient(server, 0, history, random.Random(1))
        kind, out = await client.increment(stream, "jn.c0", "i1", 5, 1)
        assert (kind, out["seq"], out["val"], out["attempt"]) == ("ok", 1, "5", 1)
        kind, out = await client.increment(stream, "jn.c0", "i2", -7, 1)
        assert (kind, out["seq"], out["val"]) == ("ok", 2, "-2")
        kind, out = await client.increment(stream, "jn.c0", "i2", -7, 2)
        assert (kind, out["seq"], out["duplicate"], "val" in out) == ("ok", 2, True, False)
        kind, out = await workloads.counter_read(client, stream, "jn.c0")
        assert (kind, out["seq"], out["val"], out["served_by"]) == ("ok", 2, "-2", "n1")
        kind, out = await workloads.counter_read(client, stream, "jn.c1")
        assert (kind, out["not_found"]) == ("ok", True)
        server.up = False
        kind, out = await workloads.counter_read(client, stream, "jn.c0")
        assert kind == "info"
    ops = load(tmp_path / "h.jsonl")
    assert problems(ops) == []
    assert server.streams[stream][1] == ("jn.c0", b'{"val": "5"}')


def test_counter_payloads() -> None:
    assert workloads.counter_value(b'{"val":"-12"}') == "-12"
    assert workloads.counter_value(b'{"val":12}') is None
    assert workloads.counter_value(b"") is None
    assert workloads.counter_value(None) is None


async def test_outcomes_are_recorded_as_ok_fail_or_info(tmp_path: Path) -> None:
    wl = make_workload("kv")
    server = FakeServer(wl)
    with History(tmp_path / "h.jsonl") as history:
        client = FakeClient(server, 0, history, random.Random(1))
        stream, subject = wl.streams[0], "jkv.k1"
        kind, out = await client.publish(stream, subject, "x1")
        assert (kind, out["seq"]) == ("ok", 1)
        kind, out = await client.publish(
            stream, subject, "x2", headers={"Nats-Expected-Last-Subject-Sequence": "0"}
        )
        assert kind == "fail" and out["error"]["err_code"] == 10071
        kind, out = await client.msg_get(stream, {"last_by_subj": subject})
        assert (kind, out["seq"], out["id"], out["served_by"]) == ("ok", 1, "x1", "n1")
        kind, out = await client.direct_get(stream, {"seq": 9})
        assert (kind, out["not_found"], out["served_by"]) == ("ok", True, None)
        kind, out = await client.msg_get(stream, {"seq": 9})
        assert (kind, out["not_found"]) == ("ok", True)

        rolls = iter([0.05, 0.2, 0.12])
        server.roll = lambda: next(rolls)
        kind, out = await client.publish(stream, subject, "x3")  # lost on the way
        assert (kind, out["error"]) == ("info", "timeout")
        kind, out = await client.publish(stream, subject, "x4")  # applied, reply lost
        assert (kind, out["error"]) == ("info", "timeout")
        assert server.last[stream] == 2
        kind, out = await client.publish(stream, subject, "x5")
        assert (kind, out["error"]) == ("fail", "no responders")
        server.roll = None

        async def hang() -> dict[str, Any]:
            await asyncio.Event().wait()
            return {}

        task = asyncio.create_task(client.op("publish", {"id": "x6"}, hang))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        b = make_workload("batch")
        bserver = FakeServer(b)
        bclient = FakeClient(bserver, 1, history, random.Random(0))
        for _ in range(MAX_BATCH_STEPS):  # until one was abandoned (3% of them)
            await b.step(bclient)
            if history.counts[("batch", "fail")]:
                break
    ops = load(tmp_path / "h.jsonl")
    assert problems(ops) == []
    assert ops[-1]["type"] != "invoke"
    cancelled = [c for i, c in pair(ops) if i["value"].get("id") == "x6"]
    assert cancelled[0] is not None and cancelled[0]["type"] == "info"
    assert cancelled[0]["value"]["error"] == "cancelled"
    batches = [(i, c) for i, c in pair(ops) if i["f"] == "batch"]
    assert any(c is not None and c["value"].get("abandoned") for _, c in batches)
    for invoke, done in batches:
        assert done is not None
        if done["type"] == "ok":
            ids, seqs = done["value"]["ids"], done["value"]["seqs"]
            assert len(seqs) == len(ids) == done["value"]["count"]
            assert seqs == list(range(seqs[0], seqs[0] + len(ids)))
            assert seqs[-1] == done["value"]["seq"]
        else:
            assert done["type"] == "fail" and done["value"]["abandoned"] is True
            assert invoke["value"]["abandon"] is True
    stored = {json.loads(data)["id"] for _subj, data in bserver.streams["JBATCH"].values()}
    abandoned = {i for _, c in batches if c and c["type"] == "fail" for i in c["value"]["ids"]}
    assert abandoned and not abandoned & stored


async def test_a_final_read_whose_node_dies_ends_promptly_with_unknown_seqs(
    tmp_path: Path,
) -> None:
    history, server = await fake_run(tmp_path, "queue", seed=2)
    acked = len(history) // 2 - 1
    server.down_after = server.requests + 10  # STREAM.INFO and a few reads, then it is gone
    path = tmp_path / "final.jsonl"
    with History(path) as h:
        loop = asyncio.get_running_loop()
        started = loop.time()
        kind, value = await read_all(FakeClient(server, 0, h, random.Random(0)), "JQUEUE")
        assert loop.time() - started < 2 * workloads.FINAL_READ_RETRY_S + 1
    assert kind == "ok"
    assert len(value["messages"]) + len(value["unknown"]) == value["last_seq"] == acked
    assert len(value["unknown"]) >= acked - 10
    ops = [{**op, "index": i} for i, op in enumerate([*history[:-2], *load(path)])]
    verdict = check(ops, {}, {})
    assert verdict["valid"], json.dumps(verdict)[:3000]
    assert verdict["stats"]["unverified"] == len(value["unknown"])


def test_workload_names_and_tags() -> None:
    assert sorted(workloads.WORKLOADS) == [
        "batch",
        "consumer",
        "counter",
        "kv",
        "mix",
        "queue",
        "ttl",
    ]
    assert make_workload("mix", tag="T1").streams == (
        "JQUEUET1",
        "JBATCHT1",
        "JTTLT1",
        "JKVT1",
        "JCOUNTERT1",
    )
    config = make_workload("counter", tag="T1").stream_configs(3)[0]
    assert config["subjects"] == ["jnt1.>"] and config["allow_msg_counter"] is True
    assert config["retention"] == "limits" and config["duplicate_window"] > 0
    config = make_workload("ttl", tag="x").stream_configs(3)[0]
    assert config["subjects"] == ["jtx.>"]
    assert config["num_replicas"] == 3
    with pytest.raises(ValueError):
        make_workload("nope")
    with pytest.raises(ValueError):
        make_workload("queue", tag="a.b")


# --- integration: real servers ------------------------------------------------------------------


@pytest.fixture(scope="module")
def logged_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[JetraftCluster, Path]]:
    """A 3-node jetraft cluster whose nodes write apply logs to RUN/nodes/<name>/log.jsonl."""
    run = tmp_path_factory.mktemp("run")
    cluster = JetraftCluster(run, 3)
    for node in cluster.nodes:
        node.argv += ["--apply_log", str(run / "nodes" / node.name / "log.jsonl")]
    cluster.start()
    try:
        yield cluster, run
    finally:
        cluster.stop()


def well_formed(history: list[dict[str, Any]]) -> None:
    assert problems(history) == []
    assert [op["index"] for op in history] == sorted({op["index"] for op in history})
    for invoke, done in pair(history):
        assert done is not None, invoke
        if done["type"] != "ok":
            continue
        value = done["value"]
        if done["f"] == "publish":
            assert isinstance(value["seq"], int) and value["seq"] > 0
        elif done["f"] == "batch":
            assert len(value["seqs"]) == len(value["ids"])
        elif done["f"] in ("direct_get", "msg_get"):
            assert value["request"] == invoke["value"]["request"]
            assert value.get("not_found") or isinstance(value["seq"], int)
        elif done["f"] == "consume":
            assert set(value["acked"]) <= {m[0] for m in value["msgs"]}
        elif done["f"] == "increment":
            assert isinstance(value["seq"], int) and value["seq"] > 0
            assert value.get("duplicate") or int(value["val"]) is not None
        elif done["f"] == "counter_read":
            assert value.get("not_found") or int(value["val"]) is not None


async def run_workload(
    urls: dict[str, str], name: str, tag: str, path: Path
) -> tuple[Workload, list[dict[str, Any]]]:
    wl = make_workload(name, tag=tag)
    await wl.setup(urls)
    with History(path) as history:
        stop = asyncio.Event()
        task = asyncio.create_task(wl.run(urls, history, random.Random(1), stop, RUN_PROCESSES))
        await asyncio.sleep(RUN_S)
        stop.set()
        await asyncio.wait_for(task, RUN_S + 2 * workloads.OP_TIMEOUT_S)
        assert history.pending() == []
        await wl.final_reads(urls, history)
    return wl, load(path)


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(workloads.WORKLOADS))
async def test_each_workload_against_a_jetraft_cluster_passes_the_checker(
    logged_cluster: tuple[JetraftCluster, Path], name: str
) -> None:
    cluster, run = logged_cluster
    urls = dict(zip(cluster.names, cluster.urls, strict=True))
    wl, history = await run_workload(urls, name, name.upper(), run / f"{name}.jsonl")
    well_formed(history)
    ok = [op for op in history if op["type"] == "ok" and op["f"] != "read_all"]
    assert len(ok) >= MIN_OK_OPS, history[-5:]
    processes = {op["process"] for op in history if op["process"] < workloads.FINAL_PROCESS_BASE}
    assert processes == set(range(RUN_PROCESSES))
    assert {op["node"] for op in history} == set(cluster.names)  # one process per node
    read_alls = [op for op in history if op["f"] == "read_all" and op["type"] == "ok"]
    counters = [p for p in getattr(wl, "parts", (wl,)) if isinstance(p, CounterWorkload)]
    streams = len(wl.streams) - len(counters)
    assert len(read_alls) == streams * len(cluster.nodes)
    counter_reads = [op for op in history if op["f"] == "counter_read" and op["type"] == "ok"]
    subjects = sum(len(p.subjects) for p in counters)
    assert len(counter_reads) == subjects * len(cluster.nodes)
    logs = {}
    for node in cluster.names:
        rows, _bad = load_jsonl(run / "nodes" / node / "log.jsonl")
        logs[node] = [r for r in rows if r["stream"] in wl.streams]
    assert all(logs.values()), "every node logged the workload's streams"
    verdict = check(history, logs, {"nodes": cluster.names, "nemeses": []})
    assert verdict["valid"], json.dumps(verdict["anomalies"])[:4000]
    assert verdict["stats"]["acked_writes"] > 0 or name == "counter"
    assert verdict["stats"]["counter_acked"] > 0 or not counters


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[ServerProc]:
    server = start_nats_server(tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.integration
async def test_the_mix_workload_against_nats_server_passes_without_node_logs(
    nats_server: ServerProc, tmp_path: Path
) -> None:
    urls = {"n1": nats_server.url}
    _wl, history = await run_workload(urls, "mix", "", tmp_path / "history.jsonl")
    well_formed(history)
    assert {op["f"] for op in history} == {
        "publish",
        "batch",
        "direct_get",
        "msg_get",
        "read_all",
        "increment",
        "counter_read",
    }
    verdict = check(history, {}, {"system": "nats"})
    assert verdict["valid"], json.dumps(verdict["anomalies"])[:4000]
    assert verdict["skipped"]
