"""The analysis report's three plots, as PNG bytes drawn with matplotlib's Agg canvas (no
display, no pyplot global state), from the small aggregated frames of spark/staleness.py:

* **stale reads over time**, one panel per run: how many reads were stale in each time bin
  (Direct Get and MSG.GET stacked, integer counts, totals in the legend) over how many reads
  there were (grey, right axis); each fault window shaded and labelled with its nemesis, its
  targets and when it ran;
* **lag of stale reads per serving node**: histograms of the lag in sequences (integer bins,
  integer ticks) and in time (bins of a round width, ticks in human units);
* **apply lag per node over time**, one panel per run: each node's worst lag behind the first
  replica per bucket, fault windows shaded and labelled.

A frame that is missing or empty draws a plot that says so, so the page always has its three
images. Bins are whole multiples of the buckets Spark counted in, so every count drawn is a sum
of counted ones.

Must never: run Spark, or draw a number that the frames do not hold.
"""

from __future__ import annotations

import io
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from spark import humanize
from spark.humanize import DASH

Record = dict[str, Any]

PLOTS: Final = (
    ("staleness", "Stale reads over time"),
    ("lag_histograms", "Lag of stale reads, per serving node"),
    ("apply_lag", "Apply lag per node over time"),
)
PLOT_DPI: Final = 100
PLOT_WIDTH_IN: Final = 11.0
RUN_PANEL_HEIGHT_IN: Final = 3.0
HIST_PANEL_HEIGHT_IN: Final = 2.2
HIST_PANEL_WIDTH_IN: Final = 3.2
EMPTY_PLOT_HEIGHT_IN: Final = 1.0
MAX_PLOT_RUNS: Final = 4  # over-time panels (one per run); the rest are named, not drawn
MAX_PLOT_NODES: Final = 8  # histogram columns
DEFAULT_LAG_MS_BIN: Final = 10.0
TARGET_TIME_BINS: Final = 60  # bins across a run in the stale-reads plot, at most about
TARGET_LAG_BINS: Final = 25  # bins across a lag histogram, at most about
MIN_LAG_BINS_SHOWN: Final = 10  # a lag histogram's x axis spans at least this many bins
NICE_STEPS: Final = (1, 2, 5)  # bin widths are these times a power of ten
Y_HEADROOM: Final = 1.35  # room above the highest bar for the fault labels
FAULT_LABEL_LEVELS: Final = (0.97, 0.89, 0.81)  # axes fractions, staggered when labels meet
FAULT_LABEL_PT: Final = 7.5
CHAR_WIDTH_EM: Final = 0.62  # a label's width per character, in font sizes (an estimate)
POINTS_PER_INCH: Final = 72.0
READS_COLOR: Final = "0.55"
KIND_STYLE: Final = {"direct_get": ("tab:blue", "Direct Get"), "msg_get": ("tab:red", "MSG.GET")}
FAULT_COLORS: Final = (
    "tab:orange",
    "tab:purple",
    "tab:green",
    "tab:brown",
    "tab:pink",
    "tab:olive",
)


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PLOT_DPI)
    return buf.getvalue()


