"""The request bodies of nats-server's system requests (``$SYS.REQ.SERVER.PING[.<KIND>]``,
``$SYS.REQ.SERVER.<id>.<KIND>`` and ``$SYS.REQ.ACCOUNT.<account>.<KIND>``): its ``*EventOptions``
structs (events.go), each the endpoint's options (``ConnzOptions``, ``JSzOptions``, ...) with the
``EventFilterOptions`` that pick which servers answer, under their JSON names, and the body of an
account's connection count request (``accNumConnsReq``). Decoded with Go's ``json.Unmarshal`` rules
(``protocol/gojson.unmarshal``: unknown fields ignored, nats-server's error texts), so a bad
body gets nats-server's ``json: cannot unmarshal ... into Go struct field
ConnzEventOptions.sort of type server.SortOpt``.

Also the filter itself (nats-server ``filterRequest``) and the reply compression a request may
ask for with ``Accept-Encoding`` (nats-server ``getAcceptEncoding``): gzip, or snappy's framing
format written as uncompressed chunks (valid snappy that every reader takes; jetraft carries no
snappy compressor).

Must never: do I/O.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, ClassVar, Final

from pydantic import Field

from protocol.headers import get_header
from protocol.models import DURATION, INT, INT64, UINT64, GoInt, GoName, GoStruct

CONN_STATE = GoInt("server.ConnState", INT64.min_value, INT64.max_value)


class EventFilterOptions(GoStruct):
    """Which servers answer (nats-server ``EventFilterOptions``): a name, host or cluster that
    contains the given text (equals it with ``exact_match``), every tag, the JetStream domain."""

    go_name: ClassVar[str] = "server.EventFilterOptions"

    server_name: str = ""
    cluster: str = ""
    host: str = ""
    exact_match: bool = False
    tags: list[str] | None = None
    domain: str = ""


class StatszEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.StatszEventOptions"


class VarzEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.VarzEventOptions"


class ConnzEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.ConnzEventOptions"

    sort: Annotated[str, GoName("server.SortOpt")] = ""
    auth: bool = False
    subscriptions: bool = False
    subscriptions_detail: bool = False
    offset: Annotated[int, INT] = 0
    limit: Annotated[int, INT] = 0
    cid: Annotated[int, UINT64] = 0
    mqtt_client: str = ""
    state: Annotated[int, CONN_STATE] = 0  # 0 open, 1 closed, 2 all
    user: str = ""
    acc: str = ""
    filter_subject: str = ""


class RoutezEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.RoutezEventOptions"

    subscriptions: bool = False
    subscriptions_detail: bool = False


class SubszEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.SubszEventOptions"

    offset: Annotated[int, INT] = 0
    limit: Annotated[int, INT] = 0
    subscriptions: bool = False
    account: str = ""
    test: str = ""


class GatewayzEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.GatewayzEventOptions"

    name: str = ""
    accounts: bool = False
    account_name: str = ""
    subscriptions: bool = False
    subscriptions_detail: bool = False


class LeafzEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.LeafzEventOptions"

    subscriptions: bool = False
    account: str = ""


class AccountzEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.AccountzEventOptions"

    account: str = ""


class JszEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.JszEventOptions"

    account: str = ""
    accounts: bool = False
    streams: bool = False
    consumer: bool = False
    direct_consumer: bool = False
    config: bool = False
    leader_only: bool = False
    offset: Annotated[int, INT] = 0
    limit: Annotated[int, INT] = 0
    raft: bool = False
    stream_leader_only: bool = False


class HealthzEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.HealthzEventOptions"

    js_enabled: Annotated[bool, Field(alias="js-enabled")] = False  # deprecated by nats-server
    js_enabled_only: Annotated[bool, Field(alias="js-enabled-only")] = False
    js_server_only: Annotated[bool, Field(alias="js-server-only")] = False
    js_meta_only: Annotated[bool, Field(alias="js-meta-only")] = False
    account: str = ""
    stream: str = ""
    consumer: str = ""
    details: bool = False


# the account requests' own kinds ($SYS.REQ.ACCOUNT.<account>.INFO, .STATZ and .CONNS)
class AccInfoEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.AccInfoEventOptions"


class AccountStatzEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.AccountStatzEventOptions"

    accounts: list[str] | None = None
    include_unused: bool = False


class AccountConnsRequest(GoStruct):
    """nats-server ``accNumConnsReq`` (its ``server`` object is not read): ``acc`` must name
    the subject's account. Go tells an absent ``acc`` from an empty one; this model cannot, so
    an empty one counts as absent."""

    go_name: ClassVar[str] = "server.accNumConnsReq"

    acc: str = ""


# the kinds jetraft does not serve: decoded only to answer a bad body as nats-server does
class RaftzEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.RaftzEventOptions"

    account: str = ""
    group: str = ""


class IpqueueszEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.IpqueueszEventOptions"

    all: bool = False
    filter: str = ""


class ExpvarzEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.ExpvarzEventOptions"


class ProfilezEventOptions(EventFilterOptions):
    go_name: ClassVar[str] = "server.ProfilezEventOptions"

    name: str = ""
    debug: Annotated[int, INT] = 0
    duration: Annotated[int, DURATION] = 0


@dataclass(frozen=True)
class ServerIdentity:
    """What a filter is matched against: the server's name, client host, cluster name (empty
    without a cluster), tags and JetStream domain (jetraft has neither)."""

    name: str
    host: str
    cluster: str
    tags: Sequence[str] = ()
    domain: str = ""


def filtered_out(opts: EventFilterOptions, me: ServerIdentity) -> bool:
    """True when the request is not for this server (nats-server ``filterRequest``)."""
    wanted = ((opts.server_name, me.name), (opts.host, me.host), (opts.cluster, me.cluster))
    for given, mine in wanted:
        if given and (given != mine if opts.exact_match else given not in mine):
            return True
    if any(tag not in me.tags for tag in opts.tags or ()):
        return True
    return bool(opts.domain) and opts.domain != me.domain


# --- reply compression ---------------------------------------------------------------------------

ACCEPT_ENCODING: Final = "Accept-Encoding"
CONTENT_ENCODING: Final = "Content-Encoding"
GZIP: Final = "gzip"
SNAPPY: Final = "snappy"
IDENTITY: Final = "identity"  # asked for something else: sent as is, and said so


def accepted_encoding(hdr: bytes | None) -> str | None:
    """The encoding a request's ``Accept-Encoding`` asks for (nats-server
    ``getAcceptEncoding``): snappy (``snappy`` or ``s2`` anywhere in it), else gzip, else
    identity; None without the header."""
    value = (get_header(hdr, ACCEPT_ENCODING) or "").lower() if hdr else ""
    if not value:
        return None
    if SNAPPY in value or "s2" in value:
        return SNAPPY
    if GZIP in value:
        return GZIP
    return IDENTITY


def encode_body(encoding: str, body: bytes) -> bytes:
    """``body`` in ``encoding`` (identity: unchanged)."""
    if encoding == GZIP:
        return gzip.compress(body, mtime=0)
    if encoding == SNAPPY:
        return snappy_frames(body)
    return body


# snappy framing format: the stream identifier, then chunks of at most 64 KiB of data
_SNAPPY_STREAM_ID: Final = b"\xff\x06\x00\x00sNaPpY"
_SNAPPY_UNCOMPRESSED: Final = 0x01
_SNAPPY_CHUNK_DATA_MAX: Final = 65536
_CRC32C_POLY: Final = 0x82F63B78  # Castagnoli, reflected


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ _CRC32C_POLY if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE: Final = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def snappy_frames(body: bytes) -> bytes:
    """``body`` in snappy's framing format, as uncompressed-data chunks."""
    out = [_SNAPPY_STREAM_ID]
    for start in range(0, len(body), _SNAPPY_CHUNK_DATA_MAX):
        chunk = body[start : start + _SNAPPY_CHUNK_DATA_MAX]
        size = len(chunk) + 4  # the checksum counts in the chunk's length
        out.append(bytes((_SNAPPY_UNCOMPRESSED,)) + size.to_bytes(3, "little"))
        out.append(struct.pack("<I", _masked_crc(chunk)))
        out.append(chunk)
    return b"".join(out)
