"""Semantics of one client connection, still sans-I/O: parser events in, actions out.

Owns what nats-server decides per connection without looking at other connections: CONNECT
options (defaults ``verbose``/``pedantic``/``echo`` true, merged across repeated CONNECTs, Go
``encoding/json`` type rules with case-insensitive keys), ``+OK`` in verbose mode, PING→PONG and
the one async INFO (``connect_info``) after the first PONG for protocol ≥ 1, the -ERR texts that
leave the connection open (Invalid Subject, Invalid Publish Subject, Permissions Violation for
``_sys_`` queues and reserved subjects), which sids exist (a repeated SUB sid is ignored; a second
CONNECT drops every subscription), and the exact order of those replies (client.go
``processConnect``, ``processPub``, ``processSubEx``, ``processUnsub``,
``processInboundClientMsg``, ``processPing``). Also the wire encoders for server→client ops.

Must never: do I/O, route messages, or know about other connections; delivery, echo, queue
choice, no_responders and auto-unsubscribe counting belong to the caller (it reports removals
back with :meth:`ClientSession.forget_subscription`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from protocol.auth import (
    Authenticated,
    PasswordCheck,
    PermissionChecker,
    authenticate,
    login_no_auth_user,
)
from protocol.auth_config import ClientAuthConfig
from protocol.gojson import encode_str, go_quote
from protocol.parser import (
    MAX_CONTROL_LINE_BYTES_DEFAULT,
    ClientParser,
    Connect,
    Ping,
    Pong,
    ProtocolViolation,
    Pub,
    Sub,
    Unsub,
)

OK = b"+OK\r\n"
PING = b"PING\r\n"
PONG = b"PONG\r\n"
CRLF = b"\r\n"

CLIENT_PROTO_ZERO = 0
CLIENT_PROTO_INFO = 1
GLOBAL_ACCOUNT = "$G"
SYS_QUEUE_GROUP = "_sys_"

ERR_INVALID_SUBJECT = "Invalid Subject"
ERR_INVALID_PUBLISH_SUBJECT = "Invalid Publish Subject"
ERR_BAD_CLIENT_PROTOCOL = "invalid client protocol"
ERR_NO_RESPONDERS_REQUIRES_HEADERS = "no responders requires headers support"
ERR_AUTHORIZATION_VIOLATION = "Authorization Violation"

# Reserved prefixes clients may not publish to / use as reply (client.go, gateway.go).
_GW_REPLY_PREFIX = "_GR_."
_NRG_PREFIX = "$NRG."
_SERVICE_REPLY_PREFIX = "_R_."
_JS_ACK_PREFIX = "$JS.ACK."
_RESERVED_SUBJECT_PREFIXES = (_GW_REPLY_PREFIX, _NRG_PREFIX)
_RESERVED_REPLY_PREFIXES = (_SERVICE_REPLY_PREFIX, _JS_ACK_PREFIX, _GW_REPLY_PREFIX)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# server.go `Info` field order: Go marshals struct fields in this order.
INFO_KEY_ORDER = (
    "server_id",
    "server_name",
    "version",
    "proto",
    "git_commit",
    "go",
    "host",
    "port",
    "headers",
    "auth_required",
    "tls_required",
    "tls_verify",
    "tls_available",
    "max_payload",
    "jetstream",
    "ip",
    "client_id",
    "client_ip",
    "nonce",
    "cluster",
    "cluster_dynamic",
    "domain",
    "connect_urls",
    "ws_connect_urls",
    "ldm",
    "compression",
    "connect_info",
    "remote_account",
    "acc_is_sys",
    "api_lvl",
    "xkey",
)
_INFO_KEY_RANK = {k: i for i, k in enumerate(INFO_KEY_ORDER)}

# client.go ClientOpts, by JSON name and Go type.
_BOOL_OPTS = frozenset(
    {"echo", "verbose", "pedantic", "tls_required", "new_account", "headers", "no_responders"}
)
_STR_OPTS = frozenset(
    {
        "nkey",
        "jwt",
        "sig",
        "auth_token",
        "user",
        "pass",
        "name",
        "lang",
        "version",
        "account",
        "remote_account",
    }
)
_INT_OPTS = frozenset({"protocol"})
_OBJ_OPTS = frozenset({"import", "export"})
_ALL_OPTS = _BOOL_OPTS | _STR_OPTS | _INT_OPTS | _OBJ_OPTS
_DEFAULT_OPTS: dict[str, Any] = {
    "echo": True,
    "verbose": True,
    "pedantic": True,
    "tls_required": False,
    "new_account": False,
    "headers": False,
    "no_responders": False,
    "protocol": 0,
    **{k: "" for k in _STR_OPTS},
    "import": None,
    "export": None,
}


# --------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class Send:
    data: bytes


@dataclass(frozen=True, slots=True)
class Connected:
    verbose: bool
    pedantic: bool
    echo: bool
    headers: bool
    no_responders: bool
    name: str
    lang: str
    version: str
    protocol: int


@dataclass(frozen=True, slots=True)
class Subscribe:
    sid: str
    subject: str
    queue: str | None


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """``max_msgs`` None: remove now. Otherwise remove after ``max_msgs`` deliveries in total
    (immediately if that many were already delivered) and call ``forget_subscription``."""

    sid: str
    max_msgs: int | None


# The parser's Pub event is passed through unchanged as the Publish action (same fields), so the
# publish hot path allocates one object per message, not two.
Publish = Pub


@dataclass(frozen=True, slots=True)
class Close:
    """Send ``-ERR '<err>'`` first when err is not None, then close the connection."""

    err: str | None


@dataclass(frozen=True, slots=True)
class Authorized:
    """The client logged in (CONNECT, or no_auth_user): ``perms`` None means unrestricted.
    Comes before the Connected it belongs to; a later CONNECT logs in again."""

    user: str
    perms: PermissionChecker | None


@dataclass(frozen=True, slots=True)
class CheckPassword:
    """Run ``check.matches()`` off the event loop (bcrypt), then call
    :meth:`ClientSession.password_checked`; until then the session yields no further action."""

    check: PasswordCheck


Action = Send | Connected | Subscribe | Unsubscribe | Pub | Close | Authorized | CheckPassword


# --------------------------------------------------------------------------- encoders


def _b(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def encode_msg(subject: str, sid: str, reply: str | None, payload: bytes) -> bytes:
    if reply:
        head = f"MSG {subject} {sid} {reply} {len(payload)}\r\n"
    else:
        head = f"MSG {subject} {sid} {len(payload)}\r\n"
    return head.encode("utf-8", "surrogateescape") + payload + CRLF


def encode_hmsg(subject: str, sid: str, reply: str | None, hdr: bytes, payload: bytes) -> bytes:
    hdr_len = len(hdr)
    total = hdr_len + len(payload)
    if reply:
        head = f"HMSG {subject} {sid} {reply} {hdr_len} {total}\r\n"
    else:
        head = f"HMSG {subject} {sid} {hdr_len} {total}\r\n"
    return head.encode("utf-8", "surrogateescape") + hdr + payload + CRLF


def no_responders_header(subject: str) -> bytes:
    """The header of the 503 status nats-server sends (with an empty payload, to the requester's
    own subscription matching its reply subject) when a request reached no subscriber."""
    return b"NATS/1.0 503\r\nNats-Subject: " + _b(subject) + b"\r\n\r\n"


def encode_info(info: dict[str, Any]) -> bytes:
    """``INFO {json} \\r\\n`` — nats-server puts a space before the CRLF."""
    return b"INFO " + _b(encode_str(info)) + b" \r\n"


def encode_err(text: str) -> bytes:
    return b"-ERR '" + _b(text) + b"'\r\n"


# --------------------------------------------------------------------------- subject rules


def _sub_subject_ok(subject: str) -> bool:
    """sublist.go Insert: no empty token, nothing after a ``>`` token."""
    tokens = subject.split(".")
    if "" in tokens:
        return False
    return ">" not in tokens or tokens.index(">") == len(tokens) - 1


def _literal_publish_subject(subject: str) -> bool:
    """sublist.go IsValidLiteralSubject (the pedantic check): no empty or wildcard token."""
    tokens = subject.split(".")
    return "" not in tokens and "*" not in tokens and ">" not in tokens


def _reserved_subject(subject: str) -> bool:
    if subject.startswith(_NRG_PREFIX):
        return True
    return len(subject) > len(_GW_REPLY_PREFIX) and subject.startswith(_GW_REPLY_PREFIX)


def _reserved_reply(reply: str) -> bool:
    if reply.startswith(_SERVICE_REPLY_PREFIX):
        return True
    if reply.startswith(_JS_ACK_PREFIX):
        return len(reply) > len(_JS_ACK_PREFIX)
    return len(reply) > len(_GW_REPLY_PREFIX) and reply.startswith(_GW_REPLY_PREFIX)


def _sub_violation(subject: str, queue: str | None) -> str:
    text = f"Permissions Violation for Subscription to {go_quote(subject)}"
    return text if not queue else f"{text} using queue {go_quote(queue)}"


def order_info(info: dict[str, Any]) -> dict[str, Any]:
    """Reorder INFO keys as Go marshals the Info struct; unknown keys go last, in order. An
    empty ``connect_urls`` is left out, as its ``omitempty`` tag does."""
    end = len(INFO_KEY_ORDER)
    keys = sorted(info, key=lambda k: _INFO_KEY_RANK.get(k, end))
    return {k: info[k] for k in keys if k != "connect_urls" or info[k]}


class _BadOption(ValueError):
    pass


def _merge_connect_options(opts: dict[str, Any], given: dict[str, Any]) -> None:
    """Apply CONNECT JSON onto the current options like Go's json.Unmarshal into ClientOpts:
    keys match case-insensitively, null leaves a field as it was, a wrong type is an error."""
    for key, value in given.items():
        name = key if key in _ALL_OPTS else key.lower()
        if name not in _ALL_OPTS:
            continue
        if value is None:
            if name in _OBJ_OPTS:
                opts[name] = None
            continue
        if name in _BOOL_OPTS:
            if not isinstance(value, bool):
                raise _BadOption(name)
        elif name in _STR_OPTS:
            if not isinstance(value, str):
                raise _BadOption(name)
        elif name in _INT_OPTS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise _BadOption(name)
            if not INT64_MIN <= value <= INT64_MAX:
                raise _BadOption(name)
        elif not isinstance(value, dict):
            raise _BadOption(name)
        opts[name] = value


# --------------------------------------------------------------------------- the session


class _AuthState:
    """Client authentication for one session (set with :meth:`ClientSession.require_auth`)."""

    __slots__ = ("cfg", "clock", "defer_bcrypt", "first_byte_seen", "nonce", "pending")

    def __init__(self, cfg: ClientAuthConfig, nonce: str, clock: Any, defer_bcrypt: bool) -> None:
        self.cfg = cfg
        self.nonce = nonce
        self.clock = clock
        self.defer_bcrypt = defer_bcrypt
        self.first_byte_seen = False
        self.pending: PasswordCheck | None = None  # a CONNECT waiting on its bcrypt check


class ClientSession:
    """One client connection's protocol state. Feed bytes, drain actions in order."""

    # client authentication: None when the server requires none (see require_auth)
    _auth: _AuthState | None = None
    _perms: PermissionChecker | None = None

    def __init__(
        self,
        info: dict[str, Any],
        max_payload: int,
        max_control_line: int = MAX_CONTROL_LINE_BYTES_DEFAULT,
    ) -> None:
        self._info = info
        self._server_headers = bool(info.get("headers", True))
        self._parser = ClientParser(max_payload=max_payload, max_control_line=max_control_line)
        self._parser.headers_enabled = False  # until a CONNECT asks for headers
        self._actions: deque[Action] = deque()
        self._opts: dict[str, Any] = dict(_DEFAULT_OPTS)
        self._verbose = True
        self._pedantic = True
        self._connect_received = False
        self._first_pong_sent = False
        self._sids: set[str] = set()
        self._closed = False
        self.pongs_received = 0

    # ----------------------------------------------------------------- public API

    def initial_bytes(self) -> bytes:
        """The INFO line to send as soon as the connection is accepted."""
        auth = self._auth
        if auth is not None and auth.cfg.no_auth_user:
            # nats-server: a client may connect without credentials, so the first INFO does
            # not say auth_required (the one after CONNECT does)
            return encode_info({k: v for k, v in self._info.items() if k != "auth_required"})
        return encode_info(self._info)

    def receive_data(self, data: bytes) -> None:
        if self._closed:
            return
        auth = self._auth
        if auth is not None and not auth.first_byte_seen and data:
            auth.first_byte_seen = True
            if data[:1] not in (b"C", b"c") and not self._login_without_connect(auth):
                return
        self._parser.receive_data(data)

    def require_auth(
        self, cfg: ClientAuthConfig, nonce: str, clock: Any, *, defer_bcrypt: bool = False
    ) -> None:
        """Clients must log in with CONNECT (``nonce``: what this connection's INFO carries for
        nkey signatures; ``clock``: monotonic seconds, for allow_responses expiry). With
        ``defer_bcrypt`` a bcrypt password is not compared inline: a :class:`CheckPassword`
        action asks the caller to, and the session waits for :meth:`password_checked`."""
        self._auth = _AuthState(cfg, nonce, clock, defer_bcrypt)

    def password_checked(self, ok: bool) -> None:
        """The answer to a :class:`CheckPassword`: finish that CONNECT, or refuse it."""
        auth = self._auth
        if auth is None or auth.pending is None:
            return
        check, auth.pending = auth.pending, None
        if self._closed:
            return
        if not ok:
            self._close(ERR_AUTHORIZATION_VIOLATION)
            return
        self._authorized(check.who, auth)
        self._finish_connect(self._opts)

    @property
    def awaiting_auth(self) -> bool:
        """Auth is required and no CONNECT (or no_auth_user login) has happened yet."""
        auth = self._auth
        if auth is None or self._closed:
            return False
        # a CONNECT whose password is still being checked is not logged in yet either
        return not self._connect_received or auth.pending is not None

    def next_action(self) -> Action | None:
        actions = self._actions
        while not actions:
            if self._closed or (self._auth is not None and self._auth.pending is not None):
                return None
            event = self._parser.next_event()
            if event is None:
                return None
            if type(event) is Pub:
                publish = self._on_pub(event)
                if publish is not None:
                    if not actions:
                        return publish
                    actions.append(publish)
            else:
                self._on_event(event)
        return actions.popleft()

    def set_info(self, info: dict[str, Any]) -> None:
        """Replace the server INFO (e.g. new ``connect_urls``) used for the connect_info INFO."""
        self._info = info

    def update_info(self, **changes: Any) -> None:
        """Change keys of this connection's INFO (``connect_urls`` when the cluster changes)."""
        self._info = order_info({**self._info, **changes})

    def async_info(self, **changes: Any) -> bytes | None:
        """An INFO sent on the server's initiative (nats-server ``sendAsyncInfoToClients``), with
        ``changes`` over this connection's INFO: only for a client that asked for them (protocol
        1) and got its first PONG; before that PONG the connect_info INFO is still to come."""
        if self._closed or not self._first_pong_sent or self._opts["protocol"] < CLIENT_PROTO_INFO:
            return None
        info = dict(self._info)
        info.pop("nonce", None)
        info.update(changes)
        return encode_info(order_info(info))

    def forget_subscription(self, sid: str) -> None:
        """The caller removed ``sid`` on its own (auto-unsubscribe reached its max)."""
        self._sids.discard(sid)

    @property
    def options(self) -> dict[str, Any]:
        """The CONNECT options in effect (defaults merged with every CONNECT so far)."""
        return dict(self._opts)

    @property
    def closed(self) -> bool:
        return self._closed

    # ----------------------------------------------------------------- events

    def _on_event(self, event: object) -> None:
        if type(event) is Sub:
            self._on_sub(event)
        elif type(event) is Unsub:
            self._on_unsub(event)
        elif type(event) is Ping:
            self._on_ping()
        elif type(event) is Pong:
            self.pongs_received += 1
        elif type(event) is Connect:
            self._on_connect(event)
        elif type(event) is ProtocolViolation:
            self._close(event.err)
        else:  # pragma: no cover - the parser has no other events
            raise AssertionError(f"unexpected parser event {event!r}")

    def _login_without_connect(self, auth: _AuthState) -> bool:
        """nats-server: with auth required the first protocol line must be CONNECT, unless
        no_auth_user is set (then the client is that user, with the default options)."""
        who = login_no_auth_user(auth.cfg)
        if who is None:
            self._close(ERR_AUTHORIZATION_VIOLATION)
            return False
        self._connect_received = True
        self._authorized(who, auth)
        return True

    def _authorized(self, who: Authenticated, auth: _AuthState) -> None:
        perms = None if who.permissions is None else PermissionChecker(who.permissions, auth.clock)
        self._perms = perms
        self._actions.append(Authorized(who.user, perms))

    def _close(self, err: str | None) -> None:
        self._closed = True
        self._actions.append(Close(err))

    def _send(self, data: bytes) -> None:
        self._actions.append(Send(data))

    def _on_pub(self, event: Pub) -> Pub | None:
        subject = event.subject
        if self._pedantic and not _literal_publish_subject(subject):
            self._send(encode_err(ERR_INVALID_PUBLISH_SUBJECT))
        if subject[:1] in ("_", "$") and _reserved_subject(subject):
            self._send(encode_err(f"Permissions Violation for Publish to {go_quote(subject)}"))
            return None
        perms = self._perms
        if perms is not None and perms.restricts_publish and not perms.can_publish(subject):
            self._send(encode_err(f"Permissions Violation for Publish to {go_quote(subject)}"))
            return None
        reply = event.reply
        if reply is not None and reply[:1] in ("_", "$") and _reserved_reply(reply):
            text = f"Permissions Violation for Publish with Reply of {go_quote(reply)}"
            self._send(encode_err(text))
            return None
        if self._verbose:
            self._send(OK)
        # a subject with an empty token matches no subscription (the sublist says so), yet it is
        # still a publish: a request on it gets the no-responders status
        return event

    def _on_sub(self, event: Sub) -> None:
        subject, queue, sid = event.subject, event.queue, event.sid
        perms = self._perms
        if perms is not None and not perms.can_subscribe(subject, queue):
            self._send(encode_err(_sub_violation(subject, queue)))
            return
        if queue == SYS_QUEUE_GROUP:
            text = (
                f"Permissions Violation for Subscription to {go_quote(subject)}"
                f" using queue {go_quote(queue)}"
            )
            self._send(encode_err(text))
            return
        if sid in self._sids:
            if self._verbose:
                self._send(OK)
            return
        if not _sub_subject_ok(subject):
            self._send(encode_err(ERR_INVALID_SUBJECT))
            return
        self._sids.add(sid)
        self._actions.append(Subscribe(sid, subject, queue))
        if self._verbose:
            self._send(OK)

    def _on_unsub(self, event: Unsub) -> None:
        sid = event.sid
        if self._verbose:
            self._send(OK)
        if sid in self._sids:
            if event.max_msgs is None:
                self._sids.discard(sid)
            self._actions.append(Unsubscribe(sid, event.max_msgs))

    def _on_ping(self) -> None:
        if not self._connect_received or self._first_pong_sent:
            self._send(PONG)
            return
        self._first_pong_sent = True
        if self._opts["protocol"] >= CLIENT_PROTO_INFO:
            info = dict(self._info)
            info.pop("nonce", None)  # nats-server: the nonce was for the CONNECT, now done
            info["connect_info"] = True
            info["remote_account"] = GLOBAL_ACCOUNT
            self._send(PONG + encode_info(order_info(info)))
        else:
            self._send(PONG)

    def _on_connect(self, event: Connect) -> None:
        opts = self._opts
        try:
            _merge_connect_options(opts, event.options)
        except _BadOption:
            self._close(None)
            return
        first_connect = not self._connect_received
        self._connect_received = True
        if not first_connect and self._sids:
            for sid in sorted(self._sids):
                self._actions.append(Unsubscribe(sid, None))
            self._sids.clear()
        auth = self._auth
        if auth is not None:
            who = authenticate(auth.cfg, opts, auth.nonce, defer_bcrypt=auth.defer_bcrypt)
            if who is None:
                self._close(ERR_AUTHORIZATION_VIOLATION)
                return
            if isinstance(who, PasswordCheck):
                # the rest of this CONNECT, and everything after it, waits for the answer
                auth.pending = who
                self._actions.append(CheckPassword(who))
                return
            self._authorized(who, auth)
        self._finish_connect(opts)

    def _finish_connect(self, opts: dict[str, Any]) -> None:
        """The CONNECT's options, once its credentials (if any are required) are accepted."""
        if opts["account"] or opts["new_account"]:
            self._close(ERR_AUTHORIZATION_VIOLATION)
            return
        headers = self._server_headers and bool(opts["headers"])
        self._parser.headers_enabled = headers
        protocol = opts["protocol"]
        if protocol < CLIENT_PROTO_ZERO or protocol > CLIENT_PROTO_INFO:
            self._close(ERR_BAD_CLIENT_PROTOCOL)
            return
        if opts["no_responders"] and not headers:
            self._close(ERR_NO_RESPONDERS_REQUIRES_HEADERS)
            return
        self._verbose = bool(opts["verbose"])
        self._pedantic = bool(opts["pedantic"])
        self._actions.append(
            Connected(
                verbose=self._verbose,
                pedantic=self._pedantic,
                echo=bool(opts["echo"]),
                headers=headers,
                no_responders=bool(opts["no_responders"]),
                name=opts["name"],
                lang=opts["lang"],
                version=opts["version"],
                protocol=protocol,
            )
        )
        if self._verbose:
            self._send(OK)
