"""System requests, differential: ``$SYS.REQ.SERVER.PING[.<KIND>]`` and
``$SYS.REQ.SERVER.<id>.<KIND>`` answered by nats-server 2.15.1 to its system account user and by
jetraft to its one account (docs/features.md "Monitoring", docs/nats-differences.md §8).

After the same traffic, every KIND and option form gets a reply of the same shape: the envelope's
keys, the ``server`` object and the document under ``data`` (or ``statsz``), compared as the
monitoring endpoints are (``test_diff_monitoring.shape``, with its allowed differences); the
health replies exactly. Bodies nats-server refuses get the same ``error`` (400 with Go's
``json.Unmarshal`` text, or 500 with the endpoint's text and ``data`` null); the filter options
pick the same servers; ``Accept-Encoding`` gets the same ``Content-Encoding`` and a body that
decodes to the same shape.

The account requests (``$SYS.REQ.ACCOUNT.<account>.<KIND>``) likewise, for ``$G`` (asked by the
system user) and the PING forms nats-server imports into an ordinary account (asked by one); an
account neither has gets the same answer or none; CONNS gets the same bare event.
``$SYS.REQ.USER.INFO``, with the same config on both (users with permissions, default
permissions, allow_responses, an nkey user, no_auth_user), gets each user the same ``data``
(permission lists compared as sets). The cluster side: tests/cluster/test_sys_requests_cluster.py.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from tests.differential.conftest import (
    ANONYMOUS_USER,
    SYS_USER,
    candidate_kind,
    server_pair,
    system_url,
)
from tests.differential.test_diff_auth import NKEY_PUBLIC, SEED
from tests.differential.test_diff_monitoring import ALLOWED, shape, shape_diff, traffic
from tests.protocol.snappy_reader import snappy_decode
from tests.servers import HOST, ServerProc, start_jetraft, start_nats_server

pytestmark = pytest.mark.differential

REPLY_WAIT_S = 5.0
NO_REPLY_WAIT_S = 0.75
PING = "$SYS.REQ.SERVER.PING"

# what jetraft leaves out or adds besides the monitoring endpoints' own differences
# (docs/nats-differences.md §8): Go runtime settings and feature flags, the sync interval, the
# system account
SYS_ALLOWED: dict[tuple[str, str], str] = {
    ("server", "feature_flags"): "missing",
    # the system user's connection is in nats-server's SYS account, named as a non-global one
    ("connz", "connections[].account"): "missing",
    ("statsz", "gomaxprocs"): "missing",
    ("statsz", "jetstream.config.sync_interval"): "missing",
    ("statsz", "jetstream.config.sync_always"): "extra",
    ("statsz", "jetstream.limits.default_max_consumers"): "missing",
}

# (subject tail after $SYS.REQ.SERVER., body): each answered by both with a document; "ID" stands
# for the server's id
FORMS: list[tuple[str, bytes]] = [
    ("PING", b""),
    ("PING.STATSZ", b"{}"),
    ("ID.STATSZ", b""),
    ("PING.VARZ", b""),
    ("ID.VARZ", b"{}"),
    ("PING.CONNZ", b""),
    ("PING.CONNZ", b'{"subscriptions": true}'),
    ("PING.CONNZ", b'{"subscriptions_detail": true, "auth": true, "sort": "bytes_to"}'),
    ("PING.CONNZ", b'{"state": 1}'),
    ("PING.CONNZ", b'{"state": 2, "limit": 1, "offset": 1}'),
    ("PING.CONNZ", b'{"state": 7}'),
    ("PING.CONNZ", b'{"acc": "$G", "filter_subject": "foo.>"}'),
    ("PING.CONNZ", b'{"acc": "nope"}'),
    ("PING.ROUTEZ", b'{"subscriptions": true}'),
    ("PING.SUBSZ", b""),
    ("PING.SUBSZ", b'{"subscriptions": true, "test": "foo.x"}'),
    ("PING.ACCOUNTZ", b""),
    ("PING.ACCOUNTZ", b'{"account": "$G"}'),
    ("PING.JSZ", b""),
    ("PING.JSZ", b'{"accounts": true}'),
    ("PING.JSZ", b'{"streams": true, "consumer": true, "config": true}'),
    ("PING.JSZ", b'{"account": "$G", "streams": true, "leader_only": true}'),
    ("PING.GATEWAYZ", b'{"accounts": true}'),
    ("PING.LEAFZ", b'{"subscriptions": true}'),
]
HEALTHZ_BODIES: list[bytes] = [
    b"",
    b'{"js-enabled-only": true}',
    b'{"js-server-only": true}',
    b'{"js-meta-only": true}',
    b'{"details": true}',
    b'{"stream": "H"}',
    b'{"account": "$G", "stream": "H"}',
    b'{"account": "$G", "stream": "H", "consumer": "C"}',
    b'{"account": "$G", "stream": "NOPE", "details": true}',
    b'{"account": "$G", "stream": "H", "consumer": "NOPE"}',
    b'{"account": "other"}',
]
ERROR_FORMS: list[tuple[str, bytes]] = [
    ("PING.CONNZ", b"{"),
    ("PING.CONNZ", b"x"),
    ("PING.CONNZ", b"[]"),
    ("PING.CONNZ", b'{"sort": 1}'),
    ("PING.CONNZ", b'{"limit": "x"}'),
    ("PING.CONNZ", b'{"state": "open"}'),
    ("PING.CONNZ", b'{"cid": -1}'),
    ("PING.CONNZ", b'{"sort": "bogus"}'),
    ("PING.CONNZ", b'{"sort": "stop"}'),
    ("PING.CONNZ", b'{"filter_subject": "foo"}'),
    ("PING", b"{"),
    ("PING.STATSZ", b'{"server_name": 1}'),
    ("PING.VARZ", b'{"tags": "a"}'),
    ("PING.SUBSZ", b'{"test": "foo.*"}'),
    ("PING.ACCOUNTZ", b'{"account": "nope"}'),
    ("PING.JSZ", b'{"offset": 1.5}'),
    ("PING.HEALTHZ", b'{"js-enabled-only": 1}'),
    ("PING.ROUTEZ", b'{"subscriptions": "yes"}'),
]
# (body, answered) whatever the server's name
FILTERS: list[tuple[bytes, bool]] = [
    (b'{"host": "127"}', True),
    (b'{"host": "127.0.0.1", "exact_match": true}', True),
    (b'{"host": "127", "exact_match": true}', False),
    (b'{"server_name": ""}', True),
    (b'{"server_name": "zzz"}', False),
    (b'{"cluster": "x"}', False),
    (b'{"tags": ["a"]}', False),
    (b'{"domain": "d"}', False),
    (b"null", True),
]


# --- requests ----------------------------------------------------------------------------------
async def ask(
    nc: Client,
    subject: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    wait_s: float = REPLY_WAIT_S,
) -> Msg | None:
    """The one reply to a request (a single server), or None when none comes within wait_s."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, max_msgs=1)
    try:
        await nc.publish(subject, body, reply=inbox, headers=headers)
        return await sub.next_msg(timeout=wait_s)
    except nats.errors.TimeoutError:
        return None
    finally:
        await sub.unsubscribe()


