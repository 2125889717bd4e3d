"""The analysis report: ``report.json`` (every number) and ``report.html`` (what a person reads).

``write_report(out_dir, results, frames)`` writes both files into ``out_dir`` and returns their
paths. ``results`` is the job's nested dict of numbers (JSON-able after cleaning: NaN and
infinities become null, tuples lists, paths strings); it goes to ``report.json`` unchanged
otherwise, so the JSON round-trips every number. ``frames`` are the small aggregated tables the
plots are drawn from, each a list of dicts (or anything with pandas' ``to_dict("records")``):

* ``staleness_timeline``: ``run, kind, t_s, reads, stale`` (spark/staleness.py);
* ``fault_windows``: ``run, fault, start_s, end_s``;
* ``lag_seqs_counts``: ``kind, served_by, lag_seqs, count``; ``lag_ms_counts``: ``kind,
  served_by, lag_ms`` (bin's lower edge), ``count``;
* ``apply_lag_timeline``: ``run, node, t_s, mean_ms, max_ms``.

The HTML embeds three plots as base64 PNGs drawn with matplotlib's Agg canvas (no display, no
pyplot global state): staleness over time with fault windows shaded, lag histograms per serving
node, apply lag per node over time. A missing frame draws a plot that says so, so the page
always has its three images. Above them a summary states the verdicts (MSG.GET violations must
be 0; Direct Get staleness is measured), below them the staleness breakdowns as tables and every
other section of ``results`` rendered generically, then the whole JSON.

Must never: run Spark (it gets aggregates only), fetch anything (the page is self-contained:
no scripts, fonts or images from elsewhere), or write outside ``out_dir``.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

REPORT_JSON: Final = "report.json"
REPORT_HTML: Final = "report.html"
PLOT_DPI: Final = 100
PLOT_WIDTH_IN: Final = 11.0
RUN_PANEL_HEIGHT_IN: Final = 3.0
HIST_PANEL_HEIGHT_IN: Final = 2.8
HIST_PANEL_WIDTH_IN: Final = 3.2
MAX_PLOT_RUNS: Final = 4  # over-time panels (one per run); the rest are named, not drawn
MAX_PLOT_NODES: Final = 8  # histogram columns
MAX_TABLE_ROWS: Final = 200  # per generic table in the HTML (report.json has everything)
MAX_FRAME_ROWS: Final = 100_000  # rows taken from a frame given as a Spark DataFrame
RUN_LABEL_CHARS: Final = 60
DEFAULT_LAG_MS_BIN: Final = 10.0
Y_HEADROOM: Final = 1.3  # room above the highest point for the legend
MIN_Y_TOP: Final = 1.0  # an all-zero series still gets a visible axis
# staleness.analyze_staleness's result keys (when the job puts them at the top level)
STALENESS_KEYS: Final = frozenset(
    {
        "reads",
        "by_kind",
        "by_node",
        "by_role",
        "by_fault",
        "groups",
        "by_run",
        "msg_get_violations",
        "direct_get_stale_examples",
        "apply_lag",
    }
)

PLOTS: Final = (
    ("staleness", "Stale reads over time"),
    ("lag_histograms", "Lag of stale reads, per serving node"),
    ("apply_lag", "Apply lag per node over time"),
)
KIND_STYLE: Final = {"direct_get": ("tab:blue", "Direct Get"), "msg_get": ("tab:red", "MSG.GET")}
FAULT_COLORS: Final = (
    "tab:orange",
    "tab:purple",
    "tab:green",
    "tab:brown",
    "tab:pink",
    "tab:olive",
)

Record = dict[str, Any]


# --- cleaning -----------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """``value`` with only JSON types: NaN/inf -> None, numpy scalars -> Python numbers, Spark
    Rows -> dicts, tuples/sets -> lists, paths and datetimes -> strings, keys -> strings."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "asDict"):  # a Spark Row (a tuple subclass: test before tuples)
        return jsonable(value.asDict(recursive=True))
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [jsonable(v) for v in sorted(value, key=str)]
    if isinstance(value, (Path, dt.datetime, dt.date)):
        return str(value)
    if hasattr(value, "item"):  # numpy scalar
        return jsonable(value.item())
    if hasattr(value, "tolist"):  # numpy array
        return jsonable(value.tolist())
    return str(value)


