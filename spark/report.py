"""The analysis report: ``report.json`` (every number) and ``report.html`` (what a person reads).

``write_report(out_dir, results, frames)`` writes both files into ``out_dir`` and returns their
paths. ``results`` is the job's nested dict of numbers (JSON-able after cleaning: NaN and
infinities become null, tuples lists, paths strings); it goes to ``report.json`` unchanged
otherwise, so the JSON round-trips every number. ``frames`` are the small aggregated tables the
plots are drawn from, each a list of dicts (or anything with pandas' ``to_dict("records")``):

* ``staleness_timeline``: ``run, kind, t_s, reads, stale`` (spark/staleness.py);
* ``fault_windows``: ``run, fault, start_s, end_s`` (+ ``mode``, ``nodes``: the targets);
* ``run_spans``: ``run, t0_ns, end_s, bucket_s`` (``t0_ns``: the first operation, which every
  time in the page counts from);
* ``lag_seqs_counts``: ``kind, served_by, lag_seqs, count``; ``lag_ms_counts``: ``kind,
  served_by, lag_ms`` (bin's lower edge), ``count``;
* ``apply_lag_timeline``: ``run, node, t_s, mean_ms, max_ms``.

The page, top to bottom: the runs analysed; the verdict; the **findings** in plain words (what
was checked, what was found, how bad, where to look: failed checks first, then stale Direct
Gets, apply lag and what the analysis could not judge); one line per **check** with its
verdict; the fault windows; then a section per stage (stale reads with their plots
(spark/report_plots.py) and tables, apply lag, replica agreement, writes, counters, consumers),
each a short summary with its raw numbers collapsed in ``<details>``; the run metadata and the
whole JSON last, collapsed. Times are durations in the unit that fits and moments as the time
since the run's first operation (spark/humanize.py); tables sit in containers that scroll
sideways rather than widen the page. Every sentence is derived from ``results`` and ``frames``;
a section of ``results`` the page does not know is still rendered, generically.

Must never: run Spark (it gets aggregates only), fetch anything (the page is self-contained:
no scripts, fonts or images from elsewhere), or write outside ``out_dir``.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from spark import humanize as hz
from spark.humanize import DASH, NONE
from spark.report_plots import PLOTS, fault_label, render_plots

__all__ = ["PLOTS", "REPORT_HTML", "REPORT_JSON", "jsonable", "records", "write_report"]

REPORT_JSON: Final = "report.json"
REPORT_HTML: Final = "report.html"
MAX_TABLE_ROWS: Final = 200  # per table in the HTML (report.json has everything)
MAX_FRAME_ROWS: Final = 100_000  # rows taken from a frame given as a Spark DataFrame
MAX_LISTED: Final = 5  # moments or nodes named in one sentence
MAX_CELL_CHARS: Final = 300  # a list in a table cell, beyond which report.json has the rest
MAX_EXAMPLE_FIELDS: Final = 8  # fields of the first example quoted in a finding
SMALL_TABLE_ROWS: Final = 12  # a section's table shown open up to this many rows
EMPTY_NOISE: Final = frozenset({"examples", "first"})  # lists not shown when empty

Record = dict[str, Any]
Html = str
SEP: Final = " \u203a "  # between the keys of a nested field

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
KIND_NAMES: Final = {"direct_get": "Direct Get", "msg_get": "MSG.GET"}
OUTCOME_WORDS: Final = {
    "ok": "acknowledged",
    "fail": "refused",
    "info": "of unknown outcome",
    "none": "never completed",
}


@dataclass(frozen=True)
class Check:
    """One count of the verdict: its name for people, what passing means, what a finding is,
    the section to look in, and where in ``results`` its examples are."""

    title: str
    passes_when: str
    finding: str
    section: str
    examples: tuple[tuple[str, ...], ...] = ()


CHECKS: Final = {
    "replay_mismatch": Check(
        "Replay",
        "replaying each node's log through the engine gives the digests the node reported",
        "log entries whose replayed digest differs from the one the node reported",
        "agreement",
        (("agreement", "replay"),),
    ),
    "split_brain": Check(
        "Split brain",
        "nodes that reported a digest for one index agree on it",
        "indexes where nodes reported different digests",
        "agreement",
        (("agreement", "split_brain"),),
    ),
    "entry_divergence": Check(
        "Entry divergence",
        "no two nodes logged different entries at one index",
        "indexes holding different entries on different nodes",
        "agreement",
        (("agreement", "entry_divergence"),),
    ),
    "lone_entry": Check(
        "Lone entries",
        "no node logged an entry at an index the other nodes' logs skip",
        "entries at indexes the other nodes' logs skip",
        "agreement",
        (("agreement", "lone_entries"),),
    ),
    "lost": Check(
        "Lost writes",
        "every acknowledged write is in some node's final state, or a logged removal explains it",
        "acknowledged writes on no node that no removal explains",
        "writes",
        (("writes", "lost"),),
    ),
    "ack_mismatch": Check(
        "Acknowledged sequences",
        "each acknowledged sequence holds the message it was acknowledged for",
        "acknowledged sequences holding another message",
        "writes",
        (("writes", "ack_mismatch"),),
    ),
    "phantom": Check(
        "Phantom messages",
        "every stored message was published and not refused",
        "stored messages never published, refused, or without an id",
        "writes",
        (("writes", "phantom"),),
    ),
    "duplicate": Check(
        "Duplicates",
        "no message is stored at two sequences",
        "messages stored twice",
        "writes",
        (("writes", "duplicate"),),
    ),
    "batches": Check(
        "Atomic batches",
        "batches are stored whole and contiguous, abandoned ones not at all",
        "batches stored in part, out of order, or although abandoned",
        "writes",
        (("writes", "batches"),),
    ),
    "premature_expiry": Check(
        "Expiry deadlines",
        "no message expires before its TTL or max_age deadline",
        "messages expired before their deadline",
        "writes",
        (("writes", "premature_expiry"),),
    ),
    "served_after_expiry": Check(
        "Reads after expiry",
        "no node serves a message after it applied the message's expiry",
        "reads served by a node that had already expired the message",
        "writes",
        (("writes", "served_after_expiry"),),
    ),
    "stale_msg_get": Check(
        "MSG.GET freshness",
        "a MSG.GET (answered by the stream leader) never misses an acknowledged write",
        "MSG.GET reads that missed a write acknowledged before they began",
        "staleness",
        (("staleness", "msg_get_violations"), ("msg_get_violations",)),
    ),
    "counter": Check(
        "Counters",
        "counter totals match the acknowledged increments, every counter was read, no seq "
        "acknowledged twice",
        "counter findings (wrong or unread totals, seqs acknowledged twice)",
        "counters",
        tuple(("counters", k) for k in ("final_total", "unread", "acked_total", "seq_shared")),
    ),
}

SECTION_TITLES: Final = {
    "staleness": "Stale reads",
    "apply-lag": "Apply lag",
    "agreement": "Replica agreement",
    "writes": "Writes",
    "counters": "Counters",
    "consumers": "Consumers",
}

CAPTIONS: Final = {
    "staleness": "Bars: how many reads in each time bin were stale, i.e. returned an older "
    "message (or none) although a newer write had been acknowledged before the read began "
    "(legend: totals). Grey line, right axis: all reads judged in the bin. Shaded and labelled: "
    "the fault windows (nemesis, targets, from\u2013to). Direct Get staleness is expected (any "
    "replica may answer); MSG.GET must stay at zero.",
    "lag_histograms": "For the stale reads answered by each node: how many sequences behind the "
    "write they owed they were (top), and how long before the read that write had been "
    "acknowledged (bottom).",
    "apply_lag": "For each log index, how long after the first replica each node applied it "
    "(worst per time bucket), fault windows shaded and labelled. Spikes line up with faults; a "
    "node whose line stops was down.",
}

CSS: Final = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto;
  max-width: 1140px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; margin-bottom: .2em; } .sub { color: #555; margin-top: 0; }
h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.02em; margin-top: 1.3em; } h4, h5, h6 { font-size: .95em; margin: 1em 0 .3em; }
.tbl { overflow-x: auto; max-width: 100%; margin: .4em 0 .8em; }
table { border-collapse: collapse; font-size: .85em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f3f3f3; font-weight: 600; }
td.t, th.t { text-align: left; } td.t { overflow-wrap: break-word; }
td.wide { max-width: 32em; overflow-wrap: anywhere; }
.verdict { padding: .7em 1em; margin: .6em 0; border-radius: 6px; font-size: 1.1em; }
.ok { background: #e6f4ea; } .bad { background: #fde7e7; } .warn { background: #fff4d6; }
.info { background: #eef3fb; }
ul.findings { list-style: none; padding: 0; }
ul.findings li { margin: .45em 0; padding: .5em .8em; border-left: 5px solid; border-radius: 3px; }
li.bad { border-color: #c62828; } li.warn { border-color: #e0a100; }
li.ok { border-color: #2e7d32; } li.info { border-color: #5b7fc7; }
.badge { display: inline-block; min-width: 4.2em; text-align: center; border-radius: 3px;
  padding: 0 .4em; font-size: .85em; font-weight: 600; }
.badge.ok { background: #d4edda; color: #1b5e20; } .badge.bad { background: #c62828; color: #fff; }
.badge.info { background: #dde6f7; color: #234; }
table.checks td, table.checks th { text-align: left; } table.checks td { padding: 2px 8px; }
table.checks td:nth-child(-n+3) { white-space: nowrap; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #e3e3e3; }
figcaption { font-size: .85em; color: #555; }
details { margin: .5em 0; } summary { cursor: pointer; color: #234; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: .8em; max-height: 40em; }
.muted { color: #666; }
"""


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


