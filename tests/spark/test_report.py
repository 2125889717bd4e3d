"""report.json and report.html (spark/report.py) from hand-made results and frames; no Spark."""

from __future__ import annotations

import base64
import io
import json
import math
import re
from pathlib import Path
from typing import Any

from matplotlib.image import imread

from spark.report import PLOTS, REPORT_HTML, REPORT_JSON, jsonable, records, write_report

IMG = re.compile(r"<img alt='([^']*)' src='data:image/png;base64,([A-Za-z0-9+/=]+)'>")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MIN_PLOT_PIXELS = 300  # each side of a plot image


def lag(p50: float | None, p99: float | None, top: float | None) -> dict[str, Any]:
    return {"p50": p50, "p99": p99, "max": top}


def staleness_results(violations: int) -> dict[str, Any]:
    return {
        "reads": {"judged": 1200, "skipped": {"info": 3}, "log_rows_used": True},
        "by_kind": {
            "direct_get": {
                "reads": 1000,
                "stale": 42,
                "stale_rate": 0.042,
                "explained_by_removal": 2,
                "lag_seqs": lag(2.0, 9.59, 12),
                "lag_ms": lag(150.0, 812.25, 990.5),
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
                "stale": 40,
                "stale_rate": 0.08,
                "explained_by_removal": 0,
                "lag_seqs": lag(2.0, 9.0, 12),
                "lag_ms": lag(150.0, 800.0, 990.5),
            },
        ],
        "by_role": [],
        "by_fault": [],
        "groups": [],
        "by_run": [],
        "msg_get_violations": {"count": violations, "examples": []},
        "direct_get_stale_examples": [],
        "apply_lag": [{"node": "n1", "entries": 10, "p50_ms": 0.0, "p99_ms": 1.5, "max_ms": 2.0}],
    }


def frames() -> dict[str, list[dict[str, Any]]]:
    timeline = []
    for b in range(60):
        t = b * 0.5
        in_fault = 10 <= t < 20
        timeline.append(
            {
                "run": "/tmp/r1",
                "kind": "direct_get",
                "t_s": t,
                "reads": 20,
                "stale": 6 if in_fault else (1 if b % 7 == 0 else 0),
            }
        )
        timeline.append({"run": "/tmp/r1", "kind": "msg_get", "t_s": t, "reads": 5, "stale": 0})
    apply = [
        {
            "run": "/tmp/r1",
            "node": n,
            "t_s": b * 0.5,
            "mean_ms": 1.0,
            "max_ms": (80.0 + 10 * i if 10 <= b * 0.5 < 20 else 3.0 + i),
        }
        for i, n in enumerate(["n1", "n2", "n3"])
        for b in range(60)
    ]
    return {
        "staleness_timeline": timeline,
        "fault_windows": [
            {"run": "/tmp/r1", "fault": "partition", "start_s": 10.0, "end_s": 20.0},
            {"run": "/tmp/r1", "fault": "kill", "start_s": 24.0, "end_s": 27.5},
        ],
        "lag_seqs_counts": [
            {"kind": "direct_get", "served_by": n, "lag_seqs": s, "count": c}
            for n in ("n2", "n3")
            for s, c in ((1, 20), (2, 9), (3, 4), (12, 1))
        ],
        "lag_ms_counts": [
            {"kind": "direct_get", "served_by": n, "lag_ms": ms, "bin_ms": 10.0, "count": c}
            for n in ("n2", "n3")
            for ms, c in ((0.0, 5), (10.0, 12), (20.0, 6), (150.0, 2), (990.0, 1))
        ],
        "apply_lag_timeline": apply,
    }


def images(html: str) -> dict[str, bytes]:
    return {alt: base64.b64decode(data) for alt, data in IMG.findall(html)}


def test_report_files_round_trip_and_embed_three_plots(tmp_path: Path) -> None:
    results = {
        "runs": ["/tmp/r1"],
        "verdict": {"valid": False, "findings": 2, "by_check": {"lost": 2, "split_brain": 0}},
        "staleness": staleness_results(violations=0),
        "agreement": {"findings": [], "indexes_compared": 1234},
        "odd": {"nan": math.nan, "inf": math.inf, "tuple": (1, 2), "path": Path("/x")},
    }
    json_path, html_path = write_report(tmp_path / "analysis", results, frames())

    assert (json_path, html_path) == (
        tmp_path / "analysis" / REPORT_JSON,
        tmp_path / "analysis" / REPORT_HTML,
    )
    loaded = json.loads(json_path.read_text())
    assert loaded == jsonable(results)
    assert loaded["staleness"]["by_kind"]["direct_get"]["lag_ms"] == lag(150.0, 812.25, 990.5)
    assert loaded["odd"] == {"nan": None, "inf": None, "tuple": [1, 2], "path": "/x"}

    html = html_path.read_text()
    pngs = images(html)
    assert list(pngs) == [title for _, title in PLOTS]
    for png in pngs.values():
        assert png.startswith(PNG_MAGIC)
        height, width, _ = imread(io.BytesIO(png), format="png").shape
        assert min(height, width) >= MIN_PLOT_PIXELS
    assert "INVALID: 2 finding(s)</b>: lost 2</p>" in html
    assert "PASS: MSG.GET stale reads = 0" in html
    assert "Direct Get: 42 stale of 1000 reads (4.20%)" in html
    assert "indexes_compared" in html  # other sections are rendered too
    assert "<script" not in html and "http" not in html  # self-contained


def test_a_violation_and_empty_frames_still_make_a_readable_page(tmp_path: Path) -> None:
    json_path, html_path = write_report(tmp_path, staleness_results(violations=3), {})
    html = html_path.read_text()
    assert "FAIL: MSG.GET stale reads = 3" in html
    assert len(images(html)) == len(PLOTS)  # each says it has no data
    assert json.loads(json_path.read_text())["msg_get_violations"]["count"] == 3
    assert "Per serving node" in html and "n2" in html


def test_records_accepts_lists_of_rows_and_to_dict_frames() -> None:
    class FakePandas:
        def to_dict(self, orient: str) -> list[dict[str, Any]]:
            assert orient == "records"
            return [{"a": 1.5, "b": math.nan}]

    assert records(FakePandas()) == [{"a": 1.5, "b": None}]
    assert records([{"x": (1, 2)}]) == [{"x": [1, 2]}]
    assert records(None) == []
