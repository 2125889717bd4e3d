"""The consumer configuration the state machine works from, parsed from a create entry's JSON.

The JSON uses nats-server's ConsumerConfig field names (durations as integer nanoseconds,
``opt_start_time`` as RFC 3339 text). ``parse_config`` fills in nats-server's defaults
(setConsumerConfigDefaults: max_deliver -1, ack_wait 30 s when acks are needed, the first backoff
as ack_wait, max_ack_pending 1000) and refuses what the state machine cannot work with. Fields
the state machine does not use (max_waiting, headers_only, metadata...) are kept verbatim in
``extra`` so that a config round-trips. The API layer checks requests with nats-server's error
codes before proposing; these checks make a create entry safe to apply whatever produced it.

Must never: read clocks, or accept a config whose canonical JSON would differ between replicas.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, cast

from engine.consumer.limits import (
    ACK_WAIT_DEFAULT_NS,
    CONFIG_JSON_BYTES_MAX,
    CONSUMER_NAME_BYTES_MAX,
    CONSUMER_NAME_FORBIDDEN,
    DESCRIPTION_BYTES_MAX,
    MAX_ACK_PENDING_DEFAULT,
    NS_MAX,
    SEQ_LIMIT,
    UNLIMITED,
)
from protocol.subjects import is_valid_subject
from protocol.timefmt import parse_rfc3339

AckPolicy = Literal["none", "all", "explicit"]
DeliverPolicy = Literal[
    "all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"
]
ReplayPolicy = Literal["instant", "original"]

ACK_POLICIES: Final[tuple[AckPolicy, ...]] = ("none", "all", "explicit")
DELIVER_POLICIES: Final[tuple[DeliverPolicy, ...]] = (
    "all",
    "last",
    "new",
    "by_start_sequence",
    "by_start_time",
    "last_per_subject",
)
REPLAY_POLICIES: Final[tuple[ReplayPolicy, ...]] = ("instant", "original")

# Fields an update may not change (nats-server checkNewConsumerConfig); a deliver subject may
# change, but a pull consumer may not become a push consumer nor the reverse.
UPDATE_FIXED_FIELDS: Final = (
    "deliver_policy",
    "opt_start_seq",
    "opt_start_time",
    "ack_policy",
    "replay_policy",
)

_KNOWN: Final = frozenset(
    {
        "durable_name",
        "name",
        "description",
        "deliver_policy",
        "opt_start_seq",
        "opt_start_time",
        "ack_policy",
        "ack_wait",
        "max_deliver",
        "backoff",
        "filter_subject",
        "filter_subjects",
        "max_ack_pending",
        "deliver_subject",
        "replay_policy",
    }
)


class ConsumerConfigError(ValueError):
    """The config JSON is not one the consumer state machine can apply."""


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """A normalized consumer config (build one with ``parse_config`` or ``normalize``)."""

    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: DeliverPolicy = "all"
    opt_start_seq: int = 0
    opt_start_time: str | None = None
    ack_policy: AckPolicy = "none"
    ack_wait: int = 0  # ns; 0 only when acks are not needed
    max_deliver: int = UNLIMITED
    backoff: tuple[int, ...] = ()  # ns per redelivery; the last one repeats
    filter_subject: str = ""
    filter_subjects: tuple[str, ...] = ()
    max_ack_pending: int = 0  # -1 unlimited; 0 only when acks are not needed
    deliver_subject: str = ""  # empty: a pull consumer
    replay_policy: ReplayPolicy = "instant"
    # every other field, as (name, canonical JSON of its value), sorted by name
    extra: tuple[tuple[str, str], ...] = ()

    @property
    def filters(self) -> tuple[str, ...]:
        """The subject filters (empty: every message of the stream)."""
        if self.filter_subjects:
            return self.filter_subjects
        return (self.filter_subject,) if self.filter_subject else ()

    @property
    def acks_needed(self) -> bool:
        return self.ack_policy != "none"

    @property
    def opt_start_time_ns(self) -> int:
        return parse_rfc3339(self.opt_start_time) if self.opt_start_time else 0

    def to_obj(self) -> dict[str, Any]:
        """The config as a JSON object (every known field, then ``extra``)."""
        obj: dict[str, Any] = {
            "durable_name": self.durable_name,
            "name": self.name,
            "description": self.description,
            "deliver_policy": self.deliver_policy,
            "opt_start_seq": self.opt_start_seq,
            "ack_policy": self.ack_policy,
            "ack_wait": self.ack_wait,
            "max_deliver": self.max_deliver,
            "backoff": list(self.backoff),
            "filter_subject": self.filter_subject,
            "filter_subjects": list(self.filter_subjects),
            "max_ack_pending": self.max_ack_pending,
            "deliver_subject": self.deliver_subject,
            "replay_policy": self.replay_policy,
        }
        if self.opt_start_time is not None:
            obj["opt_start_time"] = self.opt_start_time
        for key, value in self.extra:
            obj[key] = json.loads(value)
        return obj

    def to_json(self) -> bytes:
        """Canonical JSON (sorted keys, no spaces): equal configs give equal bytes."""
        return canonical_json(self.to_obj())


def canonical_json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _int(obj: dict[str, Any], key: str, default: int, lo: int, hi: int) -> int:
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConsumerConfigError(f"{key} must be an integer")
    if not lo <= value <= hi:
        raise ConsumerConfigError(f"{key} out of range: {value}")
    return value


def _str(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConsumerConfigError(f"{key} must be a string")
    return value


def _choice(obj: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    value = _str(obj, key) or default
    if value not in allowed:
        raise ConsumerConfigError(f"{key} {value!r} is not one of {', '.join(allowed)}")
    return value


def check_consumer_name(name: str) -> None:
    """nats-server's isValidAssetName plus its length limit; raises ConsumerConfigError."""
    if not name:
        raise ConsumerConfigError("consumer name is empty")
    if len(name.encode("utf-8", "surrogatepass")) > CONSUMER_NAME_BYTES_MAX:
        raise ConsumerConfigError("consumer name is too long")
    if not CONSUMER_NAME_FORBIDDEN.isdisjoint(name):
        raise ConsumerConfigError("consumer name can not contain '.', '*', '>', '\\', '/'")


