"""The security settings of a node: client authorization, client TLS, route credentials and TLS.

Read from nats-server's config blocks (``authorization``, ``no_auth_user``, ``tls``,
``cluster { authorization {} tls {} }``) and from route URLs with user info
(``nats://user:pass@host:port``). A value of the wrong type or a block that cannot work (a
``no_auth_user`` that is not a user, a TLS block without its key) stops the server at start.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from cluster.config_file import ConfigError, ConfMap
from protocol.auth_config import (
    AUTH_TIMEOUT_S,
    ClientAuthConfig,
    Permissions,
    ResponsePermission,
    SubjectPermission,
    UserEntry,
)
from protocol.gojson import go_quote
from protocol.subjects import is_valid_subject
from protocol.timefmt import parse_go_duration

TLS_TIMEOUT_S = 2.0  # nats-server TLS_TIMEOUT: the handshake must finish this soon
# nats-server DEFAULT_TLS_HANDSHAKE_FIRST_FALLBACK_DELAY: handshake_first "auto" waits this long
# for a client's first bytes before it sends its INFO in the clear instead
TLS_HANDSHAKE_FIRST_FALLBACK_S = 0.05
ROUTE_AUTH_TIMEOUT_S = 2.0  # a route that has not authenticated by then is dropped


@dataclass(frozen=True)
class TLSConfig:
    cert_file: Path
    key_file: Path
    ca_file: Path | None = None
    verify: bool = False  # require and verify a client (or peer) certificate
    timeout_s: float = TLS_TIMEOUT_S
    insecure: bool = False  # routes only: do not verify the peer's certificate (testing)
    # clients only: the TLS handshake comes before the INFO; with a fallback, a client silent
    # that long gets the INFO in the clear and upgrades after it as usual
    handshake_first: bool = False
    handshake_first_fallback_s: float = 0.0


@dataclass(frozen=True)
class RouteAuthConfig:
    """What a peer must present on the cluster port (and what this node presents when a route
    URL carries no credentials of its own)."""

    user: str = ""
    password: str = ""
    token: str = ""
    timeout_s: float = ROUTE_AUTH_TIMEOUT_S

    @property
    def enabled(self) -> bool:
        return bool(self.user or self.token)


def find_key(block: ConfMap, *names: str) -> tuple[str, Any] | None:
    """The first key (as written) and value of ``block`` named one of ``names`` (lower case):
    keys compare case-insensitively, as in nats-server."""
    for key, value in block.items():
        if key.lower() in names:
            return key, value
    return None


def _get(block: ConfMap, *names: str) -> Any:
    found = find_key(block, *names)
    return None if found is None else found[1]


def block_error(block: ConfMap, key: str, msg: str) -> ConfigError:
    """``msg`` at the line of ``key`` in ``block`` (the block's own line when it has none)."""
    found = find_key(block, key)
    line = block.line if found is None else block.line_of(found[0])
    return ConfigError(f"config line {line}: {msg}")


def _string(block: ConfMap, *names: str) -> str:
    value = _get(block, *names)
    if value is None:
        return ""
    if isinstance(value, bool | dict | list):
        raise block_error(block, names[0], f"{names[0]!r} must be a string")
    return str(value)


def seconds(value: object, what: str = "duration") -> float:
    """nats-server takes a number of seconds or a Go duration string."""
    if isinstance(value, bool):
        raise ConfigError(f"invalid {what} {value!r}")
    if isinstance(value, int | float):
        return float(value)
    try:
        return parse_go_duration(str(value)) / 1e9
    except ValueError as exc:
        raise ConfigError(f"invalid {what} {value!r}: {exc}") from exc


def _timeout(block: ConfMap, default: float) -> float:
    value = _get(block, "timeout")
    if value is None:
        return default
    try:
        result = seconds(value, "timeout")
    except ConfigError as exc:
        raise block_error(block, "timeout", str(exc)) from None
    if result <= 0:
        raise block_error(block, "timeout", f"timeout must be positive, not {value!r}")
    return result


# --- permissions ---------------------------------------------------------------------------------


def _perm_subject_problem(subject: str, allow_queue: bool) -> str | None:
    """nats-server ``checkPermSubjectArray``: what is wrong with a permission subject (a
    subscribe entry may be ``"subject queue"``), in its words; None if nothing. An unusable entry
    must stop the server: skipped, a deny would silently allow."""
    if is_valid_subject(subject):
        return None
    parts = subject.split()
    if not allow_queue or len(parts) != 2:
        return f"subject {go_quote(subject)} is not a valid subject"
    if not is_valid_subject(parts[0]):
        return f"subject {go_quote(parts[0])} is not a valid subject"
    if not is_valid_subject(parts[1]):
        return f"queue {go_quote(parts[1])} is not a valid queue"
    return None


def _subjects(value: Any, block: ConfMap, key: str, allow_queue: bool) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if not isinstance(item, str) or not item:
            raise block_error(
                block, key, f"{key!r}: subjects must be non-empty strings, not {item!r}"
            )
        problem = _perm_subject_problem(item, allow_queue)
        if problem is not None:
            raise block_error(block, key, problem)
        out.append(item)
    return tuple(out)


def _subject_permission(value: Any, block: ConfMap, key: str) -> SubjectPermission:
    queues = key == "subscribe"
    if isinstance(value, ConfMap):
        for k in value:
            if k.lower() not in ("allow", "deny"):
                raise ConfigError(
                    f"config line {value.line_of(k)}: unknown field {k!r} in {key} permissions"
                )
        allow = _get(value, "allow")
        deny = _get(value, "deny")
        return SubjectPermission(
            allow=None if allow is None else _subjects(allow, value, "allow", queues),
            deny=() if deny is None else _subjects(deny, value, "deny", queues),
        )
    # a bare subject or list means "allow these" (nats-server)
    return SubjectPermission(allow=_subjects(value, block, key, queues))


_RESPONSE_MAX_KEYS = ("max", "max_msgs", "max_messages", "max_responses")  # nats-server's names
_RESPONSE_EXPIRES_KEYS = ("expires", "expiration", "ttl")


def _response_permission(value: Any, block: ConfMap) -> ResponsePermission | None:
    """nats-server ``parseAllowResponses``: 0 means the default (1 message, 2 minutes), a
    negative value means no limit; ``expires`` must be a duration string."""
    if value is False:
        return None
    if value is True:
        return ResponsePermission()
    if not isinstance(value, ConfMap):
        raise block_error(
            block, "allow_responses", "allow_responses must be true, false or a block"
        )
    max_msgs = ResponsePermission().max_msgs
    expires_s = 0.0
    for k, v in value.items():
        name = k.lower()
        if name in _RESPONSE_MAX_KEYS:
            if type(v) is not int:
                raise block_error(value, name, f"allow_responses {k} must be an integer, not {v!r}")
            if v != 0:
                max_msgs = v
        elif name in _RESPONSE_EXPIRES_KEYS:
            if not isinstance(v, str):
                raise block_error(value, name, "error parsing expires, not a duration string")
            try:
                expires_ns = parse_go_duration(v)
            except ValueError as exc:
                raise block_error(value, name, f"error parsing expires: {exc}") from None
            if expires_ns != 0:
                expires_s = expires_ns / 1e9
        else:
            raise ConfigError(
                f"config line {value.line_of(k)}: unknown field {k!r} in allow_responses"
            )
    return ResponsePermission(max_msgs=max_msgs, expires_s=expires_s)


def permissions_from(block: Any, where: ConfMap, key: str) -> Permissions:
    if not isinstance(block, ConfMap):
        raise block_error(where, key, f"{key!r} must be a block {{ ... }}")
    # import/export: nats-server's route-permission names, accepted for clients too
    publish = _get(block, "publish", "pub", "import")
    subscribe = _get(block, "subscribe", "sub", "export")
    responses = _get(block, "allow_responses", "publish_allow_responses")
    return Permissions(
        publish=SubjectPermission()
        if publish is None
        else _subject_permission(publish, block, "publish"),
        subscribe=SubjectPermission()
        if subscribe is None
        else _subject_permission(subscribe, block, "subscribe"),
        allow_responses=None if responses is None else _response_permission(responses, block),
    )


# --- client authorization ------------------------------------------------------------------------


def _user_entry(item: ConfMap) -> UserEntry:
    nkey = _string(item, "nkey")
    user = _string(item, "user", "username")
    password = _string(item, "password", "pass")
    perms = _get(item, "permissions", "permission")
    if nkey:
        if user or password:
            raise block_error(item, "nkey", "an nkey user has no user name or password")
        if not (nkey.startswith("U") and len(nkey) == 56):
            raise block_error(item, "nkey", f"not a user nkey (U..., 56 characters): {nkey!r}")
    elif not user:
        raise ConfigError(f"config line {item.line}: a user needs 'user' (or 'nkey')")
    return UserEntry(
        user=user,
        password=password,
        nkey=nkey,
        permissions=None if perms is None else permissions_from(perms, item, "permissions"),
    )


def client_auth_from(conf: ConfMap) -> ClientAuthConfig:
    block = _get(conf, "authorization")
    no_auth_user = _string(conf, "no_auth_user")
    if block is None:
        if no_auth_user:
            raise block_error(
                conf, "no_auth_user", "no_auth_user needs an authorization block with users"
            )
        return ClientAuthConfig()
    assert isinstance(block, ConfMap)  # the schema checked it is a block
    users: list[UserEntry] = []
    single = _string(block, "user", "username")
    token = _string(block, "token")
    raw_users = _get(block, "users")
    perms = _get(block, "permissions", "permission")
    single_perms = None if perms is None else permissions_from(perms, block, "permissions")
    if single:
        if token:
            raise block_error(block, "token", "authorization: set either user/password or token")
        users.append(
            UserEntry(
                user=single,
                password=_string(block, "password", "pass"),
                permissions=single_perms,
            )
        )
    if raw_users is not None:
        if single or token:
            raise block_error(
                block, "users", "authorization: 'users' cannot be combined with user/token"
            )
        for item in raw_users if isinstance(raw_users, list) else [raw_users]:
            users.append(_user_entry(item))
    names = [u.user or u.nkey for u in users]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise block_error(block, "users", f"duplicate user {duplicate!r}")
    defaults = _get(block, "default_permissions", "default_permission")
    if perms is not None and not single:
        # nats-server reads 'permissions' here as the default permissions; with both it keeps
        # whichever its map iteration meets last, so both together are refused
        if defaults is not None:
            raise block_error(block, "permissions", "set either permissions or default_permissions")
        defaults = perms
    auth = ClientAuthConfig(
        users=tuple(users),
        token=token,
        timeout_s=_timeout(block, AUTH_TIMEOUT_S),
        no_auth_user=no_auth_user,
        default_permissions=None
        if defaults is None
        else permissions_from(defaults, block, "default_permissions"),
    )
    if not auth.enabled:
        raise ConfigError(
            f"config line {block.line}: authorization block sets no user, users or token"
        )
    if no_auth_user and single:  # nats-server: the single user/password form has no users
        raise block_error(
            conf,
            "no_auth_user",
            f"no_auth_user: {go_quote(no_auth_user)} present, but users/nkeys are not defined",
        )
    if no_auth_user and no_auth_user not in {u.user or u.nkey for u in users}:
        raise block_error(
            conf,
            "no_auth_user",
            f"no_auth_user {no_auth_user!r} is not a configured user or nkey",
        )
    return auth


# --- TLS -----------------------------------------------------------------------------------------


def tls_from(block: Any, where: ConfMap, key: str = "tls") -> TLSConfig:
    if not isinstance(block, ConfMap):
        raise block_error(where, key, f"{key!r} must be a block {{ ... }}")
    cert = _string(block, "cert_file")
    keyf = _string(block, "key_file")
    if not cert or not keyf:
        raise ConfigError(f"config line {block.line}: {key} needs cert_file and key_file")
    ca = _string(block, "ca_file")
    for name, path in (("cert_file", cert), ("key_file", keyf), ("ca_file", ca)):
        if path and not Path(path).is_file():
            raise block_error(block, name, f"{key} {name}: no such file {path!r}")
    verify = _get(block, "verify")
    insecure = _get(block, "insecure")
    for name, flag in (("verify", verify), ("insecure", insecure)):
        if flag is not None and not isinstance(flag, bool):
            raise block_error(block, name, f"{key} {name} must be true or false")
    if verify and not ca:
        raise block_error(
            block, "verify", f"{key} verify needs ca_file to check certificates against"
        )
    first, fallback_s = _handshake_first(block)
    return TLSConfig(
        cert_file=Path(cert),
        key_file=Path(keyf),
        ca_file=Path(ca) if ca else None,
        verify=bool(verify),
        timeout_s=_timeout(block, TLS_TIMEOUT_S),
        insecure=bool(insecure),
        handshake_first=first,
        handshake_first_fallback_s=fallback_s,
    )


HANDSHAKE_FIRST_KEYS = ("handshake_first", "first", "immediate")  # nats-server's three names


def _handshake_first(block: ConfMap) -> tuple[bool, float]:
    """``handshake_first``: a boolean, or a string as nats-server reads it ("true"/"on",
    "false"/"off", "auto"/"auto_fallback" for the default fallback delay, or a Go duration for
    that delay)."""
    found = find_key(block, *HANDSHAKE_FIRST_KEYS)
    if found is None:
        return False, 0.0
    key, value = found
    if isinstance(value, bool):
        return value, 0.0
    if not isinstance(value, str):
        kind = {int: "int64", float: "float64"}.get(type(value), type(value).__name__)
        raise block_error(block, key, f'field "{key}" should be a boolean or a string, got {kind}')
    word = value.lower()
    if word in ("true", "on"):
        return True, 0.0
    if word in ("false", "off"):
        return False, 0.0
    if word in ("auto", "auto_fallback"):
        return True, TLS_HANDSHAKE_FIRST_FALLBACK_S
    try:
        delay_ns = parse_go_duration(value)
    except ValueError:
        raise block_error(block, key, f'field "{key}"\'s value "{value}" is invalid') from None
    return True, max(delay_ns, 0) / 1e9


def server_ssl_context(tls: TLSConfig, *, verify_clients: bool | None = None) -> ssl.SSLContext:
    """The server side of a TLS listener: its certificate, and with ``verify`` a certificate
    every client must present, signed by ``ca_file``. ``verify_clients`` overrides ``verify``
    (the HTTPS monitoring port never asks for one, as in nats-server)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)  # TLS 1.2 at least, as Go's
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.ca_file is not None:
        ctx.load_verify_locations(tls.ca_file)
    verify = tls.verify if verify_clients is None else verify_clients
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    return ctx


# --- routes --------------------------------------------------------------------------------------


def route_auth_from(cluster_block: ConfMap | None, listen_url: str | None) -> RouteAuthConfig:
    """``cluster { authorization { user password | token timeout } }``, or the user info of the
    ``--cluster nats://user:pass@host:port`` listen URL (nats-server's flag form)."""
    block = _get(cluster_block, "authorization") if cluster_block is not None else None
    url_user, url_pass = route_url_credentials(listen_url) if listen_url else ("", "")
    if block is None:
        return RouteAuthConfig(user=url_user, password=url_pass)
    assert isinstance(block, ConfMap)
    user = _string(block, "user", "username")
    token = _string(block, "token")
    if user and token:
        raise block_error(
            block, "token", "cluster authorization: set either user/password or token"
        )
    if not user and not token:
        raise ConfigError(
            f"config line {block.line}: cluster authorization needs user/password or token"
        )
    return RouteAuthConfig(
        user=user or url_user,
        password=_string(block, "password", "pass") or url_pass,
        token=token,
        timeout_s=_timeout(block, ROUTE_AUTH_TIMEOUT_S),
    )


def route_url_credentials(url: str) -> tuple[str, str]:
    """(user, password) from ``nats://user:pass@host:port``; ("", "") without user info.

    Split by hand at the last ``@``: a generated password often holds ``/``, ``?`` or ``#``,
    which a URL parser takes for the start of a path, query or fragment — and then finds no
    credentials at all, which would silently turn route authorization off."""
    rest = url.split("://", 1)[1] if "://" in url else url
    userinfo, at, _hostport = rest.rpartition("@")
    if not at:
        return "", ""
    user, _, password = userinfo.partition(":")
    return unquote(user), unquote(password)
