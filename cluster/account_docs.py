"""The documents of nats-server's account and user system requests, for jetraft's one account
(``$G``): what ``$SYS.REQ.ACCOUNT.<account>.<KIND>`` answers of an account besides the
monitoring documents (nats-server's ``AccountStat``, ``AccountStatz``, ``AccountInfo`` and the
account's JetStream ``AccountDetail``) and what ``$SYS.REQ.USER.INFO`` answers of the requesting
connection (``UserInfo``). ``cluster/sys_requests.py`` subscribes, decodes the options and wraps
these in nats-server's envelopes.

The one account carries everything a node does (it plays the system account's part too), so its
traffic is the server's: its clients' and its routes'. A client's permissions are the ones it
logged in with (protocol/auth.py): its user's, else the configured default ones; they are
listed as nats-server's ``publicPermissions`` lists them (each list in the config's order,
nats-server's order is its sublist's and varies).

Must never: change state, or answer for an account jetraft does not have.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

from cluster.jsz import ACCOUNT, JszError, JszOptions, jsz
from cluster.monitoring import MonitoredNode, accountz
from protocol.auth import DEFAULT_RESPONSE_EXPIRES_S
from protocol.auth_config import ClientAuthConfig, Permissions, SubjectPermission
from protocol.gojson import go_quote
from protocol.timefmt import format_rfc3339nano

ACCOUNT_CONNS_TYPE: Final = "io.nats.server.advisory.v1.account_connections"
JETSTREAM_NOT_ENABLED: Final = "jetstream not enabled"  # nats-server JszAccount's text
NS_PER_S: Final = 1_000_000_000


def _msg_bytes(msgs: int, size: int) -> dict[str, int]:
    return {"msgs": msgs, "bytes": size}


def _data_stats(clients: tuple[int, int], routes: tuple[int, int]) -> dict[str, Any]:
    """nats-server's ``DataStats``: the total, then gateways, routes and leaf nodes."""
    out: dict[str, Any] = _msg_bytes(clients[0] + routes[0], clients[1] + routes[1])
    out["gateways"] = _msg_bytes(0, 0)
    out["routes"] = _msg_bytes(*routes)
    out["leafs"] = _msg_bytes(0, 0)
    return out


def account_stat(node: MonitoredNode) -> dict[str, Any]:
    """nats-server's ``AccountStat`` of the one account: its local client connections (no leaf
    nodes), its subscriptions and its traffic (the server's)."""
    counters = node.counters
    conns = list(node.connections.values())
    links = node.routes.link_stats() if node.routes is not None else []
    client_in = (
        counters.closed_in_msgs + sum(c.stats.in_msgs for c in conns),
        counters.closed_in_bytes + sum(c.stats.in_bytes for c in conns),
    )
    client_out = (
        counters.closed_out_msgs + sum(c.stats.out_msgs for c in conns),
        counters.closed_out_bytes + sum(c.stats.out_bytes for c in conns),
    )
    route_in = (sum(r.in_msgs for r in links), sum(r.in_bytes for r in links))
    route_out = (sum(r.out_msgs for r in links), sum(r.out_bytes for r in links))
    return {
        "acc": ACCOUNT,
        "name": ACCOUNT,
        "conns": len(conns),
        "leafnodes": 0,
        "total_conns": len(conns),
        "num_subscriptions": node.router.sublist.count(),
        "sent": _data_stats(client_out, route_out),
        "received": _data_stats(client_in, route_in),
        "slow_consumers": counters.slow_consumers,
    }


def account_statz(
    node: MonitoredNode, accounts: Sequence[str], include_unused: bool
) -> dict[str, Any]:
    """nats-server's ``AccountStatz``: the named accounts jetraft has (every account when none
    is named) that have a local connection, or all of them with ``include_unused``."""
    stats = []
    if not accounts or ACCOUNT in accounts:
        stat = account_stat(node)
        if include_unused or stat["conns"]:
            stats.append(stat)
    return {
        "server_id": node.server_id,
        "now": format_rfc3339nano(time.time_ns()),
        "account_statz": stats,
    }