# --- what the page knows about the runs ---------------------------------------------------


def _get(tree: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(tree, Mapping):
            return None
        tree = tree.get(key)
    return tree


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


@dataclass
class View:
    """``results`` and ``frames`` with what every part of the page needs: each run's short
    name and time origin, the fault windows, the staleness section wherever it sits."""

    results: Mapping[str, Any]
    frames: Mapping[str, Sequence[Record]]
    st: Mapping[str, Any] | None = None
    names: dict[str, str] = field(default_factory=dict)
    t0: dict[str, int] = field(default_factory=dict)
    windows: list[Record] = field(default_factory=list)

    @classmethod
    def of(cls, results: Mapping[str, Any], frames: Mapping[str, Sequence[Record]]) -> View:
        view = cls(results, frames, find_staleness(results))
        runs = {str(r["run"]) for r in _run_meta(results) if r.get("run")}
        for frame in frames.values():
            runs |= {str(r["run"]) for r in frame if r.get("run")}
        view.names = hz.run_names(runs)
        view.t0 = {
            str(s["run"]): int(s["t0_ns"])
            for s in frames.get("run_spans", [])
            if s.get("t0_ns") is not None
        }
        view.windows = sorted(
            frames.get("fault_windows", []),
            key=lambda w: (str(w.get("run")), w.get("start_s") or 0.0),
        )
        return view

    @property
    def several_runs(self) -> bool:
        return len(self.names) > 1

    def origin(self, row: Mapping[str, Any]) -> int | None:
        """The time origin of ``row``'s run (the only run's when the row names none)."""
        run = row.get("run")
        if run is not None:
            return self.t0.get(str(run))
        return next(iter(self.t0.values())) if len(self.t0) == 1 else None

    def fmt(self, key: str, value: Any, row: Mapping[str, Any]) -> str:
        """One value for a table cell or a sentence (not escaped)."""
        if key == "run" and isinstance(value, str):
            return self.names.get(value, value)
        if key == "kind" and isinstance(value, str):
            return KIND_NAMES.get(value, value)
        if isinstance(value, list):
            text = ", ".join(self.fmt(key, v, row) for v in value) if value else "none"
            if len(text) > MAX_CELL_CHARS:
                return f"{text[:MAX_CELL_CHARS]}… ({len(value)} items; all in report.json)"
            return text
        if isinstance(value, Mapping):
            return json.dumps(value)
        return hz.value(key, value, self.origin(row))

    def when(self, row: Mapping[str, Any], ns_key: str = "invoke_ns") -> str:
        """``row``'s moment (its ``ns_key``) since its run's first operation, with the run's
        name when the page has several runs."""
        ns = row.get(ns_key)
        text = hz.since(int(ns), self.origin(row)) if isinstance(ns, int) else NONE
        if self.several_runs and row.get("run") is not None:
            return f"{self.names.get(str(row['run']), row['run'])} @ {text}"
        return text

    def windows_during(self, run: Any, start: float, end: float) -> list[Record]:
        """The fault windows of ``run`` that overlap [start, end] (seconds)."""
        return [
            w
            for w in self.windows
            if w.get("run") == run
            and (w.get("start_s") or 0.0) <= end
            and start <= (w.get("end_s") or 0.0)
        ]

    def bucket_s(self, run: Any) -> float:
        """The width of ``run``'s timeline buckets (0 when unknown)."""
        for s in self.frames.get("run_spans", []):
            if s.get("run") == run and s.get("bucket_s") is not None:
                return float(s["bucket_s"])
        return 0.0


def _run_meta(results: Mapping[str, Any]) -> list[Record]:
    runs = results.get("runs")
    if not isinstance(runs, list):
        return []
    return [dict(r) if isinstance(r, Mapping) else {"run": str(r)} for r in runs]


def find_staleness(results: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The staleness results, at the top level or under ``staleness``."""
    if "by_kind" in results and "msg_get_violations" in results:
        return results
    inner = results.get("staleness")
    return inner if isinstance(inner, Mapping) and "by_kind" in inner else None


# --- HTML helpers -------------------------------------------------------------------------


def _e(value: Any) -> Html:
    return html.escape(str(value))


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def _link(section: str) -> Html:
    return f"<a href='#{section}'>{_e(SECTION_TITLES.get(section, section))}</a>"


def _listing(items: Sequence[str], limit: int = MAX_LISTED, sep: str = ", ") -> str:
    """``a, b and c``; past ``limit``, the first ones and how many more."""
    if len(items) > limit:
        return sep.join(items[:limit]) + f"{sep}and {len(items) - limit} more"
    if len(items) <= 1:
        return "".join(items)
    return sep.join(items[:-1]) + (f"{sep}and " if sep != ", " else " and ") + items[-1]


def _details(summary: str, body: Html, open_: bool = False) -> Html:
    if not body:
        return ""
    flag = " open" if open_ else ""
    return f"<details{flag}><summary>{_e(summary)}</summary>{body}</details>"


def _is_text(values: Iterable[Any]) -> bool:
    present = [v for v in values if v is not None]
    return bool(present) and all(isinstance(v, (str, list, Mapping)) for v in present)


Getter = Callable[[Mapping[str, Any]], Any]
Column = tuple[str, str, Getter]  # header, key (its suffix gives the unit), cell's value


def col(key: str, header: str | None = None) -> Column:
    """The column showing each row's ``key``, headed ``header`` (the key, for people)."""

    def get(row: Mapping[str, Any]) -> Any:
        return row.get(key)

    return (hz.label(key) if header is None else header, key, get)


def table(
    view: View,
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[Column] | None = None,
    limit: int = MAX_TABLE_ROWS,
) -> Html:
    """Rows as a table in a container that scrolls sideways. ``columns`` (header, key for the
    unit, cell) pick and shape the columns; without them every field is a column, nested
    dicts flattened (``lag_ms p50``) and headers without their unit suffix."""
    if not rows:
        return "<p class='muted'>none</p>"
    shown = [dict(r) for r in rows[:limit]]
    if columns is None:
        flat = [_flatten(r) for r in shown]
        keys: list[str] = []
        for r in flat:
            keys += [k for k in r if k not in keys]
        if not view.several_runs and all(r.get("run") in view.names for r in flat):
            keys = [k for k in keys if k != "run"] or keys  # one run: named at the top
        columns = [col(k) for k in keys]
        shown = flat
    cells = [[(key, get(r), r) for _head, key, get in columns] for r in shown]
    text_cols = [_is_text(row[i][1] for row in cells) for i in range(len(columns))]
    head = "".join(
        f"<th class='{'t' if t else 'n'}'>{_e(h)}</th>"
        for (h, _k, _g), t in zip(columns, text_cols, strict=True)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='{'t' if t else 'n'}'>{_e(view.fmt(key, v, r))}</td>"
            for (key, v, r), t in zip(row, text_cols, strict=True)
        )
        + "</tr>"
        for row in cells
    )
    more = (
        f"<p class='muted'>{len(rows) - limit:,} more rows in report.json</p>"
        if len(rows) > limit
        else ""
    )
    return f"<div class='tbl'><table><tr>{head}</tr>{body}</table></div>{more}"


def _flatten(row: Mapping[str, Any], prefix: str = "") -> Record:
    out: Record = {}
    for k, v in row.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flatten(v, key + " "))
        else:
            out[key] = v
    return out


