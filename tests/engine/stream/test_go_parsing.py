"""Header values are parsed as nats-server's Go code parses them (util.go parseInt64,
time.ParseDuration, stream.go parseMessageTTL), including the odd corners. The Go ports live in
protocol/goconv.py and protocol/timefmt.py; the engine reads headers through them."""

from __future__ import annotations

import pytest

from engine.ttl import parse_message_ttl
from protocol.goconv import parse_int64, parse_int64_as_uint64
from protocol.timefmt import parse_go_duration

S = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("42", 42),
        ("007", 7),
        ("", -1),
        ("-1", -1),
        ("+5", -1),
        (" 5", -1),
        ("5 ", -1),
        ("1e3", -1),
        ("٣", -1),  # a non-ASCII digit is not a digit to Go
        ("9223372036854775807", (1 << 63) - 1),
        ("9223372036854775808", -(1 << 63)),  # int64 overflow wraps, as in Go
        ("18446744073709551617", 1),
    ],
)
def test_parse_int64(text: str, expected: int) -> None:
    assert parse_int64(text) == expected
    # uint64(parseInt64(v)): how expected-sequence headers are compared
    assert parse_int64_as_uint64(text) == expected % (1 << 64)


@pytest.mark.parametrize(
    ("text", "expected_ns"),
    [
        ("0", 0),
        ("-0", 0),
        ("1s", S),
        ("1.5s", 3 * S // 2),
        ("1h30m", 5400 * S),
        ("300ms", 300_000_000),
        ("2us", 2000),
        ("2\u00b5s", 2000),
        ("2\u03bcs", 2000),
        ("1ns", 1),
        (".5s", S // 2),
        ("5.s", 5 * S),
        ("-5s", -5 * S),
        ("+5s", 5 * S),
        ("1h1h", 7200 * S),
        ("2562047h47m16.854775807s", (1 << 63) - 1),
        ("2562047h47m16.854775808s", None),  # overflow
        ("", None),
        ("30", None),  # a unit is required
        ("s", None),
        (".s", None),
        ("1x", None),
        ("1s ", None),
        (" 1s", None),
        ("1e3s", None),
    ],
)
def test_parse_duration(text: str, expected_ns: int | None) -> None:
    """None: Go's time.ParseDuration returns an error (a ValueError with Go's text here)."""
    if expected_ns is None:
        with pytest.raises(
            ValueError, match=r"^time: (invalid duration|missing unit|unknown unit)"
        ):
            parse_go_duration(text)
    else:
        assert parse_go_duration(text) == expected_ns


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # docs/nats-differences.md §3, every row probed on nats-server 2.15.1
        ("never", (-1, True)),
        ("NEVER", (-1, True)),
        ("Never", (-1, True)),
        ("1s", (1, True)),
        ("5m", (300, True)),
        ("1h30m", (5400, True)),
        ("1.5s", (1, True)),  # truncated to whole seconds
        ("30", (30, True)),
        ("0", (0, False)),
        ("0s", (0, False)),
        ("500ms", (0, False)),
        ("-1", (0, False)),
        ("+5", (0, False)),
        ("1e3", (0, False)),
        ("abc", (0, False)),
        ("10 ", (0, False)),
        ("00", (0, True)),  # parseInt64 gives 0 without an error: "no TTL"
    ],
)
def test_parse_message_ttl(value: str, expected: tuple[int, bool]) -> None:
    assert parse_message_ttl(value) == expected
