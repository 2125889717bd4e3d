"""Consumer wire forms: ack reply subjects, ack bodies, status messages, pull request bodies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import consumer_wire as W
from protocol.consumer_config import PullRequest, parse_next_request

NAME = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters=".*>"),
    min_size=1,
    max_size=20,
)
POSITIVE = st.integers(min_value=1, max_value=(1 << 63) - 1)


@given(NAME, NAME, POSITIVE, POSITIVE, POSITIVE, POSITIVE, st.integers(0, 1 << 40))
def test_ack_reply_round_trips(
    stream: str, consumer: str, dc: int, sseq: int, cseq: int, ts: int, pending: int
) -> None:
    subject = W.ack_reply(stream, consumer, dc, sseq, cseq, ts, pending)
    assert W.parse_ack_subject(subject) == W.AckSubject(stream, consumer, dc, sseq, cseq)


def test_the_v2_ack_subject_with_domain_and_account_hash_is_understood() -> None:
    subject = "$JS.ACK.hub.ACC.S.C.2.10.7.1700000000000000000.3.tok"
    assert W.parse_ack_subject(subject) == W.AckSubject("S", "C", 2, 10, 7)


@pytest.mark.parametrize(
    "subject",
    ["$JS.ACK.S.C.1.x.1.1.1", "$JS.ACK.S.C.1.0.1.1.1", "$JS.ACK.S.C.1.1", "$JS.ACK.S.C.0.1.1.1.1"],
)
def test_malformed_ack_subjects_are_ignored(subject: str) -> None:
    assert W.parse_ack_subject(subject) is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", W.AckBody(W.ACK)),
        (b"+ACK", W.AckBody(W.ACK)),
        (b"-NAK", W.AckBody(W.NAK)),
        (b'-NAK {"delay": 2000000000}', W.AckBody(W.NAK, delay_ns=2_000_000_000)),
        (b"-NAK 1.5s", W.AckBody(W.NAK, delay_ns=1_500_000_000)),
        (b"-NAK nonsense", W.AckBody(W.NAK)),
        (b"+WPI", W.AckBody(W.WPI)),
        (b"+TERM", W.AckBody(W.TERM)),
        (b"+TERM bad payload", W.AckBody(W.TERM, reason="bad payload")),
        (b'+NXT {"batch":2}', W.AckBody(W.NEXT, next_request=b'{"batch":2}')),
        (b"+ACKNOWLEDGED", None),
        (b"hello", None),
    ],
)
def test_ack_bodies(body: bytes, expected: W.AckBody | None) -> None:
    assert W.parse_ack_body(body) == expected


def test_status_messages_are_nats_servers_header_blocks() -> None:
    assert W.status(404, "No Messages") == b"NATS/1.0 404 No Messages\r\n\r\n"
    timeout = b"NATS/1.0 408 Request Timeout\r\n"
    pending = b"Nats-Pending-Messages: 3\r\nNats-Pending-Bytes: 0\r\n\r\n"
    assert W.pending_status(408, "Request Timeout", 3, 0) == timeout + pending
    assert W.heartbeat(4, 9) == (
        b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 4\r\nNats-Last-Stream: 9\r\n\r\n"
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", PullRequest(1, 0, 0, False, 0)),
        (b"  7 ", PullRequest(7, 0, 0, False, 0)),
        (b"junk", PullRequest(1, 0, 0, False, 0)),
        (b'{"batch":5,"no_wait":true}', PullRequest(5, 0, 0, True, 0)),
        (
            b'{"batch":2,"expires":1000000000,"idle_heartbeat":100000000,"max_bytes":64}',
            PullRequest(2, 64, 1_000_000_000, False, 100_000_000),
        ),
        (b'{"batch":1,"unknown_field":1}', PullRequest(1, 0, 0, False, 0)),
    ],
)
def test_pull_request_bodies(body: bytes, expected: PullRequest) -> None:
    assert parse_next_request(body) == expected


def test_pull_request_errors_carry_the_400_text() -> None:
    with pytest.raises(ValueError, match="heartbeat value too large"):
        parse_next_request(b'{"batch":1,"expires":1000,"idle_heartbeat":1000}')
    with pytest.raises(ValueError, match="cannot unmarshal string"):
        parse_next_request(b'{"batch":"x"}')
