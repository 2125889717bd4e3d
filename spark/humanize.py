"""Numbers as a person reads them in the analysis report: durations in the unit that fits
("2.1 s", "850 ms", "3 µs"), counts with thousands separators, rates as percentages, wall-clock
nanoseconds as times since a run's first operation or as a UTC date, and column names without
their unit suffix.

Pure functions of their arguments (no Spark, no matplotlib): spark/report.py and
spark/report_plots.py share them, so a table and a plot say the same thing the same way.

Must never: read a value in another unit than its key names (``*_ms`` milliseconds, ``*_ns``
nanoseconds, ``*_s`` seconds), or show a number without the unit it is shown in.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from typing import Any, Final

NS_PER_S: Final = 1_000_000_000
MS_PER_S: Final = 1000.0
# wall-clock nanoseconds since the epoch are at least this (2001); smaller *_ns are durations
EPOCH_NS_MIN: Final = 1_000_000_000 * NS_PER_S
# (unit, seconds per unit), largest first; a value is shown in the first unit it reaches
_SMALL_UNITS: Final = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
MINUTE_S: Final = 60.0
HOUR_S: Final = 3600.0
# keys whose integers are identifiers or positions, not amounts: no thousands separators
_PLAIN_INT_SUFFIXES: Final = ("index", "seq", "seed", "line", "seqs", "port", "id")
UNIT_SUFFIXES: Final = {"_ns": "ns", "_ms": "ms", "_s": "s"}
NONE: Final = "\u2013"  # an en dash: no value
DASH: Final = "\u2013"  # between the ends of a range
MINUS: Final = "\u2212"


def duration(seconds: float | None) -> str:
    """``seconds`` in the unit that fits: "1 h 5 min", "2 min 5 s", "2.1 s", "850 ms",
    "1.5 ms", "3 µs", "250 ns"; "0 s" for zero, NONE for None or not a number."""
    if seconds is None or not math.isfinite(seconds):
        return NONE
    if seconds < 0:
        return MINUS + duration(-seconds)
    if seconds == 0:
        return "0 s"
    if seconds >= HOUR_S:
        minutes = round(seconds / MINUTE_S)
        return f"{minutes // 60} h {minutes % 60} min"
    if round(seconds, 1) >= MINUTE_S:
        whole = round(seconds)
        return f"{whole // 60} min {whole % 60} s"
    for unit, size in _SMALL_UNITS:
        value = seconds / size
        if value >= 1 or unit == "ns":
            return _scaled(value, unit)
    return _scaled(seconds / 1e-9, "ns")  # unreachable: ns is the last unit


def _scaled(value: float, unit: str) -> str:
    """Seconds and values under 10 with one decimal (trailing .0 dropped), others whole; a
    value that rounds up to 1000 of a sub-second unit is the next unit's 1."""
    if unit != "s" and value >= 10:
        shown = f"{value:.0f}"
    else:
        shown = f"{value:.1f}".removesuffix(".0")
    if unit != "s" and shown == "1000":
        bigger = {"ns": "µs", "µs": "ms", "ms": "s"}[unit]
        return f"1 {bigger}"
    return f"{shown} {unit}"


def ms(value: float | None) -> str:
    """Milliseconds as a duration ("2.1 s", "850 ms")."""
    return duration(None if value is None else value / MS_PER_S)


def count(value: Any) -> str:
    """An integer with thousands separators ("4,676"); anything else as text."""
    if isinstance(value, bool) or not isinstance(value, int):
        return NONE if value is None else str(value)
    return f"{value:,}"


def percent(rate: float | None) -> str:
    """A rate (0..1) as a percentage with the digits that matter: "2.0%", "0.05%", "0%"."""
    if rate is None or not math.isfinite(rate):
        return NONE
    pct = 100 * rate
    if pct == 0:
        return "0%"
    if pct < 0.1:
        return f"{pct:.2g}%"
    return f"{pct:.1f}%"


