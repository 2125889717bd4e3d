"""The websocket block read as nats-server reads it, and the upgrade's origin rules."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from websockets.datastructures import Headers

from cluster.cli import options_from
from cluster.config_file import ConfigError, parse_config
from cluster.websocket import WS_HANDSHAKE_TIMEOUT_S, origin_refusal, websocket_from


def _ws(text: str) -> object:
    return websocket_from(parse_config(text)["websocket"], "0.0.0.0")


def test_a_block_without_a_port_is_off_as_in_nats_server() -> None:
    assert _ws("websocket { no_tls: true }") is None


def test_the_settings_jetraft_acts_on() -> None:
    ws = websocket_from(
        parse_config(
            'websocket { listen: "127.0.0.1:-1", no_tls: true, compression: true,\n'
            'handshake_timeout: "500ms", same_origin: true,\n'
            'allowed_origins: ["https://a.example.com", "http://b.example.com:8080"] }'
        )["websocket"],
        "0.0.0.0",
    )
    assert ws is not None
    assert (ws.host, ws.port, ws.tls, ws.compression, ws.same_origin) == (
        "127.0.0.1",
        -1,
        None,
        True,
        True,
    )
    assert ws.handshake_timeout_s == 0.5 and ws.scheme == "ws"
    assert ws.allowed_origins == (("https", "a.example.com", 443), ("http", "b.example.com", 8080))
    default = websocket_from(parse_config("websocket { port: 80, no_tls: true }")["websocket"], "h")
    assert default is not None and default.handshake_timeout_s == WS_HANDSHAKE_TIMEOUT_S


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("websocket { port: 8080 }", "websocket requires TLS configuration"),
        ("websocket { port: 8080, no_tls: false }", "websocket requires TLS configuration"),
        (
            'websocket { port: 8080, no_tls: true, allowed_origins: ["ftp://x.example.com"] }',
            "allowed origins must be absolute URLs with http or https scheme",
        ),
        (
            'websocket { port: 8080, no_tls: true, allowed_origins: ["http://"] }',
            "host is required",
        ),
        ('websocket { port: 8080, no_tls: true, compression: "yes please" }', "true or false"),
        ('websocket { port: "x", no_tls: true }', "must be an integer"),
    ],
)
def test_bad_settings_are_refused(block: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        _ws(block)


@pytest.mark.parametrize(
    "key", ["authorization { token: t }", "jwt_cookie: c", "no_auth_user: u", "advertise: h:1"]
)
def test_settings_jetraft_does_not_act_on_are_refused_by_name(tmp_path: Path, key: str) -> None:
    conf = tmp_path / "ws.conf"
    conf.write_text(f"websocket {{ port: 8080, no_tls: true, {key} }}\n")
    args = argparse.Namespace(
        config=str(conf), addr=None, port=None, store_dir=None, server_name=None, http_port=None
    )
    with pytest.raises(SystemExit, match=key.split()[0].rstrip(":")):
        options_from(args)


@pytest.mark.parametrize(
    ("config", "origin", "host", "refused"),
    [
        ("", "http://anything.example.com", "h:80", False),  # no rule: any origin
        ("same_origin: true", None, "h:80", False),  # not a browser: no Origin header
        ("same_origin: true", "http://h", "h:80", False),
        ("same_origin: true", "http://h:8080", "h:8080", False),
        ("same_origin: true", "http://other", "h:80", True),
        ("same_origin: true", "https://h", "h:80", True),  # the scheme counts
        ('allowed_origins: ["http://a.example.com"]', "http://a.example.com:80", "h", False),
        ('allowed_origins: ["http://a.example.com"]', "http://b.example.com", "h", True),
        ('allowed_origins: ["http://a.example.com"]', "not a url", "h", True),
    ],
)
def test_origin_rules(config: str, origin: str | None, host: str, refused: bool) -> None:
    ws = websocket_from(
        parse_config(f"websocket {{ port: 1, no_tls: true, {config} }}")["websocket"], "0.0.0.0"
    )
    assert ws is not None
    headers = Headers(Host=host)
    if origin is not None:
        headers["Origin"] = origin
    assert bool(origin_refusal(ws, headers)) is refused
