"""report.json and report.html (spark/report.py, spark/report_plots.py, spark/humanize.py)
from hand-made results and frames; no Spark.

The page is checked as a reader meets it: the verdict and the findings first, one line per
check with its verdict, human units and times since the run's first operation (never raw
nanoseconds), tables inside containers that scroll, raw numbers collapsed, fault windows named.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from spark import humanize
from spark.report import (
    CHECKS,
    PLOTS,
    REPORT_HTML,
    REPORT_JSON,
    jsonable,
    records,
    render_html,
    write_report,
)
from spark.report_plots import (
    bin_counts,
    fault_label,
    ms_histogram,
    nice_step,
    render_plots,
    seq_histogram,
    time_bin,
)

IMG = re.compile(r"<img alt='([^']*)' src='data:image/png;base64,([A-Za-z0-9+/=]+)'>")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MIN_PLOT_PIXELS = 300  # each side of a plot image that has data
RUN = "/tmp/runs/r1"
T0 = 1_795_583_942_551_607_206  # the run's first operation, ns since the epoch
NS = 1_000_000_000
RAW_NS = re.compile(r"\d{13,}")  # a wall clock in ns (or any number that long)
JSON_DUMP = re.compile(r"<section id='json'>.*?</section>", re.S)


def lag(p50: float | None, p99: float | None, top: float | None) -> dict[str, Any]:
    return {"p50": p50, "p99": p99, "max": top}


def stale_read(t_s: float, fault: str, lag_ms: float, served_by: str = "n2") -> dict[str, Any]:
    """One judged stale Direct Get, as staleness.py lists it."""
    return {
        "run": RUN,
        "stream": "JKV",
        "kind": "direct_get",
        "mode": "last_by_subj",
        "process": "3",
        "client_node": "n1",
        "served_by": served_by,
        "role": "follower",
        "fault": fault,
        "invoke_index": int(t_s * 100),
        "invoke_ns": T0 + int(t_s * NS),
        "req_seq": None,
        "req_subject": "jkv.k1",
        "ret_seq": 40,
        "not_found": False,
        "expected_seq": 42,
        "lag_seqs": 2,
        "lag_ms": lag_ms,
    }


# four stale Direct Gets lagging 1.5-2.5 s, three of them outside any fault window
STALE = [
    stale_read(4.0, "none", 2147.853),
    stale_read(12.0, "partition", 1500.0, served_by="n3"),
    stale_read(22.5, "none", 2500.0),
    stale_read(29.0, "none", 1800.0),
]


def staleness_results(violations: int) -> dict[str, Any]:
    return {
        "reads": {"judged": 1200, "skipped": {"info": 3}, "log_rows_used": True},
        "by_kind": {
            "direct_get": {
                "reads": 1000,
                "stale": 4,
                "stale_rate": 0.004,
                "explained_by_removal": 2,
                "lag_seqs": lag(2.0, 2.0, 2),
                "lag_ms": lag(1973.9, 2490.2, 2500.0),
            },
            "msg_get": {
                "reads": 200,
                "stale": violations,
                "stale_rate": violations / 200,
                "explained_by_removal": 0,
                "lag_seqs": lag(None, None, None),
                "lag_ms": lag(None, None, None),
            },
        },
        "by_node": [
            {
                "kind": "direct_get",
                "served_by": "n2",
                "reads": 500,
                "stale": 3,
                "stale_rate": 0.006,
                "explained_by_removal": 0,
                "lag_seqs": lag(2.0, 2.0, 2),
                "lag_ms": lag(2147.853, 2490.0, 2500.0),
            },
            {
                "kind": "direct_get",
                "served_by": "n3",
                "reads": 500,
                "stale": 1,
                "stale_rate": 0.002,
                "explained_by_removal": 2,
                "lag_seqs": lag(2.0, 2.0, 2),
                "lag_ms": lag(1500.0, 1500.0, 1500.0),
            },
        ],
        "by_role": [
            {"kind": "direct_get", "role": "follower", "reads": 700, "stale": 4, "stale_rate": 0},
        ],
        "by_fault": [
            {"kind": "direct_get", "fault": "none", "reads": 800, "stale": 3},
            {"kind": "direct_get", "fault": "partition", "reads": 200, "stale": 1},
        ],
        "groups": [],
        "by_run": [],
        "msg_get_violations": {
            "count": violations,
            "examples": [
                {**stale_read(7.25, "kill", 310.0), "kind": "msg_get", "served_by": "n1"}
                for _ in range(min(violations, 1))
            ],
        },
        "direct_get_stale_examples": sorted(STALE, key=lambda e: -e["lag_ms"]),
        "apply_lag": [
            {"node": "n1", "entries": 10, "p50_ms": 0.003, "p99_ms": 1.5, "max_ms": 2.0},
            {"node": "n2", "entries": 10, "p50_ms": 0.8, "p99_ms": 640.0, "max_ms": 850.0},
        ],
    }


def frames() -> dict[str, list[dict[str, Any]]]:
    timeline = []
    for b in range(60):  # 0.5 s buckets over 30 s
        t = b * 0.5
        stale = sum(1 for e in STALE if t <= (e["invoke_ns"] - T0) / NS < t + 0.5)
        timeline.append({"run": RUN, "kind": "direct_get", "t_s": t, "reads": 17, "stale": stale})
        timeline.append({"run": RUN, "kind": "msg_get", "t_s": t, "reads": 3, "stale": 0})
    apply = [
        {
            "run": RUN,
            "node": n,
            "t_s": b * 0.5,
            "mean_ms": 1.0,
            "max_ms": (850.0 if n == "n2" and b == 24 else 1.0 + i),
        }
        for i, n in enumerate(["n1", "n2"])
        for b in range(60)
    ]
    return {
        "staleness_timeline": timeline,
        "fault_windows": [
            {
                "run": RUN,
                "fault": "partition",
                "start_index": 1000,
                "end_index": 1500,
                "start_s": 10.0,
                "end_s": 20.0,
                "mode": "halves",
                "nodes": None,
            },
            {
                "run": RUN,
                "fault": "kill",
                "start_index": 2400,
                "end_index": 2700,
                "start_s": 24.0,
                "end_s": 27.5,
                "mode": "leader",
                "nodes": ["n1"],
            },
        ],
        "run_spans": [{"run": RUN, "t0_ns": T0, "end_s": 30.0, "bucket_s": 0.5}],
        "lag_seqs_counts": [
            {"kind": "direct_get", "served_by": "n2", "lag_seqs": 2, "count": 3},
            {"kind": "direct_get", "served_by": "n3", "lag_seqs": 2, "count": 1},
        ],
        "lag_ms_counts": [
            {"kind": "direct_get", "served_by": "n2", "lag_ms": ms, "bin_ms": 10.0, "count": 1}
            for ms in (2140.0, 2500.0, 1800.0)
        ]
        + [{"kind": "direct_get", "served_by": "n3", "lag_ms": 1500.0, "bin_ms": 10.0, "count": 1}],
        "apply_lag_timeline": apply,
    }


def job_results(violations: int = 0, lost: int = 0) -> dict[str, Any]:
    """Results shaped like the job's: every section, the verdict by check."""
    by_check = dict.fromkeys(CHECKS, 0)
    by_check.update(lost=lost, stale_msg_get=violations)
    total = sum(by_check.values())
    examples = [{"run": RUN, "stream": "JQUEUE", "seq": 17, "id": "w-17", "ack_ns": T0 + 3 * NS}]
    return {
        "runs": [
            {
                "run": RUN,
                "name": "r1",
                "nodes": ["n1", "n2", "n3"],
                "seed": 7,
                "workload": "mix",
                "nemeses": ["kill", "partition"],
                "system": "jetraft",
                "started_ns": T0 - 9 * NS,
                "ended_ns": T0 + 40 * NS,
            }
        ],
        "input": {"rows": {"history": 4676, "log": 17469, "leaders": 245}, "dropped_lines": []},
        "spark": {"master": "local[1]", "version": "4.3.0"},
        "verdict": {"valid": total == 0, "findings": total, "by_check": by_check},
        "agreement": {
            "replay": {
                "rows": 6714,
                "matched": 6714,
                "mismatched": 0,
                "unreplayable": 0,
                "seeded": 2846,
                "findings": 0,
                "examples": [],
                "errors": {"count": 0, "examples": []},
            },
            "streams": [],
            "split_brain": {"diverging_indexes": 0, "first": [], "examples": []},
            "entry_divergence": {"count": 0, "examples": []},
            "lone_entries": {"count": 0, "examples": []},
            "findings": 0,
            "indexes_compared": 1234,
        },
        "writes": {
            "writes": {"by_outcome": {"ok": 2612, "fail": 249}},
            "lost": {"count": lost, "examples": examples[:lost]},
            "phantom": {"count": 0, "examples": []},
            "findings": lost,
        },
        "staleness": staleness_results(violations),
        "consumers": {"count": 0, "by_consumer": []},
        "counters": {"increments": {"total": 419, "ok": 408, "fail": 11, "info": 0}},
        "timings_s": {"loading": 8.513, "agreement": 12.291, "report": 0.3},
    }


