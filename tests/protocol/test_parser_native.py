"""protocol/_parser_c.c: the C scan of PUB/HPUB answers exactly as the Python fast path does.

The parser's fast path is ``scan_pub``: the C form in the native build, ``_scan_pub_py`` without
it. Both must answer the same for any bytes (the same event, or None so that the general path
decides), else a client would see a different parse depending on the build. These tests skip
where the C form is not built (the plain Python run, a machine without a compiler).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import headers, parser
from protocol.parser import ClientParser, Pub, ScanPub


def _native() -> ScanPub:
    native = parser._native_scan_pub()
    if native is None:
        pytest.skip("the C parser scan is not built here")
    return native


# Well-formed PUB/HPUB frames first, then bent: another op spelling, separator or line end, a
# size that is off, a byte changed anywhere; so that the examples reach every check of the scan.
TOKENS = st.one_of(
    st.sampled_from([b"a.b", b"_INBOX.x.1", b"\xc3\xa9t\xc3\xa9", b"\xff\xfe", b"12", b"a\x0bb"]),
    st.binary(min_size=1, max_size=6).map(lambda b: bytes(c if c > 0x20 else 0x78 for c in b)),
    st.binary(min_size=1, max_size=6),
)
SEPS = st.sampled_from([b" "] * 30 + [b"  ", b"\t", b" \t", b""])
ENDS = st.sampled_from([b"\r\n"] * 20 + [b"\n", b"\r", b"", b" \r\n", b"\r\r\n"])
OPS = st.sampled_from([b"PUB", b"HPUB"] * 4 + [b"pub", b"Pub", b"PUBX", b"HPU"])


@st.composite
def pub_bytes(draw: st.DrawFn) -> bytes:
    op = draw(OPS)
    headers = op.upper().startswith(b"H")
    fields = [draw(TOKENS)]
    if draw(st.booleans()):
        fields.append(draw(TOKENS))  # a reply subject
    hdr = draw(st.binary(max_size=12)) if headers else b""
    payload = draw(st.binary(max_size=20))
    off = draw(st.sampled_from([0] * 20 + [-1, 1, 10**9]))
    if headers:
        fields.append(str(len(hdr) + (off if draw(st.booleans()) else 0)).encode())
    fields.append(str(len(hdr) + len(payload) + off).encode())
    if draw(st.integers(0, 9)) == 0:
        fields.append(draw(TOKENS))  # one field too many
    line = op + b"".join(draw(SEPS) + field for field in fields) + draw(ENDS)
    frame = bytearray(line + hdr + payload + draw(ENDS) + draw(st.binary(max_size=4)))
    if draw(st.integers(0, 4)) == 0:
        frame[draw(st.integers(0, len(frame) - 1))] = draw(st.integers(0, 255))
    return bytes(frame)


@settings(max_examples=2000)
@given(
    buf=st.one_of(pub_bytes(), pub_bytes(), st.binary(max_size=60)),
    prefix=st.binary(max_size=4),
    other_op=st.integers(0, 9),
    # up to limits no C integer holds: a configured limit can be any integer
    max_payload=st.sampled_from([0, 5, 20, 1 << 20, 2**63 - 1, 2**63, 2**70]),
    max_control_line=st.sampled_from([4, 12, 30, 4096, 2**63, 2**70]),
)
def test_the_c_scan_answers_as_the_python_fast_path(
    buf: bytes, prefix: bytes, other_op: int, max_payload: int, max_control_line: int
) -> None:
    native = _native()
    data = prefix + buf
    # the parser asks for HPUB when the line starts with "H" (mostly so here, not always)
    with_headers = buf.startswith(b"H") != (other_op == 0)
    for pos in (0, len(prefix), -1 - len(prefix), len(data) + 1):  # outside: as re.match
        args = (data, pos, with_headers, max_payload, max_control_line)
        assert native(*args) == parser._scan_pub_py(*args)


def test_the_c_scan_answers_the_shapes_clients_send() -> None:
    """Not only equal to the Python one: it does answer (a scan that always said None would pass
    the property above)."""
    native = _native()
    hpub = b"HPUB s.1 _INBOX.r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    assert native(hpub, 0, True, 100, 100) == (
        "s.1",
        "_INBOX.r",
        b"NATS/1.0\r\n\r\n",
        b"hi",
        len(hpub),
    )
    pub = b"xxPUB \xc3\xa9 3\r\nabc\r\nPUB"
    assert native(pub, 2, False, 100, 100) == ("\xe9", None, None, b"abc", 17)
    assert native(pub, 2, False, 2, 100) is None  # over max_payload: the general path says so
    assert native(pub[:-5], 2, False, 100, 100) is None  # the payload's CRLF is not here yet


def test_the_native_build_parses_with_the_c_scan() -> None:
    native = _native()
    assert parser._scan_pub is native
    p = ClientParser()
    p.receive_data(b"PUB a 1\r\nx\r\nHPUB b r 5 6\r\nk:v\r\ny\r\n")
    assert p.next_event() == Pub("a", None, None, b"x")
    assert p.next_event() == Pub("b", "r", b"k:v\r\n", b"y")
    assert p.next_event() is None


BYTES = st.one_of(st.binary(max_size=40), st.sampled_from([b"", b"\r\n", b"Nats-", b"NATS/1.0"]))


@given(BYTES, BYTES, BYTES, st.integers(0, 3))
def test_holds_and_occurrences_answer_as_in_and_count_in_both_forms(
    before: bytes, part: bytes, after: bytes, repeat: int
) -> None:
    native_holds, native_occurrences = headers._native_holds(), headers._native_occurrences()
    for buf in (before + after, before + part * repeat + after, part * repeat):
        assert headers._holds_py(buf, part) is (part in buf)
        assert headers._occurrences_py(buf, part) == buf.count(part)
        if native_holds is not None:
            assert native_holds(buf, part) is (part in buf)
        if native_occurrences is not None:
            assert native_occurrences(buf, part) == buf.count(part)


# Few distinct bytes: the search meets many false starts (the needle's first byte, then a
# mismatch at any later position), overlapping candidates and needles longer than the buffer.
NEAR_MISSES = st.binary(max_size=24).map(lambda raw: bytes(b"Na-\r\n"[b % 5] for b in raw))


@settings(max_examples=500)
@given(NEAR_MISSES, NEAR_MISSES)
def test_the_probes_find_parts_among_near_misses(buf: bytes, part: bytes) -> None:
    native_holds, native_occurrences = headers._native_holds(), headers._native_occurrences()
    if native_holds is None or native_occurrences is None:
        pytest.skip("the C header probe is not built here")
    assert native_holds(buf, part) is (part in buf)
    assert native_occurrences(buf, part) == buf.count(part)


def test_the_native_build_probes_headers_in_c() -> None:
    native = headers._native_holds()
    if native is None:
        pytest.skip("the C header probe is not built here")
    assert headers.holds is native and headers.occurrences is headers._native_occurrences()
    hdr = b"NATS/1.0\r\nNats-Batch-Id: b\r\n\r\n"
    assert headers.holds(hdr, b"Nats-Batch-Id:") and not headers.holds(hdr, b"Nats-TTL")
    assert headers.occurrences(hdr, b"\r\n") == 3 and headers.occurrences(hdr, b"") == len(hdr) + 1
    with pytest.raises(TypeError):
        headers.holds(bytearray(hdr), b"Nats")  # type: ignore[arg-type]
