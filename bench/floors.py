"""The performance floors jetraft is held to against nats-server, and their verdicts.

Owns: the floor table (a workload: its topology, phase, metric, the nats-server it is compared
with and the limit on jetraft's ratio to it) and turning measured results into "met", "not met"
or "not measured" rows, with the server CPU per operation next to each ratio. Pure: no I/O.

Must never: call a floor met without both numbers measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bench.batch_bench import BATCH_PHASE
from bench.loadgen import (
    PIPELINED_DIRECT_GET,
    PIPELINED_PUBLISH,
    SYNC_DIRECT_GET,
    SYNC_PUBLISH,
    PhaseResult,
)
from bench.report import JETRAFT, MISSING, NATS, NATS_SYNC

R1 = "R1"
R3 = "R3"
RATE = "rate"  # jetraft's rate / nats-server's, at least the limit
P50 = "p50"  # jetraft's p50 latency / nats-server's, at most the limit
MET = "met"
NOT_MET = "not met"
NOT_MEASURED = "not measured"

# server name -> phase -> result, for one topology
Results = Mapping[str, Mapping[str, PhaseResult]]


@dataclass(frozen=True)
class Floor:
    topology: str
    workload: str
    phase: str
    metric: str
    baseline: str
    limit: float

    def met_by(self, ratio: float) -> bool:
        return ratio >= self.limit if self.metric == RATE else ratio <= self.limit

    @property
    def shown(self) -> str:
        return f"≥ {self.limit:.1f}" if self.metric == RATE else f"≤ {self.limit:.1f}x"


def _latency_floors(topology: str) -> list[Floor]:
    """Sync p50 within 1.5x of nats-server as deployed, and no slower than nats-server when
    it also fsyncs before acknowledging (the durability jetraft gives)."""
    floors = []
    for phase, what in ((SYNC_PUBLISH, "sync publish"), (SYNC_DIRECT_GET, "sync Direct Get")):
        workload = f"{topology} {what} p50 latency"
        floors.append(Floor(topology, workload, phase, P50, NATS, 1.5))
        floors.append(Floor(topology, workload, phase, P50, NATS_SYNC, 1.0))
    return floors


FLOORS: tuple[Floor, ...] = (
    Floor(R1, "R1 pipelined publish (window 1000)", PIPELINED_PUBLISH, RATE, NATS, 0.8),
    Floor(R1, "R1 pipelined Direct Get (window 1000)", PIPELINED_DIRECT_GET, RATE, NATS, 0.8),
    Floor(R1, "R1 atomic batches of 1000", BATCH_PHASE, RATE, NATS, 1.0),
    Floor(R3, "R3 pipelined publish, client on one node", PIPELINED_PUBLISH, RATE, NATS, 0.7),
    Floor(R3, "R3 atomic batches of 1000", BATCH_PHASE, RATE, NATS, 0.7),
    *_latency_floors(R1),
    *_latency_floors(R3),
)


def for_topology(topology: str) -> list[Floor]:
    return [floor for floor in FLOORS if floor.topology == topology]


@dataclass(frozen=True)
class Verdict:
    floor: Floor
    jetraft: PhaseResult | None
    baseline: PhaseResult | None

    @property
    def ratio(self) -> float | None:
        mine, theirs = _metric(self.floor, self.jetraft), _metric(self.floor, self.baseline)
        if mine is None or theirs is None or theirs == 0:
            return None
        return mine / theirs

    @property
    def verdict(self) -> str:
        ratio = self.ratio
        if ratio is None:
            return NOT_MEASURED
        return MET if self.floor.met_by(ratio) else NOT_MET


def _metric(floor: Floor, result: PhaseResult | None) -> float | None:
    if result is None:
        return None
    return result.rate_per_s if floor.metric == RATE else result.p50_us


def verdicts(floors: Iterable[Floor], by_topology: Mapping[str, Results]) -> list[Verdict]:
    out = []
    for floor in floors:
        results = by_topology.get(floor.topology, {})
        out.append(
            Verdict(
                floor,
                results.get(JETRAFT, {}).get(floor.phase),
                results.get(floor.baseline, {}).get(floor.phase),
            )
        )
    return out


SUMMARY_HEADER = [
    "workload",
    "against",
    "floor",
    "jetraft/nats",
    "verdict",
    "server CPU µs/op jetraft / nats (ratio)",
]


def _cpu_cell(verdict: Verdict) -> str:
    mine = None if verdict.jetraft is None else verdict.jetraft.cpu_us_per_op
    theirs = None if verdict.baseline is None else verdict.baseline.cpu_us_per_op
    if mine is None or theirs is None or theirs == 0:
        return MISSING
    return f"{mine:,.1f} / {theirs:,.1f} ({mine / theirs:.2f})"


def summary_rows(found: Sequence[Verdict]) -> list[list[str]]:
    rows = []
    for verdict in found:
        ratio = verdict.ratio
        rows.append(
            [
                verdict.floor.workload,
                verdict.floor.baseline,
                verdict.floor.shown,
                MISSING if ratio is None else f"{ratio:.2f}",
                verdict.verdict,
                _cpu_cell(verdict),
            ]
        )
    return rows


def tally(found: Sequence[Verdict]) -> str:
    """One line: how many floors were met, not met and not measured."""
    counts = {name: sum(v.verdict == name for v in found) for name in (MET, NOT_MET, NOT_MEASURED)}
    return ", ".join(f"{count} {name}" for name, count in counts.items() if count)
