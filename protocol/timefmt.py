"""Go-compatible time and duration text: RFC 3339 timestamps and ``time.Duration`` strings,
written as Go formats them and read as Go's ``time.Parse`` / ``time.ParseDuration`` read them
(with Go's error texts: they reach clients in ``10025 invalid JSON`` errors).

nats-server writes every JSON timestamp with Go's ``time.RFC3339Nano`` layout in UTC (trailing
fractional zeros trimmed, the zero ``time.Time`` as ``0001-01-01T00:00:00Z``) and every duration
that reaches a header (the subject delete marker's ``Nats-TTL``) with ``time.Duration.String``.
Clients parse these, so the text has to be byte-identical. Timestamps here are integer
nanoseconds since the Unix epoch; ``0`` stands for Go's zero time (nats-server never stores a
message at exactly the epoch, so the overload is safe).

Must never: read a clock, or use floats for timestamps (they lose nanoseconds).
"""

from __future__ import annotations

import re
from functools import lru_cache

NS_PER_S = 1_000_000_000
NS_PER_US = 1_000
NS_PER_MS = 1_000_000
S_PER_DAY = 86_400
ZERO_TIME_TEXT = "0001-01-01T00:00:00Z"
_PREFIX_CACHE_SIZE = 4096
_INT64_MAX = (1 << 63) - 1
_UINT63 = 1 << 63
_FRACTION_DIGITS_MAX = 9

# Days from 0000-03-01 to 1970-01-01 in the proleptic Gregorian calendar (Hinnant's algorithm).
_EPOCH_SHIFT_DAYS = 719_468
_DAYS_PER_ERA = 146_097


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """Year, month, day for a count of days since 1970-01-01 (H. Hinnant, civil_from_days)."""
    z = days + _EPOCH_SHIFT_DAYS
    era = z // _DAYS_PER_ERA
    doe = z - era * _DAYS_PER_ERA
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return (y + 1 if m <= 2 else y), m, d


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 for a proleptic Gregorian date (H. Hinnant, days_from_civil)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    mp = m - 3 if m > 2 else m + 9
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * _DAYS_PER_ERA + doe - _EPOCH_SHIFT_DAYS


_ZERO_TIME_NS = _days_from_civil(1, 1, 1) * S_PER_DAY * NS_PER_S


