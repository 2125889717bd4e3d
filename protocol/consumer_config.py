"""Consumer create requests checked and normalized as nats-server does, with its error codes.

``parse_create`` reads a ``CONSUMER.CREATE`` / ``CONSUMER.DURABLE.CREATE`` request (subject
tokens and body) with nats-server's checks in its order (jsConsumerCreateRequest);
``normalize`` fills in the defaults (setConsumerConfigDefaults) and checks the config against its
stream (checkConsumerCfg and the work-queue rules of addConsumerWithAssignment); ``update_error``
is checkNewConsumerConfig. The result is the config as nats-server reports it (``config_obj``):
the JSON that a create entry carries to the engine and that CONSUMER.INFO shows.

Must never: perform I/O or read clocks (ephemeral names are drawn by the caller).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from protocol import errors as E
from protocol.consumer_models import ConsumerConfig, CreateConsumerRequest, NextRequest
from protocol.errors import ApiError
from protocol.gojson import GoJsonError, decode, go_quote
from protocol.models import StreamConfig
from protocol.stream_config import (
    DESCRIPTION_BYTES_MAX,
    METADATA_BYTES_MAX,
    REQUIRED_LEVEL_KEY,
    SERVER_LEVEL_KEY,
    SERVER_VERSION_KEY,
    decode_strict,
    is_valid_stream_name,
    subject_is_subset_match,
)
from protocol.subjects import is_valid_subject
from protocol.timefmt import parse_rfc3339

NS_PER_MS: Final = 1_000_000
NS_PER_S: Final = 1_000_000_000
CONSUMER_NAME_BYTES_MAX: Final = 255  # JSMaxNameLen
ACK_WAIT_DEFAULT_NS: Final = 30 * NS_PER_S  # JsAckWaitDefault
MAX_ACK_PENDING_DEFAULT: Final = 1000  # JsDefaultMaxAckPending
WAIT_QUEUE_DEFAULT_MAX: Final = 512  # JSWaitQueueDefaultMax
EPHEMERAL_INACTIVE_THRESHOLD_NS: Final = 5 * NS_PER_S  # JsDeleteWaitTimeDefault
HEARTBEAT_MIN_NS: Final = 100 * NS_PER_MS
REQUEST_EXPIRES_MIN_NS: Final = NS_PER_MS
ACTIONS: Final = ("", "create", "update")
_OFFSET_SUFFIX: Final = re.compile(r" at offset \d+$")

# ConsumerConfig fields nats-server writes even when zero (no ``omitempty``)
_ALWAYS: Final = frozenset({"deliver_policy", "ack_policy", "replay_policy", "num_replicas"})
# features jetraft refuses by name rather than accept and ignore
_UNSUPPORTED: Final = ("direct", "sourcing", "priority_groups", "priority_timeout")
ZERO_TIME: Final = "0001-01-01T00:00:00Z"  # Go's zero time.Time, as a pause request may carry


@dataclass(frozen=True, slots=True)
class CreateRequest:
    """A create request that passed the subject-level checks."""

    stream: str
    name: str  # "" for a legacy ephemeral: the caller draws one
    action: str  # "", "create" or "update"
    config: ConsumerConfig
    pedantic: bool
    durable: bool


def _err(spec: E.ErrorSpec, **kw: Any) -> ApiError:
    return ApiError(spec, **kw)


def parse_create(tokens: list[str], body: bytes) -> CreateRequest:
    """``$JS.API.CONSUMER.CREATE.<stream>[.<name>[.<filter...>]]`` or
    ``$JS.API.CONSUMER.DURABLE.CREATE.<stream>.<durable>``; raises ApiError."""
    req = decode_strict(body, CreateConsumerRequest)
    action = req.action
    if action not in ACTIONS:
        raise _err(E.INVALID_JSON, err=f"unknown consumer action: {go_quote(action)}")
    cfg = req.config
    n = len(tokens)
    filtered = ""
    legacy_durable = tokens[3] == "DURABLE"
    if legacy_durable:
        if n != 7:
            raise _err(E.CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT)
        stream, name = tokens[5], tokens[6]
    elif n == 5:
        stream, name = tokens[4], cfg.name
    else:
        stream, name = tokens[4], tokens[5]
        filtered = ".".join(tokens[6:])
    if stream != req.stream_name:
        raise _err(E.STREAM_MISMATCH)
    if name and ("\\" in name or "/" in name):
        raise _err(E.CONSUMER_NAME_CONTAINS_PATH_SEPARATORS)
    if legacy_durable:
        if not cfg.durable_name:
            raise _err(E.CONSUMER_DURABLE_NAME_NOT_SET)
        if name != cfg.durable_name:
            raise _err(E.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT)
        cfg = cfg.model_copy(update={"name": name})
    elif n > 5:
        if cfg.durable_name and name != cfg.durable_name:
            raise _err(E.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT)
        cfg = cfg.model_copy(update={"name": name})
    elif cfg.durable_name:
        raise _err(E.CONSUMER_EPHEMERAL_WITH_DURABLE_NAME)
    if filtered and cfg.filter_subjects:
        raise _err(E.CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED)
    if filtered and cfg.filter_subject != filtered:
        raise _err(E.CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH)
    return CreateRequest(stream, name, action, cfg, req.pedantic, durable=bool(cfg.durable_name))


def _pedantic(text: str) -> ApiError:
    return ApiError(E.PEDANTIC, err=text)


def _invalid(text: str) -> ApiError:
    return ApiError(E.STREAM_INVALID_CONFIG, err=text)


def _defaults(c: dict[str, Any], stream: StreamConfig, pedantic: bool) -> None:
    """setConsumerConfigDefaults (jetraft has no server or account limits)."""
    if c["max_deliver"] == 0 or c["max_deliver"] < -1:
        if pedantic and c["max_deliver"] < -1:
            raise _pedantic("max_deliver must be set to -1")
        c["max_deliver"] = -1
    for key, text in (
        ("max_waiting", "max_waiting must not be negative"),
        ("max_batch", "max_batch must not be negative"),
        ("max_expires", "max_expires must not be negative"),
        ("max_bytes", "max_bytes must not be negative"),
        ("idle_heartbeat", "idle_heartbeat must not be negative"),
        ("inactive_threshold", "inactive_threshold must not be negative"),
    ):
        if c[key] < 0:
            if pedantic:
                raise _pedantic(text)
            c[key] = 0
    if c["max_ack_pending"] < -1:
        if pedantic:
            raise _pedantic("max_ack_pending must be set to -1")
        c["max_ack_pending"] = -1
    if not c["deliver_subject"] and c["max_waiting"] == 0:
        c["max_waiting"] = WAIT_QUEUE_DEFAULT_MAX
    if c["ack_wait"] == 0 and c["ack_policy"] in ("explicit", "all"):
        c["ack_wait"] = ACK_WAIT_DEFAULT_NS
    if c["backoff"]:
        if pedantic and c["ack_wait"] != c["backoff"][0]:
            raise _pedantic("first backoff value has to equal batch AckWait")
        c["ack_wait"] = c["backoff"][0]
    limits = stream.consumer_limits
    if c["max_ack_pending"] == 0:
        if pedantic and limits.max_ack_pending > 0:
            raise _pedantic("max_ack_pending must be set if it's configured in stream limits")
        c["max_ack_pending"] = limits.max_ack_pending
    if c["inactive_threshold"] == 0:
        if pedantic and limits.inactive_threshold > 0:
            raise _pedantic("inactive_threshold must be set if it's configured in stream limits")
        c["inactive_threshold"] = limits.inactive_threshold
    if c["max_ack_pending"] == 0 and c["ack_policy"] != "none":
        c["max_ack_pending"] = MAX_ACK_PENDING_DEFAULT


def _check(c: dict[str, Any], stream: StreamConfig) -> None:
    """checkConsumerCfg, in nats-server's order."""
    if c["name"] and not is_valid_stream_name(c["name"]):
        raise _invalid("consumer name can not contain '.', '*', '>', '\\', '/'")
    if c["durable_name"] and not is_valid_stream_name(c["durable_name"]):
        raise _invalid("consumer durable name can not contain '.', '*', '>', '\\', '/'")
    replicas = c["num_replicas"]
    if replicas > 0 and replicas > stream.num_replicas:
        raise _err(E.CONSUMER_REPLICAS_EXCEEDS_STREAM)
    if replicas < 0:
        raise _err(E.REPLICAS_COUNT_CANNOT_BE_NEGATIVE)
    if stream.retention in ("interest", "workqueue"):
        if replicas not in (0, stream.num_replicas):
            raise _err(E.CONSUMER_REPLICAS_SHOULD_MATCH_STREAM)
    if any(b < 0 for b in c["backoff"]):
        raise _err(E.CONSUMER_BACKOFF_NEGATIVE)
    if c["ack_wait"] < 0:
        raise _err(E.CONSUMER_ACK_WAIT_NEGATIVE)
    if c["ack_policy"] == "flow_control":
        raise _invalid("ack_policy flow_control is not supported by jetraft")
    backoff = len(c["backoff"])
    if backoff and c["max_deliver"] != -1 and backoff > c["max_deliver"]:
        raise _err(E.CONSUMER_MAX_DELIVER_BACKOFF)
    if len(c["description"].encode("utf-8", "surrogatepass")) > DESCRIPTION_BYTES_MAX:
        raise _err(E.CONSUMER_DESCRIPTION_TOO_LONG, max=DESCRIPTION_BYTES_MAX)
    deliver = c["deliver_subject"]
    if deliver:
        if "*" in deliver.split(".") or ">" in deliver.split("."):
            raise _err(E.CONSUMER_DELIVER_TO_WILDCARDS)
        if not is_valid_subject(deliver):
            raise _err(E.CONSUMER_INVALID_DELIVER_SUBJECT)
        if any(subject_is_subset_match(deliver, s) for s in stream.subjects or []):
            raise _err(E.CONSUMER_DELIVER_CYCLE)
        if c["max_waiting"] != 0:
            raise _err(E.CONSUMER_PUSH_MAX_WAITING)
        if c["max_ack_pending"] > 0 and c["ack_policy"] == "none":
            raise _err(E.CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED)
        if 0 < c["idle_heartbeat"] < HEARTBEAT_MIN_NS:
            raise _err(E.CONSUMER_SMALL_HEARTBEAT)
    else:
        if c["ack_policy"] == "none" and stream.retention == "workqueue":
            raise _err(E.CONSUMER_PULL_REQUIRES_ACK)
        if c["rate_limit_bps"] > 0:
            raise _err(E.CONSUMER_PULL_WITH_RATE_LIMIT)
        if c["max_waiting"] < 0:
            raise _err(E.CONSUMER_MAX_WAITING_NEGATIVE)
        if c["idle_heartbeat"] > 0:
            raise _err(E.CONSUMER_HB_REQUIRES_PUSH)
        if c["flow_control"]:
            raise _err(E.CONSUMER_FC_REQUIRES_PUSH)
        if c["max_batch"] < 0:
            raise _err(E.CONSUMER_MAX_REQUEST_BATCH_NEGATIVE)
        if c["max_expires"] != 0 and c["max_expires"] < REQUEST_EXPIRES_MIN_NS:
            raise _err(E.CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL)
    limits = stream.consumer_limits
    if limits.max_ack_pending > 0 and c["max_ack_pending"] > limits.max_ack_pending:
        raise _err(E.CONSUMER_MAX_PENDING_ACK_EXCESS, limit=limits.max_ack_pending)
    if limits.inactive_threshold > 0 and c["inactive_threshold"] > limits.inactive_threshold:
        raise _err(E.CONSUMER_INACTIVE_THRESHOLD_EXCESS, limit=limits.inactive_threshold)
    if c["filter_subject"] and c["filter_subjects"]:
        raise _err(E.CONSUMER_DUPLICATE_FILTER_SUBJECTS)
    if c["filter_subject"] and not is_valid_subject(c["filter_subject"]):
        raise _invalid("invalid subject")
    if any(f == "" for f in c["filter_subjects"]):
        raise _err(E.CONSUMER_EMPTY_FILTER)
    filters = filters_of(c)
    for i, subject in enumerate(filters):
        if not is_valid_subject(subject):
            raise _invalid("invalid subject")
        for j, other in enumerate(filters):
            if i != j and subject_is_subset_match(subject, other):
                raise _err(E.CONSUMER_OVERLAPPING_SUBJECT_FILTERS)
    _check_deliver_policy(c)
    freq = c["sample_freq"]
    if freq:
        text = freq.removesuffix("%")
        if not text.lstrip("-").isdigit() or int(text) < 0:
            raise _err(E.CONSUMER_INVALID_SAMPLING, err=f'strconv.Atoi: parsing "{text}"')
    if c["flow_control"] and c["idle_heartbeat"] == 0:
        raise _err(E.CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS)
    if c["durable_name"] and c["name"] and c["name"] != c["durable_name"]:
        raise _err(E.CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH)
    if c["priority_policy"] != "none" or c["priority_groups"]:
        raise _invalid("priority groups are not supported by jetraft")
    for key in _UNSUPPORTED:
        if c.get(key):
            raise _invalid(f"consumer setting {key!r} is not supported by jetraft")
    metadata = c["metadata"] or {}
    if sum(len(k) + len(v) for k, v in metadata.items()) > METADATA_BYTES_MAX:
        raise _err(E.CONSUMER_METADATA_LENGTH, limit=METADATA_BYTES_MAX)
    if c["opt_start_time"] is not None:
        try:
            parse_rfc3339(c["opt_start_time"])
        except ValueError as exc:
            raise _invalid(str(exc)) from None


