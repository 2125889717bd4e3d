"""Read-your-writes Direct Get (jetraft's ``min_last_seq``): decoding and the engine's answers.

The field is decoded like the struct's other uint64 fields by Direct Get's lenient decoder only;
MSG.GET's strict decoder refuses it as nats-server 2.15.1 refuses any unknown field. A request
whose ``min_last_seq`` the view has reached is answered exactly as without the field (as
nats-server, which ignores it, answers); one the view has not reached is never answered from it.

The view is the one of ``test_direct_get_table``: last_seq 8, messages 1 2 4 5 6 7.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.direct_get import (
    REPLY_MIN_SEQ_NOT_APPLIED,
    DirectReply,
    NotApplied,
    direct_get,
    try_direct_get,
)
from engine.get_request import (
    UINT64_MAX,
    GetRequestError,
    MsgGetRequest,
    decode_get_request,
)
from engine.msg_get import MSG_GET_RESPONSE_TYPE, parse_msg_get_request
from engine.store import StoredMsg
from protocol.timefmt import format_rfc3339nano
from tests.engine.query.naive_view import NaiveView

T0 = 1_795_000_000_000_000_000
MSGS = [
    StoredMsg(1, "s.a", b"", b"one", T0 + 1_000),
    StoredMsg(2, "s.b", b"NATS/1.0\r\nFoo: bar\r\n\r\n", b"two", T0 + 2_000),
    StoredMsg(4, "s.c.x", b"", b"four", T0 + 4_000),
    StoredMsg(5, "s.b", b"", b"", T0 + 5_000),
    StoredMsg(6, "s.c.y", b"", b"six", T0 + 6_000),
    StoredMsg(7, "s.a", b"", b"seven", T0 + 7_000),
]
LAST_SEQ = 8
VIEW = NaiveView("S", MSGS, last_seq=LAST_SEQ)
STATUS_NOT_APPLIED = b"NATS/1.0 412 Min Last Sequence Not Applied\r\n\r\n"
E408_EMPTY = DirectReply(b"NATS/1.0 408 Empty Request\r\n\r\n", b"")
E408_MALFORMED = DirectReply(b"NATS/1.0 408 Malformed Request\r\n\r\n", b"")
E408_BAD = DirectReply(b"NATS/1.0 408 Bad Request\r\n\r\n", b"")
E412_API = DirectReply(b"NATS/1.0 412 Required Api Level\r\n\r\n", b"")
API_LEVEL_6 = b"NATS/1.0\r\nNats-Required-Api-Level: 6\r\n\r\n"

# Every valid request form (JSON form, then the subject-appended form with a body).
VALID_FORMS: list[tuple[dict[str, Any], str | None]] = [
    ({"seq": 2}, None),
    ({"seq": 3}, None),  # deleted: 404 either way
    ({"last_by_subj": "s.a"}, None),
    ({"last_by_subj": "s.zzz"}, None),
    ({"next_by_subj": "s.b"}, None),
    ({"seq": 3, "next_by_subj": "s.b"}, None),
    ({"seq": 1, "batch": 3}, None),
    ({"next_by_subj": "s.>", "batch": 2, "max_bytes": 5}, None),
    ({"multi_last": ["s.>"]}, None),
    ({"multi_last": ["s.>"], "up_to_seq": 5, "batch": 2}, None),
    ({"start_time": format_rfc3339nano(T0 + 3_000)}, None),
    ({"start_time": format_rfc3339nano(T0), "batch": 2}, None),
    ({"seq": 4, "no_hdr": True}, None),
    ({}, "s.b"),
    ({"no_hdr": True}, "s.a"),
]


def ask(
    body: bytes | dict[str, Any], key: str | None = None, hdr: bytes | None = None
) -> list[DirectReply] | NotApplied:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return try_direct_get(
        VIEW, reply_stream_name="S", request_hdr=hdr, payload=payload, subject_key=key
    )


# ---- decoding ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b'{"seq":1,"min_last_seq":7}', 7),  # the fast path
        (b'{"min_last_seq":18446744073709551615}', UINT64_MAX),
        (b'{"seq":1,"min_last_seq":0}', 0),
        (b'{"seq":1,"min_last_seq":null}', 0),  # null leaves a scalar unchanged
        (b'{"min_last_seq":3,"min_last_seq":9}', 9),  # duplicates apply in order (Go path)
        (b'{"min_last_seq":3,"min_last_seq":null}', 3),
        (b'{"MIN_LAST_SEQ":4}', 4),  # case-folded, as Go matches struct fields
        (b'{"min_last_seq":5}{"x":1}', None),  # json.Unmarshal: one value only
    ],
)
def test_lenient_decoder_reads_min_last_seq(payload: bytes, expected: int | None) -> None:
    if expected is None:
        with pytest.raises(GetRequestError):
            decode_get_request(payload, strict=False)
        return
    assert decode_get_request(payload, strict=False).min_last_seq == expected


@pytest.mark.parametrize(
    "payload",
    [
        b'{"seq":1,"min_last_seq":-1}',
        b'{"seq":1,"min_last_seq":-0}',
        b'{"seq":1,"min_last_seq":1.0}',
        b'{"seq":1,"min_last_seq":1e2}',
        b'{"seq":1,"min_last_seq":"5"}',
        b'{"seq":1,"min_last_seq":true}',
        b'{"seq":1,"min_last_seq":18446744073709551616}',
    ],
)
def test_lenient_decoder_refuses_what_go_refuses_for_a_uint64(payload: bytes) -> None:
    with pytest.raises(GetRequestError) as err:
        decode_get_request(payload, strict=False)
    assert "of type uint64" in str(err.value)
    # ...which Direct Get answers as any other malformed body: never a stale answer
    assert ask(payload) == [E408_MALFORMED]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'{"seq":1,"min_last_seq":1}', 'json: unknown field "min_last_seq"'),
        (b'{"min_last_seq":1}', 'json: unknown field "min_last_seq"'),
        (b'{"seq":1,"Min_Last_Seq":1}', 'json: unknown field "Min_Last_Seq"'),
        (b'{"min_last_seq":"x","seq":1}', 'json: unknown field "min_last_seq"'),
        (b'{"seq":1,"min_last_seq":1,"min_last_seq":2}', 'json: unknown field "min_last_seq"'),
        (b'{"seq":1} {"min_last_seq":1}', 'json: unknown field "min_last_seq"'),
        (
            b'{"seq":"x","min_last_seq":1}',  # the first error in document order wins
            "json: cannot unmarshal string into Go struct field "
            "JSApiMsgGetRequest.seq of type uint64",
        ),
    ],
)
def test_strict_decoder_refuses_min_last_seq_as_nats_server_does(
    payload: bytes, message: str
) -> None:
    with pytest.raises(GetRequestError) as err:
        decode_get_request(payload, strict=True)
    assert str(err.value) == message


def test_msg_get_answers_10025_for_min_last_seq() -> None:
    assert parse_msg_get_request(b'{"seq":1,"min_last_seq":1}') == {
        "type": MSG_GET_RESPONSE_TYPE,
        "error": {
            "code": 400,
            "err_code": 10025,
            "description": 'invalid JSON: json: unknown field "min_last_seq"',
        },
    }
    assert parse_msg_get_request(b'{"seq":1}') == MsgGetRequest(seq=1)


# ---- Direct Get ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "key"), VALID_FORMS)
@pytest.mark.parametrize("min_last_seq", [0, 1, LAST_SEQ])
def test_a_reached_min_last_seq_changes_nothing(
    body: dict[str, Any], key: str | None, min_last_seq: int
) -> None:
    plain = ask(body, key)
    assert isinstance(plain, list) and plain
    assert ask({**body, "min_last_seq": min_last_seq}, key) == plain
    assert ask({"min_last_seq": min_last_seq, **body}, key) == plain  # key order is irrelevant


@pytest.mark.parametrize(("body", "key"), VALID_FORMS)
@pytest.mark.parametrize("min_last_seq", [LAST_SEQ + 1, UINT64_MAX])
def test_an_unreached_min_last_seq_is_never_answered_from_the_view(
    body: dict[str, Any], key: str | None, min_last_seq: int
) -> None:
    with_min = {**body, "min_last_seq": min_last_seq}
    assert ask(with_min, key) == NotApplied(min_last_seq)
    payload = json.dumps(with_min).encode()
    assert direct_get(
        VIEW, reply_stream_name="S", request_hdr=None, payload=payload, subject_key=key
    ) == [REPLY_MIN_SEQ_NOT_APPLIED]
    assert REPLY_MIN_SEQ_NOT_APPLIED == DirectReply(STATUS_NOT_APPLIED, b"")


def test_case_folded_and_duplicate_keys_on_the_go_rule_path() -> None:
    assert ask(b'{"last_by_subj":"s.a","MIN_LAST_SEQ":9}') == NotApplied(9)
    assert ask(b'{"last_by_subj":"s.a","min_last_seq":99,"min_last_seq":3}') == ask(
        {"last_by_subj": "s.a"}
    )


@pytest.mark.parametrize(
    ("body", "key", "hdr", "expected"),
    [
        # alone it selects nothing: nats-server's 408 Empty Request, whatever the value
        ({"min_last_seq": 1}, None, None, E408_EMPTY),
        ({"min_last_seq": LAST_SEQ + 1}, None, None, E408_EMPTY),
        ({"min_last_seq": LAST_SEQ + 1, "batch": 2}, None, None, E408_EMPTY),
        # invalid requests get their error at once, not a wait
        ({"seq": 1, "last_by_subj": "s.a", "min_last_seq": 99}, None, None, E408_BAD),
        ({"seq": 1, "min_last_seq": 99}, "s.a", None, E408_BAD),
        ({"min_last_seq": 99}, "", None, E408_BAD),
        ({"seq": 1, "min_last_seq": 99}, None, API_LEVEL_6, E412_API),
        ({"seq": "1", "min_last_seq": 99}, None, None, E408_MALFORMED),
    ],
)
def test_invalid_requests_are_answered_as_nats_server_does(
    body: dict[str, Any], key: str | None, hdr: bytes | None, expected: DirectReply
) -> None:
    assert ask(body, key, hdr) == [expected]


def test_subject_appended_form_waits_too() -> None:
    assert ask({"min_last_seq": LAST_SEQ + 1}, "s.a") == NotApplied(LAST_SEQ + 1)
    assert ask({"min_last_seq": LAST_SEQ}, "s.a") == ask(b"", "s.a")


@settings(max_examples=100, deadline=None)
@given(
    form=st.sampled_from(VALID_FORMS),
    min_last_seq=st.integers(0, 2 * LAST_SEQ),
    last_seq=st.integers(LAST_SEQ, 2 * LAST_SEQ),
)
def test_answer_or_not_applied_by_the_views_last_seq(
    form: tuple[dict[str, Any], str | None], min_last_seq: int, last_seq: int
) -> None:
    """Whatever the view's last_seq: answered as without the field iff it reaches the minimum."""
    view = NaiveView("S", MSGS, last_seq=last_seq)
    body, key = form

    def get(b: dict[str, Any]) -> list[DirectReply] | NotApplied:
        payload = json.dumps(b).encode()
        return try_direct_get(
            view, reply_stream_name="S", request_hdr=None, payload=payload, subject_key=key
        )

    got = get({**body, "min_last_seq": min_last_seq})
    if min_last_seq <= last_seq:
        assert got == get(body)
    else:
        assert got == NotApplied(min_last_seq)
