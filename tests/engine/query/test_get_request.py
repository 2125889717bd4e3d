"""The JSApiMsgGetRequest decoder (Go's JSON and time rules) and the MSG.GET responses."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.get_request import (
    GetRequestError,
    MsgGetRequest,
    decode_get_request,
    go_parse_rfc3339,
)
from engine.msg_get import (
    MSG_GET_RESPONSE_TYPE,
    answer_msg_get,
    msg_get,
    parse_msg_get_request,
)
from engine.store import StoredMsg
from protocol.gojson import go_quote
from protocol.timefmt import format_rfc3339nano
from tests.engine.query.naive_view import NaiveView

NS = 1_000_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def wrap_int64(value: int) -> int:
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


# ---- time.Parse(time.RFC3339) -------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    moment=st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
    nanos=st.integers(0, 999),
    frac_digits=st.integers(0, 12),
    offset_min=st.integers(-24 * 60 + 1, 24 * 60 - 1),  # Python caps offsets below 24h
)
def test_valid_rfc3339_parses_to_exact_wrapped_nanoseconds(
    moment: datetime, nanos: int, frac_digits: int, offset_min: int
) -> None:
    frac_ns = moment.microsecond * 1000 + nanos
    local = moment.replace(microsecond=0).astimezone(timezone(timedelta(minutes=offset_min)))
    text = f"{local.year:04d}-" + local.strftime("%m-%dT%H:%M:%S")
    if frac_digits:
        text += "." + f"{frac_ns:09d}000"[:frac_digits]
    sign = "-" if offset_min < 0 else "+"
    text += (
        "Z" if offset_min == 0 else f"{sign}{abs(offset_min) // 60:02d}:{abs(offset_min) % 60:02d}"
    )
    kept_ns = int(f"{frac_ns:09d}000"[: min(frac_digits, 9)].ljust(9, "0")) if frac_digits else 0
    unix_s = (moment.replace(microsecond=0) - EPOCH) // timedelta(seconds=1)
    assert go_parse_rfc3339(text) == wrap_int64(unix_s * NS + kept_ns)


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T00:00:01,5Z", 1_500_000_000),  # a comma fraction is accepted
        ("1970-01-01T1:00:00Z", 3600 * NS),  # so is a one-digit hour
        ("1970-01-01T00:00:00+24:00", -24 * 3600 * NS),  # and offsets up to 24h / 60m
        ("1970-01-01T00:00:00+01:60", -2 * 3600 * NS),
        ("1970-01-01T00:00:00\u002e5Z", NS // 2),
        ("2262-04-11T23:47:16.854775807Z", (1 << 63) - 1),
        ("2262-04-11T23:47:16.854775808Z", -(1 << 63)),  # Go's UnixNano wraps around
        ("0001-01-01T00:00:00Z", -6_795_364_578_871_345_152),
    ],
)
def test_loose_rfc3339_values(text: str, ns: int) -> None:
    assert go_parse_rfc3339(text) == ns


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "nope",
            'parsing time "nope" as "2006-01-02T15:04:05Z07:00": cannot parse "nope" as "2006"',
        ),
        ("", 'parsing time "" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "2006"'),
        ("2000-13-01T00:00:00Z", 'parsing time "2000-13-01T00:00:00Z": month out of range'),
        ("2000-02-30T00:00:00Z", 'parsing time "2000-02-30T00:00:00Z": day out of range'),
        ("2000-01-01T24:00:00Z", 'parsing time "2000-01-01T24:00:00Z": hour out of range'),
        ("2000-01-01T00:00:60Z", 'parsing time "2000-01-01T00:00:60Z": second out of range'),
        (
            "2000-01-01T00:00:00+25:00",
            'parsing time "2000-01-01T00:00:00+25:00": time zone offset hour out of range',
        ),
        (
            "2000-01-01T00:00:00+01:61",
            'parsing time "2000-01-01T00:00:00+01:61": time zone offset minute out of range',
        ),
        ("2000-01-01T00:00:00Zx", 'parsing time "2000-01-01T00:00:00Zx": extra text: "x"'),
        (
            "2000-01-01t00:00:00Z",
            'parsing time "2000-01-01t00:00:00Z" as "2006-01-02T15:04:05Z07:00": '
            'cannot parse "t00:00:00Z" as "T"',
        ),
        (
            "2000-01-01T00:00:00.Z",
            'parsing time "2000-01-01T00:00:00.Z" as "2006-01-02T15:04:05Z07:00": '
            'cannot parse ".Z" as "Z07:00"',
        ),
        (
            "2000-1-01T00:00:00Z",
            'parsing time "2000-1-01T00:00:00Z" as "2006-01-02T15:04:05Z07:00": '
            'cannot parse "1-01T00:00:00Z" as "01"',
        ),
        (
            "2000-01-01T00:00:00+0100",
            'parsing time "2000-01-01T00:00:00+0100" as "2006-01-02T15:04:05Z07:00": '
            'cannot parse "+0100" as "Z07:00"',
        ),
        (
            "2000-01-01T00:00:00Z\u00e9",
            'parsing time "2000-01-01T00:00:00Z\\xc3\\xa9": extra text: "\\xc3\\xa9"',
        ),
    ],
)
def test_rfc3339_errors_have_go_text(text: str, message: str) -> None:
    with pytest.raises(GetRequestError) as err:
        go_parse_rfc3339(text)
    assert str(err.value) == message


def test_go_quote() -> None:
    assert (
        go_quote('a"b\\c\n\x01\u00e9\ufeff\U0001f600')
        == '"a\\"b\\\\c\\n\\x01\u00e9\\ufeff\U0001f600"'
    )


# ---- the decoder --------------------------------------------------------------------------------


def test_decoder_fields_and_defaults() -> None:
    req = decode_get_request(
        b'{"seq":3,"next_by_subj":"a.*","batch":2,"max_bytes":-1,"no_hdr":true,'
        b'"multi_last":["x",null],"up_to_seq":9,"start_time":"1970-01-01T00:00:01Z",'
        b'"up_to_time":null}',
        strict=True,
    )
    assert req == MsgGetRequest(
        seq=3,
        next_by_subj="a.*",
        batch=2,
        max_bytes=-1,
        no_hdr=True,
        multi_last=["x", ""],
        up_to_seq=9,
        start_time_ns=NS,
    )


def test_null_clears_times_and_lists_but_not_scalars() -> None:
    req = decode_get_request(
        b'{"seq":1,"seq":null,"multi_last":["a"],"multi_last":null,'
        b'"start_time":"1970-01-01T00:00:00Z","start_time":null}',
        strict=False,
    )
    assert (req.seq, req.multi_last, req.start_time_ns) == (1, None, None)


def test_strict_decoder_reads_a_stream_of_values() -> None:
    assert decode_get_request(b'{"seq":1} {"seq":2}', strict=True).seq == 2
    assert decode_get_request(b"  ", strict=True) == MsgGetRequest()
    with pytest.raises(GetRequestError):  # json.Unmarshal: exactly one value
        decode_get_request(b'{"seq":1} {"seq":2}', strict=False)
    with pytest.raises(GetRequestError):
        decode_get_request(b"  ", strict=False)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'{"x":1}', 'json: unknown field "x"'),
        (b'{"a\\u0000":1}', 'json: unknown field "a\\x00"'),
        (
            b'{"seq":"x","foo":1}',
            "json: cannot unmarshal string into Go struct field "
            "JSApiMsgGetRequest.seq of type uint64",
        ),
        (b'{"foo":1,"seq":"x"}', 'json: unknown field "foo"'),
        (
            b'{"seq":1e2}',
            "json: cannot unmarshal number 1e2 into Go struct field "
            "JSApiMsgGetRequest.seq of type uint64",
        ),
        (
            b'{"batch":-9223372036854775809}',
            "json: cannot unmarshal number "
            "-9223372036854775809 into Go struct field JSApiMsgGetRequest.batch of type int",
        ),
        (
            b'{"multi_last":["a",{}]}',
            "json: cannot unmarshal object into JSApiMsgGetRequest.multi_last.1 of type string",
        ),
        (
            b'{"up_to_time":[]}',
            "json: cannot unmarshal array into Go struct field "
            "JSApiMsgGetRequest.up_to_time of type time.Time",
        ),
        (b"[1]", "json: cannot unmarshal array into Go value of type server.JSApiMsgGetRequest"),
        (b"{x", "invalid character 'x' looking for beginning of object key string at offset 2"),
        (b'{"seq":1}x', "invalid character 'x' looking for beginning of value at offset 10"),
        (
            b'{"seq":1,}',
            "invalid character '}' looking for beginning of object key string at offset 10",
        ),
        (b'{"a":"\\q"}', "invalid escape sequence `\\q` in string at offset 8"),
        (b'{"a":"\x01"}', "invalid character '\\x01' in string at offset 7"),
        (b'{"a":tru}', "invalid character '}' in literal true (expecting 'e') at offset 9"),
        (b'{"a":-}', "invalid character '}' in numeric literal at offset 7"),
        (
            b"{\xc3\xa9}",
            "invalid character '\u00e9' looking for beginning of object key string at offset 3",
        ),
        (b"\xff", "invalid character '\\xff' looking for beginning of value at offset 1"),
        (b'{"seq":1', "unexpected EOF"),
        (b"[" * 10001, "exceeded max depth at offset 10001"),
    ],
)
def test_strict_decoder_errors(payload: bytes, message: str) -> None:
    with pytest.raises(GetRequestError) as err:
        decode_get_request(payload, strict=True)
    assert str(err.value) == message


# ---- MSG.GET ------------------------------------------------------------------------------------

T0 = 1_795_000_000_000_000_000
VIEW = NaiveView(
    "S",
    [
        StoredMsg(1, "s.a", b"", b"one", T0 + 1),
        StoredMsg(2, "s.b", b"NATS/1.0\r\nFoo: bar\r\n\r\n", b"two", T0 + 2),
        StoredMsg(4, "s.b", b"", b"", T0 + 4),
    ],
    last_seq=5,
)


def err(code: int, err_code: int, description: str) -> dict[str, object]:
    return {
        "type": MSG_GET_RESPONSE_TYPE,
        "error": {"code": code, "err_code": err_code, "description": description},
    }


BAD_REQUEST = err(400, 10003, "bad request")
NOT_FOUND = err(404, 10037, "no message found")


def test_msg_get_success_shape_and_key_order() -> None:
    response = msg_get(VIEW, b'{"seq":2}')
    assert response == {
        "type": MSG_GET_RESPONSE_TYPE,
        "message": {
            "subject": "s.b",
            "seq": 2,
            "hdrs": base64.b64encode(b"NATS/1.0\r\nFoo: bar\r\n\r\n").decode(),
            "data": "dHdv",
            "time": format_rfc3339nano(T0 + 2),
        },
    }
    assert list(response["message"]) == ["subject", "seq", "hdrs", "data", "time"]
    assert list(msg_get(VIEW, b'{"seq":2,"no_hdr":true}')["message"]) == [
        "subject",
        "seq",
        "data",
        "time",
    ]
    assert list(msg_get(VIEW, b'{"seq":4}')["message"]) == ["subject", "seq", "time"]


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"", BAD_REQUEST),
        (b"{}", BAD_REQUEST),
        (b"null", BAD_REQUEST),
        (b'{"seq":1,"batch":1}', BAD_REQUEST),
        (b'{"seq":1,"max_bytes":1}', BAD_REQUEST),
        (b'{"multi_last":["s.>"]}', BAD_REQUEST),
        (b'{"up_to_seq":3}', BAD_REQUEST),
        (b'{"seq":1,"last_by_subj":"s.a"}', BAD_REQUEST),
        (b'{"seq":1,"start_time":"2020-01-01T00:00:00Z"}', BAD_REQUEST),
        (b'{"last_by_subj":"s.a","start_time":"2020-01-01T00:00:00Z"}', BAD_REQUEST),
        (b'{"last_by_subj":"s.a","next_by_subj":"s.a"}', BAD_REQUEST),
        (b'{"seq":3}', NOT_FOUND),
        (b'{"seq":100}', NOT_FOUND),
        (b'{"last_by_subj":"s.zz"}', NOT_FOUND),
        (f'{{"start_time":"{format_rfc3339nano(T0 + 5)}"}}'.encode(), NOT_FOUND),
        (b'{"x":1}', err(400, 10025, 'invalid JSON: json: unknown field "x"')),
        (b"{", err(400, 10025, "invalid JSON: unexpected EOF")),
    ],
)
def test_msg_get_errors(payload: bytes, expected: dict[str, object]) -> None:
    assert msg_get(VIEW, payload) == expected


def test_msg_get_lookups() -> None:
    def seq_of(payload: bytes) -> int:
        message = msg_get(VIEW, payload)["message"]
        assert isinstance(message, dict)
        return int(message["seq"])

    assert seq_of(b'{"last_by_subj":"s.*"}') == 4
    assert seq_of(b'{"next_by_subj":"s.b"}') == 2
    assert seq_of(b'{"next_by_subj":"s.b","seq":3}') == 4
    assert seq_of(f'{{"start_time":"{format_rfc3339nano(T0 + 3)}"}}'.encode()) == 4
    assert seq_of(b'{"seq":1,"batch":-1}') == 1  # only batch > 0 is refused
    assert seq_of(b'{"start_time":"2999-01-01T00:00:00Z"}') == 1  # wraps to before 1970


def test_validation_happens_before_the_stream_is_needed() -> None:
    """The caller looks the stream up between the two halves, as nats-server does."""
    assert parse_msg_get_request(b"{}") == BAD_REQUEST
    req = parse_msg_get_request(b'{"seq":1}')
    assert isinstance(req, MsgGetRequest)
    assert answer_msg_get(VIEW, req)["message"]["data"] == "b25l"