async def server_id(nc: Client) -> str:
    reply = await ask(nc, PING + ".IDZ")
    assert reply is not None
    return str(json.loads(reply.data)["id"])


def subject_for(tail: str, sid: str) -> str:
    return f"$SYS.REQ.SERVER.{sid}{tail[2:]}" if tail.startswith("ID.") else PING + tail[4:]


def kind_of(tail: str) -> str:
    kind = tail.split(".", 1)[1] if "." in tail else "STATSZ"
    return kind.lower()


def envelope_problems(
    form: str, kind: str, oracle: dict[str, Any], candidate: dict[str, Any]
) -> list[str]:
    """Same envelope keys; the server object and the document of the same shape."""
    if oracle.keys() != candidate.keys():
        return [f"{form}: envelope {sorted(oracle)} != {sorted(candidate)}"]
    problems = []
    for key in oracle:
        endpoint = "server" if key == "server" else kind
        for path, what in shape_diff(shape(oracle[key]), shape(candidate[key])):
            if SYS_ALLOWED.get((endpoint, path)) != what and ALLOWED.get((endpoint, path)) != what:
                problems.append(f"{form}: {key}.{path}: {what}")
    return problems


class Pair:
    """A connection to each server as SYS_USER (``clients``: nats-server's system account user,
    an ordinary user of jetraft's one account) and one as ANONYMOUS_USER (``others``: a user of
    the global account on both)."""

    def __init__(
        self, clients: tuple[Client, Client], others: tuple[Client, Client], ids: tuple[str, str]
    ) -> None:
        self.clients = clients
        self.others = others
        self.ids = ids

    async def ask(
        self,
        tail: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        wait_s: float = REPLY_WAIT_S,
    ) -> tuple[Msg | None, Msg | None]:
        oracle, candidate = await asyncio.gather(
            *(
                ask(nc, subject_for(tail, sid), body, headers, wait_s)
                for nc, sid in zip(self.clients, self.ids, strict=True)
            )
        )
        return oracle, candidate

    async def close(self) -> None:
        for nc in (*self.clients, *self.others):
            await nc.close()


