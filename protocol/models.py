"""JetStream API models (pydantic): what clients send and what jetraft answers.

Field names, order and defaults follow nats-server 2.15's StreamConfig and request structs; the
field order here is the JSON key order nats-server writes. Durations are integer nanoseconds on
the wire. Each field also records the **Go type** nats-server declares for it (``Annotated``
metadata below), because the strict request decoder (``protocol/gojson.py``) must reproduce Go's
``encoding/json`` behaviour and error texts — ``cannot unmarshal number -1 into Go struct field
StreamConfigRequest.first_seq of type uint64`` — and those depend on the Go type, not the Python
one. Validation and defaulting rules live in ``protocol/stream_config.py``; this module only
describes shapes.

Must never: perform I/O, read clocks, or hold validation rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

# --- Go type metadata (read by protocol/gojson.py) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class GoInt:
    """A Go integer type: its name as Go prints it, and its range."""

    type_name: str
    min_value: int
    max_value: int


@dataclass(frozen=True, slots=True)
class GoIntSlice:
    """A Go slice of an integer type (``[]time.Duration``): its element type."""

    element: GoInt


@dataclass(frozen=True, slots=True)
class GoIntMap:
    """A Go map from strings to an integer type (``map[string]uint64``): its value type."""

    element: GoInt


@dataclass(frozen=True, slots=True)
class GoEnum:
    """A Go type with a custom ``UnmarshalJSON``.

    ``raw`` maps the raw JSON literal (``'"limits"'``) to the Python value; with ``fold_case`` the
    raw text is lower-cased first (DiscardPolicy does that). ``via_string`` means the type first
    unmarshals into a Go string and then matches (StoreCompression), with ``unknown_text`` as the
    error for an unknown value.
    """

    type_name: str
    raw: tuple[tuple[str, str], ...]
    zero: str
    fold_case: bool = False
    via_string: bool = False
    unknown_text: str = ""


@dataclass(frozen=True, slots=True)
class GoTime:
    """A Go ``*time.Time``: an RFC 3339 string (kept as text here), or null."""


@dataclass(frozen=True, slots=True)
class GoName:
    """The Go type name of a struct, pointer-to-struct, slice or named string field (for error
    texts)."""

    type_name: str


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
INT64 = GoInt("int64", _I64_MIN, _I64_MAX)
INT = GoInt("int", _I64_MIN, _I64_MAX)
INT32 = GoInt("int32", -(1 << 31), (1 << 31) - 1)
UINT16 = GoInt("uint16", 0, (1 << 16) - 1)
UINT64 = GoInt("uint64", 0, (1 << 64) - 1)
DURATION = GoInt("time.Duration", _I64_MIN, _I64_MAX)
TIME = GoTime()

RETENTION = GoEnum(
    "server.RetentionPolicy",
    (('"limits"', "limits"), ('"interest"', "interest"), ('"workqueue"', "workqueue")),
    zero="limits",
)
DISCARD = GoEnum(
    "server.DiscardPolicy", (('"old"', "old"), ('"new"', "new")), zero="old", fold_case=True
)
# Go's zero StorageType means "unset" and is defaulted to file storage.
STORAGE = GoEnum("server.StorageType", (('"file"', "file"), ('"memory"', "memory")), zero="file")
COMPRESSION = GoEnum(
    "server.StoreCompression",
    (("none", "none"), ("s2", "s2")),
    zero="none",
    via_string=True,
    unknown_text="unknown compression algorithm",
)
PERSIST_MODE = GoEnum(
    "server.PersistModeType",
    (('"default"', "default"), ('""', "default"), ('"async"', "async")),
    zero="default",
)

Retention = Literal["limits", "interest", "workqueue"]
Discard = Literal["old", "new"]
Storage = Literal["file", "memory"]
Compression = Literal["none", "s2"]
PersistMode = Literal["default", "async"]


class GoStruct(BaseModel):
    """Base of every model decoded from a JetStream API request.

    ``go_name`` is the Go type (``server.StreamSource``) used in decode error texts.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    go_name: ClassVar[str] = ""


# --- StreamConfig and its parts ------------------------------------------------------------------


