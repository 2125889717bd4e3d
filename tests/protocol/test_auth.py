"""protocol/auth.py and the session's use of it, without sockets: credentials (clear, bcrypt,
token, nkey signatures of the nonce, no_auth_user), the permission matcher against a naive one on
random subjects (Hypothesis), allow_responses counting and expiry, and the session's -ERR texts."""

from __future__ import annotations

import base64

import bcrypt
import nkeys
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import session as ps
from protocol.auth import (
    Authenticated,
    PasswordCheck,
    PermissionChecker,
    authenticate,
    compare_password,
    decode_user_nkey,
    login_no_auth_user,
    verify_nkey_signature,
)
from protocol.auth_config import (
    ClientAuthConfig,
    Permissions,
    ResponsePermission,
    SubjectPermission,
    UserEntry,
)

SEED = b"SUAACAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAN7EY"
KP = nkeys.from_seed(bytearray(SEED))
PUBLIC = KP.public_key.decode()
HASH = bcrypt.hashpw(b"bpass", bcrypt.gensalt(4)).decode()
NONCE = "abcdefghijklmno"


def _sig(data: bytes) -> str:
    return base64.urlsafe_b64encode(KP.sign(data)).decode().rstrip("=")


ALICE = Permissions(publish=SubjectPermission(allow=("foo.>",), deny=("foo.bar",)))
DEFAULTS = Permissions(publish=SubjectPermission(deny=("def.>",)))
CFG = ClientAuthConfig(
    users=(
        UserEntry(user="alice", password="secret", permissions=ALICE),
        UserEntry(user="bob", password=HASH),
        UserEntry(nkey=PUBLIC),
    ),
    default_permissions=DEFAULTS,
)


def test_passwords_clear_and_bcrypt() -> None:
    assert compare_password("secret", "secret")
    assert not compare_password("secret", "secre")
    assert compare_password(HASH, "bpass")
    assert not compare_password(HASH, "bpas")
    assert not compare_password("$2a$10$broken", "x")


def test_users_get_own_or_default_permissions() -> None:
    who = authenticate(CFG, {"user": "alice", "pass": "secret"}, NONCE)
    assert who is not None and who.permissions == ALICE
    who = authenticate(CFG, {"user": "bob", "pass": "bpass"}, NONCE)
    assert who is not None and who.permissions == DEFAULTS
    assert authenticate(CFG, {"user": "alice", "pass": "nope"}, NONCE) is None
    assert authenticate(CFG, {"user": "zed", "pass": "secret"}, NONCE) is None
    assert authenticate(CFG, {}, NONCE) is None
    assert authenticate(CFG, {"auth_token": "secret"}, NONCE) is None


def test_nkey_signature_of_the_nonce() -> None:
    assert decode_user_nkey(PUBLIC) is not None
    assert decode_user_nkey(PUBLIC[:-1] + "A") is None
    assert verify_nkey_signature(PUBLIC, NONCE, _sig(NONCE.encode()))
    padded = base64.b64encode(KP.sign(NONCE.encode())).decode()
    assert verify_nkey_signature(PUBLIC, NONCE, padded)
    assert not verify_nkey_signature(PUBLIC, NONCE, _sig(b"other"))
    assert not verify_nkey_signature(PUBLIC, NONCE, "")
    assert authenticate(CFG, {"nkey": PUBLIC, "sig": _sig(NONCE.encode())}, NONCE) is not None
    assert authenticate(CFG, {"nkey": PUBLIC, "sig": _sig(b"x")}, NONCE) is None
    assert authenticate(CFG, {"nkey": PUBLIC}, NONCE) is None


def test_token_and_no_auth_user() -> None:
    token = ClientAuthConfig(token="tok")
    assert authenticate(token, {"auth_token": "tok"}, "") is not None
    assert authenticate(token, {"auth_token": "to"}, "") is None
    assert authenticate(token, {}, "") is None
    cfg = ClientAuthConfig(
        users=(UserEntry(user="guest", password="g"), UserEntry(user="u", password="p")),
        no_auth_user="guest",
    )
    who = authenticate(cfg, {}, "")
    assert who is not None and who.user == "guest"
    assert authenticate(cfg, {"pass": "g"}, "") is None  # credentials given: no fallback
    assert authenticate(cfg, {"user": "u", "pass": "x"}, "") is None
    assert login_no_auth_user(cfg) is not None
    assert login_no_auth_user(CFG) is None