def images(html: str) -> dict[str, bytes]:
    return {alt: base64.b64decode(data) for alt, data in IMG.findall(html)}


def page(tmp_path: Path, results: dict[str, Any], with_frames: bool = True) -> str:
    _json, html_path = write_report(tmp_path, results, frames() if with_frames else {})
    return html_path.read_text()


def readable(html: str) -> str:
    """The page without its embedded images and its collapsed copy of report.json."""
    return IMG.sub("<img>", JSON_DUMP.sub("", html))


def text_of(html: str, cells: bool = True) -> str:
    """The words of the page; ``cells``: a space between what tags separate (table cells),
    else tags simply removed (inline markup in a sentence)."""
    gap = " " if cells else ""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", gap, readable(html)))


# --- files --------------------------------------------------------------------------------


def test_report_files_round_trip_and_embed_three_plots(tmp_path: Path) -> None:
    results = {
        **job_results(lost=2),
        "odd": {"nan": math.nan, "inf": math.inf, "tuple": (1, 2), "path": Path("/x")},
    }
    json_path, html_path = write_report(tmp_path / "analysis", results, frames())

    assert (json_path, html_path) == (
        tmp_path / "analysis" / REPORT_JSON,
        tmp_path / "analysis" / REPORT_HTML,
    )
    loaded = json.loads(json_path.read_text())
    assert loaded == jsonable(results)
    assert loaded["staleness"]["by_kind"]["direct_get"]["lag_ms"] == lag(1973.9, 2490.2, 2500.0)
    assert loaded["odd"] == {"nan": None, "inf": None, "tuple": [1, 2], "path": "/x"}

    html = html_path.read_text()
    pngs = images(html)
    assert list(pngs) == [title for _, title in PLOTS]
    for png in pngs.values():
        assert png.startswith(PNG_MAGIC)
        height, width, _ = imread(io.BytesIO(png), format="png").shape
        assert min(height, width) >= MIN_PLOT_PIXELS
    assert "INVALID: 2 findings</b> in 1 of 13 checks: Lost writes 2." in html
    assert "indexes compared" in html  # a field the page does not know is still shown
    assert "odd" in html and "<script" not in html and "http" not in html  # self-contained
    dump = html[html.index("<pre>") + len("<pre>") : html.index("</pre>")]
    assert json.loads(unescape(dump)) == loaded  # every number, in the page too


