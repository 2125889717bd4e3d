"""Client authentication and permissions, sans-I/O: who a CONNECT logs in as, and what they may do.

Reproduces nats-server 2.15.1 (auth.go ``processClientOrLeafAuthentication``, client.go
``setPermissions``, ``canSubscribe``, ``pubAllowedFullCheck``, ``checkDenySub``):

* a CONNECT's ``nkey`` is looked up first (it must be a configured nkey user and ``sig`` must be
  the nonce of this connection's INFO signed by it, base64url raw or standard base64); otherwise
  its ``user`` (password in clear, compared in constant time, or a bcrypt hash); with no users
  configured, ``auth_token`` (clear or bcrypt). ``no_auth_user`` logs in a CONNECT that carries
  no user, password, token or nkey at all.
* a user without permissions of their own gets ``default_permissions``.
* permission subjects match the client's subject token by token, the client's wildcards taken
  literally (``SUB foo.>`` is allowed by ``allow: foo.*``, as in nats-server); deny wins; a
  subscribe allow/deny entry ``"subject queue"`` applies to that queue group only (its queue
  name may have wildcard tokens: ``v1.*`` covers queue ``v1.a``).
* ``allow_responses`` turns off the blanket publish allow and lets the user publish to the reply
  subject of a message delivered to them, ``max_msgs`` times within ``expires_s``.
* a wildcard subscription that covers a denied subscribe subject switches on the delivery filter:
  messages on denied subjects are not delivered to this client.

Must never: do I/O or read a clock of its own (the caller passes one); log a credential.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import bcrypt
import nacl.exceptions
import nacl.signing

from protocol.auth_config import ClientAuthConfig, Permissions, SubjectPermission, UserEntry
from protocol.subjects import has_wildcard, is_subset
from protocol.sublist import Sublist

ERR_AUTH_TIMEOUT = "Authentication Timeout"  # nats-server ErrAuthTimeout's -ERR text
NONCE_RAW_BYTES = 11  # nats-server nonceRawLen: 15 base64url characters on the wire
DEFAULT_RESPONSE_EXPIRES_S = 120.0  # nats-server DEFAULT_ALLOW_RESPONSE_EXPIRATION
PERM_CACHE_MAX = 128  # nats-server maxPermCacheSize
DENY_CACHE_MAX = 256  # nats-server maxDenyPermCacheSize
REPLIES_PRUNE_AT = 100  # nats-server replyPermLimit: prune expired replies past this many

_BCRYPT = re.compile(r"^\$2[abxy]?\$\d{2}\$")  # nats-server validBcryptPrefix
_NKEY_USER_PREFIX = 20 << 3  # nkeys PrefixByteUser ('U')


def new_nonce() -> str:
    """A fresh nonce for one connection's INFO (nats-server: 11 random bytes, base64url raw)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(NONCE_RAW_BYTES)).decode().rstrip("=")


def is_bcrypt(password: str) -> bool:
    return password.startswith("$") and _BCRYPT.match(password) is not None


def compare_password(stored: str, given: str) -> bool:
    """nats-server ``comparePasswords``: bcrypt when ``stored`` is a hash, else constant time."""
    if is_bcrypt(stored):
        try:
            return bcrypt.checkpw(given.encode("utf-8", "surrogateescape"), stored.encode())
        except ValueError:  # a malformed hash (or a variant bcrypt does not know)
            return False
    return hmac.compare_digest(
        stored.encode("utf-8", "surrogateescape"), given.encode("utf-8", "surrogateescape")
    )


def _crc16(data: bytes) -> int:
    """The CRC-16/XMODEM nkeys append to an encoded key."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def decode_user_nkey(public_key: str) -> bytes | None:
    """The 32 raw ed25519 bytes of a user public nkey (``U...``), or None if it is not one."""
    try:
        raw = base64.b32decode(public_key + "=" * (-len(public_key) % 8))
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 35 or raw[0] != _NKEY_USER_PREFIX:
        return None
    if int.from_bytes(raw[-2:], "little") != _crc16(raw[:-2]):
        return None
    return raw[1:-2]


def _decode_sig(sig: str) -> bytes | None:
    """Go's RawURLEncoding (no padding), else StdEncoding (padded), both strict."""
    if "=" not in sig:
        try:
            return base64.b64decode(sig + "=" * (-len(sig) % 4), altchars=b"-_", validate=True)
        except (binascii.Error, ValueError):
            pass
    try:
        return base64.b64decode(sig, validate=True)
    except (binascii.Error, ValueError):
        return None


def verify_nkey_signature(public_key: str, nonce: str, sig: str) -> bool:
    """Is ``sig`` the signature of ``nonce`` by ``public_key``? (base64url raw; standard base64
    is accepted too, as nats-server falls back to it.)"""
    key = decode_user_nkey(public_key)
    if key is None or not sig:
        return False
    raw = _decode_sig(sig)
    if raw is None:
        return False
    try:
        nacl.signing.VerifyKey(key).verify(nonce.encode(), raw)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class Authenticated:
    """Who the client is now (a user name or nkey) and what they may do (None: anything)."""

    user: str
    permissions: Permissions | None