class Placement(GoStruct):
    go_name: ClassVar[str] = "server.Placement"

    cluster: str = ""
    tags: list[str] | None = None
    preferred: str = ""


class SubjectTransform(GoStruct):
    go_name: ClassVar[str] = "server.SubjectTransformConfig"

    src: str = ""
    dest: str = ""


class ExternalStream(GoStruct):
    go_name: ClassVar[str] = "server.ExternalStream"

    api: str = ""
    deliver: str = ""


class StreamConsumerSource(GoStruct):
    go_name: ClassVar[str] = "server.StreamConsumerSource"

    name: str = ""
    deliver_subject: str = ""


class StreamSource(GoStruct):
    go_name: ClassVar[str] = "server.StreamSource"

    name: str = ""
    opt_start_seq: Annotated[int, UINT64] = 0
    opt_start_time: Annotated[str | None, TIME] = None
    filter_subject: str = ""
    subject_transforms: Annotated[
        list[SubjectTransform] | None, GoName("[]server.SubjectTransformConfig")
    ] = None
    external: ExternalStream | None = None
    consumer: StreamConsumerSource | None = None


class RePublish(GoStruct):
    go_name: ClassVar[str] = "server.RePublish"

    src: str = ""
    dest: str = ""
    headers_only: bool = False


class ConsumerLimits(GoStruct):
    go_name: ClassVar[str] = "server.StreamConsumerLimits"

    inactive_threshold: Annotated[int, DURATION] = 0
    max_ack_pending: Annotated[int, INT] = 0


class StreamConfig(GoStruct):
    """A stream configuration. After ``stream_config.normalize_*`` every default is filled in.

    The Python defaults below are the *normalized* ones (-1 = unlimited), convenient for building
    configs in code; the request decoder starts from Go's zero values instead, exactly as
    nats-server does. ``persist_mode`` is ``"default"`` unless async (a request may send ``""``,
    which Go reads as the default mode too).
    """

    go_name: ClassVar[str] = "server.StreamConfig"

    name: str = ""
    description: str = ""
    subjects: list[str] = Field(default_factory=list)
    retention: Annotated[Retention, RETENTION] = "limits"
    max_consumers: Annotated[int, INT] = -1
    max_msgs: Annotated[int, INT64] = -1
    max_bytes: Annotated[int, INT64] = -1
    max_age: Annotated[int, DURATION] = 0
    max_msgs_per_subject: Annotated[int, INT64] = -1
    max_msg_size: Annotated[int, INT32] = -1
    discard: Annotated[Discard, DISCARD] = "old"
    storage: Annotated[Storage, STORAGE] = "file"
    num_replicas: Annotated[int, INT] = 1
    no_ack: bool = False
    duplicate_window: Annotated[int, DURATION] = 0
    placement: Placement | None = None
    mirror: StreamSource | None = None
    sources: Annotated[list[StreamSource] | None, GoName("[]*server.StreamSource")] = None
    compression: Annotated[Compression, COMPRESSION] = "none"
    first_seq: Annotated[int, UINT64] = 0
    subject_transform: SubjectTransform | None = None
    republish: RePublish | None = None
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: ConsumerLimits = Field(default_factory=ConsumerLimits)
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: Annotated[int, DURATION] = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    persist_mode: Annotated[PersistMode, PERSIST_MODE] = "default"
    allow_batched: bool = False
    metadata: dict[str, str] | None = None


class StreamConfigRequest(StreamConfig):
    """The body of STREAM.CREATE / STREAM.UPDATE: a StreamConfig plus the request-scoped
    ``pedantic`` flag (Go embeds StreamConfig, so error texts name this type)."""

    go_name: ClassVar[str] = "server.StreamConfigRequest"

    pedantic: bool = False


# --- Other request bodies ------------------------------------------------------------------------


class StreamInfoRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiStreamInfoRequest"

    offset: Annotated[int, INT] = 0
    deleted_details: bool = False
    subjects_filter: str = ""


class StreamNamesRequest(GoStruct):
    """Also the STREAM.LIST body (the Go types differ only by name)."""

    go_name: ClassVar[str] = "server.JSApiStreamNamesRequest"

    offset: Annotated[int, INT] = 0
    subject: str = ""


