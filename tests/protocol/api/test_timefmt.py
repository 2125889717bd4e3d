"""Go time text: RFC3339Nano timestamps and time.Duration strings."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.timefmt import (
    format_go_duration,
    format_rfc3339nano,
    parse_go_duration,
    parse_rfc3339,
    reformat_rfc3339,
)

# 0001-01-01 .. 9999-12-31 in ns since the epoch (0 is reserved for Go's zero time).
TS_MIN_NS = -62_135_596_800 * 10**9
TS_MAX_NS = 253_402_300_799 * 10**9 + 999_999_999
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


@pytest.mark.parametrize(
    ("ts_ns", "text"),
    [
        (0, "0001-01-01T00:00:00Z"),
        (1_795_312_871_585_979_480, "2026-11-22T02:01:11.58597948Z"),
        (1_795_312_871_000_000_000, "2026-11-22T02:01:11Z"),
        (1_795_312_871_000_000_001, "2026-11-22T02:01:11.000000001Z"),
        (1_795_312_871_100_000_000, "2026-11-22T02:01:11.1Z"),
        (951_782_400 * 10**9, "2000-02-29T00:00:00Z"),
        (-1, "1969-12-31T23:59:59.999999999Z"),
    ],
)
def test_format_rfc3339nano_known_values(ts_ns: int, text: str) -> None:
    assert format_rfc3339nano(ts_ns) == text


@settings(max_examples=200)
@given(st.integers(min_value=TS_MIN_NS + 1, max_value=TS_MAX_NS).filter(lambda n: n != 0))
def test_rfc3339_round_trip(ts_ns: int) -> None:
    # TS_MIN_NS itself is Go's zero time, which this module writes as ts 0.
    text = format_rfc3339nano(ts_ns)
    assert parse_rfc3339(text) == ts_ns
    assert reformat_rfc3339(text) == text


@settings(max_examples=150)
@given(st.integers(min_value=0, max_value=TS_MAX_NS // 10**9))
def test_format_agrees_with_datetime(unix_s: int) -> None:
    expected = dt.datetime.fromtimestamp(unix_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if unix_s == 0:
        expected = "0001-01-01T00:00:00Z"  # Go's zero time owns ts 0
    assert format_rfc3339nano(unix_s * 10**9) == expected


@pytest.mark.parametrize(
    ("text", "ts_ns"),
    [
        ("2026-11-22T03:01:11.5+01:00", 1_795_312_871_500_000_000),
        ("2026-11-22T02:01:11,5Z", 1_795_312_871_500_000_000),
        ("2026-11-22T2:01:11Z", 1_795_312_871_000_000_000),
        ("2026-11-22T02:01:11.1234567891Z", 1_795_312_871_123_456_789),
        ("0001-01-01T00:00:00Z", 0),
        ("2000-01-01T00:00:00+24:00", 946_598_400_000_000_000),  # Go allows offsets to ±24:60
        ("2000-01-01T00:00:00-01:60", 946_692_000_000_000_000),
    ],
)
def test_parse_rfc3339_accepts_what_nats_server_accepts(text: str, ts_ns: int) -> None:
    assert parse_rfc3339(text) == ts_ns


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "bad",
            'parsing time "bad" as "2006-01-02T15:04:05Z07:00": cannot parse "bad" as "2006"',
        ),
        ("2026-13-01T00:00:00Z", 'parsing time "2026-13-01T00:00:00Z": month out of range'),
        ("2026-02-29T00:00:00Z", 'parsing time "2026-02-29T00:00:00Z": day out of range'),
        ("2026-01-01T24:00:00Z", 'parsing time "2026-01-01T24:00:00Z": hour out of range'),
        (
            "2026-01-01 00:00:00Z",
            'parsing time "2026-01-01 00:00:00Z" as "2006-01-02T15:04:05Z07:00": '
            'cannot parse " 00:00:00Z" as "T"',
        ),
        ("2026-01-01T00:00:00Zx", 'parsing time "2026-01-01T00:00:00Zx": extra text: "x"'),
        (
            "2026-01-01T00:00:00z",
            'parsing time "2026-01-01T00:00:00z" as "2006-01-02T15:04:05Z07:00": '
            'cannot parse "z" as "Z07:00"',
        ),
        # probed on nats-server 2.15.1: the day's range is checked only after the whole layout
        (
            "2000-01-701T00:00:00.123Z",
            'parsing time "2000-01-701T00:00:00.123Z" as "2006-01-02T15:04:05Z07:00": '
            'cannot parse "1T00:00:00.123Z" as "T"',
        ),
        (
            "2000-01-01T00:00:00+25:00",
            'parsing time "2000-01-01T00:00:00+25:00": time zone offset hour out of range',
        ),
        (
            "2000-01-01T00:00:00+01:61",
            'parsing time "2000-01-01T00:00:00+01:61": time zone offset minute out of range',
        ),
        # the time package quotes every non-ASCII or control byte as \xNN and leaves DEL alone
        (
            "2000-01-01T00:00:00Z\u00e9",
            'parsing time "2000-01-01T00:00:00Z\\xc3\\xa9": extra text: "\\xc3\\xa9"',
        ),
        ("2000-01-01T00:00:00Z\x7f", 'parsing time "2000-01-01T00:00:00Z\x7f": extra text: "\x7f"'),
    ],
)
def test_parse_rfc3339_errors_are_go_texts(text: str, error: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_rfc3339(text)
    assert str(info.value) == error


def test_reformat_keeps_the_zone_offset_like_go() -> None:
    assert reformat_rfc3339("2026-01-01T01:00:00.500+01:00") == "2026-01-01T01:00:00.5+01:00"
    assert reformat_rfc3339("2026-01-01T00:00:00+00:00") == "2026-01-01T00:00:00Z"
    assert reformat_rfc3339("2026-01-01T1:00:00-05:30") == "2026-01-01T01:00:00-05:30"


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (1_100, "1.1µs"),
        (2_200_000, "2.2ms"),
        (1_500_000_000, "1.5s"),
        (5_000_000_000, "5s"),
        (60_000_000_000, "1m0s"),
        (3_600_000_000_000, "1h0m0s"),
        (4_000_000_000_000, "1h6m40s"),
        (-1_000_000_000, "-1s"),
        (I64_MAX, "2562047h47m16.854775807s"),
        (I64_MIN, "-2562047h47m16.854775808s"),
    ],
)
def test_format_go_duration(ns: int, text: str) -> None:
    assert format_go_duration(ns) == text


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("5s", 5_000_000_000),
        ("1h30m", 5_400_000_000_000),
        ("1.5s", 1_500_000_000),
        ("500ms", 500_000_000),
        ("-1s", -1_000_000_000),
        ("+5s", 5_000_000_000),
        ("1us", 1_000),
        ("1µs", 1_000),
        ("1μs", 1_000),
        (".5s", 500_000_000),
        ("1.s", 1_000_000_000),
        ("1h1m1s1ms1us1ns", 3_661_001_001_001),
        # From Go's own ParseDuration table (float64 fraction handling, issue 15011):
        ("0.3333333333333333333h", 1_200_000_000_000),
        ("0.100000000000000000000h", 360_000_000_000),
        ("0.830103483285477580700h", 2_988_372_539_827),
        ("9223372036854775807ns", I64_MAX),
        ("-9223372036854775808ns", I64_MIN),
    ],
)
def test_parse_go_duration(text: str, ns: int) -> None:
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", 'time: invalid duration ""'),
        ("1", 'time: missing unit in duration "1"'),
        ("1x", 'time: unknown unit "x" in duration "1x"'),
        (".s", 'time: invalid duration ".s"'),
        ("-", 'time: invalid duration "-"'),
        ("1s ", 'time: unknown unit "s " in duration "1s "'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
    ],
)
def test_parse_go_duration_errors(text: str, error: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_go_duration(text)
    assert str(info.value) == error


@settings(max_examples=200)
@given(st.integers(min_value=I64_MIN, max_value=I64_MAX))
def test_go_duration_round_trip(ns: int) -> None:
    assert parse_go_duration(format_go_duration(ns)) == ns
