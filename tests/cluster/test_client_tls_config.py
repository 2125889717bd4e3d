"""Client TLS, https_port and write_deadline become options the server acts on (they were refused
at start until built), a certificate that cannot be loaded stops the server before it starts
anything, and http_port next to https_port is refused, as by nats-server."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import trustme

from cluster.cli import options_from
from cluster.server import Server, ServerOptions

PEMS = ("ca.pem", "s.pem", "s.key")


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = dict(
        config=None, addr=None, port=None, store_dir=None, server_name=None, http_port=None
    )
    base.update(kw)
    return argparse.Namespace(**base)


def _certs(where: Path) -> tuple[Path, Path, Path]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca_pem, cert_pem, key_pem = (where / name for name in PEMS)
    ca.cert_pem.write_to_path(ca_pem)
    cert.cert_chain_pems[0].write_to_path(cert_pem)
    cert.private_key_pem.write_to_path(key_pem)
    return ca_pem, cert_pem, key_pem


def _options(tmp_path: Path, text: str, **flags: object) -> ServerOptions:
    conf = tmp_path / "s.conf"
    conf.write_text(text)
    return options_from(_args(config=str(conf), **flags))


def test_tls_https_port_and_write_deadline_become_options(tmp_path: Path) -> None:
    ca, cert, key = _certs(tmp_path)
    opts = _options(
        tmp_path,
        f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{ca}", verify: true, '
        'timeout: "500ms" }\nhttps_port: 8443\nwrite_deadline: "1.5s"\n',
    )
    assert opts.tls is not None
    assert (opts.tls.cert_file, opts.tls.key_file, opts.tls.ca_file) == (cert, key, ca)
    assert opts.tls.verify and opts.tls.timeout_s == 0.5
    assert opts.https_port == 8443 and opts.write_deadline_s == 1.5


def test_tls_flags_become_options(tmp_path: Path) -> None:
    ca, cert, key = _certs(tmp_path)
    opts = options_from(
        _args(tls=True, tlscert=str(cert), tlskey=str(key), tlscacert=str(ca), tlsverify=True)
    )
    assert opts.tls is not None and opts.tls.verify and opts.tls.ca_file == ca


def test_http_port_next_to_https_port_is_refused(tmp_path: Path) -> None:
    _ca, cert, key = _certs(tmp_path)
    text = f'tls {{ cert_file: "{cert}", key_file: "{key}" }}\nhttps_port: 8443\n'
    with pytest.raises(SystemExit, match=r"can't specify both HTTP \(8222\) and HTTPs \(8443\)"):
        _options(tmp_path, text, http_port=8222)


async def test_a_certificate_that_cannot_be_loaded_stops_the_server(tmp_path: Path) -> None:
    _ca, _cert, key = _certs(tmp_path)
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    opts = _options(tmp_path, f'tls {{ cert_file: "{bad}", key_file: "{key}" }}\n')
    opts.port, opts.store_dir = 0, tmp_path / "store"
    with pytest.raises(SystemExit, match="tls: cannot load cert_file"):
        await Server(opts).start()
    assert not opts.store_dir.exists()  # nothing was started


@pytest.mark.parametrize(
    ("value", "first", "fallback_s"),
    [
        ("true", True, 0.0),
        ("false", False, 0.0),
        ('"on"', True, 0.0),
        ('"OFF"', False, 0.0),
        ('"auto"', True, 0.05),
        ('"auto_fallback"', True, 0.05),
        ('"300ms"', True, 0.3),
        ('"-1s"', True, 0.0),  # nats-server: a delay that is not positive means no fallback
    ],
)
def test_handshake_first_is_read_as_nats_server_reads_it(
    tmp_path: Path, value: str, first: bool, fallback_s: float
) -> None:
    _ca, cert, key = _certs(tmp_path)
    for name in ("handshake_first", "first", "immediate"):
        opts = _options(
            tmp_path, f'tls {{ cert_file: "{cert}", key_file: "{key}", {name}: {value} }}\n'
        )
        assert opts.tls is not None
        assert (opts.tls.handshake_first, opts.tls.handshake_first_fallback_s) == (
            first,
            pytest.approx(fallback_s),
        )


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ('"soon"', 'field "handshake_first"\'s value "soon" is invalid'),
        ("5", 'field "handshake_first" should be a boolean or a string, got int64'),
    ],
)
def test_a_bad_handshake_first_is_refused_with_nats_servers_error(
    tmp_path: Path, value: str, error: str
) -> None:
    _ca, cert, key = _certs(tmp_path)
    with pytest.raises(SystemExit, match=re.escape(error)):
        _options(
            tmp_path,
            f'tls {{ cert_file: "{cert}", key_file: "{key}", handshake_first: {value} }}\n',
        )


def test_handshake_first_is_a_client_setting_not_a_route_one(tmp_path: Path) -> None:
    _ca, cert, key = _certs(tmp_path)
    with pytest.raises(SystemExit, match="handshake_first"):
        _options(
            tmp_path,
            'cluster { name: c, listen: "127.0.0.1:-1", '
            f'tls {{ cert_file: "{cert}", key_file: "{key}", handshake_first: true }} }}\n',
        )
