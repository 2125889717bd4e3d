"""Stream limits and byte accounting, checked against scenarios probed on nats-server 2.15.1."""

from __future__ import annotations

import pytest

from engine.limits import msg_size_bytes
from tests.engine.stream.harness import MakeHarness, hdr

STORAGES = ["memory", "file"]


@pytest.mark.parametrize(
    ("storage", "headers", "expected_bytes"),
    [
        # probed: subject "B.a", payload "hello", with and without a 22-byte header block
        ("memory", b"", 24),
        ("memory", hdr(("Foo", "bar")), 46),
        ("file", b"", 38),
        ("file", hdr(("Foo", "bar")), 64),
    ],
)
def test_state_bytes_match_nats_server(
    make_harness: MakeHarness, storage: str, headers: bytes, expected_bytes: int
) -> None:
    assert len(headers) in (0, 22)
    h = make_harness(storage=storage, subjects=["B.>"])
    h.ok("B.a", b"hello", headers)
    assert h.stream.state().bytes == expected_bytes
    assert msg_size_bytes(storage, 3, len(headers), 5) == expected_bytes


def test_size_of_a_non_ascii_subject_counts_utf8_bytes(make_harness: MakeHarness) -> None:
    h = make_harness(subjects=[">"], no_ack=True)
    h.ok("é", b"")
    assert h.stream.state().bytes == 2 + 16


@pytest.mark.parametrize("storage", STORAGES)
def test_discard_new_max_msgs(make_harness: MakeHarness, storage: str) -> None:
    h = make_harness(storage=storage, discard="new", max_msgs=3)
    assert [h.ok("S.a") for _ in range(3)] == [1, 2, 3]
    error = h.fail("S.a")
    assert (error.err_code, error.code, error.description) == (
        10077,
        503,
        "maximum messages exceeded",
    )
    assert h.stream.state().messages == 3


@pytest.mark.parametrize(
    ("storage", "accepted"),
    [("memory", 2), ("file", 1)],  # probed: 20-byte payloads on "T.a", max_bytes 100
)
def test_discard_new_max_bytes(make_harness: MakeHarness, storage: str, accepted: int) -> None:
    h = make_harness(storage=storage, discard="new", max_bytes=100, subjects=["T.>"])
    outcomes = [h.publish("T.a", b"x" * 20).error for _ in range(4)]
    assert [e is None for e in outcomes] == [True] * accepted + [False] * (4 - accepted)
    assert {e.description for e in outcomes if e is not None} == {"maximum bytes exceeded"}


@pytest.mark.parametrize("storage", STORAGES)
def test_discard_new_per_subject_limit_replaces_oldest(
    make_harness: MakeHarness, storage: str
) -> None:
    """Without discard_new_per_subject a full subject still takes new messages (probed)."""
    h = make_harness(storage=storage, discard="new", max_msgs_per_subject=2)
    assert [h.ok("S.a") for _ in range(3)] == [1, 2, 3]
    state = h.stream.state()
    assert (state.messages, state.first_seq, state.last_seq) == (2, 2, 3)


@pytest.mark.parametrize("storage", STORAGES)
def test_discard_new_per_subject(make_harness: MakeHarness, storage: str) -> None:
    h = make_harness(
        storage=storage,
        discard="new",
        max_msgs_per_subject=2,
        discard_new_per_subject=True,
        allow_rollup_hdrs=True,
    )
    h.ok("S.a")
    h.ok("S.a")
    assert h.fail("S.a").description == "maximum messages per subject exceeded"
    h.ok("S.b")  # other subjects are unaffected
    # a rollup is let through and then purges the subject (probed)
    assert h.ok("S.a", headers=hdr(("Nats-Rollup", "sub"))) == 4
    assert h.live() == [3, 4]
    assert h.fail("S.a", headers=hdr(("Nats-Rollup", "zzz"))).description == (
        'rollup value invalid: "zzz"'
    )


@pytest.mark.parametrize("storage", STORAGES)
def test_discard_new_max_msgs_with_subject_at_limit(
    make_harness: MakeHarness, storage: str
) -> None:
    """Probed: max_msgs 2 + per-subject 1: a, b, a (replaces), c (maximum messages exceeded)."""
    h = make_harness(storage=storage, discard="new", max_msgs=2, max_msgs_per_subject=1)
    assert [h.publish(s).seq for s in ("S.a", "S.b", "S.a")] == [1, 2, 3]
    assert h.fail("S.c").description == "maximum messages exceeded"
    assert h.live() == [2, 3]
    h2 = make_harness(
        storage=storage,
        discard="new",
        max_msgs=2,
        max_msgs_per_subject=1,
        discard_new_per_subject=True,
    )
    h2.ok("S.a")
    h2.ok("S.b")
    assert h2.fail("S.a").description == "maximum messages per subject exceeded"
    assert h2.fail("S.c").description == "maximum messages exceeded"


