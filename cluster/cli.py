"""The ``jetraft`` command line: ``jetraft server`` with nats-server's flag spellings.

Flags override the config file (``-c``), as with nats-server.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from pathlib import Path
from typing import Any

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
    args = parser.parse_args(argv)
    if args.command == "cluster":
        return run_cluster_command(args)
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