def _say(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _empty(ax: Axes, text: str) -> None:
    _say(ax, text)
    ax.set_xticks([])
    ax.set_yticks([])


def _empty_figure(text: str) -> bytes:
    """A short strip saying there is nothing to draw."""
    fig = Figure(figsize=(PLOT_WIDTH_IN, EMPTY_PLOT_HEIGHT_IN))
    ax = fig.subplots()
    _empty(ax, text)
    for side in ax.spines.values():
        side.set_visible(False)
    return _png(fig)


def runs_of(*frames: Sequence[Record]) -> list[str]:
    return sorted({str(r["run"]) for frame in frames for r in frame if "run" in r})


def nice_step(at_least: float, base: float = 1.0) -> float:
    """The smallest ``base`` x (1, 2 or 5) x 10^k that is >= ``at_least`` (and >= ``base``)."""
    if at_least <= base:
        return base
    power = base
    while True:
        for step in NICE_STEPS:
            if step * power >= at_least:
                return step * power
        power *= 10


def integer_axis(axis: Any) -> None:
    axis.set_major_locator(MaxNLocator(integer=True))


# --- fault windows ------------------------------------------------------------------------


def fault_label(window: Mapping[str, Any]) -> str:
    """``kill n1 (leader)``, ``pause n2,n3 (majority)``, ``partition (bridge)``: the nemesis,
    its target nodes and its mode, as far as the window knows them."""
    parts = [str(window.get("fault"))]
    nodes = window.get("nodes")
    if isinstance(nodes, list) and nodes:
        parts.append(",".join(str(n) for n in nodes))
    if window.get("mode"):
        parts.append(f"({window['mode']})")
    return " ".join(parts)


def fault_colors(windows: Sequence[Record]) -> dict[str, str]:
    kinds = sorted({str(w.get("fault")) for w in windows})
    return {k: FAULT_COLORS[i % len(FAULT_COLORS)] for i, k in enumerate(kinds)}


def _spans(windows: Iterable[Record]) -> list[tuple[float, float, Record]]:
    out = []
    for w in windows:
        start, end = w.get("start_s"), w.get("end_s")
        if start is not None and end is not None:
            out.append((float(start), float(end), w))
    return sorted(out, key=lambda s: s[0])


def _shade(ax: Axes, windows: Sequence[Record], colors: Mapping[str, str]) -> None:
    for start, end, w in _spans(windows):
        ax.axvspan(start, end, color=colors[str(w.get("fault"))], alpha=0.16, lw=0)


def _label_faults(ax: Axes, windows: Sequence[Record], colors: Mapping[str, str]) -> None:
    """Each window's label at its start, inside the top of the panel; a label that would run
    into the one before it on a level moves down a level. Call after the x limits are set."""
    left, right = ax.get_xlim()
    fig = ax.get_figure(root=True)
    width_px = ax.get_position().width * fig.get_figwidth() * PLOT_DPI if fig else 1.0
    char_px = CHAR_WIDTH_EM * FAULT_LABEL_PT * PLOT_DPI / POINTS_PER_INCH
    per_char = (right - left) * char_px / max(width_px, 1.0)
    ends = [-math.inf] * len(FAULT_LABEL_LEVELS)
    for start, end, w in _spans(windows):
        text = f"{fault_label(w)}: {humanize.at(start)}{DASH}{humanize.at(end)}"
        level = next(
            (i for i, e in enumerate(ends) if min(start, right - per_char * (len(text) + 1)) >= e),
            None,
        )
        if level is None:
            level = min(range(len(ends)), key=lambda i: ends[i])
        length = per_char * (len(text) + 1)
        x, align = max(start, left), "left"
        if x + length > right:  # near the right edge: end the label there instead
            x, align = right, "right"
        ends[level] = x + length if align == "left" else right
        ax.text(
            x,
            FAULT_LABEL_LEVELS[level],
            text,
            transform=ax.get_xaxis_transform(),
            fontsize=FAULT_LABEL_PT,
            va="top",
            ha=align,
            color=colors[str(w.get("fault"))],
            fontweight="bold",
            clip_on=True,
        )


# --- per-run panels -----------------------------------------------------------------------


def _run_panels(
    timeline: Sequence[Record], windows: Sequence[Record], runs: Sequence[str], empty: str
) -> tuple[Figure, list[tuple[Axes, str, list[Record], list[Record]]]]:
    """A figure with one panel per run (at most MAX_PLOT_RUNS), fault windows shaded; the
    panels that have points, with them and their windows (the others say ``empty``)."""
    shown = list(runs[:MAX_PLOT_RUNS]) or [""]
    fig = Figure(figsize=(PLOT_WIDTH_IN, RUN_PANEL_HEIGHT_IN * len(shown) + 0.5))
    axes = [row[0] for row in fig.subplots(len(shown), 1, squeeze=False)]
    colors = fault_colors(windows)
    panels = []
    for ax, run in zip(axes, shown, strict=True):
        points = [p for p in timeline if p.get("run") == run]
        if not points:
            _empty(ax, empty)
            continue
        mine = [w for w in windows if w.get("run") == run]
        _shade(ax, mine, colors)
        panels.append((ax, run, points, mine))
    return fig, panels


def _finish_panel(
    ax: Axes,
    title: str,
    windows: Sequence[Record],
    colors: Mapping[str, str],
    end_s: float,
    extra: Axes | None = None,
) -> None:
    ax.set_xlim(0, end_s)
    _label_faults(ax, windows, colors)
    ax.set_title(title, fontsize=9, loc="left")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if extra is not None:
        more = extra.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(
        handles,
        labels,
        fontsize=8,
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        ncol=len(handles),
        frameon=False,
        borderaxespad=0.2,
    )


def _finish_run_figure(fig: Figure) -> bytes:
    fig.axes[-1].set_xlabel("time since the run's first operation (s)")
    fig.tight_layout()
    return _png(fig)


def _end_s(points: Sequence[Record], span: Mapping[str, Any] | None, width: float) -> float:
    last = max(float(p["t_s"]) for p in points) + width
    if span and span.get("end_s") is not None:
        return max(float(span["end_s"]), last)
    return last


def _bucket_s(points: Sequence[Record], span: Mapping[str, Any] | None) -> float:
    """The width Spark counted the timeline in: the run's ``bucket_s``, else the smallest gap
    between bucket starts (1 s when there is none)."""
    if span and span.get("bucket_s"):
        return float(span["bucket_s"])
    starts = sorted({float(p["t_s"]) for p in points})
    gaps = [b - a for a, b in itertools.pairwise(starts) if b > a]
    return min(gaps, default=1.0)


def time_bin(points: Sequence[Record], span: Mapping[str, Any] | None) -> float:
    """A whole number of Spark's buckets, wide enough for at most about TARGET_TIME_BINS bins:
    the first round width (1, 2 or 5 x 10^k s) that is such a multiple, else just a multiple."""
    bucket = _bucket_s(points, span)
    wanted = _end_s(points, span, bucket) / TARGET_TIME_BINS
    if wanted <= bucket:
        return bucket
    width = nice_step(wanted, 10.0 ** math.floor(math.log10(bucket)))
    for _ in range(len(NICE_STEPS) * 3):
        k = width / bucket
        if abs(k - round(k)) < 1e-6:
            return bucket * round(k)
        width = nice_step(width * 1.01, 10.0 ** math.floor(math.log10(bucket)))
    return bucket * math.ceil(wanted / bucket)


@dataclass
class Binned:
    """A run's timeline in bins: stale reads per kind and bin, all reads per bin (bins are
    numbered from 0 at the run's first operation), and per kind (stale, reads) in total."""

    stale: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    reads: dict[int, int] = field(default_factory=dict)
    totals: dict[str, tuple[int, int]] = field(default_factory=dict)


def bin_counts(points: Sequence[Record], width: float) -> Binned:
    """``points`` (``kind, t_s, reads, stale``: Spark's buckets) summed into bins of ``width``
    seconds, a whole number of buckets, so each bin's counts are sums of counted ones."""
    out = Binned()
    for p in points:
        b = math.floor(float(p["t_s"]) / width + 1e-9)
        kind = str(p.get("kind"))
        stale, reads = int(p.get("stale") or 0), int(p.get("reads") or 0)
        out.stale[kind][b] = out.stale[kind].get(b, 0) + stale
        out.reads[b] = out.reads.get(b, 0) + reads
        total = out.totals.get(kind, (0, 0))
        out.totals[kind] = (total[0] + stale, total[1] + reads)
    return out


def plot_staleness(
    timeline: Sequence[Record],
    windows: Sequence[Record],
    spans: Mapping[str, Mapping[str, Any]],
) -> bytes:
    """Per run: stale reads per time bin (Direct Get and MSG.GET stacked) over all reads per
    bin (grey, right axis), fault windows shaded and labelled."""
    runs = runs_of(timeline, windows)
    names = humanize.run_names(runs)
    fig, panels = _run_panels(timeline, windows, runs, "no reads recorded")
    colors = fault_colors(windows)
    for ax, run, points, mine in panels:
        width = time_bin(points, spans.get(run))
        binned = bin_counts(points, width)
        bins = sorted(binned.reads)
        bottom = dict.fromkeys(bins, 0)
        for kind, (color, name) in KIND_STYLE.items():
            heights = [binned.stale[kind].get(b, 0) for b in bins]
            n_stale, n_reads = binned.totals.get(kind, (0, 0))
            ax.bar(
                [b * width for b in bins],
                heights,
                width=width * 0.9,
                align="edge",
                bottom=[bottom[b] for b in bins],
                color=color,
                label=f"{name} stale: {n_stale:,} of {n_reads:,} reads",
                zorder=3,
            )
            for b, h in zip(bins, heights, strict=True):
                bottom[b] += h
        reads = binned.reads
        twin = ax.twinx()
        twin.step(
            [b * width for b in bins] + [(bins[-1] + 1) * width],
            [reads[b] for b in bins] + [reads[bins[-1]]],
            where="post",
            color=READS_COLOR,
            lw=1.0,
            label="all reads (right axis)",
        )
        twin.set_ylim(0, max(max(reads.values()), 1) * Y_HEADROOM)
        twin.set_ylabel(f"reads per {humanize.duration(width)}", color=READS_COLOR, fontsize=8)
        twin.tick_params(axis="y", colors=READS_COLOR, labelsize=8)
        integer_axis(twin.yaxis)
        ax.set_zorder(twin.get_zorder() + 1)  # the bars in front of the grey line
        ax.patch.set_visible(False)
        top = max(bottom.values(), default=0)
        ax.set_ylim(0, max(top, 1) * Y_HEADROOM)
        integer_axis(ax.yaxis)
        ax.set_ylabel(f"stale reads per {humanize.duration(width)}", fontsize=9)
        if top == 0:
            _say(ax, "no stale reads")
        _finish_panel(
            ax, names[run], mine, colors, _end_s(points, spans.get(run), width), extra=twin
        )
    return _finish_run_figure(fig)


def plot_apply_lag(
    timeline: Sequence[Record],
    windows: Sequence[Record],
    spans: Mapping[str, Mapping[str, Any]],
) -> bytes:
    """Per run: each node's worst apply lag (behind the first node to apply the same index)
    in each time bucket, fault windows shaded and labelled."""
    empty = "no replica log rows (apply lag needs nodes/*/log.jsonl)"
    runs = runs_of(timeline)
    names = humanize.run_names(runs)
    fig, panels = _run_panels(timeline, windows, runs, empty)
    colors = fault_colors(windows)
    for ax, run, points, mine in panels:
        by_node: dict[str, list[Record]] = defaultdict(list)
        for p in points:
            by_node[str(p.get("node"))].append(p)
        for node, pts in sorted(by_node.items()):
            pts.sort(key=lambda p: p["t_s"])
            worst = max(float(p["max_ms"] or 0) for p in pts)
            ax.plot(
                [float(p["t_s"]) for p in pts],
                [float(p["max_ms"] or 0) for p in pts],
                lw=1.2,
                label=f"{node} (worst {humanize.ms(worst)})",
            )
        ax.set_ylabel("apply lag (worst per bucket)", fontsize=9)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: humanize.ms(v)))
        top = max(float(p["max_ms"] or 0) for p in points)
        ax.set_ylim(0, max(top, 1.0) * Y_HEADROOM)
        span = spans.get(run)
        _finish_panel(ax, names[run], mine, colors, _end_s(points, span, _bucket_s(points, span)))
    return _finish_run_figure(fig)


