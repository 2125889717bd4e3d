"""One chaos run, start to verdict: ``jetraft chaos``.

The order of a run (Jepsen's): start a fresh cluster (``db``), create the workload's streams,
run the client processes while the nemesis schedule injects and heals faults, heal everything,
wait until the cluster has recovered (every node healthy and, for jetraft, every replica at the
same applied index and digest), read everything back from every node, stop the cluster, run the
fast checkers, write ``verdict.json`` and print a one-screen summary.

The schedule is a pure function of the seed: one ``random.Random(seed)`` gives the workload's and
the nemesis's generators; the nemesis draws its pauses, its choice of fault and the fault's own
randomness from its generator before acting, so the same seed gives the same sequence of
operations and faults (their outcomes depend on the system, as in any real test).

Must never: import cluster/, engine/ or protocol/ (a black box user of the cluster), or end
without stopping every process it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TextIO

from jepsen_like.checker import check_run
from jepsen_like.contract import (
    CLIENT_FS,
    FAIL,
    HISTORY_FILE,
    INFO,
    INVOKE,
    LEADERS_FILE,
    OK,
    RUN_FILE,
)
from jepsen_like.db import ClusterDB, ports_needed
from jepsen_like.history import NEMESIS_PROCESS, History
from jepsen_like.nemesis import NEMESES, Nemesis, make_nemesis
from jepsen_like.workloads import WORKLOADS, Workload, make_workload

RUN_FORMAT_VERSION: Final = 1
WARMUP_S: Final = 2.0  # clients run fault-free this long first
FAULT_GAP_S: Final = (1.0, 3.0)  # healthy time between two faults (uniform)
FAULT_HOLD_S: Final = (3.0, 6.0)  # how long a fault lasts (uniform)
RECOVERY_TIMEOUT_S: Final = 90.0
CONVERGE_POLL_S: Final = 0.25
PROGRESS_EVERY_S: Final = 2.0
EXIT_VALID: Final = 0
EXIT_ANOMALIES: Final = 1
EXIT_ERROR: Final = 2


@dataclass
class ChaosOptions:
    nodes: int = 3
    time_s: float = 60.0
    workload: str = "queue"
    nemeses: list[str] = field(default_factory=lambda: ["kill", "partition"])
    seed: int = 1
    out: Path = Path("chaos-run")
    system: Literal["jetraft", "nats"] = "jetraft"
    processes: int = 0  # 0: two per node
    ports: range | None = None  # every port the run listens on comes from here (None: any)

    def validate(self) -> None:
        if self.nodes not in (3, 5):
            raise ValueError("--nodes must be 3 or 5")
        if self.workload not in WORKLOADS:
            raise ValueError(f"unknown workload {self.workload!r}; choose from {sorted(WORKLOADS)}")
        for name in self.nemeses:
            if name not in NEMESES:
                raise ValueError(f"unknown nemesis {name!r}; choose from {', '.join(NEMESES)}")
        if self.time_s <= 0:
            raise ValueError("--time must be positive")
        if self.ports is not None and len(self.ports) < ports_needed(self.nodes):
            raise ValueError(
                f"--ports {self.ports.start}-{self.ports.stop - 1} is too small: {self.nodes} "
                f"nodes need {ports_needed(self.nodes)} ports"
            )


def _jetraft_version() -> str:
    try:
        from importlib.metadata import version

        return version("jetraft")
    except Exception:
        return "unknown"


class _Progress:
    def __init__(self, history: History, total_s: float, out: TextIO) -> None:
        self.history = history
        self.total_s = total_s
        self.out = out
        self.started = time.monotonic()
        self.fault = "none"

    def line(self, phase: str) -> str:
        counts = self.history.counts
        by_type = {t: sum(n for (f, ty), n in counts.items() if ty == t) for t in (OK, FAIL)}
        info = sum(n for (f, ty), n in counts.items() if ty == INFO and f in CLIENT_FS)
        elapsed = time.monotonic() - self.started
        return (
            f"[{elapsed:6.1f}s/{self.total_s:.0f}s] {phase:<9} ok={by_type[OK]} "
            f"fail={by_type[FAIL]} info={info}  fault: {self.fault}"
        )

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            print(self.line("running"), file=self.out, flush=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PROGRESS_EVERY_S)


async def _nemesis_schedule(
    db: ClusterDB,
    nemeses: dict[str, Nemesis],
    rng: random.Random,
    history: History,
    stop: asyncio.Event,
    progress: _Progress,
) -> None:
    async def sleep(seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
        return stop.is_set()

    if await sleep(WARMUP_S):
        return
    names = sorted(nemeses)
    while True:
        gap = rng.uniform(*FAULT_GAP_S)
        hold = rng.uniform(*FAULT_HOLD_S)
        name = rng.choice(names)
        if await sleep(gap):
            return
        nemesis = nemeses[name]
        action = await nemesis.start(db, rng)
        history.record(NEMESIS_PROCESS, None, INFO, action["f"], action.get("value"))
        progress.fault = f"{name} {json.dumps(action.get('value'), default=str)[:60]}"
        stopped = await sleep(hold)
        action = await nemesis.stop(db, rng)
        history.record(NEMESIS_PROCESS, None, INFO, action["f"], action.get("value"))
        progress.fault = "none"
        if stopped:
            return


LEADER_SAMPLE_S: Final = 0.5


async def _sample_leaders(
    db: ClusterDB, streams: tuple[str, ...], path: Path, stop: asyncio.Event
) -> None:
    """``RUN/leaders.jsonl``: who led each stream, sampled twice a second — how the analysis
    tells a read served by the leader from one served by a follower."""
    with open(path, "a", encoding="utf-8") as f:
        while not stop.is_set():
            for stream in streams:
                try:
                    leader = await db.stream_leader(stream)
                except Exception:
                    leader = None
                row = {"time_ns": time.time_ns(), "stream": stream, "leader": leader}
                f.write(json.dumps(row) + "\n")
            f.flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), LEADER_SAMPLE_S)


async def _converged(db: ClusterDB, streams: tuple[str, ...]) -> bool:
    """Every node healthy; for jetraft also every replica of each stream at one applied index and
    digest (nats-server exposes no digest: a stream leader is enough there)."""
    for name in db.names:
        if not db.alive(name) or not await db.healthy(name):
            return False
    for stream in streams:
        if await db.stream_leader(stream) is None:
            return False
        if db.system != "jetraft":
            continue
        seen = set()
        for name in db.names:
            view = await db.jetraftz(name)
            if view is None:
                return False
            for s in view.get("streams", []):
                if s.get("name") == stream:
                    seen.add((s.get("applied_index"), s.get("digest")))
        if len(seen) != 1:
            return False
    return True


async def _wait_converged(db: ClusterDB, streams: tuple[str, ...], out: TextIO) -> bool:
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while time.monotonic() < deadline:
        if await _converged(db, streams):
            return True
        await asyncio.sleep(CONVERGE_POLL_S)
    print("jetraft chaos: the cluster did not converge after healing", file=out, flush=True)
    return False


def _write_json(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")


async def run_chaos(opts: ChaosOptions, out: TextIO = sys.stdout) -> int:
    opts.validate()
    run_dir = opts.out
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ValueError(f"{run_dir} exists and is not empty: choose a new --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(opts.seed)
    workload_rng = random.Random(rng.getrandbits(64))
    nemesis_rng = random.Random(rng.getrandbits(64))
    processes = opts.processes or 2 * opts.nodes
    workload: Workload = make_workload(opts.workload)
    leader_stream = workload.streams[0]
    nemeses = {name: make_nemesis(name, leader_stream) for name in opts.nemeses}
    db = ClusterDB(run_dir, opts.nodes, opts.system, port_range=opts.ports)
    run: dict[str, Any] = {
        "version": RUN_FORMAT_VERSION,
        "jetraft_version": _jetraft_version(),
        "python": platform.python_version(),
        "options": {
            **asdict(opts),
            "out": str(opts.out),
            "processes": processes,
            "ports": None if opts.ports is None else [opts.ports.start, opts.ports.stop - 1],
        },
        "nodes": db.names,
        "seed": opts.seed,
        "workload": opts.workload,
        "nemeses": opts.nemeses,
        "system": opts.system,
        "streams": list(workload.streams),
        "started_ns": time.time_ns(),
    }
    _write_json(run_dir / RUN_FILE, run)
    history = History(run_dir / HISTORY_FILE)
    progress = _Progress(history, opts.time_s, out)
    phases: dict[str, float] = {}
    recovered = False
    try:
        t0 = time.monotonic()
        print(f"jetraft chaos: starting {opts.nodes} {opts.system} nodes in {run_dir}", file=out)
        await db.start()
        run["cluster"] = db.describe()
        await workload.setup({n: db.client_url(n) for n in db.names})
        phases["setup_s"] = time.monotonic() - t0
        stop = asyncio.Event()
        urls = {n: db.client_url(n) for n in db.names}
        t1 = time.monotonic()
        progress.started = t1
        clients = asyncio.create_task(workload.run(urls, history, workload_rng, stop, processes))
        faults = asyncio.create_task(
            _nemesis_schedule(db, nemeses, nemesis_rng, history, stop, progress)
        )
        ticker = asyncio.create_task(progress.run(stop))
        sampler = asyncio.create_task(
            _sample_leaders(db, workload.streams, run_dir / LEADERS_FILE, stop)
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(clients), opts.time_s)
        stop.set()
        await faults  # heals whatever fault is active
        await clients
        await ticker
        await sampler
        phases["run_s"] = time.monotonic() - t1
        print(progress.line("healing"), file=out, flush=True)
        t2 = time.monotonic()
        for name in db.names:  # a fault's heal may have failed: bring every node back
            if db.paused(name):
                db.resume(name)
            if not db.alive(name):
                await db.restart(name)
        db.proxies.unblock_all()
        db.proxies.set_delay(0, 0)
        recovered = await _wait_converged(db, workload.streams, out)
        phases["recovery_s"] = time.monotonic() - t2
        t3 = time.monotonic()
        await workload.final_reads(urls, history)
        phases["final_reads_s"] = time.monotonic() - t3
    except Exception as exc:  # the run failed, not the system under test: report and stop
        print(f"jetraft chaos: run aborted: {exc!r}", file=out, flush=True)
        history.close_pending(f"run aborted: {exc!r}")
        history.close()
        await db.stop()
        run["aborted"] = repr(exc)
        _write_json(run_dir / RUN_FILE, run)
        return EXIT_ERROR
    history.close_pending("run ended")
    history.close()
    await db.stop()
    run["phases"] = phases
    run["recovered"] = recovered
    run["ended_ns"] = time.time_ns()
    _write_json(run_dir / RUN_FILE, run)
    verdict = check_run(run_dir, write=True)
    if not recovered:
        verdict.setdefault("anomalies", []).append(
            {"type": "no-recovery", "detail": "the cluster did not converge after healing"}
        )
        verdict["valid"] = False
        _write_json(run_dir / "verdict.json", verdict)
    print(summary(run, verdict, history.counts), file=out, flush=True)
    return EXIT_VALID if verdict.get("valid") else EXIT_ANOMALIES


def summary(run: dict[str, Any], verdict: dict[str, Any], counts: Any) -> str:
    lines = [
        "",
        f"jetraft chaos — {run['system']}, {len(run['nodes'])} nodes, workload {run['workload']},"
        f" nemeses {','.join(run['nemeses'])}, seed {run['seed']}",
    ]
    fs = sorted({f for f, _ in counts if f in CLIENT_FS})
    for f in fs:
        row = {t: counts.get((f, t), 0) for t in (INVOKE, OK, FAIL, INFO)}
        lines.append(
            f"  {f:<11} invoked {row[INVOKE]:>6}  ok {row[OK]:>6}  fail {row[FAIL]:>5}"
            f"  info {row[INFO]:>5}"
        )
    faults = sum(n for (f, t), n in counts.items() if f.endswith("-start") and t == INFO)
    lines.append(f"  faults injected: {faults}")
    for key, value in sorted((verdict.get("stats") or {}).items()):
        if isinstance(value, int | float | str):
            lines.append(f"  {key}: {value}")
    anomalies = verdict.get("anomalies") or []
    if anomalies:
        lines.append(f"  ANOMALIES ({len(anomalies)}):")
        for a in anomalies[:20]:
            lines.append(f"    - {a.get('type')}: {str(a.get('detail'))[:150]}")
    verdict_word = "VALID" if verdict.get("valid") else "INVALID"
    lines.append(f"verdict: {verdict_word}  (details in verdict.json)")
    return "\n".join(lines)
