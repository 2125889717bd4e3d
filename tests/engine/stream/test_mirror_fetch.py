"""The mirror fetch: what a reply holds is exactly the live messages from the start that match."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.mirror_fetch import FetchError, FetchRequest, answer, decode_reply
from tests.engine.stream.harness import Harness, make_config

SUBJECTS = ["S.a", "S.b", "S.c.x"]


@settings(max_examples=60, deadline=None)
@given(
    publishes=st.lists(
        st.tuples(st.sampled_from(SUBJECTS), st.integers(0, 300)), min_size=0, max_size=40
    ),
    deletes=st.lists(st.integers(1, 40), max_size=10),
    start=st.integers(0, 45),
    subject_filter=st.sampled_from(["", ">", "S.a", "S.*", "S.c.>", "S.zz"]),
    max_msgs=st.integers(1, 50),
    max_bytes=st.sampled_from([1, 500, 1 << 20]),
)
def test_a_reply_holds_exactly_the_matching_live_messages_from_the_start(
    publishes: list[tuple[str, int]],
    deletes: list[int],
    start: int,
    subject_filter: str,
    max_msgs: int,
    max_bytes: int,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness("memory", Path(tmp), make_config())
        for subject, size in publishes:
            h.ok(subject, b"x" * size)
        for seq in deletes:
            h.delete(seq)
        req = FetchRequest(seq=start, filter=subject_filter, max_msgs=max_msgs, max_bytes=max_bytes)
        reply = decode_reply(answer(h.stream, FetchRequest.decode(req.encode()).encode()))
        first = start or h.stream.first_seq
        matching = [
            m
            for m in h.store.scan()
            if m.seq >= first
            and (subject_filter in ("", ">") or _matches(m.subject, subject_filter))
        ]
        assert reply.first_seq == h.stream.first_seq and reply.last_seq == h.stream.last_seq
        assert reply.msgs == matching[: len(reply.msgs)]  # a prefix, byte for byte...
        assert len(reply.msgs) <= max_msgs
        assert reply.complete == (len(reply.msgs) == len(matching))
        if len(reply.msgs) < min(max_msgs, len(matching)):  # ...cut only by the byte budget
            assert reply.msgs, "at least one message whenever one matches"
        h.close()


def _matches(subject: str, subject_filter: str) -> bool:
    from protocol.subjects import subject_matches

    return subject_matches(subject_filter, subject)


def test_start_time_starts_at_the_first_message_at_or_after_it(tmp_path: Path) -> None:
    h = Harness("memory", tmp_path, make_config())
    for _ in range(5):
        h.ok("S.a")
    third_ts = h.stream.load(3).ts_ns  # type: ignore[union-attr]
    reply = decode_reply(answer(h.stream, FetchRequest(start_time_ns=third_ts).encode()))
    assert [m.seq for m in reply.msgs] == [3, 4, 5]
    h.close()


@pytest.mark.parametrize(
    "raw",
    [b"", b"[]", b"{", b'{"seq":-1}', b'{"seq":"1"}', b'{"max_msgs":0}', b'{"filter":3}'],
)
def test_bad_requests_are_fetch_errors(raw: bytes) -> None:
    with pytest.raises(FetchError):
        FetchRequest.decode(raw)


def test_damaged_replies_are_fetch_errors(tmp_path: Path) -> None:
    h = Harness("memory", tmp_path, make_config())
    for _ in range(3):
        h.ok("S.a", b"payload")
    good = answer(h.stream, FetchRequest(seq=1).encode())
    assert len(decode_reply(good).msgs) == 3
    for bad in (good[:10], good[:-1], good[:30] + bytes([good[30] ^ 1]) + good[31:]):
        with pytest.raises(FetchError):
            decode_reply(bad)
    h.close()
