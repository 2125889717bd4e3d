"""Differential: client TLS and the connection limits, nats-server 2.15.1 and jetraft started with
the same config file (a ``tls {}`` block with trustme certificates, limits), the same attempts
made on both, the outcomes compared.

What nats-server does, and jetraft must too: the INFO goes out in plain text with
``tls_required`` (and ``tls_verify`` when client certificates are verified), then the client
starts the handshake (a client that handshakes before reading the INFO fails: the INFO is not a
ServerHello); a plain client is closed without a word (no ``-ERR``), and so is one that stays
silent once ``tls { timeout }`` passes; with ``verify`` a client without a certificate is
refused; ``max_connections`` is enforced before TLS (INFO, then
``-ERR 'maximum connections exceeded'`` in plain text); inside TLS an oversize control line gets
``-ERR 'maximum control line exceeded'`` and the close; ``max_payload`` is unchanged;
``https_port`` serves ``/varz`` over TLS with the same certificate and no client certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest
import trustme

from tests.differential.diff_harness import DIFF_AGAINST_ENV
from tests.differential.diff_mask import mask_json
from tests.differential.diff_raw import DEFAULT_CONNECT, Frame, RawConn, connect_line
from tests.servers import ServerProc, free_port, jetraft_proc, nats_server_proc

pytestmark = pytest.mark.differential

TLS_TIMEOUT_S = 1.0
MAX_CONTROL_LINE = 256
MAX_PAYLOAD = 1048576  # nats-server's default; TLS must not change it
CLOSE_WAIT_S = 5.0
HTTP_TIMEOUT_S = 5.0

T = TypeVar("T")


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def client_context(self, *, with_cert: bool) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if with_cert:
            ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    where = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@example.com")
    paths = Certs(*(where / n for n in ("ca.pem", "s.pem", "s.key", "c.pem", "c.key")))
    ca.cert_pem.write_to_path(paths.ca)
    server.cert_chain_pems[0].write_to_path(paths.server_cert)
    server.private_key_pem.write_to_path(paths.server_key)
    client.cert_chain_pems[0].write_to_path(paths.client_cert)
    client.private_key_pem.write_to_path(paths.client_key)
    return paths


def tls_conf(certs: Certs, *, verify: bool = False, extra: str = "") -> str:
    lines = [
        "tls {",
        f'  cert_file: "{certs.server_cert}"',
        f'  key_file: "{certs.server_key}"',
        f"  timeout: {TLS_TIMEOUT_S}",
    ]
    if verify:
        lines += [f'  ca_file: "{certs.ca}"', "  verify: true"]
    return "\n".join([*lines, "}", extra, ""])


@dataclass
class Pair:
    oracle: ServerProc
    candidate: ServerProc

    @property
    def ports(self) -> tuple[int, int]:
        return self.oracle.port, self.candidate.port


@contextlib.contextmanager
def server_pair(tmp_path: Path, conf_for: Callable[[str], str]) -> Iterator[Pair]:
    """nats-server and the candidate, each with ``conf_for(side)`` as its config file and no
    plain monitoring port (nats-server refuses one next to an https_port)."""
    against_nats = os.environ.get(DIFF_AGAINST_ENV, "jetraft") == "nats"
    made: list[ServerProc] = []
    try:
        for side in ("oracle", "candidate"):
            conf = tmp_path / f"{side}.conf"
            conf.write_text(conf_for(side))
            make = nats_server_proc if side == "oracle" or against_nats else jetraft_proc
            proc = make(tmp_path / side, name=side, extra_args=("-c", str(conf)), monitor=False)
            made.append(proc)
            proc.start()
        yield Pair(made[0], made[1])
    finally:
        for proc in made:
            proc.stop()


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Pair]:
    extra = f"max_control_line: {MAX_CONTROL_LINE}"
    with server_pair(tmp_path_factory.mktemp("tls"), lambda _: tls_conf(certs, extra=extra)) as p:
        yield p


@pytest.fixture(scope="module")
def verify_pair(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Pair]:
    with server_pair(
        tmp_path_factory.mktemp("verify"), lambda _: tls_conf(certs, verify=True)
    ) as pair:
        yield pair


async def both(pair: Pair, scenario: Callable[[int], Awaitable[T]]) -> tuple[T, T]:
    oracle, candidate = await asyncio.gather(
        scenario(pair.oracle.port), scenario(pair.candidate.port)
    )
    return oracle, candidate


def same(pair_results: tuple[T, T]) -> T:
    oracle, candidate = pair_results
    assert candidate == oracle, f"\n   oracle: {oracle!r}\ncandidate: {candidate!r}"
    return oracle


def masked_info(frame: Frame | None) -> Any:
    assert frame is not None and frame.op == "INFO", frame
    return mask_json(json.loads(frame.line[5:]))


def frames_key(frames: list[Frame]) -> list[Any]:
    return [f.key() for f in frames]


async def _tls_raw(port: int, ctx: ssl.SSLContext) -> tuple[RawConn, Frame | None]:
    conn = await RawConn.open(port)
    info = await conn.read_frame()
    await conn.start_tls(ctx)
    return conn, info


# --- the INFO ---------------------------------------------------------------------------------


@pytest.mark.parametrize("verify", [False, True], ids=["tls", "tls_verify"])
async def test_info_is_plain_and_says_tls_required(
    verify: bool, tls_pair: Pair, verify_pair: Pair
) -> None:
    pair = verify_pair if verify else tls_pair

    async def info(port: int) -> Any:
        conn = await RawConn.open(port)
        try:
            return masked_info(await conn.read_frame())
        finally:
            await conn.close()

    seen = same(await both(pair, info))
    assert seen["tls_required"] is True
    assert seen.get("tls_verify") is (True if verify else None)
    assert "tls_available" not in seen
    assert seen["max_payload"] == MAX_PAYLOAD


# --- clients that do not speak TLS as expected --------------------------------------------------


async def test_a_plain_client_is_closed_without_an_error(tls_pair: Pair) -> None:
    async def plain(port: int) -> tuple[list[Any], bool]:
        conn = await RawConn.open(port)
        await conn.read_frame()
        await conn.send(connect_line(DEFAULT_CONNECT) + b"PING\r\n")
        frames = await conn.read_until_idle_or_close(CLOSE_WAIT_S)
        closed = conn.closed
        await conn.close()
        return frames_key(frames), closed

    assert same(await both(tls_pair, plain)) == ([], True)


async def test_a_silent_client_is_closed_after_the_tls_timeout(tls_pair: Pair) -> None:
    async def silent(port: int) -> tuple[bool, float]:
        conn = await RawConn.open(port)
        await conn.read_frame()
        started = time.monotonic()
        closed = await conn.wait_closed(TLS_TIMEOUT_S + CLOSE_WAIT_S)
        elapsed = time.monotonic() - started
        await conn.close()
        return closed, elapsed

    (o_closed, o_s), (c_closed, c_s) = await both(tls_pair, silent)
    assert o_closed and c_closed
    for elapsed in (o_s, c_s):
        assert TLS_TIMEOUT_S * 0.8 <= elapsed <= TLS_TIMEOUT_S + 1.5, (o_s, c_s)


async def test_a_handshake_before_the_info_fails(tls_pair: Pair, certs: Certs) -> None:
    """handshake_first is not configured: the client reads the plain INFO as its ServerHello."""
    ctx = certs.client_context(with_cert=False)

    async def tls_first(port: int) -> str:
        try:
            _r, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=ctx), CLOSE_WAIT_S
            )
        except ssl.SSLError as exc:
            return exc.reason or "ssl error"
        writer.close()
        return "connected"

    assert same(await both(tls_pair, tls_first)) == "WRONG_VERSION_NUMBER"


# --- inside TLS ---------------------------------------------------------------------------------


async def test_the_protocol_inside_tls(tls_pair: Pair, certs: Certs) -> None:
    ctx = certs.client_context(with_cert=False)

    async def session(port: int) -> tuple[list[Any], list[Any]]:
        conn, _info = await _tls_raw(port, ctx)
        await conn.send(connect_line(DEFAULT_CONNECT) + b"SUB t 1\r\nPUB t 2\r\nhi\r\nPING\r\n")
        handshake = frames_key(await conn.read_until_pong())
        await conn.send(b"SUB " + b"a" * (MAX_CONTROL_LINE + 100) + b" 2\r\n")
        refused = frames_key(await conn.read_until_idle_or_close(CLOSE_WAIT_S))
        assert conn.closed
        await conn.close()
        return handshake, refused

    handshake, refused = same(await both(tls_pair, session))
    assert ("MSG", "t", "1", "", b"hi") in handshake
    # (the async INFO that follows the first PONG may come first)
    assert refused[-1:] == [("-ERR", b"-ERR 'maximum control line exceeded'")]


async def test_nats_py_over_tls(tls_pair: Pair, certs: Certs) -> None:
    ctx = certs.client_context(with_cert=False)

    async def client(port: int) -> tuple[bytes, str, int]:
        nc = await nats.connect(
            f"nats://127.0.0.1:{port}", tls=ctx, allow_reconnect=False, connect_timeout=5
        )
        try:
            sub = await nc.subscribe("tls.echo")
            await nc.publish("tls.echo", b"over tls")
            msg = await sub.next_msg(timeout=5)
            info = await nc.request("$JS.API.INFO", b"", timeout=5)
            return msg.data, json.loads(info.data)["type"], nc.max_payload
        finally:
            await nc.close()

    data, kind, max_payload = same(await both(tls_pair, client))
    assert (data, kind, max_payload) == (
        b"over tls",
        "io.nats.jetstream.api.v1.account_info_response",
        MAX_PAYLOAD,
    )


@pytest.mark.parametrize("with_cert", [True, False], ids=["client_cert", "no_client_cert"])
async def test_verify_requires_a_client_certificate(
    with_cert: bool, verify_pair: Pair, certs: Certs
) -> None:
    ctx = certs.client_context(with_cert=with_cert)

    async def client(port: int) -> bool:
        try:
            nc = await nats.connect(
                f"nats://127.0.0.1:{port}",
                tls=ctx,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                connect_timeout=5,
            )
        except Exception:  # nats-py surfaces the refused handshake in more than one way
            return False
        try:
            await nc.flush(timeout=5)
            return True
        except Exception:
            return False
        finally:
            await nc.close()

    assert same(await both(verify_pair, client)) is with_cert


# --- limits --------------------------------------------------------------------------------------


async def test_max_connections_is_refused_before_tls(tmp_path: Path, certs: Certs) -> None:
    ctx = certs.client_context(with_cert=False)

    async def the_one_connection(port: int) -> RawConn:
        # the readiness probe's connection may not be released yet: until then this one is
        # the connection too many
        deadline = time.monotonic() + CLOSE_WAIT_S
        while True:
            try:
                held, _ = await _tls_raw(port, ctx)
                await held.send(connect_line(DEFAULT_CONNECT) + b"PING\r\n")
                if any(f.op == "PONG" for f in await held.read_until_pong()):
                    return held
                await held.close()
            except (OSError, TimeoutError):  # ssl.SSLError is an OSError
                pass
            assert time.monotonic() < deadline, "no connection accepted"
            await asyncio.sleep(0.05)

    async def over_the_limit(port: int) -> tuple[list[Any], bool]:
        held = await the_one_connection(port)
        extra = await RawConn.open(port)
        frames = await extra.read_until_idle_or_close(CLOSE_WAIT_S)
        closed = extra.closed
        await extra.close()
        await held.close()
        return [masked_info(f) if f.op == "INFO" else f.key() for f in frames], closed

    with server_pair(tmp_path, lambda _: tls_conf(certs, extra="max_connections: 1")) as pair:
        frames, closed = same(await both(pair, over_the_limit))
    assert closed and frames[0]["tls_required"] is True
    assert frames[1:] == [("-ERR", b"-ERR 'maximum connections exceeded'")]


def test_https_port_serves_varz(tmp_path: Path, certs: Certs) -> None:
    ports = {"oracle": free_port(), "candidate": free_port()}
    ctx = certs.client_context(with_cert=False)  # the monitoring port asks for none

    def varz(port: int) -> dict[str, Any]:
        url = f"https://127.0.0.1:{port}/varz"
        with urllib.request.urlopen(url, context=ctx, timeout=HTTP_TIMEOUT_S) as resp:
            assert resp.status == 200
            body: dict[str, Any] = json.loads(resp.read())
            return body

    conf = lambda side: tls_conf(certs, verify=True, extra=f"https_port: {ports[side]}")  # noqa: E731
    with server_pair(tmp_path, conf):
        seen = {side: varz(port) for side, port in ports.items()}
    for side, body in seen.items():
        assert body["https_port"] == ports[side]
        assert body["tls_required"] is True


# --- handshake_first ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_first_pair(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Pair]:
    conf = tls_conf(certs).replace("tls {", "tls {\n  handshake_first: true", 1)
    with server_pair(tmp_path_factory.mktemp("tls_first"), lambda _: conf) as pair:
        yield pair


@pytest.fixture(scope="module")
def tls_auto_pair(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Pair]:
    conf = tls_conf(certs).replace("tls {", 'tls {\n  handshake_first: "auto"', 1)
    with server_pair(tmp_path_factory.mktemp("tls_auto"), lambda _: conf) as pair:
        yield pair


async def _handshake_first_session(port: int, ctx: ssl.SSLContext) -> tuple[Any, list[Any]]:
    """TLS at once, then the INFO and the protocol inside it."""
    conn = await RawConn.open(port)
    await conn.start_tls(ctx)
    info = masked_info(await conn.read_frame())
    await conn.send(connect_line(DEFAULT_CONNECT) + b"SUB t 1\r\nPUB t 2\r\nhi\r\nPING\r\n")
    frames = frames_key(await conn.read_until_pong())
    await conn.close()
    return info, frames


@pytest.fixture(params=["true", "auto"])
def handshake_first_pair(request: pytest.FixtureRequest) -> Pair:
    """Each of the two handshake_first settings: TLS first only, and "auto" (with a fallback)."""
    name = "tls_first_pair" if request.param == "true" else "tls_auto_pair"
    pair: Pair = request.getfixturevalue(name)
    return pair


async def test_handshake_first_sends_the_info_inside_tls(
    handshake_first_pair: Pair, certs: Certs
) -> None:
    ctx = certs.client_context(with_cert=False)
    pair = handshake_first_pair
    info, frames = same(await both(pair, lambda port: _handshake_first_session(port, ctx)))
    assert info["tls_required"] is True
    assert ("MSG", "t", "1", "", b"hi") in frames


async def test_handshake_first_gives_a_plain_client_nothing_in_the_clear(
    tls_first_pair: Pair,
) -> None:
    async def plain(port: int) -> tuple[Frame | None, bool]:
        conn = await RawConn.open(port)
        first = await conn.read_frame(TLS_TIMEOUT_S + CLOSE_WAIT_S)  # closed at the TLS timeout
        closed = conn.closed
        await conn.close()
        return first, closed

    assert same(await both(tls_first_pair, plain)) == (None, True)


async def test_handshake_first_auto_falls_back_to_the_plain_info(
    tls_auto_pair: Pair, certs: Certs
) -> None:
    """A client that waits for the INFO gets it in the clear after the fallback delay, and
    upgrades after it as usual."""
    ctx = certs.client_context(with_cert=False)

    async def info_first(port: int) -> tuple[Any, list[Any]]:
        conn, info = await _tls_raw(port, ctx)
        await conn.send(connect_line(DEFAULT_CONNECT) + b"PING\r\n")
        frames = frames_key(await conn.read_until_pong())
        await conn.close()
        return masked_info(info), frames

    info, frames = same(await both(tls_auto_pair, info_first))
    assert info["tls_required"] is True and frames[-1:] == [("PONG", b"PONG")]


async def test_nats_py_with_tls_handshake_first(handshake_first_pair: Pair, certs: Certs) -> None:
    ctx = certs.client_context(with_cert=False)
    pair = handshake_first_pair

    async def client(port: int) -> bytes:
        nc = await nats.connect(
            f"nats://127.0.0.1:{port}",
            tls=ctx,
            tls_handshake_first=True,
            allow_reconnect=False,
            connect_timeout=5,
        )
        try:
            sub = await nc.subscribe("tls.first")
            await nc.publish("tls.first", b"handshake first")
            return (await sub.next_msg(timeout=5)).data
        finally:
            await nc.close()

    assert same(await both(pair, client)) == b"handshake first"