# --------------------------------------------------------------------------- permissions

TOKENS = st.sampled_from(["a", "b", "c", "*", ">"])
SUBJECTS = st.lists(TOKENS, min_size=1, max_size=4).map(".".join)
LITERALS = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4).map(".".join)


def _naive_match(pattern: str, subject: str) -> bool:
    """Token by token; the subject's own wildcards are literal tokens (as nats-server)."""
    p, s = pattern.split("."), subject.split(".")
    for i, tok in enumerate(p):
        if tok == ">":
            return len(s) > i
        if i >= len(s) or (tok != "*" and tok != s[i]):
            return False
    return len(p) == len(s)


def _valid(pattern: str) -> bool:
    toks = pattern.split(".")
    return ">" not in toks[:-1]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(SUBJECTS.filter(_valid), max_size=3),
    st.lists(SUBJECTS.filter(_valid), max_size=3),
    SUBJECTS,
)
def test_publish_matcher_agrees_with_naive(allow: list[str], deny: list[str], subject: str) -> None:
    perms = Permissions(
        publish=SubjectPermission(allow=tuple(allow) or None, deny=tuple(deny)),
        subscribe=SubjectPermission(allow=tuple(allow) or None, deny=tuple(deny)),
    )
    checker = PermissionChecker(perms, lambda: 0.0)
    want = (not allow or any(_naive_match(a, subject) for a in allow)) and not any(
        _naive_match(d, subject) for d in deny
    )
    assert checker.can_publish(subject) is want
    assert checker.can_publish(subject) is want  # cached
    if _valid(subject):
        assert checker.can_subscribe(subject, None) is want


def test_queue_entries_and_deny_filter() -> None:
    perms = Permissions(subscribe=SubjectPermission(allow=("foo.*", "w.* grp"), deny=("foo.s",)))
    checker = PermissionChecker(perms, lambda: 0.0)
    assert checker.can_subscribe("foo.x", None)
    assert not checker.can_subscribe("foo.s", None)
    assert not checker.can_subscribe("w.x", None)
    assert checker.can_subscribe("w.x", "grp")
    assert not checker.can_subscribe("w.x", "other")
    assert not checker.deny_filter
    assert checker.on_deliver("foo.s", None)
    assert checker.can_subscribe("foo.>", None)  # the allow's '*' takes '>' as a token
    assert checker.deny_filter
    assert not checker.on_deliver("foo.s", None)
    assert checker.on_deliver("foo.ok", None)


def test_allow_responses_max_and_expiry() -> None:
    now = [0.0]
    perms = Permissions(allow_responses=ResponsePermission(max_msgs=2, expires_s=1.0))
    checker = PermissionChecker(perms, lambda: now[0])
    assert not checker.can_publish("_INBOX.r")  # allow_responses turns the blanket allow off
    checker.on_deliver("req.a", "_INBOX.r")
    assert checker.can_publish("_INBOX.r")
    assert checker.can_publish("_INBOX.r")
    assert not checker.can_publish("_INBOX.r")
    checker.on_deliver("req.b", "_INBOX.late")
    now[0] = 1.5
    assert not checker.can_publish("_INBOX.late")


# --------------------------------------------------------------------------- session


def _session(cfg: ClientAuthConfig) -> ps.ClientSession:
    session = ps.ClientSession({"headers": True}, 1024 * 1024)
    session.require_auth(cfg, NONCE, lambda: 0.0)
    return session


def _drain(session: ps.ClientSession) -> list[ps.Action]:
    out: list[ps.Action] = []
    while (action := session.next_action()) is not None:
        out.append(action)
    return out


def test_session_refuses_ops_before_connect_and_bad_credentials() -> None:
    session = _session(CFG)
    session.receive_data(b"PING\r\n")
    assert _drain(session) == [ps.Close(ps.ERR_AUTHORIZATION_VIOLATION)]
    session = _session(CFG)
    session.receive_data(b'CONNECT {"user":"alice","pass":"bad"}\r\n')
    assert _drain(session) == [ps.Close(ps.ERR_AUTHORIZATION_VIOLATION)]