@lru_cache(maxsize=_PREFIX_CACHE_SIZE)
def _second_prefix(unix_s: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` for a whole Unix second (cached: replies cluster in time)."""
    days, sod = divmod(unix_s, S_PER_DAY)
    y, mo, d = _civil_from_days(days)
    hh, rem = divmod(sod, 3600)
    mm, ss = divmod(rem, 60)
    return f"{y:04d}-{mo:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}"


def format_rfc3339nano(ts_ns: int) -> str:
    """Go ``t.UTC().Format(time.RFC3339Nano)``; ``0`` gives Go's zero time."""
    if ts_ns == 0:
        return ZERO_TIME_TEXT
    unix_s, frac_ns = divmod(ts_ns, NS_PER_S)
    prefix = _second_prefix(unix_s)
    if frac_ns == 0:
        return prefix + "Z"
    return f"{prefix}.{frac_ns:09d}".rstrip("0") + "Z"


# --- Go time.Parse(time.RFC3339, …) -------------------------------------------------------------
#
# nats-server's JSON decoding (encoding/json v1 semantics on the json/v2 engine) reads a
# ``time.Time`` with plain ``time.Parse(time.RFC3339, s)``: a one-digit hour, ``,`` before the
# fraction and zone offsets up to +24:00 / :60 are accepted, and the first element that does not
# fit the layout (or the first field out of range) is what the error names (all probed).

RFC3339_LAYOUT = "2006-01-02T15:04:05Z07:00"
_RFC3339_FAST = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d+))?(Z|[+-]\d{2}:\d{2})",
    re.ASCII,
)
_HOUR_MAX = 23
_MINUTE_MAX = 59
_SECOND_MAX = 59
_ZONE_HOUR_MAX = 24  # Go accepts offsets up to ±24:60
_ZONE_MINUTE_MAX = 60
_DIGIT_BYTES = frozenset(b"0123456789")


def _days_in_month(y: int, m: int) -> int:
    if m == 2:
        leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
        return 29 if leap else 28
    return 30 if m in (4, 6, 9, 11) else 31


def time_quote(raw: bytes) -> str:
    """The ``time`` package's own ``quote`` (not ``strconv.Quote``): every non-ASCII or control
    byte becomes ``\\xNN``; DEL stays as it is."""
    out = ['"']
    for b in raw:
        if b >= 0x80 or b < 0x20:
            out.append(f"\\x{b:02x}")
        else:
            ch = chr(b)
            if ch in '"\\':
                out.append("\\")
            out.append(ch)
    out.append('"')
    return "".join(out)


class _TimeParseError(ValueError):
    pass


def _time_error(full: bytes, layout_elem: str, value_elem: bytes, message: str) -> _TimeParseError:
    """Go's ``ParseError``: ``message`` when set, else "cannot parse <value> as <layout elem>"."""
    if message:
        return _TimeParseError(f"parsing time {time_quote(full)}{message}")
    return _TimeParseError(
        f"parsing time {time_quote(full)} as {time_quote(RFC3339_LAYOUT.encode())}: "
        f"cannot parse {time_quote(value_elem)} as {time_quote(layout_elem.encode())}"
    )


def _digit_at(value: bytes, i: int) -> bool:
    return i < len(value) and value[i] in _DIGIT_BYTES


def _getnum(value: bytes, fixed: bool) -> tuple[int, bytes, bool]:
    """Go's ``getnum``: one or two leading digits (exactly two when ``fixed``)."""
    if not _digit_at(value, 0):
        return 0, value, False
    if not _digit_at(value, 1):
        if fixed:
            return 0, value, False
        return value[0] - 48, value[1:], True
    return (value[0] - 48) * 10 + value[1] - 48, value[2:], True


def _skip(value: bytes, prefix: bytes) -> tuple[bytes, bool]:
    for ch in prefix:
        if not value or value[0] != ch:
            return value, False
        value = value[1:]
    return value, True


def _parse_fraction(value: bytes) -> tuple[int, bytes]:
    """A ``.ddd`` / ``,ddd`` fraction after the seconds (Go keeps at most 9 digits)."""
    n = 2
    while _digit_at(value, n):
        n += 1
    digits = value[1:n][:_FRACTION_DIGITS_MAX]
    return int(digits.ljust(_FRACTION_DIGITS_MAX, b"0")), value[n:]


# RFC3339's layout as Go's parser walks it: (literal prefix, std chunk) pairs.
_RFC3339_CHUNKS = (
    (b"", "2006"),
    (b"-", "01"),
    (b"-", "02"),
    (b"T", "15"),
    (b":", "04"),
    (b":", "05"),
    (b"", "Z07:00"),
)
# std chunk -> (digits fixed at two, range name, max); the year is handled on its own
_NUM_CHUNKS = {
    "01": (True, "month", 12),
    "02": (True, "", 31),  # the day is checked against its month at the end
    "15": (False, "hour", _HOUR_MAX),
    "04": (True, "minute", _MINUTE_MAX),
    "05": (True, "second", _SECOND_MAX),
}


def _parse_num_chunk(full: bytes, std: str, value: bytes) -> tuple[int, bytes]:
    if std == "2006":
        if len(value) < 4 or not value[:4].isdigit():
            raise _time_error(full, std, value, "")
        return int(value[:4]), value[4:]
    fixed, range_name, max_value = _NUM_CHUNKS[std]
    num, rest, ok = _getnum(value, fixed)
    if not ok:
        raise _time_error(full, std, value, "")
    low = 1 if std == "01" else 0
    if range_name and not low <= num <= max_value:
        raise _time_error(full, std, rest, f": {range_name} out of range")
    return num, rest


def _parse_zone(full: bytes, value: bytes) -> tuple[int, bytes]:
    """``Z07:00``: ``Z`` or ``±hh:mm``; the offset in seconds east of UTC."""
    if value[:1] == b"Z":
        return 0, value[1:]
    if len(value) < 6 or value[3] != 0x3A:  # ':'
        raise _time_error(full, "Z07:00", value, "")
    sign, rest = value[0], value[6:]
    hr, _, ok = _getnum(value[1:3], True)
    mm, ok_m = 0, False
    if ok:
        mm, _, ok_m = _getnum(value[4:6], True)
    range_err = ""
    if hr > _ZONE_HOUR_MAX:
        range_err = ": time zone offset hour out of range"
    if mm > _ZONE_MINUTE_MAX:
        range_err = ": time zone offset minute out of range"
    if range_err:
        raise _time_error(full, "Z07:00", rest, range_err)
    if not ok_m or sign not in b"+-":
        raise _time_error(full, "Z07:00", value, "")
    offset_s = (hr * 60 + mm) * 60
    return (-offset_s if sign == 0x2D else offset_s), rest


def _unix_ns(
    date: tuple[int, int, int], clock: tuple[int, int, int], frac_ns: int, zone_s: int
) -> int:
    """Nanoseconds since the epoch of (year, month, day) (hour, minute, second) + frac_ns at a
    zone offset of zone_s seconds east of UTC."""
    hour, minute, second = clock
    unix_s = _days_from_civil(*date) * S_PER_DAY + hour * 3600 + minute * 60 + second - zone_s
    return unix_s * NS_PER_S + frac_ns


def _parse_go(full: bytes) -> int:
    """A port of Go's ``time.Parse`` for the RFC 3339 layout, element by element."""
    value = full
    nums: list[int] = []
    frac_ns = 0
    offset_s = 0
    for prefix, std in _RFC3339_CHUNKS:
        value, ok = _skip(value, prefix)
        if not ok:
            raise _time_error(full, prefix.decode(), value, "")
        if std == "Z07:00":
            offset_s, value = _parse_zone(full, value)
            continue
        num, value = _parse_num_chunk(full, std, value)
        nums.append(num)
        if std == "05" and len(value) >= 2 and value[0] in b".," and _digit_at(value, 1):
            frac_ns, value = _parse_fraction(value)
    if value:
        raise _time_error(full, "", value, f": extra text: {time_quote(value)}")
    year, month, day, hour, minute, second = nums
    if not 1 <= day <= _days_in_month(year, month):
        raise _time_error(full, "", value, ": day out of range")
    return _unix_ns((year, month, day), (hour, minute, second), frac_ns, offset_s)


def _parse_fast(text: str) -> int | None:
    """The common well-formed, in-range timestamp without the element walk; None otherwise."""
    match = _RFC3339_FAST.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    frac_text, zone = match.group(7), match.group(8)
    if not (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month)):
        return None
    if hour > _HOUR_MAX or minute > _MINUTE_MAX or second > _SECOND_MAX:
        return None
    frac_ns = (
        int(frac_text[:_FRACTION_DIGITS_MAX].ljust(_FRACTION_DIGITS_MAX, "0")) if frac_text else 0
    )
    offset_s = 0
    if zone != "Z":
        zh, zm = int(zone[1:3]), int(zone[4:6])
        if zh > _ZONE_HOUR_MAX or zm > _ZONE_MINUTE_MAX:
            return None
        offset_s = (zh * 3600 + zm * 60) * (-1 if zone[0] == "-" else 1)
    return _unix_ns((year, month, day), (hour, minute, second), frac_ns, offset_s)


def parse_rfc3339_unix_ns(text: str) -> int:
    """Go ``time.Parse(time.RFC3339, text)`` as exact nanoseconds since the epoch (no int64
    wrap: callers that mimic ``UnixNano`` wrap it themselves). Go's zero time is not special.

    Raises ValueError carrying Go's error text (``parsing time "x" as "2006-01-02T15:04:05Z07:00":
    cannot parse "x" as "2006"``, ``parsing time "…": month out of range``).
    """
    fast = _parse_fast(text)
    if fast is not None:
        return fast
    return _parse_go(text.encode("utf-8", "surrogatepass"))


def parse_rfc3339(text: str) -> int:
    """Nanoseconds since the epoch for an RFC 3339 timestamp, as nats-server's JSON decoding
    accepts it: ``YYYY-MM-DDTH[H]:MM:SS[(.|,)frac](Z|±hh:mm)``; fraction digits past the ninth
    are truncated. Go's zero time gives ``0``. Raises ValueError with Go's text.
    """
    ts_ns = parse_rfc3339_unix_ns(text)
    if ts_ns == _ZERO_TIME_NS:
        return 0
    return ts_ns


def _zone_offset_s(text: str) -> int:
    zone = text[-6:]
    if text.endswith("Z"):
        return 0
    return (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60) * (-1 if zone[0] == "-" else 1)


def reformat_rfc3339(text: str) -> str:
    """How Go re-marshals a decoded ``time.Time``: RFC3339Nano in the text's own zone offset
    (``+00:00`` becomes ``Z``), fraction trimmed. Raises ValueError like ``parse_rfc3339``."""
    ts_ns = parse_rfc3339(text)
    if ts_ns == 0:
        return ZERO_TIME_TEXT
    offset_s = _zone_offset_s(text)
    if offset_s == 0:
        return format_rfc3339nano(ts_ns)
    local = format_rfc3339nano(ts_ns + offset_s * NS_PER_S)[:-1]
    sign = "-" if offset_s < 0 else "+"
    hours, minutes = divmod(abs(offset_s) // 60, 60)
    return f"{local}{sign}{hours:02d}:{minutes:02d}"


# --- Go time.Duration ----------------------------------------------------------------------------


def _fmt_frac(v: int, prec: int) -> tuple[str, int]:
    """Go's fmtFrac: the fraction of v/10**prec without trailing zeros, and v // 10**prec."""
    digits: list[str] = []
    printed = False
    for _ in range(prec):
        digit = v % 10
        printed = printed or digit != 0
        if printed:
            digits.append(str(digit))
        v //= 10
    if not printed:
        return "", v
    return "." + "".join(reversed(digits)), v


def format_go_duration(ns: int) -> str:
    """Go ``time.Duration(ns).String()``: ``0s``, ``1.5µs``, ``1.5s``, ``1m0s``, ``1h0m0s``."""
    neg = ns < 0
    u = -ns if neg else ns
    sign = "-" if neg else ""
    if u < NS_PER_S:
        if u == 0:
            return "0s"
        if u < NS_PER_US:
            return f"{sign}{u}ns"
        if u < NS_PER_MS:
            frac, whole = _fmt_frac(u, 3)
            return f"{sign}{whole}{frac}µs"
        frac, whole = _fmt_frac(u, 6)
        return f"{sign}{whole}{frac}ms"
    frac, whole_s = _fmt_frac(u, 9)
    text = f"{whole_s % 60}{frac}s"
    minutes = whole_s // 60
    if minutes > 0:
        text = f"{minutes % 60}m{text}"
        hours = minutes // 60
        if hours > 0:
            text = f"{hours}h{text}"
    return sign + text


_DURATION_UNITS_NS: dict[str, int] = {
    "ns": 1,
    "us": NS_PER_US,
    "µs": NS_PER_US,  # U+00B5 micro sign
    "μs": NS_PER_US,  # U+03BC Greek small letter mu
    "ms": NS_PER_MS,
    "s": NS_PER_S,
    "m": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
}


def _invalid_duration(orig: str) -> ValueError:
    return ValueError(f'time: invalid duration "{orig}"')


def _is_digit(c: str) -> bool:
    return "0" <= c <= "9"


def _leading_int(s: str, orig: str) -> tuple[int, str]:
    i = 0
    x = 0
    while i < len(s) and _is_digit(s[i]):
        if x > _UINT63 // 10:
            raise _invalid_duration(orig)
        x = x * 10 + ord(s[i]) - 48
        if x > _UINT63:
            raise _invalid_duration(orig)
        i += 1
    return x, s[i:]


def _leading_fraction(s: str) -> tuple[int, float, str]:
    i = 0
    x = 0
    scale = 1.0
    overflow = False
    while i < len(s) and _is_digit(s[i]):
        if not overflow:
            if x > _INT64_MAX // 10:
                overflow = True
            else:
                y = x * 10 + ord(s[i]) - 48
                if y > _UINT63:
                    overflow = True
                else:
                    x = y
                    scale *= 10
        i += 1
    return x, scale, s[i:]


def parse_go_duration(text: str) -> int:
    """Go ``time.ParseDuration``: ``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`` in ns, or ``"0"``.

    A port of Go's algorithm (including its float64 handling of fractions), so that rounding
    and overflow behave the same. Raises ValueError with Go's error text.
    """
    orig = text
    s = text
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise _invalid_duration(orig)
    total = 0
    while s:
        if not (s[0] == "." or _is_digit(s[0])):
            raise _invalid_duration(orig)
        before = len(s)
        v, s = _leading_int(s, orig)
        pre = before != len(s)
        post = False
        f, scale = 0, 1.0
        if s and s[0] == ".":
            s = s[1:]
            before = len(s)
            f, scale, s = _leading_fraction(s)
            post = before != len(s)
        if not pre and not post:
            raise _invalid_duration(orig)
        i = 0
        while i < len(s) and not (s[i] == "." or _is_digit(s[i])):
            i += 1
        if i == 0:
            raise ValueError(f'time: missing unit in duration "{orig}"')
        unit_text, s = s[:i], s[i:]
        unit = _DURATION_UNITS_NS.get(unit_text)
        if unit is None:
            raise ValueError(f'time: unknown unit "{unit_text}" in duration "{orig}"')
        if v > _UINT63 // unit:
            raise _invalid_duration(orig)
        v *= unit
        if f > 0:
            v += int(float(f) * (float(unit) / scale))
            if v > _UINT63:
                raise _invalid_duration(orig)
        total += v
        if total > _UINT63:
            raise _invalid_duration(orig)
    if neg:
        return -total
    if total > _INT64_MAX:
        raise _invalid_duration(orig)
    return total
