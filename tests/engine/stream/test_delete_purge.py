"""MSG.DELETE and PURGE semantics; every table row was probed on nats-server 2.15.1 (memory and
file storage gave identical purge results)."""

from __future__ import annotations

import pytest

from protocol.errors import ApiError
from tests.engine.stream.harness import Harness, MakeHarness

SUBJECTS = ["a", "b", "a", "c", "a", "b", "a"]  # seqs 1..7


def _filled(make_harness: MakeHarness, **config: object) -> Harness:
    h = make_harness(subjects=["P.>"], **config)
    for s in SUBJECTS:
        h.ok(f"P.{s}")
    return h


# (request, purged, (messages, first_seq, last_seq, num_deleted), seq of the next publish)
PURGE_TABLE: list[tuple[dict[str, object], int, tuple[int, int, int, int], int]] = [
    ({}, 7, (0, 8, 7, 0), 8),
    ({"keep": 2}, 5, (2, 6, 7, 0), 8),
    ({"seq": 4}, 3, (4, 4, 7, 0), 8),
    ({"seq": 100}, 7, (0, 100, 99, 0), 100),  # a compact past the end moves last_seq
    ({"seq": 8}, 7, (0, 8, 7, 0), 8),
    ({"seq": 9}, 7, (0, 9, 8, 0), 9),
    ({"seq": 1}, 0, (7, 1, 7, 0), 8),
    ({"filter": "P.a", "seq": 5}, 2, (5, 2, 7, 1), 8),
    ({"filter": "P.a", "keep": 1}, 3, (4, 2, 7, 2), 8),
    ({"filter": "P.a"}, 4, (3, 2, 7, 3), 8),
    ({"filter": "P.*", "keep": 3}, 4, (3, 5, 7, 0), 8),
    ({"filter": ">", "seq": 4}, 3, (4, 4, 7, 0), 8),
    ({"filter": "P.a", "seq": 100}, 4, (3, 2, 7, 3), 8),  # with a filter, no compact
    ({"filter": "P.b", "seq": 100}, 2, (5, 1, 7, 2), 8),
    ({"keep": 0}, 7, (0, 8, 7, 0), 8),
    ({"keep": 100}, 0, (7, 1, 7, 0), 8),
    ({"filter": "P.zz"}, 0, (7, 1, 7, 0), 8),
]


@pytest.mark.parametrize(("request_", "purged", "state", "next_seq"), PURGE_TABLE)
def test_purge_matches_nats_server(
    make_harness: MakeHarness,
    request_: dict[str, object],
    purged: int,
    state: tuple[int, int, int, int],
    next_seq: int,
) -> None:
    h = _filled(make_harness)
    subject_filter = str(request_.get("filter", ""))
    seq, keep = int(str(request_.get("seq", 0))), int(str(request_.get("keep", 0)))
    result = h.purge(subject_filter, seq, keep)
    assert result == purged
    s = h.stream.state()
    assert (s.messages, s.first_seq, s.last_seq, s.num_deleted) == state
    if s.messages == 0:
        assert s.first_ts_ns == 0
        assert s.last_ts_ns > 0  # last_ts survives a purge (probed)
    assert h.ok("P.z") == next_seq


def test_purge_keep_removes_the_oldest_matches(make_harness: MakeHarness) -> None:
    h = _filled(make_harness)
    assert h.purge("P.a", keep=2) == 2
    assert h.live() == [2, 4, 5, 6, 7]
    assert h.stream.deleted_seqs() == [3]


def test_purge_on_new_and_first_seq_streams(make_harness: MakeHarness) -> None:
    h = make_harness()
    assert (h.stream.state().first_seq, h.stream.state().last_seq) == (0, 0)
    assert h.purge() == 0
    assert (h.stream.state().first_seq, h.stream.state().last_seq) == (1, 0)

    h = make_harness(first_seq=100)
    assert (h.stream.state().first_seq, h.stream.state().last_seq) == (100, 99)
    assert h.purge(seq=50) == 0  # below first_seq: nothing
    assert (h.stream.state().first_seq, h.stream.state().last_seq) == (100, 99)
    assert h.purge(seq=150) == 0
    assert (h.stream.state().first_seq, h.stream.state().last_seq) == (150, 149)
    assert h.ok("S.a") == 150


