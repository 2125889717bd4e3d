"""The route handshake on one accepted or dialed link, driven through a fake transport: what is
read before a peer authenticated, which HELLO is accepted, and what the dialer presents."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path
from typing import Any, cast

import pytest
import trustme

from cluster.router import Router
from cluster.routes import RouteManager, _Link
from cluster.security_config import RouteAuthConfig, TLSConfig
from protocol.route_frames import (
    FRAME_BYTES_MAX,
    FRAME_HEADER,
    HELLO_BYTES_MAX,
    FrameKind,
    FrameReader,
    encode_frame,
)

AUTH = RouteAuthConfig(user="route", password="s3cret", timeout_s=0.2)
PEER_URL = "nats://127.0.0.1:7001"


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.writes = 0  # writelines calls
        self.aborted = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, chunks: list[bytes]) -> None:
        self.writes += 1
        for chunk in chunks:
            self.written += chunk

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.aborted or self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> Any:
        return ("192.0.2.7", 40000) if name == "peername" else None

    def frames(self) -> list[tuple[FrameKind, Any]]:
        return FrameReader().feed(bytes(self.written))


class FakeRouter:
    def __init__(self) -> None:
        self.delivered: list[list[Any]] = []
        self.dropped: list[str] = []

    def deliver_routed(self, *args: Any) -> None:
        self.delivered.append(list(args))

    def drop_peer(self, peer: str) -> None:
        self.dropped.append(peer)

    def local_interest(self) -> list[tuple[str, str | None, int, Any]]:
        return []


def _manager(auth: RouteAuthConfig | None = AUTH) -> tuple[RouteManager, FakeRouter]:
    router = FakeRouter()
    mgr = RouteManager("n0", "c", "127.0.0.1", 0, [PEER_URL], cast(Router, router), auth=auth)
    mgr.resolved[PEER_URL] = "n1"  # learned by dialing the configured route
    return mgr, router


def _accepted(mgr: RouteManager) -> tuple[_Link, FakeTransport]:
    link = _Link(mgr, dialed=False)
    transport = FakeTransport()
    link.connection_made(cast(asyncio.Transport, transport))
    return link, transport


def _hello(name: str = "n1", **creds: Any) -> bytes:
    return encode_frame(FrameKind.HELLO, {"v": 1, "name": name, "cluster": "c", **creds})


def _msg() -> bytes:
    return encode_frame(FrameKind.MSG, ["injected", None, None, b"evil", True, []])


GOOD = {"user": "route", "pass": "s3cret"}


async def test_an_accepted_link_reads_only_a_hello_sized_frame_before_auth() -> None:
    mgr, _ = _manager()
    link, transport = _accepted(mgr)
    # a header announcing 10 MB: refused on the header, nothing of the body is kept
    link.data_received(FRAME_HEADER.pack(10_000_000, FrameKind.HELLO) + b"x" * 60_000)
    assert transport.aborted
    assert link.peer is None
    assert link.reader.buffered <= 60_000 + FRAME_HEADER.size
    # the limit is exactly HELLO_BYTES_MAX
    link, transport = _accepted(mgr)
    link.data_received(FRAME_HEADER.pack(HELLO_BYTES_MAX + 1, FrameKind.HELLO))
    assert transport.aborted
    link, transport = _accepted(mgr)
    link.data_received(FRAME_HEADER.pack(HELLO_BYTES_MAX, FrameKind.HELLO))
    assert not transport.aborted


@pytest.mark.parametrize("kind", [k for k in FrameKind if k != FrameKind.HELLO])
async def test_any_frame_but_hello_before_auth_closes_the_link(kind: FrameKind) -> None:
    mgr, router = _manager()
    link, transport = _accepted(mgr)
    link.data_received(encode_frame(kind, ["x", None, None, b"", True, []]))
    assert transport.aborted
    assert router.delivered == []


@pytest.mark.parametrize(
    "creds",
    [{}, {"user": "route", "pass": "wrong"}, {"user": "other", "pass": "s3cret"}, {"token": "x"}],
    ids=["none", "wrong-pass", "wrong-user", "token"],
)
async def test_wrong_credentials_close_before_anything_else(creds: dict[str, str]) -> None:
    mgr, router = _manager()
    link, transport = _accepted(mgr)
    link.data_received(_hello(**creds) + _msg())
    assert transport.aborted
    assert transport.written == b"", "no HELLO answer to an unauthenticated peer"
    assert link.peer is None and router.delivered == []
    assert mgr.inbound("n1") is None


async def test_right_credentials_and_a_configured_name_make_a_peer() -> None:
    mgr, router = _manager()
    link, transport = _accepted(mgr)
    link.data_received(_hello(**GOOD))
    assert not transport.is_closing()
    assert link.peer == "n1" and mgr.inbound("n1") is link
    assert link.reader.frame_bytes_max == FRAME_BYTES_MAX
    assert [k for k, _ in transport.frames()] == [FrameKind.HELLO]
    link.data_received(_msg())
    assert router.delivered == [["injected", None, None, b"evil", True, [], None]]


async def test_an_unknown_name_is_answered_and_closed() -> None:
    mgr, _ = _manager()
    link, transport = _accepted(mgr)
    link.data_received(_hello("stranger", **GOOD))
    assert transport.closed and link.peer is None
    assert mgr.inbound("stranger") is None
    # our own name is no peer either
    link, transport = _accepted(mgr)
    link.data_received(_hello("n0", **GOOD))
    assert transport.closed and link.peer is None


async def test_a_forged_hello_does_not_replace_a_connected_peer() -> None:
    mgr, router = _manager()
    real, real_transport = _accepted(mgr)
    real.data_received(_hello(**GOOD))
    for _ in range(50):
        link, transport = _accepted(mgr)
        link.data_received(_hello())
        assert transport.aborted
    assert mgr.inbound("n1") is real and not real_transport.is_closing()
    assert router.dropped == []
    # the real peer reconnecting (authenticated) replaces its old link
    again, _ = _accepted(mgr)
    again.data_received(_hello(**GOOD))
    assert mgr.inbound("n1") is again and real_transport.closed


async def test_silence_is_closed_at_the_handshake_timeout() -> None:
    for auth in (AUTH, RouteAuthConfig(timeout_s=0.2)):  # the deadline applies without auth too
        mgr, _ = _manager(auth)
        link, transport = _accepted(mgr)
        await asyncio.sleep(0.4)
        assert transport.aborted and link.peer is None


async def test_a_tls_client_hello_on_a_plain_port_is_refused() -> None:
    mgr, _ = _manager()
    link, transport = _accepted(mgr)
    link.data_received(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    assert transport.aborted


async def test_the_dialer_presents_url_credentials_else_its_own() -> None:
    mgr, _ = _manager()
    assert mgr.hello_body("nats://a:b%40c@h:1") == {
        "v": 1,
        "name": "n0",
        "cluster": "c",
        "listen": "127.0.0.1:0",
        "user": "a",
        "pass": "b@c",
    }
    own = mgr.hello_body("nats://h:1")
    assert (own["user"], own["pass"]) == ("route", "s3cret")
    token_mgr = RouteManager(
        "n0", "c", "h", 0, [], cast(Router, FakeRouter()), auth=RouteAuthConfig(token="t")
    )
    assert token_mgr.hello_body("nats://h:1")["token"] == "t"
    assert token_mgr.credentials_ok({"token": "t"})
    assert not token_mgr.credentials_ok({"token": "u"})
    assert not token_mgr.credentials_ok({"token": 1})
    # the acceptor's answer carries no credentials
    assert set(mgr.hello_body()) == {"v", "name", "cluster", "listen"}
    # no authorization: anyone passes the credential check (the configured-name rule remains)
    open_mgr, _ = _manager(None)
    assert open_mgr.credentials_ok({})
    assert "user" not in open_mgr.hello_body("nats://h:1")


@pytest.mark.parametrize(
    ("host", "auth", "tls_verify", "warned"),
    [
        ("0.0.0.0", None, False, True),
        ("", None, False, True),  # every interface
        ("10.1.2.3", None, False, True),
        ("0.0.0.0", AUTH, False, False),
        ("0.0.0.0", None, True, False),
        ("127.0.0.1", None, False, False),
        ("::1", None, False, False),
        ("localhost", None, False, False),
    ],
)
def test_an_open_cluster_port_beyond_loopback_is_warned_about(
    host: str,
    auth: RouteAuthConfig | None,
    tls_verify: bool,
    warned: bool,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tls = _tls_config(tmp_path, verify=tls_verify) if tls_verify else None
    mgr = RouteManager("n0", "c", host, 6222, [], cast(Router, FakeRouter()), auth=auth, tls=tls)
    with caplog.at_level(logging.WARNING, logger="jetraft.routes"):
        mgr._warn_if_open()
    assert ("accepts routes without authentication" in caplog.text) == warned


def _tls_config(tmp_path: Path, verify: bool = True, insecure: bool = False) -> TLSConfig:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "node.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "node.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    return TLSConfig(
        cert_file=tmp_path / "node.pem",
        key_file=tmp_path / "node.key",
        ca_file=tmp_path / "ca.pem",
        verify=verify,
        insecure=insecure,
    )


def test_tls_contexts_verify_peers_unless_told_not_to(tmp_path: Path) -> None:
    def manager(tls: TLSConfig) -> RouteManager:
        return RouteManager("n0", "c", "h", 0, [], cast(Router, FakeRouter()), tls=tls)

    verified = manager(_tls_config(tmp_path))
    server, client = verified._server_ssl(), verified._client_ssl()
    assert server is not None and client is not None
    assert server.verify_mode == ssl.CERT_REQUIRED  # the dialer must show a CA-signed cert
    assert client.verify_mode == ssl.CERT_REQUIRED and client.check_hostname
    unverified = manager(_tls_config(tmp_path, verify=False, insecure=True))
    server, client = unverified._server_ssl(), unverified._client_ssl()
    assert server is not None and client is not None
    assert server.verify_mode == ssl.CERT_NONE
    assert client.verify_mode == ssl.CERT_NONE and not client.check_hostname
    assert RouteManager("n0", "c", "h", 0, [], cast(Router, FakeRouter()))._client_ssl() is None


async def test_frames_of_one_loop_turn_go_out_in_one_write_in_order() -> None:
    """Message, Raft and state-transfer frames are gathered and written once at the end of the
    loop turn; a handshake or interest frame goes at once, behind what was gathered before it;
    ``flush`` (what Raft calls before it blocks on an fsync) writes at once."""
    mgr, _ = _manager()
    link, transport = _accepted(mgr)
    link.data_received(_hello(**GOOD))  # our HELLO answer: written at once
    assert [k for k, _ in transport.frames()] == [FrameKind.HELLO]
    before = transport.writes
    for n in range(3):
        assert link.send(FrameKind.MSG, [f"s.{n}", None, None, b"x", True, []])
    assert link.send(FrameKind.RAFT, ["G", {"type": "request_vote"}])
    assert transport.writes == before and len(transport.frames()) == 1
    await asyncio.sleep(0)
    kinds = [k for k, _ in transport.frames()]
    assert kinds == [FrameKind.HELLO, *[FrameKind.MSG] * 3, FrameKind.RAFT]
    assert [b[0] for k, b in transport.frames() if k == FrameKind.MSG] == ["s.0", "s.1", "s.2"]
    assert transport.writes == before + 1
    # interest behind a gathered message: both at once, in order
    link.send(FrameKind.MSG, ["s.3", None, None, b"x", True, []])
    link.send(FrameKind.SUB, ["foo", None, 1, None])
    assert [k for k, _ in transport.frames()][-2:] == [FrameKind.MSG, FrameKind.SUB]
    link.send(FrameKind.CATCHUP, ["G", 1, "x", b""])
    link.flush()
    assert [k for k, _ in transport.frames()][-1] == FrameKind.CATCHUP
    writes = transport.writes
    await asyncio.sleep(0)  # nothing left for the end of the turn
    assert transport.writes == writes


async def test_interest_and_closes_never_overtake_or_drop_gathered_frames() -> None:
    """The router's interest changes (written at once) follow the messages gathered before them
    on the link to each peer; ``RouteManager.flush`` and a link's ``close`` write what waits."""
    mgr, _ = _manager()
    link = _Link(mgr, dialed=True, url=PEER_URL)
    transport = FakeTransport()
    link.connection_made(cast(asyncio.Transport, transport))  # the dialer's HELLO: at once
    mgr._out["n1"] = link
    link.send(FrameKind.MSG, ["before", None, None, b"x", True, []])
    mgr._on_local_interest("foo", None, 1, None)
    assert [k for k, _ in transport.frames()] == [FrameKind.HELLO, FrameKind.MSG, FrameKind.SUB]
    link.send(FrameKind.RAFT, ["G", {"type": "request_vote"}])
    mgr.flush()
    assert [k for k, _ in transport.frames()][-1] == FrameKind.RAFT
    link.send(FrameKind.MSG, ["last", None, None, b"x", True, []])
    link.close()
    assert transport.closed and transport.frames()[-1][1][0] == "last"


