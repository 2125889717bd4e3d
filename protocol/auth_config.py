"""Who may connect and what they may do: the client authorization settings, as plain data.

The shapes follow nats-server's ``authorization`` block and ``no_auth_user``: one user/password
or a token, or a list of users (password in clear or as a bcrypt hash, or an nkey) each with
optional permissions. The config file is turned into these by cluster/security_config.py; the
decisions made from them live in protocol/auth.py (sans-I/O, so they are tested without sockets).

Must never: hold sockets or clocks; a permission absent here means "allowed", as in nats-server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

AUTH_TIMEOUT_S = 2.0  # nats-server AUTH_TIMEOUT: CONNECT must arrive this soon when auth is on
BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")  # a password that starts so is a bcrypt hash


@dataclass(frozen=True)
class SubjectPermission:
    """``allow``: None means every subject is allowed; ``deny`` wins over ``allow``."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResponsePermission:
    """``allow_responses``: publish to reply subjects of requests this user received."""

    max_msgs: int = 1  # nats-server DEFAULT_ALLOW_RESPONSE_MAX_MSGS; negative: no limit
    # 0: nats-server's DEFAULT_ALLOW_RESPONSE_EXPIRATION (2 min); negative: never expires
    expires_s: float = 0.0


@dataclass(frozen=True)
class Permissions:
    publish: SubjectPermission = field(default_factory=SubjectPermission)
    subscribe: SubjectPermission = field(default_factory=SubjectPermission)
    allow_responses: ResponsePermission | None = None


@dataclass(frozen=True)
class UserEntry:
    """One entry of ``authorization { users: [...] }`` (or the single ``user``/``password``).

    ``nkey`` set means an nkey user (public key ``U...``): no user name or password."""

    user: str = ""
    password: str = ""  # clear text, or a bcrypt hash (BCRYPT_PREFIXES)
    nkey: str = ""
    permissions: Permissions | None = None


@dataclass(frozen=True)
class ClientAuthConfig:
    users: tuple[UserEntry, ...] = ()
    token: str = ""
    timeout_s: float = AUTH_TIMEOUT_S
    # the user a client that presents no credentials is logged in as (must be in ``users``)
    no_auth_user: str = ""
    default_permissions: Permissions | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.users or self.token)

    @property
    def uses_nkeys(self) -> bool:
        return any(u.nkey for u in self.users)
