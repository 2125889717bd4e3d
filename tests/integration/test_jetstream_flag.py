"""JetStream on or off as nats-server decides it: on with ``-js`` or a config ``jetstream`` block
(``jetstream: enabled``/``true``), off otherwise or with ``enabled: false`` / ``jetstream: false``
/ ``disabled``. Off, a server is core NATS only: no ``jetstream`` in its INFO, no responders for
any ``$JS.API`` request, ``/healthz`` ok, ``/jsz`` disabled, the store directory untouched. Each
process check runs on the reference nats-server first, then on jetraft; a cluster node without
JetStream is jetraft's own refusal."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import nats.errors
import nats.js.errors
import pytest

from cluster import cli
from cluster.ops.servers import server_proc
from tests.integration.clients import JETRAFT_KIND, NATS_KIND, SERVER_KINDS, connect
from tests.servers import NATS_SERVER_BIN, ServerProc, free_port, http_get_json, jetraft_command

pytestmark = pytest.mark.integration

REQUEST_TIMEOUT_S = 2.0
JS_API_REQUESTS = (
    ("$JS.API.INFO", b""),
    ("$JS.API.STREAM.CREATE.X", b'{"name":"X","subjects":["x.>"]}'),
    ("$JS.API.STREAM.NAMES", b""),
)
# nats-server 2.15.1's /jsz without JetStream (probed)
DISABLED_JSZ_KEYS = {
    "memory",
    "storage",
    "reserved_memory",
    "reserved_storage",
    "accounts",
    "ha_assets",
    "api",
    "server_id",
    "now",
    "disabled",
    "config",
    "streams",
    "consumers",
    "messages",
    "bytes",
    "total",
}


def _command(kind: str, jetstream: bool) -> list[str]:
    if kind == NATS_KIND:
        return [str(NATS_SERVER_BIN), *(["-js"] if jetstream else [])]
    return [*jetraft_command(), "server", *(["-js"] if jetstream else [])]


def _proc(kind: str, tmp_path: Path, *, jetstream: bool, extra: Sequence[str] = ()) -> ServerProc:
    return server_proc(_command(kind, jetstream), tmp_path, kind, extra)


def _config(tmp_path: Path, text: str) -> list[str]:
    conf = tmp_path / "js.conf"
    conf.write_text(text)
    return ["-c", str(conf)]


async def _assert_no_jetstream(server: ServerProc) -> None:
    nc = await connect(server.url)
    try:
        assert nc._server_info.get("jetstream") is None
        for subject, payload in JS_API_REQUESTS:
            with pytest.raises(nats.errors.NoRespondersError):
                await nc.request(subject, payload, timeout=REQUEST_TIMEOUT_S)
        with pytest.raises(nats.js.errors.NoStreamResponseError):
            await nc.jetstream(timeout=REQUEST_TIMEOUT_S).publish("x.1", b"m")
        # core NATS still works
        sub = await nc.subscribe("core.>")
        await nc.publish("core.1", b"hello")
        msg = await sub.next_msg(timeout=REQUEST_TIMEOUT_S)
        assert (msg.subject, msg.data) == ("core.1", b"hello")
    finally:
        await nc.close()


async def _assert_jetstream(server: ServerProc) -> None:
    nc = await connect(server.url)
    try:
        assert nc._server_info.get("jetstream") is True
        reply = await nc.request("$JS.API.INFO", b"", timeout=REQUEST_TIMEOUT_S)
        assert b"io.nats.jetstream.api.v1.account_info_response" in reply.data
    finally:
        await nc.close()


@pytest.mark.parametrize("kind", SERVER_KINDS)
async def test_without_js_a_server_is_core_nats_only(kind: str, tmp_path: Path) -> None:
    with _proc(kind, tmp_path, jetstream=False) as server:
        server.start()
        await _assert_no_jetstream(server)
        assert http_get_json(server.http_port, "/healthz") == (200, {"status": "ok"})
        status, jsz = http_get_json(server.http_port, "/jsz")
        assert status == 200 and set(jsz) == DISABLED_JSZ_KEYS
        assert jsz["disabled"] is True and jsz["api"]["level"] == 0 and jsz["streams"] == 0
        assert list(server.store_dir.iterdir()) == [], "no JetStream data without JetStream"


@pytest.mark.parametrize("kind", SERVER_KINDS)
@pytest.mark.parametrize(
    ("text", "on"),
    [
        ("jetstream {\n  enabled: false\n}\n", False),
        ("jetstream: disabled\n", False),
        ("jetstream: enabled\n", True),
    ],
    ids=["block-enabled-false", "disabled", "enabled"],
)
async def test_the_config_turns_jetstream_on_or_off(
    kind: str, text: str, on: bool, tmp_path: Path
) -> None:
    with _proc(kind, tmp_path, jetstream=False, extra=_config(tmp_path, text)) as server:
        server.start()
        await (_assert_jetstream(server) if on else _assert_no_jetstream(server))


async def test_with_js_jetraft_answers_the_jetstream_api(tmp_path: Path) -> None:
    with _proc(JETRAFT_KIND, tmp_path, jetstream=True) as server:
        server.start()
        await _assert_jetstream(server)


@pytest.mark.parametrize(
    ("flags", "text", "on"),
    [
        ([], "", False),
        (["-js"], "", True),
        ([], "jetstream {}\n", True),
        ([], "jetstream { store_dir: /x }\n", True),
        ([], "jetstream: true\n", True),
        ([], "jetstream: enable\n", True),
        ([], "jetstream: false\n", False),
        ([], "jetstream: disable\n", False),
        ([], "jetstream { enable: false }\n", False),
        (["-js"], "jetstream: false\n", True),  # the flag wins, as in nats-server
        (["-sd", "/s"], "store_dir: /s\n", False),  # a store directory alone is not JetStream
    ],
)
def test_the_jetstream_setting_of_flags_and_config(
    flags: list[str], text: str, on: bool, tmp_path: Path
) -> None:
    config = _config(tmp_path, text) if text else []
    assert cli.server_options([*flags, *config]).jetstream is on


def _cluster_flags() -> list[str]:
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    return ["-n", "n1", "--cluster_name", "c", "--cluster", url, "--routes", url]


def test_a_core_nats_cluster_node_runs_without_jetstream(tmp_path: Path) -> None:
    flags = _cluster_flags()
    assert not cli.server_options(flags).jetstream and cli.server_options(flags).clustered
    off = cli.server_options([*flags, *_config(tmp_path, "jetstream: false\n")])
    assert off.clustered and not off.jetstream
    assert cli.server_options(["-js", *flags]).jetstream


def test_a_jetstream_cluster_node_needs_a_name_a_core_one_does_not() -> None:
    flags = [f for f in _cluster_flags() if f not in ("-n", "n1")]
    assert cli.server_options(flags).server_name == ""  # the server id stands in
    with pytest.raises(SystemExit, match="a JetStream cluster node needs a server name"):
        cli.server_options(["-js", *flags])
