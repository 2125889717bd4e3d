"""Lame duck mode (SIGUSR2) through nats-py, on both servers: clients that take async INFO hear
``ldm``, no new client gets in, the connected ones are still served through the grace period,
then closed one by one, and the server exits by itself. Also the settings' checks."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from cluster import cli
from tests.integration.clients import JETRAFT_KIND, NATS_KIND, connect
from tests.servers import start_jetraft, start_nats_server

pytestmark = pytest.mark.integration

TOLD_TIMEOUT_S = 5.0
# grace period 1 s, then two clients closed at most a second apart
CLOSED_TIMEOUT_S = 10.0
EXIT_TIMEOUT_S = 10.0
POLL_S = 0.05
CONFIG = 'lame_duck_duration: "30s"\nlame_duck_grace_period: "1s"\n'


async def test_a_lame_duck_tells_serves_closes_and_exits(server_kind: str, tmp_path: Path) -> None:
    conf = tmp_path / "lame_duck.conf"
    conf.write_text(CONFIG)
    starter = {NATS_KIND: start_nats_server, JETRAFT_KIND: start_jetraft}[server_kind]
    proc = starter(tmp_path, extra_args=["-c", str(conf)])
    told = asyncio.Event()
    disconnected = [asyncio.Event(), asyncio.Event()]

    async def lame_duck_mode_cb() -> None:
        told.set()

    def on_disconnect(i: int) -> object:
        async def cb() -> None:
            disconnected[i].set()

        return cb

    try:
        nc = await connect(
            proc.url, lame_duck_mode_cb=lame_duck_mode_cb, disconnected_cb=on_disconnect(0)
        )
        other = await connect(proc.url, disconnected_cb=on_disconnect(1))
        sub = await other.subscribe("ldm.>")
        await other.flush()
        os.kill(proc.pid, signal.SIGUSR2)
        await asyncio.wait_for(told.wait(), TOLD_TIMEOUT_S)

        with pytest.raises(ConnectionRefusedError):  # its listener is closed
            await asyncio.open_connection("127.0.0.1", proc.port)

        # the clients it has are still served until the grace period ends
        await nc.publish("ldm.a", b"still here")
        await nc.flush()
        msg = await sub.next_msg(TOLD_TIMEOUT_S)
        assert msg.data == b"still here"

        await asyncio.wait_for(disconnected[0].wait(), CLOSED_TIMEOUT_S)
        await asyncio.wait_for(disconnected[1].wait(), CLOSED_TIMEOUT_S)
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while proc.running and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
        assert not proc.running, "the lame duck did not exit after closing its clients"
        await nc.close()
        await other.close()
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ('lame_duck_duration: "10s"', "invalid lame_duck_duration of 10s, minimum is 30 seconds"),
        ('lame_duck_duration: "2x"', "error parsing lame_duck_duration"),
        ("lame_duck_duration: 60", "error parsing lame_duck_duration"),
        ('lame_duck_grace_period: "-1s"', "invalid lame_duck_grace_period, needs to be positive"),
        (
            'lame_duck_duration: "30s"\nlame_duck_grace_period: "30s"',
            "lame duck grace period (30s) should be strictly lower than lame duck duration (30s)",
        ),
    ],
)
def test_lame_duck_settings_nats_server_refuses_are_refused(
    tmp_path: Path, config: str, error: str
) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(config + "\n")
    with pytest.raises(SystemExit, match=error.replace("(", r"\(").replace(")", r"\)")):
        cli.server_options(["-c", str(conf)])


def test_lame_duck_settings_are_taken(tmp_path: Path) -> None:
    conf = tmp_path / "ok.conf"
    conf.write_text('lame_duck_duration: "45s"\nlame_duck_grace_period: "500ms"\n')
    settings = cli.server_options(["-c", str(conf)]).lame_duck
    assert (settings.duration_s, settings.grace_period_s) == (45.0, 0.5)
