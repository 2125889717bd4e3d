"""Hypothesis: random interleavings of publishes (with and without TTLs), expire entries at
random times, deletes, subject purges and restarts, checked against a plain reference model.

The model keeps every live message in a dict and finds due messages by scanning them all, which
is what the engine's deadline index must be equivalent to: after each ``ExpireEntry(ts)`` exactly
the messages past their TTL deadline or past max_age (unless ``never``) are gone, markers stand
where the last message of a subject went, ``next_expiry_ns`` is the earliest deadline left, and
replaying the log gives the same digest.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.ttl import marker_header
from tests.engine.stream.harness import T0_NS, Harness, S, hdr, make_config

SUBJECTS = ("S.a", "S.b")  # few subjects: markers need a subject's last message to expire
TTL_CHOICES: tuple[tuple[str | None, int], ...] = (
    (None, 0),
    ("1s", 1),
    ("2s", 2),
    ("3", 3),
    ("1.5s", 1),
    ("5s", 5),
    ("never", -1),
    ("00", 0),
)
STEP_NS = S // 4
MS = 1_000_000


@dataclass
class Msg:
    subject: str
    ts_ns: int
    ttl_s: int  # 0 none, -1 never, > 0 seconds (after the marker floor)
    marker: bool = False


@dataclass
class Model:
    max_age_ns: int
    marker_s: int
    per_subject_max: int
    msgs: dict[int, Msg] = field(default_factory=dict)
    last_seq: int = 0
    last_ts_ns: int = 0

    def count(self, subject: str) -> int:
        return sum(1 for m in self.msgs.values() if m.subject == subject)

    def store(self, msg: Msg) -> int:
        self.last_seq += 1
        self.last_ts_ns = msg.ts_ns
        self.msgs[self.last_seq] = msg
        if self.per_subject_max > 0:
            while self.count(msg.subject) > self.per_subject_max:
                del self.msgs[min(s for s, m in self.msgs.items() if m.subject == msg.subject)]
        return self.last_seq

    def publish(self, subject: str, ttl_s: int, now_ns: int) -> int:
        if 0 < ttl_s < self.marker_s and self.per_subject_max != 1:
            ttl_s = self.marker_s
        return self.store(Msg(subject, max(now_ns, self.last_ts_ns), ttl_s))

    def deadline(self, msg: Msg) -> int | None:
        return msg.ts_ns + msg.ttl_s * S if msg.ttl_s > 0 else None

    def expire(self, now_ns: int) -> list[int]:
        by_age = sorted(
            seq
            for seq, m in self.msgs.items()
            if self.max_age_ns > 0 and m.ttl_s != -1 and m.ts_ns <= now_ns - self.max_age_ns
        )
        removed = [seq for seq in by_age if self._expire_one(seq, now_ns)]
        by_ttl = sorted(
            seq
            for seq, m in self.msgs.items()
            if (d := self.deadline(m)) is not None and d <= now_ns
        )
        return removed + [seq for seq in by_ttl if self._expire_one(seq, now_ns)]

    def _expire_one(self, seq: int, now_ns: int) -> bool:
        msg = self.msgs.get(seq)
        if msg is None:
            return False
        if self.marker_s > 0 and self.count(msg.subject) == 1 and not msg.marker:
            ts = max(now_ns, self.last_ts_ns)
            self.store(Msg(msg.subject, ts, self.marker_s, marker=True))
        self.msgs.pop(seq, None)  # (with one message per subject the marker's limit did it)
        return True

    def next_expiry_ns(self) -> int | None:
        times = [d for m in self.msgs.values() if (d := self.deadline(m)) is not None]
        if self.max_age_ns > 0:
            times += [m.ts_ns + self.max_age_ns for m in self.msgs.values() if m.ttl_s != -1]
        return min(times) if times else None


PUB = st.tuples(
    st.just("pub"), st.sampled_from(SUBJECTS), st.sampled_from(TTL_CHOICES), st.integers(0, 8)
)
EXPIRE = st.tuples(st.just("expire"), st.integers(0, 16))
# one_of picks a branch uniformly: publishes and expiries are listed more than once.
OPS = st.one_of(
    PUB,
    PUB,
    PUB,
    EXPIRE,
    EXPIRE,
    st.tuples(st.just("delete"), st.integers(0, 50)),
    st.tuples(st.just("purge"), st.sampled_from(SUBJECTS)),
    st.tuples(st.just("reopen")),
)
CONFIGS = st.tuples(
    st.sampled_from([0, 3 * S]),  # max_age
    st.sampled_from([0, 2]),  # marker TTL, seconds
    st.sampled_from([-1, 1, 2]),  # max_msgs_per_subject
)


def _check(h: Harness, model: Model) -> None:
    live = [(m.seq, m.subject, m.ts_ns) for m in h.store.scan()]
    assert live == [(s, m.subject, m.ts_ns) for s, m in sorted(model.msgs.items())]
    for seq, msg in model.msgs.items():
        if msg.marker:
            stored = h.store.load(seq)
            assert stored is not None and stored.hdr == marker_header(model.marker_s)
    assert h.stream.next_expiry_ns() == model.next_expiry_ns()
    assert h.stream.state().last_seq == model.last_seq


def _run(store_kind: str, config: tuple[int, int, int], ops: list[tuple[object, ...]]) -> None:
    max_age_ns, marker_s, per_subject_max = config
    overrides: dict[str, object] = {"allow_msg_ttl": True, "max_msgs_per_subject": per_subject_max}
    if max_age_ns:
        overrides.update(max_age=max_age_ns, duplicate_window=max_age_ns)
    if marker_s:
        overrides.update(subject_delete_marker_ttl=marker_s * S, allow_rollup_hdrs=True)
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(store_kind, Path(tmp) / "store", make_config(**overrides))
        model = Model(max_age_ns, marker_s, per_subject_max)
        now_ns = T0_NS
        try:
            for op in ops:
                if op[0] == "pub":
                    _, subject, ttl, steps = op
                    ttl_text, ttl_s = cast(tuple[str | None, int], ttl)
                    now_ns += cast(int, steps) * STEP_NS
                    block = hdr(("Nats-TTL", ttl_text)) if ttl_text is not None else b""
                    result = h.publish(str(subject), headers=block, ts_ns=now_ns)
                    assert result.error is None
                    assert result.seq == model.publish(str(subject), ttl_s, now_ns)
                elif op[0] == "expire":
                    assert isinstance(op[1], int)
                    now_ns += op[1] * STEP_NS + MS
                    assert h.expire(now_ns) == model.expire(now_ns)
                elif op[0] == "delete":
                    assert isinstance(op[1], int)
                    seqs = sorted(model.msgs)
                    if seqs:
                        seq = seqs[op[1] % len(seqs)]
                        assert h.delete(seq) is None
                        del model.msgs[seq]
                elif op[0] == "purge":
                    subject = op[1]
                    purged = [s for s, m in model.msgs.items() if m.subject == subject]
                    assert h.purge(str(subject)) == len(purged)
                    for seq in purged:
                        del model.msgs[seq]
                else:
                    h.reopen()
                _check(h, model)
            assert h.replay_into_fresh().digest() == h.stream.digest()
        finally:
            h.close()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(config=CONFIGS, ops=st.lists(OPS, max_size=40))
def test_expiry_matches_the_model_memory(
    config: tuple[int, int, int], ops: list[tuple[object, ...]]
) -> None:
    _run("memory", config, ops)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=CONFIGS, ops=st.lists(OPS, max_size=25))
def test_expiry_matches_the_model_file_store_with_restarts(
    config: tuple[int, int, int], ops: list[tuple[object, ...]]
) -> None:
    _run("file", config, ops)