async def connect_pair(servers: tuple[ServerProc, ServerProc]) -> Pair:
    oracle, candidate = servers
    clients = (await nats.connect(system_url(oracle)), await nats.connect(system_url(candidate)))
    others = (
        await nats.connect(f"nats://{HOST}:{oracle.port}"),
        await nats.connect(f"nats://{HOST}:{candidate.port}"),
    )
    ids = (await server_id(clients[0]), await server_id(clients[1]))
    return Pair(clients, others, ids)


@pytest.fixture
async def pair(system_pair: tuple[ServerProc, ServerProc]) -> AsyncIterator[Pair]:
    """A system connection to each server."""
    connected = await connect_pair(system_pair)
    yield connected
    await connected.close()


@pytest.fixture
async def busy_pair(system_pair: tuple[ServerProc, ServerProc]) -> AsyncIterator[Pair]:
    """A system connection to each server, after the monitoring test's traffic and a stream H
    with a consumer C on both."""
    clients = []
    for server in system_pair:
        nc = await traffic(server.port)
        clients.append(nc)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="H", subjects=["h.>"])
        await js.add_consumer("H", durable_name="C")
    connected = await connect_pair(system_pair)
    yield connected
    await connected.close()
    for nc in clients:
        await nc.close()


def decoded(reply: Msg) -> Any:
    return json.loads(reply.data)


# --- tests -------------------------------------------------------------------------------------
async def test_every_kind_answers_with_nats_server_s_shape(busy_pair: Pair) -> None:
    problems: list[str] = []
    for tail, body in FORMS:
        form = f"{tail} {body.decode()}"
        oracle, candidate = await busy_pair.ask(tail, body)
        if oracle is None or candidate is None:
            problems.append(f"{form}: answered {oracle is not None} != {candidate is not None}")
            continue
        problems += envelope_problems(form, kind_of(tail), decoded(oracle), decoded(candidate))
    assert not problems, "\n".join(problems)


async def test_idz_names_the_server(pair: Pair) -> None:
    for tail in ("PING.IDZ", "ID.IDZ"):
        oracle, candidate = await pair.ask(tail, b"{")  # no body is read
        assert oracle is not None and candidate is not None
        assert list(decoded(oracle)) == list(decoded(candidate)) == ["name", "host", "id"]
        assert decoded(candidate)["id"] == pair.ids[1]


async def test_a_statsz_request_without_reply_goes_to_the_broadcast_subject(pair: Pair) -> None:
    subs = [await nc.subscribe("$SYS.SERVER.*.STATSZ", max_msgs=1) for nc in pair.clients]
    for nc in pair.clients:
        await nc.publish(PING, b"")
    for sub, sid in zip(subs, pair.ids, strict=True):
        msg = await sub.next_msg(timeout=REPLY_WAIT_S)
        assert msg.subject == f"$SYS.SERVER.{sid}.STATSZ"
        assert list(decoded(msg)) == ["server", "statsz"]