async def test_a_peers_client_urls_come_with_its_hello_and_go_with_its_link() -> None:
    mgr, _ = _manager()
    mgr.client_urls = ["127.0.0.1:4222"]
    changes: list[dict[str, list[str]]] = []
    mgr.client_urls_changed.append(lambda: changes.append(dict(mgr.peer_client_urls)))
    link, transport = _accepted(mgr)
    link.data_received(_hello(client_urls=["10.0.0.2:4222", "[fd00::2]:4222"], **GOOD))
    assert link.peer == "n1"
    # our answer tells the peer our own
    [(kind, answer)] = transport.frames()
    assert kind == FrameKind.HELLO and answer["client_urls"] == ["127.0.0.1:4222"]
    link.connection_lost(None)
    assert changes == [{"n1": ["10.0.0.2:4222", "[fd00::2]:4222"]}, {}]


@pytest.mark.parametrize(
    "urls",
    ["10.0.0.2:4222", [4222], ["a b:1"], ["x\x00:1"], [""], ["h:1"] * 33, ["h" * 257]],
    ids=["not-a-list", "not-str", "space", "control", "empty", "too-many", "too-long"],
)
async def test_a_hello_with_bad_client_urls_closes_the_link(urls: Any) -> None:
    mgr, _ = _manager()
    changes: list[int] = []
    mgr.client_urls_changed.append(lambda: changes.append(1))
    link, transport = _accepted(mgr)
    link.data_received(_hello(client_urls=urls, **GOOD))
    assert transport.is_closing() and link.peer is None
    assert mgr.peer_client_urls == {} and changes == []