def _login(cfg: ClientAuthConfig, entry: UserEntry) -> Authenticated:
    perms = entry.permissions if entry.permissions is not None else cfg.default_permissions
    return Authenticated(entry.user or entry.nkey, perms)


@dataclass(frozen=True, slots=True)
class PasswordCheck:
    """A login that waits on a bcrypt comparison: slow by design (about 0.1 s at nats-server's
    default cost 11), so an event loop runs :meth:`matches` in a worker thread rather than
    stalling every other connection (and Raft) meanwhile. ``who`` logs in if it matches."""

    hashed: str
    given: str = field(repr=False)  # a password: never in a log line or a repr
    who: Authenticated

    def matches(self) -> bool:
        return compare_password(self.hashed, self.given)


def _check_password(
    stored: str, given: str, who: Authenticated, defer: bool
) -> Authenticated | PasswordCheck | None:
    if defer and is_bcrypt(stored):
        return PasswordCheck(stored, given, who)
    return who if compare_password(stored, given) else None


def _no_auth_login(cfg: ClientAuthConfig, entry: UserEntry) -> Authenticated | None:
    """nats-server logs the no_auth_user in by putting its stored password into the CONNECT and
    comparing as usual: a clear password always matches itself, a bcrypt hash never does (so a
    no_auth_user with a hashed password cannot log in anonymously at all)."""
    return None if is_bcrypt(entry.password) else _login(cfg, entry)


def authenticate(
    cfg: ClientAuthConfig, opts: Mapping[str, Any], nonce: str, *, defer_bcrypt: bool = False
) -> Authenticated | PasswordCheck | None:
    """Check a CONNECT's options (``user``, ``pass``, ``auth_token``, ``nkey``, ``sig``);
    None means ``Authorization Violation``. With ``defer_bcrypt`` a bcrypt comparison is not
    made here but returned as a :class:`PasswordCheck` for the caller to run."""
    user = str(opts.get("user") or "")
    password = str(opts.get("pass") or "")
    token = str(opts.get("auth_token") or "")
    nkey = str(opts.get("nkey") or "")
    # nats-server's "no credentials" test: the nkey counts for nkey users only (a CONNECT with
    # an nkey but no nkey users configured still logs in as a user no_auth_user)
    no_creds = not (user or password or token)
    nkey_users = {u.nkey: u for u in cfg.users if u.nkey}
    named_users = {u.user: u for u in cfg.users if u.user and not u.nkey}
    no_auth = cfg.no_auth_user
    if nkey_users:
        if no_creds and not nkey and no_auth in nkey_users:
            return _login(cfg, nkey_users[no_auth])  # no signature: nats-server skips it here
        if nkey:
            entry = nkey_users.get(nkey)
            if entry is None:
                return None
            if not verify_nkey_signature(nkey, nonce, str(opts.get("sig") or "")):
                return None
            return _login(cfg, entry)
    if named_users:
        if no_creds and no_auth in named_users:
            return _no_auth_login(cfg, named_users[no_auth])
        if user:
            entry = named_users.get(user)
            if entry is None:
                return None
            return _check_password(entry.password, password, _login(cfg, entry), defer_bcrypt)
        return None
    if cfg.token:
        who = Authenticated("", cfg.default_permissions)
        return _check_password(cfg.token, token, who, defer_bcrypt)
    return None


def login_no_auth_user(cfg: ClientAuthConfig) -> Authenticated | None:
    """A client whose first protocol line is not CONNECT, when ``no_auth_user`` is set
    (nats-server lets telnet-style clients in as that user, through the same password
    comparison as an anonymous CONNECT); None: Authorization Violation."""
    if not cfg.no_auth_user:
        return None
    for entry in cfg.users:
        if entry.user == cfg.no_auth_user and not entry.nkey:
            return _no_auth_login(cfg, entry)
    return None


# --------------------------------------------------------------------------- permissions


def _split_queue(entry: str) -> tuple[str, str | None]:
    """A subscribe permission ``"subject queue"`` (nats-server splitSubjectQueue)."""
    parts = entry.split()
    if len(parts) >= 2:
        return parts[0], parts[1]
    return entry.strip(), None


def _sublist(subjects: tuple[str, ...], with_queues: bool = False) -> Sublist[bool]:
    sl: Sublist[bool] = Sublist()
    for entry in subjects:
        subject, queue = _split_queue(entry) if with_queues else (entry, None)
        try:
            sl.insert(subject, queue, True)
        except ValueError:  # nats-server logs and skips an unusable subject
            continue
    return sl


def _queue_matches(queue: str, names: Mapping[str, object]) -> bool:
    """nats-server ``queueMatches``: a permission's queue name may hold wildcard tokens
    (``"foo.* v1.*"`` admits queue ``v1.a``); the literal name is tried first, since ``*`` and
    ``>`` are also valid characters of a queue name."""
    if queue in names:
        return True
    return any(has_wildcard(name) and is_subset(queue, name) for name in names)