def generic(view: View, value: Any, key: str = "", depth: int = 0) -> Html:
    """Any results section: its scalars at every depth in one two-column table (nested keys
    joined by SEP), then its lists of dicts as tables under headings; empty ``examples`` and
    ``first`` lists are left out (the counts beside them say it)."""
    if isinstance(value, list):
        if value and all(isinstance(v, Mapping) for v in value):
            return table(view, value)
        return f"<p>{_e(view.fmt(key, value, {}))}</p>"
    if not isinstance(value, Mapping):
        return f"<p>{_e(view.fmt(key, value, {}))}</p>"
    pairs: list[tuple[str, str, Any, Mapping[str, Any]]] = []
    tables: list[tuple[str, list[Any]]] = []

    def walk(tree: Mapping[str, Any], path: list[str], unit: str | None) -> None:
        for k, v in tree.items():
            name = [*path, hz.label(str(k))]
            if k in EMPTY_NOISE and v == []:
                continue
            if isinstance(v, Mapping) and v:
                walk(v, name, hz.unit_of(str(k)) or unit)
            elif isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
                tables.append((SEP.join(name), v))
            else:
                pairs.append((SEP.join(name), _unit_key(str(k), unit), v, tree))

    walk(value, [], hz.unit_of(key))
    parts = []
    if pairs:
        rows = "".join(
            f"<tr><td class='t'>{_e(name)}</td>"
            f"<td class='t wide'>{_e(view.fmt(k, v, row))}</td></tr>"
            for name, k, v, row in pairs
        )
        parts.append(f"<div class='tbl'><table>{rows}</table></div>")
    level = min(4 + depth, 6)
    parts += [f"<h{level}>{_e(name)}</h{level}>{table(view, rows)}" for name, rows in tables]
    return "".join(parts)