def parse_config(raw: bytes) -> ConsumerConfig:
    """Parse and normalize a config JSON object; raises ConsumerConfigError."""
    if len(raw) > CONFIG_JSON_BYTES_MAX:
        raise ConsumerConfigError("consumer config too large")
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConsumerConfigError(f"consumer config is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ConsumerConfigError("consumer config must be a JSON object")
    backoff_raw = obj.get("backoff") or []
    if not isinstance(backoff_raw, list):
        raise ConsumerConfigError("backoff must be a list")
    backoff: list[int] = []
    for value in backoff_raw:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= NS_MAX:
            raise ConsumerConfigError("backoff values must be positive durations")
        backoff.append(value)
    filters_raw = obj.get("filter_subjects") or []
    if not isinstance(filters_raw, list) or not all(isinstance(f, str) for f in filters_raw):
        raise ConsumerConfigError("filter_subjects must be a list of strings")
    opt_start_time = obj.get("opt_start_time")
    if opt_start_time is not None and not isinstance(opt_start_time, str):
        raise ConsumerConfigError("opt_start_time must be an RFC 3339 string")
    extra = tuple(
        sorted(
            (key, canonical_json(value).decode()) for key, value in obj.items() if key not in _KNOWN
        )
    )
    config = ConsumerConfig(
        durable_name=_str(obj, "durable_name"),
        name=_str(obj, "name"),
        description=_str(obj, "description"),
        deliver_policy=cast(DeliverPolicy, _choice(obj, "deliver_policy", DELIVER_POLICIES, "all")),
        opt_start_seq=_int(obj, "opt_start_seq", 0, 0, SEQ_LIMIT),
        opt_start_time=opt_start_time,
        ack_policy=cast(AckPolicy, _choice(obj, "ack_policy", ACK_POLICIES, "none")),
        ack_wait=_int(obj, "ack_wait", 0, 0, NS_MAX),
        max_deliver=_int(obj, "max_deliver", 0, -NS_MAX, NS_MAX),
        backoff=tuple(backoff),
        filter_subject=_str(obj, "filter_subject"),
        filter_subjects=tuple(filters_raw),
        max_ack_pending=_int(obj, "max_ack_pending", 0, -NS_MAX, NS_MAX),
        deliver_subject=_str(obj, "deliver_subject"),
        replay_policy=cast(ReplayPolicy, _choice(obj, "replay_policy", REPLAY_POLICIES, "instant")),
        extra=extra,
    )
    return normalize(config)


def normalize(config: ConsumerConfig) -> ConsumerConfig:
    """Check a config and fill in nats-server's defaults; raises ConsumerConfigError."""
    for name in (config.durable_name, config.name):
        if name:
            check_consumer_name(name)
    if config.durable_name and config.name and config.durable_name != config.name:
        raise ConsumerConfigError("consumer name in subject does not match durable name in request")
    if len(config.description.encode("utf-8", "surrogatepass")) > DESCRIPTION_BYTES_MAX:
        raise ConsumerConfigError("consumer description is too long")
    if config.filter_subject and config.filter_subjects:
        raise ConsumerConfigError(
            "consumer cannot have both FilterSubject and FilterSubjects specified"
        )
    seen: set[str] = set()
    for subject in config.filters:
        if not is_valid_subject(subject):
            raise ConsumerConfigError(f"invalid filter subject {subject!r}")
        if subject in seen:
            raise ConsumerConfigError("consumer cannot have duplicate filter subjects")
        seen.add(subject)
    policy = config.deliver_policy
    if (policy == "by_start_sequence") != (config.opt_start_seq > 0):
        raise ConsumerConfigError("opt_start_seq is required by, and only by, by_start_sequence")
    if (policy == "by_start_time") != (config.opt_start_time is not None):
        raise ConsumerConfigError("opt_start_time is required by, and only by, by_start_time")
    if config.opt_start_time is not None:
        try:
            parse_rfc3339(config.opt_start_time)
        except ValueError as exc:
            raise ConsumerConfigError(str(exc)) from None
    max_deliver = config.max_deliver
    if max_deliver == 0 or max_deliver < UNLIMITED:
        max_deliver = UNLIMITED
    if config.backoff and max_deliver != UNLIMITED and len(config.backoff) > max_deliver:
        raise ConsumerConfigError("max deliver is required to be > length of backoff values")
    ack_wait = config.ack_wait
    max_ack_pending = config.max_ack_pending
    if max_ack_pending < UNLIMITED:
        max_ack_pending = UNLIMITED
    if config.acks_needed:
        if ack_wait == 0:
            ack_wait = ACK_WAIT_DEFAULT_NS
        if config.backoff:
            ack_wait = config.backoff[0]
        if max_ack_pending == 0:
            max_ack_pending = MAX_ACK_PENDING_DEFAULT
    # with ack policy none, backoff and max_ack_pending are kept as given and never used (a
    # pull consumer may carry them: nats-server accepts and reports them)
    return replace(
        config, max_deliver=max_deliver, ack_wait=ack_wait, max_ack_pending=max_ack_pending
    )


def update_refusal(old: ConsumerConfig, new: ConsumerConfig) -> str | None:
    """Why ``new`` may not replace ``old`` (nats-server checkNewConsumerConfig), or None."""
    for field in UPDATE_FIXED_FIELDS:
        if getattr(old, field) != getattr(new, field):
            return f"{field.replace('_', ' ')} can not be updated"
    if bool(old.deliver_subject) != bool(new.deliver_subject):
        return "a pull consumer can not become push based, nor the reverse"
    return None