def test_purge_permission_errors(make_harness: MakeHarness) -> None:
    h = make_harness(deny_purge=True)
    h.ok("S.a")
    result = h.purge()
    assert isinstance(result, ApiError)
    assert (result.err_code, result.code, result.description) == (
        10110,
        500,
        "stream purge not permitted",
    )
    assert h.stream.state().messages == 1
    h2 = make_harness()
    h2.ok("S.a")
    h2.update(sealed=True)
    result = h2.purge()
    assert isinstance(result, ApiError) and result.err_code == 10109


def test_delete_updates_first_seq_and_deleted(make_harness: MakeHarness) -> None:
    h = _filled(make_harness)
    assert h.delete(1) is None
    assert h.stream.state().first_seq == 2
    assert h.delete(3) is None
    assert h.delete(7) is None
    s = h.stream.state()
    assert (s.messages, s.first_seq, s.last_seq, s.num_deleted) == (4, 2, 7, 2)
    assert h.stream.deleted_seqs() == [3, 7]  # a deleted last seq counts (probed)
    for seq in (2, 4, 5, 6):
        assert h.delete(seq, erase=seq % 2 == 0) is None
    s = h.stream.state()
    assert (s.messages, s.first_seq, s.last_seq, s.first_ts_ns) == (0, 8, 7, 0)
    assert h.ok("P.a") == 8


def test_delete_of_the_only_message(make_harness: MakeHarness) -> None:
    h = make_harness()
    h.ok("S.a")
    assert h.delete(1) is None
    assert (h.stream.state().first_seq, h.stream.state().last_seq) == (2, 1)


def _delete_error(h: Harness, seq: int) -> tuple[int, int, str]:
    error = h.delete(seq)
    assert error is not None
    return error.err_code, error.code, error.description


def test_delete_errors_memory_storage(make_harness: MakeHarness) -> None:
    h = make_harness(storage="memory")
    for _ in range(6):
        h.ok("S.a")
    h.purge(seq=3)
    h.delete(4)
    for seq in (1, 2, 4, 7, 0):
        assert _delete_error(h, seq) == (10043, 400, f"sequence {seq} not found")


def test_delete_errors_file_storage(make_harness: MakeHarness) -> None:
    """filestore.go answers out-of-range seqs with store errors (probed)."""
    h = make_harness(storage="file")
    for _ in range(6):
        h.ok("S.a")
    h.purge(seq=3)  # live 3..6
    assert _delete_error(h, 1) == (10057, 500, "no message found")
    assert _delete_error(h, 2) == (10057, 500, "no message found")
    assert _delete_error(h, 7) == (10057, 500, "stream store EOF")
    assert _delete_error(h, 0) == (10057, 500, "no message found")
    assert h.delete(4) is None
    assert _delete_error(h, 4) == (10043, 400, "sequence 4 not found")  # interior
    for seq in (3, 5, 6):
        assert h.delete(seq) is None
    assert _delete_error(h, 3) == (10057, 500, "no message found")
    assert _delete_error(h, 6) == (10057, 500, "no message found")  # empty stream
    assert _delete_error(h, 7) == (10057, 500, "stream store EOF")


def test_delete_permission_errors(make_harness: MakeHarness) -> None:
    h = make_harness(deny_delete=True)
    h.ok("S.a")
    assert _delete_error(h, 1) == (10057, 500, "message delete not permitted")
    h.update(sealed=True)
    assert _delete_error(h, 1) == (10109, 400, "invalid operation on sealed stream")
    assert h.stream.state().messages == 1
