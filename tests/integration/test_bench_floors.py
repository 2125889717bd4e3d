"""The benchmark's floors are judged as written: a rate floor is a minimum ratio, a latency floor
a maximum, a missing number is "not measured" (never met), server CPU below the clock's
resolution is unknown rather than zero, and the load generator's ceiling warns when a server
came within the margin of it. A tiny ceiling run passes every reply check."""

from __future__ import annotations

import pytest

from bench.ceiling import CAP_MARGIN, CEILING, CeilingConfig, cap_note, run_ceiling
from bench.cpu import CLOCK_TICKS_PER_S, MIN_TICKS, spent_since
from bench.floors import (
    FLOORS,
    MET,
    NOT_MEASURED,
    NOT_MET,
    P50,
    R1,
    R3,
    RATE,
    Floor,
    summary_rows,
    tally,
    verdicts,
)
from bench.loadgen import PIPELINED_PUBLISH, SYNC_PUBLISH, PhaseResult
from bench.report import JETRAFT, NATS, NATS_SYNC, ServerRun

RATE_FLOOR = Floor(R1, "publish", PIPELINED_PUBLISH, RATE, NATS, 0.8)
P50_FLOOR = Floor(R1, "sync publish p50", SYNC_PUBLISH, P50, NATS_SYNC, 1.0)


def _rate(ops: int, seconds: float = 1.0, cpu_s: float | None = None) -> PhaseResult:
    return PhaseResult(PIPELINED_PUBLISH, ops, seconds, server_cpu_s=cpu_s)


def _p50(us: float) -> PhaseResult:
    return PhaseResult(SYNC_PUBLISH, 100, 1.0, p50_us=us, p99_us=us)


def _judge(floor: Floor, jetraft: PhaseResult | None, nats: PhaseResult | None) -> str:
    results = {
        JETRAFT: {floor.phase: jetraft} if jetraft else {},
        floor.baseline: {floor.phase: nats} if nats else {},
    }
    (verdict,) = verdicts([floor], {floor.topology: results})
    return verdict.verdict


def test_a_rate_floor_is_a_minimum_ratio() -> None:
    assert _judge(RATE_FLOOR, _rate(80), _rate(100)) == MET
    assert _judge(RATE_FLOOR, _rate(79), _rate(100)) == NOT_MET


def test_a_latency_floor_is_a_maximum_ratio() -> None:
    assert _judge(P50_FLOOR, _p50(300), _p50(300)) == MET
    assert _judge(P50_FLOOR, _p50(301), _p50(300)) == NOT_MET


def test_a_missing_number_is_not_measured() -> None:
    assert _judge(RATE_FLOOR, _rate(100), None) == NOT_MEASURED
    assert _judge(RATE_FLOOR, None, _rate(100)) == NOT_MEASURED
    assert _judge(P50_FLOOR, _rate(100), _rate(100)) == NOT_MEASURED  # no latency measured


def test_the_summary_shows_the_ratio_and_the_cpu_per_operation() -> None:
    results = {JETRAFT: {PIPELINED_PUBLISH: _rate(50, cpu_s=1.0)}, NATS: {}}
    found = verdicts([RATE_FLOOR], {R1: results, R3: {}})
    assert summary_rows(found) == [["publish", NATS, "≥ 0.8", "-", NOT_MEASURED, "-"]]
    results[NATS] = {PIPELINED_PUBLISH: _rate(100, cpu_s=0.5)}
    found = verdicts([RATE_FLOOR], {R1: results})
    row = summary_rows(found)[0]
    assert row[3:] == ["0.50", NOT_MET, "20,000.0 / 5,000.0 (4.00)"]
    assert tally(found) == "1 not met"


def test_every_floor_names_a_measured_baseline_and_topology() -> None:
    assert {floor.topology for floor in FLOORS} == {R1, R3}
    assert {floor.baseline for floor in FLOORS} <= {NATS, NATS_SYNC}
    assert len({(f.workload, f.baseline) for f in FLOORS}) == len(FLOORS)


def test_cpu_below_the_clock_resolution_is_unknown() -> None:
    tick = 1 / CLOCK_TICKS_PER_S
    assert spent_since(lambda: 5.0 + (MIN_TICKS - 1) * tick, 5.0) is None
    assert spent_since(lambda: 5.0 + MIN_TICKS * tick, 5.0) == pytest.approx(MIN_TICKS * tick)
    assert spent_since(lambda: None, 5.0) is None
    assert spent_since(None, None) is None


def _run(server: str, rate: int) -> ServerRun:
    return ServerRun(server, {PIPELINED_PUBLISH: _rate(rate)})


def test_the_ceiling_warns_when_a_server_comes_close() -> None:
    ceiling = _run(CEILING, 300)
    far = cap_note(PIPELINED_PUBLISH, ceiling, [(R1, _run(NATS, int(300 / CAP_MARGIN)))])
    assert far.endswith("the load generator is not the cap")
    runs = [(R1, _run(NATS, 250)), (R3, _run(JETRAFT, 100))]
    near = cap_note(PIPELINED_PUBLISH, ceiling, runs)
    assert "BELOW" in near and "nats-server, R1 at 250/s" in near and "3.0x below" in near


@pytest.mark.integration
def test_a_tiny_ceiling_run_passes_every_reply_check() -> None:
    run = run_ceiling(CeilingConfig(ops=500, responders=1, window=50))
    assert run.error is None, run.error
    assert sorted(run.results) == sorted(["pipelined publish", "pipelined direct get"])
    assert all(result.rate_per_s > 0 for result in run.results.values())