async def test_health_replies_are_nats_server_s(busy_pair: Pair) -> None:
    """The /healthz document, with ``status_code`` inside even for 200 (exactly)."""
    for body in HEALTHZ_BODIES:
        oracle, candidate = await busy_pair.ask("PING.HEALTHZ", body)
        assert oracle is not None and candidate is not None, body
        assert decoded(candidate)["data"] == decoded(oracle)["data"], body


async def test_refused_bodies_get_nats_server_s_errors(pair: Pair) -> None:
    for tail, body in ERROR_FORMS:
        oracle, candidate = await pair.ask(tail, body)
        assert oracle is not None and candidate is not None, (tail, body)
        want, got = decoded(oracle), decoded(candidate)
        assert list(got) == list(want), (tail, body, got)
        assert got["error"] == want["error"], (tail, body)


def filters(name: str) -> list[tuple[bytes, bool]]:
    """FILTERS, and the forms that name a server (``name``) by part or in full."""
    part = name[1:4]
    return [
        *FILTERS,
        (json.dumps({"server_name": part}).encode(), True),
        (json.dumps({"server_name": name, "exact_match": True}).encode(), True),
        (json.dumps({"server_name": part, "exact_match": True}).encode(), False),
    ]


async def test_filters_pick_the_same_servers(
    system_pair: tuple[ServerProc, ServerProc], pair: Pair
) -> None:
    forms = list(zip(*(filters(server.name) for server in system_pair), strict=True))
    for tail in ("PING", "PING.VARZ", "PING.JSZ"):
        # every form at once, each request with its own inbox: the no-reply waits overlap
        replies = await asyncio.gather(
            *(
                ask(nc, subject_for(tail, sid), body, wait_s=NO_REPLY_WAIT_S)
                for each in forms  # (oracle's form, candidate's form)
                for nc, sid, (body, _) in zip(pair.clients, pair.ids, each, strict=True)
            )
        )
        servers = len(pair.clients)
        for position, each in enumerate(forms):
            got = replies[servers * position : servers * (position + 1)]
            assert [r is not None for r in got] == [a for _, a in each], (tail, each)


async def test_replies_are_compressed_as_asked(pair: Pair) -> None:
    """Accept-Encoding: snappy (or s2), gzip, anything else (identity) on a document; an error
    reply and a statsz are never compressed."""
    for encoding in ("snappy", "S2", "gzip, deflate", "br", None):
        headers = {"Accept-Encoding": encoding} if encoding else {"X-Other": "1"}
        oracle, candidate = await pair.ask("PING.VARZ", headers=headers)
        assert oracle is not None and candidate is not None
        assert _encoding(candidate) == _encoding(oracle), encoding
        want, got = _decompressed(oracle), _decompressed(candidate)
        assert not envelope_problems(f"varz {encoding}", "varz", want, got)
    for tail, body in (("PING.CONNZ", b'{"sort": "bogus"}'), ("PING", b"")):
        oracle, candidate = await pair.ask(tail, body, headers={"Accept-Encoding": "gzip"})
        assert oracle is not None and candidate is not None
        assert _encoding(oracle) is None and _encoding(candidate) is None


async def test_unknown_kinds_find_no_responders(pair: Pair) -> None:
    for tail in ("PING.NOPE", "PING.varz", "ID.NOPE"):
        oracle, candidate = await pair.ask(tail)
        assert oracle is not None and candidate is not None
        assert oracle.headers and oracle.headers.get("Status") == "503"
        assert candidate.headers and candidate.headers.get("Status") == "503"


@pytest.mark.skipif(candidate_kind() == "nats", reason="jetraft's own answer")
async def test_internals_jetraft_does_not_serve_are_refused(pair: Pair) -> None:
    """RAFTZ, IPQUEUESZ, EXPVARZ and PROFILEZ: nats-server's internals, refused with 501 (a body
    nats-server refuses still gets its 400)."""
    for kind in ("RAFTZ", "IPQUEUESZ", "EXPVARZ", "PROFILEZ"):
        _oracle, candidate = await pair.ask(f"PING.{kind}")
        assert candidate is not None
        reply = decoded(candidate)
        assert list(reply) == ["server", "error"]
        assert reply["error"] == {
            "code": 501,
            "description": f"{kind} is not supported by jetraft",
        }
    oracle, candidate = await pair.ask("PING.RAFTZ", b'{"account": 1}')
    assert oracle is not None and candidate is not None
    assert decoded(candidate)["error"] == decoded(oracle)["error"]


