"""The ``jetraft`` command line: ``jetraft server`` with nats-server's flag spellings.

Flags override the config file (``-c``), as with nats-server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, entry_points
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any, NoReturn

from cluster import sync_ledger
from cluster.apply_log import DEFAULT_NAME as DEFAULT_APPLY_LOG
from cluster.batching import BatchConfigError, batch_limits_from_config
from cluster.client_urls import ClientAdvertiseError, parse_advertise
from cluster.config_file import ConfigError, ConfMap, parse_config
from cluster.config_schema import check_config
from cluster.lame_duck import (
    LAME_DUCK_DURATION_S,
    LAME_DUCK_GRACE_PERIOD_S,
    LameDuckConfigError,
    LameDuckSettings,
)
from cluster.ops.local_cluster import add_cluster_parser, run_cluster_command
from cluster.security_config import (
    TLSConfig,
    client_auth_from,
    route_auth_from,
    seconds,
    tls_from,
)
from cluster.server import Server, ServerOptions
from cluster.websocket import WS_DEFAULT_HOST, websocket_from
from protocol.auth_config import ClientAuthConfig, UserEntry
from protocol.stream_config import SERVER_API_LEVEL, SERVER_VERSION
from protocol.timefmt import NS_PER_S, parse_go_duration


class _VersionAction(argparse.Action):
    """``jetraft server --version``, as tools that run ``nats-server --version`` expect; the
    text is computed only when asked (reading the package metadata costs a server's start)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kw: Any) -> None:
        print(version_text())  # on stdout, as nats-server prints its own
        parser.exit()


def _server_parser(sub: Any) -> None:
    p = sub.add_parser(
        "server", help="run a jetraft server (JetStream with -js or a config jetstream block)"
    )
    p.add_argument(
        "-v", "--version", action=_VersionAction, help="show the version and exit (nats-server -v)"
    )
    p.add_argument("-p", "--port", type=int, help="client port (default 4222)")
    p.add_argument("-a", "--addr", "--net", dest="addr", help="bind address (default 0.0.0.0)")
    p.add_argument("-sd", "--store_dir", dest="store_dir", help="JetStream storage directory")
    p.add_argument("-n", "--server_name", "--name", dest="server_name", help="server name")
    p.add_argument("-c", "--config", help="configuration file")
    p.add_argument("-m", "--http_port", type=int, help="monitoring HTTP port")
    p.add_argument(
        "-js",
        "--jetstream",
        action="store_true",
        help="enable JetStream (off unless this flag or a config jetstream block; a cluster node "
        "needs it)",
    )
    p.add_argument("-D", "--debug", action="store_true", help="debug logging")
    p.add_argument("-P", "--pid", dest="pid_file", help="write the process id to this file")
    p.add_argument("--user", help="user required for client connections")
    p.add_argument("--pass", dest="password", help="password required for client connections")
    p.add_argument("--auth", help="authorization token required for client connections")
    p.add_argument("--tls", action="store_true", help="enable TLS for clients (needs cert/key)")
    p.add_argument("--tlscert", help="server certificate file")
    p.add_argument("--tlskey", help="private key for the server certificate")
    p.add_argument("--tlscacert", help="client certificate CA for verification")
    p.add_argument("--tlsverify", action="store_true", help="require and verify client certs")
    p.add_argument("-ms", "--https_port", type=int, help="monitoring HTTPS port (needs TLS)")
    p.add_argument("--cluster_name", help="cluster name")
    p.add_argument(
        "--cluster",
        "--cluster_listen",
        dest="cluster",
        help="cluster URL to listen on for routes, nats://host:port",
    )
    p.add_argument("--routes", help="comma-separated route URLs (nats://host:port,...)")
    p.add_argument(
        "--client_advertise",
        help="host[:port] cluster peers tell their clients for this node (INFO connect_urls)",
    )
    p.add_argument(
        "--no_advertise",
        action="store_true",
        help="tell clients no cluster URLs (INFO without connect_urls)",
    )
    p.add_argument(
        "--apply_log",
        nargs="?",
        const="",
        help="write applied message events as JSON lines to PATH "
        "(default <store_dir>/jetstream/applied.jsonl); cluster mode",
    )


COMMANDS_ENTRY_POINT_GROUP = "jetraft.commands"
BUILTIN_COMMANDS = frozenset({"server", "cluster", "log"})


# the Makefile target that installs what an optional command needs (its pip extra)
COMMAND_INSTALL_TARGETS = {"chaos": "chaos", "analyze": "analysis"}


def _unavailable_command(sub: Any, name: str, exc: Exception) -> None:
    why = str(exc)
    if isinstance(exc, ImportError) and name in COMMAND_INSTALL_TARGETS:
        extra = COMMAND_INSTALL_TARGETS[name]
        why += f"; install it with `make {extra}` (pip install 'jetraft[{extra}]')"

    def explain(_args: argparse.Namespace) -> int:
        print(f"jetraft {name}: unavailable: {why}", file=sys.stderr)
        return 2

    p = sub.add_parser(name, help=f"(unavailable: {why})", add_help=False)
    p.set_defaults(func=explain, unavailable=True)  # whatever arguments follow: main takes them


def _log_parser(sub: Any) -> None:
    p = sub.add_parser("log", help="the applied-entry log of a node (see --apply_log)")
    logsub = p.add_subparsers(dest="log_command", required=True)
    exp = logsub.add_parser("export", help="export a node's applied-entry log as JSON lines")
    exp.add_argument("--store_dir", "-sd", required=True, help="the node's store directory")
    exp.add_argument("--apply_log", help="the log file if not in its default place")
    exp.add_argument("--stream", help="only this stream's rows")
    exp.add_argument("--out", required=True, help="output file, or - for stdout")


def _log_export(args: argparse.Namespace) -> int:
    """Copy a node's applied-entry log, checking every row, optionally for one stream."""
    source = (
        Path(args.apply_log)
        if args.apply_log
        else Path(args.store_dir) / "jetstream" / DEFAULT_APPLY_LOG
    )
    if not source.is_file():
        print(
            f"jetraft: no applied-entry log at {source} (was the node run with --apply_log?)",
            file=sys.stderr,
        )
        return 1
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    rows = 0
    try:
        with open(source, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    if not line.endswith("\n"):
                        break  # the last row, cut short by a kill: not a row
                    print(f"jetraft: {source}:{number}: not a JSON row", file=sys.stderr)
                    return 1
                if args.stream and row.get("stream") != args.stream:
                    continue
                out.write(json.dumps(row, separators=(",", ":")) + "\n")
                rows += 1
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"jetraft: exported {rows} rows from {source}", file=sys.stderr)
    return 0


GC_THRESHOLDS = (50_000, 20, 20)  # CPython defaults (700, 10, 10) collect ~70x as often


def _seconds(value: object) -> float:
    try:
        return seconds(value)
    except ConfigError as exc:
        raise SystemExit(f"jetraft: {exc}") from exc


def _read_config(path: str | None) -> ConfMap:
    if not path:
        return ConfMap()
    try:
        conf = parse_config(Path(path).read_text())
        check_config(conf)
    except (OSError, ConfigError) as exc:
        raise SystemExit(f"jetraft: {path}: {exc}") from exc
    return conf


# nats-server keeps max_payload and max_control_line in 32-bit integers and refuses larger ones
PROTOCOL_LIMIT_MAX = 2**31 - 1


def _int_option(
    conf: ConfMap, key: str, minimum: int = 0, maximum: int | None = None
) -> int | None:
    if key not in conf:
        return None
    value = conf[key]
    if type(value) is not int or value < minimum:
        raise SystemExit(
            f"jetraft: config line {conf.line_of(key)}: {key} must be an integer >= {minimum}, "
            f"not {value!r}"
        )
    if maximum is not None and value > maximum:
        raise SystemExit(f"jetraft: config line {conf.line_of(key)}: {key} value is too big")
    return value


def _bool_option(conf: ConfMap, key: str) -> bool | None:
    if key not in conf:
        return None
    value = conf[key]
    if not isinstance(value, bool):
        raise SystemExit(f"jetraft: config line {conf.line_of(key)}: {key} must be true or false")
    return value


def _jetstream_config(conf: ConfMap) -> tuple[bool, ConfMap]:
    """Whether the config turns JetStream on, and its ``jetstream { }`` block (empty if none).

    nats-server's forms (``parseJetStream``): a block (on unless ``enabled: false``), ``true`` or
    ``false``, ``enabled``/``enable`` or ``disabled``/``disable``; no ``jetstream`` key is off."""
    if "jetstream" not in conf:
        return False, ConfMap()
    js = conf["jetstream"]
    line = conf.line_of("jetstream")
    if isinstance(js, bool):
        return js, ConfMap()
    if isinstance(js, str):
        word = js.lower()
        if word in ("enabled", "enable", "disabled", "disable"):
            return word.startswith("enable"), ConfMap()
        raise SystemExit(
            f"jetraft: config line {line}: jetstream: expected 'enabled' or 'disabled' for "
            f"string value, got {js!r}"
        )
    if isinstance(js, ConfMap):
        enabled = True
        for key in ("enabled", "enable"):
            if key in js:
                enabled = js[key]
                if not isinstance(enabled, bool):
                    raise SystemExit(
                        f"jetraft: config line {js.line_of(key)}: jetstream {key} must be true "
                        "or false"
                    )
        return enabled, js
    raise SystemExit(
        f"jetraft: config line {line}: jetstream: expected a block, true/false or "
        f"enabled/disabled, not {js!r}"
    )


DEFAULT_CLIENT_PORT = 4222
RANDOM_PORT = -1  # nats-server's "any free port" (client test harnesses start servers so)
EPHEMERAL_PORT = 0  # what the OS is asked for to get any free port


def _listen_port(port: int, default: int, what: str) -> int:
    """nats-server's port convention: 0 means the default (the client port's 4222; no monitor),
    -1 any free port (the log then says which)."""
    if port == RANDOM_PORT:
        return EPHEMERAL_PORT if default else RANDOM_PORT
    if port == 0:
        return default
    if not 0 < port < 65536:
        raise SystemExit(f"jetraft: {what} {port} is not a port (1-65535, 0 or -1)")
    return port


def options_from(args: argparse.Namespace) -> ServerOptions:
    conf = _read_config(args.config)
    js_enabled, js = _jetstream_config(conf)
    listen = str(conf.get("listen", ""))
    conf_host = (
        conf.get("host") or conf.get("net") or (listen.rsplit(":", 1)[0] if listen else None)
    )
    conf_port = conf.get("port") or (int(listen.rsplit(":", 1)[1]) if ":" in listen else None)
    http_port = _int_option(conf, "http_port")
    if http_port is None:
        http_port = _int_option(conf, "monitor_port")
    http_host = ""
    if "http" in conf:  # nats-server's `http: [host:]port`
        http_host, _, http_port_text = str(conf["http"]).rpartition(":")
        if not http_port_text.isdigit():
            raise SystemExit(
                f"jetraft: config line {conf.line_of('http')}: http must be [host:]port"
            )
        http_port = int(http_port_text)
    port = args.port if args.port is not None else int(conf_port or 0)
    if args.http_port is not None:
        http_port = args.http_port
    opts = ServerOptions(
        host=args.addr or conf_host or "0.0.0.0",
        port=_listen_port(port, DEFAULT_CLIENT_PORT, "port"),
        server_name=args.server_name or str(conf.get("server_name", "")),
        store_dir=Path(
            args.store_dir
            or js.get("store_dir")
            or js.get("storedir")
            or conf.get("store_dir")
            or "./data"
        ),
        http_port=_listen_port(int(http_port or 0), 0, "http_port"),
        http_host=http_host,
        # nats-server: -js turns it on whatever the config says; without it, the config decides
        jetstream=bool(getattr(args, "jetstream", False)) or js_enabled,
    )
    max_payload = _int_option(conf, "max_payload", 0, PROTOCOL_LIMIT_MAX)
    if max_payload:  # 0: the default, as in nats-server
        opts.max_payload = max_payload
    if "ping_interval" in conf:
        opts.ping_interval_s = _seconds(conf["ping_interval"])
    if "ping_max" in conf:
        opts.ping_max = int(conf["ping_max"])
    _limit_options(conf, opts)
    _lame_duck_options(conf, opts)
    _logging_options(args, conf, opts)
    _security_options(args, conf, opts)
    _cluster_options(args, conf, opts)
    apply_log = getattr(args, "apply_log", None)
    if apply_log is not None:
        opts.apply_log = (
            Path(apply_log) if apply_log else opts.store_dir / "jetstream" / DEFAULT_APPLY_LOG
        )
    try:
        batch_limits = batch_limits_from_config(conf)
    except BatchConfigError as exc:
        raise SystemExit(f"jetraft: {args.config}: {exc}") from exc
    if batch_limits is not None:
        opts.batch_limits = batch_limits
    return opts


def server_options(argv: list[str]) -> ServerOptions:
    """What ``jetraft server <argv>`` would run with, through the real parser and config file
    reading, without starting anything: for checking command lines written elsewhere (the
    deployment files, the local cluster's node commands). Bad flags exit as ``jetraft`` does."""
    parser = argparse.ArgumentParser(prog="jetraft")
    _server_parser(parser.add_subparsers(dest="command", required=True))
    return options_from(parser.parse_args(["server", *argv]))


def _limit_options(conf: ConfMap, opts: ServerOptions) -> None:
    for key in ("max_connections", "max_conn"):
        value = _int_option(conf, key)
        if value is not None:
            opts.max_connections = value
    value = _int_option(conf, "max_pending", 1)
    if value is not None:
        opts.max_pending = value
    value = _int_option(conf, "max_control_line", 1, PROTOCOL_LIMIT_MAX)
    if value is not None:
        opts.max_control_line = value
    if opts.max_payload > opts.max_pending:
        raise SystemExit(
            f"jetraft: max_payload ({opts.max_payload}) cannot be higher than max_pending "
            f"({opts.max_pending})"
        )
    if "write_deadline" in conf:
        deadline = _seconds(conf["write_deadline"])
        if deadline <= 0:
            raise SystemExit(
                f"jetraft: config line {conf.line_of('write_deadline')}: write_deadline must be "
                "positive"
            )
        opts.write_deadline_s = deadline


def _lame_duck_options(conf: ConfMap, opts: ServerOptions) -> None:
    """``lame_duck_duration`` and ``lame_duck_grace_period``: Go duration strings, checked as
    nats-server checks them."""
    values = {}
    for key in ("lame_duck_duration", "lame_duck_grace_period"):
        if key not in conf:
            continue
        value = conf[key]
        try:
            if not isinstance(value, str):
                raise ValueError(f'expected a duration string such as "2m", got {value!r}')
            values[key] = parse_go_duration(value) / NS_PER_S
        except ValueError as exc:
            raise SystemExit(
                f"jetraft: config line {conf.line_of(key)}: error parsing {key}: {exc}"
            ) from None
    if not values:
        return
    try:
        opts.lame_duck = LameDuckSettings(
            values.get("lame_duck_duration", LAME_DUCK_DURATION_S),
            # 0 is the default, as nats-server's setBaselineOptions reads it
            values.get("lame_duck_grace_period") or LAME_DUCK_GRACE_PERIOD_S,
        )
    except LameDuckConfigError as exc:
        raise SystemExit(f"jetraft: {exc}") from None


def _logging_options(args: argparse.Namespace, conf: ConfMap, opts: ServerOptions) -> None:
    # trace is more than debug in nats-server; jetraft's most detailed level is debug
    opts.debug = bool(
        getattr(args, "debug", False) or _bool_option(conf, "debug") or _bool_option(conf, "trace")
    )
    logtime = _bool_option(conf, "logtime")
    if logtime is not None:
        opts.logtime = logtime
    pid_file = getattr(args, "pid_file", None) or conf.get("pid_file")
    if pid_file:
        opts.pid_file = Path(str(pid_file))


def _security_options(args: argparse.Namespace, conf: ConfMap, opts: ServerOptions) -> None:
    try:
        opts.client_auth = client_auth_from(conf)
        tls_block = conf.get("tls")
        if tls_block is not None:
            opts.tls = tls_from(tls_block, conf)
        ws_block = conf.get("websocket", conf.get("ws"))
        if ws_block is not None:
            opts.websocket = websocket_from(ws_block, WS_DEFAULT_HOST)
    except ConfigError as exc:
        raise SystemExit(f"jetraft: {args.config}: {exc}") from exc
    user, password, token = (
        getattr(args, "user", None),
        getattr(args, "password", None),
        getattr(args, "auth", None),
    )
    if user or password or token:
        if token and user:
            raise SystemExit("jetraft: --auth cannot be combined with --user/--pass")
        if password and not user:
            raise SystemExit("jetraft: --pass needs --user")
        # flags replace the config file's authorization, as nats-server's do
        opts.client_auth = ClientAuthConfig(
            users=(UserEntry(user=user, password=password or ""),) if user else (),
            token=token or "",
            timeout_s=opts.client_auth.timeout_s,
        )
    cert, key, ca = (
        getattr(args, "tlscert", None),
        getattr(args, "tlskey", None),
        getattr(args, "tlscacert", None),
    )
    if getattr(args, "tls", False) or cert or key or getattr(args, "tlsverify", False):
        if not cert or not key:
            raise SystemExit("jetraft: TLS needs --tlscert and --tlskey")
        for path in (cert, key, ca):
            if path and not Path(path).is_file():
                raise SystemExit(f"jetraft: TLS: no such file {path!r}")
        verify = bool(getattr(args, "tlsverify", False))
        if verify and not ca:
            raise SystemExit("jetraft: --tlsverify needs --tlscacert")
        opts.tls = TLSConfig(
            cert_file=Path(cert),
            key_file=Path(key),
            ca_file=Path(ca) if ca else None,
            verify=verify,
        )
    https_port = getattr(args, "https_port", None)
    if https_port is None:
        https_port = _int_option(conf, "https_port")
    if https_port:
        if opts.tls is None:
            raise SystemExit("jetraft: https_port needs TLS (a tls block or --tlscert/--tlskey)")
        if opts.http_port:  # nats-server refuses this combination too
            raise SystemExit(
                f"jetraft: can't specify both HTTP ({opts.http_port}) and HTTPs ({https_port}) "
                "ports"
            )
        opts.https_port = https_port


def _split_url(url: str) -> tuple[str, int]:
    """``nats://host:port`` or ``host:port`` → (host, port); SystemExit on anything else."""
    rest = url.split("://", 1)[1] if "://" in url else url
    rest = rest.rsplit("@", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"jetraft: invalid cluster URL {url!r}: expected nats://host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


def _cluster_options(args: argparse.Namespace, conf: ConfMap, opts: ServerOptions) -> None:
    block = conf.get("cluster") if isinstance(conf.get("cluster"), ConfMap) else ConfMap()
    assert isinstance(block, ConfMap)
    flag_cluster = getattr(args, "cluster", None)
    flag_routes = getattr(args, "routes", None)
    flag_name = getattr(args, "cluster_name", None)
    listen = flag_cluster or block.get("listen")
    if listen is None and ("host" in block or "port" in block):
        listen = f"{block.get('host', '0.0.0.0')}:{block.get('port', 6222)}"
    if listen is not None:
        opts.cluster_host, opts.cluster_port = _split_url(str(listen))
    opts.cluster_name = flag_name or str(block.get("name", ""))
    routes: list[str] = []
    if flag_routes:
        routes = [r.strip() for r in flag_routes.split(",") if r.strip()]
    elif isinstance(block.get("routes"), list):
        routes = [str(r) for r in block["routes"]]
    for route in routes:
        _split_url(route)
    opts.routes = routes
    opts.no_advertise = bool(getattr(args, "no_advertise", False)) or bool(
        _bool_option(block, "no_advertise")
    )
    advertise = getattr(args, "client_advertise", None) or conf.get("client_advertise")
    if advertise:
        try:
            parse_advertise(str(advertise), max(opts.port, 1))
        except ClientAdvertiseError as exc:
            raise SystemExit(f"jetraft: {exc}") from None
        opts.client_advertise = str(advertise)
    if opts.clustered and not opts.cluster_name:
        raise SystemExit("jetraft: a cluster needs a name (--cluster_name or cluster { name })")
    if opts.clustered and opts.jetstream and not opts.server_name:
        # its Raft identity, which must survive a restart (a core NATS node takes its random id)
        raise SystemExit(
            "jetraft: a JetStream cluster node needs a server name (-n or server_name)"
        )
    try:
        opts.route_auth = route_auth_from(
            block if "authorization" in block else None,
            str(listen) if listen is not None else None,
        )
        if "tls" in block:
            opts.route_tls = tls_from(block["tls"], block)
    except ConfigError as exc:
        raise SystemExit(f"jetraft: {args.config}: {exc}") from exc


async def _serve(opts: ServerOptions) -> None:
    sync_ledger.install_from_env()
    server = Server(opts)
    try:
        await server.start()
    except OSError as exc:  # a port in use or not ours to bind: one line, not a traceback
        with contextlib.suppress(Exception):
            await server.shutdown()  # close what did start (stores, routes) cleanly
        raise SystemExit(f"jetraft: cannot start: {exc.strerror or exc}") from None
    # everything loaded so far (indexes of reopened streams) lives as long as the process: keep
    # the cyclic collector from rescanning it, and let it run less often on the publish path
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    print(f"jetraft: client URL nats://{opts.host}:{server.port}", flush=True)
    await server.serve_until_stopped()
    _exit_served()


def version_text() -> str:
    """``jetraft --version``: the package's version and the nats-server it answers like."""
    try:
        mine = package_version("jetraft")
    except PackageNotFoundError:
        mine = "unknown (not installed)"
    like = f"answers as nats-server {SERVER_VERSION}, JetStream API level {SERVER_API_LEVEL}"
    return f"jetraft {mine} ({like})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jetraft")
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True)
    _server_parser(sub)
    add_cluster_parser(sub)
    _log_parser(sub)
    # commands of the layers above cluster/ (`jetraft chaos`, `jetraft analyze`) register through
    # entry points, so this module never imports them; a built-in command skips loading them
    # (about 100 ms of a server's start)
    words = sys.argv[1:] if argv is None else argv
    builtin = bool(words) and words[0] in BUILTIN_COMMANDS
    for ep in () if builtin else entry_points(group=COMMANDS_ENTRY_POINT_GROUP):
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken optional command must not take `jetraft` down
            _unavailable_command(sub, ep.name, exc)
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "unavailable", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "cluster":
        return run_cluster_command(args)
    if args.command == "log":
        return _log_export(args)
    func = getattr(args, "func", None)
    if func is not None:
        return int(func(args))
    if args.command == "server":
        opts = options_from(args)
        stamp = " %(asctime)s" if opts.logtime else ""
        logging.basicConfig(
            level=logging.DEBUG if opts.debug else logging.INFO,
            format=f"[%(process)d]{stamp} %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        try:
            import uvloop

            uvloop.run(_serve(opts))
        except ImportError:  # pragma: no cover - uvloop is a pinned dependency
            asyncio.run(_serve(opts))
    return 0


def _exit_served() -> NoReturn:
    """End a server that shut down cleanly, from inside its loop, without the loop's and the
    interpreter's teardown.

    By now the stores are closed and synced, and the clients' connections, closed last, have
    handed their last bytes to the kernel (``Server.shutdown`` waits for that, at most a
    second), which sends them and closes the sockets as the process ends. The loop's teardown
    (joining its
    executor's idle threads) and the interpreter's (freeing every module) took another 10-15 ms,
    more on a busy machine, and a client that reconnects elsewhere at once (nats.py's cluster
    tests do) could still find this process alive; nats-server exits right after it closes its
    clients."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
