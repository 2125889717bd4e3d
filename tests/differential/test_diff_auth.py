"""Client authentication and permissions, differential: nats-server 2.15.1 and jetraft get the
same config file (``-c``) and the same raw protocol bytes; what each sends back must be the same,
byte for byte, with INFO reduced to the fields auth decides (``auth_required``, whether a
``nonce`` is there) since server ids, ports and nonces differ.

Covered: no credentials, wrong/right password, unknown user, bcrypt user, token (right, wrong,
missing), nkey user (signed nonce, bad or missing signature, unknown key), a second CONNECT with
bad credentials, PUB/SUB/PING and partial bytes before CONNECT, the auth timeout, publish and
subscribe allow/deny with wildcards (including queue subscriptions and a wildcard subscription
covering a denied subject), queue names with wildcards in permissions, a queue member whose
deny filter drops a message (another member gets it), default_permissions, allow_responses (max
and expiry) and no_auth_user (CONNECT without credentials or with only an nkey, and a first line
that is not CONNECT).
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nkeys
import pytest

from tests.servers import HOST, ServerProc, jetraft_proc, nats_server_proc

pytestmark = pytest.mark.differential

READ_DEADLINE_S = 4.0
SEED = b"SUAACAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAN7EY"
NKEY_PUBLIC = "UCFIRY65OQE7DFP5KLNS2PF2LVZMUZYJX4OZIEQ36N2IQANUB5XVZ45L"
OTHER_NKEY = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
BOB_HASH = "$2b$04$eaCAPIuUh8vm1/AS9ffKKelG08cYmn8hYCXWczTtkDyxs3NfFC0BW"  # "bpass", cost 4

USERS_CONF = f"""
authorization {{
  timeout: 1
  default_permissions: {{ publish: {{ deny: ["def.>"] }} }}
  users: [
    {{ user: alice, password: secret, permissions: {{
        publish: {{ allow: ["foo.>", "_INBOX.>"], deny: ["foo.bar"] }}
        subscribe: {{ allow: ["foo.*", "_INBOX.>", "q.>", "w.* grp"], deny: ["foo.secret"] }}
    }} }}
    {{ user: bob, password: "{BOB_HASH}" }}
    {{ user: carol, password: pw }}
    {{ nkey: {NKEY_PUBLIC} }}
    {{ user: svc, password: x, permissions: {{
        subscribe: {{ allow: ["req.>"] }}
        allow_responses: {{ max: 2, expires: "1s" }}
    }} }}
    {{ user: qu, password: q, permissions: {{
        subscribe: {{ allow: ["foo.* v1.*", "bar.>"], deny: ["foo.secret", "bar.* g.>"] }}
    }} }}
  ]
}}
"""
TOKEN_CONF = 'authorization { token: "tok123" }\n'
NO_AUTH_CONF = """
no_auth_user: guest
authorization {
  users: [
    { user: guest, password: g, permissions: {
        publish: { allow: ["pub.>"] }, subscribe: { allow: ["pub.>"] } } }
    { user: svc2, password: x, permissions: { allow_responses: true } }
    { user: svc3, password: x, permissions: { publish: { allow: [] } } }
  ]
}
"""

Info = dict[str, Any]
Data = bytes | Callable[[Info], bytes]
Step = tuple[Any, ...]


def connect(**fields: Any) -> bytes:
    opts: dict[str, Any] = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True}
    opts.update(fields)
    return b"CONNECT " + json.dumps(opts).encode() + b"\r\n"


def login(user: str, password: str, **fields: Any) -> bytes:
    return connect(user=user, **{"pass": password}, **fields)


def nkey_login(info: Info, *, sign: bytes | None = None, padded: bool = False) -> bytes:
    kp = nkeys.from_seed(bytearray(SEED))
    sig = kp.sign(sign if sign is not None else str(info["nonce"]).encode())
    text = base64.b64encode(sig).decode() if padded else base64.urlsafe_b64encode(sig).decode()
    return connect(nkey=NKEY_PUBLIC, sig=text if padded else text.rstrip("="))


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=READ_DEADLINE_S)
        self.buf = b""
        self.closed = False
        self.info: Info = {}
        first = self.read_until(lambda b: b"\r\n" in b)
        self.info = json.loads(first.split(b"\r\n", 1)[0][5:])

    def read_until(
        self, done: Callable[[bytes], bool], deadline_s: float = READ_DEADLINE_S
    ) -> bytes:
        deadline = time.monotonic() + deadline_s
        while not done(self.buf) and not self.closed and time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
            self.buf += chunk
        out, self.buf = self.buf, b""
        return out

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            self.closed = True


def _mask(data: bytes) -> bytes:
    """INFO lines reduced to the fields authentication decides."""
    lines = data.split(b"\r\n")
    for i, line in enumerate(lines):
        if line.startswith(b"INFO "):
            info = json.loads(line[5:])
            kept = {"auth_required": info.get("auth_required"), "nonce": "nonce" in info}
            lines[i] = b"INFO " + json.dumps(kept).encode()
    return b"\r\n".join(lines)


def run(port: int, steps: list[Step]) -> list[Any]:
    """Steps: ("open", c) | ("send", c, data, pongs) — send, then read until that many PONGs or
    the close | ("close_within", c, seconds) — read until the server closes | ("sleep", s)."""
    conns: dict[str, Conn] = {}
    out: list[Any] = []
    try:
        for step in steps:
            kind = step[0]
            if kind == "open":
                conns[step[1]] = conn = Conn(port)
                out.append((step[1], "INFO", _mask(b"INFO " + json.dumps(conn.info).encode())))
            elif kind == "send":
                conn = conns[step[1]]
                data = step[2](conn.info) if callable(step[2]) else step[2]
                conn.send(data)
                pongs = step[3]
                got = conn.read_until(lambda b, n=pongs: b.count(b"PONG\r\n") >= n)  # type: ignore[misc]
                out.append((step[1], _mask(got), conn.closed))
            elif kind == "close_within":
                conn = conns[step[1]]
                started = time.monotonic()
                got = conn.read_until(lambda b: False, step[2])
                out.append((step[1], _mask(got), conn.closed, time.monotonic() - started < step[2]))
            elif kind == "sleep":
                time.sleep(step[1])
    finally:
        for conn in conns.values():
            conn.sock.close()
    return out


PING = b"PING\r\n"

USERS_SCENARIOS: dict[str, list[Step]] = {
    "no_credentials": [("open", "a"), ("send", "a", connect() + PING, 1)],
    "wrong_password": [("open", "a"), ("send", "a", login("alice", "x", verbose=True) + PING, 1)],
    "unknown_user": [("open", "a"), ("send", "a", login("zed", "x") + PING, 1)],
    "right_password_verbose": [
        ("open", "a"),
        ("send", "a", login("alice", "secret", verbose=True) + PING, 1),
    ],
    "bcrypt_user": [("open", "a"), ("send", "a", login("bob", "bpass") + PING, 1)],
    "bcrypt_wrong": [("open", "a"), ("send", "a", login("bob", "bpas") + PING, 1)],
    "token_with_users": [("open", "a"), ("send", "a", connect(auth_token="secret") + PING, 1)],
    "nkey_signed": [("open", "a"), ("send", "a", lambda i: nkey_login(i) + PING, 1)],
    "nkey_std_base64": [
        ("open", "a"),
        ("send", "a", lambda i: nkey_login(i, padded=True) + PING, 1),
    ],
    "nkey_bad_signature": [
        ("open", "a"),
        ("send", "a", lambda i: nkey_login(i, sign=b"other") + PING, 1),
    ],
    "nkey_no_signature": [("open", "a"), ("send", "a", connect(nkey=NKEY_PUBLIC) + PING, 1)],
    "nkey_unknown": [("open", "a"), ("send", "a", connect(nkey=OTHER_NKEY, sig="AAAA") + PING, 1)],
    "second_connect_bad": [
        ("open", "a"),
        ("send", "a", login("alice", "secret") + PING, 1),
        ("send", "a", login("alice", "bad") + PING, 1),
    ],
    "pub_before_connect": [("open", "a"), ("send", "a", b"PUB foo 1\r\nx\r\n", 1)],
    "sub_before_connect": [("open", "a"), ("send", "a", b"SUB foo 1\r\n", 1)],
    "ping_before_connect": [("open", "a"), ("send", "a", PING, 1)],
    "partial_before_connect": [("open", "a"), ("send", "a", b"P", 1)],
    "crlf_before_connect": [("open", "a"), ("send", "a", b"\r\n", 1)],
    "lowercase_connect": [
        ("open", "a"),
        ("send", "a", b'connect {"user":"alice","pass":"secret"}\r\nping\r\n', 1),
    ],
    "auth_timeout": [("open", "a"), ("close_within", "a", 3.0)],
    "auth_timeout_partial_connect": [
        ("open", "a"),
        ("send", "a", b"CONN", 0),
        ("close_within", "a", 3.0),
    ],
    "publish_allow_deny": [
        ("open", "a"),
        (
            "send",
            "a",
            login("alice", "secret", verbose=True)
            + b"SUB foo.* 1\r\nPUB foo.x 1\r\na\r\nPUB foo.bar 1\r\nb\r\nPUB zzz 1\r\nc\r\n"
            + b"PUB foo.bar _R_.x 1\r\nd\r\nPUB foo.x.y 1\r\ne\r\n"
            + PING,
            1,
        ),
    ],
    "pedantic_wildcard_publish": [
        ("open", "a"),
        ("send", "a", login("alice", "secret", pedantic=True) + b"PUB foo.* 1\r\na\r\n" + PING, 1),
    ],
    "subscribe_allow_deny": [
        ("open", "a"),
        (
            "send",
            "a",
            login("alice", "secret", verbose=True)
            + b"SUB foo.secret 1\r\nSUB foo.x 2\r\nSUB bar 3\r\nSUB foo.> 4\r\nSUB foo.* q 5\r\n"
            + b"SUB bar q 6\r\nSUB q.> grp 7\r\nSUB w.x 8\r\nSUB w.x grp 9\r\nSUB w.x other 10\r\n"
            + b"SUB foo.secret q 11\r\nSUB > 12\r\nSUB foo.secret 1\r\n"
            + PING,
            1,
        ),
    ],
    "wildcard_sub_over_deny": [
        ("open", "a"),
        (
            "send",
            "a",
            login("alice", "secret")
            + b"SUB foo.* 1\r\nPUB foo.secret 1\r\na\r\nPUB foo.ok 1\r\nb\r\n"
            + PING,
            1,
        ),
    ],
    "queue_names_with_wildcards": [
        ("open", "a"),
        (
            "send",
            "a",
            login("qu", "q", verbose=True)
            + b"SUB foo.x v1.a 1\r\nSUB foo.x v1 2\r\nSUB foo.x v1.* 3\r\nSUB foo.x v1.> 4\r\n"
            + b"SUB foo.x 5\r\nSUB bar.x g.a.b 6\r\nSUB bar.x h 7\r\n"
            + PING,
            1,
        ),
    ],
    "queue_member_deny_filter": [
        ("open", "f"),
        ("send", "f", login("qu", "q") + b"SUB foo.* v1.a 1\r\n" + PING, 1),
        ("open", "c"),
        ("send", "c", login("carol", "pw") + b"SUB foo.* v1.a 1\r\n" + PING, 1),
        ("open", "p"),
        ("send", "p", login("bob", "bpass") + b"PUB foo.secret 1\r\nx\r\n" * 12 + PING, 1),
        ("send", "f", PING, 1),
        ("send", "c", PING, 1),
    ],
    "default_permissions": [
        ("open", "a"),
        (
            "send",
            "a",
            login("carol", "pw") + b"SUB > 1\r\nPUB def.x 1\r\na\r\nPUB other 1\r\nb\r\n" + PING,
            1,
        ),
    ],
    "allow_responses": [
        ("open", "svc"),
        ("send", "svc", login("svc", "x") + b"SUB req.> 1\r\nPUB nope 1\r\nn\r\n" + PING, 1),
        ("open", "req"),
        (
            "send",
            "req",
            login("carol", "pw") + b"SUB _INBOX.r 1\r\nPUB req.a _INBOX.r 1\r\nq\r\n" + PING,
            1,
        ),
        ("send", "svc", PING, 1),
        (
            "send",
            "svc",
            b"PUB _INBOX.r 2\r\nr1\r\nPUB _INBOX.r 2\r\nr2\r\nPUB _INBOX.r 2\r\nr3\r\n" + PING,
            1,
        ),
        ("send", "req", PING, 1),
        ("send", "req", b"PUB req.b _INBOX.late 1\r\nq\r\n" + PING, 1),
        ("send", "svc", PING, 1),
        ("sleep", 1.3),
        ("send", "svc", b"PUB _INBOX.late 1\r\nx\r\n" + PING, 1),
    ],
}

TOKEN_SCENARIOS: dict[str, list[Step]] = {
    "token_right": [("open", "a"), ("send", "a", connect(auth_token="tok123") + PING, 1)],
    "token_wrong": [("open", "a"), ("send", "a", connect(auth_token="tok12") + PING, 1)],
    "token_as_user": [("open", "a"), ("send", "a", connect(user="tok123") + PING, 1)],
    "token_missing": [("open", "a"), ("send", "a", connect() + PING, 1)],
}

NO_AUTH_SCENARIOS: dict[str, list[Step]] = {
    "first_line_ping": [("open", "a"), ("send", "a", PING, 1)],
    "first_line_pub": [
        ("open", "a"),
        ("send", "a", b"SUB pub.x 1\r\nPUB pub.x 1\r\na\r\nPUB other 1\r\nb\r\n" + PING, 1),
    ],
    "connect_without_credentials": [
        ("open", "a"),
        ("send", "a", connect() + b"PUB other 1\r\nb\r\n" + PING, 1),
    ],
    "wrong_user": [("open", "a"), ("send", "a", login("svc2", "bad") + PING, 1)],
    "password_only": [("open", "a"), ("send", "a", connect(**{"pass": "g"}) + PING, 1)],
    "token_only": [("open", "a"), ("send", "a", connect(auth_token="g") + PING, 1)],
    "nkey_without_nkey_users": [
        ("open", "a"),
        ("send", "a", connect(nkey=NKEY_PUBLIC) + b"PUB other 1\r\nb\r\n" + PING, 1),
    ],
    "allow_responses_blocks_publish": [
        ("open", "a"),
        ("send", "a", login("svc2", "x") + b"PUB any 1\r\na\r\n" + PING, 1),
    ],
    "empty_allow_list": [
        ("open", "a"),
        ("send", "a", login("svc3", "x") + b"PUB any 1\r\na\r\n" + PING, 1),
    ],
}


def _pair(tmp_path: Path, conf: str) -> Iterator[tuple[ServerProc, ServerProc]]:
    path = tmp_path / "auth.conf"
    path.write_text(conf)
    args = ["-c", str(path)]
    oracle = nats_server_proc(tmp_path, name="n1", extra_args=args).start()
    try:
        candidate = jetraft_proc(tmp_path, name="j1", extra_args=args).start()
        try:
            yield oracle, candidate
        finally:
            candidate.stop()
    finally:
        oracle.stop()


@pytest.mark.parametrize(
    "conf, scenarios",
    [
        pytest.param(USERS_CONF, USERS_SCENARIOS, id="users"),
        pytest.param(TOKEN_CONF, TOKEN_SCENARIOS, id="token"),
        pytest.param(NO_AUTH_CONF, NO_AUTH_SCENARIOS, id="no_auth_user"),
    ],
)
def test_auth_matches_nats_server(
    tmp_path: Path, conf: str, scenarios: dict[str, list[Step]]
) -> None:
    failures: list[str] = []
    for oracle, candidate in _pair(tmp_path, conf):
        for name, steps in scenarios.items():
            want = run(oracle.port, steps)
            got = run(candidate.port, steps)
            if want != got:
                failures.append(f"{name}:\n  nats-server: {want}\n  jetraft:     {got}")
    assert not failures, "\n".join(failures)
