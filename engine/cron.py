"""Cron patterns for message schedules (ADR-51): six fields, seconds first, as nats-server reads
them (its cron.go, after robfig/cron): ``sec min hour day-of-month month day-of-week``, each a
comma-separated list of ``*``/``?``, ``N``, ``N-M``, with an optional ``/step`` (``N/step`` means
``N-max/step``); months and weekdays may be named (``jan``, ``mon``). When both day fields are
restricted, a day matching either fires; when one is ``*``, both must match.

``next_fire_ns`` walks from the second after ``ts_ns`` field by field (month, day, hour, minute,
second), restarting from the month whenever a field wraps, and gives up five years on. Times are
wall-clock in the schedule's zone (UTC unless ``Nats-Schedule-Time-Zone`` names one); adding an
hour, minute or second moves absolute time, as Go's ``Time.Add`` does across DST changes.

Must never: read a clock (the caller passes the time it reasons from).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Final

CRON_FIELDS: Final = 6
YEARS_SEARCHED: Final = 5
STAR_BIT: Final = 1 << 63
NS_PER_S: Final = 1_000_000_000
_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_WEEKDAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}


class CronError(ValueError):
    """A pattern nats-server refuses."""


@dataclass(frozen=True, slots=True)
class _Bounds:
    low: int
    high: int
    names: dict[str, int] | None = None


_SECONDS = _Bounds(0, 59)
_MINUTES = _Bounds(0, 59)
_HOURS = _Bounds(0, 23)
_DAYS = _Bounds(1, 31)
_MONTH_BOUNDS = _Bounds(1, 12, _MONTHS)
_WEEKDAY_BOUNDS = _Bounds(0, 6, _WEEKDAYS)


def _number(text: str) -> int:
    if not text or not (text.isdigit() or (text[0] in "+-" and text[1:].isdigit())):
        raise CronError(f"failed to parse int from {text}")
    value = int(text)
    if value < 0:
        raise CronError(f"negative number ({value}) not allowed: {text}")
    return value


def _number_or_name(text: str, bounds: _Bounds) -> int:
    if bounds.names is not None and text.lower() in bounds.names:
        return bounds.names[text.lower()]
    return _number(text)


def _range_bits(expr: str, bounds: _Bounds) -> int:
    range_and_step = expr.split("/")
    low_high = range_and_step[0].split("-")
    extra = 0
    if low_high[0] in ("*", "?"):
        start, end, extra = bounds.low, bounds.high, STAR_BIT
    else:
        start = _number_or_name(low_high[0], bounds)
        if len(low_high) == 1:
            end = start
        elif len(low_high) == 2:
            end = _number_or_name(low_high[1], bounds)
        else:
            raise CronError(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _number(range_and_step[1])
        if len(low_high) == 1:
            end = bounds.high
        if step > 1:
            extra = 0
    else:
        raise CronError(f"too many slashes: {expr}")
    if start < bounds.low or end > bounds.high or start > end or step == 0:
        raise CronError(f"range out of bounds: {expr}")
    bits = 0
    for value in range(start, end + 1, step):
        bits |= 1 << value
    return bits | extra


def _field_bits(field: str, bounds: _Bounds) -> int:
    bits = 0
    for expr in field.split(","):
        if expr:
            bits |= _range_bits(expr, bounds)
    return bits


def _has(bits: int, value: int) -> bool:
    return bool(bits >> value & 1)


def _day_matches(days: int, weekdays: int, moment: datetime) -> bool:
    day_ok = _has(days, moment.day)
    weekday_ok = _has(weekdays, (moment.weekday() + 1) % 7)  # Go: Sunday is 0
    if days & STAR_BIT or weekdays & STAR_BIT:
        return day_ok and weekday_ok
    return day_ok or weekday_ok


def _wall(
    moment: datetime, zone: tzinfo, *, months: int = 0, days: int = 0, day: int | None = None
) -> datetime:
    """Go's AddDate / time.Date on wall-clock fields: an out-of-range month or day rolls
    over; the time of day is kept."""
    total = moment.year * 12 + moment.month - 1 + months
    year, month = divmod(total, 12)
    first = datetime(year, month + 1, 1, moment.hour, moment.minute, moment.second, tzinfo=zone)
    return first + timedelta(days=(moment.day if day is None else day) - 1 + days)


def _plus(moment: datetime, delta: timedelta, zone: tzinfo) -> datetime:
    """Go's Time.Add: absolute time, shown in the zone."""
    return (moment.astimezone(UTC) + delta).astimezone(zone)


def next_fire_ns(pattern: str, zone: tzinfo | None, ts_ns: int) -> int:
    """The first time after ``ts_ns`` that ``pattern`` fires, in ns; CronError if the pattern
    is invalid or does not fire within five years."""
    fields = pattern.split()
    if len(fields) != CRON_FIELDS:
        raise CronError(f"pattern requires {CRON_FIELDS} fields, got {len(fields)}")
    zone = zone or UTC
    second = _field_bits(fields[0], _SECONDS)
    minute = _field_bits(fields[1], _MINUTES)
    hour = _field_bits(fields[2], _HOURS)
    days = _field_bits(fields[3], _DAYS)
    month = _field_bits(fields[4], _MONTH_BOUNDS)
    weekdays = _field_bits(fields[5], _WEEKDAY_BOUNDS)
    moment = datetime.fromtimestamp(ts_ns // NS_PER_S, zone) + timedelta(seconds=1)
    truncated = False
    year_limit = moment.year + YEARS_SEARCHED
    while True:
        if moment.year > year_limit:
            raise CronError("pattern exceeds maximum range")
        wrapped = False
        while not _has(month, moment.month):
            if not truncated:
                truncated = True
                moment = _wall(moment.replace(hour=0, minute=0, second=0), zone, day=1)
            moment = _wall(moment, zone, months=1)
            if moment.month == 1:
                wrapped = True
                break
        if wrapped:
            continue
        while not _day_matches(days, weekdays, moment):
            if not truncated:
                truncated = True
                moment = _wall(moment.replace(hour=0, minute=0, second=0), zone)
            moment = _wall(moment, zone, days=1)
            if moment.day == 1:
                wrapped = True
                break
        if wrapped:
            continue
        for bits, unit, part in (
            (hour, timedelta(hours=1), "hour"),
            (minute, timedelta(minutes=1), "minute"),
            (second, timedelta(seconds=1), "second"),
        ):
            while not _has(bits, getattr(moment, part)):
                if not truncated:
                    truncated = True
                    moment = _truncate(moment, part)
                moment = _plus(moment, unit, zone)
                if getattr(moment, part) == 0:
                    wrapped = True
                    break
            if wrapped:
                break
        if wrapped:
            continue
        return int(moment.timestamp()) * NS_PER_S


def _truncate(moment: datetime, part: str) -> datetime:
    if part == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    if part == "minute":
        return moment.replace(second=0, microsecond=0)
    return moment.replace(microsecond=0)
