"""Only configured, authenticated peers join: route credentials, a HELLO-sized pre-auth budget,
a handshake deadline, the configured-peer rule, and route TLS with verified certificates."""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import nats
import pytest
import trustme
import uvloop

from cluster.security_config import RouteAuthConfig, TLSConfig
from cluster.server import ServerOptions
from protocol.route_frames import FrameKind, encode_frame
from tests.cluster.inprocess import InProcessCluster, wait_for
from tests.servers import free_port

pytestmark = pytest.mark.integration

CLOSE_TIMEOUT_S = 5.0
HANDSHAKE_TIMEOUT_S = 0.5
AUTH = RouteAuthConfig(user="route", password="s3cret", timeout_s=HANDSHAKE_TIMEOUT_S)


class _AuthCluster(InProcessCluster):
    tls: TLSConfig | None = None

    def options(self, i: int) -> ServerOptions:
        return replace(super().options(i), route_auth=AUTH, route_tls=self.tls)


async def _closed_by_peer(reader: asyncio.StreamReader) -> bool:
    try:
        while await asyncio.wait_for(reader.read(65536), CLOSE_TIMEOUT_S):
            pass
        return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


async def _send(port: int, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    try:
        await writer.drain()
    except ConnectionError:
        pass  # cut off while sending: the read side reports it
    return reader, writer


def _hello(name: str = "n1", **creds: Any) -> bytes:
    return encode_frame(FrameKind.HELLO, {"v": 1, "name": name, "cluster": "c", **creds})


async def _publish_and_read(url: str, stream: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], num_replicas=3)
        assert (await js.publish(f"{stream.lower()}.1", b"x")).seq == 1
    finally:
        await nc.close()


async def test_an_authenticated_cluster_forms_and_strangers_get_nothing(tmp_path: Path) -> None:
    cluster = _AuthCluster(tmp_path / "c", 3)
    await cluster.start()
    try:
        await _publish_and_read(cluster.urls[0], "OK")
        port = cluster.cluster_ports[0]
        nc = await nats.connect(cluster.urls[0])
        sub = await nc.subscribe("injected")
        await nc.flush()
        routes = cluster.servers[0].routes  # type: ignore[union-attr]
        assert routes is not None
        real_link = routes.inbound("n1")
        assert real_link is not None

        # no or wrong credentials, then a message frame: closed, nothing delivered
        msg = encode_frame(FrameKind.MSG, ["injected", None, None, b"evil", True, []])
        for hello in (_hello(), _hello(user="route", **{"pass": "wrong"}), _hello(token="x")):
            reader, writer = await _send(port, hello + msg)
            assert await _closed_by_peer(reader)
            writer.close()
        # right credentials but a name that is no configured node: closed
        reader, writer = await _send(port, _hello("intruder", user="route", **{"pass": "s3cret"}))
        assert await _closed_by_peer(reader)
        writer.close()
        # the same with a frame for a stream's subject: the stream never stores it
        evil = encode_frame(FrameKind.MSG, ["ok.evil", None, None, b"evil", True, []])
        reader, writer = await _send(port, _hello(user="route", **{"pass": "no"}) + evil)
        assert await _closed_by_peer(reader)
        writer.close()
        with pytest.raises(TimeoutError):
            await sub.next_msg(timeout=0.3)
        assert (await nc.jetstream().stream_info("OK")).state.messages == 1
        # the real peer's link was never replaced by the forged HELLOs with its name
        assert routes.inbound("n1") is real_link

        # megabytes without a HELLO: cut after the HELLO budget, not buffered
        reader, writer = await _send(port, b"\x00\x10\x00\x00\x01" + b"x" * 10_000_000)
        assert await _closed_by_peer(reader)
        writer.close()
        # silence: cut at the handshake deadline
        started = time.monotonic()
        reader, writer = await _send(port, b"")
        assert await _closed_by_peer(reader)
        assert time.monotonic() - started < CLOSE_TIMEOUT_S
        writer.close()
        await nc.close()
        await _publish_and_read(cluster.urls[1], "STILL")
    finally:
        await cluster.stop()


def _tls(tmp_path: Path, ca: trustme.CA, name: str, verify: bool = True) -> TLSConfig:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file, ca_file = (
        tmp_path / f"{name}.pem",
        tmp_path / f"{name}.key",
        tmp_path / "ca.pem",
    )
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    return TLSConfig(cert_file=cert_file, key_file=key_file, ca_file=ca_file, verify=verify)