def _unit_key(key: str, unit: str | None) -> str:
    """``key`` carrying its section's unit when it names none itself (``timings_s``'s
    ``loading`` is seconds)."""
    if unit is None or hz.unit_of(key):
        return key
    return f"{key}_{unit}"


# --- the top: runs, verdict, findings, checks ---------------------------------------------


def _header(view: View) -> Html:
    runs = _run_meta(view.results)
    spans = {str(s["run"]): s for s in view.frames.get("run_spans", []) if s.get("run")}
    lines = []
    for r in runs:
        run = str(r.get("run"))
        bits = [f"<b>{_e(view.names.get(run, run))}</b>"]
        if r.get("workload"):
            bits.append(f"{_e(r['workload'])} workload")
        if r.get("nemeses"):
            bits.append("nemeses " + _e(", ".join(map(str, r["nemeses"]))))
        if r.get("nodes"):
            bits.append(_plural(len(r["nodes"]), "node"))
        if r.get("seed") is not None:
            bits.append(f"seed {_e(r['seed'])}")
        if r.get("system"):
            bits.append(_e(r["system"]))
        span = spans.get(run)
        if span and span.get("end_s") is not None:
            bits.append(f"operations over {hz.duration(float(span['end_s']))}")
        if span and span.get("t0_ns") is not None:
            bits.append(f"first operation {hz.utc(int(span['t0_ns']))}")
        elif isinstance(r.get("started_ns"), int):
            bits.append(f"started {hz.utc(r['started_ns'])}")
        lines.append(" · ".join(bits))
    rows = _get(view.results, "input", "rows")
    notes = []
    if isinstance(rows, Mapping) and rows:
        notes.append(
            "input: "
            + ", ".join(
                f"{_int(n):,} {w}"
                for k, w in (
                    ("history", "history operations"),
                    ("log", "replica log rows"),
                    ("leaders", "leader samples"),
                )
                if (n := rows.get(k)) is not None
            )
        )
    if view.t0:
        notes.append("times count from each run's first operation")
    if notes:
        lines.append(" · ".join(notes))
    return "<h1>jetraft analysis</h1>" + "".join(f"<p class='sub'>{x}</p>" for x in lines)


def check_counts(view: View) -> dict[str, int]:
    """The verdict's counts by check; without a job verdict, the MSG.GET one from staleness."""
    by_check = _get(view.results, "verdict", "by_check")
    if isinstance(by_check, Mapping):
        return {str(k): _int(n) for k, n in by_check.items()}
    if view.st is not None:
        return {"stale_msg_get": _int(_get(view.st, "msg_get_violations", "count"))}
    return {}


def _title(key: str) -> str:
    check = CHECKS.get(key)
    return check.title if check else key.replace("_", " ")


def _verdict(view: View, counts: Mapping[str, int]) -> Html:
    failed = {k: n for k, n in counts.items() if n}
    total = sum(failed.values())
    if not counts:
        return "<p class='verdict info'>No checks in this report.</p>"
    if not failed:
        return (
            f"<p class='verdict ok'><b>VALID</b>: all {_plural(len(counts), 'check')} "
            "passed, no findings.</p>"
        )
    found = ", ".join(f"{_e(_title(k))} {n:,}" for k, n in failed.items())
    return (
        f"<p class='verdict bad'><b>INVALID: {_plural(total, 'finding')}</b> in "
        f"{len(failed)} of {_plural(len(counts), 'check')}: {found}.</p>"
    )


def _first_example(view: View, key: str) -> Record | None:
    check = CHECKS.get(key)
    for path in check.examples if check else ():
        node = _get(view.results, *path)
        for name in ("first", "examples"):
            found = _get(node, name)
            if isinstance(found, list) and found and isinstance(found[0], Mapping):
                return dict(found[0])
    return None


def _example_text(view: View, row: Mapping[str, Any]) -> str:
    flat = _flatten(row)
    parts = [
        f"{hz.label(k)} {view.fmt(k, v, row)}"
        for k, v in flat.items()
        if v is not None and v != [] and not (k == "run" and not view.several_runs)
    ]
    more = len(parts) - MAX_EXAMPLE_FIELDS
    text = ", ".join(parts[:MAX_EXAMPLE_FIELDS])
    return text + (f", … ({more} more fields)" if more > 0 else "")


def _failed_check(view: View, key: str, n: int) -> Html:
    check = CHECKS.get(key)
    what = check.finding if check else "findings"
    section = check.section if check else ""
    text = f"<b>{_e(_title(key))}: {n:,}</b> ({_e(what)})."
    if key == "stale_msg_get" and view.st is not None:
        text += " " + _msg_get_where(view)
        section = ""
    elif (example := _first_example(view, key)) is not None:
        text += f" First example: {_e(_example_text(view, example))}."
    if section:
        text += f" See {_link(section)}."
    return f"<li class='bad'>{text}</li>"


def _msg_get_where(view: View) -> Html:
    examples = _get(view.st, "msg_get_violations", "examples") or []
    if not examples:
        return ""
    moments = [view.when(e) for e in examples]
    nodes = sorted({str(e.get("served_by")) for e in examples})
    listed = f"the first {len(examples)} " if len(examples) > 1 else ""
    return (
        _e(f"At {_listing(moments)}, through {_listing(nodes)} (")
        + f"<a href='#msg-get-violations'>{listed}listed under Stale reads</a>)."
    )


def _kind(view: View, table_key: str, kind: str, stale_only: bool = True) -> list[Record]:
    rows = _get(view.st, table_key) or []
    return [r for r in rows if r.get("kind") == kind and (_int(r.get("stale")) or not stale_only)]