# --- compressed replies ------------------------------------------------------------------------
def _encoding(reply: Msg) -> str | None:
    return (reply.headers or {}).get("Content-Encoding")


def _decompressed(reply: Msg) -> Any:
    encoding = _encoding(reply)
    data = reply.data
    if encoding == "gzip":
        data = gzip.decompress(data)
    elif encoding == "snappy":
        data = snappy_decode(data)
    return json.loads(data)


# --- $SYS.REQ.ACCOUNT.<account>.<KIND> and $SYS.REQ.USER.INFO ------------------------------------
ACCOUNT_PREFIX = "$SYS.REQ.ACCOUNT."
USER_INFO = "$SYS.REQ.USER.INFO"
# the document each account kind answers with, as ALLOWED and SYS_ALLOWED name it
ACCOUNT_DOCS = {
    "SUBSZ": "subsz",
    "CONNZ": "connz",
    "LEAFZ": "leafz",
    "JSZ": "account_jsz",
    "INFO": "info",
    "STATZ": "account_statz",
}
SYS_ALLOWED.update(
    {
        # the account's imports of the system account's services: jetraft has no system account
        ("info", "imports"): "missing",
        ("info", "sublist_stats.num_matches"): "missing",
        ("info", "sublist_stats.cache_hit_rate"): "missing",
    }
)
# (subject tail after $SYS.REQ.ACCOUNT., body) asked by the system user; each answered by both
# with a document. The body's own account is overridden by the subject's.
ACCOUNT_FORMS: list[tuple[str, bytes]] = [
    ("$G.SUBSZ", b""),
    ("$G.SUBSZ", b'{"test": "foo.x", "account": "other", "subscriptions": false}'),
    ("$G.CONNZ", b""),
    ("$G.CONNZ", b'{"subscriptions_detail": true, "auth": true, "acc": "other"}'),
    ("$G.CONNZ", b'{"filter_subject": "foo.>"}'),
    ("$G.CONNZ", b'{"state": 1}'),
    ("$G.LEAFZ", b'{"subscriptions": true}'),
    ("$G.JSZ", b""),
    ("$G.JSZ", b'{"streams": true, "consumer": true, "config": true}'),
    ("$G.JSZ", b'{"consumer": true, "leader_only": true}'),
    ("$G.INFO", b""),
    ("$G.STATZ", b""),
    ("$G.STATZ", b'{"accounts": ["other"]}'),
    ("PING.STATZ", b'{"include_unused": true}'),
]
# asked by an ordinary user of the global account: nats-server imports these two into it
USER_ACCOUNT_FORMS: list[tuple[str, bytes]] = [
    ("PING.CONNZ", b""),
    ("PING.CONNZ", b'{"subscriptions": true, "acc": "other"}'),
    ("PING.STATZ", b""),
]
# an account neither has (and PING, an account name to the system account but for STATZ)
UNKNOWN_ACCOUNT_FORMS: list[tuple[str, bytes]] = [
    *((f"nope.{kind}", b"") for kind in (*ACCOUNT_DOCS, "CONNS")),
    ("nope.STATZ", b'{"include_unused": true}'),
    ("PING.SUBSZ", b""),
    ("PING.JSZ", b""),
    ("PING.INFO", b""),
    ("PING.STATZ", b'{"accounts": ["nope"]}'),
]
ACCOUNT_ERROR_FORMS: list[tuple[str, bytes]] = [
    ("$G.INFO", b"[]"),
    ("$G.STATZ", b'{"accounts": 1}'),
    ("$G.STATZ", b'{"include_unused": "yes"}'),
    ("$G.CONNZ", b'{"sort": "bogus"}'),
    ("$G.SUBSZ", b'{"test": "foo.*"}'),
    ("$G.JSZ", b'{"streams": "x"}'),
    ("$G.LEAFZ", b"{"),
]


