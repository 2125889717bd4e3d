"""Response bodies, byte for byte, against raw replies recorded from nats-server 2.15.1.

``probed_raw.json`` holds the exact reply bytes; each test rebuilds the same reply from our
builders (timestamps and counters taken from the recorded reply) and compares the encoded bytes,
so key order, omitempty rules and Go's HTML escaping are all checked at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import api_json
from protocol.errors import ApiError, ErrorSpec
from protocol.gojson import encode
from protocol.models import StreamConfig
from protocol.stream_config import normalize_create, normalize_update
from protocol.timefmt import parse_rfc3339

RAW: dict[str, str] = json.loads(Path(__file__).with_name("probed_raw.json").read_text())
PB_BODY = b'{"name":"PB","subjects":["pb.>"]}'


def _api_error(reply: dict[str, Any]) -> ApiError:
    e = reply["error"]
    return ApiError(ErrorSpec(e["err_code"], e["code"], e["description"]))


def _state_from(state: dict[str, Any]) -> dict[str, Any]:
    return api_json.state_json(
        messages=state["messages"],
        bytes=state["bytes"],
        first_seq=state["first_seq"],
        first_ts_ns=parse_rfc3339(state["first_ts"]),
        last_seq=state["last_seq"],
        last_ts_ns=parse_rfc3339(state["last_ts"]),
        num_subjects=state.get("num_subjects", 0),
        subjects=state.get("subjects"),
        num_deleted=state.get("num_deleted", 0),
        deleted=state.get("deleted"),
        consumer_count=state["consumer_count"],
    )


def _info_like(cfg: StreamConfig, recorded: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return api_json.stream_info(
        cfg,
        _state_from(recorded["state"]),
        parse_rfc3339(recorded["created"]),
        parse_rfc3339(recorded["ts"]),
        "probeB",
        **kw,
    )


def _pb() -> StreamConfig:
    return normalize_create("PB", PB_BODY, existing={})[0]


def test_create_response_escapes_like_go() -> None:
    body = (
        b'{"name":"ESC","subjects":["esc.>"],"description":"<&> \\u2028 \xc3\xa9 \\u0001 \\"q\\"",'
        b'"metadata":{"k<":"v>"}}'
    )
    cfg, _ = normalize_create("ESC", body, existing={})
    recorded = json.loads(RAW["create_escaped"])
    ours = _info_like(cfg, recorded, type_=api_json.STREAM_CREATE_RESPONSE, did_create=True)
    assert encode(ours) == RAW["create_escaped"].encode()


@pytest.mark.parametrize("key", ["info_pb", "info_pb_details"])
def test_stream_info_bytes(key: str) -> None:
    recorded = json.loads(RAW[key])
    paged = {k: recorded[k] for k in ("total", "offset", "limit")}
    ours = _info_like(_pb(), recorded, type_=api_json.STREAM_INFO_RESPONSE, paged=paged)
    assert encode(ours) == RAW[key].encode()


def test_update_response_bytes() -> None:
    old = _pb()
    cfg, _ = normalize_update(
        "PB", b'{"name":"PB","subjects":["pb.>"],"max_msgs":5}', old, existing={"PB": old}
    )
    recorded = json.loads(RAW["update_response"])
    ours = _info_like(cfg, recorded, type_=api_json.STREAM_UPDATE_RESPONSE)
    assert encode(ours) == RAW["update_response"].encode()


def test_list_entries_have_only_stored_metadata() -> None:
    recorded = json.loads(RAW["list"])
    entry = recorded["streams"][0]
    info = _info_like(_pb(), entry, type_="", dynamic_metadata=False)
    ours = api_json.list_response([info], total=1, offset=0)
    assert encode(ours) == RAW["list"].encode()


@pytest.mark.parametrize(
    ("key", "type_"),
    [
        ("info_missing", api_json.STREAM_INFO_RESPONSE),
        ("names_error", api_json.STREAM_NAMES_RESPONSE),
        ("list_error", api_json.STREAM_LIST_RESPONSE),
        ("purge_error", api_json.STREAM_PURGE_RESPONSE),
        ("msg_delete", api_json.STREAM_MSG_DELETE_RESPONSE),
    ],
)
def test_error_responses_carry_zero_fields(key: str, type_: str) -> None:
    ours = api_json.error_response(type_, _api_error(json.loads(RAW[key])))
    assert encode(ours) == RAW[key].encode()


def test_success_responses() -> None:
    assert encode(api_json.purge_response(1)) == RAW["purge"].encode()
    delete = api_json.success_response(api_json.STREAM_DELETE_RESPONSE)
    assert encode(delete) == RAW["delete"].encode()
    assert encode(api_json.names_response(["S1", "PB", "ESC"], 0)) == RAW["names"].encode()


def test_names_response_paging_and_null() -> None:
    assert api_json.names_response([], 0)["streams"] is None
    page = api_json.names_response(["b", "a", "c"], 2)
    assert (page["total"], page["offset"], page["streams"]) == (3, 2, ["c"])
    clamped = api_json.names_response(["a"], 9)
    assert (clamped["offset"], clamped["streams"]) == (1, None)
    many = api_json.names_response([f"s{i:05d}" for i in range(2000)], 0)
    assert len(many["streams"]) == api_json.NAMES_LIMIT


def test_account_info_bytes() -> None:
    recorded = json.loads(RAW["account_info"])
    ours = api_json.account_info(
        memory=0,
        storage=recorded["storage"],
        streams=recorded["streams"],
        consumers=0,
        api_total=recorded["api"]["total"],
        api_errors=recorded["api"]["errors"],
    )
    assert encode(ours) == RAW["account_info"].encode()


def test_pub_acks_byte_exact() -> None:
    assert api_json.pub_ack_json("PB", 1) == RAW["pub_ack"].encode()
    assert api_json.pub_ack_json("PB", 2, duplicate=True) == RAW["pub_ack_dup2"].encode()
    for key in ("pub_ack_ttl_disabled", "pub_ack_wrong_stream"):
        err = _api_error(json.loads(RAW[key]))
        assert api_json.pub_ack_error_json("PB", err) == RAW[key].encode()


def test_pub_ack_variants_follow_nats_server_templates() -> None:
    assert api_json.pub_ack_json("AT", 4, batch="b1", count=4) == (
        b'{"stream":"AT","seq":4,"batch":"b1","count":4}'
    )
    assert api_json.pub_ack_json("S", 3, domain="hub") == b'{"stream":"S","domain":"hub","seq":3}'
    assert api_json.pub_ack_json("C", 1, val="12") == b'{"stream":"C","seq":1,"val":"12"}'
    assert api_json.pub_ack_json("S", 2, duplicate=True, batch="b", count=2) == (
        b'{"stream":"S","seq":2,"duplicate": true,"batch":"b","count":2}'
    )


def test_state_json_orders_and_omits() -> None:
    state = api_json.state_json(
        messages=3,
        bytes=10,
        first_seq=11,
        first_ts_ns=0,
        last_seq=10,
        last_ts_ns=1_795_312_871_585_979_480,
        subjects={"b": 1, "a": 2},
        num_deleted=2,
        deleted=[4, 5],
        consumer_count=0,
    )
    assert list(state) == [
        "messages",
        "bytes",
        "first_seq",
        "first_ts",
        "last_seq",
        "last_ts",
        "subjects",
        "num_deleted",
        "deleted",
        "consumer_count",
    ]
    assert list(state["subjects"]) == ["a", "b"]
    assert state["first_ts"] == "0001-01-01T00:00:00Z"
    assert state["last_ts"] == "2026-11-22T02:01:11.58597948Z"


def test_subjects_page() -> None:
    assert api_json.subjects_page({}, 0) == (None, {"total": 0, "offset": 0, "limit": 0})
    subjects, paged = api_json.subjects_page({"b": 1, "a": 2}, 1)
    assert subjects == {"b": 1}
    assert paged == {"total": 2, "offset": 1, "limit": api_json.SUBJECT_DETAILS_LIMIT}


def test_msg_get_response() -> None:
    reply = api_json.msg_get_response(
        "dg.h", 7, b"NATS/1.0\r\nFoo: bar\r\n\r\n", b"withhdr", 1_795_312_740_585_941_578
    )
    assert encode(reply) == (
        b'{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{"subject":"dg.h",'
        b'"seq":7,"hdrs":"TkFUUy8xLjANCkZvbzogYmFyDQoNCg==","data":"d2l0aGhkcg==",'
        b'"time":"2026-11-22T01:59:00.585941578Z"}}'
    )
    bare = api_json.msg_get_response("x", 1, None, b"", 0)["message"]
    assert list(bare) == ["subject", "seq", "time"]


@given(st.text(max_size=20), st.integers(0, 2**64 - 1))
def test_a_plain_pub_ack_is_its_head_the_seq_and_a_brace(stream: str, seq: int) -> None:
    assert api_json.pub_ack_head(stream) + str(seq).encode() + b"}" == api_json.pub_ack_json(
        stream, seq
    )