def test_records_accepts_lists_of_rows_and_to_dict_frames() -> None:
    class FakePandas:
        def to_dict(self, orient: str) -> list[dict[str, Any]]:
            assert orient == "records"
            return [{"a": 1.5, "b": math.nan}]

    assert records(FakePandas()) == [{"a": 1.5, "b": None}]
    assert records([{"x": (1, 2)}]) == [{"x": [1, 2]}]
    assert records(None) == []


# --- what a reader meets first ------------------------------------------------------------


def test_the_verdict_and_findings_come_before_everything_else(tmp_path: Path) -> None:
    html = page(tmp_path, job_results())
    order = [
        html.index("class='verdict ok'><b>VALID</b>: all 13 checks passed"),
        html.index("<section id='findings'>"),
        html.index("<section id='checks'>"),
        html.index("<section id='faults'>"),
        html.index("<img"),
        html.index("<details"),
        html.index("<section id='json'>"),
    ]
    assert order == sorted(order)


def test_each_check_is_one_line_with_its_verdict(tmp_path: Path) -> None:
    html = page(tmp_path, job_results(violations=1, lost=2))
    start = html.index("<section id='checks'>")
    rows = re.findall(r"<tr>(.*?)</tr>", html[start : html.index("</section>", start)])[1:]
    by_title = {CHECKS[k].title: k for k in CHECKS}
    seen = {}
    for row in rows:
        title = re.search(r"<a href='#[a-z-]+'>([^<]+)</a>", row)
        assert title, row
        seen[title.group(1)] = row
    assert set(by_title) <= set(seen)
    for title, key in by_title.items():
        want = "FAIL" if key in ("lost", "stale_msg_get") else "PASS"
        assert f"class='badge {'bad' if want == 'FAIL' else 'ok'}'>{want}<" in seen[title], title
    assert "2 found" in seen["Lost writes"]
    assert "1 of 200 reads stale" in seen["MSG.GET freshness"]
    assert (
        "measured" in seen["Direct Get staleness"]
        and "4 of 1,000 stale (0.4%)" in (seen["Direct Get staleness"])
    )