class StreamListRequest(StreamNamesRequest):
    go_name: ClassVar[str] = "server.JSApiStreamListRequest"


class StreamPurgeRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiStreamPurgeRequest"

    seq: Annotated[int, UINT64] = 0
    filter: str = ""
    keep: Annotated[int, UINT64] = 0


class MsgDeleteRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiMsgDeleteRequest"

    seq: Annotated[int, UINT64] = 0
    no_erase: bool = False


class MsgGetRequest(GoStruct):
    """The body of STREAM.MSG.GET and of Direct Get (JSApiMsgGetRequest).

    ``start_time``/``up_to_time`` keep the client's RFC 3339 text (validated when decoded with
    ``gojson``); convert with ``timefmt.parse_rfc3339``.
    """

    go_name: ClassVar[str] = "server.JSApiMsgGetRequest"

    seq: Annotated[int, UINT64] = 0
    last_by_subj: str = ""
    next_by_subj: str = ""
    batch: Annotated[int, INT] = 0
    max_bytes: Annotated[int, INT] = 0
    start_time: Annotated[str | None, TIME] = None
    multi_last: list[str] | None = None
    up_to_seq: Annotated[int, UINT64] = 0
    up_to_time: Annotated[str | None, TIME] = None
    no_hdr: bool = False


class StreamSnapshotRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiStreamSnapshotRequest"

    deliver_subject: str = ""
    no_consumers: bool = False
    chunk_size: Annotated[int, INT] = 0
    window_size: Annotated[int, INT] = 0
    jsck: bool = False


class LostStreamData(GoStruct):
    go_name: ClassVar[str] = "server.LostStreamData"

    msgs: Annotated[list[int] | None, GoIntSlice(UINT64)] = None
    bytes: Annotated[int, UINT64] = 0


class StreamState(GoStruct):
    """A stream's state as a restore request carries it (nats-server's ``StreamState``)."""

    go_name: ClassVar[str] = "server.StreamState"

    messages: Annotated[int, UINT64] = 0
    bytes: Annotated[int, UINT64] = 0
    first_seq: Annotated[int, UINT64] = 0
    first_ts: Annotated[str | None, TIME] = None
    last_seq: Annotated[int, UINT64] = 0
    last_ts: Annotated[str | None, TIME] = None
    num_subjects: Annotated[int, INT] = 0
    subjects: Annotated[dict[str, int] | None, GoIntMap(UINT64)] = None
    num_deleted: Annotated[int, INT] = 0
    deleted: Annotated[list[int] | None, GoIntSlice(UINT64)] = None
    lost: LostStreamData | None = None
    consumer_count: Annotated[int, INT] = 0


class StreamRestoreRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiStreamRestoreRequest"

    config: StreamConfig = Field(default_factory=StreamConfig)
    state: StreamState = Field(default_factory=StreamState)


class StreamRemovePeerRequest(GoStruct):
    """STREAM.PEER.REMOVE and STREAM.PEER.EVACUATE: a server name or peer id."""

    go_name: ClassVar[str] = "server.JSApiStreamRemovePeerRequest"

    peer: str = ""


class MetaServerRemoveRequest(GoStruct):
    """SERVER.REMOVE and SERVER.EVACUATE: ``peer`` is the server's name, ``peer_id`` its id."""

    go_name: ClassVar[str] = "server.JSApiMetaServerRemoveRequest"

    peer: str = ""
    peer_id: str = ""


class MetaRescueRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiMetaRescueRequest"

    quorum_needed: Annotated[int, INT] = 0


class MetaServerStreamMoveRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiMetaServerStreamMoveRequest"

    server: str = ""
    cluster: str = ""
    domain: str = ""
    tags: list[str] | None = None


class LeaderStepdownRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiLeaderStepdownRequest"

    placement: Placement | None = None


# --- Responses -----------------------------------------------------------------------------------


class PubAck(BaseModel):
    """A successful publish acknowledgement (see ``api_json.pub_ack_json`` for exact bytes)."""

    stream: str
    seq: int
    duplicate: bool = False
    domain: str | None = None
    batch: str | None = None
    count: int | None = None


JsonDict = dict[str, Any]
