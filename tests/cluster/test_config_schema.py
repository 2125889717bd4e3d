"""Every configuration key is either acted on or refused at start, naming the key and its line."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.cli import options_from
from cluster.config_file import ConfigError, parse_config
from cluster.config_schema import check_config
from cluster.security_config import client_auth_from
from protocol.auth_config import ResponsePermission, SubjectPermission

START_TIMEOUT_S = 60


def _args(**kw: object) -> argparse.Namespace:
    base = dict(config=None, addr=None, port=None, store_dir=None, server_name=None, http_port=None)
    base["jetstream"] = True  # -js: a cluster node must run JetStream
    base.update(kw)
    return argparse.Namespace(**base)


def _options(tmp_path: Path, text: str) -> object:
    conf = tmp_path / "s.conf"
    conf.write_text(text)
    return options_from(_args(config=str(conf)))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "port: 1\nauthorisation { user: a, password: b }\n",
            "line 2: unknown field 'authorisation'",
        ),
        ("cluster {\n  name: c\n  authorisation { user: a }\n}\n", "line 3: unknown field"),
        ("authorization {\n  user: a\n  pasword: b\n}\n", "line 3: unknown field"),
        ("jetstream {\n  max_memory_store: 1GB\n}\n", "line 2: unknown field"),
        ("accounts {\n  A { users: [] }\n}\n", "line 1: 'accounts' is not supported"),
        ("operator: /x.jwt\n", "'operator' is not supported"),
        ("leafnodes { port: 7422 }\n", "'leafnodes' is not supported"),
        (
            "authorization { users: [ { user: a, account: B } ] }\n",
            "users\\[0\\].account' is not supported",
        ),
        ("tls {\n  cert_file: a\n  cipher_suites: [x]\n}\n", "line 3: unknown field"),
    ],
)
def test_unknown_and_unsupported_keys_are_refused_with_their_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_config(parse_config(text))


def test_keys_compare_case_insensitively_like_nats_server() -> None:
    check_config(parse_config("Server_Name: n1\nJetStream { Store_Dir: /x }\nMax_Pending: 1MB\n"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("jetstream: maybe\n", "expected 'enabled' or 'disabled'"),
        ("jetstream: 1\n", "expected a block, true/false or enabled/disabled"),
        ("jetstream {\n  enabled: yes please\n}\n", "line 2: jetstream enabled must be true"),
        ("max_connections: lots\n", "max_connections must be an integer"),
        ("no_auth_user: bob\n", "no_auth_user needs an authorization block"),
        (
            "no_auth_user: bob\nauthorization { users: [ { user: al, password: x } ] }\n",
            "'bob' is not a configured user",
        ),
        ("authorization { timeout: 2 }\n", "sets no user, users or token"),
        ("authorization { user: a, token: t }\n", "either user/password or token"),
        ("authorization { users: [ { nkey: ABC } ] }\n", "not a user nkey"),
        ("tls { cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem }\n", "no such file"),
        ("https_port: 8443\n", "https_port needs TLS"),
        ("cluster { name: c, authorization { timeout: 1 } }\n", "needs user/password or token"),
        ("write_deadline: 0s\n", "write_deadline must be positive"),
        ("write_deadline: soon\n", "invalid duration"),
    ],
)
def test_settings_that_cannot_work_stop_the_server(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        _options(tmp_path, text)


def test_authorization_block_parses_fully(tmp_path: Path) -> None:
    """Checked key by key, so a config written for nats-server fails precisely."""
    conf = parse_config(
        """
        authorization {
          timeout: "3s"
          default_permissions { publish: "pub.>", subscribe { deny: ["secret.>"] } }
          users: [
            { user: alice,
              password: "$2a$11$abcdefghijklmnopqrstuu6i0Jq8lhN0V9lO0Yb1C0jK9Zb8XyZ1q" }
            { user: bob, password: pw, permissions { publish { allow: ["a", "b.*"], deny: "b.x" }
                                                     allow_responses { max: 3, expires: "5s" } } }
          ]
        }
        no_auth_user: bob
        """
    )
    check_config(conf)
    auth = client_auth_from(conf)
    assert auth.enabled and auth.timeout_s == 3.0 and auth.no_auth_user == "bob"
    alice, bob = auth.users
    assert alice.password.startswith("$2a$") and alice.permissions is None
    assert auth.default_permissions is not None and bob.permissions is not None
    assert auth.default_permissions.publish == SubjectPermission(allow=("pub.>",))
    assert auth.default_permissions.subscribe == SubjectPermission(deny=("secret.>",))
    assert bob.permissions.publish == SubjectPermission(allow=("a", "b.*"), deny=("b.x",))
    assert bob.permissions.allow_responses == ResponsePermission(max_msgs=3, expires_s=5.0)


def test_limit_and_route_blocks_become_options(tmp_path: Path) -> None:
    opts = _options(
        tmp_path,
        """
        max_connections: 10
        max_pending: 1MB
        max_control_line: 512
        cluster {
          name: c
          listen: 127.0.0.1:6222
          authorization { user: route, password: secret, timeout: 0.5 }
        }
        server_name: n1
        """,
    )
    assert (opts.max_connections, opts.max_pending, opts.max_control_line) == (  # type: ignore[attr-defined]
        10,
        1024 * 1024,
        512,
    )
    route = opts.route_auth  # type: ignore[attr-defined]
    assert (route.user, route.password, route.timeout_s) == ("route", "secret", 0.5)


def test_cluster_flag_with_user_info_sets_route_credentials() -> None:
    opts = options_from(
        _args(server_name="n1", cluster_name="c", cluster="nats://ru:rp@127.0.0.1:7000")
    )
    assert (opts.route_auth.user, opts.route_auth.password) == ("ru", "rp")
    assert (opts.cluster_host, opts.cluster_port) == ("127.0.0.1", 7000)


def test_client_auth_flags() -> None:
    opts = options_from(_args(user="u", password="p"))
    assert [(u.user, u.password) for u in opts.client_auth.users] == [("u", "p")]
    assert options_from(_args(auth="tok")).client_auth.token == "tok"
    with pytest.raises(SystemExit, match="--pass needs --user"):
        options_from(_args(password="p"))


def test_a_misspelled_block_stops_the_real_server_process(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("port: -1\nauthorisation {\n  user: a\n  password: b\n}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "server", "-c", str(conf), "-sd", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode != 0
    assert "config line 2: unknown field 'authorisation'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("password", ["a/b+c=", "x?y", "p#q", "s3cret"])
def test_route_passwords_with_url_characters_keep_authorization_on(password: str) -> None:
    opts = options_from(
        _args(server_name="n1", cluster_name="c", cluster=f"nats://ru:{password}@127.0.0.1:7000")
    )
    assert (opts.route_auth.user, opts.route_auth.password) == ("ru", password)
    assert (opts.cluster_host, opts.cluster_port) == ("127.0.0.1", 7000)
