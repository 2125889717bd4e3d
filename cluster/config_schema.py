"""Which configuration keys jetraft understands: anything else stops the server at start.

nats-server refuses an unknown key (``unknown field``) and so does jetraft, naming the key and its
line: a misspelled ``authorisation`` block must not leave a server running open. Keys that
nats-server knows but jetraft does not implement (accounts, operator mode, leaf nodes, ...) are
refused with a message saying so, never accepted and ignored. Keys compare case-insensitively,
as nats-server's do.

Values are checked where they are turned into options (cluster/cli.py, cluster/security_config.py,
cluster/batching.py); this module only knows the shape of the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cluster.config_file import ConfigError, ConfMap


@dataclass(frozen=True)
class Unsupported:
    """A key nats-server knows that jetraft refuses; ``why`` completes the error message."""

    why: str


@dataclass(frozen=True)
class ListOf:
    """An array whose items are blocks of this shape."""

    block: dict[str, Any]


# a value of None: any scalar or array (its type is checked where it is used)
_NO_ACCOUNTS = Unsupported("jetraft has one account; remove the block (issue: multi-account)")
_NO_OPERATOR = Unsupported("operator/JWT mode is not built; use the authorization block")
_NO_TOPOLOGY = Unsupported("jetraft speaks only client and cluster (route) connections")

PERMISSIONS: dict[str, Any] = {
    "publish": None,
    "pub": None,
    "subscribe": None,
    "sub": None,
    "import": None,  # nats-server's route names for publish/subscribe, taken for clients too
    "export": None,
    "allow_responses": None,
    "publish_allow_responses": None,
}

USER: dict[str, Any] = {
    "user": None,
    "username": None,
    "password": None,
    "pass": None,
    "nkey": None,
    "permissions": PERMISSIONS,
    "permission": PERMISSIONS,
    "account": _NO_ACCOUNTS,
    "allowed_connection_types": Unsupported("jetraft has only client connections"),
}

CLIENT_AUTHORIZATION: dict[str, Any] = {
    "user": None,
    "username": None,
    "password": None,
    "pass": None,
    "token": None,
    "timeout": None,
    "users": ListOf(USER),
    "default_permissions": PERMISSIONS,
    "default_permission": PERMISSIONS,
    "permissions": PERMISSIONS,
    "auth_callout": Unsupported("auth callout is not built"),
}

_TLS_COMMON: dict[str, Any] = {
    "cert_file": None,
    "key_file": None,
    "ca_file": None,
    "verify": None,
    "timeout": None,
}

# clients may handshake before the INFO (cluster/security_config.py _handshake_first)
TLS: dict[str, Any] = {**_TLS_COMMON, "handshake_first": None, "first": None, "immediate": None}

ROUTE_TLS: dict[str, Any] = {**_TLS_COMMON, "insecure": None}

# cluster/websocket.py reads these; the websocket-only authentication nats-server offers is not
# built (the client authorization block applies to websocket clients as to the others)
_NO_WS_AUTH = Unsupported(
    "websocket-specific authentication is not built; websocket clients use the authorization block"
)
WEBSOCKET: dict[str, Any] = {
    "listen": None,
    "port": None,
    "host": None,
    "net": None,
    "no_tls": None,
    "tls": _TLS_COMMON,
    "compression": None,
    "compress": None,
    "handshake_timeout": None,
    "same_origin": None,
    "allowed_origins": None,
    "allowed_origin": None,
    "allow_origins": None,
    "allow_origin": None,
    "origins": None,
    "origin": None,
    "advertise": Unsupported("websocket connect URLs are not advertised"),
    "authorization": _NO_WS_AUTH,
    "authentication": _NO_WS_AUTH,
    "jwt_cookie": _NO_WS_AUTH,
    "user_cookie": _NO_WS_AUTH,
    "pass_cookie": _NO_WS_AUTH,
    "token_cookie": _NO_WS_AUTH,
    "no_auth_user": _NO_WS_AUTH,
    "headers": Unsupported("custom websocket response headers are not built"),
    "ping_interval": Unsupported("a websocket ping interval of its own is not built"),
}

ROUTE_AUTHORIZATION: dict[str, Any] = {
    "user": None,
    "username": None,
    "password": None,
    "pass": None,
    "token": None,
    "timeout": None,
}

CLUSTER: dict[str, Any] = {
    "name": None,
    "listen": None,
    "host": None,
    "port": None,
    "routes": None,
    "no_advertise": None,
    "authorization": ROUTE_AUTHORIZATION,
    "tls": ROUTE_TLS,
}

JETSTREAM: dict[str, Any] = {
    "store_dir": None,
    "storedir": None,
    "enabled": None,
    "enable": None,
    # the batch block's own keys are checked by cluster/batching.py (it names the bad one)
    "limits": {"batch": None},
}

SERVER: dict[str, Any] = {
    "listen": None,
    "host": None,
    "net": None,
    "port": None,
    "server_name": None,
    "client_advertise": None,
    "store_dir": None,
    "http_port": None,
    "monitor_port": None,
    "http": None,
    "https_port": None,
    "max_payload": None,
    "ping_interval": None,
    "ping_max": None,
    "debug": None,
    "trace": None,
    "logtime": None,
    "pid_file": None,
    "jetstream": JETSTREAM,
    "cluster": CLUSTER,
    "authorization": CLIENT_AUTHORIZATION,
    "no_auth_user": None,
    "tls": TLS,
    "max_connections": None,
    "max_conn": None,
    "max_pending": None,
    "max_control_line": None,
    "write_deadline": None,
    "lame_duck_duration": None,
    "lame_duck_grace_period": None,
    "accounts": _NO_ACCOUNTS,
    "system_account": _NO_ACCOUNTS,
    "system": _NO_ACCOUNTS,
    "operator": _NO_OPERATOR,
    "operators": _NO_OPERATOR,
    "trusted": _NO_OPERATOR,
    "trusted_keys": _NO_OPERATOR,
    "resolver": _NO_OPERATOR,
    "resolver_preload": _NO_OPERATOR,
    "leafnodes": _NO_TOPOLOGY,
    "leaf": _NO_TOPOLOGY,
    "gateway": _NO_TOPOLOGY,
    "websocket": WEBSOCKET,
    "ws": WEBSOCKET,
    "mqtt": _NO_TOPOLOGY,
}


def check_config(conf: ConfMap, schema: dict[str, Any] = SERVER, where: str = "") -> None:
    """Raise ConfigError naming the first key (in file order) the schema does not accept."""
    for key, value in conf.items():
        spec = schema.get(key.lower(), _MISSING)
        path = f"{where}{key}"
        line = conf.line_of(key)
        if spec is _MISSING:
            raise ConfigError(f"config line {line}: unknown field {path!r}")
        if isinstance(spec, Unsupported):
            raise ConfigError(f"config line {line}: {path!r} is not supported: {spec.why}")
        if isinstance(spec, dict):
            if isinstance(value, ConfMap):
                check_config(value, spec, f"{path}.")
            elif key.lower() == "jetstream" and not isinstance(value, dict):
                continue  # `jetstream: enabled` is a scalar form, checked with the options
            else:
                raise ConfigError(f"config line {line}: {path!r} must be a block {{ ... }}")
        elif isinstance(spec, ListOf):
            items = value if isinstance(value, list) else [value]
            for n, item in enumerate(items):
                if not isinstance(item, ConfMap):
                    raise ConfigError(f"config line {line}: {path}[{n}] must be a block {{ ... }}")
                check_config(item, spec.block, f"{path}[{n}].")


_MISSING = object()
