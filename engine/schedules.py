"""Message schedules (``allow_msg_schedules``, ADR-51), as nats-server 2.15 runs them.

A *schedule* is a message whose header has ``Nats-Schedule``: ``@at <RFC 3339 time>`` (once),
``@every <Go duration>`` (at least 1s), a predefined ``@hourly``/``@daily``/... or a six-field
cron pattern (engine/cron.py), with ``Nats-Schedule-Target`` (the subject to publish on, one of
the stream's), optionally ``Nats-Schedule-Source`` (publish that subject's latest message instead
of the schedule's own payload), ``Nats-Schedule-TTL``, ``Nats-Schedule-Rollup: sub`` and
``Nats-Schedule-Time-Zone`` (cron only). The latest message on a subject is its schedule; any
other message on that subject cancels it.

When a schedule is due, the stream leader publishes the *fired* message into the stream as an
ordinary publish entry: the schedule's (or the source's) headers and payload, less the schedule
headers, ``Nats-Expected-*``, ``Nats-Msg-Id``, ``Nats-TTL`` and ``Nats-Rollup``, plus
``Nats-Scheduler: <schedule subject>`` and ``Nats-Schedule-Next: <next RFC 3339 time>`` (or
``purge`` for a one-off, which removes the schedule when the fired message is stored). Storing
``Nats-Schedule-Next`` moves the schedule's next time, on every replica, so a new leader carries
on where the last one stopped. Where nats-server reads the wall clock when it stores a schedule,
jetraft uses the entry's time, so replicas agree.

Must never: read a clock, or do I/O beyond reading time-zone data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from engine.cron import NS_PER_S, CronError, next_fire_ns
from engine.entries import InboundMsg
from engine.store import StoredMsg
from engine.ttl import parse_message_ttl
from protocol import errors
from protocol.errors import ApiError
from protocol.headers import (
    append_headers,
    get_header,
    holds,
    remove_header,
    remove_prefixed_headers,
)
from protocol.subjects import is_valid_literal_subject, subjects_overlap
from protocol.timefmt import format_rfc3339nano, parse_go_duration, parse_rfc3339_unix_ns

HDR_SCHEDULE: Final = "Nats-Schedule"
HDR_TIME_ZONE: Final = "Nats-Schedule-Time-Zone"
HDR_SCHEDULE_TTL: Final = "Nats-Schedule-TTL"
HDR_SCHEDULE_ROLLUP: Final = "Nats-Schedule-Rollup"
HDR_TARGET: Final = "Nats-Schedule-Target"
HDR_SOURCE: Final = "Nats-Schedule-Source"
HDR_SCHEDULER: Final = "Nats-Scheduler"
HDR_NEXT: Final = "Nats-Schedule-Next"
NEXT_PURGE: Final = "purge"
ROLLUP_SUBJECT: Final = "sub"
EVERY_MIN_NS: Final = NS_PER_S
FIRE_DELAY_MIN_S: Final = 0.25  # nats-server does not fire schedules more often than this
_SCHEDULE_PREFIX: Final = b"Nats-Schedule"
_PREDEFINED: Final = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
_STRIPPED_PREFIXES: Final = (b"Nats-Schedule", b"Nats-Scheduler", b"Nats-Expected-")
_STRIPPED: Final = ("Nats-Msg-Id", "Nats-TTL", "Nats-Rollup")


def _zone(hdr: bytes) -> tzinfo | ApiError | None:
    if b"\r\n" + HDR_TIME_ZONE.encode() + b":" not in hdr:
        return None
    name = get_header(hdr, HDR_TIME_ZONE) or ""
    if not name:
        return ApiError(errors.MESSAGE_SCHEDULES_TIME_ZONE_INVALID)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ApiError(errors.MESSAGE_SCHEDULES_TIME_ZONE_INVALID)


def _round_to_second(ts_ns: int) -> int:
    """Go's Time.Round(time.Second): halves round up."""
    return (ts_ns + NS_PER_S // 2) // NS_PER_S * NS_PER_S


def parse_schedule(pattern: str, zone: tzinfo | None, ts_ns: int, now_ns: int) -> tuple[int, bool]:
    """When ``pattern`` fires next, reasoning from ``ts_ns`` (0: no pattern), and whether it
    repeats; a repeating schedule already past ``now_ns`` is moved to its next time after now
    (it fires once, not once per missed time). ValueError when invalid."""
    if not pattern:
        return 0, False
    if pattern.startswith("@at "):
        if zone is not None:
            raise ValueError("time zones are not supported with @at")
        return parse_rfc3339_unix_ns(pattern[4:]), False
    if pattern.startswith("@every "):
        if zone is not None:
            raise ValueError("time zones are not supported with @every")
        every = parse_go_duration(pattern[7:])
        if every < EVERY_MIN_NS:
            raise ValueError("@every needs at least a second")
        upcoming = _round_to_second(ts_ns) + every
        if upcoming < now_ns:
            upcoming = _round_to_second(now_ns) + every
        return upcoming, True
    cron = _PREDEFINED.get(pattern, pattern)
    try:
        upcoming = next_fire_ns(cron, zone, ts_ns)
        if upcoming < now_ns:
            upcoming = next_fire_ns(cron, zone, _round_to_second(now_ns))
    except CronError as exc:
        raise ValueError(str(exc)) from None
    return upcoming, True


def next_schedule(hdr: bytes, ts_ns: int, now_ns: int) -> int | ApiError:
    """``nextMessageSchedule``: when the schedule in ``hdr`` fires (0: not a schedule)."""
    if not hdr:
        return 0
    zone = _zone(hdr)
    if isinstance(zone, ApiError):
        return zone
    pattern = get_header(hdr, HDR_SCHEDULE) or ""
    try:
        return parse_schedule(pattern, zone, ts_ns, now_ns)[0]
    except ValueError:
        return ApiError(errors.MESSAGE_SCHEDULES_PATTERN_INVALID)


def _ttl_ok(hdr: bytes) -> tuple[str, bool]:
    ttl = get_header(hdr, HDR_SCHEDULE_TTL) or ""
    if not ttl:
        return "", True
    return ttl, parse_message_ttl(ttl)[1]


def check_publish(
    hdr: bytes,
    subject: str,
    *,
    allowed: bool,
    allow_ttl: bool,
    stream_subjects: list[str],
    last_on: Callable[[str], StoredMsg | None],
    now_ns: int,
) -> bytes | ApiError:
    """The schedule checks of a publish (not a sourced message), in nats-server's order; the
    header to store (a schedule gains ``Nats-Rollup: sub``). ``last_on``: a subject's latest
    message (a purge request must name a schedule)."""
    fires = next_schedule(hdr, now_ns, now_ns)
    if isinstance(fires, ApiError):
        return ApiError(errors.MESSAGE_SCHEDULES_DISABLED) if not allowed else fires
    if fires:
        error = _check_schedule(hdr, subject, allowed, allow_ttl, stream_subjects)
        if error is not None:
            return error
        rollup = get_header(hdr, "Nats-Rollup")
        if not rollup:
            hdr = append_headers(hdr, [("Nats-Rollup", ROLLUP_SUBJECT)])
        elif rollup != ROLLUP_SUBJECT:
            return ApiError(errors.MESSAGE_SCHEDULES_ROLLUP_INVALID)
    next_value = get_header(hdr, HDR_NEXT)
    scheduler = get_header(hdr, HDR_SCHEDULER)
    if next_value:
        if next_value != NEXT_PURGE:
            return ApiError(errors.MESSAGE_SCHEDULES_SCHEDULER_INVALID)
        if not scheduler or scheduler == subject or not is_valid_literal_subject(scheduler):
            return ApiError(errors.MESSAGE_SCHEDULES_SCHEDULER_INVALID)
        if not allowed:
            return ApiError(errors.MESSAGE_SCHEDULES_DISABLED)
        scheduler_last = last_on(scheduler)
        if scheduler_last is not None and not get_header(scheduler_last.hdr, HDR_SCHEDULE):
            return ApiError(errors.MESSAGE_SCHEDULES_SCHEDULER_INVALID)
    elif scheduler:
        return ApiError(errors.MESSAGE_SCHEDULES_SCHEDULER_INVALID)
    return hdr


def _check_schedule(
    hdr: bytes, subject: str, allowed: bool, allow_ttl: bool, stream_subjects: list[str]
) -> ApiError | None:
    if not allowed:
        return ApiError(errors.MESSAGE_SCHEDULES_DISABLED)
    ttl, ttl_ok = _ttl_ok(hdr)
    if not ttl_ok:
        return ApiError(errors.MESSAGE_SCHEDULES_TTL_INVALID)
    rollup = get_header(hdr, HDR_SCHEDULE_ROLLUP) or ""
    if rollup and rollup != ROLLUP_SUBJECT:
        return ApiError(errors.MESSAGE_SCHEDULES_ROLLUP_INVALID)
    if ttl and not allow_ttl:
        return ApiError(errors.MESSAGE_TTL_DISABLED)
    target = get_header(hdr, HDR_TARGET) or ""
    if not target or not is_valid_literal_subject(target) or target == subject:
        return ApiError(errors.MESSAGE_SCHEDULES_TARGET_INVALID)
    source = get_header(hdr, HDR_SOURCE) or ""
    if source and (source in (target, subject) or not is_valid_literal_subject(source)):
        return ApiError(errors.MESSAGE_SCHEDULES_SOURCE_INVALID)
    if not any(subjects_overlap(s, target) for s in stream_subjects):
        return ApiError(errors.MESSAGE_SCHEDULES_TARGET_INVALID)
    if source and not any(subjects_overlap(s, source) for s in stream_subjects):
        return ApiError(errors.MESSAGE_SCHEDULES_SOURCE_INVALID)
    return None


def is_scheduled(hdr: bytes) -> bool:
    return bool(hdr) and holds(hdr, _SCHEDULE_PREFIX)


@dataclass(slots=True)
class Schedules:
    """The stream's live schedules: subject -> (seq of the schedule message, next fire time)."""

    by_subject: dict[str, tuple[int, int]] = field(default_factory=dict)
    by_seq: dict[int, str] = field(default_factory=dict)

    def set(self, subject: str, seq: int, fire_ns: int) -> None:
        old = self.by_subject.get(subject)
        if old is not None:
            self.by_seq.pop(old[0], None)
        self.by_subject[subject] = (seq, fire_ns)
        self.by_seq[seq] = subject

    def move(self, subject: str, fire_ns: int) -> None:
        current = self.by_subject.get(subject)
        if current is not None:
            self.by_subject[subject] = (current[0], fire_ns)

    def drop_subject(self, subject: str) -> None:
        current = self.by_subject.pop(subject, None)
        if current is not None:
            self.by_seq.pop(current[0], None)

    def drop_seq(self, seq: int) -> None:
        subject = self.by_seq.pop(seq, None)
        if subject is not None:
            self.by_subject.pop(subject, None)

    def on_stored(self, msg: StoredMsg, now_ns: int) -> None:
        """What storing ``msg`` does to the schedules (memstore.go storeRawMsg)."""
        hdr = msg.hdr
        fires = next_schedule(hdr, msg.ts_ns, now_ns) if hdr else 0
        if isinstance(fires, int) and fires:
            self.set(msg.subject, msg.seq, fires)
        elif not (hdr and get_header(hdr, HDR_SCHEDULER)):
            self.drop_subject(msg.subject)
        if hdr and HDR_NEXT.encode() in hdr:
            upcoming = get_header(hdr, HDR_NEXT) or ""
            scheduler = get_header(hdr, HDR_SCHEDULER) or ""
            if upcoming and upcoming != NEXT_PURGE and scheduler:
                try:
                    self.move(scheduler, parse_rfc3339_unix_ns(upcoming))
                except ValueError:
                    pass

    def next_fire_ns(self) -> int | None:
        if not self.by_subject:
            return None  # asked after every applied entry: most streams schedule nothing
        return min(t for _, t in self.by_subject.values())

    def due(self, now_ns: int) -> list[tuple[int, str]]:
        """(seq, subject) of the schedules due at ``now_ns``, in seq order."""
        return sorted((seq, subj) for subj, (seq, t) in self.by_subject.items() if t <= now_ns)


def fired_message(
    schedule: StoredMsg, source_last: StoredMsg | None, now_ns: int
) -> tuple[InboundMsg | None, bool]:
    """The message a due schedule publishes (None when the schedule is not valid any more, which
    then is dropped), and whether it repeats."""
    hdr = schedule.hdr
    pattern = get_header(hdr, HDR_SCHEDULE) or ""
    zone = _zone(hdr)
    target = get_header(hdr, HDR_TARGET) or ""
    ttl, ttl_ok = _ttl_ok(hdr)
    if not pattern or isinstance(zone, ApiError) or not target or not ttl_ok:
        return None, False
    try:
        upcoming, repeat = parse_schedule(pattern, zone, now_ns, now_ns)
    except ValueError:
        return None, False
    rollup = get_header(hdr, HDR_SCHEDULE_ROLLUP) or ""
    body = source_last if source_last is not None and get_header(hdr, HDR_SOURCE) else schedule
    out = body.hdr
    for prefix in _STRIPPED_PREFIXES:
        out = remove_prefixed_headers(out, prefix)
    for key in _STRIPPED:
        if out:
            out = remove_header(out, key)
    added = [(HDR_SCHEDULER, schedule.subject)]
    added.append((HDR_NEXT, format_rfc3339nano(upcoming) if repeat else NEXT_PURGE))
    if ttl:
        added.append(("Nats-TTL", ttl))
    if rollup:
        added.append(("Nats-Rollup", rollup))
    return InboundMsg(target, append_headers(out, added), body.data), repeat


def fired_next_ns(hdr: bytes, now_ns: int) -> int:
    """The next time a fired message names (``Nats-Schedule-Next``); a second on when it names
    none that parses."""
    value = get_header(hdr, HDR_NEXT) or ""
    try:
        return parse_rfc3339_unix_ns(value)
    except ValueError:
        return now_ns + NS_PER_S
