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
SOURCE_OVERLAPPING_SUBJECT_FILTERS = _e(10147, 400, "source filters can not overlap")
MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED = _e(
    10150, 400, "mirror with multiple subject transforms cannot also have a single subject filter"
)
MIRROR_INVALID_SUBJECT_FILTER = _e(10151, 400, "mirror transform source: {err}")
MIRROR_OVERLAPPING_SUBJECT_FILTERS = _e(10152, 400, "mirror subject filters can not overlap")
STREAM_TRANSFORM_INVALID_SOURCE = _e(10155, 400, "stream transform source: {err}")
MIRROR_WITH_COUNTERS = _e(10173, 400, "stream mirrors can not also calculate counters")
MIRROR_WITH_MSG_SCHEDULES = _e(10186, 400, "stream mirrors can not also schedule messages")
SOURCE_WITH_MSG_SCHEDULES = _e(10187, 400, "stream source can not also schedule messages")
MIRROR_WITH_BATCH_PUBLISH = _e(10209, 400, "stream mirrors can not also use batch publishing")
MIRROR_DURABLE_CONSUMER_CFG_INVALID = _e(10213, 400, "stream mirror consumer config is invalid")
SOURCE_DURABLE_CONSUMER_CFG_INVALID = _e(10215, 400, "stream source consumer config is invalid")
SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED = _e(
    10216, 400, "duplicate stream source consumer detected"
)