@pytest.mark.parametrize(("ours", "theirs"), [(True, False), (False, True), (True, 1)])
async def test_a_peer_of_the_other_kind_jetstream_or_core_is_closed(
    ours: bool, theirs: Any
) -> None:
    mgr, _ = _manager()
    mgr.jetstream = ours
    link, transport = _accepted(mgr)
    link.data_received(_hello(js=theirs, **GOOD))
    assert transport.closed and link.peer is None and mgr.inbound("n1") is None


async def test_a_stranger_knocking_wakes_the_dialers_at_most_every_quarter_second() -> None:
    mgr, _ = _manager()
    woken = mgr._dial_wake
    link, _transport = _accepted(mgr)
    link.data_received(_hello("n2", **GOOD))  # authenticated, not resolved by a dial yet
    assert woken.is_set()
    again = mgr._dial_wake
    link, _transport = _accepted(mgr)
    link.data_received(_hello("n2", **GOOD))
    assert not again.is_set()  # rate-limited
    assert await mgr._backoff(0.01) is False  # a plain backoff runs to its end


async def test_a_lame_duck_tells_its_peers_which_stop_advertising_it() -> None:
    mgr, _ = _manager()
    urls: list[dict[str, list[str]]] = []
    mgr.client_urls_changed.append(lambda: urls.append(dict(mgr.peer_client_urls)))
    link, _transport = _accepted(mgr)
    link.data_received(_hello(client_urls=["10.0.0.2:4222"], **GOOD))
    link.data_received(encode_frame(FrameKind.LAME_DUCK, None))
    assert mgr.lame_duck_peers == {"n1"} and urls == [{"n1": ["10.0.0.2:4222"]}, {}]
    assert link.peer == "n1"  # still a peer: it leaves at its own pace
    # its restart (a new link) is a new start
    again, _ = _accepted(mgr)
    again.data_received(_hello(client_urls=["10.0.0.2:4222"], **GOOD))
    assert mgr.lame_duck_peers == set() and mgr.peer_client_urls == {"n1": ["10.0.0.2:4222"]}


