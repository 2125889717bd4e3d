"""Server CPU time from /proc, for the benchmarks' CPU-per-operation numbers.

Owns: reading one process's user+system CPU seconds, and a meter that sums them over the server
processes of a run (one for a single server, three for a cluster). CPU per operation is steadier
than a rate on a shared machine: time other work takes from the server's cores lowers its rate
but not the CPU it spends per operation.

Must never: signal or otherwise touch the processes it reads. Linux only (/proc).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# /proc counts CPU time in clock ticks (10 ms at 100 Hz): below this many a phase's CPU is too
# coarse to compare (a short --quick phase can show 0), so it is reported as unknown
MIN_TICKS = 10

# CPU seconds used so far by the measured processes, None where /proc could not be read
CpuMeter = Callable[[], float | None]


def process_cpu_s(pid: int) -> float | None:
    """User plus system CPU seconds of ``pid`` so far, from /proc (None where it cannot be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    # after the command: state is field 3, utime and stime are fields 14 and 15 (proc(5))
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def pids_meter(pids: Sequence[int]) -> CpuMeter:
    """A meter of the CPU seconds of all ``pids`` together (None if one cannot be read: a
    partial sum would pass for a cheaper server)."""
    chosen = tuple(pids)

    def meter() -> float | None:
        total = 0.0
        for pid in chosen:
            used = process_cpu_s(pid)
            if used is None:
                return None
            total += used
        return total

    return meter


def read_meter(meter: CpuMeter | None) -> float | None:
    return None if meter is None else meter()


def spent_since(meter: CpuMeter | None, before: float | None) -> float | None:
    """CPU seconds used since ``before`` (a :func:`read_meter` value), None when unknown or
    fewer than ``MIN_TICKS`` clock ticks."""
    after = read_meter(meter)
    if before is None or after is None:
        return None
    spent = after - before
    # whole ticks, compared as such: the seconds are ticks divided by the tick rate
    return None if round(spent * CLOCK_TICKS_PER_S) < MIN_TICKS else spent