async def ask_both(
    clients: tuple[Client, Client],
    subject: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    wait_s: float = REPLY_WAIT_S,
) -> tuple[Msg | None, Msg | None]:
    oracle, candidate = await asyncio.gather(
        *(ask(nc, subject, body, headers, wait_s) for nc in clients)
    )
    return oracle, candidate


def account_kind(tail: str) -> str:
    return ACCOUNT_DOCS.get(tail.rsplit(".", 1)[1], "")


async def test_account_kinds_answer_with_nats_server_s_shape(busy_pair: Pair) -> None:
    """``$SYS.REQ.ACCOUNT.$G.<KIND>`` to the system user, and the PING forms nats-server serves
    an ordinary account, to an ordinary user (``ANONYMOUS_USER`` on both)."""
    problems: list[str] = []
    users = (busy_pair.clients, busy_pair.others)
    for clients, forms in zip(users, (ACCOUNT_FORMS, USER_ACCOUNT_FORMS), strict=True):
        for tail, body in forms:
            form = f"{tail} {body.decode()}"
            oracle, candidate = await ask_both(clients, ACCOUNT_PREFIX + tail, body)
            if oracle is None or candidate is None:
                problems.append(f"{form}: answered {oracle is not None} != {candidate is not None}")
                continue
            want, got = decoded(oracle), decoded(candidate)
            problems += envelope_problems(form, account_kind(tail), want, got)
            if tail.endswith("CONNZ") and b"state" not in body:  # the open ones, "probe" among
                assert {c.get("name") for c in got["data"]["connections"]} >= {"probe"}, form
    assert not problems, "\n".join(problems)


async def test_an_account_s_documents_describe_the_account(busy_pair: Pair) -> None:
    """Values both give alike: the stream count in the account's JetStream detail, the
    account's name everywhere, its subscriptions listed with its name."""
    for nc in busy_pair.clients:
        jsz = decoded(await ask_or_fail(nc, ACCOUNT_PREFIX + "$G.JSZ", b'{"streams": true}'))
        assert (jsz["data"]["name"], jsz["data"]["id"]) == ("$G", "$G")
        assert sorted(s["name"] for s in jsz["data"]["stream_detail"]) == ["H", "M1", "S1", "S2"]
        info = decoded(await ask_or_fail(nc, ACCOUNT_PREFIX + "$G.INFO"))["data"]
        assert (info["account_name"], info["jetstream_enabled"]) == ("$G", True)
        subsz = decoded(await ask_or_fail(nc, ACCOUNT_PREFIX + "$G.SUBSZ", b'{"test": "bar"}'))
        listed = subsz["data"]["subscriptions_list"]
        assert [(s["subject"], s["account"]) for s in listed] == [("bar", "$G")]
        statz = decoded(await ask_or_fail(nc, ACCOUNT_PREFIX + "$G.STATZ"))
        assert [(s["acc"], s["name"]) for s in statz["data"]["account_statz"]] == [("$G", "$G")]


async def ask_or_fail(nc: Client, subject: str, body: bytes = b"") -> Msg:
    reply = await ask(nc, subject, body)
    assert reply is not None, subject
    return reply


async def test_an_unknown_account_is_answered_as_nats_server_does(busy_pair: Pair) -> None:
    """No reply (STATZ, CONNS), an empty document (SUBSZ, CONNZ, LEAFZ; CONNZ's id-less) or
    nats-server's 500 (JSZ, INFO)."""
    for tail, body in UNKNOWN_ACCOUNT_FORMS:
        form = f"{tail} {body.decode()}"
        oracle, candidate = await ask_both(
            busy_pair.clients, ACCOUNT_PREFIX + tail, body, wait_s=NO_REPLY_WAIT_S * 2
        )
        assert (oracle is None) == (candidate is None), form
        if oracle is None or candidate is None:
            continue
        want, got = decoded(oracle), decoded(candidate)
        assert list(got) == list(want), form
        if "error" in want:
            assert got["error"] == want["error"], form
            assert got["data"] is None, form
            continue
        assert not envelope_problems(form, account_kind(tail), want, got)
        data = got["data"]
        assert data.get("connections") is None and not data.get("subscriptions_list"), form
        assert data.get("account_statz", []) == [] and data.get("num_subscriptions", 0) == 0, form


