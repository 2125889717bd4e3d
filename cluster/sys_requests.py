"""nats-server's system requests, which ``nats server ls|info|check|report``, ``nats account
info`` and other tools send: ``$SYS.REQ.SERVER.PING`` (every server answers with its statsz),
and for each KIND ``$SYS.REQ.SERVER.PING.<KIND>`` (every server answers) and
``$SYS.REQ.SERVER.<id>.<KIND>`` (this server alone); an account's
``$SYS.REQ.ACCOUNT.<account>.<KIND>``; and ``$SYS.REQ.USER.INFO``, the requesting connection's
user and permissions.

nats-server answers them for its system account only (and imports ``$SYS.REQ.USER.INFO``,
``$SYS.REQ.ACCOUNT.PING.CONNZ`` and ``.PING.STATZ`` into every other account). jetraft has one
account and no system account, so that account plays the system account's part, as for the
system account's JetStream subjects (``cluster/admin_api.py``): any client may ask; ``$SYS.>``
is restricted with permissions where that should not be.

Each reply is nats-server's: ``{"server": <ServerInfo>, "data": <the endpoint's document>}``
with the document the HTTP endpoint serves (built by ``cluster/monitoring.py`` and
``cluster/jsz.py``; an account's own by ``cluster/account_docs.py``), the request body as the
endpoint's options (``protocol/event_options.py``), ``{"server", "error": {"code": 400, ...}}``
for a body Go's ``json.Unmarshal`` refuses and ``{"server", "data": null, "error": {"code":
500, ...}}`` for options the endpoint refuses; a request whose filter (``server_name``,
``host``, ``cluster``, ``tags``, ``domain``) does not name this server, or a ``leader_only`` JSZ
to a node that does not lead the meta group, gets no reply. STATSZ replies ``{"server",
"statsz"}``, IDZ the bare ``{"name", "host", "id"}``. A reply is compressed as
``Accept-Encoding`` asks.

Server KINDs: VARZ, CONNZ, ROUTEZ, SUBSZ, ACCOUNTZ, JSZ, HEALTHZ, STATSZ and IDZ; GATEWAYZ and
LEAFZ with nats-server's documents for a server without gateways or leaf nodes. RAFTZ,
IPQUEUESZ, EXPVARZ and PROFILEZ (nats-server's Raft, queue and Go runtime internals) are
answered with a 501 error saying jetraft does not serve them. Any other KIND finds no
responders, as on nats-server.

Account KINDs, for the subject's account (the body's account option is overridden; jetraft's
one account is ``$G``): SUBSZ (its subscriptions listed), CONNZ, LEAFZ, JSZ (its JetStream
``AccountDetail``), INFO (its ``AccountInfo``), STATZ (its ``AccountStatz``; no reply from a
server where it has no client unless ``include_unused``) and CONNS (the bare
``AccountNumConns`` event, unfiltered, from a server where it has a client). An account jetraft
does not have gets nats-server's answers: no reply (STATZ, CONNS), empty documents (SUBSZ,
CONNZ, LEAFZ) or a 500 (JSZ, INFO). ``PING`` names every account to STATZ (or those in its
``accounts``) and the requester's own to CONNZ, as nats-server's import of it; to the other
KINDs it is an account name, as to nats-server's system account.

USER.INFO (nats-server ``UserInfo``, body ignored, never compressed) describes the client that
published the request: the router tells this handler the publishing connection, and its
subscription is local (peers are not told of it), so only the node the client is connected to
answers, as nats-server, which does not propagate that subscription's interest.

In a cluster every node subscribes, and the routes carry each node's interest, so a request
published on any node reaches every node (PING, an account's request) or the one it names.

Must never: change state, or answer for another server or another client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from cluster.account_docs import (
    account_conns_event,
    account_info,
    account_jsz,
    account_statz,
    user_info,
)
from cluster.batching import new_event_id
from cluster.client_conn import ClientConnection
from cluster.identity import VERSION
from cluster.jsz import ACCOUNT, NOT_LEADER, JszError, JszOptions, jsz
from cluster.monitoring import (
    ConnzOptions,
    CpuSampler,
    HealthCheck,
    MonitoredNode,
    MonitorError,
    RoutezOptions,
    SubszOptions,
    accountz,
    connz,
    gatewayz,
    health_problem,
    healthz,
    leafz,
    routez,
    statsz,
    subsz,
    varz,
)
from cluster.router import ClientConnection as Publisher
from cluster.router import Subscription
from protocol import gojson
from protocol.event_options import (
    CONTENT_ENCODING,
    AccInfoEventOptions,
    AccountConnsRequest,
    AccountStatzEventOptions,
    AccountzEventOptions,
    ConnzEventOptions,
    EventFilterOptions,
    ExpvarzEventOptions,
    GatewayzEventOptions,
    HealthzEventOptions,
    IpqueueszEventOptions,
    JszEventOptions,
    LeafzEventOptions,
    ProfilezEventOptions,
    RaftzEventOptions,
    RoutezEventOptions,
    ServerIdentity,
    StatszEventOptions,
    SubszEventOptions,
    VarzEventOptions,
    accepted_encoding,
    encode_body,
    filtered_out,
)
from protocol.headers import encode_header_block
from protocol.timefmt import format_rfc3339nano

log = logging.getLogger("jetraft.sys_requests")

PREFIX: Final = "$SYS.REQ.SERVER."
PING: Final = PREFIX + "PING"  # statsz from every server (the subject `nats server ls` sends)
ACCOUNT_PREFIX: Final = "$SYS.REQ.ACCOUNT."  # then <account>.<KIND>
ACCOUNT_TOKEN: Final = 3  # the account's token in $SYS.REQ.ACCOUNT.<account>.<KIND>
ACCOUNT_PING: Final = "PING"  # $SYS.REQ.ACCOUNT.PING.<KIND>: STATZ and CONNZ for all/one's own
USER_INFO: Final = "$SYS.REQ.USER.INFO"  # the requesting connection's user and permissions
STATSZ_BROADCAST: Final = "$SYS.SERVER.{}.STATSZ"  # where a statsz request without reply goes
JETSTREAM_ENABLED_FLAG: Final = 1  # nats-server's ServerCapability bit; jetraft claims no other
BAD_REQUEST: Final = 400
INTERNAL_ERROR: Final = 500
NOT_IMPLEMENTED: Final = 501
CONN_STATE_NAMES: Final = {0: "open", 1: "closed", 2: "all"}  # ConnzOptions.state: any other
# value selects no connection, as nats-server's

Builder = Callable[[Any], dict[str, Any]]
AccountBuilder = Callable[[Any, str], dict[str, Any]]  # (options, the subject's account)
RequestHandler = Callable[[str, str | None, bytes | None, bytes], None]  # subject, reply, hdr, body


class _Skip(Exception):
    """The request is not for this server: no reply (nats-server ``errSkipZreq``)."""


class SystemRequests:
    """Answers ``$SYS.REQ.SERVER.*``, ``$SYS.REQ.ACCOUNT.*`` and ``$SYS.REQ.USER.INFO`` for
    one node."""

    def __init__(
        self,
        node: MonitoredNode,
        cpu: CpuSampler,
        http_req_stats: Mapping[str, int],
    ) -> None:
        self._node = node
        self._router = node.router
        self._cpu = cpu
        self._http_req_stats = http_req_stats
        self._subs: list[Subscription] = []
        self._seq = 0  # numbers every reply that carries this server's info, as nats-server's
        self._kinds: dict[str, tuple[type[EventFilterOptions], Builder | None]] = {
            "VARZ": (VarzEventOptions, self._varz),
            "SUBSZ": (SubszEventOptions, self._subsz),
            "CONNZ": (ConnzEventOptions, self._connz),
            "ROUTEZ": (RoutezEventOptions, self._routez),
            "GATEWAYZ": (GatewayzEventOptions, lambda _o: gatewayz(self._node)),
            "LEAFZ": (LeafzEventOptions, lambda _o: leafz(self._node)),
            "ACCOUNTZ": (AccountzEventOptions, self._accountz),
            "JSZ": (JszEventOptions, self._jsz),
            "HEALTHZ": (HealthzEventOptions, self._healthz),
            # not served: nats-server's Raft, queue and Go runtime internals
            "RAFTZ": (RaftzEventOptions, None),
            "IPQUEUESZ": (IpqueueszEventOptions, None),
            "EXPVARZ": (ExpvarzEventOptions, None),
            "PROFILEZ": (ProfilezEventOptions, None),
        }
        # $SYS.REQ.ACCOUNT.<account>.<KIND> (and CONNS, answered apart: no envelope)
        self._account_kinds: dict[str, tuple[type[EventFilterOptions], AccountBuilder]] = {
            "SUBSZ": (SubszEventOptions, self._account_subsz),
            "CONNZ": (ConnzEventOptions, self._account_connz),
            "LEAFZ": (LeafzEventOptions, lambda _o, _a: leafz(self._node)),
            "JSZ": (JszEventOptions, self._account_jsz),
            "INFO": (AccInfoEventOptions, lambda _o, acc: account_info(self._node, acc)),
            "STATZ": (AccountStatzEventOptions, self._account_statz),
        }

    def start(self) -> None:
        server_id = self._node.server_id
        handlers: dict[str, RequestHandler] = {kind: self._z_handler(kind) for kind in self._kinds}
        handlers["STATSZ"] = self._statsz
        handlers["IDZ"] = self._idz
        subjects: list[tuple[str, RequestHandler]] = [(PING, self._statsz)]
        for kind, handler in handlers.items():
            subjects.append((f"{PREFIX}PING.{kind}", handler))
            subjects.append((f"{PREFIX}{server_id}.{kind}", handler))
        for kind in self._account_kinds:
            subjects.append((f"{ACCOUNT_PREFIX}*.{kind}", self._account_handler(kind)))
        subjects.append((f"{ACCOUNT_PREFIX}*.CONNS", self._conns))
        for subject, handler in subjects:
            self._subs.append(self._router.subscribe_internal(subject, _deferred(handler)))
        # answered by the node the client is connected to only (nats-server: not propagated)
        self._subs.append(self._router.subscribe_local(USER_INFO, self._on_user_info))

    def close(self) -> None:
        for sub in self._subs:
            self._router.remove(sub)
        self._subs.clear()

    # --- replies ---------------------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        """nats-server's ``ServerInfo`` of this server, numbered by ``seq``."""
        node = self._node
        self._seq += 1
        out: dict[str, Any] = {"name": node.name, "host": node.opts.host, "id": node.server_id}
        if node.routes is not None and node.opts.cluster_name:
            out["cluster"] = node.opts.cluster_name
        out["ver"] = VERSION
        out["jetstream"] = node.jetstream is not None
        out["flags"] = JETSTREAM_ENABLED_FLAG if node.jetstream is not None else 0
        out["seq"] = self._seq
        out["time"] = format_rfc3339nano(time.time_ns())
        return out

    def _identity(self) -> ServerIdentity:
        node = self._node
        cluster = node.opts.cluster_name if node.routes is not None else ""
        return ServerIdentity(name=node.name, host=node.opts.host, cluster=cluster)

    def _send(self, reply: str, body: dict[str, Any], encoding: str | None = None) -> None:
        payload = gojson.encode(body)
        hdr = None
        if encoding is not None:
            payload = encode_body(encoding, payload)
            hdr = encode_header_block([(CONTENT_ENCODING, encoding)])
        self._router.publish(reply, None, hdr, payload)

    def _send_error(self, reply: str, code: int, text: str, *, data_null: bool = False) -> None:
        """An error reply; ``data`` null where the endpoint itself refused the options."""
        body: dict[str, Any] = {"server": self.server_info()}
        if data_null:
            body["data"] = None
        body["error"] = {"code": code, "description": text}
        self._send(reply, body)

    def _options(
        self, model: type[EventFilterOptions], reply: str, payload: bytes
    ) -> EventFilterOptions | None:
        """The request's options, or None when it gets no document: its body was refused (400
        sent) or its filter names another server. A body is read only when there is one
        (nats-server: ``len(msg) != 0``)."""
        if not payload:
            return model()
        try:
            opts = gojson.unmarshal(payload, model)
        except gojson.GoJsonError as err:
            self._send_error(reply, BAD_REQUEST, str(err))
            return None
        return None if filtered_out(opts, self._identity()) else opts

    def _z_handler(self, kind: str) -> RequestHandler:
        model, build = self._kinds[kind]

        def handle(_subject: str, reply: str | None, hdr: bytes | None, payload: bytes) -> None:
            self._answer_z(kind, model, build, reply, hdr, payload)

        return handle

    def _account_handler(self, kind: str) -> RequestHandler:
        """``$SYS.REQ.ACCOUNT.<account>.<KIND>``: the document of the subject's account."""
        model, build = self._account_kinds[kind]

        def handle(subject: str, reply: str | None, hdr: bytes | None, payload: bytes) -> None:
            account = subject.split(".")[ACCOUNT_TOKEN]
            self._answer_z(kind, model, lambda opts: build(opts, account), reply, hdr, payload)

        return handle

    def _answer_z(
        self,
        kind: str,
        model: type[EventFilterOptions],
        build: Builder | None,
        reply: str | None,
        hdr: bytes | None,
        payload: bytes,
    ) -> None:
        """nats-server ``zReq``: 400 for a body it cannot decode, the document, or 500 (with
        ``data`` null) for options the endpoint refuses."""
        if not reply:
            return
        opts = self._options(model, reply, payload)
        if opts is None:
            return
        if build is None:
            self._send_error(reply, NOT_IMPLEMENTED, f"{kind} is not supported by jetraft")
            return
        try:
            data = build(opts)
        except _Skip:
            return
        except (MonitorError, JszError) as err:
            self._send_error(reply, INTERNAL_ERROR, str(err), data_null=True)
            return
        except Exception as exc:  # a document that could not be built: said, and logged
            log.exception("system request %s failed", kind)
            text = f"internal error: {type(exc).__name__}"
            self._send_error(reply, INTERNAL_ERROR, text, data_null=True)
            return
        encoding = accepted_encoding(hdr)
        self._send(reply, {"server": self.server_info(), "data": data}, encoding)

    def _statsz(self, _subject: str, reply: str | None, _hdr: bytes | None, payload: bytes) -> None:
        """nats-server ``statszReq``: without a reply subject, to the statsz broadcast subject."""
        target = reply or STATSZ_BROADCAST.format(self._node.server_id)
        if self._options(StatszEventOptions, target, payload) is not None:
            stats = statsz(self._node, self._cpu)
            self._send(target, {"server": self.server_info(), "statsz": stats})

    def _idz(self, _subject: str, reply: str | None, _hdr: bytes | None, _payload: bytes) -> None:
        """nats-server ``idzReq``: the server's name, host and id, whatever the body."""
        if reply:
            node = self._node
            self._send(reply, {"name": node.name, "host": node.opts.host, "id": node.server_id})

    def _conns(self, subject: str, reply: str | None, _hdr: bytes | None, payload: bytes) -> None:
        """nats-server ``connsRequest``: the account's ``AccountNumConns`` event, bare (no
        envelope, no filter, no compression), from a server with a local connection in it; a
        body that does not decode or names another account gets nothing."""
        account = subject.split(".")[ACCOUNT_TOKEN]
        if not reply or account != ACCOUNT or not self._node.connections:
            return
        if payload:
            try:
                named = gojson.unmarshal(payload, AccountConnsRequest).acc
            except gojson.GoJsonError:
                return
            if named and named != account:
                return
        event = account_conns_event(self._node, self.server_info(), new_event_id())
        self._send(reply, event)

    def _on_user_info(
        self,
        origin: Publisher | None,
        _subject: str,
        reply: str | None,
        _hdr: bytes | None,
        _payload: bytes,
    ) -> None:
        """nats-server ``userInfoReq``: the ``UserInfo`` of the client that sent the request,
        whatever the body (never compressed); nothing for the server's own or a peer's."""
        if not reply or not isinstance(origin, ClientConnection):
            return
        data = user_info(self._node.opts.client_auth, origin.stats.user, origin.perms is not None)
        asyncio.get_running_loop().call_soon(self._send_user_info, reply, data)

    def _send_user_info(self, reply: str, data: dict[str, Any]) -> None:
        self._send(reply, {"server": self.server_info(), "data": data})

    # --- the documents, from the options -----------------------------------------------------
    def _varz(self, _opts: VarzEventOptions) -> dict[str, Any]:
        return varz(self._node, self._cpu, self._http_req_stats)

    def _connz(self, opts: ConnzEventOptions) -> dict[str, Any]:
        state = CONN_STATE_NAMES.get(opts.state, "none")
        return connz(
            self._node,
            ConnzOptions(
                sort=opts.sort,
                auth=opts.auth,
                subs=opts.subscriptions,
                subs_detail=opts.subscriptions_detail,
                offset=opts.offset,
                limit=opts.limit,
                cid=opts.cid,
                state=state,
                user=opts.user,
                account=opts.acc,
                mqtt_client=opts.mqtt_client,
                filter_subject=opts.filter_subject,
            ),
        )

    def _routez(self, opts: RoutezEventOptions) -> dict[str, Any]:
        options = RoutezOptions(subs=opts.subscriptions, subs_detail=opts.subscriptions_detail)
        return routez(self._node, options)

    def _subsz(self, opts: SubszEventOptions) -> dict[str, Any]:
        options = SubszOptions(
            subs=opts.subscriptions,
            offset=opts.offset,
            limit=opts.limit,
            test=opts.test,
            account=opts.account,
        )
        return subsz(self._node, options)

    def _accountz(self, opts: AccountzEventOptions) -> dict[str, Any]:
        return accountz(self._node, opts.account)

    def _jsz(self, opts: JszEventOptions) -> dict[str, Any]:
        options = JszOptions(
            accounts=opts.accounts,
            streams=opts.streams,
            consumers=opts.consumer,  # direct_consumer: jetraft has no direct consumers
            config=opts.config,
            raft=opts.raft,
            leader_only=opts.leader_only,
            stream_leader_only=opts.stream_leader_only,
            account=opts.account,
            offset=opts.offset,
            limit=opts.limit,
        )
        try:
            return jsz(self._node.jetstream, self._node.js_setup, options)
        except JszError as err:
            if str(err) == NOT_LEADER:
                raise _Skip from None  # only the meta leader answers a leader_only request
            raise

    # --- an account's documents, from the options and the subject's account ------------------
    def _account_subsz(self, opts: SubszEventOptions, account: str) -> dict[str, Any]:
        return self._subsz(opts.model_copy(update={"subscriptions": True, "account": account}))

    def _account_connz(self, opts: ConnzEventOptions, account: str) -> dict[str, Any]:
        """PING names the requester's account: nats-server imports ``...PING.CONNZ`` into every
        account as the account's own CONNZ (its system account would read PING as a name)."""
        acc = ACCOUNT if account == ACCOUNT_PING else account
        return self._connz(opts.model_copy(update={"acc": acc}))

    def _account_jsz(self, opts: JszEventOptions, account: str) -> dict[str, Any]:
        options = JszOptions(
            streams=opts.streams,
            consumers=opts.consumer,
            config=opts.config,
            raft=opts.raft,
            stream_leader_only=opts.stream_leader_only,
        )
        return account_jsz(self._node, account, options)

    def _account_statz(self, opts: AccountStatzEventOptions, account: str) -> dict[str, Any]:
        """PING: the accounts the options name (all when none); else the subject's account. No
        reply when none has a local connection, unless ``include_unused`` asks for it."""
        accounts = (opts.accounts or []) if account == ACCOUNT_PING else [account]
        doc = account_statz(self._node, accounts, opts.include_unused)
        if not doc["account_statz"] and not opts.include_unused:
            raise _Skip
        return doc

    def _healthz(self, opts: HealthzEventOptions) -> dict[str, Any]:
        """The /healthz document with its status code inside (``status_code`` even for 200)."""
        check = HealthCheck(
            js_enabled_only=opts.js_enabled_only or opts.js_enabled,
            js_server_only=opts.js_server_only,
            js_meta_only=opts.js_meta_only,
            account=opts.account,
            stream=opts.stream,
            consumer=opts.consumer,
        )
        code, body = healthz(health_problem(self._node, check), opts.details)
        rest = {k: v for k, v in body.items() if k not in ("status", "status_code")}
        return {"status": body["status"], "status_code": code, **rest}


def _deferred(handler: RequestHandler) -> RequestHandler:
    """An internal subscription's handler that answers on the next loop turn, not inside the
    publisher's delivery (nats-server answers from a queue too)."""

    def on_request(subject: str, reply: str | None, hdr: bytes | None, payload: bytes) -> None:
        asyncio.get_running_loop().call_soon(handler, subject, reply, hdr, payload)

    return on_request
