from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from cluster.cli import options_from
from cluster.config_file import ConfigError, parse_config


def test_parses_nats_server_style_config() -> None:
    text = """
    # a comment
    server_name: n1
    port = 4333
    http_port 8333   // trailing comment
    max_payload: 2MB
    jetstream {
      store_dir: "/tmp/js data"
      limits { batch { max_msgs: 500, timeout: "5s" } }
    }
    routes = [
      nats://127.0.0.1:6222
      nats://127.0.0.1:6223
    ]
    debug: true
    """
    conf = parse_config(text)
    assert conf["server_name"] == "n1"
    assert conf["port"] == 4333
    assert conf["http_port"] == 8333
    assert conf["max_payload"] == 2 * 1024 * 1024
    assert conf["jetstream"]["store_dir"] == "/tmp/js data"
    assert conf["jetstream"]["limits"]["batch"] == {"max_msgs": 500, "timeout": "5s"}
    assert conf["routes"] == ["nats://127.0.0.1:6222", "nats://127.0.0.1:6223"]
    assert conf["debug"] is True


@pytest.mark.parametrize("text", ["a { b: 1", "a: [1, 2", 'a: "open'])
def test_unterminated_config_is_an_error_with_a_line(text: str) -> None:
    with pytest.raises(ConfigError, match="Parse error on line 1"):
        parse_config(text)


def _args(**kw: object) -> argparse.Namespace:
    base = dict(config=None, addr=None, port=None, store_dir=None, server_name=None, http_port=None)
    base["jetstream"] = True  # -js: a cluster node must run JetStream
    base.update(kw)
    return argparse.Namespace(**base)


def test_flags_override_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "j.conf"
    conf.write_text("port: 5000\nserver_name: fromfile\njetstream { store_dir: /x }\nhttp: 1\n")
    assert options_from(_args(config=str(conf))).http_port == 1
    opts = options_from(_args(config=str(conf), port=6000))
    assert opts.port == 6000
    assert opts.server_name == "fromfile"
    assert opts.store_dir == Path("/x")
    opts = options_from(_args(config=str(conf), store_dir="/y", server_name="flag"))
    assert (opts.port, opts.server_name, opts.store_dir) == (5000, "flag", Path("/y"))


def test_listen_sets_host_and_port(tmp_path: Path) -> None:
    conf = tmp_path / "j.conf"
    conf.write_text("listen: 127.0.0.2:4555\n")
    opts = options_from(_args(config=str(conf)))
    assert (opts.host, opts.port) == ("127.0.0.2", 4555)


def test_cluster_block_and_flags(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text(
        "server_name: n1\ncluster {\n  name: prod\n  listen: 0.0.0.0:6222\n"
        "  routes: [\n    nats://a:6222\n    nats://b:6222\n  ]\n}\n"
    )
    opts = options_from(_args(config=str(conf)))
    assert opts.clustered
    assert (opts.cluster_name, opts.cluster_host, opts.cluster_port) == ("prod", "0.0.0.0", 6222)
    assert opts.routes == ["nats://a:6222", "nats://b:6222"]
    opts = options_from(
        _args(config=str(conf), cluster="nats://127.0.0.1:7000", routes="nats://x:1,nats://y:2")
    )
    assert (opts.cluster_host, opts.cluster_port) == ("127.0.0.1", 7000)
    assert opts.routes == ["nats://x:1", "nats://y:2"]


def test_cluster_needs_a_name_and_valid_urls(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("server_name: n1\ncluster { listen: 127.0.0.1:6222 }\n")
    with pytest.raises(SystemExit, match="cluster needs a name"):
        options_from(_args(config=str(conf)))
    with pytest.raises(SystemExit, match="invalid cluster URL"):
        options_from(_args(config=str(conf), cluster_name="c", routes="nats://nohost"))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("max_payload: 2147483648\n", "max_payload value is too big"),
        ("max_control_line: 2147483648\n", "max_control_line value is too big"),
        ("max_payload: 2MB\nmax_pending: 1MB\n", r"max_payload \(2097152\) cannot be higher"),
        ("max_payload: 128MB\n", r"cannot be higher than max_pending \(67108864\)"),
        ("max_payload: -1\n", "max_payload must be an integer >= 0"),
    ],
)
def test_protocol_limits_are_refused_as_nats_server_refuses_them(
    tmp_path: Path, text: str, error: str
) -> None:
    conf = tmp_path / "l.conf"
    conf.write_text(text)
    with pytest.raises(SystemExit, match=error):
        options_from(_args(config=str(conf)))


def test_protocol_limits_within_bounds_are_taken(tmp_path: Path) -> None:
    conf = tmp_path / "l.conf"
    conf.write_text("max_payload: 8MB\nmax_pending: 16MB\nmax_control_line: 2147483647\n")
    opts = options_from(_args(config=str(conf)))
    assert (opts.max_payload, opts.max_pending, opts.max_control_line) == (
        8 * 1024 * 1024,
        16 * 1024 * 1024,
        2**31 - 1,
    )
    conf.write_text("max_payload: 0\n")  # nats-server: 0 is the default
    assert options_from(_args(config=str(conf))).max_payload == 1024 * 1024


def test_standalone_without_cluster_block() -> None:
    assert not options_from(_args()).clustered


def test_a_json_file_is_a_config_file() -> None:
    # nats-server reads a file that is one JSON object (nats.py's test harness writes them)
    text = (
        '// written by a tool\n{\n  "port": 4567,\n  "jetstream": {"max_mem": 1024},\n'
        '  "x": [1, 2]\n}\n'
    )
    conf = parse_config(text)
    assert conf == {"port": 4567, "jetstream": {"max_mem": 1024}, "x": [1, 2]}
    assert conf.line_of("x") == 5


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{\n  "port": : "invalid syntax"\n}\n', "Parse error on line 2: unexpected ':'"),
        ("{ port: 1 }\nport: 2\n", "Parse error on line 2: unexpected 'p' after the closing '}'"),
        ('{ "port": 1\n', "missing '}'"),
    ],
)
def test_a_malformed_json_file_is_refused_with_its_line(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        parse_config(text)


def test_a_block_may_open_on_the_line_after_its_key() -> None:
    # nats.py's websocket test configuration is written this way
    conf = parse_config("websocket\n{\n    port: 8080\n    no_tls: true\n}\nport: 4222\n")
    assert conf == {"websocket": {"port": 8080, "no_tls": True}, "port": 4222}