@pytest.mark.parametrize(
    ("storage", "expected"),
    [
        # probed on T.a/T.b/T.a/T.a/T.c with payloads 30, 30, 30, 31, 10 bytes
        ("memory", [1, 2, 3, None, None]),
        ("file", [1, None, 2, None, 3]),
    ],
)
def test_discard_new_bytes_when_replacing_at_subject_limit(
    make_harness: MakeHarness, storage: str, expected: list[int | None]
) -> None:
    h = make_harness(
        storage=storage, discard="new", max_bytes=120, max_msgs_per_subject=1, subjects=["T.>"]
    )
    sends = [("T.a", 30), ("T.b", 30), ("T.a", 30), ("T.a", 31), ("T.c", 10)]
    results = [h.publish(subject, b"x" * size) for subject, size in sends]
    assert [r.seq if r.error is None else None for r in results] == expected
    for r in results:
        if r.error is not None:
            assert r.error.description == "maximum bytes exceeded"


@pytest.mark.parametrize(("storage", "expected_bytes"), [("memory", 87), ("file", 129)])
def test_discard_old_limits(make_harness: MakeHarness, storage: str, expected_bytes: int) -> None:
    """Probed: max_msgs 3, max_bytes 200, per-subject 2; publish a a a b b c, 10-byte payloads."""
    h = make_harness(
        storage=storage, max_msgs=3, max_bytes=200, max_msgs_per_subject=2, subjects=["T.>"]
    )
    for subject in "aaabbc":
        h.ok(f"T.{subject}", b"y" * 10)
    state = h.stream.state()
    assert (state.messages, state.bytes, state.first_seq, state.last_seq) == (
        3,
        expected_bytes,
        4,
        6,
    )
    assert h.stream.subjects_state(">") == {"T.b": 2, "T.c": 1}


def test_discard_old_max_bytes_drops_from_the_front(make_harness: MakeHarness) -> None:
    h = make_harness(max_bytes=3 * 20)  # memory: "S.a" + 1 byte + 16 = 20 bytes each
    for _ in range(5):
        h.ok("S.a", b"z")
    assert h.live() == [3, 4, 5]
    assert h.stream.state().bytes == 60


def test_update_lowering_limits_trims_at_once(make_harness: MakeHarness) -> None:
    h = make_harness()
    for subject in ("S.a", "S.a", "S.a", "S.b", "S.b", "S.c"):
        h.ok(subject)
    assert h.update(max_msgs_per_subject=2) is None
    assert h.live() == [2, 3, 4, 5, 6]
    assert h.update(max_msgs=3) is None
    assert h.live() == [4, 5, 6]
    assert h.update(max_bytes=2 * 19) is None  # "S.x" + "x" + 16 = 20 > 19: only one fits
    assert h.live() == [6]


def test_update_with_discard_new_does_not_trim(make_harness: MakeHarness) -> None:
    """memstore UpdateConfig enforces max_msgs/max_bytes only with discard old."""
    h = make_harness(discard="new")
    for _ in range(4):
        h.ok("S.a")
    assert h.update(max_msgs=2) is None
    assert h.stream.state().messages == 4
    assert h.fail("S.a").description == "maximum messages exceeded"
    # ... but a per-subject limit is enforced whatever the discard policy
    assert h.update(max_msgs_per_subject=1) is None
    assert h.live() == [4]


def test_update_cannot_change_name_or_storage(make_harness: MakeHarness) -> None:
    h = make_harness()
    error = h.update(name="OTHER")
    assert error is not None and error.err_code == 10052
    assert error.description == "stream configuration name must match original"
    error = h.update(storage="file")
    assert error is not None and error.description == (
        "stream configuration update can not change storage type"
    )
    assert h.stream.config.name == "S"


def test_discard_old_message_bigger_than_max_bytes_evicts_itself(make_harness: MakeHarness) -> None:
    """Probed: max_bytes 50, a 60-byte payload is acked as seq 2 and the stream ends empty."""
    h = make_harness(max_bytes=50, subjects=["O.>"])
    assert h.ok("O.a", b"1") == 1
    assert h.ok("O.a", b"x" * 60) == 2
    state = h.stream.state()
    assert (state.messages, state.bytes, state.first_seq, state.last_seq) == (0, 0, 3, 2)


def test_discard_new_max_msgs_blocks_even_a_rollup_all(make_harness: MakeHarness) -> None:
    """Probed: only the per-subject limit lets rollups through."""
    h = make_harness(max_msgs=1, discard="new", allow_rollup_hdrs=True)
    h.ok("S.a")
    error = h.fail("S.b", headers=hdr(("Nats-Rollup", "all")))
    assert error.description == "maximum messages exceeded"


def test_interest_retention_without_consumers_keeps_nothing(make_harness: MakeHarness) -> None:
    h = make_harness(retention="interest")
    results = h.publish_many([("S.a", b"", b"1"), ("S.b", b"", b"2"), ("S.a", b"", b"3")])
    assert [r.seq for r in results] == [1, 2, 3]
    st = h.stream.state()
    assert (st.messages, st.first_seq, st.last_seq) == (0, 4, 3)
