"""What consumers put on the wire besides JSON: ack reply subjects, ack bodies, status messages.

A delivered message's reply subject carries its metadata, as nats-server writes it:
``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>``.
An ack is a message to that subject whose body says what it is (``+ACK`` or empty, ``-NAK``
with an optional delay, ``+WPI``, ``+TERM`` with an optional reason, ``+NXT`` with an optional
pull request). Status messages are header-only messages (``NATS/1.0 404 No Messages``).

Must never: perform I/O, or accept an ack subject with tokens it cannot account for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from protocol.timefmt import parse_go_duration

ACK_PREFIX: Final = "$JS.ACK."
HDR_PENDING_MSGS: Final = "Nats-Pending-Messages"
HDR_PENDING_BYTES: Final = "Nats-Pending-Bytes"
HDR_LAST_CONSUMER: Final = "Nats-Last-Consumer"
HDR_LAST_STREAM: Final = "Nats-Last-Stream"
HDR_MSG_SIZE: Final = "Nats-Msg-Size"
HDR_CONSUMER_STALLED: Final = "Nats-Consumer-Stalled"

ACK = "ack"
NAK = "nak"
WPI = "wpi"
TERM = "term"
NEXT = "next"


def ack_reply(
    stream: str, consumer: str, deliveries: int, sseq: int, cseq: int, ts_ns: int, pending: int
) -> str:
    return f"{ACK_PREFIX}{stream}.{consumer}.{deliveries}.{sseq}.{cseq}.{ts_ns}.{pending}"


@dataclass(frozen=True, slots=True)
class AckSubject:
    stream: str
    consumer: str
    deliveries: int
    stream_seq: int
    consumer_seq: int


def parse_ack_subject(subject: str) -> AckSubject | None:
    """The v1 form (9 tokens) and the v2 form with domain and account hash (12+ tokens)."""
    tokens = subject.split(".")
    if len(tokens) == 9:
        stream, consumer, numbers = tokens[2], tokens[3], tokens[4:7]
    elif len(tokens) >= 12:
        stream, consumer, numbers = tokens[4], tokens[5], tokens[6:9]
    else:
        return None
    try:
        deliveries, sseq, cseq = (int(t) for t in numbers)
    except ValueError:
        return None
    if sseq <= 0 or deliveries <= 0 or cseq < 0:
        return None
    return AckSubject(stream, consumer, deliveries, sseq, cseq)


@dataclass(frozen=True, slots=True)
class AckBody:
    kind: str  # ACK, NAK, WPI, TERM or NEXT
    delay_ns: int = 0
    reason: str = ""
    next_request: bytes = b""


def parse_ack_body(body: bytes) -> AckBody | None:
    """What nats-server's processAck understands; None for a body it ignores."""
    if not body or body == b"+ACK":
        return AckBody(ACK)
    if body.startswith(b"+ACK"):
        return AckBody(ACK) if body[4:5] in (b"", b" ") else None
    if body.startswith(b"-NAK"):
        return AckBody(NAK, delay_ns=_nak_delay(body[4:].strip()))
    if body.startswith(b"+WPI"):
        return AckBody(WPI)
    if body.startswith(b"+TERM"):
        return AckBody(TERM, reason=body[5:].strip().decode("utf-8", "replace"))
    if body.startswith(b"+NXT"):
        return AckBody(NEXT, next_request=body[4:].strip())
    return None


def _nak_delay(rest: bytes) -> int:
    """``{"delay": ns}`` or a Go duration (`` 5s``); anything else is no delay."""
    if not rest:
        return 0
    if rest[:1] == b"{":
        try:
            obj = json.loads(rest)
        except ValueError:
            return 0
        delay = obj.get("delay") if isinstance(obj, dict) else None
        return delay if isinstance(delay, int) and delay > 0 else 0
    try:
        return max(0, parse_go_duration(rest.decode("ascii")))
    except (UnicodeDecodeError, ValueError):
        return 0


def status(code: int, description: str, *headers: tuple[str, int | str]) -> bytes:
    """A status message's header block: ``NATS/1.0 <code> <description>`` and its headers."""
    lines = [f"NATS/1.0 {code} {description}"]
    lines += [f"{key}: {value}" for key, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def pending_status(code: int, description: str, msgs: int, size: int) -> bytes:
    return status(code, description, (HDR_PENDING_MSGS, msgs), (HDR_PENDING_BYTES, size))


def heartbeat(last_consumer_seq: int, last_stream_seq: int, stalled_on: str = "") -> bytes:
    """An idle heartbeat; ``stalled_on``: the unanswered flow control request's reply subject."""
    headers: list[tuple[str, int | str]] = [
        (HDR_LAST_CONSUMER, last_consumer_seq),
        (HDR_LAST_STREAM, last_stream_seq),
    ]
    if stalled_on:
        headers.append((HDR_CONSUMER_STALLED, stalled_on))
    return status(100, "Idle Heartbeat", *headers)


FLOW_CONTROL_REQUEST: Final = b"NATS/1.0 100 FlowControl Request\r\n\r\n"