def records(frame: Any) -> list[Record]:
    """A frame as a list of dicts: a list of dicts/Rows, a pandas DataFrame, or (bounded) a
    Spark DataFrame."""
    if frame is None:
        return []
    if hasattr(frame, "to_dict"):
        rows = frame.to_dict("records")
    elif hasattr(frame, "collect") and hasattr(frame, "limit"):
        rows = frame.limit(MAX_FRAME_ROWS).collect()
    else:
        rows = list(frame)
    return [r for r in (jsonable(row) for row in rows) if isinstance(r, dict)]


# --- plots --------------------------------------------------------------------------------


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=PLOT_DPI)
    return buf.getvalue()


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _short(run: str) -> str:
    return run if len(run) <= RUN_LABEL_CHARS else "…" + run[-(RUN_LABEL_CHARS - 1) :]


def _runs(*frames: Sequence[Record]) -> list[str]:
    return sorted({str(r["run"]) for frame in frames for r in frame if "run" in r})


def _fault_colors(windows: Sequence[Record]) -> dict[str, str]:
    kinds = sorted({str(w.get("fault")) for w in windows})
    return {k: FAULT_COLORS[i % len(FAULT_COLORS)] for i, k in enumerate(kinds)}


def _shade(ax: Axes, windows: Iterable[Record], colors: Mapping[str, str]) -> None:
    labelled: set[str] = set()
    for w in windows:
        fault = str(w.get("fault"))
        start, end = w.get("start_s"), w.get("end_s")
        if start is None or end is None:
            continue
        label = f"fault: {fault}" if fault not in labelled else None
        labelled.add(fault)
        ax.axvspan(float(start), float(end), color=colors[fault], alpha=0.18, label=label, lw=0)


def _headroom(ax: Axes, top: float) -> None:
    """y from 0 to a little above the highest point, so the legend and lines stay apart."""
    ax.set_ylim(0, max(top, MIN_Y_TOP) * Y_HEADROOM)


def _run_axes(fig: Figure, runs: Sequence[str]) -> list[Axes]:
    shown = runs[:MAX_PLOT_RUNS] or [""]
    axes = fig.subplots(len(shown), 1, squeeze=False, sharex=False)
    return [row[0] for row in axes]


def _run_panels(
    timeline: Sequence[Record], windows: Sequence[Record], runs: Sequence[str], empty: str
) -> tuple[Figure, list[tuple[Axes, str, list[Record]]]]:
    """A figure with one panel per run (at most MAX_PLOT_RUNS), fault windows shaded; the
    panels that have points, with them (the others say ``empty``)."""
    shown = runs[:MAX_PLOT_RUNS] or [""]
    fig = Figure(figsize=(PLOT_WIDTH_IN, RUN_PANEL_HEIGHT_IN * len(shown) + 0.6))
    colors = _fault_colors(windows)
    panels: list[tuple[Axes, str, list[Record]]] = []
    for ax, run in zip(_run_axes(fig, runs), shown, strict=True):
        points = [p for p in timeline if p.get("run") == run]
        if not points:
            _empty(ax, empty)
            continue
        _shade(ax, (w for w in windows if w.get("run") == run), colors)
        panels.append((ax, run, points))
    return fig, panels


