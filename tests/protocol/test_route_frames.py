"""Cluster-port frames: round trips however the bytes are split, and bad input refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.route_frames import (
    FRAME_HEADER,
    FrameEncoder,
    FrameError,
    FrameKind,
    FrameReader,
    encode_frame,
)

_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary()
_bodies = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(list(FrameKind)), _bodies), max_size=6),
    st.lists(st.integers(1, 50), max_size=20),
)
def test_frames_round_trip_whatever_the_split(
    frames: list[tuple[FrameKind, object]], cuts: list[int]
) -> None:
    data = b"".join(encode_frame(kind, body) for kind, body in frames)
    reader = FrameReader()
    got: list[tuple[FrameKind, object]] = []
    pos = 0
    for cut in cuts:
        got += reader.feed(data[pos : pos + cut])
        pos += cut
    got += reader.feed(data[pos:])
    assert got == frames


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(list(FrameKind)), _bodies | st.just(object())), max_size=8)
)
def test_a_kept_encoder_frames_exactly_as_encode_frame(
    frames: list[tuple[FrameKind, object]],
) -> None:
    """One packer for every frame of a connection, including after a body it refused."""
    encoder = FrameEncoder()
    for kind, body in frames:
        try:
            expected = encode_frame(kind, body)
        except TypeError:
            with pytest.raises(TypeError):
                encoder.encode(kind, body)
            continue
        assert encoder.encode(kind, body) == expected


def test_a_raft_message_with_entries_survives_as_lists() -> None:
    msg = {"type": "append_entries", "term": 3, "entries": [(b"\x00cmd", 7, 3)]}
    ((kind, body),) = FrameReader().feed(encode_frame(FrameKind.RAFT, ["S.X", msg]))
    assert kind == FrameKind.RAFT
    assert body == ["S.X", {"type": "append_entries", "term": 3, "entries": [[b"\x00cmd", 7, 3]]}]


def test_unknown_kind_and_oversized_length_are_refused() -> None:
    with pytest.raises(FrameError):
        FrameReader().feed(FRAME_HEADER.pack(1, 99) + b"\xc0")
    with pytest.raises(FrameError):
        FrameReader().feed(FRAME_HEADER.pack(2**31, FrameKind.MSG))


def test_garbage_body_is_refused() -> None:
    with pytest.raises(FrameError):
        FrameReader().feed(FRAME_HEADER.pack(1, FrameKind.MSG) + b"\xc1")  # never-used byte
