"""ClientSession: the probed per-connection behaviour of nats-server, action by action and as
bytes on the wire (through the one-connection test server in wire.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol.gojson import encode_str, go_quote
from protocol.parser import Pub
from protocol.session import (
    OK,
    PING,
    PONG,
    ClientSession,
    Close,
    Connected,
    Publish,
    Subscribe,
    Unsubscribe,
    encode_err,
    encode_hmsg,
    encode_info,
    encode_msg,
    no_responders_header,
    order_info,
)
from tests.protocol.core_cases import CASES, INFO_CASES, NO_INFO_CASES, connect_info_line
from tests.protocol.wire import run

INFO: dict[str, Any] = {
    "server_id": "NTEST",
    "server_name": "NTEST",
    "version": "2.15.1",
    "proto": 1,
    "go": "go1.27.2",
    "host": "127.0.0.1",
    "port": 4222,
    "headers": True,
    "max_payload": 1048576,
    "jetstream": True,
    "client_id": 7,
    "client_ip": "127.0.0.1",
    "api_lvl": 5,
    "xkey": "XKEY",
}


def actions(data: bytes, info: dict[str, Any] = INFO) -> list[Any]:
    s = ClientSession(info, 1048576)
    s.receive_data(data)
    out = []
    while (a := s.next_action()) is not None:
        out.append(a)
    return out


@pytest.mark.parametrize(
    ("data", "expected", "closed"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_probed_wire_behaviour(data: bytes, expected: bytes, closed: bool) -> None:
    result = run(data, INFO)
    assert result.output == expected
    assert result.closed is closed


@pytest.mark.parametrize(
    ("data", "before", "after", "closed"),
    [c[1:] for c in INFO_CASES],
    ids=[c[0] for c in INFO_CASES],
)
def test_async_info_after_first_pong(
    data: bytes, before: bytes, after: bytes, closed: bool
) -> None:
    result = run(data, INFO)
    assert result.output == before + connect_info_line(INFO) + after
    assert result.closed is closed


@pytest.mark.parametrize(
    ("data", "expected", "closed"),
    [c[1:] for c in NO_INFO_CASES],
    ids=[c[0] for c in NO_INFO_CASES],
)
def test_no_async_info(data: bytes, expected: bytes, closed: bool) -> None:
    result = run(data, INFO)
    assert result.output == expected and result.closed is closed


def test_connect_info_keys_in_go_struct_order() -> None:
    line = connect_info_line(INFO)
    keys = list(json.loads(line[5:-3]))
    assert keys[keys.index("client_ip") + 1 : keys.index("api_lvl")] == [
        "connect_info",
        "remote_account",
    ]
    assert line.endswith(b"} \r\n")


def test_connected_action_carries_the_merged_options() -> None:
    got = actions(
        b'CONNECT {"verbose":false,"pedantic":false,"echo":false,"headers":true,'
        b'"no_responders":true,"name":"n","lang":"python3","version":"2.16.0","protocol":1}\r\n'
    )
    assert got == [
        Connected(
            verbose=False,
            pedantic=False,
            echo=False,
            headers=True,
            no_responders=True,
            name="n",
            lang="python3",
            version="2.16.0",
            protocol=1,
        )
    ]


def test_headers_need_server_support() -> None:
    info = dict(INFO, headers=False)
    got = actions(b'CONNECT {"verbose":false,"headers":true}\r\nHPUB a 0 0\r\n\r\n', info)
    assert isinstance(got[0], Connected) and got[0].headers is False
    assert got[1:] == [Close(None)]


def test_subscribe_and_unsubscribe_actions() -> None:
    got = actions(
        b'CONNECT {"verbose":false}\r\nSUB foo q 1\r\nSUB bar 1\r\nUNSUB 1 5\r\nUNSUB 1\r\n'
        b"UNSUB 1\r\nUNSUB 2\r\n"
    )
    assert got[1:] == [
        Subscribe("1", "foo", "q"),
        Unsubscribe("1", 5),
        Unsubscribe("1", None),
    ]


def test_second_connect_unsubscribes_everything() -> None:
    got = actions(b"CONNECT {}\r\nSUB a 2\r\nSUB b 1\r\nCONNECT {}\r\nSUB a 2\r\n")
    assert [a for a in got if isinstance(a, (Subscribe, Unsubscribe))] == [
        Subscribe("2", "a", None),
        Subscribe("1", "b", None),
        Unsubscribe("1", None),
        Unsubscribe("2", None),
        Subscribe("2", "a", None),
    ]


def test_publish_is_the_parser_event_passed_through() -> None:
    s = ClientSession(INFO, 1048576)
    s.receive_data(b'CONNECT {"verbose":false,"pedantic":false}\r\nPUB a r 2\r\nhi\r\n')
    assert isinstance(s.next_action(), Connected)
    pub = s.next_action()
    assert Publish is Pub
    assert pub == Pub("a", "r", None, b"hi")
    assert s.next_action() is None


def test_nothing_after_close() -> None:
    s = ClientSession(INFO, 1048576)
    s.receive_data(b"FOO\r\nPING\r\n")
    assert s.next_action() == Close("Unknown Protocol Operation")
    assert s.closed
    s.receive_data(b"PING\r\n")
    assert s.next_action() is None


def test_max_payload_comes_from_the_session() -> None:
    assert actions(b"PUB a 11\r\n") == []  # under the default limit: waits for the payload
    s = ClientSession(INFO, 10)
    s.receive_data(b"PUB a 11\r\n")
    assert s.next_action() == Close("Maximum Payload Violation")


def test_pongs_are_counted() -> None:
    s = ClientSession(INFO, 1048576)
    s.receive_data(b"PONG\r\nPONG\r\n")
    assert s.next_action() is None
    assert s.pongs_received == 2


def test_options_property_and_initial_info() -> None:
    s = ClientSession(INFO, 1048576)
    assert s.initial_bytes() == encode_info(INFO)
    s.receive_data(b'CONNECT {"Name":"x","verbose":false}\r\n')
    while s.next_action() is not None:
        pass
    opts = s.options
    assert opts["name"] == "x" and opts["verbose"] is False and opts["pedantic"] is True


# ---------------------------------------------------------------- encoders


def test_encoders() -> None:
    assert encode_msg("a.b", "1", None, b"hi") == b"MSG a.b 1 2\r\nhi\r\n"
    assert encode_msg("a.b", "1", "r", b"") == b"MSG a.b 1 r 0\r\n\r\n"
    hdr = b"NATS/1.0\r\n\r\n"
    assert encode_hmsg("a", "9", None, hdr, b"xy") == b"HMSG a 9 12 14\r\n" + hdr + b"xy\r\n"
    assert encode_hmsg("a", "9", "r", hdr, b"") == b"HMSG a 9 r 12 12\r\n" + hdr + b"\r\n"
    assert encode_err("Invalid Subject") == b"-ERR 'Invalid Subject'\r\n"
    assert encode_info({"a": 1, "b": "<&>"}) == b'INFO {"a":1,"b":"\\u003c\\u0026\\u003e"} \r\n'
    assert encode_hmsg("r", "1", None, no_responders_header("nobody"), b"") == (
        b"HMSG r 1 38 38\r\nNATS/1.0 503\r\nNats-Subject: nobody\r\n\r\n\r\n"
    )
    assert (OK, PING, PONG) == (b"+OK\r\n", b"PING\r\n", b"PONG\r\n")
    # undecodable subject bytes survive a parse → encode round trip
    assert encode_msg("\udcff", "1", None, b"") == b"MSG \xff 1 0\r\n\r\n"


@pytest.mark.parametrize(
    ("raw", "quoted"),
    [
        ("foo", '"foo"'),
        ('a"b', '"a\\"b"'),
        ("a\\b", '"a\\\\b"'),
        ("\udcff", '"\\xff"'),
        ("a\rb", '"a\\rb"'),
        ("\x01", '"\\x01"'),
        ("é", '"é"'),
        ("\u200b", '"\\u200b"'),
    ],
)
def test_go_quote(raw: str, quoted: str) -> None:
    assert go_quote(raw) == quoted


def test_encode_str_and_info_order() -> None:
    assert encode_str({"a": "é\u2028"}) == '{"a":"é\\u2028"}'
    assert list(order_info({"xkey": 1, "zzz": 2, "server_id": 3, "api_lvl": 4})) == [
        "server_id",
        "api_lvl",
        "xkey",
        "zzz",
    ]


def _session_after(data: bytes) -> ClientSession:
    session = ClientSession({**INFO, "nonce": "NONCE"}, 1048576)
    session.receive_data(data)
    while session.next_action() is not None:
        pass
    return session


@pytest.mark.parametrize(
    ("data", "gets_it"),
    [
        (b'CONNECT {"protocol":1}\r\nPING\r\n', True),
        (b'CONNECT {"protocol":1}\r\n', False),  # the connect_info INFO is still to come
        (b'CONNECT {"protocol":0}\r\nPING\r\n', False),  # did not ask for async INFO
        (b"PING\r\n", False),  # no CONNECT yet
    ],
)
def test_an_async_info_goes_only_to_clients_past_their_first_pong_on_protocol_1(
    data: bytes, gets_it: bool
) -> None:
    line = _session_after(data).async_info(ldm=True)
    if not gets_it:
        assert line is None
        return
    assert line is not None and line.startswith(b"INFO ") and line.endswith(b" \r\n")
    info = json.loads(line[5:-3])
    assert info["ldm"] is True and info["client_id"] == INFO["client_id"]
    assert "nonce" not in info and "connect_info" not in info


def test_no_async_info_on_a_closed_session() -> None:
    session = _session_after(b'CONNECT {"protocol":1}\r\nPING\r\nSUB a\r\n')  # SUB lacks a sid
    assert session.closed and session.async_info(ldm=True) is None


def test_an_empty_connect_urls_list_is_left_out_of_an_async_info() -> None:
    session = _session_after(b'CONNECT {"protocol":1}\r\nPING\r\n')
    session.update_info(connect_urls=["127.0.0.1:4222", "127.0.0.1:4223"])
    listed = session.async_info()
    assert listed is not None and json.loads(listed[5:-3])["connect_urls"][1] == "127.0.0.1:4223"
    line = session.async_info(ldm=True, connect_urls=[])
    assert line is not None and "connect_urls" not in json.loads(line[5:-3])


def test_an_empty_connect_urls_list_is_left_out_of_the_connect_info_too() -> None:
    session = _session_after(b'CONNECT {"protocol":1}\r\n')
    session.update_info(connect_urls=[])  # the last peer left before this client's first PING
    session.receive_data(b"PING\r\n")
    out = b""
    while (action := session.next_action()) is not None:
        out += getattr(action, "data", b"")
    assert b'"connect_info":true' in out and b"connect_urls" not in out