def _direct_get_finding(view: View) -> Html:
    dg = _get(view.st, "by_kind", "direct_get") or {}
    reads, stale = _int(dg.get("reads")), _int(dg.get("stale"))
    if not reads:
        return ""
    if not stale:
        return (
            f"<li class='ok'><b>Direct Get: none of {reads:,} reads was stale</b> (measured, not "
            "a check: any replica may answer a Direct Get).</li>"
        )
    examples = [e for e in (_get(view.st, "direct_get_stale_examples") or []) if e]
    every = len(examples) == stale
    lag_ms, lag_seqs = dg.get("lag_ms") or {}, dg.get("lag_seqs") or {}
    if every:
        lo_ms = min(float(e.get("lag_ms") or 0) for e in examples)
        lo_seq = min(_int(e.get("lag_seqs")) for e in examples)
        seqs = _span(str(lo_seq), str(lag_seqs.get("max")))
        how = (
            f"{_span(hz.ms(lo_ms), hz.ms(lag_ms.get('max')))} behind the acknowledgement of "
            f"the write they missed ({seqs} sequence{'' if seqs == '1' else 's'} behind; "
            f"median {hz.ms(lag_ms.get('p50'))})"
        )
    else:
        how = (
            f"lagging {hz.ms(lag_ms.get('p50'))} at the median, {hz.ms(lag_ms.get('p99'))} at "
            f"p99 and {hz.ms(lag_ms.get('max'))} at most behind the acknowledgement of the "
            f"write they missed (up to {lag_seqs.get('max')} sequences)"
        )
    text = (
        f"<b>{stale:,} of {reads:,} Direct Gets were stale ({hz.percent(stale / reads)})</b>: "
        f"each returned an older message, or none, although a newer write had been "
        f"acknowledged before it began; {_e(how)}."
    )
    outside = sum(_int(g.get("stale")) for g in _kind(view, "by_fault", "direct_get")
                  if g.get("fault") == "none")  # fmt: skip
    if outside:
        calm = [
            _calm_moment(view, e)
            for e in sorted(examples, key=lambda e: (str(e.get("run")), e.get("invoke_ns") or 0))
            if e.get("fault") == "none"
        ]
        moments = f": {_listing(calm, sep='; ')}" if calm and every else ""
        text += f" <b>{outside:,} of them came outside any fault window</b>{_e(moments)}."
    nodes = [
        f"{g.get('served_by')} ({_int(g.get('stale')):,})"
        for g in _kind(view, "by_node", "direct_get")
    ]
    roles = [
        _by_role(str(g.get("role")), _int(g.get("stale")))
        for g in _kind(view, "by_role", "direct_get")
    ]
    if nodes:
        text += _e(f" Served by {_listing(nodes)}" + (f"; {_listing(roles)}." if roles else "."))
    text += (
        " Not a failed check (any replica may answer a Direct Get, ADR-31), but worth a look: "
        "see <a href='#stale-examples'>the stale Direct Gets</a>."
    )
    return f"<li class='warn'>{text}</li>"


ROLE_WORDS: Final = {
    "leader": ("the stream leader", "the stream leader"),
    "follower": ("a follower", "followers"),
    "unknown": ("a node of unknown role", "nodes of unknown role"),
}


def _by_role(role: str, n: int) -> str:
    one, many = ROLE_WORDS.get(role, (f"a {role}", f"{role}s"))
    return f"{n:,} by {one if n == 1 else many}"


def _calm_moment(view: View, row: Mapping[str, Any]) -> str:
    """When a read outside every fault window was made, and how long after the last window
    before it ended (recovery from a fault outlasts its window)."""
    moment = f"at {view.when(row)}"
    ns, t0 = row.get("invoke_ns"), view.origin(row)
    if not isinstance(ns, int) or t0 is None:
        return moment
    t_s = (ns - t0) / hz.NS_PER_S
    before = [
        w
        for w in view.windows
        if w.get("run") == row.get("run") and w.get("end_s") is not None and w["end_s"] <= t_s
    ]
    if not before:
        return f"{moment}, before any fault"
    last = max(before, key=lambda w: float(w["end_s"]))
    gap = hz.duration(t_s - float(last["end_s"]))
    return f"{moment}, {gap} after {_window_text(last)} ended"


def _span(lo: str, hi: str) -> str:
    return lo if lo == hi else f"{lo} to {hi}"


def _apply_lag_finding(view: View) -> Html:
    rows = [r for r in (_get(view.st, "apply_lag") or []) if r.get("max_ms") is not None]
    if not rows:
        return ""
    worst = max(rows, key=lambda r: float(r["max_ms"]))
    median = max(float(r.get("p50_ms") or 0) for r in rows)
    text = (
        f"<b>Apply lag</b>: every node applied half of its entries within {hz.ms(median)} of the "
        f"first replica; the worst, {_e(worst.get('node'))}, applied an entry "
        f"{hz.ms(float(worst['max_ms']))} after it (p99 {hz.ms(worst.get('p99_ms'))})"
    )
    points = [
        p
        for p in view.frames.get("apply_lag_timeline", [])
        if str(p.get("node")) == str(worst.get("node")) and p.get("max_ms") is not None
    ]
    if points:
        peak = max(points, key=lambda p: float(p["max_ms"]))
        start = float(peak.get("t_s") or 0.0)
        end = start + view.bucket_s(peak.get("run"))
        where = view.windows_during(peak.get("run"), start, end)
        place = (
            "overlapping " + _listing([_window_text(w) for w in where])
            if where
            else "outside any fault window"
        )
        run = (
            f" of {view.names.get(str(peak.get('run')), peak.get('run'))}"
            if view.several_runs
            else ""
        )
        text += _e(
            f"; that entry was first applied between {hz.at(start)} and {hz.at(end)}{run}, {place}"
        )
    return f"<li class='info'>{text}. See {_link('apply-lag')}.</li>"


def _window_text(w: Mapping[str, Any]) -> str:
    return f"{fault_label(w)} {hz.at(w.get('start_s'))}{DASH}{hz.at(w.get('end_s'))}"


