"""The ``jetraft`` command line: ``jetraft server`` with nats-server's flag spellings.

Flags override the config file (``-c``), as with nats-server.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from cluster import sync_ledger
from cluster.apply_log import DEFAULT_NAME as DEFAULT_APPLY_LOG
from cluster.batching import BatchConfigError, batch_limits_from_config
from cluster.config_file import ConfigError, parse_config
from cluster.local_cluster import add_cluster_parser, run_cluster_command
from cluster.server import Server, ServerOptions
from protocol.timefmt import parse_go_duration


def _server_parser(sub: Any) -> None:
    p = sub.add_parser("server", help="run a jetraft server (JetStream always on)")
    p.add_argument("-p", "--port", type=int, help="client port (default 4222)")
    p.add_argument("-a", "--addr", "--net", dest="addr", help="bind address (default 0.0.0.0)")
    p.add_argument("-sd", "--store_dir", dest="store_dir", help="JetStream storage directory")
    p.add_argument("-n", "--server_name", "--name", dest="server_name", help="server name")
    p.add_argument("-c", "--config", help="configuration file")
    p.add_argument("-m", "--http_port", type=int, help="monitoring HTTP port")
    p.add_argument("-js", "--jetstream", action="store_true", help="accepted; always on")
    p.add_argument("-D", "--debug", action="store_true", help="debug logging")
    p.add_argument("--cluster_name", help="cluster name")
    p.add_argument("--cluster", help="cluster URL to listen on for routes, nats://host:port")
    p.add_argument("--routes", help="comma-separated route URLs (nats://host:port,...)")
    p.add_argument(
        "--apply_log",
        nargs="?",
        const="",
        help="write applied message events as JSON lines to PATH "
        "(default <store_dir>/jetstream/applied.jsonl); cluster mode",
    )


COMMANDS_ENTRY_POINT_GROUP = "jetraft.commands"


def _unavailable_command(sub: Any, name: str, exc: Exception) -> None:
    def explain(_args: argparse.Namespace) -> int:
        print(f"jetraft {name}: unavailable: {exc}", file=sys.stderr)
        return 2

    p = sub.add_parser(name, help=f"(unavailable: {exc})", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=explain)


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
    """nats-server takes an integer (seconds) or a Go duration string."""
    if isinstance(value, int):
        return float(value)
    try:
        return parse_go_duration(str(value)) / 1e9
    except ValueError as exc:
        raise SystemExit(f"jetraft: invalid duration {value!r}: {exc}") from exc


def options_from(args: argparse.Namespace) -> ServerOptions:
    conf: dict[str, Any] = {}
    if args.config:
        try:
            conf = parse_config(Path(args.config).read_text())
        except (OSError, ConfigError) as exc:
            raise SystemExit(f"jetraft: {exc}") from exc
    js = conf.get("jetstream") if isinstance(conf.get("jetstream"), dict) else {}
    assert isinstance(js, dict)
    listen = str(conf.get("listen", ""))
    conf_host = (
        conf.get("host") or conf.get("net") or (listen.rsplit(":", 1)[0] if listen else None)
    )
    conf_port = conf.get("port") or (int(listen.rsplit(":", 1)[1]) if ":" in listen else None)
    opts = ServerOptions(
        host=args.addr or conf_host or "0.0.0.0",
        port=args.port if args.port is not None else int(conf_port or 4222),
        server_name=args.server_name or str(conf.get("server_name", "")),
        store_dir=Path(args.store_dir or js.get("store_dir") or conf.get("store_dir") or "./data"),
        http_port=args.http_port if args.http_port is not None else int(conf.get("http_port", 0)),
    )
    if "max_payload" in conf:
        opts.max_payload = int(conf["max_payload"])
    if "ping_interval" in conf:
        opts.ping_interval_s = _seconds(conf["ping_interval"])
    if "ping_max" in conf:
        opts.ping_max = int(conf["ping_max"])
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


def _split_url(url: str) -> tuple[str, int]:
    """``nats://host:port`` or ``host:port`` → (host, port); SystemExit on anything else."""
    rest = url.split("://", 1)[1] if "://" in url else url
    rest = rest.rsplit("@", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"jetraft: invalid cluster URL {url!r}: expected nats://host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


def _cluster_options(args: argparse.Namespace, conf: dict[str, Any], opts: ServerOptions) -> None:
    block = conf.get("cluster") if isinstance(conf.get("cluster"), dict) else {}
    assert isinstance(block, dict)
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
    if opts.clustered and not opts.cluster_name:
        raise SystemExit("jetraft: a cluster needs a name (--cluster_name or cluster { name })")
    if opts.clustered and not opts.server_name:
        raise SystemExit("jetraft: a cluster node needs a server name (-n or server_name)")


async def _serve(opts: ServerOptions) -> None:
    sync_ledger.install_from_env()
    server = Server(opts)
    await server.start()
    # everything loaded so far (indexes of reopened streams) lives as long as the process: keep
    # the cyclic collector from rescanning it, and let it run less often on the publish path
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    print(f"jetraft: client URL nats://{opts.host}:{server.port}", flush=True)
    await server.serve_until_stopped()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jetraft")
    sub = parser.add_subparsers(dest="command", required=True)
    _server_parser(sub)
    add_cluster_parser(sub)
    _log_parser(sub)
    # commands of the layers above cluster/ (`jetraft chaos`, `jetraft analyze`) register through
    # entry points, so this module never imports them
    for ep in entry_points(group=COMMANDS_ENTRY_POINT_GROUP):
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken optional command must not take `jetraft` down
            _unavailable_command(sub, ep.name, exc)
    args = parser.parse_args(argv)
    if args.command == "cluster":
        return run_cluster_command(args)
    if args.command == "log":
        return _log_export(args)
    func = getattr(args, "func", None)
    if func is not None:
        return int(func(args))
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="[%(process)d] %(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command == "server":
        opts = options_from(args)
        try:
            import uvloop

            uvloop.run(_serve(opts))
        except ImportError:  # pragma: no cover - uvloop is a pinned dependency
            asyncio.run(_serve(opts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
