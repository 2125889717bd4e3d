"""Readiness probes of a server process seen from outside: the NATS client port and the
monitoring HTTP endpoints.

Owns: "does this port speak NATS" (INFO, then PING answered by PONG) and ``GET`` of a monitoring
endpoint as (status, JSON body).
Must never: go through an HTTP proxy (every probe targets 127.0.0.1: an ``http_proxy`` in the
environment must not capture it), or raise when nothing answers (a probe's "no" is an answer).
Standard library only.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from typing import Any

from cluster.ops.process import HOST

PROBE_SOCKET_TIMEOUT_S = 1.0
# a port silent this long may want the TLS handshake first (tls { handshake_first: true })
PROBE_PLAIN_WAIT_S = 0.25
PROBE_READ_BYTES = 65536
HTTP_TIMEOUT_S = 2.0
HTTP_OK = 200

_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def probe_ready(port: int, timeout_s: float = PROBE_SOCKET_TIMEOUT_S, host: str = HOST) -> bool:
    """True when the port sends an INFO line and answers PING with PONG (or, when the INFO
    says TLS or authentication is required, as soon as the INFO arrives)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(min(timeout_s, PROBE_PLAIN_WAIT_S))
            try:
                buf = _read_until(sock, b"\r\n", b"")
            except TimeoutError:
                return _probe_tls_first(sock, timeout_s, host)
            sock.settimeout(timeout_s)
            if not buf.startswith(b"INFO "):
                return False
            first = buf.split(b"\r\n", 1)[0]
            # a plain PING would end the connection when TLS or a CONNECT with credentials
            # must come first: the INFO is enough
            if b'"tls_required":true' in first or b'"auth_required":true' in first:
                return True
            sock.sendall(b"PING\r\n")
            rest = buf[buf.index(b"\r\n") + 2 :]
            return b"PONG\r\n" in _read_until(sock, b"PONG\r\n", rest)
    except OSError:
        return False


def _probe_tls_first(sock: socket.socket, timeout_s: float, host: str) -> bool:
    """A server that sends nothing in the clear is ready when a TLS handshake succeeds and
    its INFO follows inside (only whether it answers is checked, not its certificate)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        sock.settimeout(timeout_s)
        with ctx.wrap_socket(sock, server_hostname=host) as tls:
            return _read_until(tls, b"\r\n", b"").startswith(b"INFO ")
    except OSError:  # ssl.SSLError included
        return False


def _read_until(sock: socket.socket, marker: bytes, buf: bytes) -> bytes:
    while marker not in buf:
        chunk = sock.recv(PROBE_READ_BYTES)
        if not chunk:
            break
        buf += chunk
    return buf


def http_get_json(url: str, timeout_s: float = HTTP_TIMEOUT_S) -> tuple[int | None, Any]:
    """(status, parsed JSON body or None); status None when nothing answered."""
    try:
        with _HTTP.open(url, timeout=timeout_s) as resp:
            status, body = int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (OSError, http.client.HTTPException, ValueError):
        return None, None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def monitor_url(port: int, path: str, host: str = HOST) -> str:
    return f"http://{host}:{port}{path}"