def _finish_panel(ax: Axes, run: str) -> None:
    ax.set_title(f"run {_short(run)}", fontsize=9, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")


def _finish_run_figure(fig: Figure, title: str) -> bytes:
    fig.axes[-1].set_xlabel("time since the run's first operation (s)")
    fig.suptitle(title)
    fig.tight_layout()
    return _png(fig)


def plot_staleness(timeline: Sequence[Record], windows: Sequence[Record]) -> bytes:
    """Per run: the share of reads that were stale in each time bucket (%), Direct Get and
    MSG.GET, with fault windows shaded."""
    fig, panels = _run_panels(timeline, windows, _runs(timeline, windows), "no reads recorded")
    for ax, run, points in panels:
        for kind, (color, label) in KIND_STYLE.items():
            pts = sorted((p for p in points if p.get("kind") == kind), key=lambda p: p["t_s"])
            if not pts:
                continue
            xs = [float(p["t_s"]) for p in pts]
            ys = [100.0 * (p["stale"] or 0) / p["reads"] if p["reads"] else 0.0 for p in pts]
            stale = sum(p["stale"] or 0 for p in pts)
            reads = sum(p["reads"] or 0 for p in pts)
            ax.step(
                xs,
                ys,
                where="post",
                color=color,
                lw=1.4,
                label=f"{label}: {stale} stale of {reads}",
            )
        ax.set_ylabel("stale reads (%)")
        rates = [100.0 * (p["stale"] or 0) / p["reads"] for p in points if p["reads"]]
        _headroom(ax, max(rates, default=0.0))
        _finish_panel(ax, run)
    return _finish_run_figure(fig, "Stale reads over time (shaded: fault windows)")


def plot_lag_histograms(seqs: Sequence[Record], ms: Sequence[Record]) -> bytes:
    """Per serving node: how far behind its stale reads were, in sequences (top) and in ms
    (bottom); Direct Get and MSG.GET bars side by side."""
    nodes = sorted({str(r.get("served_by")) for r in (*seqs, *ms)})[:MAX_PLOT_NODES]
    cols = max(1, len(nodes))
    fig = Figure(figsize=(max(PLOT_WIDTH_IN, HIST_PANEL_WIDTH_IN * cols), 2 * HIST_PANEL_HEIGHT_IN))
    axes = fig.subplots(2, cols, squeeze=False)
    if not nodes:
        for ax in axes[:, 0]:
            _empty(ax, "no stale reads")
        for ax in axes[0, 1:]:
            ax.set_visible(False)
    for col, node in enumerate(nodes):
        for row, (frame, key, unit) in enumerate(
            ((seqs, "lag_seqs", "sequences"), (ms, "lag_ms", "ms"))
        ):
            ax = axes[row][col]
            mine = [r for r in frame if str(r.get("served_by")) == node and r.get(key) is not None]
            if not mine:
                _empty(ax, "none")
                continue
            kinds = [k for k in KIND_STYLE if any(r.get("kind") == k for r in mine)]
            width = _bar_width(mine, key)
            for i, kind in enumerate(kinds):
                color, label = KIND_STYLE[kind]
                xs = [float(r[key]) for r in mine if r.get("kind") == kind]
                hs = [int(r["count"]) for r in mine if r.get("kind") == kind]
                offset = width * (i - (len(kinds) - 1) / 2) / len(kinds)
                ax.bar(
                    [x + offset + (width / 2 if key == "lag_ms" else 0) for x in xs],
                    hs,
                    width=width / len(kinds),
                    color=color,
                    label=label,
                )
            ax.set_xlabel(f"lag ({unit})", fontsize=8)
            ax.tick_params(labelsize=7)
            if col == 0:
                ax.set_ylabel("stale reads")
            if row == 0:
                ax.set_title(f"served by {node}", fontsize=9)
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Lag of stale reads per serving node (top: sequences, bottom: ms)")
    fig.tight_layout()
    return _png(fig)


def _bar_width(rows: Sequence[Record], key: str) -> float:
    if key == "lag_ms":  # the bins staleness.py counted in
        return float(rows[0].get("bin_ms") or DEFAULT_LAG_MS_BIN)
    xs = [float(r[key]) for r in rows]
    return 0.8 if len(set(xs)) < 2 else max(0.8, (max(xs) - min(xs)) / 60)


def plot_apply_lag(timeline: Sequence[Record], windows: Sequence[Record]) -> bytes:
    """Per run: each node's worst apply lag (ms behind the first node to apply the same
    index) in each time bucket, with fault windows shaded."""
    empty = "no replica log rows (apply lag needs nodes/*/log.jsonl)"
    fig, panels = _run_panels(timeline, windows, _runs(timeline), empty)
    for ax, run, points in panels:
        by_node: dict[str, list[Record]] = defaultdict(list)
        for p in points:
            by_node[str(p.get("node"))].append(p)
        for node, pts in sorted(by_node.items()):
            pts.sort(key=lambda p: p["t_s"])
            ax.plot(
                [float(p["t_s"]) for p in pts],
                [float(p["max_ms"] or 0) for p in pts],
                lw=1.2,
                label=f"{node} (max {max(float(p['max_ms'] or 0) for p in pts):.0f} ms)",
            )
        ax.set_ylabel("apply lag, max (ms)")
        _headroom(ax, max(float(p["max_ms"] or 0) for p in points))
        _finish_panel(ax, run)
    return _finish_run_figure(
        fig, "Apply lag per node: behind the first replica to apply each entry"
    )


def render_plots(frames: Mapping[str, Sequence[Record]]) -> dict[str, bytes]:
    """The three PNGs, keyed as in PLOTS."""
    windows = frames.get("fault_windows", [])
    return {
        "staleness": plot_staleness(frames.get("staleness_timeline", []), windows),
        "lag_histograms": plot_lag_histograms(
            frames.get("lag_seqs_counts", []), frames.get("lag_ms_counts", [])
        ),
        "apply_lag": plot_apply_lag(frames.get("apply_lag_timeline", []), windows),
    }


# --- HTML ---------------------------------------------------------------------------------

CSS: Final = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .5em 0; font-size: .85em; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
th { background: #f0f0f0; } td.k, th.k { text-align: left; }
.verdict { padding: .6em 1em; margin: .4em 0; border-radius: 4px; }
.ok { background: #e6f4ea; } .bad { background: #fde7e7; } .info { background: #eef3fb; }
img { max-width: 100%; border: 1px solid #ddd; } figcaption { font-size: .85em; color: #555; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: .8em; }
"""

CAPTIONS: Final = {
    "staleness": "Share of the reads invoked in each time bucket that were stale: they missed a "
    "write acknowledged before they began. Direct Get staleness is expected (any replica "
    "answers); MSG.GET must stay at zero. Shaded: fault windows from the nemesis.",
    "lag_histograms": "For the stale reads answered by each node: how many sequences behind the "
    "newest acknowledged write they were, and how long (ms) before the read that write had "
    "been acknowledged.",
    "apply_lag": "For each log index, how long after the first replica each node applied it "
    "(worst per time bucket). Spikes line up with faults; a node that stops appearing was down.",
}


def _esc(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if value is None:
        return "&ndash;"
    return html.escape(str(value))


def _table(rows: Sequence[Mapping[str, Any]], limit: int = MAX_TABLE_ROWS) -> str:
    if not rows:
        return "<p><i>none</i></p>"
    flat = [_flatten(r) for r in rows[:limit]]
    cols: list[str] = []
    for r in flat:
        cols += [c for c in r if c not in cols]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{_esc(r.get(c))}</td>" for c in cols) + "</tr>" for r in flat
    )
    more = (
        f"<p><i>{len(rows) - limit} more rows in report.json</i></p>" if len(rows) > limit else ""
    )
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def _flatten(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + " "))
        elif isinstance(v, list):
            out[key] = json.dumps(v) if len(json.dumps(v)) < 80 else f"[{len(v)} items]"
        else:
            out[key] = v
    return out


def _generic(value: Any, depth: int = 0) -> str:
    """A results section as HTML: scalars in a key/value table, lists of dicts as tables."""
    if isinstance(value, list):
        if all(isinstance(v, Mapping) for v in value):
            return _table(value)
        return f"<p>{_esc(json.dumps(value)[:2000])}</p>"
    if not isinstance(value, Mapping):
        return f"<p>{_esc(value)}</p>"
    scalars = {k: v for k, v in value.items() if not isinstance(v, (Mapping, list))}
    parts = []
    if scalars:
        rows = "".join(
            f"<tr><td class='k'>{html.escape(str(k))}</td><td>{_esc(v)}</td></tr>"
            for k, v in scalars.items()
        )
        parts.append(f"<table>{rows}</table>")
    for k, v in value.items():
        if isinstance(v, (Mapping, list)):
            level = min(3 + depth, 6)
            parts.append(f"<h{level}>{html.escape(str(k))}</h{level}>{_generic(v, depth + 1)}")
    return "".join(parts)


def find_staleness(results: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The staleness results, at the top level or under ``staleness``."""
    if "by_kind" in results and "msg_get_violations" in results:
        return results
    inner = results.get("staleness")
    return inner if isinstance(inner, Mapping) and "by_kind" in inner else None


def _job_verdict(results: Mapping[str, Any]) -> str:
    """The job's overall verdict (``verdict``: valid, findings, by_check), when it has one."""
    v = results.get("verdict")
    if not isinstance(v, Mapping) or "valid" not in v:
        return ""
    if v.get("valid"):
        return "<p class='verdict ok'><b>VALID: no findings in any check</b></p>"
    checks = v.get("by_check") or {}
    found = ", ".join(f"{html.escape(str(k))} {_esc(n)}" for k, n in checks.items() if n)
    return (
        f"<p class='verdict bad'><b>INVALID: {_esc(v.get('findings'))} finding(s)</b>: {found}</p>"
    )


def _verdicts(st: Mapping[str, Any] | None) -> str:
    if st is None:
        return "<p class='verdict info'>No read-after-write results in this report.</p>"
    parts = []
    violations = st.get("msg_get_violations", {}).get("count", 0)
    msg = st.get("by_kind", {}).get("msg_get", {})
    cls = "ok" if violations == 0 else "bad"
    word = "PASS" if violations == 0 else "FAIL"
    parts.append(
        f"<p class='verdict {cls}'><b>{word}: MSG.GET stale reads = {violations}</b> "
        f"(of {msg.get('reads', 0)} MSG.GET reads; the leader path must never be stale)</p>"
    )
    dg = st.get("by_kind", {}).get("direct_get", {})
    lag = dg.get("lag_ms", {})
    parts.append(
        f"<p class='verdict info'><b>Direct Get: {dg.get('stale', 0)} stale of "
        f"{dg.get('reads', 0)} reads ({100 * (dg.get('stale_rate') or 0):.2f}%)</b>; "
        f"lag p50 {_esc(lag.get('p50'))} ms, p99 {_esc(lag.get('p99'))} ms, max "
        f"{_esc(lag.get('max'))} ms (expected: any replica may answer, ADR-31)</p>"
    )
    return "".join(parts)


def _staleness_tables(st: Mapping[str, Any] | None) -> str:
    if st is None:
        return ""
    parts = ["<h2>Read-after-write staleness</h2>"]
    for key, title in (
        ("by_node", "Per serving node"),
        ("by_role", "Per role of the serving node (leaders.jsonl sample before the read)"),
        ("by_fault", "Per fault period"),
        ("groups", "Per node &times; role &times; fault"),
    ):
        parts.append(f"<h3>{title}</h3>{_table(st.get(key, []))}")
    parts.append(
        f"<h3>Stale MSG.GET reads (violations)</h3>"
        f"{_table(st.get('msg_get_violations', {}).get('examples', []))}"
    )
    parts.append(
        f"<h3>Largest Direct Get lags</h3>{_table(st.get('direct_get_stale_examples', []))}"
    )
    if st.get("apply_lag"):
        parts.append(f"<h3>Apply lag per node</h3>{_table(st['apply_lag'])}")
    return "".join(parts)


def render_html(results: Mapping[str, Any], plots: Mapping[str, bytes]) -> str:
    st = find_staleness(results)
    figures = "".join(
        f"<figure><img alt='{html.escape(title)}' src='data:image/png;base64,"
        f"{base64.b64encode(plots[key]).decode('ascii')}'>"
        f"<figcaption><b>{html.escape(title)}.</b> {html.escape(CAPTIONS[key])}</figcaption>"
        f"</figure>"
        for key, title in PLOTS
        if key in plots
    )
    others = "".join(
        f"<h2>{html.escape(str(k))}</h2>{_generic(v)}"
        for k, v in results.items()
        if st is None or (v is not st and not (st is results and k in STALENESS_KEYS))
    )
    full = html.escape(json.dumps(results, indent=2))
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>jetraft analysis</title><style>{CSS}</style></head><body>"
        "<h1>jetraft analysis</h1>"
        f"{_job_verdict(results)}{_verdicts(st)}<h2>Plots</h2>{figures}{_staleness_tables(st)}{others}"
        f"<h2>Every number</h2><details><summary>report.json</summary><pre>{full}</pre>"
        "</details></body></html>\n"
    )


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_report(
    out_dir: Path, results: Mapping[str, Any], frames: Mapping[str, Any]
) -> tuple[Path, Path]:
    """Writes ``report.json`` and ``report.html`` into ``out_dir`` (created if missing) and
    returns (json path, html path)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    clean = jsonable(results)
    json_path, html_path = out_dir / REPORT_JSON, out_dir / REPORT_HTML
    _write(json_path, json.dumps(clean, indent=2, allow_nan=False) + "\n")
    plots = render_plots({k: records(v) for k, v in frames.items()})
    _write(html_path, render_html(clean, plots))
    return json_path, html_path