def _check_deliver_policy(c: dict[str, Any]) -> None:
    policy = c["deliver_policy"]
    seq, time_ = c["opt_start_seq"] > 0, c["opt_start_time"] is not None
    spoken = {
        "all": "all",
        "last": "last",
        "last_per_subject": "last per subject",
        "new": "new",
        "by_start_sequence": "by start sequence",
        "by_start_time": "by start time",
    }[policy]

    def bad(start: str) -> ApiError:
        return _err(
            E.CONSUMER_INVALID_POLICY,
            err=f"consumer delivery policy is deliver {spoken}, but optional start {start} "
            "is also set",
        )

    def not_set(what: str) -> ApiError:
        return _err(
            E.CONSUMER_INVALID_POLICY,
            err=f"consumer delivery policy is deliver {spoken}, but optional {what} is not set",
        )

    if policy in ("all", "last", "last_per_subject", "new"):
        if seq:
            raise bad("sequence")
        if time_:
            raise bad("time")
        if policy == "last_per_subject" and not filters_of(c):
            raise not_set("filter subject")
    elif policy == "by_start_sequence":
        if not seq:
            raise not_set("start sequence")
        if time_:
            raise bad("time")
    elif policy == "by_start_time":
        if not time_:
            raise not_set("start time")
        if c["opt_start_seq"] != 0:
            raise bad("start sequence")