def number(value: float) -> str:
    """A measurement that has no unit: at most three decimals, separators above 10,000."""
    if not math.isfinite(value):
        return NONE
    if value == int(value):
        return count(int(value))
    return f"{value:,.3f}".rstrip("0").rstrip(".")


def utc(ns: int) -> str:
    """Wall-clock nanoseconds as a UTC date and time to the second."""
    when = dt.datetime.fromtimestamp(ns / NS_PER_S, tz=dt.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def since(ns: int, t0_ns: int | None) -> str:
    """Wall-clock ``ns`` as the time since ``t0_ns`` ("12.3 s"); a UTC time of day to the
    millisecond when there is no ``t0_ns``."""
    if t0_ns is None:
        when = dt.datetime.fromtimestamp(ns / NS_PER_S, tz=dt.UTC)
        return when.strftime("%H:%M:%S.%f")[:-3] + " UTC"
    return at((ns - t0_ns) / NS_PER_S)


def at(seconds: float | None) -> str:
    """A moment given in seconds since the run's first operation, as "12.3 s" ("0.35 s"
    under a second: a moment, not a duration, so no unit change)."""
    if seconds is None or not math.isfinite(seconds):
        return NONE
    if abs(seconds) >= MINUTE_S:
        return duration(seconds)
    if abs(seconds) < 1:
        return f"{seconds:.2f} s"
    return f"{seconds:.1f} s"


def unit_of(key: str) -> str | None:
    """The unit a key's suffix names (``lag_ms`` -> "ms"), or None."""
    for suffix, unit in UNIT_SUFFIXES.items():
        if key.endswith(suffix):
            return unit
    return None


def label(key: str) -> str:
    """A column or field name for people: unit suffix dropped, underscores as spaces
    (``lag_ms p99`` -> "lag p99", ``started_ns`` -> "started")."""
    words = []
    for word in key.split(" "):
        for suffix in UNIT_SUFFIXES:
            if word.endswith(suffix) and len(word) > len(suffix):
                word = word[: -len(suffix)]
                break
        words.append(word.replace("_", " "))
    return " ".join(words)


def value(key: str, v: Any, t0_ns: int | None = None) -> str:
    """``v`` formatted by what its key says it is: ``*_ns`` wall clocks as times since
    ``t0_ns`` (durations when small), ``*_ms`` and ``*_s`` as durations, ``*rate`` as
    percentages, counts with separators, identifiers plain. Not HTML-escaped."""
    if v is None:
        return NONE
    if isinstance(v, bool):
        return "yes" if v else "no"
    words = key.split(" ")
    last = words[-1]
    unit = next((u for u in map(unit_of, reversed(words)) if u), None)
    if isinstance(v, (int, float)):
        if unit == "ns":
            if abs(v) >= EPOCH_NS_MIN:
                return since(int(v), t0_ns)
            return duration(v / NS_PER_S)
        if unit == "ms":
            return ms(float(v))
        if unit == "s":
            return duration(float(v))
        if last.endswith("rate"):
            return percent(float(v))
        if isinstance(v, int) and last.endswith(_PLAIN_INT_SUFFIXES):
            return str(v)
        return number(float(v)) if isinstance(v, float) else count(v)
    return str(v)


RUN_LABEL_CHARS: Final = 40


def run_names(runs: Iterable[str]) -> dict[str, str]:
    """Each run directory by its last part (``/tmp/runs/kill`` -> ``kill``), or by the shortest
    tail of its path that tells it from the others when two end alike; long ones cut to
    RUN_LABEL_CHARS from the left."""
    paths = sorted(set(runs))
    out: dict[str, str] = {}
    for run in paths:
        parts = [p for p in run.split("/") if p] or [run]
        for depth in range(1, len(parts) + 1):
            tail = "/".join(parts[-depth:])
            others = [
                o for o in paths if o != run and (o.rstrip("/").endswith("/" + tail) or o == tail)
            ]
            if not others:
                break
        out[run] = tail if len(tail) <= RUN_LABEL_CHARS else "…" + tail[-(RUN_LABEL_CHARS - 1) :]
    return out
