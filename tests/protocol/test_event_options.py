"""The system requests' bodies, filters and reply compression (protocol/event_options.py),
against what nats-server 2.15.1 answered (probed over NATS as its system account user)."""

from __future__ import annotations

import gzip

import pytest

from protocol import gojson
from protocol.event_options import (
    ConnzEventOptions,
    EventFilterOptions,
    HealthzEventOptions,
    JszEventOptions,
    ServerIdentity,
    StatszEventOptions,
    VarzEventOptions,
    accepted_encoding,
    crc32c,
    encode_body,
    filtered_out,
    snappy_frames,
)
from protocol.headers import encode_header_block
from tests.protocol.snappy_reader import snappy_decode

REFUSED = [
    (ConnzEventOptions, b"{", "unexpected end of JSON input"),
    (ConnzEventOptions, b"x", "invalid character 'x' looking for beginning of value"),
    (
        ConnzEventOptions,
        b"[]",
        "json: cannot unmarshal array into Go value of type server.ConnzEventOptions",
    ),
    (
        ConnzEventOptions,
        b'{"sort": 1}',
        "json: cannot unmarshal number into Go struct field ConnzEventOptions.sort of type "
        "server.SortOpt",
    ),
    (
        ConnzEventOptions,
        b'{"state": "open"}',
        "json: cannot unmarshal string into Go struct field ConnzEventOptions.state of type "
        "server.ConnState",
    ),
    (
        ConnzEventOptions,
        b'{"cid": -1}',
        "json: cannot unmarshal number -1 into Go struct field ConnzEventOptions.cid of type "
        "uint64",
    ),
    (
        JszEventOptions,
        b'{"offset": 1.5}',
        "json: cannot unmarshal number 1.5 into Go struct field JszEventOptions.offset of type int",
    ),
    (
        HealthzEventOptions,
        b'{"js-enabled-only": 1}',
        "json: cannot unmarshal number into Go struct field HealthzEventOptions.js-enabled-only "
        "of type bool",
    ),
    (
        StatszEventOptions,
        b'{"server_name": 1}',
        "json: cannot unmarshal number into Go struct field StatszEventOptions.server_name of "
        "type string",
    ),
]


@pytest.mark.parametrize(("model", "body", "text"), REFUSED)
def test_a_bad_body_gets_go_s_text(model: type[EventFilterOptions], body: bytes, text: str) -> None:
    with pytest.raises(gojson.GoJsonError) as err:
        gojson.unmarshal(body, model)
    assert str(err.value) == text


def test_options_decode_by_their_json_names() -> None:
    body = b'{"Sort": "cid", "subscriptions_detail": true, "state": 2}'
    connz = gojson.unmarshal(body, ConnzEventOptions)
    assert (connz.sort, connz.subscriptions_detail, connz.state) == ("cid", True, 2)
    body = b'{"js-meta-only": true, "js_server_only": true}'
    health = gojson.unmarshal(body, HealthzEventOptions)
    assert health.js_meta_only and not health.js_server_only  # `_` is not `-` (Go folds case only)
    assert gojson.unmarshal(b"null", VarzEventOptions) == VarzEventOptions()


ME = ServerIdentity(name="node-1", host="127.0.0.1", cluster="east")


@pytest.mark.parametrize(
    ("fields", "out"),
    [
        ({}, False),
        ({"server_name": "ode"}, False),
        ({"server_name": "ode", "exact_match": True}, True),
        ({"server_name": "node-1", "exact_match": True}, False),
        ({"host": "127"}, False),
        ({"host": "10."}, True),
        ({"cluster": "eas"}, False),
        ({"cluster": "west"}, True),
        ({"tags": []}, False),
        ({"tags": ["a"]}, True),
        ({"domain": "hub"}, True),
    ],
)
def test_filters_name_servers_as_nats_server_s(fields: dict[str, object], out: bool) -> None:
    assert filtered_out(EventFilterOptions.model_validate(fields), ME) is out


def test_the_encoding_asked_for() -> None:
    def asked(value: str) -> str | None:
        return accepted_encoding(encode_header_block([("Accept-Encoding", value)]))

    assert accepted_encoding(None) is None
    assert accepted_encoding(encode_header_block([("Other", "gzip")])) is None
    assert asked("gzip, snappy") == "snappy"
    assert asked("S2") == "snappy"
    assert asked("GZIP") == "gzip"
    assert asked("br") == "identity"


def test_crc32c_is_castagnoli() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


@pytest.mark.parametrize("size", [0, 1, 65536, 65537, 200_000])
def test_snappy_frames_decode_to_the_body(size: int) -> None:
    body = bytes(i % 251 for i in range(size))
    framed = snappy_frames(body)
    assert framed.startswith(b"\xff\x06\x00\x00sNaPpY")
    assert snappy_decode(framed) == body
    assert gzip.decompress(encode_body("gzip", body)) == body
    assert encode_body("identity", body) == body