def filters_of(c: dict[str, Any]) -> list[str]:
    """gatherSubjectFilters: ``filter_subjects``, plus ``filter_subject`` when set."""
    out = list(c.get("filter_subjects") or [])
    if c.get("filter_subject"):
        out.append(c["filter_subject"])
    return out


def normalize(
    req: CreateRequest, name: str, stream: StreamConfig, others: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The normalized config of consumer ``name`` (as CONSUMER.INFO shows it), checked against
    its stream and the stream's other consumers (``others``: name -> config); raises ApiError."""
    c = req.config.model_dump()
    c["backoff"] = list(c["backoff"] or [])
    c["filter_subjects"] = list(c["filter_subjects"] or [])
    _defaults(c, stream, req.pedantic)
    _check(c, stream)
    if not req.durable and c["inactive_threshold"] <= 0:
        c["inactive_threshold"] = EPHEMERAL_INACTIVE_THRESHOLD_NS
    if len(name.encode("utf-8", "surrogatepass")) > CONSUMER_NAME_BYTES_MAX:
        raise _err(E.CONSUMER_NAME_TOO_LONG, max=CONSUMER_NAME_BYTES_MAX)
    metadata = dict(c["metadata"] or {})
    metadata.pop(SERVER_VERSION_KEY, None)
    metadata.pop(SERVER_LEVEL_KEY, None)
    metadata[REQUIRED_LEVEL_KEY] = str(required_level(c))
    c["metadata"] = metadata
    if name not in others and stream.retention == "workqueue":
        _check_workqueue(c, name, others)
    return c


def required_level(c: dict[str, Any]) -> int:
    """nats-server setStaticConsumerMetadata: 1 when a pause is set (priority groups and
    flow-control acks, which also raise it, are refused)."""
    paused = c.get("pause_until") not in (None, "", ZERO_TIME)
    return 1 if paused else 0


def with_pause(c: dict[str, Any], pause_until: str | None) -> dict[str, Any]:
    """The config with a new pause (None or Go's zero time: none), as CONSUMER.PAUSE sets it."""
    out = dict(c)
    if pause_until in (None, "", ZERO_TIME):
        out.pop("pause_until", None)
    else:
        out["pause_until"] = pause_until
    metadata = dict(out.get("metadata") or {})
    metadata[REQUIRED_LEVEL_KEY] = str(required_level(out))
    out["metadata"] = metadata
    return out


def _check_workqueue(c: dict[str, Any], name: str, others: dict[str, dict[str, Any]]) -> None:
    if c["ack_policy"] != "explicit":
        raise _err(E.CONSUMER_WQ_REQUIRES_EXPLICIT_ACK)
    if c["deliver_policy"] != "all":
        raise _err(E.CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL)
    if not others:
        return
    mine = filters_of(c)
    if not mine:
        raise _err(E.CONSUMER_WQ_MULTIPLE_UNFILTERED)
    for other_name, other in others.items():
        if other_name == name:
            continue
        theirs = filters_of(other)
        if not theirs:
            raise _err(E.CONSUMER_WQ_CONSUMER_NOT_UNIQUE)
        for a in mine:
            for b in theirs:
                if subject_is_subset_match(a, b) or subject_is_subset_match(b, a):
                    raise _err(E.CONSUMER_WQ_CONSUMER_NOT_UNIQUE)


def update_error(old: dict[str, Any], new: dict[str, Any]) -> ApiError | None:
    """checkNewConsumerConfig: why ``new`` may not replace ``old`` (10012), or None."""
    if old == new:
        return None
    fixed = (
        ("deliver_policy", "deliver policy can not be updated"),
        ("mem_storage", "storage type can not be updated"),
        ("opt_start_seq", "start sequence can not be updated"),
        ("opt_start_time", "start time can not be updated"),
        ("ack_policy", "ack policy can not be updated"),
        ("replay_policy", "replay policy can not be updated"),
        ("idle_heartbeat", "heart beats can not be updated"),
        ("flow_control", "flow control can not be updated"),
    )
    for key, text in fixed:
        if old.get(key) != new.get(key):
            return ApiError(E.CONSUMER_CREATE, err=text)
    if old.get("deliver_subject") != new.get("deliver_subject"):
        if not old.get("deliver_subject"):
            return ApiError(E.CONSUMER_CREATE, err="can not update pull consumer to push based")
        if not new.get("deliver_subject"):
            return ApiError(E.CONSUMER_CREATE, err="can not update push consumer to pull based")
    if old.get("max_waiting") != new.get("max_waiting"):
        return ApiError(E.CONSUMER_CREATE, err="max waiting can not be updated")
    return None


def config_obj(c: dict[str, Any]) -> dict[str, Any]:
    """The config as nats-server writes it: ConsumerConfig's field order, empty fields omitted."""
    out: dict[str, Any] = {}
    for key in ConsumerConfig.model_fields:
        value = c.get(key)
        if key == "priority_policy" and value == "none":
            continue  # Go's zero PriorityPolicy
        if key in _ALWAYS or value not in (None, "", 0, False, [], {}):
            out[key] = value
    return out


# --- pull requests ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PullRequest:
    batch: int
    max_bytes: int
    expires_ns: int  # 0: never
    no_wait: bool
    heartbeat_ns: int


def parse_next_request(body: bytes) -> PullRequest:
    """nextReqFromMsg: empty -> one message; a number -> that batch; JSON -> its fields (Go's
    lenient json.Unmarshal). Raises ValueError with the text of nats-server's 400 reply."""
    raw = body.strip()
    if not raw:
        return PullRequest(1, 0, 0, False, 0)
    if raw[:1] == b"{":
        try:
            req = decode(raw, NextRequest, strict=False)
        except GoJsonError as exc:
            # Go's own text: the " at offset N" is what nats-server's API adds for 10025 only
            raise ValueError(_OFFSET_SUFFIX.sub("", str(exc))) from None
        if req.idle_heartbeat > 0 and req.idle_heartbeat * 2 > req.expires:
            raise ValueError("heartbeat value too large")
        return PullRequest(req.batch, req.max_bytes, req.expires, req.no_wait, req.idle_heartbeat)
    try:
        return PullRequest(int(raw.decode("ascii")), 0, 0, False, 0)
    except (UnicodeDecodeError, ValueError):
        return PullRequest(1, 0, 0, False, 0)