def test_findings_say_what_was_found_how_bad_and_where(tmp_path: Path) -> None:
    html = page(tmp_path, job_results(violations=1, lost=2))
    start = html.index("<section id='findings'>")
    findings = text_of(html[start : html.index("<section id='checks'>")], cells=False)
    assert (
        "Checked 1 run: 6,714 replica log entries replayed, 2,612 acknowledged writes, 1,200 "
        "reads judged for staleness and 419 counter increments." in findings
    )
    assert "Lost writes: 2 (acknowledged writes on no node that no removal explains)." in findings
    assert "First example: stream JQUEUE, seq 17, id w-17, ack 3.0 s. See Writes" in findings
    assert "MSG.GET freshness: 1 (MSG.GET reads that missed a write acknowledged" in findings
    assert "At 7.2 s, through n1 (listed under Stale reads)." in findings
    # the stale Direct Gets: how many, how far behind, which outside the fault windows
    assert "4 of 1,000 Direct Gets were stale (0.4%)" in findings
    assert "1.5 s to 2.5 s behind the acknowledgement" in findings
    assert "(2 sequences behind; median 2 s)" in findings
    assert (
        "3 of them came outside any fault window: at 4.0 s, before any fault; at 22.5 s, 2.5 s "
        "after partition (halves) 10.0 s\u201320.0 s ended; and at 29.0 s, 1.5 s after kill n1 "
        "(leader) 24.0 s\u201327.5 s ended." in findings
    )
    assert "Served by n2 (3) and n3 (1); 4 by followers." in findings
    # apply lag: the worst node, when, and the fault window it overlapped
    assert "the worst, n2, applied an entry 850 ms after it (p99 640 ms)" in findings
    assert (
        "between 12.0 s and 12.5 s, overlapping partition (halves) 10.0 s\u201320.0 s" in findings
    )
    assert "3 reads not judged" in findings
    links = re.findall(r"href='#([a-z-]+)'", html)
    for anchor in set(links):
        assert f"id='{anchor}'" in html, anchor


def test_a_clean_run_says_so_without_noise(tmp_path: Path) -> None:
    results = job_results()
    results["staleness"]["by_kind"]["direct_get"]["stale"] = 0
    results["staleness"]["direct_get_stale_examples"] = []
    html = page(tmp_path, results)
    text = text_of(html)
    assert "VALID : all 13 checks passed, no findings." in text
    assert "Direct Get: none of 1,000 reads was stale" in text
    assert "examples" not in readable(html)  # empty example lists are not shown
    assert "first" not in re.sub(r"first (operation|replica|applied)", "", text)


# --- units, times, tables, details --------------------------------------------------------


def test_times_are_human_units_and_relative_to_the_run(tmp_path: Path) -> None:
    html = page(tmp_path, job_results(violations=1, lost=2))
    shown = readable(html)
    assert not RAW_NS.findall(text_of(html)), RAW_NS.findall(text_of(html))[:5]
    assert "2,147.853" not in shown and " ms</td>" in shown
    examples = shown[shown.index("id='stale-examples'") :]
    assert "<td class='t'>4.0 s</td>" in examples  # invoke time since the first operation
    assert "<td class='n'>2.1 s</td>" in examples  # its lag
    assert "2.1 s / 2.5 s / 2.5 s" in shown  # n2's lag p50 / p99 / max
    assert "first operation 2026-11-25 05:19:02 UTC" in shown
    about = shown[shown.index("<section id='about'>") :]
    assert "UTC" in about and "49 s" in about  # started, ended, took (with setup)
    assert "<td class='t'>loading</td><td class='t wide'>8.5 s</td>" in about


def test_tables_sit_in_scrolling_containers_and_raw_numbers_are_collapsed(
    tmp_path: Path,
) -> None:
    html = page(tmp_path, job_results(lost=2))
    assert html.count("<table") == html.count("<div class='tbl'><table")
    assert ".tbl { overflow-x: auto;" in html
    # raw numbers: collapsed, except a section with findings, which opens
    assert "<details><summary>report.json, as written</summary><pre>" in html
    assert "<details><summary>Per role, per fault period" in html
    assert "<details open><summary>Every number of writes</summary>" in html
    assert "<details><summary>Every number of replica agreement</summary>" in html


