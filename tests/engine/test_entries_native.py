"""The message walk of publish and batch entries: the C form (native build) decodes exactly as
the Python one, the same messages or the same error, for intact and damaged bodies alike. Skips
where the C form is not built (the plain Python run)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import entries
from engine.entries import EntryDecodeError, InboundMsg, PublishEntry, decode_entry, encode_entry
from engine.entry_codec import HEAD, Reader


def _need_native() -> None:
    if entries._native_decode_msgs is None:
        pytest.skip("the C entry decoder is not built here")


MSGS = st.lists(
    st.builds(
        InboundMsg,
        st.one_of(
            st.text(min_size=1, max_size=12),
            st.binary(min_size=1, max_size=8).map(lambda b: b.decode("utf-8", "surrogateescape")),
        ),
        st.binary(max_size=20),
        st.binary(max_size=40),
    ),
    max_size=6,
)


def _walk(walk: object, body: bytes, end: int, count: int) -> object:
    """What a walk answers from the first message on: (messages, cursor) or the error text."""
    reader = Reader(body, HEAD.size + 12, end)  # after the publish head (ts_ns, count)
    try:
        msgs = walk(reader, count)  # type: ignore[operator]
    except EntryDecodeError as exc:
        return ("error", str(exc))
    return (msgs, reader.pos)


@settings(max_examples=500)
@given(
    msgs=MSGS,
    extra=st.integers(-2, 2),
    cut=st.integers(0, 30),
    flip=st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
    damage=st.booleans(),
)
def test_the_c_walk_decodes_as_the_python_one(
    msgs: list[InboundMsg], extra: int, cut: int, flip: tuple[int, int], damage: bool
) -> None:
    _need_native()
    raw = bytearray(encode_entry(PublishEntry(7, tuple(msgs))))
    body_end = len(raw) - 4  # the CRC is not the walk's concern
    if damage and body_end > HEAD.size + 12:
        at = HEAD.size + 12 + flip[0] % (body_end - HEAD.size - 12)
        raw[at] ^= flip[1] or 1
    end = max(HEAD.size + 12, body_end - cut)
    count = max(0, len(msgs) + extra)
    body = bytes(raw)
    native = _walk(entries._dec_inbound_msgs_c, body, end, count)
    assert native == _walk(entries._dec_inbound_msgs_py, body, end, count)


def test_the_native_build_decodes_entries_in_c() -> None:
    _need_native()
    assert entries._dec_inbound_msgs is entries._dec_inbound_msgs_c
    entry = PublishEntry(
        5, (InboundMsg("a.b", b"NATS/1.0\r\n\r\n", b"x"), InboundMsg("c", b"", b""))
    )
    assert decode_entry(encode_entry(entry)) == entry
    with pytest.raises(EntryDecodeError, match="entry truncated"):
        _walk_raise(encode_entry(entry))


def _walk_raise(raw: bytes) -> None:
    reader = Reader(raw, HEAD.size + 12, len(raw) - 8)  # four bytes short of the last message
    entries._dec_inbound_msgs_c(reader, 2)


@settings(max_examples=500)
@given(msgs=MSGS, as_list=st.booleans())
def test_the_c_encoder_writes_the_python_bytes(msgs: list[InboundMsg], as_list: bool) -> None:
    """Surrogate-escaped subjects (not ASCII, encoded with surrogatepass) included."""
    native = entries._native_encode()
    if native is None:
        pytest.skip("the C entry encoder is not built here")
    assert entries._enc_inbound_msgs is native
    given_msgs = msgs if as_list else tuple(msgs)
    assert native(given_msgs) == entries._enc_inbound_msgs_py(tuple(msgs))  # type: ignore[arg-type]


def test_the_c_encoder_refuses_what_is_not_a_message() -> None:
    native = entries._native_encode()
    if native is None:
        pytest.skip("the C entry encoder is not built here")
    with pytest.raises(AttributeError):
        native((object(),))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        native(5)  # type: ignore[arg-type]
    assert native(()) == b""


def test_the_c_encoder_reads_a_list_it_was_given_as_it_was() -> None:
    """A list is copied first: a message whose attribute read empties the list (only possible
    with an interpreted stand-in, never an InboundMsg) must not make the walk read freed items."""
    native = entries._native_encode()
    if native is None:
        pytest.skip("the C entry encoder is not built here")

    class Emptying:
        hdr = b""
        data = b"d"

        def __init__(self, owner: list[object]) -> None:
            self.owner = owner

        @property
        def subject(self) -> str:
            del self.owner[:]
            return "x"

    msgs: list[object] = []
    msgs.extend([Emptying(msgs), *(InboundMsg("y" * 50, b"h", b"d") for _ in range(50))])
    snapshot = tuple(msgs)
    encoded = native(msgs)  # type: ignore[arg-type]
    assert encoded == native(
        tuple(InboundMsg("x", b"", b"d") if m is snapshot[0] else m for m in snapshot)
    )  # type: ignore[misc]