async def test_entering_lame_duck_mode_tells_every_peer_and_names_no_url_from_then() -> None:
    mgr, _ = _manager()
    mgr.client_urls = ["127.0.0.1:4222"]
    dialed = _Link(mgr, dialed=True, url=PEER_URL)
    transport = FakeTransport()
    dialed.connection_made(cast(asyncio.Transport, transport))
    mgr._out["n1"] = dialed
    mgr.enter_lame_duck()
    mgr.flush()
    assert mgr.lame_duck and mgr.client_urls == []
    assert (FrameKind.LAME_DUCK, None) in transport.frames()
    assert "client_urls" not in mgr.hello_body(PEER_URL)


async def test_a_lame_duck_that_reconnects_says_so_in_its_hello() -> None:
    ours, _ = _manager()
    ours.client_urls = ["127.0.0.1:4222"]
    ours.enter_lame_duck()
    hello = ours.hello_body(PEER_URL)
    assert hello["ldm"] is True and "client_urls" not in hello
    mgr, _ = _manager()
    link, _transport = _accepted(mgr)
    link.data_received(_hello(client_urls=["10.0.0.2:4222"], **GOOD))
    assert mgr.lame_duck_peers == set()
    again, _ = _accepted(mgr)  # the lame duck's link dropped and came back
    again.data_received(_hello(ldm=True, **GOOD))
    assert mgr.lame_duck_peers == {"n1"} and mgr.peer_client_urls == {}


