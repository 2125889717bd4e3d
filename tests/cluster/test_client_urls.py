"""The client URLs a cluster node advertises (INFO connect_urls): cluster/client_urls.py."""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster import client_urls
from cluster.client_urls import (
    CLIENT_URL_BYTES_MAX,
    CLIENT_URLS_MAX,
    ClientAdvertiseError,
    advertised_client_urls,
    parse_advertise,
    peer_client_urls,
)
from cluster.server import Server, ServerOptions


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("nats.example.com", "nats.example.com:4222"),
        ("nats.example.com:5222", "nats.example.com:5222"),
        ("10.1.2.3", "10.1.2.3:4222"),
        ("[fd00::5]", "[fd00::5]:4222"),
        ("[fd00::5]:5222", "[fd00::5]:5222"),
        ("fd00::5", "[fd00::5]:4222"),  # a bare IPv6 literal: no port in it
        ("host:0", "host:4222"),  # 0 and -1 are the client port, as in nats-server
        ("host:-1", "host:4222"),
    ],
)
def test_client_advertise_is_host_with_an_optional_port(text: str, url: str) -> None:
    assert parse_advertise(text, 4222) == url


@pytest.mark.parametrize(
    "text",
    ["", "host:70000", "host:x", "[fd00::5", "[::1]x", "[v4]:1", "a b", "nats://h:4222", "h" * 300],
)
def test_a_bad_client_advertise_is_refused(text: str) -> None:
    with pytest.raises(ClientAdvertiseError):
        parse_advertise(text, 4222)


def _addr(family: int, address: str) -> Any:
    return SimpleNamespace(family=family, address=address)


def test_a_wildcard_listener_advertises_each_global_unicast_interface_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    interfaces = {
        "lo": [_addr(socket.AF_INET, "127.0.0.1"), _addr(socket.AF_INET6, "::1")],
        "eth0": [
            _addr(socket.AF_INET, "192.0.2.2"),
            _addr(socket.AF_INET6, "fd00::2"),
            _addr(socket.AF_INET6, "fe80::fc:ff:fe00:1%eth0"),  # link-local
            _addr(-1, "02:fc:00:00:00:01"),  # the hardware address
        ],
    }
    monkeypatch.setattr(client_urls.psutil, "net_if_addrs", lambda: interfaces)
    assert advertised_client_urls("", "0.0.0.0", 4222) == ["192.0.2.2:4222", "[fd00::2]:4222"]
    assert advertised_client_urls("", "::", 4223) == ["192.0.2.2:4223", "[fd00::2]:4223"]
    # an address of its own, or client_advertise, is the one URL
    assert advertised_client_urls("", "127.0.0.1", 4222) == ["127.0.0.1:4222"]
    assert advertised_client_urls("nats.example.com", "0.0.0.0", 4222) == ["nats.example.com:4222"]


url_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=300
)


@given(st.one_of(st.lists(url_text, max_size=40), url_text, st.integers(), st.none()))
def test_a_peers_list_is_taken_only_in_its_expected_shape(value: Any) -> None:
    taken = peer_client_urls(value)
    if taken is None:
        return
    assert type(value) is list and taken == value and len(taken) <= CLIENT_URLS_MAX
    for url in taken:
        assert 0 < len(url) <= CLIENT_URL_BYTES_MAX
        assert url.isprintable() and not any(c.isspace() for c in url)


def test_client_advertise_is_the_host_and_port_in_the_info() -> None:
    opts = ServerOptions(jetstream=False, port=4222, client_advertise="nats.example.com:5222")
    info = Server(opts).info(7)
    assert (info["host"], info["port"]) == ("nats.example.com", 5222)
    assert "connect_urls" not in info  # a single server has no cluster to list
    plain = Server(ServerOptions(jetstream=False, port=4222)).info(7)
    assert (plain["host"], plain["port"]) == ("127.0.0.1", 4222)
