"""Replica agreement (spark/agreement.py) on hand-made runs whose logs come from the engine.

Planted run A, nodes n1..n3: stream S forks at index 5 (n3 applies another entry there), so
indexes 5 and 6 diverge; in stream T node n2 reports a wrong digest at index 3 (a replay
mismatch, and a one-index divergence); stream U has a restart from scratch (n2), a restart
that kept its state (n1 reopens at index 3) and a state transfer (n3 misses 4 and 5, then a
transfer row at 5) — all consistent; stream V (n1 alone) has a transfer at 3 although no node
logged entries 2 and 3: the replay must stop there and say so. Run B is clean.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from engine.entries import ExpireEntry, encode_entry
from spark.agreement import analyze_agreement, canonical_entries, replay_node
from spark.load import Loaded, load_runs
from tests.spark.conftest import RunBuilder, ns, publish_entry

WRONG_DIGEST = "00" * 32


def planted_a(root: Path) -> tuple[Path, dict[str, Any]]:
    b = RunBuilder(root)
    b.open_stream("S")
    for i, msg in enumerate("abcd", start=1):
        b.apply("S", i, publish_entry(i, "s.x", msg), t_ms=i)
    b.apply("S", 5, publish_entry(5, "s.x", "e"), ["n1", "n2"], t_ms=5)
    b.apply("S", 5, publish_entry(5, "s.x", "FORK"), ["n3"], t_ms=5)
    b.apply("S", 6, publish_entry(6, "s.x", "f"), t_ms=6)

    b.open_stream("T")
    for i in (1, 2):
        b.apply("T", i, publish_entry(i, "t.x", f"t{i}"), t_ms=i)
    b.apply("T", 3, publish_entry(3, "t.x", "t3"), ["n1", "n3"], t_ms=3)
    b.apply("T", 3, publish_entry(3, "t.x", "t3"), ["n2"], t_ms=3, digest=WRONG_DIGEST)
    tampered_line = len(b.logs["n2"]) - 1  # the entry row (its store row follows)
    b.apply("T", 4, publish_entry(4, "t.x", "t4"), t_ms=4)

    b.open_stream("U")
    for i in (1, 2, 3):
        b.apply("U", i, publish_entry(i, "u.x", f"u{i}"), t_ms=i)
    b.open_stream("U", ["n2"], t_ms=10)  # a restart from scratch: re-applies everything
    for i in (1, 2, 3):
        b.apply("U", i, publish_entry(i, "u.x", f"u{i}"), ["n2"], t_ms=10 + i)
    b.open_stream("U", ["n1"], t_ms=10, index=3, fresh=False)  # a restart that kept its state
    for i in (4, 5):
        b.apply("U", i, publish_entry(i, "u.x", f"u{i}"), ["n1", "n2"], t_ms=20 + i)
        b.apply("U", i, publish_entry(i, "u.x", f"u{i}"), ["n3"], t_ms=20 + i, logged=False)
    b.transfer("U", "n3", 5, t_ms=30)
    b.apply("U", 6, publish_entry(6, "u.x", "u6"), t_ms=31)

    b.open_stream("V", ["n1"])
    b.apply("V", 1, publish_entry(1, "v.x", "v1"), ["n1"], t_ms=1)
    for i in (2, 3):
        b.apply("V", i, publish_entry(i, "v.x", f"v{i}"), ["n1"], t_ms=i, logged=False)
    b.transfer("V", "n1", 3, t_ms=4)
    b.apply("V", 4, publish_entry(4, "v.x", "v4"), ["n1"], t_ms=5)

    # W: index 2 is an internal Raft entry on n1 and n2, but n3 applied a publish there
    b.open_stream("W")
    b.apply("W", 1, publish_entry(1, "w.x", "w1"), t_ms=1)
    b.apply("W", 2, publish_entry(2, "w.x", "LONE"), ["n3"], t_ms=2)
    b.apply("W", 3, publish_entry(3, "w.x", "w3"), ["n1", "n2"], t_ms=3)
    return b.write(), {"tampered_line": tampered_line}


def clean_b(root: Path) -> Path:
    b = RunBuilder(root)
    b.open_stream("S", allow_msg_ttl=True)
    for i in (1, 2, 3):
        b.apply("S", i, publish_entry(i, "s.x", f"b{i}"), t_ms=i)
    b.apply("S", 4, ExpireEntry(3_000_000_000 + 1_900_000_000_000_000_000), t_ms=4)
    return b.write()


@pytest.fixture(scope="module")
def runs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("agreement")
    a, facts = planted_a(root / "A")
    b = clean_b(root / "B")
    loaded = load_runs(spark, [a, b])
    results, frames = analyze_agreement(loaded.log)
    return {
        "a": str(a.resolve()),
        "b": str(b.resolve()),
        "loaded": loaded,
        "results": results,
        "frames": frames,
        **facts,
    }


def test_the_tampered_digest_is_the_only_replay_mismatch(runs: dict[str, Any]) -> None:
    replay_results = runs["results"]["replay"]
    assert replay_results["findings"] == 1
    (finding,) = replay_results["examples"]
    assert (finding["run"], finding["node"], finding["stream"]) == (runs["a"], "n2", "T")
    assert (finding["op"], finding["index"], finding["line"]) == ("entry", 3, runs["tampered_line"])
    assert finding["reported"] == WRONG_DIGEST
    assert finding["replayed"] != WRONG_DIGEST and len(finding["replayed"]) == 64


def test_split_brain_reports_the_first_diverging_index_with_each_digest(
    runs: dict[str, Any],
) -> None:
    sb = runs["results"]["split_brain"]
    assert sb["diverging_indexes"] == 3  # S at 5 and 6, T at 3
    first = {(f["run"], f["stream"]): f for f in sb["first"]}
    assert set(first) == {(runs["a"], "S"), (runs["a"], "T")}
    fork = first[(runs["a"], "S")]
    assert fork["index"] == 5 and fork["nodes"] == 3
    digests = {d["node"]: d["digest"] for d in fork["digests"]}
    assert digests["n1"] == digests["n2"] != digests["n3"]
    assert first[(runs["a"], "T")]["index"] == 3
    forks = runs["results"]["entry_divergence"]
    assert forks["count"] == 1
    assert forks["examples"][0]["index"] == 5 and forks["examples"][0]["stream"] == "S"
    assert runs["results"]["findings"] == 1 + 3 + 1 + 1  # + the lone entry of W


def test_an_entry_where_other_logs_skip_the_index_is_a_lone_entry(runs: dict[str, Any]) -> None:
    lone = runs["results"]["lone_entries"]
    assert lone["count"] == 1
    assert lone["examples"] == [
        {"run": runs["a"], "stream": "W", "index": 2, "nodes": ["n3"], "skipped_by": 2}
    ]
    w = next(s for s in runs["results"]["streams"] if s["stream"] == "W")
    assert w["diverging"] == 0  # no index where both sides reported a digest


def test_a_reseed_uses_the_entries_most_nodes_applied(runs: dict[str, Any]) -> None:
    loaded: Loaded = runs["loaded"]
    canon = canonical_entries(loaded.log.filter(f"run = '{runs['a']}'"))
    chosen = {(r["stream"], r["index"]): r["entry"] for r in canon.collect()}
    majority = base64.b64encode(encode_entry(publish_entry(5, "s.x", "e"))).decode()
    assert chosen[("S", 5)] == majority
    # n3's lone entry at W 2 is outvoted by the two logs that skip index 2
    assert sorted(i for s, i in chosen if s == "W") == [1, 3]


def test_restarts_and_a_state_transfer_replay_cleanly(runs: dict[str, Any]) -> None:
    by_node = {(r["run"], r["node"], r["stream"]): r for r in runs["frames"]["replay_by_node"]}
    for node in ("n1", "n2", "n3"):
        row = by_node[(runs["a"], node, "U")]
        assert row["mismatched"] == 0 and row["unreplayable"] == 0, row
    assert by_node[(runs["a"], "n3", "U")]["seeded"] == 2  # the transfer row and entry 6
    assert by_node[(runs["a"], "n1", "U")]["seeded"] == 0  # reopened where its replay was
    assert by_node[(runs["a"], "n2", "U")]["rows"] == 1 + 3 + 1 + 3 + 2 + 1
    streams = {(s["run"], s["stream"]): s for s in runs["results"]["streams"]}
    u = streams[(runs["a"], "U")]
    assert u["diverging"] == 0 and u["compared"] == u["indexes"] == 7  # indexes 0..6


def test_a_transfer_past_the_logged_entries_stops_that_replay(runs: dict[str, Any]) -> None:
    errors = runs["results"]["replay"]["errors"]
    assert errors["count"] == 1
    (err,) = errors["examples"]
    assert (err["stream"], err["op"], err["index"]) == ("V", "transfer", 3)
    assert "only through 1" in err["error"]
    v = next(r for r in runs["frames"]["replay_by_node"] if r["stream"] == "V")
    assert v["unreplayable"] == 2 and v["matched"] == 2  # open and entry 1 matched


def test_the_clean_run_has_no_finding(runs: dict[str, Any]) -> None:
    clean = [s for s in runs["results"]["streams"] if s["run"] == runs["b"]]
    assert len(clean) == 1
    (s,) = clean
    assert s["diverging"] == 0 and s["first_diverging_index"] is None
    assert s["nodes"] == 3 and s["indexes"] == s["compared"] == s["all_nodes"] == 5
    b_rows = [r for r in runs["frames"]["replay_by_node"] if r["run"] == runs["b"]]
    assert sum(r["matched"] for r in b_rows) == 3 * 5
    assert all(r["mismatched"] == 0 and r["unreplayable"] == 0 for r in b_rows)


def test_replay_frame_has_one_row_per_replay_row(runs: dict[str, Any]) -> None:
    # counted on disk, not by Spark: the replay must neither drop nor invent a row
    want: dict[tuple[str, str, str], int] = {}
    for run in (runs["a"], runs["b"]):
        for log in sorted(Path(run, "nodes").glob("*/log.jsonl")):
            for line in log.read_text().splitlines():
                row = json.loads(line)
                if row["op"] in ("open", "entry", "transfer"):
                    key = (run, row["node"], row["stream"])
                    want[key] = want.get(key, 0) + 1
    got = {(r["run"], r["node"], r["stream"]): r["rows"] for r in runs["frames"]["replay_by_node"]}
    assert got == want
    assert runs["results"]["replay"]["rows"] == sum(want.values())


# --- the replay itself, without Spark ---------------------------------------------------------


def _rows(b: RunBuilder, node: str) -> list[dict[str, Any]]:
    return [
        {**r, "line": i, "config": json.dumps(r.get("config")) if "config" in r else None}
        for i, r in enumerate(b.logs[node], start=1)
        if r["op"] in ("open", "entry", "transfer")
    ]


def test_replay_node_matches_the_engine_and_stops_at_bad_rows(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, ["n1"])
    b.open_stream("S")
    for i in (1, 2):
        b.apply("S", i, publish_entry(i, "s.x", f"m{i}"), t_ms=i)
    rows = _rows(b, "n1")
    out = list(replay_node(rows))
    assert [(o[0], o[2]) for o in out] == [("open", 0), ("entry", 1), ("entry", 2)]
    assert all(o[3] == o[4] and o[6] is None for o in out)

    # an entry at an index not after the applied one: the engine refuses, the replay stops
    again = [*rows, {**rows[-1], "line": 99}]
    tail = list(replay_node(again))[-1]
    assert tail[4] is None and tail[6] is not None and "AssertionError" in tail[6]

    # bytes that are not an entry
    bad = {**rows[-1], "line": 100, "index": 3, "entry": base64.b64encode(b"\x01\x09").decode()}
    tail = list(replay_node([*rows, bad]))[-1]
    assert tail[4] is None and "EntryDecodeError" in (tail[6] or "")

    # a fresh open at index 0 starts over and tracks the node again
    restart = {**rows[0], "line": 101}
    entry1 = {**rows[1], "line": 102}
    out = list(replay_node([*rows, bad, restart, entry1]))
    assert out[-1][4] == out[-1][3] and out[-1][6] is None


def test_expire_entries_replay_like_the_server(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, ["n1"])
    b.open_stream("S", allow_msg_ttl=True, subject_delete_marker_ttl=1_000_000_000)
    hdr = b"NATS/1.0\r\nNats-TTL: 1s\r\n\r\n"
    b.apply("S", 1, publish_entry(0, "s.x", "m1", hdr=hdr), t_ms=0)
    b.apply("S", 2, ExpireEntry(ns(2000)), t_ms=2000)
    ops = [r["op"] for r in b.logs["n1"]]
    assert "expire" in ops and "marker" in ops
    out = list(replay_node(_rows(b, "n1")))
    assert all(o[3] == o[4] for o in out)
    assert encode_entry(ExpireEntry(5))[1] == 4  # writes.py relies on the type byte
