"""JetStream API models (pydantic): what clients send and what jetraft answers.

Field names, order and defaults follow nats-server 2.15's StreamConfig/StreamInfo JSON. Durations are
integer nanoseconds on the wire. Validation and defaulting rules live in ``protocol/stream_config.py``;
this module only describes shapes.

Must never: perform I/O or read clocks.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Placement(_Strict):
    cluster: str | None = None
    tags: list[str] | None = None
    preferred: str | None = None


class SubjectTransform(_Strict):
    src: str = ""
    dest: str = ""


class ExternalStream(_Strict):
    api: str = Field(default="", alias="api")
    deliver: str = ""


class StreamSource(_Strict):
    name: str = ""
    opt_start_seq: int = 0
    opt_start_time: str | None = None
    filter_subject: str = ""
    subject_transforms: list[SubjectTransform] | None = None
    external: ExternalStream | None = None


class RePublish(_Strict):
    src: str = ""
    dest: str = ""
    headers_only: bool = False


class ConsumerLimits(_Strict):
    inactive_threshold: int = 0
    max_ack_pending: int = 0


class StreamConfig(_Strict):
    """A stream configuration after defaults have been filled in (see stream_config.normalize)."""

    name: str = ""
    description: str = ""
    subjects: list[str] = Field(default_factory=list)
    retention: Literal["limits", "interest", "workqueue"] = "limits"
    max_consumers: int = -1
    max_msgs: int = -1
    max_bytes: int = -1
    max_age: int = 0
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: Literal["old", "new"] = "old"
    storage: Literal["file", "memory"] = "file"
    num_replicas: int = 1
    no_ack: bool = False
    duplicate_window: int = 0
    placement: Placement | None = None
    mirror: StreamSource | None = None
    sources: list[StreamSource] | None = None
    compression: Literal["none", "s2"] = "none"
    first_seq: int = 0
    subject_transform: SubjectTransform | None = None
    republish: RePublish | None = None
    allow_direct: bool = False
    mirror_direct: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    discard_new_per_subject: bool = False
    consumer_limits: ConsumerLimits = Field(default_factory=ConsumerLimits)
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: int = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    allow_batched: bool = False
    persist_mode: Literal["default", "async", ""] = ""
    metadata: dict[str, str] | None = None


class PubAck(BaseModel):
    stream: str
    seq: int
    duplicate: bool = False
    domain: str | None = None
    batch: str | None = None
    count: int | None = None


class MsgGetRequest(BaseModel):
    """The body of STREAM.MSG.GET and of Direct Get (JSApiMsgGetRequest)."""

    model_config = ConfigDict(extra="forbid")

    seq: int = 0
    last_by_subj: str = ""
    next_by_subj: str = ""
    batch: int = 0
    max_bytes: int = 0
    start_time: str | None = None
    multi_last: list[str] | None = None
    up_to_seq: int = 0
    up_to_time: str | None = None
    no_hdr: bool = False


JsonDict = dict[str, Any]
