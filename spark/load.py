"""Run directories (issue 6's contract) into Spark DataFrames, many runs at once.

A run directory holds ``run.json``, ``history.jsonl``, ``nodes/<node>/log.jsonl`` (absent for a
nats-server run) and ``leaders.jsonl`` (absent in older runs). ``load_runs`` reads every such
file of every run in one Spark text scan, numbers the lines of each file (``line``, 1-based, file
order — the replay order of a node's log, whose indexes restart after a node restart), parses
them with fixed schemas in the JVM and tags each row with its ``run`` (the resolved run
directory, as a string). The frames:

* ``history``: ``run, line, index, time_ns, process, node, type, f, value`` (``value`` the raw
  JSON object) and, pulled out of ``value``: ``stream, id, subject, ttl, seq, count, ids, seqs,
  batch, abandon, abandoned, req_seq, req_last_by_subj, not_found, served_by,
  expected_last_subject_seq, first_seq, last_seq, messages, missing, unknown`` (client ops) and
  ``mode, nemesis_nodes`` (nemesis ops, whose values are free-form). ``process`` is a string
  (``"3"``, ``"nemesis"``).
* ``log``: ``run, line, node, stream, index, term, op, seq, subject, id, batch, ts_ns,
  applied_ns, reason, through, config, created_ns, digest, entry`` (``config`` raw JSON).
* ``leaders``: ``run, line, time_ns, stream, leader``.
* ``meta``: one row per run from ``run.json``: ``run, name, nodes, seed, workload, nemeses,
  system, started_ns, ended_ns``.

Bad input is a ``LoadError`` naming the file and line and saying what is wrong with it, never a
stack trace. Tolerated, and listed in ``Loaded.dropped``: an unreadable *last* line of a file (a
kill cut the writer mid-line), and a node-log line that is a torn row with the next
incarnation's first row glued to it (the restarted node appended to the unterminated line): the
glued row is recovered, the torn prefix dropped.

Must never: open sockets, write into the run directory, or silently skip a bad line that is
neither of the two tolerated kinds.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from jepsen_like.contract import (
    ENTRY,
    HISTORY_FILE,
    LEADERS_FILE,
    LOG_FILE,
    LOG_OPS,
    LOG_ROW_KEYS,
    MESSAGE_OPS,
    NEMESIS_PROCESS,
    NODES_DIR,
    OP_TYPES,
    OPEN,
    PURGE,
    RUN_FILE,
    TRANSFER,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

KIND_HISTORY: Final = "history"
KIND_LOG: Final = "log"
KIND_LEADERS: Final = "leaders"

# bad lines fetched to the driver to explain or recover; more than this many is an error anyway
# (a healthy run has at most one torn line per file end and per node restart)
MAX_BAD_LINES: Final = 1000
MAX_ERRORS_SHOWN: Final = 5
TEXT_SHOWN: Final = 120  # characters of a bad line quoted in an error
CORRUPT_COLUMN: Final = "_corrupt"
GLOB_CHARS: Final = "\\[]{}*?"  # Hadoop expands these in paths: escaped for literal names


class LoadError(ValueError):
    """A run directory cannot be analysed: the message names the file (and line)."""


@dataclass(frozen=True)
class RunFiles:
    """The files of one run directory (found by ``discover_run``)."""

    run: str  # the run's key in every frame: the resolved directory
    path: Path
    meta: dict[str, Any]
    history: Path
    logs: dict[str, Path]  # node name (its directory) -> log.jsonl
    leaders: Path | None


@dataclass
class Loaded:
    runs: list[RunFiles]
    history: DataFrame
    log: DataFrame
    leaders: DataFrame
    meta: DataFrame
    # lines ignored: {"file", "line", "reason", "recovered"} (recovered: a glued row was kept)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    cached: list[DataFrame] = field(default_factory=list)  # the parse the frames are views of

    def unpersist(self) -> None:
        """Drop the cached parse (the frames stay usable: Spark re-reads the files)."""
        for frame in self.cached:
            frame.unpersist()


# --- run directories --------------------------------------------------------------------------


def discover_run(path: Path) -> RunFiles:
    """The files of the run directory ``path``; a ``LoadError`` if it is not one."""
    if not path.is_dir():
        raise LoadError(f"{path}: not a directory (a run directory made by `jetraft chaos`)")
    run_file = path / RUN_FILE
    history = path / HISTORY_FILE
    for required in (run_file, history):
        if not required.is_file():
            raise LoadError(f"{required}: missing (is {path} a run directory?)")
    meta = read_run_json(run_file)
    nodes_dir = path / NODES_DIR
    logs: dict[str, Path] = {}
    if nodes_dir.is_dir():
        for node_dir in sorted(p for p in nodes_dir.iterdir() if p.is_dir()):
            log = node_dir / LOG_FILE
            if log.is_file():
                logs[node_dir.name] = log
    leaders = path / LEADERS_FILE
    resolved = path.resolve()
    return RunFiles(
        run=str(resolved),
        path=resolved,
        meta=meta,
        history=history.resolve(),
        logs={n: p.resolve() for n, p in logs.items()},
        leaders=leaders.resolve() if leaders.is_file() else None,
    )


def read_run_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LoadError(f"{path}: cannot be read: {exc}") from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LoadError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(meta, dict):
        raise LoadError(f"{path}:1: not a JSON object")
    for key, kind in (("nodes", list), ("nemeses", list)):
        if key in meta and not isinstance(meta[key], kind):
            raise LoadError(f"{path}: {key!r} is not a list")
    return meta


# --- line validation (the driver's side: explains what the JVM parse rejected) --------------

_INT: Final = "an integer"
_STR: Final = "a string"
_SCALAR: Final = "a string or an integer"
_REQUIRED: Final[dict[str, dict[str, str]]] = {
    KIND_HISTORY: {"index": _INT, "time_ns": _INT, "process": _SCALAR, "type": _STR, "f": _STR},
    KIND_LOG: {"node": _STR, "stream": _STR, "index": _INT, "op": _STR},
    KIND_LEADERS: {"time_ns": _INT, "stream": _STR},
}
_LOG_OP_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    **{op: ("seq",) for op in MESSAGE_OPS},
    OPEN: ("config", "created_ns", "digest"),
    ENTRY: ("entry", "digest"),
    TRANSFER: ("digest",),
}
_TYPED: Final[dict[str, dict[str, str]]] = {
    KIND_HISTORY: {},
    KIND_LOG: {
        "term": _INT,
        "seq": _INT,
        "ts_ns": _INT,
        "applied_ns": _INT,
        "through": _INT,
        "created_ns": _INT,
        "digest": _STR,
        "entry": _STR,
        "subject": _STR,
        "id": _STR,
        "batch": _STR,
        "reason": _STR,
    },
    KIND_LEADERS: {"leader": _STR},
}
_VALUE_TYPED: Final[dict[str, str]] = {
    "stream": _STR,
    "id": _STR,
    "subject": _STR,
    "seq": _INT,
    "count": _INT,
    "batch": _STR,
    "served_by": _STR,
    "expected_last_subject_seq": _INT,
    "first_seq": _INT,
    "last_seq": _INT,
}


def _type_ok(value: Any, kind: str) -> bool:
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _STR:
        return isinstance(value, str)
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def explain_line(kind: str, text: str) -> str | None:
    """What is wrong with ``text`` as a line of a ``kind`` file, or None if nothing is."""
    try:
        row = json.loads(text)
    except ValueError as exc:
        return f"not JSON ({exc})" if text.strip() else "empty line"
    if not isinstance(row, dict):
        return "not a JSON object"
    for key, want in _REQUIRED[kind].items():
        if row.get(key) is None:
            return f"missing {key!r}"
        if not _type_ok(row[key], want):
            return f"{key!r} is not {want}"
    for key, want in _TYPED[kind].items():
        if row.get(key) is not None and not _type_ok(row[key], want):
            return f"{key!r} is not {want}"
    if kind == KIND_HISTORY:
        if row["type"] not in OP_TYPES:
            return f"'type' {row['type']!r} is not one of {', '.join(OP_TYPES)}"
        value = row.get("value")
        if str(row["process"]) != NEMESIS_PROCESS and value is not None:
            if not isinstance(value, dict):
                return "'value' is not a JSON object"
            for key, want in _VALUE_TYPED.items():
                if value.get(key) is not None and not _type_ok(value[key], want):
                    return f"'value.{key}' is not {want}"
    if kind == KIND_LOG:
        op = row["op"]
        if op not in LOG_OPS:
            return f"'op' {op!r} is not one of {', '.join(LOG_OPS)}"
        for key in _LOG_OP_FIELDS.get(op, ()):
            if row.get(key) is None:
                return f"a {op!r} row without {key!r}"
        if op == PURGE and row.get("seq") is None and row.get("through") is None:
            return "a 'purge' row without 'seq' or 'through'"
    return None


def recover_glued(kind: str, text: str) -> str | None:
    """The valid row glued after a torn prefix on one line, or None if there is none."""
    start = text.find('{"', 1)
    while start > 0:
        candidate = text[start:]
        if explain_line(kind, candidate) is None:
            return candidate
        start = text.find('{"', start + 1)
    return None


# --- schemas ----------------------------------------------------------------------------------


_C: Final = CORRUPT_COLUMN
# JSON fields as Spark DDL; a field typed STRING keeps a nested object as its JSON text
SCHEMAS: Final[dict[str, str]] = {
    "history": "index BIGINT, time_ns BIGINT, process STRING, node STRING, type STRING, "
    f"f STRING, value STRING, {_C} STRING",
    "value": "stream STRING, id STRING, subject STRING, ttl STRING, seq BIGINT, count BIGINT, "
    "ids ARRAY<STRING>, seqs ARRAY<BIGINT>, batch STRING, abandon BOOLEAN, abandoned BOOLEAN, "
    "request STRUCT<seq: BIGINT, last_by_subj: STRING>, not_found BOOLEAN, served_by STRING, "
    "expected_last_subject_seq BIGINT, first_seq BIGINT, last_seq BIGINT, "
    "messages ARRAY<STRUCT<seq: BIGINT, id: STRING, subject: STRING>>, "
    f"missing ARRAY<BIGINT>, unknown ARRAY<BIGINT>, {_C} STRING",
    "nemesis": "mode STRING, nodes ARRAY<STRING>",
    "log": "node STRING, stream STRING, index BIGINT, term BIGINT, op STRING, seq BIGINT, "
    "subject STRING, id STRING, batch STRING, ts_ns BIGINT, applied_ns BIGINT, reason STRING, "
    f"through BIGINT, config STRING, created_ns BIGINT, digest STRING, entry STRING, {_C} STRING",
    "leaders": f"time_ns BIGINT, stream STRING, leader STRING, {_C} STRING",
}


LOG_COLUMNS: Final = (
    "run",
    "line",
    *LOG_ROW_KEYS,
    "reason",
    "through",
    "config",
    "created_ns",
    "digest",
    "entry",
)
HISTORY_VALUE_COLUMNS: Final = (
    "stream",
    "id",
    "subject",
    "ttl",
    "seq",
    "count",
    "ids",
    "seqs",
    "batch",
    "abandon",
    "abandoned",
    "not_found",
    "served_by",
    "expected_last_subject_seq",
    "first_seq",
    "last_seq",
    "messages",
    "missing",
    "unknown",
)


# what a parsed frame carries besides its fields, for explaining bad lines (dropped at the end)
_CARRIED: Final = ("_file", "_last", "_kind", "run", "line")
_LINE_COLUMNS: Final = ("_file", "_last", "_text", "_kind", "run", "line")  # read_lines


def _json_opts() -> dict[str, str]:
    return {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}


def parse_history(lines: DataFrame) -> DataFrame:
    """``run, line, last, value`` text lines -> history rows with a ``_valid`` column."""
    from pyspark.sql import functions as F

    sch = SCHEMAS
    p = lines.select(*_CARRIED, F.from_json("_text", sch["history"], _json_opts()).alias("p"))
    p = p.select(*_CARRIED, "p.*")
    client = F.coalesce(F.col("process") != F.lit(NEMESIS_PROCESS), F.lit(True))
    v = F.when(client, F.from_json("value", sch["value"], _json_opts()))
    nem = F.when(~client, F.from_json("value", sch["nemesis"], {"mode": "PERMISSIVE"}))
    p = p.withColumn("v", v).withColumn("nem", nem)
    valid = (
        F.col(CORRUPT_COLUMN).isNull()
        & F.col("v." + CORRUPT_COLUMN).isNull()
        & _all_not_null("index", "time_ns", "process", "type", "f")
        & F.col("type").isin(*OP_TYPES)
    )
    cols = [F.col(f"v.{c}").alias(c) for c in HISTORY_VALUE_COLUMNS]
    return p.select(
        *_CARRIED,
        "index",
        "time_ns",
        "process",
        "node",
        "type",
        "f",
        "value",
        *cols,
        F.col("v.request.seq").alias("req_seq"),
        F.col("v.request.last_by_subj").alias("req_last_by_subj"),
        F.col("nem.mode").alias("mode"),
        F.col("nem.nodes").alias("nemesis_nodes"),
        F.coalesce(valid, F.lit(False)).alias("_valid"),
    )


def parse_log(lines: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    p = lines.select(*_CARRIED, F.from_json("_text", SCHEMAS["log"], _json_opts()).alias("p"))
    p = p.select(*_CARRIED, "p.*")
    op = F.col("op")
    per_op = (
        F.when(op.isin(*MESSAGE_OPS), F.col("seq").isNotNull())
        .when(op == PURGE, F.col("seq").isNotNull() | F.col("through").isNotNull())
        .when(op == OPEN, _all_not_null("config", "created_ns", "digest"))
        .when(op == ENTRY, _all_not_null("entry", "digest"))
        .when(op == TRANSFER, F.col("digest").isNotNull())
        .otherwise(F.lit(False))
    )
    valid = (
        F.col(CORRUPT_COLUMN).isNull()
        & _all_not_null("node", "stream", "index", "op")
        & op.isin(*LOG_OPS)
        & per_op
    )
    return p.select(*_CARRIED[:3], *LOG_COLUMNS, F.coalesce(valid, F.lit(False)).alias("_valid"))


def parse_leaders(lines: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    sch = SCHEMAS["leaders"]
    p = lines.select(*_CARRIED, F.from_json("_text", sch, _json_opts()).alias("p"))
    p = p.select(*_CARRIED, "p.*")
    valid = F.col(CORRUPT_COLUMN).isNull() & _all_not_null("time_ns", "stream")
    return p.select(
        *_CARRIED, "time_ns", "stream", "leader", F.coalesce(valid, F.lit(False)).alias("_valid")
    )


_PARSERS: Final = {KIND_HISTORY: parse_history, KIND_LOG: parse_log, KIND_LEADERS: parse_leaders}


def _all_not_null(*names: str) -> Column:
    from pyspark.sql import functions as F

    cond = F.lit(True)
    for name in names:
        cond = cond & F.col(name).isNotNull()
    return cond


# --- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _File:
    path: Path
    kind: str
    run: str


def _escape_glob(path: Path) -> str:
    text = str(path)
    for ch in GLOB_CHARS:
        text = text.replace(ch, "\\" + ch)
    return text


def _uri_to_path(uri: str) -> Path:
    return Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path))


def read_lines(spark: SparkSession, files: Sequence[_File]) -> DataFrame:
    """One text scan of ``files``: ``run, kind, file, line, last, value`` (``line`` 1-based in
    file order, ``last`` for each file's last line)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    by_path = {f.path: f for f in files}
    raw = spark.read.text([_escape_glob(f.path) for f in files]).select(
        "value",
        F.col("_metadata.file_path").alias("fp"),
        F.col("_metadata.file_block_start").alias("bs"),
        F.monotonically_increasing_id().alias("mid"),
    )
    # a file may be split into blocks read by different tasks: a row's line is the lines of the
    # file's earlier blocks plus its position in its own block (ids are consecutive in a task)
    stats = raw.groupBy("fp", "bs").agg(F.count("*").alias("n"), F.min("mid").alias("mid0"))
    blocks: dict[str, list[tuple[int, int, int]]] = {}
    for r in stats.collect():
        blocks.setdefault(r["fp"], []).append((int(r["bs"]), int(r["n"]), int(r["mid0"])))
    rows = []
    for fp, bl in blocks.items():
        known = by_path.get(_uri_to_path(fp))
        if known is None:
            raise LoadError(f"{fp}: read by Spark but not asked for (a path Hadoop globbed?)")
        total = sum(n for _, n, _ in bl)
        base = 0
        for bs, n, mid0 in sorted(bl):
            rows.append((fp, bs, base - mid0 + 1, total, known.run, known.kind, str(known.path)))
            base += n
    schema = T.StructType(
        [
            T.StructField("fp", T.StringType()),
            T.StructField("bs", T.LongType()),
            T.StructField("offset", T.LongType()),
            T.StructField("total", T.LongType()),
            T.StructField("run", T.StringType()),
            T.StructField("kind", T.StringType()),
            T.StructField("file", T.StringType()),
        ]
    )
    offsets = spark.createDataFrame(rows, schema)
    line = F.col("mid") + F.col("offset")
    return raw.join(F.broadcast(offsets), ["fp", "bs"]).select(
        F.col("file").alias("_file"),
        (line == F.col("total")).alias("_last"),
        F.col("value").alias("_text"),
        F.col("kind").alias("_kind"),
        "run",
        line.alias("line"),
    )


def load_runs(spark: SparkSession, run_dirs: Sequence[Path]) -> Loaded:
    """Every file of every run in ``run_dirs`` as DataFrames (persisted: the analyses reuse them).
    Raises ``LoadError`` for a missing or bad file, naming it and the line."""
    from pyspark.sql import functions as F

    runs = [discover_run(Path(p)) for p in run_dirs]
    seen: set[str] = set()
    for r in runs:
        if r.run in seen:
            raise LoadError(f"{r.path}: given twice")
        seen.add(r.run)
    files: list[_File] = []
    for r in runs:
        files.append(_File(r.history, KIND_HISTORY, r.run))
        files.extend(_File(p, KIND_LOG, r.run) for p in r.logs.values())
        if r.leaders is not None:
            files.append(_File(r.leaders, KIND_LEADERS, r.run))
    lines = read_lines(spark, files)
    frames = _parse_all(lines)
    bad_lines = None
    for frame in frames.values():
        bad = frame.filter(~F.col("_valid")).select(*_CARRIED)
        bad_lines = bad if bad_lines is None else bad_lines.unionByName(bad)
    assert bad_lines is not None
    # one job parses every file into the cache and finds the bad lines (most runs have none)
    fetched = bad_lines.orderBy("_file", "line").limit(MAX_BAD_LINES + 1).collect()
    dropped: list[dict[str, Any]] = []
    if fetched:
        texts = _texts(spark, lines, [(r["_file"], int(r["line"])) for r in fetched])
        bad_rows = [{**r.asDict(), "_text": texts[(r["_file"], int(r["line"]))]} for r in fetched]
        dropped, replaced = _triage(bad_rows)
        for frame in frames.values():
            frame.unpersist()
        frames = _parse_all(_fixed_lines(spark, lines, replaced))
    result = {k: v.filter(F.col("_valid")).drop("_valid", *_CARRIED[:3]) for k, v in frames.items()}
    return Loaded(
        runs=runs,
        history=result[KIND_HISTORY],
        log=result[KIND_LOG],
        leaders=result[KIND_LEADERS],
        meta=meta_frame(spark, runs),
        dropped=dropped,
        cached=list(frames.values()),
    )


def _parse_all(lines: DataFrame) -> dict[str, DataFrame]:
    from pyspark import StorageLevel

    return {
        kind: parse(_of_kind(lines, kind)).persist(StorageLevel.MEMORY_AND_DISK)
        for kind, parse in _PARSERS.items()
    }


def _texts(
    spark: SparkSession, lines: DataFrame, keys: list[tuple[str, int]]
) -> dict[tuple[str, int], str]:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    wanted = spark.createDataFrame(
        keys,
        T.StructType([T.StructField("_file", T.StringType()), T.StructField("line", T.LongType())]),
    )
    rows = lines.join(F.broadcast(wanted), ["_file", "line"]).select("_file", "line", "_text")
    return {(r["_file"], int(r["line"])): r["_text"] for r in rows.collect()}


def _of_kind(lines: DataFrame, kind: str) -> DataFrame:
    from pyspark.sql import functions as F

    return lines.filter(F.col("_kind") == kind)


def _triage(
    bad: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[tuple[str, str, str, int, str | None]]]:
    """Tolerated bad lines (raises ``LoadError`` for the others): what was dropped, and the
    lines to replace: ``(kind, run, file, line, text to use instead or None to drop it)``."""
    errors: list[str] = []
    dropped: list[dict[str, Any]] = []
    replaced: list[tuple[str, str, str, int, str | None]] = []
    for row in bad[:MAX_BAD_LINES]:
        kind, file, line, text = row["_kind"], row["_file"], int(row["line"]), row["_text"]
        reason = explain_line(kind, text) or "rejected by Spark's JSON reader"
        # a complete row glued after a torn one is kept, even on the last line
        glued = recover_glued(kind, text) if kind == KIND_LOG else None
        if glued is not None:
            dropped.append(
                {
                    "file": file,
                    "line": line,
                    "reason": "torn row with the next row glued to it",
                    "recovered": 1,
                }
            )
            replaced.append((kind, row["run"], file, line, glued))
            continue
        if row["_last"]:
            dropped.append(
                {"file": file, "line": line, "reason": f"torn last line: {reason}", "recovered": 0}
            )
            replaced.append((kind, row["run"], file, line, None))
            continue
        shown = text if len(text) <= TEXT_SHOWN else text[:TEXT_SHOWN] + "..."
        errors.append(f"{file}:{line}: {reason}: {shown!r}")
    if len(bad) > MAX_BAD_LINES:
        errors.append(f"more than {MAX_BAD_LINES} bad lines")
    if errors:
        more = len(errors) - MAX_ERRORS_SHOWN
        shown_errors = errors[:MAX_ERRORS_SHOWN] + ([f"... and {more} more"] if more > 0 else [])
        raise LoadError("bad input:\n  " + "\n  ".join(shown_errors))
    return dropped, replaced


def _fixed_lines(
    spark: SparkSession,
    lines: DataFrame,
    replaced: list[tuple[str, str, str, int, str | None]],
) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    s = T.StringType()
    schema = T.StructType(
        [
            T.StructField("_file", s),
            T.StructField("_last", T.BooleanType()),
            T.StructField("_text", s),
            T.StructField("_kind", s),
            T.StructField("run", s),
            T.StructField("line", T.LongType()),
        ]
    )
    keys = spark.createDataFrame([(f, False, "", k, r, ln) for k, r, f, ln, _ in replaced], schema)
    kept = lines.join(F.broadcast(keys.select("_file", "line")), ["_file", "line"], "left_anti")
    glued = [(f, False, t, k, r, ln) for k, r, f, ln, t in replaced if t is not None]
    return kept.select(*_LINE_COLUMNS).unionByName(spark.createDataFrame(glued, schema))


def meta_frame(spark: SparkSession, runs: Sequence[RunFiles]) -> DataFrame:
    from pyspark.sql import types as T

    def as_int(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    rows = [
        (
            r.run,
            r.path.name,
            [str(n) for n in r.meta.get("nodes") or sorted(r.logs)],
            as_int(r.meta.get("seed")),
            str(r.meta.get("workload")) if r.meta.get("workload") is not None else None,
            [str(n) for n in r.meta.get("nemeses") or []],
            str(r.meta.get("system")) if r.meta.get("system") is not None else None,
            as_int(r.meta.get("started_ns")),
            as_int(r.meta.get("ended_ns")),
        )
        for r in runs
    ]
    s, i = T.StringType(), T.LongType()
    schema = T.StructType(
        [
            T.StructField("run", s),
            T.StructField("name", s),
            T.StructField("nodes", T.ArrayType(s)),
            T.StructField("seed", i),
            T.StructField("workload", s),
            T.StructField("nemeses", T.ArrayType(s)),
            T.StructField("system", s),
            T.StructField("started_ns", i),
            T.StructField("ended_ns", i),
        ]
    )
    return spark.createDataFrame(rows, schema)


# --- back to the driver -----------------------------------------------------------------------


def collect_findings(
    checks: Mapping[str, tuple[DataFrame, Sequence[str]]], max_examples: int
) -> dict[str, dict[str, Any]]:
    """``{name: {"count", "examples"}}`` for every check frame, in ONE Spark job (each check a
    separate job costs seconds of scheduling on a small run): the exact row count and the first
    ``max_examples`` rows in ``order`` as plain dicts."""
    from pyspark.sql import functions as F

    parts = []
    for name, (df, order) in checks.items():
        row = F.to_json(F.struct(*[F.col(c) for c in df.columns]), {"ignoreNullFields": "false"})
        parts.append(
            df.groupBy()
            .count()
            .select(F.lit(name).alias("check"), "count", F.lit(None).cast("string").alias("row"))
        )
        parts.append(
            df.orderBy(*order)
            .limit(max_examples)
            .select(
                F.lit(name).alias("check"),
                F.lit(None).cast("long").alias("count"),
                row.alias("row"),
            )
        )
    out: dict[str, dict[str, Any]] = {name: {"count": 0, "examples": []} for name in checks}
    if not parts:
        return out
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    for r in union.collect():
        if r["row"] is None:
            out[r["check"]]["count"] = int(r["count"])
        else:
            out[r["check"]]["examples"].append(json.loads(r["row"]))
    for name, (_df, order) in checks.items():
        out[name]["examples"].sort(key=lambda e: tuple(_sort_key(e.get(c)) for c in order))
    return out


def _sort_key(value: Any) -> tuple[int, Any]:
    # nulls first, as Spark's ascending order puts them
    if value is None:
        return (0, 0)
    return (1, value if isinstance(value, (int, float, str)) else json.dumps(value))
