"""Micro-benchmarks of the engine's two hot paths, without a server or a socket in the way.

Owns: timing (1) ``Stream.apply`` of publish entries of many small messages (the group commit the
stream host proposes), and (2) one Direct Get at a time (``engine.direct_get.direct_get``) in the
request shapes clients send most: ``{"seq":N}`` (the load generator), ``{"seq": N}`` (nats-py's
``get_msg``), and a subject-appended last-by-subject get (KV get), on a memory store and on a file
store. Results are printed as microseconds per message / per request. Run it with
``python -m bench.engine_micro`` from the project root (``--quick`` for a short run).

Must never: touch anything but the temporary directories it creates, or pick sequences from the
clock (a fixed seed chooses them, so runs are comparable).
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from cluster.cli import GC_THRESHOLDS
from engine.direct_get import direct_get
from engine.entries import InboundMsg, PublishEntry
from engine.filestore import FileStore
from engine.memstore import MemoryStore
from engine.store import MessageStore
from engine.stream import Stream
from protocol.stream_config import normalize_create

STREAM_NAME = "MICRO"
SUBJECT_PREFIX = "bench"
SUBJECT_COUNT = 16
PAYLOAD_BYTES = 128
ENTRY_MSGS = 1_000
PUBLISH_ENTRIES = 20
PUBLISH_ENTRIES_QUICK = 5
GET_REQUESTS = 20_000
GET_REQUESTS_QUICK = 5_000
GET_STREAM_ENTRIES = 20  # the stream Direct Get reads: 20,000 messages (as bench.loadgen)
REPEATS = 5  # each number is the best of this many runs: the machine is shared and noisy
SEED = 20_251_122
BASE_TS_NS = 1_763_800_000_000_000_000  # a fixed instant: the engine never reads a clock
TS_STEP_NS = 1_000_003  # entries a little over 1 ms apart, so timestamps have fractions
STORE_KINDS = ("memory", "file")

T = TypeVar("T")


@dataclass(frozen=True)
class Measurement:
    name: str
    store: str
    us_per_op: float
    ops: int


@contextmanager
def _stream(kind: str) -> Iterator[tuple[Stream, MessageStore]]:
    body = (
        f'{{"name":"{STREAM_NAME}","subjects":["{SUBJECT_PREFIX}.>"],'
        f'"storage":"{kind}","allow_direct":true}}'
    ).encode()
    cfg, _pedantic = normalize_create(STREAM_NAME, body, existing={})
    tmp = tempfile.mkdtemp(prefix="engine-micro-")
    store: MessageStore = FileStore(tmp) if kind == "file" else MemoryStore()
    try:
        yield Stream(cfg, store, BASE_TS_NS), store
    finally:
        store.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _entries(count: int, *, msg_ids: bool = False, first: int = 0) -> list[PublishEntry]:
    """``count`` entries of ENTRY_MSGS messages; ``msg_ids`` gives each a unique Nats-Msg-Id
    (numbered from ``first``), which takes the full header checks and the dedupe window."""
    payload = b"x" * PAYLOAD_BYTES
    entries = []
    for e in range(count):
        msgs = tuple(
            InboundMsg(
                f"{SUBJECT_PREFIX}.{i % SUBJECT_COUNT}",
                b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % (first + e * ENTRY_MSGS + i)
                if msg_ids
                else b"",
                payload,
            )
            for i in range(ENTRY_MSGS)
        )
        entries.append(PublishEntry(BASE_TS_NS + e * TS_STEP_NS, msgs))
    return entries


def _publish(stream: Stream, store: MessageStore, entries: list[PublishEntry]) -> float:
    """Seconds to apply every entry, each followed by a flush and an fsync (a group commit)."""
    start = stream.applied_index
    began = time.perf_counter()
    for i, entry in enumerate(entries, start + 1):
        results = stream.apply(i, entry)
        store.flush()
        store.fsync()
        assert isinstance(results, list) and len(results) == ENTRY_MSGS
    return time.perf_counter() - began


def bench_publish(kind: str, entry_count: int, *, msg_ids: bool = False) -> Measurement:
    """Each repeat publishes into a fresh stream (a warm-up entry first)."""
    warm_up = _entries(1, msg_ids=msg_ids)
    entries = _entries(entry_count, msg_ids=msg_ids, first=ENTRY_MSGS)
    best_s = float("inf")
    for _ in range(REPEATS):
        with _stream(kind) as (stream, store):
            _publish(stream, store, warm_up)
            best_s = min(best_s, _publish(stream, store, entries))
    ops = entry_count * ENTRY_MSGS
    name = "apply publish w/ msg id" if msg_ids else "apply publish (per msg)"
    return Measurement(name, kind, best_s / ops * 1e6, ops)


def _time_gets(call: Callable[[T], object], args: list[T]) -> float:
    """Best of REPEATS runs over every argument, in seconds."""
    best_s = float("inf")
    for _ in range(REPEATS):
        began = time.perf_counter()
        for arg in args:
            call(arg)
        best_s = min(best_s, time.perf_counter() - began)
    return best_s


def bench_direct_get(kind: str, requests: int) -> list[Measurement]:
    rng = random.Random(SEED)
    with _stream(kind) as (stream, store):
        _publish(stream, store, _entries(GET_STREAM_ENTRIES))
        last = stream.last_seq
        seqs = [rng.randint(1, last) for _ in range(requests)]
        subjects = [f"{SUBJECT_PREFIX}.{rng.randrange(SUBJECT_COUNT)}" for _ in range(requests)]

        def by_seq(body: bytes) -> None:
            replies = direct_get(
                stream,
                reply_stream_name=STREAM_NAME,
                request_hdr=None,
                payload=body,
                subject_key=None,
            )
            assert len(replies) == 1 and replies[0].data, replies

        compact = [b'{"seq":%d}' % s for s in seqs]
        spaced = [b'{"seq": %d}' % s for s in seqs]  # what nats-py's get_msg sends
        out: list[Measurement] = []
        for name, bodies in (("direct get {seq:N}", compact), ("direct get {seq: N}", spaced)):
            elapsed = _time_gets(by_seq, bodies)
            out.append(Measurement(name, kind, elapsed / requests * 1e6, requests))

        def by_subject(i: int) -> None:
            replies = direct_get(
                stream,
                reply_stream_name=STREAM_NAME,
                request_hdr=None,
                payload=b"",
                subject_key=subjects[i],
            )
            assert len(replies) == 1 and replies[0].data, replies

        elapsed = _time_gets(by_subject, list(range(requests)))
        out.append(Measurement("direct get last_by_subj", kind, elapsed / requests * 1e6, requests))
    return out


def run(quick: bool) -> list[Measurement]:
    entries = PUBLISH_ENTRIES_QUICK if quick else PUBLISH_ENTRIES
    requests = GET_REQUESTS_QUICK if quick else GET_REQUESTS
    results: list[Measurement] = []
    for kind in STORE_KINDS:
        results.append(bench_publish(kind, entries))
        results.append(bench_publish(kind, entries, msg_ids=True))
        results.extend(bench_direct_get(kind, requests))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer entries and requests")
    args = parser.parse_args(argv)
    # the server's collector settings (cluster/cli.py): with CPython's defaults the cyclic
    # collector made a memory-store apply 1.44 -> 1.82 µs per message (3.37 -> 4.38 with a
    # Nats-Msg-Id), and more the more messages the stream holds: not what the server pays
    gc.set_threshold(*GC_THRESHOLDS)
    print(f"{'path':<28} {'store':<7} {'us/op':>8} {'ops':>8}")
    for m in run(args.quick):
        print(f"{m.name:<28} {m.store:<7} {m.us_per_op:>8.2f} {m.ops:>8}", flush=True)


if __name__ == "__main__":
    main()