async def test_route_tls_with_verified_certificates(tmp_path: Path) -> None:
    ca = trustme.CA()
    cluster = _AuthCluster(tmp_path / "c", 3)
    cluster.tls = _tls(tmp_path, ca, "node")
    await cluster.start()
    try:
        await _publish_and_read(cluster.urls[2], "TLS")
        port = cluster.cluster_ports[0]
        # plain TCP with valid credentials: no TLS handshake, no route
        reader, writer = await _send(port, _hello("n1", user="route", **{"pass": "s3cret"}))
        assert await _closed_by_peer(reader)
        writer.close()
        # TLS without a client certificate: refused by verify
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"
            )
            writer.write(_hello("n1", user="route", **{"pass": "s3cret"}))
            await writer.drain()
            assert await _closed_by_peer(reader)
            writer.close()
        except (ssl.SSLError, ConnectionError):
            pass  # refused during the handshake: also a refusal
        routes = cluster.servers[0].routes  # type: ignore[union-attr]
        assert routes is not None
        await wait_for(lambda: set(routes.connected_peers()) == {"n1", "n2"}, "routes up")
    finally:
        await cluster.stop()


FORGED_HELLOS = 200


def _record(events: list[tuple[str, str]], node: str, peer: str) -> None:
    events.append((node, peer))


async def test_forged_hellos_with_a_peer_name_never_take_its_link_down(tmp_path: Path) -> None:
    """The attack that knocked a peer's link down 198 times in 10 s: HELLOs with a connected
    peer's name and no (or wrong) credentials, as fast as the node answers them."""
    cluster = _AuthCluster(tmp_path / "c", 3)
    await cluster.start()
    try:
        downs: list[tuple[str, str]] = []
        for i in cluster.live():
            routes = cluster.servers[i].routes  # type: ignore[union-attr]
            assert routes is not None
            routes.peer_down.append(functools.partial(_record, downs, f"n{i}"))
        target = cluster.servers[0].routes  # type: ignore[union-attr]
        assert target is not None
        real_link = target.inbound("n1")
        port = cluster.cluster_ports[0]
        for attempt in range(FORGED_HELLOS):
            creds = {} if attempt % 2 else {"user": "route", "pass": f"guess{attempt}"}
            reader, writer = await _send(port, _hello("n1", **creds))
            assert await _closed_by_peer(reader)
            writer.close()
        assert downs == [], f"route down events during the attack: {downs}"
        assert target.inbound("n1") is real_link
        assert real_link.transport is not None and not real_link.transport.is_closing()
        await _publish_and_read(cluster.urls[1], "AFTER")
    finally:
        await cluster.stop()


async def test_a_client_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    ca = trustme.CA()
    cluster = _AuthCluster(tmp_path / "c", 3)
    cluster.tls = _tls(tmp_path, ca, "node")
    await cluster.start()
    try:
        stranger = trustme.CA().issue_cert("127.0.0.1")
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        stranger.configure_cert(ctx)
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", cluster.cluster_ports[0], ssl=ctx, server_hostname="127.0.0.1"
            )
            writer.write(_hello("n1", user="route", **{"pass": "s3cret"}))
            await writer.drain()
            assert await _closed_by_peer(reader)
            writer.close()
        except (ssl.SSLError, ConnectionError):
            pass  # refused during the handshake (TLS 1.2) rather than after it (TLS 1.3)
        routes = cluster.servers[0].routes  # type: ignore[union-attr]
        assert routes is not None
        assert routes.inbound_peers() == {"n1", "n2"}
        await _publish_and_read(cluster.urls[0], "CA")
    finally:
        await cluster.stop()


class _MixedCluster(_AuthCluster):
    """Node 0 with route TLS, node 1 without: a misconfiguration that must fail closed."""

    def options(self, i: int) -> ServerOptions:
        opts = super().options(i)
        return opts if i == 0 else replace(opts, route_tls=None)


async def test_tls_and_plain_nodes_never_connect_and_say_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="jetraft.routes")
    cluster = _MixedCluster(tmp_path / "c", 2)
    cluster.tls = _tls(tmp_path, trustme.CA(), "node")
    cluster.client_ports = [free_port() for _ in range(2)]
    cluster.cluster_ports = [free_port() for _ in range(2)]
    cluster.servers = [None, None]
    try:
        for i in range(2):
            await cluster.start_node(i)

        def explained() -> bool:
            text = caplog.text
            # node 0 (TLS) about node 1's plain HELLO, node 1 (plain) about node 0's TLS hello
            return "not speaking TLS" in text and "has no tls configured" in text

        await wait_for(explained, "both sides logging the TLS mismatch")
        for i in range(2):
            routes = cluster.servers[i].routes  # type: ignore[union-attr]
            assert routes is not None
            assert routes.connected_peers() == [] and routes.inbound_peers() == set()
    finally:
        await cluster.stop()


def test_route_tls_under_uvloop(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """jetraft processes run on uvloop, whose TLS upgrade (start_tls) and handshake errors are
    its own implementation: the TLS scenarios again on it."""
    for i, scenario in enumerate(
        [
            test_route_tls_with_verified_certificates,
            test_a_client_certificate_from_another_ca_is_refused,
        ]
    ):
        (tmp_path / str(i)).mkdir()
        uvloop.run(scenario(tmp_path / str(i)))
    (tmp_path / "mixed").mkdir()
    uvloop.run(test_tls_and_plain_nodes_never_connect_and_say_why(tmp_path / "mixed", caplog))