def test_session_permission_errors() -> None:
    session = _session(CFG)
    assert session.awaiting_auth
    session.receive_data(
        b'CONNECT {"user":"alice","pass":"secret","verbose":false}\r\n'
        b"PUB foo.bar 1\r\nx\r\nPUB foo.ok 1\r\ny\r\n"
    )
    actions = _drain(session)
    assert not session.awaiting_auth
    assert isinstance(actions[0], ps.Authorized) and actions[0].perms is not None
    sends = [a.data for a in actions if isinstance(a, ps.Send)]
    assert sends == [b"-ERR 'Permissions Violation for Publish to \"foo.bar\"'\r\n"]
    assert [a.subject for a in actions if isinstance(a, ps.Pub)] == ["foo.ok"]


def test_queue_names_with_wildcards() -> None:
    """nats-server queueMatches: a permission's queue name may hold wildcard tokens."""
    perms = Permissions(
        subscribe=SubjectPermission(allow=("foo.* v1.*", "bar.>"), deny=("bar.* g.>",))
    )
    checker = PermissionChecker(perms, lambda: 0.0)
    assert checker.can_subscribe("foo.x", "v1.a")
    assert checker.can_subscribe("foo.x", "v1.*")  # the literal name matches too
    assert not checker.can_subscribe("foo.x", "v1")
    assert not checker.can_subscribe("foo.x", "v1.>")  # '>' is broader than '*'
    assert not checker.can_subscribe("bar.x", "g.a.b")
    assert checker.can_subscribe("bar.x", "h")


def test_no_auth_user_edge_cases() -> None:
    hashed = ClientAuthConfig(users=(UserEntry(user="guest", password=HASH),), no_auth_user="guest")
    # nats-server compares the stored password with itself: a bcrypt hash never matches
    assert authenticate(hashed, {}, NONCE) is None
    assert login_no_auth_user(hashed) is None
    assert authenticate(hashed, {"user": "guest", "pass": "bpass"}, NONCE) is not None
    plain = ClientAuthConfig(users=(UserEntry(user="guest", password="g"),), no_auth_user="guest")
    # without nkey users an nkey in the CONNECT is no credential (nats-server)
    who = authenticate(plain, {"nkey": PUBLIC}, NONCE)
    assert isinstance(who, Authenticated) and who.user == "guest"
    with_nkeys = ClientAuthConfig(
        users=(*plain.users, UserEntry(nkey=PUBLIC)), no_auth_user="guest"
    )
    assert authenticate(with_nkeys, {"nkey": PUBLIC}, NONCE) is None  # unsigned
    as_nkey = ClientAuthConfig(users=(UserEntry(nkey=PUBLIC),), no_auth_user=PUBLIC)
    who = authenticate(as_nkey, {}, NONCE)  # no signature needed for the no_auth_user nkey
    assert isinstance(who, Authenticated) and who.user == PUBLIC
    assert login_no_auth_user(as_nkey) is None  # a first line other than CONNECT: users only


def test_deferred_bcrypt_check_holds_the_session() -> None:
    check = authenticate(CFG, {"user": "bob", "pass": "bpass"}, NONCE, defer_bcrypt=True)
    assert isinstance(check, PasswordCheck) and check.matches()
    assert "bpass" not in repr(check)
    assert authenticate(CFG, {"user": "alice", "pass": "secret"}, NONCE, defer_bcrypt=True)
    for ok in (True, False):
        session = ps.ClientSession({"headers": True}, 1024 * 1024)
        session.require_auth(CFG, NONCE, lambda: 0.0, defer_bcrypt=True)
        session.receive_data(b'CONNECT {"user":"bob","pass":"bpass","verbose":false}\r\nPING\r\n')
        actions = _drain(session)
        assert len(actions) == 1 and isinstance(actions[0], ps.CheckPassword)
        assert session.awaiting_auth  # the auth timeout still runs meanwhile
        session.receive_data(b"PUB foo 1\r\nx\r\n")
        assert _drain(session) == []  # nothing after the CONNECT runs before the answer
        session.password_checked(ok)
        actions = _drain(session)
        if ok:
            assert not session.awaiting_auth
            assert isinstance(actions[0], ps.Authorized) and actions[0].user == "bob"
            assert isinstance(actions[1], ps.Connected)
            assert any(isinstance(a, ps.Send) and a.data.startswith(b"PONG") for a in actions)
            assert [a.subject for a in actions if isinstance(a, ps.Pub)] == ["foo"]
        else:
            assert actions == [ps.Close(ps.ERR_AUTHORIZATION_VIOLATION)]