async def test_a_hello_with_a_bad_ldm_closes_the_link() -> None:
    mgr, _ = _manager()
    link, transport = _accepted(mgr)
    link.data_received(_hello(ldm="yes", **GOOD))
    assert transport.is_closing() and link.peer is None and mgr.lame_duck_peers == set()


async def test_a_route_that_comes_up_during_lame_duck_mode_is_told() -> None:
    mgr, _ = _manager()
    mgr.enter_lame_duck()
    dialed = _Link(mgr, dialed=True, url=PEER_URL)
    transport = FakeTransport()
    dialed.connection_made(cast(asyncio.Transport, transport))
    mgr._outbound_up("n1", dialed)
    mgr.flush()
    assert (FrameKind.LAME_DUCK, None) in transport.frames()


async def test_a_refused_unresolved_peer_is_remembered_as_told_who_we_are() -> None:
    mgr, _ = _manager()
    link, transport = _accepted(mgr)
    link.data_received(_hello("n2", **GOOD))
    assert transport.closed and mgr.told_while_refusing == {"n2"}
    # our HELLO went out before the close: it resolves us, so our next dial to it is let in
    assert [kind for kind, _ in transport.frames()] == [FrameKind.HELLO]


async def test_a_configured_peer_dialing_us_wakes_our_dial_to_it_despite_the_rate_limit() -> None:
    mgr, _ = _manager()
    mgr.wake_dialers()  # a stranger's knock just now: the rate limit holds the next one back
    woken = mgr._dial_wake
    link, _transport = _accepted(mgr)
    link.data_received(_hello(**GOOD))  # n1, resolved, and we have no link out to it
    assert link.peer == "n1" and woken.is_set()
    again = mgr._dial_wake
    mgr.wake_dialers()  # the stranger's limit still holds
    assert not again.is_set()


def _claims(urls: list[str]) -> RouteManager:
    router = FakeRouter()
    mgr = RouteManager("n0", "c", "127.0.0.1", 0, urls, cast(Router, router), auth=AUTH)
    return mgr  # nothing resolved yet: no dial has reached any peer


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("192.0.2.7:7002", "nats://192.0.2.7:7002"),  # its address as the connection shows it
        ("0.0.0.0:7002", "nats://192.0.2.7:7002"),  # the host it claims does not count
        ("10.0.0.9:7004", None),  # another node's address: the connection is not from there
        ("peer.example:7003", None),  # a host name in our routes: our own dial resolves it
        ("192.0.2.7:9999", None),
        ("192.0.2.7", None),
        ("192.0.2.7:x", None),
        (["192.0.2.7:7002"], None),
        ("h" * 400 + ":7002", None),
    ],
)
async def test_a_hello_listen_address_names_one_of_our_route_urls(
    listen: Any, expected: str | None
) -> None:
    mgr = _claims(["nats://192.0.2.7:7002", "nats://peer.example:7003", "nats://10.0.0.9:7004"])
    assert mgr.claimed_route_url(listen, "192.0.2.7") == expected


async def test_a_peer_that_starts_after_our_dials_is_let_in_by_its_listen_address() -> None:
    mgr = _claims(["nats://192.0.2.7:7002"])
    link, transport = _accepted(mgr)
    link.data_received(_hello("n1", listen="0.0.0.0:7002", **GOOD))
    assert link.peer == "n1" and not transport.closed
    assert mgr.resolved == {"nats://192.0.2.7:7002": "n1"} and mgr.all_resolved.is_set()
    # a second node claiming the same, now resolved, URL is refused as before
    other, transport = _accepted(mgr)
    other.data_received(_hello("n9", listen="192.0.2.7:7002", **GOOD))
    assert other.peer is None and transport.closed


async def test_a_listen_claim_needs_the_route_credentials() -> None:
    mgr = _claims(["nats://192.0.2.7:7002"])
    link, transport = _accepted(mgr)
    link.data_received(_hello("n1", listen="192.0.2.7:7002", user="route", **{"pass": "no"}))
    assert link.peer is None and mgr.resolved == {} and transport.aborted
