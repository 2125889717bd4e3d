"""The command line as operators and client test harnesses use it: nats-server's port convention
(``-p -1`` / ``-m -1`` any free port, named in the log; ``-p 0`` the default 4222) and
``jetraft --version``."""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster import cli
from tests.integration.clients import connect
from tests.servers import http_get_json

pytestmark = pytest.mark.integration

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0
LISTENING = re.compile(r"Listening for client connections on [\d.]+:(\d+)")
MONITOR = re.compile(r"Starting http monitor on [\d.]+:(\d+)")


def test_port_conventions() -> None:
    assert cli.server_options(["-p", "-1", "-m", "-1"]).port == 0  # the OS picks
    assert cli.server_options(["-p", "-1", "-m", "-1"]).http_port == -1
    assert cli.server_options(["-p", "0"]).port == 4222
    assert cli.server_options([]).http_port == 0  # no monitor
    with pytest.raises(SystemExit, match="not a port"):
        cli.server_options(["-p", "70000"])


async def test_a_server_on_any_free_port_says_which(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        argv = ["server", "-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-sd", str(tmp_path / "s")]
        proc = subprocess.Popen(
            [sys.executable, "-m", "cluster.cli", *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        ports: tuple[int, int] | None = None
        while ports is None:
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            text = log_path.read_text()
            client, monitor = LISTENING.search(text), MONITOR.search(text)
            if client and monitor:
                ports = int(client.group(1)), int(monitor.group(1))
            else:
                time.sleep(0.05)
        assert all(p > 0 for p in ports)
        nc = await connect(f"nats://127.0.0.1:{ports[0]}")
        await nc.close()
        status, varz = http_get_json(ports[1], "/varz")
        assert status == 200 and varz["port"] == ports[0]
    finally:
        proc.terminate()
        proc.wait(STOP_TIMEOUT_S)


@pytest.mark.parametrize(
    "argv", [["--version"], ["server", "--version"], ["server", "-v"]], ids=" ".join
)
def test_version_names_the_package_and_the_server_it_answers_like(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # `server --version` too: tools that run `nats-server --version` find it there
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"jetraft \d+\.\d+\.\d+ \(answers as nats-server 2\.15\.1, .*\)\n", out)


def test_an_optional_command_missing_its_extra_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `make run` installs only the server: `jetraft chaos` then lacks nats-py
    parser = argparse.ArgumentParser(prog="jetraft")
    sub = parser.add_subparsers(dest="command", required=True)
    cli._unavailable_command(sub, "chaos", ModuleNotFoundError("No module named 'nats'"))
    args, _rest = parser.parse_known_args(["chaos", "--time", "5"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "No module named 'nats'" in err and "make chaos" in err


def test_a_port_in_use_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        argv = ["server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(tmp_path / "s")]
        done = subprocess.run(
            [sys.executable, "-m", "cluster.cli", *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"jetraft: cannot start: error listening on port: 127.0.0.1:{port}, address already in use"
    )


@pytest.mark.parametrize("flag", ["--cluster", "--cluster_listen"])
def test_the_cluster_listen_url_takes_both_nats_server_spellings(flag: str) -> None:
    # nats-py's own test harness starts its servers with --cluster_listen
    url = "nats://127.0.0.1:6299"
    opts = cli.server_options(["-js", "-n", "a", "--cluster_name", "c", flag, url, "--routes", url])
    assert (opts.cluster_host, opts.cluster_port) == ("127.0.0.1", 6299)


def test_a_built_in_command_does_not_load_the_optional_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded: list[str] = []

    def entry_points(group: str) -> list[object]:
        loaded.append(group)
        return []

    monkeypatch.setattr(cli, "entry_points", entry_points)
    for argv in (["server", "--help"], ["log", "--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
    assert loaded == []  # a server starts without importing the chaos runner (~100 ms)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert loaded == [cli.COMMANDS_ENTRY_POINT_GROUP]  # the full help lists every command


def test_a_store_dir_that_is_a_file_is_one_line_with_nats_servers_words(tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("not a directory")
    argv = ["server", "-js", "-a", "127.0.0.1", "-p", "-1", "-sd", str(taken)]
    done = subprocess.run(
        [sys.executable, "-m", "cluster.cli", *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"jetraft: storage directory is not a directory: {str(taken)!r}"
    assert taken.read_text() == "not a directory"