def _reach_findings(view: View) -> list[Html]:
    """What the analysis could not judge, in plain words."""
    out = []
    stopped = _int(_get(view.results, "agreement", "replay", "errors", "count"))
    if stopped:
        out.append(
            f"<li class='warn'><b>{_plural(stopped, 'replay')} stopped early</b>: the entries "
            f"after that point were not replayed (not a finding). See {_link('agreement')}.</li>"
        )
    dropped = _get(view.results, "input", "dropped_lines") or []
    if dropped:
        out.append(
            f"<li class='info'>{_plural(len(dropped), 'torn line')} dropped from the input (a "
            "kill cut the writer mid-line); listed under About this analysis.</li>"
        )
    skipped = _get(view.st, "reads", "skipped") or {}
    if isinstance(skipped, Mapping) and any(_int(n) for n in skipped.values()):
        why = ", ".join(f"{_int(n):,} {OUTCOME_WORDS.get(str(k), k)}" for k, n in skipped.items())
        out.append(
            f"<li class='info'>{sum(_int(n) for n in skipped.values()):,} reads not judged "
            f"(they returned nothing to judge: {_e(why)}).</li>"
        )
    unjudged = _get(view.results, "writes", "served_after_expiry", "skipped_runs") or []
    if unjudged:
        names = [view.names.get(str(r), str(r)) for r in unjudged]
        out.append(
            f"<li class='info'>Reads after expiry not checked in {_e(_listing(names))} (a "
            "clock nemesis skews the node clocks it compares).</li>"
        )
    return out


def _checked(view: View) -> Html:
    """What was checked, as counts."""
    bits = []
    replayed = _get(view.results, "agreement", "replay", "rows")
    if replayed is not None:
        bits.append(f"{_int(replayed):,} replica log entries replayed")
    acked = _get(view.results, "writes", "writes", "by_outcome", "ok")
    if acked is not None:
        bits.append(f"{_int(acked):,} acknowledged writes")
    judged = _get(view.st, "reads", "judged")
    if judged is not None:
        bits.append(f"{_int(judged):,} reads judged for staleness")
    incs = _get(view.results, "counters", "increments", "total")
    if incs:
        bits.append(f"{_int(incs):,} counter increments")
    consumers = _int(_get(view.results, "consumers", "count"))
    if consumers:
        bits.append(_plural(consumers, "consumer"))
    if not bits:
        return ""
    runs = len(view.names) or 1
    return f"<li class='info'><b>Checked</b> {_plural(runs, 'run')}: {_e(_listing(bits, 10))}.</li>"


def _findings(view: View, counts: Mapping[str, int]) -> Html:
    items = [_checked(view)]
    items += [_failed_check(view, k, n) for k, n in counts.items() if n]
    if view.st is not None:
        items += [_direct_get_finding(view), _apply_lag_finding(view)]
    items += _reach_findings(view)
    body = "".join(i for i in items if i)
    return f"<section id='findings'><h2>Findings</h2><ul class='findings'>{body}</ul></section>"


def _check_result(view: View, key: str, n: int) -> str:
    if key == "stale_msg_get" and view.st is not None:
        reads = _int(_get(view.st, "by_kind", "msg_get", "reads"))
        return f"{n:,} of {reads:,} reads stale"
    text = f"{n:,} found" if n else "none found"
    skipped = _get(view.results, "writes", "served_after_expiry", "skipped_runs") or []
    if key == "served_after_expiry" and skipped:
        text += f" ({_plural(len(skipped), 'run')} skipped: clock nemesis)"
    return text


def _checks(view: View, counts: Mapping[str, int]) -> Html:
    rows = []
    for key, n in counts.items():
        check = CHECKS.get(key)
        badge = "<span class='badge bad'>FAIL</span>" if n else "<span class='badge ok'>PASS</span>"
        name = f"<a href='#{check.section}'>{_e(check.title)}</a>" if check else _e(key)
        rows.append(
            f"<tr><td>{badge}</td><td><b>{name}</b></td>"
            f"<td>{_e(_check_result(view, key, n))}</td>"
            f"<td class='muted'>{_e(check.passes_when if check else '')}</td></tr>"
        )
    if view.st is not None:
        dg = _get(view.st, "by_kind", "direct_get") or {}
        rows.append(
            "<tr><td><span class='badge info'>measured</span></td><td><b><a href='#staleness'>"
            f"Direct Get staleness</a></b></td><td>{_int(dg.get('stale')):,} of "
            f"{_int(dg.get('reads')):,} stale ({hz.percent(dg.get('stale_rate'))})</td>"
            "<td class='muted'>how often and how far a Direct Get (any replica may answer) "
            "missed an acknowledged write</td></tr>"
        )
    if not rows:
        return ""
    head = "<tr><th>verdict</th><th>check</th><th>result</th><th>passes when</th></tr>"
    return (
        f"<section id='checks'><h2>Checks</h2><div class='tbl'><table class='checks'>{head}"
        f"{''.join(rows)}</table></div></section>"
    )


def _faults(view: View) -> Html:
    if not view.windows:
        return ""
    columns = [
        col("run"),
        col("fault", "nemesis"),
        col("nodes", "targets"),
        col("mode"),
        ("from", "from", lambda w: hz.at(w.get("start_s"))),
        ("to", "to", lambda w: hz.at(w.get("end_s"))),
        ("lasted", "lasted_s", _lasted),
    ]
    if not view.several_runs:
        columns = columns[1:]
    if not any(w.get("nodes") or w.get("mode") for w in view.windows):
        columns = [c for c in columns if c[0] not in ("targets", "mode")]
    return (
        "<section id='faults'><h2>Fault windows</h2><p>From each nemesis start to its stop (or "
        "the end of the run), as the plots shade them.</p>"
        f"{table(view, view.windows, columns)}</section>"
    )


def _lasted(w: Mapping[str, Any]) -> float | None:
    start, end = w.get("start_s"), w.get("end_s")
    return None if start is None or end is None else float(end) - float(start)


# --- the sections -------------------------------------------------------------------------


def _figure(plots: Mapping[str, bytes], key: str) -> Html:
    if key not in plots:
        return ""
    title = dict(PLOTS)[key]
    data = base64.b64encode(plots[key]).decode("ascii")
    return (
        f"<figure><img alt='{_e(title)}' src='data:image/png;base64,{data}'>"
        f"<figcaption><b>{_e(title)}.</b> {_e(CAPTIONS[key])}</figcaption></figure>"
    )


def _lag3(view: View, stats: Any, key: str) -> str:
    if not isinstance(stats, Mapping) or all(stats.get(p) is None for p in ("p50", "p99", "max")):
        return NONE
    return " / ".join(view.fmt(key, stats.get(p), {}) for p in ("p50", "p99", "max"))