async def test_account_requests_refuse_bodies_as_nats_server_does(busy_pair: Pair) -> None:
    for tail, body in ACCOUNT_ERROR_FORMS:
        oracle, candidate = await ask_both(busy_pair.clients, ACCOUNT_PREFIX + tail, body)
        assert oracle is not None and candidate is not None, (tail, body)
        want, got = decoded(oracle), decoded(candidate)
        assert list(got) == list(want), (tail, body, got)
        assert got["error"] == want["error"], (tail, body)
    # a filter that names no server, and an unknown kind
    for tail, body in (("$G.INFO", b'{"server_name": "zzz"}'), ("$G.STATZ", b'{"tags": ["a"]}')):
        replies = await ask_both(
            busy_pair.clients, ACCOUNT_PREFIX + tail, body, wait_s=NO_REPLY_WAIT_S
        )
        assert replies == (None, None), (tail, body)
    oracle, candidate = await ask_both(busy_pair.clients, ACCOUNT_PREFIX + "$G.NOPE")
    assert oracle is not None and candidate is not None
    assert oracle.headers and oracle.headers.get("Status") == "503"
    assert candidate.headers and candidate.headers.get("Status") == "503"


async def test_an_account_s_connection_count_is_a_bare_event(busy_pair: Pair) -> None:
    """CONNS: nats-server's ``AccountNumConns`` event, no envelope, whatever the filter; a
    body that does not decode or names another account gets nothing."""
    for body in (b"", b'{"acc": "$G"}', b'{"server_name": "zzz"}'):
        oracle, candidate = await ask_both(busy_pair.clients, ACCOUNT_PREFIX + "$G.CONNS", body)
        assert oracle is not None and candidate is not None, body
        want, got = decoded(oracle), decoded(candidate)
        assert list(got) == list(want), body
        assert got["type"] == want["type"] == "io.nats.server.advisory.v1.account_connections"
        assert (got["acc"], got["name"]) == ("$G", "$G")
        diffs = [
            (path, what)
            for path, what in shape_diff(shape(want), shape(got))
            if (path, what) != ("server.feature_flags", "missing")
        ]
        assert not diffs, (body, diffs)
    for body in (b'{"acc": "other"}', b"{"):
        replies = await ask_both(
            busy_pair.clients, ACCOUNT_PREFIX + "$G.CONNS", body, wait_s=NO_REPLY_WAIT_S
        )
        assert replies == (None, None), body


async def test_account_replies_are_compressed_as_asked(busy_pair: Pair) -> None:
    """A document as Accept-Encoding asks; a CONNS event and a user's info never."""
    gzip_hdr = {"Accept-Encoding": "gzip"}
    for tail in ("$G.CONNZ", "$G.INFO"):
        oracle, candidate = await ask_both(busy_pair.clients, ACCOUNT_PREFIX + tail, b"", gzip_hdr)
        assert oracle is not None and candidate is not None
        assert _encoding(oracle) == _encoding(candidate) == "gzip", tail
        assert not envelope_problems(
            tail, account_kind(tail), _decompressed(oracle), _decompressed(candidate)
        )
    for subject, clients in (
        (ACCOUNT_PREFIX + "$G.CONNS", busy_pair.clients),
        (USER_INFO, busy_pair.others),
    ):
        oracle, candidate = await ask_both(clients, subject, b"", gzip_hdr)
        assert oracle is not None and candidate is not None
        assert _encoding(oracle) is None and _encoding(candidate) is None, subject


async def test_user_info_without_permissions(pair: Pair) -> None:
    """The system user (no permissions) and an ordinary one: no ``permissions`` key."""
    for clients, user in ((pair.clients, SYS_USER), (pair.others, ANONYMOUS_USER)):
        oracle, candidate = await ask_both(clients, USER_INFO, b"{")  # no body is read
        assert oracle is not None and candidate is not None
        want, got = decoded(oracle), decoded(candidate)
        assert list(got) == list(want) == ["server", "data"]
        assert list(got["data"]) == list(want["data"]), (user, got)
        assert got["data"]["user"] == want["data"]["user"] == user
        # jetraft has one account: its system user is in it (nats-server's is in SYS)
        account = "SYS" if user == SYS_USER and candidate_kind() == "nats" else "$G"
        assert got["data"]["account"] == got["data"]["account_name"] == account
        if user == ANONYMOUS_USER:
            assert got["data"] == want["data"]


