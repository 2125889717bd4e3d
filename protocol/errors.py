"""The JetStream API error catalogue, as data.

Every API error jetraft sends comes from this table so that err_code, the HTTP-like code and the
description text are exactly nats-server's (server/errors.json). Descriptions may hold one
``{placeholder}`` that is filled in when the error is raised.

Must never: build an error JSON by hand elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    err_code: int
    code: int
    description: str


class ApiError(Exception):
    """A JetStream API error to be returned to the client as ``{"error": {...}}``."""

    def __init__(self, spec: ErrorSpec, **fmt: Any) -> None:
        self.spec = spec
        self.description = spec.description.format(**fmt) if fmt else spec.description
        super().__init__(self.description)

    @property
    def err_code(self) -> int:
        return self.spec.err_code

    @property
    def code(self) -> int:
        return self.spec.code

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.spec.code,
            "err_code": self.spec.err_code,
            "description": self.description,
        }

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ApiError)
            and other.spec == self.spec
            and other.description == self.description
        )

    def __hash__(self) -> int:
        return hash((self.spec, self.description))

    def __repr__(self) -> str:
        return f"ApiError({self.spec.err_code}, {self.description!r})"


def _e(err_code: int, code: int, description: str) -> ErrorSpec:
    return ErrorSpec(err_code=err_code, code=code, description=description)


# Names follow nats-server's errors.json constants (without the "JS" prefix and "Err" suffix).
ACCOUNT_RESOURCES_EXCEEDED = _e(10002, 400, "resource limits exceeded for account")
BAD_REQUEST = _e(10003, 400, "bad request")
INCOMPLETE_RESULTS = _e(10004, 503, "incomplete results")
CLUSTER_NO_PEERS = _e(10005, 400, "{err}")
CLUSTER_NOT_AVAIL = _e(10008, 503, "JetStream system temporarily unavailable")
CLUSTER_NOT_LEADER = _e(10009, 500, "JetStream cluster can not handle request")
INSUFFICIENT_RESOURCES = _e(10023, 503, "insufficient resources")
INVALID_JSON = _e(10025, 400, "invalid JSON: {err}")
MAXIMUM_STREAMS_LIMIT = _e(10027, 400, "maximum number of streams reached")
MEMORY_RESOURCES_EXCEEDED = _e(10028, 500, "insufficient memory resources available")
MIRROR_WITH_SUBJECTS = _e(10034, 400, "stream mirrors can not contain subjects")
NO_MESSAGE_FOUND = _e(10037, 404, "no message found")
NOT_EMPTY_REQUEST = _e(10038, 400, "expected an empty request payload")
NOT_ENABLED_FOR_ACCOUNT = _e(10039, 503, "JetStream not enabled for account")
SEQUENCE_NOT_FOUND = _e(10043, 400, "sequence {seq} not found")
STORAGE_RESOURCES_EXCEEDED = _e(10047, 500, "insufficient storage resources available")
STREAM_CREATE = _e(10049, 500, "{err}")
STREAM_GENERAL = _e(10051, 500, "{err}")
STREAM_INVALID_CONFIG = _e(10052, 500, "{err}")
STREAM_MESSAGE_EXCEEDS_MAXIMUM = _e(10054, 400, "message size exceeds maximum allowed")
STREAM_MIRROR_NOT_UPDATABLE = _e(10055, 400, "stream mirror configuration can not be updated")
STREAM_MISMATCH = _e(10056, 400, "stream name in subject does not match request")
STREAM_MSG_DELETE_FAILED = _e(10057, 500, "{err}")
STREAM_NAME_EXIST = _e(10058, 400, "stream name already in use with a different configuration")
STREAM_NOT_FOUND = _e(10059, 404, "stream not found")
STREAM_NOT_MATCH = _e(10060, 400, "expected stream does not match")
STREAM_SEQUENCE_NOT_MATCH = _e(10063, 503, "expected stream sequence does not match")
STREAM_SUBJECT_OVERLAP = _e(10065, 400, "subjects overlap with an existing stream")
STREAM_UPDATE = _e(10069, 500, "{err}")
STREAM_WRONG_LAST_MSG_ID = _e(10070, 400, "wrong last msg ID: {id}")
STREAM_WRONG_LAST_SEQUENCE = _e(10071, 400, "wrong last sequence: {seq}")
STREAM_REPLICAS_NOT_SUPPORTED = _e(10074, 500, "replicas > 1 not supported in non-clustered mode")
NOT_ENABLED = _e(10076, 503, "JetStream not enabled")
STREAM_STORE_FAILED = _e(10077, 503, "{err}")
STREAM_HEADER_EXCEEDS_MAXIMUM = _e(10097, 400, "header size exceeds maximum allowed of 64k")
STREAM_SEALED = _e(10109, 400, "invalid operation on sealed stream")
STREAM_PURGE_FAILED = _e(10110, 500, "{err}")
STREAM_ROLLUP_FAILED = _e(10111, 500, "{err}")
STREAM_MAX_BYTES_REQUIRED = _e(10113, 400, "account requires a stream config to have max bytes set")
STREAM_OFFLINE = _e(10118, 500, "stream is offline")
STREAM_NAME_CONTAINS_PATH_SEPARATORS = _e(10128, 400, "Stream name can not contain path separators")
REPLICAS_COUNT_CANNOT_BE_NEGATIVE = _e(10133, 400, "replicas count cannot be negative")
PEDANTIC = _e(10157, 400, "pedantic mode: {err}")
STREAM_DUPLICATE_MESSAGE_CONFLICT = _e(10158, 409, "duplicate message id is in process")
STREAM_WRONG_LAST_SEQUENCE_CONSTANT = _e(10164, 400, "wrong last sequence")
MESSAGE_TTL_INVALID = _e(10165, 400, "invalid per-message TTL")
MESSAGE_TTL_DISABLED = _e(10166, 400, "per-message TTL is disabled")
STREAM_TOO_MANY_REQUESTS = _e(10167, 429, "too many requests")
ATOMIC_PUBLISH_DISABLED = _e(10174, 400, "atomic publish is disabled")
ATOMIC_PUBLISH_MISSING_SEQ = _e(10175, 400, "atomic publish sequence is missing")
ATOMIC_PUBLISH_INCOMPLETE_BATCH = _e(10176, 400, "atomic publish batch is incomplete")
ATOMIC_PUBLISH_UNSUPPORTED_HEADER_BATCH = _e(
    10177, 400, "atomic publish unsupported header used: {header}"
)
ATOMIC_PUBLISH_INVALID_BATCH_ID = _e(10179, 400, "atomic publish batch ID is invalid")
REQUIRED_API_LEVEL = _e(10185, 412, "JetStream minimum api level required")
STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY = _e(
    10193, 400, "missing sequence for expected last sequence per subject"
)
MIRROR_WITH_ATOMIC_PUBLISH = _e(10198, 400, "stream mirrors can not also use atomic publishing")
ATOMIC_PUBLISH_TOO_LARGE_BATCH = _e(10199, 400, "atomic publish batch is too large: {size}")
ATOMIC_PUBLISH_INVALID_BATCH_COMMIT = _e(10200, 400, "atomic publish batch commit is invalid")
ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE = _e(
    10201, 400, "atomic publish batch contains duplicate message id"
)
ATOMIC_PUBLISH_TOO_MANY_INFLIGHT = _e(10210, 429, "atomic publish too many inflight")
MESSAGE_SOURCE_HEADER_NOT_ALLOWED = _e(10227, 400, "message stream source header is not allowed")

# Mirror, source and transform config errors (stream config checks).
STREAM_EXTERNAL_API_OVERLAP = _e(
    10021, 400, "stream external api prefix {prefix} must not overlap with {subject}"
)
STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS = _e(
    10022, 400, "stream external delivery prefix {prefix} overlaps with stream subject {subject}"
)
STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ = _e(
    10024, 400, "stream external delivery prefix {prefix} must not contain wildcards"
)
MIRROR_MAX_MESSAGE_SIZE_TOO_BIG = _e(
    10030, 400, "stream mirror must have max message size >= source"
)
MIRROR_WITH_SOURCES = _e(10031, 400, "stream mirrors can not also contain other sources")
SOURCE_MAX_MESSAGE_SIZE_TOO_BIG = _e(
    10046, 400, "stream source must have max message size >= target"
)
SOURCE_DUPLICATE_DETECTED = _e(10140, 400, "duplicate source configuration detected")
SOURCE_INVALID_STREAM_NAME = _e(10141, 400, "sourced stream name is invalid")
MIRROR_INVALID_STREAM_NAME = _e(10142, 400, "mirrored stream name is invalid")
MIRROR_WITH_FIRST_SEQ = _e(10143, 400, "stream mirrors can not have first sequence configured")
SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED = _e(
    10144, 400, "source with multiple subject transforms cannot also have a single subject filter"
)
SOURCE_INVALID_SUBJECT_FILTER = _e(10145, 400, "source transform source: {err}")
SOURCE_INVALID_TRANSFORM_DESTINATION = _e(10146, 400, "source transform: {err}")
MIRROR_INVALID_TRANSFORM_DESTINATION = _e(10154, 400, "mirror transform: {err}")
SOURCE_OVERLAPPING_SUBJECT_FILTERS = _e(10147, 400, "source filters can not overlap")
MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED = _e(
    10150, 400, "mirror with multiple subject transforms cannot also have a single subject filter"
)
MIRROR_INVALID_SUBJECT_FILTER = _e(10151, 400, "mirror transform source: {err}")
MIRROR_OVERLAPPING_SUBJECT_FILTERS = _e(10152, 400, "mirror subject filters can not overlap")
STREAM_TRANSFORM_INVALID_SOURCE = _e(10155, 400, "stream transform source: {err}")
STREAM_TRANSFORM_INVALID_DESTINATION = _e(10156, 400, "stream transform: {err}")
MESSAGE_INCR_DISABLED = _e(10168, 400, "message counters is disabled")
MESSAGE_INCR_MISSING = _e(10169, 400, "message counter increment is missing")
MESSAGE_INCR_PAYLOAD = _e(10170, 400, "message counter has payload")
MESSAGE_INCR_INVALID = _e(10171, 400, "message counter increment is invalid")
MESSAGE_COUNTER_BROKEN = _e(10172, 400, "message counter is broken")
MESSAGE_SCHEDULES_DISABLED = _e(10188, 400, "message schedules is disabled")
MESSAGE_SCHEDULES_PATTERN_INVALID = _e(10189, 400, "message schedules pattern is invalid")
MESSAGE_SCHEDULES_TARGET_INVALID = _e(10190, 400, "message schedules target is invalid")
MESSAGE_SCHEDULES_TTL_INVALID = _e(10191, 400, "message schedules invalid per-message TTL")
MESSAGE_SCHEDULES_ROLLUP_INVALID = _e(10192, 400, "message schedules invalid rollup")
MESSAGE_SCHEDULES_SOURCE_INVALID = _e(10203, 400, "message schedules source is invalid")
MESSAGE_SCHEDULES_SCHEDULER_INVALID = _e(10212, 400, "message schedules invalid scheduler")
MESSAGE_SCHEDULES_TIME_ZONE_INVALID = _e(10223, 400, "message schedules time zone is invalid")
MIRROR_WITH_COUNTERS = _e(10173, 400, "stream mirrors can not also calculate counters")
MIRROR_WITH_MSG_SCHEDULES = _e(10186, 400, "stream mirrors can not also schedule messages")
SOURCE_WITH_MSG_SCHEDULES = _e(10187, 400, "stream source can not also schedule messages")
MIRROR_WITH_BATCH_PUBLISH = _e(10209, 400, "stream mirrors can not also use batch publishing")
MIRROR_DURABLE_CONSUMER_CFG_INVALID = _e(10213, 400, "stream mirror consumer config is invalid")
SOURCE_DURABLE_CONSUMER_CFG_INVALID = _e(10215, 400, "stream source consumer config is invalid")
SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED = _e(
    10216, 400, "duplicate stream source consumer detected"
)


# --- consumers (server/errors.json) --------------------------------------------------------------
CONSUMER_CREATE = _e(10012, 500, "{err}")
CONSUMER_NAME_EXIST = _e(10013, 400, "consumer name already in use")
CONSUMER_NOT_FOUND = _e(10014, 404, "consumer not found")
CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT = _e(
    10016, 400, "consumer expected to be durable but no durable name set in subject"
)
CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT = _e(
    10017, 400, "consumer name in subject does not match durable name in request"
)
CONSUMER_DURABLE_NAME_NOT_SET = _e(
    10018, 400, "consumer expected to be durable but a durable name was not set"
)
CONSUMER_EPHEMERAL_WITH_DURABLE_IN_SUBJECT = _e(
    10019, 400, "consumer expected to be ephemeral but detected a durable name set in subject"
)
CONSUMER_EPHEMERAL_WITH_DURABLE_NAME = _e(
    10020, 400, "consumer expected to be ephemeral but a durable name was set in request"
)
MAXIMUM_CONSUMERS_LIMIT = _e(10026, 400, "maximum consumers limit reached")
CONSUMER_CONFIG_REQUIRED = _e(10078, 400, "consumer config required")
CONSUMER_DELIVER_TO_WILDCARDS = _e(10079, 400, "consumer deliver subject has wildcards")
CONSUMER_PUSH_MAX_WAITING = _e(10080, 400, "consumer in push mode can not set max waiting")
CONSUMER_DELIVER_CYCLE = _e(10081, 400, "consumer deliver subject forms a cycle")
CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED = _e(
    10082, 400, "consumer requires ack policy for max ack pending"
)
CONSUMER_SMALL_HEARTBEAT = _e(10083, 400, "consumer idle heartbeat needs to be >= 100ms")
CONSUMER_PULL_REQUIRES_ACK = _e(
    10084, 400, "consumer in pull mode requires explicit ack policy on workqueue stream"
)
CONSUMER_PULL_WITH_RATE_LIMIT = _e(10086, 400, "consumer in pull mode can not have rate limit set")
CONSUMER_MAX_WAITING_NEGATIVE = _e(10087, 400, "consumer max waiting needs to be positive")
CONSUMER_HB_REQUIRES_PUSH = _e(10088, 400, "consumer idle heartbeat requires a push based consumer")
CONSUMER_FC_REQUIRES_PUSH = _e(10089, 400, "consumer flow control requires a push based consumer")
CONSUMER_INVALID_POLICY = _e(10094, 400, "{err}")
CONSUMER_INVALID_SAMPLING = _e(10095, 400, "failed to parse consumer sampling configuration: {err}")
CONSUMER_WQ_REQUIRES_EXPLICIT_ACK = _e(10098, 400, "workqueue stream requires explicit ack")
CONSUMER_WQ_MULTIPLE_UNFILTERED = _e(
    10099, 400, "multiple non-filtered consumers not allowed on workqueue stream"
)
CONSUMER_WQ_CONSUMER_NOT_UNIQUE = _e(10100, 400, "filtered consumer not unique on workqueue stream")
CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL = _e(
    10101, 400, "consumer must be deliver all on workqueue stream"
)
CONSUMER_NAME_TOO_LONG = _e(10102, 400, "consumer name is too long, maximum allowed is {max}")
CONSUMER_DESCRIPTION_TOO_LONG = _e(
    10107, 400, "consumer description is too long, maximum allowed is {max}"
)
CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS = _e(
    10108, 400, "consumer with flow control also needs heartbeats"
)
CONSUMER_INVALID_DELIVER_SUBJECT = _e(10112, 400, "invalid push consumer deliver subject")
CONSUMER_MAX_REQUEST_BATCH_NEGATIVE = _e(10114, 400, "consumer max request batch needs to be > 0")
CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL = _e(
    10115, 400, "consumer max request expires needs to be >= 1ms"
)
CONSUMER_MAX_DELIVER_BACKOFF = _e(
    10116, 400, "max deliver is required to be > length of backoff values"
)
CONSUMER_OFFLINE = _e(10119, 500, "consumer is offline")
CONSUMER_MAX_PENDING_ACK_EXCESS = _e(
    10121, 400, "consumer max ack pending exceeds system limit of {limit}"
)
CONSUMER_REPLICAS_EXCEEDS_STREAM = _e(
    10126, 400, "consumer config replica count exceeds parent stream"
)
CONSUMER_NAME_CONTAINS_PATH_SEPARATORS = _e(
    10127, 400, "Consumer name can not contain path separators"
)
CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH = _e(
    10131, 400, "Consumer create request did not match filtered subject from create subject"
)
CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH = _e(
    10132, 400, "Consumer Durable and Name have to be equal if both are provided"
)
CONSUMER_REPLICAS_SHOULD_MATCH_STREAM = _e(
    10134, 400, "consumer config replicas must match interest retention stream's replicas"
)
CONSUMER_METADATA_LENGTH = _e(10135, 400, "consumer metadata exceeds maximum size of {limit}")
CONSUMER_DUPLICATE_FILTER_SUBJECTS = _e(
    10136, 400, "consumer cannot have both FilterSubject and FilterSubjects specified"
)
CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED = _e(
    10137, 400, "consumer with multiple subject filters cannot use subject based API"
)
CONSUMER_OVERLAPPING_SUBJECT_FILTERS = _e(10138, 400, "consumer subject filters cannot overlap")
CONSUMER_EMPTY_FILTER = _e(10139, 400, "consumer filter in FilterSubjects cannot be empty")
CONSUMER_ALREADY_EXISTS = _e(10148, 400, "consumer already exists")
CONSUMER_DOES_NOT_EXIST = _e(10149, 400, "consumer does not exist")
CONSUMER_INACTIVE_THRESHOLD_EXCESS = _e(
    10153, 400, "consumer inactive threshold exceeds system limit of {limit}"
)
CONSUMER_ACK_POLICY_INVALID = _e(10181, 400, "consumer ack policy invalid")
CONSUMER_REPLAY_POLICY_INVALID = _e(10182, 400, "consumer replay policy invalid")
CONSUMER_ACK_WAIT_NEGATIVE = _e(10183, 400, "consumer ack wait needs to be positive")
CONSUMER_BACKOFF_NEGATIVE = _e(10184, 400, "consumer backoff needs to be positive")

# --- cluster operations ---------------------------------------------------------------------
CLUSTER_REQUIRED = _e(10010, 503, "JetStream clustering support required")
RAFT_GENERAL = _e(10041, 500, "{err}")
CLUSTER_PEER_NOT_MEMBER = _e(10040, 400, "peer not a member")
CLUSTER_SERVER_NOT_MEMBER = _e(10044, 400, "server is not a member of the cluster")
NO_ACCOUNT = _e(10035, 503, "account not found")
STREAM_RECONFIGURE_NOT_IN_PROGRESS = _e(10129, 400, "stream reconfiguration not in progress")
CLUSTER_RESCUE = _e(10224, 400, "JetStream system rescue not applied: {err}")

# --- snapshots and restores -----------------------------------------------------------------
SNAPSHOT_DELIVER_SUBJECT_INVALID = _e(10015, 400, "deliver subject not valid")
STREAM_SNAPSHOT = _e(10064, 500, "snapshot failed: {err}")
STREAM_RESTORE = _e(10062, 500, "restore failed: {err}")
STREAM_NAME_EXIST_RESTORE_FAILED = _e(10130, 400, "stream name already in use, cannot restore")

# --- priority groups (CONSUMER.UNPIN) -------------------------------------------------------
CONSUMER_INVALID_PRIORITY_GROUP = _e(
    10160, 400, "Provided priority group does not exist for this consumer"
)
CONSUMER_INVALID_GROUP_NAME = _e(
    10162,
    400,
    "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters",
)
CONSUMER_INVALID_RESET = _e(10204, 400, "invalid reset: {err}")