def breakdown_table(view: View, rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> Html:
    """Staleness groups with their keys, reads, stale (and rate), removals, and the lags as
    p50 / p99 / max in one column each."""
    columns = [col(k) for k in keys]
    columns += [
        col("reads"),
        (
            "stale",
            "stale_text",
            lambda r: f"{_int(r.get('stale')):,} ({hz.percent(r.get('stale_rate'))})",
        ),
        col("explained_by_removal", "explained by a removal"),
        (
            "lag, sequences: p50 / p99 / max",
            "lag_text",
            lambda r: _lag3(view, r.get("lag_seqs"), "lag_seqs"),
        ),
        (
            "lag, time: p50 / p99 / max",
            "lag_text",
            lambda r: _lag3(view, r.get("lag_ms"), "lag_ms"),
        ),
    ]
    return table(view, rows, columns)


def _read_text(e: Mapping[str, Any]) -> str:
    target = (
        f"last message on {e['req_subject']}"
        if e.get("req_subject")
        else f"seq {e.get('req_seq')}"
        if e.get("req_seq") is not None
        else str(e.get("mode") or "")
    )
    return f"{e.get('stream')}: {target}"


def examples_table(view: View, rows: Sequence[Mapping[str, Any]]) -> Html:
    """Judged reads (staleness examples): every field, grouped into fewer, shorter columns."""
    columns: list[Column] = [
        ("at", "when", lambda e: view.when(e)),
        col("invoke_index", "op"),
        ("read", "read", _read_text),
        ("served by", "served", lambda e: f"{e.get('served_by')} ({e.get('role')})"),
        ("client", "client", lambda e: f"process {e.get('process')} via {e.get('client_node')}"),
        col("fault"),
        (
            "returned",
            "returned",
            lambda e: "not found" if e.get("not_found") else f"seq {e.get('ret_seq')}",
        ),
        ("owed", "owed", lambda e: f"seq {e.get('expected_seq')}"),
        col("lag_seqs", "lag, sequences"),
        col("lag_ms", "lag, time"),
    ]
    if len({e.get("kind") for e in rows}) > 1:
        columns.insert(2, col("kind"))
    return table(view, rows, columns)


def _staleness_section(view: View, plots: Mapping[str, bytes]) -> Html:
    st = view.st
    figures = _figure(plots, "staleness") + _figure(plots, "lag_histograms")
    if st is None:
        return (
            "<section id='staleness'><h2>Stale reads</h2><p>No read-after-write results in "
            f"this report.</p>{figures}</section>"
        )
    kinds = _get(st, "by_kind") or {}
    summary = "; ".join(
        f"{KIND_NAMES.get(k, k)}: {_int(v.get('stale')):,} stale of {_int(v.get('reads')):,} "
        f"reads ({hz.percent(v.get('stale_rate'))}), {_int(v.get('explained_by_removal')):,} "
        "more explained by a removal"
        for k, v in kinds.items()
        if isinstance(v, Mapping)
    )
    parts = [
        "<section id='staleness'><h2>Stale reads</h2>",
        f"<p>{_e(summary)}. A read is stale when it returned an older message, or none, "
        "although a newer write had been acknowledged before it began.</p>",
        figures,
    ]
    dg_examples = _get(st, "direct_get_stale_examples") or []
    stale_dg = _int(_get(st, "by_kind", "direct_get", "stale"))
    if dg_examples:
        which = "all" if len(dg_examples) == stale_dg else f"the {len(dg_examples)} largest lags"
        parts.append(
            f"<h3 id='stale-examples'>Stale Direct Gets ({which} of {stale_dg:,})</h3>"
            f"{examples_table(view, dg_examples)}"
        )
    violations = _get(st, "msg_get_violations", "examples") or []
    if violations:
        parts.append(
            "<h3 id='msg-get-violations'>Stale MSG.GET reads (violations; the first "
            f"{len(violations)})</h3>{examples_table(view, violations)}"
        )
    by_node = breakdown_table(view, _get(st, "by_node") or [], ("kind", "served_by"))
    parts.append(f"<h3>Per serving node</h3>{by_node}")
    more = "".join(
        f"<h4>{title}</h4>{breakdown_table(view, _get(st, key) or [], keys)}"
        for key, title, keys in (
            (
                "by_role",
                "Per role of the serving node (leaders.jsonl sample before the read)",
                ("kind", "role"),
            ),
            (
                "by_fault",
                "Per fault period (a read's fault: the windows its start fell in)",
                ("kind", "fault"),
            ),
            ("groups", "Per node \u00d7 role \u00d7 fault", ("kind", "served_by", "role", "fault")),
            ("by_run", "Per run", ("run", "kind")),
        )
        if _get(st, key)
    )
    reads = _get(st, "reads")
    if isinstance(reads, Mapping):
        more += f"<h4>Reads judged</h4>{generic(view, reads, 'reads', 1)}"
    parts.append(
        _details("Per role, per fault period, per node \u00d7 role \u00d7 fault, per run", more)
    )
    parts.append("</section>")
    return "".join(parts)


def _apply_lag_section(view: View, plots: Mapping[str, bytes]) -> Html:
    rows = _get(view.st, "apply_lag") or []
    columns: list[Column] = [
        col("node"),
        col("entries", "entries applied"),
        col("p50_ms", "p50"),
        col("p99_ms", "p99"),
        col("max_ms", "max"),
    ]
    body = table(view, rows, columns) if rows else ""
    return (
        "<section id='apply-lag'><h2>Apply lag</h2><p>How long after the first replica each "
        f"node applied each log entry.</p>{_figure(plots, 'apply_lag')}{body}</section>"
    )


def _agreement_summary(view: View, a: Mapping[str, Any]) -> str:
    rp = a.get("replay") or {}
    streams = a.get("streams") or []
    text = (
        f"{_int(rp.get('rows')):,} log rows replayed through the engine "
        f"({_int(rp.get('seeded')):,} after a re-seed): {_int(rp.get('matched')):,} digests "
        f"matched, {_int(rp.get('mismatched')):,} mismatched, {_int(rp.get('unreplayable')):,} "
        f"could not be replayed; {_plural(_int(_get(rp, 'errors', 'count')), 'replay')} stopped "
        f"early. {_plural(len(streams), 'stream')} compared across nodes: "
        f"{_int(_get(a, 'split_brain', 'diverging_indexes')):,} diverging indexes, "
        f"{_int(_get(a, 'entry_divergence', 'count')):,} divergent entries, "
        f"{_int(_get(a, 'lone_entries', 'count')):,} lone entries."
    )
    return text


def _writes_summary(view: View, w: Mapping[str, Any]) -> str:
    outcomes = _get(w, "writes", "by_outcome") or {}
    parts = [
        f"{_int(n):,} {OUTCOME_WORDS.get(str(k), k)}"
        for k, n in sorted(outcomes.items(), key=lambda kv: kv[0] != "ok")
    ]
    checks = [
        f"{_title(k).lower()} {_int(_get(w, k, 'count')):,}"
        for k in CHECKS
        if isinstance(w.get(k), Mapping) and "count" in w[k]
    ]
    return f"Writes: {_listing(parts, 10)}. Findings: {', '.join(checks)}."


def _counters_summary(view: View, c: Mapping[str, Any]) -> str:
    inc = c.get("increments") or {}
    subjects = c.get("subjects") or []
    checks = ", ".join(
        f"{hz.label(k)} {_int(_get(c, k, 'count')):,}"
        for k in ("final_total", "unread", "acked_total", "seq_shared")
        if isinstance(c.get(k), Mapping)
    )
    return (
        f"{_int(inc.get('total')):,} increments ({_int(inc.get('ok')):,} acknowledged, "
        f"{_int(inc.get('fail')):,} failed, {_int(inc.get('info')):,} indeterminate, "
        f"{_int(inc.get('retries')):,} retries) on {_plural(len(subjects), 'subject')}. "
        f"Findings: {checks}."
    )


def _consumers_summary(view: View, c: Mapping[str, Any]) -> str:
    n = _int(c.get("count"))
    if not n:
        return "No consumers in these runs (the consumer workload records them)."
    redelivered = sum(_int(r.get("redeliveries")) for r in c.get("by_consumer") or [])
    return f"{_plural(n, 'consumer')}, {redelivered:,} redeliveries."


SUMMARIES: Final[dict[str, Callable[[View, Mapping[str, Any]], str]]] = {
    "agreement": _agreement_summary,
    "writes": _writes_summary,
    "counters": _counters_summary,
    "consumers": _consumers_summary,
}
# a section's table worth showing open when short (the rest stays in the details)
OPEN_TABLES: Final = {"counters": "subjects", "consumers": "by_consumer"}
ABOUT_KEYS: Final = ("runs", "input", "spark", "timings_s")


def _section(view: View, key: str, value: Any) -> Html:
    anchor = key if key in SECTION_TITLES else f"section-{key}"
    title = SECTION_TITLES.get(key, hz.label(key))
    summary = SUMMARIES.get(key)
    parts = [f"<section id='{_e(anchor)}'><h2>{_e(title)}</h2>"]
    label = f"Every number of {title.lower()}"
    if summary is not None and isinstance(value, Mapping):
        parts.append(f"<p>{_e(summary(view, value))}</p>")
        shown = OPEN_TABLES.get(key)
        rows = value.get(shown) if shown else None
        if isinstance(rows, list) and 0 < len(rows) <= SMALL_TABLE_ROWS:
            parts.append(table(view, rows))
            value = {k: v for k, v in value.items() if k != shown}  # not twice
            label = f"The other numbers of {title.lower()}"
    found = any(_int(n) for k, n in check_counts(view).items() if _check_section(k) == key)
    parts.append(_details(label, generic(view, value, key), found))
    parts.append("</section>")
    return "".join(parts)


def _check_section(key: str) -> str:
    check = CHECKS.get(key)
    return check.section if check else ""


def _about(view: View) -> Html:
    r = view.results
    parts = []
    runs = _run_meta(r)
    if runs:
        columns: list[Column] = [
            col("run"),
            col("name"),
            col("nodes"),
            col("seed"),
            col("workload"),
            col("nemeses"),
            col("system"),
            ("started", "started", lambda x: _utc_or(x.get("started_ns"))),
            ("ended", "ended", lambda x: _utc_or(x.get("ended_ns"))),
            ("took (with setup)", "took_ns", lambda x: _took(x)),
        ]
        keys = {k for x in runs for k in x}
        known = {"run", "name", "nodes", "seed", "workload", "nemeses", "system", "started_ns",
                 "ended_ns"}  # fmt: skip
        columns += [col(k) for k in sorted(keys - known)]
        parts.append(f"<h3>Runs</h3>{table(view, runs, columns)}")
    for key, title in (("input", "Input"), ("spark", "Spark"), ("timings_s", "Stage timings")):
        if key in r:
            parts.append(f"<h3>{title}</h3>{generic(view, r[key], key, 1)}")
    if not parts:
        return ""
    return (
        "<section id='about'><h2>About this analysis</h2>"
        f"{_details('Runs, input rows, Spark, stage timings', ''.join(parts))}</section>"
    )


def _utc_or(ns: Any) -> str | None:
    return hz.utc(ns) if isinstance(ns, int) else None


def _took(run: Mapping[str, Any]) -> int | None:
    start, end = run.get("started_ns"), run.get("ended_ns")
    return end - start if isinstance(start, int) and isinstance(end, int) else None


def render_html(
    results: Mapping[str, Any],
    plots: Mapping[str, bytes],
    frames: Mapping[str, Sequence[Record]] | None = None,
) -> str:
    view = View.of(results, frames or {})
    counts = check_counts(view)
    st = view.st
    sections = [_faults(view), _staleness_section(view, plots)]
    if "apply_lag" in plots:
        sections.append(_apply_lag_section(view, plots))
    handled = set(ABOUT_KEYS) | {"verdict"}
    for key, value in results.items():
        if key in handled or value is st or (st is results and key in STALENESS_KEYS):
            continue
        sections.append(_section(view, str(key), value))
    full = html.escape(json.dumps(results, indent=2))
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>jetraft analysis</title><style>{CSS}</style></head><body>"
        f"{_header(view)}{_verdict(view, counts)}{_findings(view, counts)}{_checks(view, counts)}"
        f"{''.join(sections)}{_about(view)}"
        "<section id='json'><h2>Every number</h2>"
        f"{_details('report.json, as written', f'<pre>{full}</pre>')}</section>"
        "</body></html>\n"
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
    rows = {k: records(v) for k, v in frames.items()}
    _write(html_path, render_html(clean, render_plots(rows), rows))
    return json_path, html_path
