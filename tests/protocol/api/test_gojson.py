"""Go encoding/json emulation: behaviours not covered by the recorded fixtures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.consumer_models import UnpinRequest
from protocol.gojson import GoJsonError, decode, encode, go_quote, unmarshal
from protocol.models import (
    MsgGetRequest,
    StreamConfigRequest,
    StreamInfoRequest,
    StreamRestoreRequest,
)


def test_encode_escapes_html_and_line_separators_like_go() -> None:
    assert encode({"b": "<a&b>", "a": "\u2028\u2029é"}) == (
        b'{"b":"\\u003ca\\u0026b\\u003e","a":"\\u2028\\u2029\xc3\xa9"}'
    )
    assert encode({"x": [1, None, True, "\x01\n"]}) == b'{"x":[1,null,true,"\\u0001\\n"]}'


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("plain", '"plain"'),
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("\t\x00\x7f", '"\\t\\x00\\x7f"'),
        ("é\u2028", '"é\\u2028"'),
    ],
)
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


@pytest.mark.parametrize(
    ("body", "error"),
    [
        # probed on nats-server 2.15.1 (STREAM.CREATE)
        (b"\\", "invalid character '\\\\' looking for beginning of value at offset 1"),
        (b'{"name":"Y"\\}', "invalid character '\\\\' after object key:value pair at offset 12"),
        (
            b'{"name":"Y","sources":[{"name":"DG","opt_start_time":"\xff2000"}]}',
            'parsing time "\\xef\\xbf\\xbd2000" as "2006-01-02T15:04:05Z07:00": '
            'cannot parse "\\xef\\xbf\\xbd2000" as "2006"',
        ),
        (
            b'{"name":"Y","sources":[{"name":"DG","opt_start_time":"2000-01-01T00:00:00Z\\ud800"}]}',
            'parsing time "2000-01-01T00:00:00Z\\xef\\xbf\\xbd": extra text: "\\xef\\xbf\\xbd"',
        ),
    ],
)
def test_error_texts_quote_as_go_does(body: bytes, error: str) -> None:
    with pytest.raises(GoJsonError) as info:
        decode(body, StreamConfigRequest)
    assert str(info.value) == error


def test_several_values_merge_as_go_decoder_loop_does() -> None:
    req = decode(b'{"name":"a","subjects":["x"]} {"max_msgs":5}', StreamConfigRequest)
    assert (req.name, req.subjects, req.max_msgs) == ("a", ["x"], 5)


def test_null_leaves_a_field_alone_and_nested_objects_merge() -> None:
    req = decode(
        b'{"name":"a","name":null,"placement":{"cluster":"c"},"placement":{"tags":["t"]}}',
        StreamConfigRequest,
    )
    assert req.name == "a"
    assert req.placement is not None
    assert (req.placement.cluster, req.placement.tags) == ("c", ["t"])


def test_request_decoding_starts_from_go_zero_values() -> None:
    req = decode(b"", StreamConfigRequest)
    assert (req.max_msgs, req.num_replicas, req.duplicate_window) == (0, 0, 0)
    assert (req.retention, req.storage, req.persist_mode) == ("limits", "file", "default")


def test_case_insensitive_names_including_go_unicode_folds() -> None:
    req = decode(
        b'{"NAME":"a","consumer_limits":{"max_ac\xe2\x84\xaa_pending":5}}', StreamConfigRequest
    )
    assert (req.name, req.consumer_limits.max_ack_pending) == ("a", 5)
    long_s = b'{"deleted_detail\xc5\xbf":true}'  # U+017F LATIN SMALL LETTER LONG S folds to s
    assert decode(long_s, StreamInfoRequest).deleted_details


def test_lenient_mode_ignores_unknown_fields_but_checks_types() -> None:
    req = decode(b'{"seq":1,"foo":2}', MsgGetRequest, strict=False)
    assert req.seq == 1
    with pytest.raises(GoJsonError):
        decode(b'{"seq":"1"}', MsgGetRequest, strict=False)
    with pytest.raises(GoJsonError, match='unknown field "foo"'):
        decode(b'{"seq":1,"foo":2}', MsgGetRequest)


def test_times_are_validated_and_kept_in_go_marshal_form() -> None:
    req = decode(b'{"start_time":"2026-01-01T00:00:00.000+00:00"}', MsgGetRequest)
    assert req.start_time == "2026-01-01T00:00:00Z"
    with pytest.raises(GoJsonError, match="month out of range"):
        decode(b'{"start_time":"2026-00-01T00:00:00Z"}', MsgGetRequest)


def test_invalid_utf8_and_lone_surrogates_become_replacement_chars() -> None:
    req = decode(b'{"last_by_subj":"a\xffb","next_by_subj":"\\ud800"}', MsgGetRequest)
    assert (req.last_by_subj, req.next_by_subj) == ("a\ufffdb", "\ufffd")


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    # nats-server (probed): depth 10000 is allowed, the 10001st bracket fails.
    with pytest.raises(GoJsonError, match=r"^exceeded max depth at offset 10001$"):
        decode(b"[" * 100_000, StreamInfoRequest)
    with pytest.raises(GoJsonError):
        decode(b"[" * 5_000 + b"]" * 5_000, StreamInfoRequest)


@settings(max_examples=200)
@given(st.binary(max_size=64))
def test_garbage_only_ever_raises_go_json_error(body: bytes) -> None:
    try:
        decode(body, StreamConfigRequest)
    except GoJsonError:
        pass


@settings(max_examples=100)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=8,
    )
)
def test_any_valid_json_decodes_or_raises_go_json_error(value: object) -> None:
    body = encode({"name": "x", "metadata": value})
    try:
        decode(body, StreamConfigRequest)
    except GoJsonError as err:
        assert "metadata" in str(err)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        # probed on nats-server 2.15.1 (CONSUMER.UNPIN, which calls json.Unmarshal)
        (b"", "unexpected end of JSON input"),
        (b"  ", "unexpected end of JSON input"),
        (b'{"group":', "unexpected end of JSON input"),
        (b"{x", "invalid character 'x' looking for beginning of object key string"),
        (b"{} x", "invalid character 'x' after top-level value"),
        (b"{}{}", "invalid character '{' after top-level value"),
        (
            b"[]",
            "json: cannot unmarshal array into Go value of type server.JSApiConsumerUnpinRequest",
        ),
        (
            b'{"group":5}',
            "json: cannot unmarshal number into Go struct field "
            "JSApiConsumerUnpinRequest.group of type string",
        ),
    ],
)
def test_unmarshal_is_one_value_without_offsets(body: bytes, error: str) -> None:
    with pytest.raises(GoJsonError) as raised:
        unmarshal(body, UnpinRequest)
    assert str(raised.value) == error


def test_unmarshal_ignores_unknown_fields_and_null() -> None:
    assert unmarshal(b'{"GROUP":"g","x":1}', UnpinRequest).group == "g"
    assert unmarshal(b" null ", UnpinRequest).group == ""


def test_maps_of_integers_check_their_values() -> None:
    req = decode(b'{"state":{"subjects":{"a":1,"b":2}}}', StreamRestoreRequest)
    assert req.state.subjects == {"a": 1, "b": 2}
    with pytest.raises(GoJsonError) as raised:
        decode(b'{"state":{"subjects":{"a":-1}}}', StreamRestoreRequest)
    assert str(raised.value) == (
        "json: cannot unmarshal number -1 into Go struct field "
        "JSApiStreamRestoreRequest.state.subjects.a of type uint64"
    )