# --- lag histograms -----------------------------------------------------------------------


def _bars(
    ax: Axes,
    rows: Sequence[Record],
    key: str,
    width: float,
    centred: bool,
) -> float:
    """Counts of ``rows`` in bins of ``width`` (``key`` floored to a multiple of it), one bar
    series per kind side by side; returns the highest bin's upper edge."""
    kinds = [k for k in KIND_STYLE if any(r.get("kind") == k for r in rows)]
    top = 0.0
    for i, kind in enumerate(kinds):
        counts: dict[float, int] = defaultdict(int)
        for r in rows:
            if r.get("kind") == kind:
                counts[math.floor(float(r[key]) / width + 1e-9) * width] += int(r["count"])
        color, name = KIND_STYLE[kind]
        share = 0.8 * width / len(kinds)
        start = (-0.4 * width if centred else 0.1 * width) + i * share
        ax.bar(
            [x + start for x in sorted(counts)],
            [counts[x] for x in sorted(counts)],
            width=share,
            align="edge",
            color=color,
            label=f"{name}: {sum(counts.values()):,}",
        )
        top = max(top, max(counts) + width)
    return top


def seq_histogram(ax: Axes, rows: Sequence[Record]) -> None:
    lags = [int(r["lag_seqs"]) for r in rows]
    lo, hi = min(lags), max(lags)
    width = nice_step((hi - lo + 1) / TARGET_LAG_BINS)
    _bars(ax, rows, "lag_seqs", width, centred=width == 1)
    if width == 1:
        ax.set_xlim(min(lo, 1) - 0.5, max(hi, lo + 4) + 0.5)
        ax.set_xlabel("lag (sequences)", fontsize=8)
    else:
        ax.set_xlabel(f"lag (sequences, bins of {width:g})", fontsize=8)
    integer_axis(ax.xaxis)