def test_fault_windows_are_named_with_their_targets_and_times(tmp_path: Path) -> None:
    html = page(tmp_path, job_results())
    start = html.index("<section id='faults'>")
    faults = text_of(html[start : html.index("<section id='staleness'>")])
    assert "partition \u2013 halves 10.0 s 20.0 s 10 s" in faults
    assert "kill n1 leader 24.0 s 27.5 s 3.5 s" in faults
    assert fault_label(frames()["fault_windows"][1]) == "kill n1 (leader)"
    assert fault_label({"fault": "partition", "mode": "bridge"}) == "partition (bridge)"


def test_staleness_alone_and_no_frames_still_make_a_readable_page(tmp_path: Path) -> None:
    json_path, html_path = write_report(tmp_path, staleness_results(violations=3), {})
    html = html_path.read_text()
    assert "INVALID: 3 findings</b> in 1 of 1 check: MSG.GET freshness 3." in html
    assert len(images(html)) == len(PLOTS)  # each says it has no data
    assert json.loads(json_path.read_text())["msg_get_violations"]["count"] == 3
    assert "Per serving node" in html and "n2" in html
    assert not RAW_NS.findall(text_of(html))  # no time origin: times of day, not raw ns
    assert "UTC" in text_of(html)


def test_render_html_without_frames_keeps_working() -> None:
    html = render_html(job_results(), render_plots({}))
    assert "<section id='findings'>" in html and "VALID" in html


# --- humanize -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0 s"),
        (2.147853, "2.1 s"),
        (0.85, "850 ms"),
        (0.0015, "1.5 ms"),
        (3e-6, "3 \u00b5s"),
        (2.5e-7, "250 ns"),
        (0.9996, "1 s"),
        (12.34, "12.3 s"),
        (125.4, "2 min 5 s"),
        (3700, "1 h 2 min"),
        (None, "\u2013"),
    ],
)
def test_durations_read_in_the_unit_that_fits(seconds: float | None, shown: str) -> None:
    assert humanize.duration(seconds) == shown


def test_values_are_formatted_by_what_their_key_says() -> None:
    assert humanize.value("lag_ms p99", 2147.853) == "2.1 s"
    assert humanize.value("invoke_ns", T0 + 12_345_000_000, T0) == "12.3 s"
    assert humanize.value("started_ns", T0).endswith(" UTC")
    assert humanize.value("took_ns", 49 * NS) == "49 s"
    assert humanize.value("stale_rate", 0.0202) == "2.0%"
    assert humanize.value("reads", 12345) == "12,345"
    assert humanize.value("invoke_index", 12345) == "12345"
    assert humanize.label("lag_ms p99") == "lag p99"
    assert humanize.utc(T0) == "2026-11-25 05:19:02 UTC"
    assert humanize.run_names(["/a/x/kill", "/a/y/kill", "/tmp/r1"]) == {
        "/a/x/kill": "x/kill",
        "/a/y/kill": "y/kill",
        "/tmp/r1": "r1",
    }


# --- plots --------------------------------------------------------------------------------


def test_time_bins_are_round_multiples_of_the_counted_buckets_and_keep_the_totals() -> None:
    points = frames()["staleness_timeline"]
    width = time_bin(points, {"bucket_s": 0.5, "end_s": 30.0})
    assert width == 0.5  # 60 buckets: already few enough
    long = time_bin(points, {"bucket_s": 0.2, "end_s": 180.0})
    assert long == 5.0 and (long / 0.2) == round(long / 0.2)
    binned = bin_counts(points, 2.0)
    assert binned.totals == {"direct_get": (4, 1020), "msg_get": (0, 180)}
    assert sum(binned.stale["direct_get"].values()) == 4
    assert sum(binned.reads.values()) == 1200
    assert [nice_step(x) for x in (0.3, 1, 1.5, 3, 7, 40)] == [1, 1, 2, 5, 10, 50]


def test_lag_histograms_use_integer_bins_and_ticks() -> None:
    ax = Figure().subplots()
    seq_histogram(ax, [{"kind": "direct_get", "lag_seqs": 3, "count": 2}])
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(t == int(t) for t in ticks)
    left, right = ax.get_xlim()
    assert right - left >= 5  # one bar is a bar, not a block filling the axes
    [bar] = ax.patches
    assert bar.get_width() < 1 and bar.get_x() < 3 < bar.get_x() + bar.get_width()

    ax = Figure().subplots()
    rows = [{"kind": "direct_get", "lag_ms": 0.0, "bin_ms": 10.0, "count": 1}]
    ms_histogram(ax, rows)
    assert ax.get_xlim()[1] >= 100  # at least ten 10 ms bins: the bar stays narrow
    labels = [ax.xaxis.get_major_formatter()(t, 0) for t in ax.get_xticks()]
    assert "20 ms" in labels
