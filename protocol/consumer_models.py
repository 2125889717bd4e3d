"""Consumer API request models: what clients send to ``$JS.API.CONSUMER.*``.

Field names, order, Go types and defaults follow nats-server 2.15's ConsumerConfig,
CreateConsumerRequest and JSApiConsumerGetNextRequest, so the strict decoder
(``protocol/gojson.py``) gives Go's error texts. The Python defaults are Go's zero values: a
decoded config is not yet normalized (``protocol/consumer_config.py`` fills in the defaults).

Must never: perform I/O, read clocks, or hold validation rules.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from protocol.models import DURATION, INT, TIME, UINT64, GoEnum, GoIntSlice, GoStruct

AckPolicy = Literal["none", "all", "explicit", "flow_control"]
DeliverPolicy = Literal[
    "all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"
]
ReplayPolicy = Literal["instant", "original"]
PriorityPolicy = Literal["none", "overflow", "pinned_client", "prioritized"]

ACK_POLICY = GoEnum(
    "server.AckPolicy",
    (
        ('"none"', "none"),
        ('"all"', "all"),
        ('"explicit"', "explicit"),
        ('"flow_control"', "flow_control"),
    ),
    zero="none",
)
DELIVER_POLICY = GoEnum(
    "server.DeliverPolicy",
    (
        ('"all"', "all"),
        ('"undefined"', "all"),
        ('"last"', "last"),
        ('"new"', "new"),
        ('"by_start_sequence"', "by_start_sequence"),
        ('"by_start_time"', "by_start_time"),
        ('"last_per_subject"', "last_per_subject"),
    ),
    zero="all",
)
REPLAY_POLICY = GoEnum(
    "server.ReplayPolicy",
    (('"instant"', "instant"), ('"original"', "original")),
    zero="instant",
)
PRIORITY_POLICY = GoEnum(
    "server.PriorityPolicy",
    (
        ('"none"', "none"),
        ('""', "none"),
        ('"overflow"', "overflow"),
        ('"pinned_client"', "pinned_client"),
        ('"prioritized"', "prioritized"),
    ),
    zero="none",
)


class ConsumerConfig(GoStruct):
    go_name: ClassVar[str] = "server.ConsumerConfig"

    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: Annotated[DeliverPolicy, DELIVER_POLICY] = "all"
    opt_start_seq: Annotated[int, UINT64] = 0
    opt_start_time: Annotated[str | None, TIME] = None
    ack_policy: Annotated[AckPolicy, ACK_POLICY] = "none"
    ack_wait: Annotated[int, DURATION] = 0
    max_deliver: Annotated[int, INT] = 0
    backoff: Annotated[list[int] | None, GoIntSlice(DURATION)] = None
    filter_subject: str = ""
    filter_subjects: list[str] | None = None
    replay_policy: Annotated[ReplayPolicy, REPLAY_POLICY] = "instant"
    rate_limit_bps: Annotated[int, UINT64] = 0
    sample_freq: str = ""
    max_waiting: Annotated[int, INT] = 0
    max_ack_pending: Annotated[int, INT] = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: Annotated[int, INT] = 0
    max_expires: Annotated[int, DURATION] = 0
    max_bytes: Annotated[int, INT] = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: Annotated[int, DURATION] = 0
    inactive_threshold: Annotated[int, DURATION] = 0
    num_replicas: Annotated[int, INT] = 0
    mem_storage: bool = False
    direct: bool = False
    sourcing: bool = False
    metadata: dict[str, str] | None = None
    pause_until: Annotated[str | None, TIME] = None
    priority_groups: list[str] | None = None
    priority_policy: Annotated[PriorityPolicy, PRIORITY_POLICY] = "none"
    priority_timeout: Annotated[int, DURATION] = 0


class CreateConsumerRequest(GoStruct):
    go_name: ClassVar[str] = "server.CreateConsumerRequest"

    stream_name: str = ""
    config: ConsumerConfig = ConsumerConfig()
    action: str = ""
    pedantic: bool = False


class NextRequest(GoStruct):
    """The JSON body of a pull request (``CONSUMER.MSG.NEXT``); a plain number is a batch."""

    go_name: ClassVar[str] = "server.JSApiConsumerGetNextRequest"

    expires: Annotated[int, DURATION] = 0
    batch: Annotated[int, INT] = 0
    max_bytes: Annotated[int, INT] = 0
    no_wait: bool = False
    idle_heartbeat: Annotated[int, DURATION] = 0
    group: str = ""
    id: str = ""
    min_pending: Annotated[int, INT] = 0
    min_ack_pending: Annotated[int, INT] = 0
    priority: Annotated[int, INT] = 0


class ConsumerNamesRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiConsumersRequest"

    offset: Annotated[int, INT] = 0


class PauseRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiConsumerPauseRequest"

    pause_until: Annotated[str | None, TIME] = None


class UnpinRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiConsumerUnpinRequest"

    group: str = ""


class ResetRequest(GoStruct):
    go_name: ClassVar[str] = "server.JSApiConsumerResetRequest"

    seq: Annotated[int, UINT64] = 0