def ms_histogram(ax: Axes, rows: Sequence[Record]) -> None:
    base = float(rows[0].get("bin_ms") or DEFAULT_LAG_MS_BIN)  # the bins staleness.py counted
    top = max(float(r["lag_ms"]) for r in rows) + base
    width = nice_step(top / TARGET_LAG_BINS, base)
    right = _bars(ax, rows, "lag_ms", width, centred=False)
    ax.set_xlim(0, max(right + width, width * MIN_LAG_BINS_SHOWN))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: humanize.ms(v)))
    ax.set_xlabel(f"lag behind the missed write's ack (bins of {humanize.ms(width)})", fontsize=8)


def plot_lag_histograms(seqs: Sequence[Record], ms: Sequence[Record]) -> bytes:
    """Per serving node: how far behind its stale reads were, in sequences (top) and in time
    (bottom); Direct Get and MSG.GET bars side by side."""
    nodes = sorted({str(r.get("served_by")) for r in (*seqs, *ms)})[:MAX_PLOT_NODES]
    if not nodes:
        return _empty_figure("no stale reads: no lag to show")
    cols = len(nodes)
    fig = Figure(figsize=(max(PLOT_WIDTH_IN, HIST_PANEL_WIDTH_IN * cols), 2 * HIST_PANEL_HEIGHT_IN))
    axes = fig.subplots(2, cols, squeeze=False)
    for col, node in enumerate(nodes):
        for row, (frame, key, draw) in enumerate(
            ((seqs, "lag_seqs", seq_histogram), (ms, "lag_ms", ms_histogram))
        ):
            ax = axes[row][col]
            mine = [r for r in frame if str(r.get("served_by")) == node and r.get(key) is not None]
            if not mine:
                _empty(ax, "none")
                continue
            draw(ax, mine)
            integer_axis(ax.yaxis)
            ax.tick_params(labelsize=7)
            if col == 0:
                ax.set_ylabel("stale reads", fontsize=8)
            if row == 0:
                ax.set_title(f"served by {node}", fontsize=9)
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return _png(fig)


def render_plots(frames: Mapping[str, Sequence[Record]]) -> dict[str, bytes]:
    """The three PNGs, keyed as in PLOTS."""
    windows = frames.get("fault_windows", [])
    spans = {str(s["run"]): s for s in frames.get("run_spans", []) if "run" in s}
    return {
        "staleness": plot_staleness(frames.get("staleness_timeline", []), windows, spans),
        "lag_histograms": plot_lag_histograms(
            frames.get("lag_seqs_counts", []), frames.get("lag_ms_counts", [])
        ),
        "apply_lag": plot_apply_lag(frames.get("apply_lag_timeline", []), windows, spans),
    }
