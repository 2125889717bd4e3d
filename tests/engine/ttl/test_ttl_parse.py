"""``Nats-TTL`` parsing, deadlines, the marker floor and marker headers (engine/ttl.py).

Every row of docs/nats-differences.md §3 (probed on nats-server 2.15.1), Go's float rounding of
``Duration.Seconds()`` and int64 wrap-around of deadlines (probed: a TTL that overflows is due at
once), and the exact bytes of a marker's header block.
"""

from __future__ import annotations

import pytest

from engine.ttl import (
    TTL_NEVER,
    TTL_NONE,
    deadline_ns,
    duration_seconds,
    header_ttl,
    is_subject_delete_marker,
    marker_header,
    marker_ttl_s,
    parse_message_ttl,
    raise_to_marker_floor,
)
from tests.engine.stream.harness import hdr, make_config

S = 1_000_000_000
TS = 1_700_000_000_000_000_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("never", (TTL_NEVER, True)),
        ("NEVER", (TTL_NEVER, True)),
        ("nEvEr", (TTL_NEVER, True)),
        ("1s", (1, True)),
        ("5m", (300, True)),
        ("1h30m", (5400, True)),
        ("1.5s", (1, True)),
        ("1.999s", (1, True)),
        ("30", (30, True)),
        ("0", (TTL_NONE, False)),
        ("0s", (TTL_NONE, False)),
        ("500ms", (TTL_NONE, False)),
        ("999ms", (TTL_NONE, False)),
        ("1000ms", (1, True)),
        ("-1", (TTL_NONE, False)),
        ("-5s", (TTL_NONE, False)),
        ("+5", (TTL_NONE, False)),
        ("+5s", (5, True)),
        ("1e3", (TTL_NONE, False)),
        ("abc", (TTL_NONE, False)),
        ("10 ", (TTL_NONE, False)),
        ("1h 5m", (TTL_NONE, False)),
        ("never ", (TTL_NONE, False)),
        ("00", (TTL_NONE, True)),  # parseInt64 gives 0 without an error: no TTL
        ("99999999999999999999", (7766279631452241919, True)),  # wraps, no overflow check
        ("9223372036854775808", (TTL_NONE, False)),  # wraps negative: a parse failure
        ("1000000000.999999999s", (1000000001, True)),  # float64 rounding of d.Seconds()
    ],
)
def test_parse_message_ttl_rows(value: str, expected: tuple[int, bool]) -> None:
    assert parse_message_ttl(value) == expected


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (b"", TTL_NONE),
        (hdr(("Foo", "bar")), TTL_NONE),
        (hdr(("Nats-TTL", "")), TTL_NONE),  # empty value: as if there were no header
        (hdr(("Nats-TTL", " 10")), 10),  # leading spaces are skipped by the header reader
        (hdr(("Nats-TTL", "10 ")), None),  # trailing ones are kept
        (hdr(("nats-ttl", "10")), TTL_NONE),  # keys are case-sensitive
        (hdr(("Nats-TTL", "abc"), ("Nats-TTL", "5")), None),  # the first occurrence counts
        (hdr(("Nats-TTL-X", "5")), TTL_NONE),
        (hdr(("Foo", "Nats-TTL: 5")), TTL_NONE),
        (hdr(("Nats-TTL", "never")), TTL_NEVER),
    ],
)
def test_header_ttl(block: bytes, expected: int | None) -> None:
    assert header_ttl(block) == expected


def test_duration_seconds_rounds_as_go_float64() -> None:
    assert duration_seconds(1_500_000_000) == 1
    assert duration_seconds(999_999_999) == 0
    assert duration_seconds(1_000_000_000 * S + 999_999_999) == 1_000_000_001
    assert duration_seconds(5 * S) == 5


def test_deadline_wraps_as_go_int64() -> None:
    assert deadline_ns(TS, 5) == TS + 5 * S
    # 9223372036 s fits in a Duration, but ts + it overflows: negative, due at once (probed).
    assert deadline_ns(TS, 9_223_372_036) < 0
    # 9223372037 s overflows the multiplication itself.
    assert deadline_ns(TS, 9_223_372_037) < TS
    assert deadline_ns(TS, 7_766_279_631_452_241_919) < TS
    # a TTL of ~31 years stays in the future
    assert deadline_ns(TS, 1_000_000_001) == TS + 1_000_000_001 * S


def test_marker_header_bytes() -> None:
    assert marker_header(5) == (
        b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 5s\r\nNats-Rollup: sub\r\n\r\n"
    )
    assert b"Nats-TTL: 1m0s\r\n" in marker_header(60)
    assert b"Nats-TTL: 1h0m0s\r\n" in marker_header(3600)
    assert b"Nats-TTL: 1h1m1s\r\n" in marker_header(3661)


def test_marker_ttl_is_whole_seconds_of_the_config() -> None:
    assert marker_ttl_s(make_config()) == 0
    assert marker_ttl_s(make_config(subject_delete_marker_ttl=5 * S)) == 5
    assert marker_ttl_s(make_config(subject_delete_marker_ttl=3 * S // 2)) == 1


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (b"", False),
        (hdr(("Foo", "bar")), False),
        (marker_header(1), True),
        (hdr(("Nats-Marker-Reason", "Remove")), True),
        (hdr(("Nats-Marker-Reason", "")), False),  # probed: an empty reason got a marker
        (hdr(("KV-Operation", "PURGE")), True),
        (hdr(("KV-Operation", "purge")), False),  # probed: case-sensitive
        (hdr(("KV-Operation", "DEL")), False),
        (hdr(("kv-operation", "PURGE")), False),
    ],
)
def test_is_subject_delete_marker(block: bytes, expected: bool) -> None:
    assert is_subject_delete_marker(block) is expected


def test_marker_floor_rewrites_as_integer_seconds_at_the_end() -> None:
    cfg = make_config(subject_delete_marker_ttl=5 * S, allow_msg_ttl=True)
    block = hdr(("Foo", "bar"), ("Nats-TTL", "1s"), ("Baz", "q"))
    assert raise_to_marker_floor(block, cfg) == hdr(("Foo", "bar"), ("Baz", "q"), ("Nats-TTL", "5"))
    assert raise_to_marker_floor(hdr(("Nats-TTL", "4")), cfg) == hdr(("Nats-TTL", "5"))
    assert raise_to_marker_floor(hdr(("Nats-TTL", "1.9s")), cfg) == hdr(("Nats-TTL", "5"))
    for unchanged in ("5", "5s", "6", "1h", "never", "abc", "", "00"):
        assert raise_to_marker_floor(hdr(("Nats-TTL", unchanged)), cfg) is None, unchanged


def test_marker_floor_exceptions() -> None:
    block = hdr(("Nats-TTL", "1s"))
    one = make_config(subject_delete_marker_ttl=5 * S, max_msgs_per_subject=1)
    assert raise_to_marker_floor(block, one) is None
    two = make_config(subject_delete_marker_ttl=5 * S, max_msgs_per_subject=2)
    assert raise_to_marker_floor(block, two) == hdr(("Nats-TTL", "5"))
    frac = make_config(subject_delete_marker_ttl=3 * S // 2)  # floors at 1 s
    assert raise_to_marker_floor(block, frac) is None