class _Reply:
    __slots__ = ("count", "since")

    def __init__(self, since: float) -> None:
        self.since = since
        self.count = 0


class PermissionChecker:
    """One logged-in client's permissions, with nats-server's caches (bounded)."""

    def __init__(self, perms: Permissions, clock: Callable[[], float]) -> None:
        self._clock = clock
        pub = perms.publish
        allow = pub.allow or None  # an empty allow list in the config means no list (nats-server)
        resp = perms.allow_responses
        if resp is not None and allow is None:
            allow = ()  # allow_responses turns the blanket publish allow off
        self._pub_allow = None if allow is None else _sublist(allow)
        self._pub_deny = _sublist(pub.deny) if pub.deny else None
        sub: SubjectPermission = perms.subscribe
        self._sub_allow = _sublist(sub.allow, True) if sub.allow else None
        self._sub_deny = _sublist(sub.deny, True) if sub.deny else None
        self._deny_subjects = tuple(_split_queue(d)[0] for d in sub.deny)
        self.restricts_publish = self._pub_allow is not None or self._pub_deny is not None
        self._pub_cache: dict[str, bool] = {}
        self._resp_max = resp.max_msgs if resp is not None else 0
        self._resp_expires = (
            (resp.expires_s or DEFAULT_RESPONSE_EXPIRES_S) if resp is not None else 0.0
        )
        self.tracks_replies = resp is not None
        self._replies: dict[str, _Reply] = {}
        self.deny_filter = False  # on once a wildcard subscription covers a denied subject
        self._deny_cache: dict[str, bool] = {}

    # ----------------------------------------------------------------- publish

    def can_publish(self, subject: str) -> bool:
        if not self.restricts_publish:
            return True
        cached = self._pub_cache.get(subject)
        if cached is not None:
            return cached
        allowed = True
        if self._pub_allow is not None:
            allowed = bool(self._pub_allow.match(subject).plain)
        if allowed and self._pub_deny is not None:
            allowed = not self._pub_deny.match(subject).plain
        if not allowed and self.tracks_replies:
            return self._response_allowed(subject)  # never cached: it changes per message
        cache = self._pub_cache
        if len(cache) >= PERM_CACHE_MAX:
            for key in list(cache)[: PERM_CACHE_MAX // 2]:
                del cache[key]
        cache[subject] = allowed
        return allowed

    def _response_allowed(self, subject: str) -> bool:
        reply = self._replies.get(subject)
        if reply is None:
            return False
        reply.count += 1
        if (self._resp_max > 0 and reply.count > self._resp_max) or (
            self._resp_expires > 0 and self._clock() - reply.since > self._resp_expires
        ):
            del self._replies[subject]
            return False
        return True

    # ----------------------------------------------------------------- subscribe

    def can_subscribe(self, subject: str, queue: str | None) -> bool:
        allowed = True
        if self._sub_allow is not None:
            result = self._sub_allow.match(subject)
            allowed = bool(result.plain)
            if queue and result.queues:
                allowed = _queue_matches(queue, result.queues)
        if allowed and self._sub_deny is not None:
            result = self._sub_deny.match(subject)
            allowed = not result.plain
            if queue and result.queues:
                allowed = not _queue_matches(queue, result.queues)
            if allowed and not self.deny_filter and ("*" in subject or ">" in subject):
                tokens = subject.split(".")
                if "*" in tokens or ">" in tokens:
                    self.deny_filter = any(is_subset(d, subject) for d in self._deny_subjects)
        return allowed

    # ----------------------------------------------------------------- delivery

    def on_deliver(self, subject: str, reply: str | None) -> bool:
        """A message is about to be delivered to this client: False drops it (a denied subject
        under a wildcard subscription); a reply subject is remembered for allow_responses."""
        if self.deny_filter and self._denied(subject):
            return False
        if reply and self.tracks_replies:
            replies = self._replies
            replies[reply] = _Reply(self._clock())
            if len(replies) > REPLIES_PRUNE_AT:
                self._prune_replies()
        return True

    def _denied(self, subject: str) -> bool:
        cached = self._deny_cache.get(subject)
        if cached is not None:
            return cached
        assert self._sub_deny is not None
        denied = bool(self._sub_deny.match(subject).plain)
        cache = self._deny_cache
        if len(cache) >= DENY_CACHE_MAX:
            for key in list(cache)[: DENY_CACHE_MAX // 2]:
                del cache[key]
        cache[subject] = denied
        return denied

    def _prune_replies(self) -> None:
        now = self._clock()
        for key, rep in list(self._replies.items()):
            if (self._resp_max > 0 and rep.count >= self._resp_max) or (
                self._resp_expires > 0 and now - rep.since > self._resp_expires
            ):
                del self._replies[key]