def account_conns_event(
    node: MonitoredNode, server: dict[str, Any], event_id: str
) -> dict[str, Any]:
    """nats-server's ``AccountNumConns`` event of the one account (what an account's CONNS
    request is answered with): a typed event, the server's info, then the ``AccountStat``."""
    out: dict[str, Any] = {
        "type": ACCOUNT_CONNS_TYPE,
        "id": event_id,
        "timestamp": format_rfc3339nano(time.time_ns()),
        "server": server,
    }
    out.update(account_stat(node))
    return out


def account_info(node: MonitoredNode, account: str) -> dict[str, Any]:
    """nats-server's ``AccountInfo`` (/accountz's ``account_detail``); MonitorError with
    nats-server's text for an account jetraft does not have."""
    detail: dict[str, Any] = accountz(node, account)["account_detail"]
    return detail


def account_jsz(node: MonitoredNode, account: str, opts: JszOptions) -> dict[str, Any]:
    """nats-server's ``JszAccount``: the account's JetStream ``AccountDetail`` (/jsz's
    ``account_details`` entry; consumers only with streams, no leader filter); JszError with
    nats-server's text without JetStream or for an account jetraft does not have."""
    if node.jetstream is None:
        raise JszError(JETSTREAM_NOT_ENABLED)
    if account != ACCOUNT:
        raise JszError(f"account {go_quote(account)} not found")
    options = JszOptions(
        account=ACCOUNT,
        streams=opts.streams,
        consumers=opts.streams and opts.consumers,
        config=opts.config,
        raft=opts.raft,
        stream_leader_only=opts.stream_leader_only,
    )
    doc = jsz(node.jetstream, node.js_setup, options)
    detail: dict[str, Any] = doc["account_details"][0]
    return detail


# --- $SYS.REQ.USER.INFO ---------------------------------------------------------------------------
def login_permissions(auth: ClientAuthConfig, user: str) -> Permissions | None:
    """The permissions a client logged in as ``user`` holds (protocol/auth.py's login): its
    user entry's (``user`` is the entry's name or nkey), else the default ones (also those of a
    token login, whose user is empty)."""
    for entry in auth.users:
        if (entry.user or entry.nkey) == user:
            perms = entry.permissions
            return perms if perms is not None else auth.default_permissions
    return auth.default_permissions


def _subject_permission(perm: SubjectPermission) -> dict[str, list[str]]:
    """nats-server's ``SubjectPermission`` as ``publicPermissions`` lists it: a subscribe
    entry's queue after one space, empty lists left out."""
    out: dict[str, list[str]] = {}
    if perm.allow:
        out["allow"] = [" ".join(entry.split()) for entry in perm.allow]
    if perm.deny:
        out["deny"] = [" ".join(entry.split()) for entry in perm.deny]
    return out


def public_permissions(perms: Permissions | None) -> dict[str, Any]:
    """nats-server's ``Permissions`` of a restricted client: publish and subscribe (empty
    objects when unrestricted) and, with ``allow_responses``, ``responses`` with its defaults
    filled in (1 response, 2 minutes; the time in nanoseconds)."""
    if perms is None:
        return {"publish": {}, "subscribe": {}}
    out: dict[str, Any] = {
        "publish": _subject_permission(perms.publish),
        "subscribe": _subject_permission(perms.subscribe),
    }
    resp = perms.allow_responses
    if resp is not None:
        expires_s = resp.expires_s or DEFAULT_RESPONSE_EXPIRES_S
        out["responses"] = {"max": resp.max_msgs or 1, "ttl": round(expires_s * NS_PER_S)}
    return out


def user_info(auth: ClientAuthConfig, user: str, restricted: bool) -> dict[str, Any]:
    """nats-server's ``UserInfo`` of a client logged in as ``user`` (empty without
    authentication) in the one account; ``permissions`` only for a ``restricted`` client (one
    that holds permissions), no ``expires`` (no JWT users)."""
    out: dict[str, Any] = {"user": user, "account": ACCOUNT, "account_name": ACCOUNT}
    if restricted:
        out["permissions"] = public_permissions(login_permissions(auth, user))
    return out