AUTH_CONF = """
authorization {
  default_permissions: { publish: { deny: ["def.>", "def2.*"] } }
  users: [
    { user: alice, password: a, permissions: {
        publish: { allow: ["foo.>", "_INBOX.>", "$SYS.REQ.USER.INFO"], deny: ["foo.bar"] }
        subscribe: { allow: ["foo.*", "_INBOX.>", "w.* grp"], deny: ["foo.secret"] } } }
    { user: svc, password: s, permissions: {
        publish: ["$SYS.REQ.>"], subscribe: { allow: ["_INBOX.>"] }
        allow_responses: { max: 2, expires: "1s" } } }
    { user: resp, password: r, permissions: { publish: { allow: ">" }, allow_responses: true } }
    { user: carol, password: c }
    { nkey: %s, permissions: { subscribe: { deny: ["x.>"] } } }
  ]
}
no_auth_user: carol
"""
AUTH_USERS = ("", "alice:a", "svc:s", "resp:r", "carol:c", "nkey")


@pytest.fixture
def auth_pair(tmp_path: Path) -> Iterator[tuple[ServerProc, ServerProc]]:
    """Both servers with AUTH_CONF (the same file): users with permissions, default
    permissions, allow_responses, an nkey user and no_auth_user."""
    conf = tmp_path / "auth.conf"
    conf.write_text(AUTH_CONF % NKEY_PUBLIC)
    args = ["-c", str(conf)]

    def start_other() -> ServerProc:
        if candidate_kind() == "nats":
            return start_nats_server(tmp_path / "candidate", name="candidate", extra_args=args)
        return start_jetraft(tmp_path / "candidate", name="candidate", extra_args=args)

    with server_pair(
        lambda: start_nats_server(tmp_path / "oracle", name="oracle", extra_args=args),
        start_other,
    ) as servers:
        yield servers


async def connect_as(server: ServerProc, login: str) -> Client:
    if login == "nkey":
        return await nats.connect(f"nats://{HOST}:{server.port}", nkeys_seed_str=SEED.decode())
    creds = f"{login}@" if login else ""
    return await nats.connect(f"nats://{creds}{HOST}:{server.port}")


def sorted_lists(value: Any) -> Any:
    """Permission lists in a stable order (nats-server lists its sublist's order)."""
    if isinstance(value, dict):
        return {k: sorted_lists(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted(value)
    return value


async def test_user_info_describes_the_requesting_connection(
    auth_pair: tuple[ServerProc, ServerProc],
) -> None:
    """Each user gets its own name, the global account and its permissions (its own or the
    default ones; ``responses`` with nats-server's defaults filled in), exactly; two users
    asking at once each get their own."""
    clients: list[tuple[Client, Client]] = []
    try:
        for login in AUTH_USERS:
            pair_of = (await connect_as(auth_pair[0], login), await connect_as(auth_pair[1], login))
            clients.append(pair_of)
        replies = await asyncio.gather(*(ask_both(c, USER_INFO) for c in clients))
        for login, (oracle, candidate) in zip(AUTH_USERS, replies, strict=True):
            assert oracle is not None and candidate is not None, login
            want, got = decoded(oracle), decoded(candidate)
            assert list(got) == list(want) == ["server", "data"], login
            assert list(got["data"]) == list(want["data"]), (login, got["data"])
            assert sorted_lists(got["data"]) == sorted_lists(want["data"]), login
            assert "permissions" in got["data"], login
        by_login = dict(zip(AUTH_USERS, (decoded(c)["data"] for _, c in replies), strict=True))
        assert by_login[""]["user"] == "carol"
        assert by_login["nkey"]["user"] == NKEY_PUBLIC
        assert by_login["svc:s"]["permissions"]["responses"] == {"max": 2, "ttl": 1_000_000_000}
    finally:
        for pair_of in clients:
            for nc in pair_of:
                await nc.close()
