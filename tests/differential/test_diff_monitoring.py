"""Monitoring endpoints, differential: nats-server 2.15.1 and jetraft, given the same traffic,
answer every endpoint and option form with documents of the same shape (docs/features.md
"Monitoring", docs/nats-differences.md §8).

Values differ (ids, times, ports, counters of internal subscriptions), so what is compared is
the shape: the key set of every object, recursively, the JSON type of every value (numbers are
one type: Go writes ``2`` for a float64 2) and lists by the union of their elements' shapes (an
empty list matches any). The only differences allowed are the ones listed in ``ALLOWED`` below,
each documented. Malformed options get the same status and text from both.

A single server each, then a 3-node cluster each (the cluster blocks of /varz, /jsz's
``meta_cluster``, a replicated stream's ``cluster`` object, /routez with routes).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from cluster.ops.process import distinct_free_ports
from tests.differential.conftest import server_pair
from tests.servers import (
    HOST,
    NATS_SERVER_BIN,
    JetraftCluster,
    ServerProc,
    start_jetraft,
    start_nats_server,
    stop_servers,
    wait_until,
)

pytestmark = pytest.mark.differential

HTTP_TIMEOUT_S = 5.0
CLUSTER_READY_S = 60.0

# (endpoint, path in its document): what jetraft leaves out ("missing") or adds ("extra"), each
# listed in docs/nats-differences.md §8. "[]" stands for every element of a list.
ALLOWED: dict[tuple[str, str], str] = {
    # Go runtime and features jetraft does not have
    ("varz", "gomaxprocs"): "missing",
    ("varz", "feature_flags"): "missing",
    ("varz", "system_account"): "missing",
    ("varz", "disk_io_wait_stats"): "missing",
    ("varz", "cluster.pool_size"): "missing",
    ("varz", "jetraft_version"): "extra",
    ("varz", "pid"): "extra",
    # no sync interval (every write is synced), no default consumer limit
    ("varz", "jetstream.config.sync_interval"): "missing",
    ("varz", "jetstream.config.sync_always"): "extra",
    ("varz", "jetstream.limits.default_max_consumers"): "missing",
    ("varz", "jetstream.meta.snapshot.last_duration"): "missing",
    ("jsz", "config.sync_interval"): "missing",
    ("jsz", "config.sync_always"): "extra",
    ("jsz", "limits.default_max_consumers"): "missing",
    ("jsz", "meta_cluster.snapshot.last_duration"): "missing",
    # the cluster object of a stream and its consumers: no system account
    ("jsz", "account_details[].stream_detail[].cluster.system_account"): "missing",
    ("jsz", "account_details[].stream_detail[].cluster.traffic_account"): "missing",
    ("jsz", "account_details[].stream_detail[].consumer_detail[].cluster.system_account"): (
        "missing"
    ),
    ("jsz", "account_details[].stream_detail[].consumer_detail[].cluster.traffic_account"): (
        "missing"
    ),
    # a consumer's leader is its stream's: on the stream leader it leads every consumer (a
    # nats-server consumer's own group may be led elsewhere, which leaves these keys out)
    ("jsz", "consumers_leader"): "extra",
    ("jsz", "account_details[].stream_detail[].consumer_detail[].cluster.leader_since"): "extra",
    # round-trip times are not measured; routes are not compressed nor pinned to an account
    ("connz", "connections[].rtt"): "missing",
    ("routez", "routes[].rtt"): "missing",
    ("routez", "routes[].compression"): "missing",
    ("routez", "routes[].account"): "missing",
    # peers' interest includes jetraft's queue groups (Direct Get responders)
    ("routez", "routes[].subscriptions_list_detail[].qgroup"): "extra",
    # matches are not counted (it would cost every publish)
    ("subsz", "num_matches"): "missing",
    ("subsz", "cache_hit_rate"): "missing",
    ("accountz", "account_detail.sublist_stats.num_matches"): "missing",
    ("accountz", "account_detail.sublist_stats.cache_hit_rate"): "missing",
    # no system account, so none of its imports
    ("accountz", "system_account"): "missing",
    ("accountz", "account_detail.imports"): "missing",
}

# objects whose keys are data (a map): compared by the union of their values' shapes
MAPS = frozenset(("http_req_stats", "metadata"))

SINGLE_FORMS = [
    "/varz",
    "/jsz",
    "/jsz?accounts=true",
    "/jsz?streams=true",
    "/jsz?consumers=true",
    "/jsz?config=true",
    "/jsz?consumers=true&config=true",
    "/jsz?streams=true&raft=true",
    "/jsz?acc=$G",
    "/jsz?accounts=true&offset=1",
    "/jsz?leader-only=true",
    "/jsz?streams=true&stream-leader-only=true",
    "/connz",
    "/connz?subs=true",
    "/connz?subs=detail",
    "/connz?sort=bytes_to",
    "/connz?sort=msgs_from&limit=1",
    "/connz?limit=1&offset=5",
    "/connz?auth=true",
    "/connz?acc=$G",
    "/connz?state=closed",
    "/connz?state=closed&sort=reason&subs=true",
    "/connz?state=all&sort=idle",
    "/routez",
    "/routez?subs=true",
    "/subsz",
    "/subsz?subs=true",
    "/subsz?subs=true&test=foo.x",
    "/subsz?subs=true&test=bar&limit=1",
    "/subsz?subs=true&test=foo.x&offset=1",
    "/accountz",
    "/accountz?acc=$G",
    "/healthz",
]
ERROR_FORMS = [
    "/connz?sort=bogus",
    "/connz?sort=stop",
    "/connz?sort=reason&state=open",
    "/connz?limit=abc",
    "/connz?cid=x",
    "/connz?state=sideways",
    "/connz?subs=maybe",
    "/jsz?accounts=xyz",
    "/jsz?offset=1.5",
    "/subsz?test=foo.*",
    "/subsz?subs=yes",
    "/accountz?acc=nope",
    "/nothing-here",
]
CLUSTER_FORMS = [
    "/varz",
    "/jsz",
    "/jsz?consumers=true&config=true&raft=true",
    "/routez",
    "/routez?subs=detail",
    "/connz",
]


def fetch(port: int, path: str) -> tuple[int, str]:
    url = f"http://{HOST}:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


# --- shapes ---------------------------------------------------------------------------------
def shape(value: Any) -> Any:
    """A JSON value's shape: objects by key, lists by the union of their elements' shapes."""
    if isinstance(value, dict):
        out = {k: ("map" if k in MAPS else shape(v)) for k, v in value.items()}
        return out
    if isinstance(value, list):
        merged: Any = None
        for item in value:
            merged = _union(merged, shape(item))
        return ["list", merged]
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "null"


def _union(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _union(a.get(k), b.get(k)) for k in {**a, **b}}
    if isinstance(a, list) and isinstance(b, list):
        return ["list", _union(a[1], b[1])]
    return a if a == b else f"{a}|{b}"


def shape_diff(oracle: Any, candidate: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, what differs): "missing" (only nats-server has it), "extra" (only jetraft), or
    "type A != B"."""
    if oracle is None or candidate is None:
        return  # an empty list's elements: nothing to compare
    if isinstance(oracle, dict) and isinstance(candidate, dict):
        for key in oracle.keys() | candidate.keys():
            sub = f"{path}.{key}" if path else key
            if key not in candidate:
                yield sub, "missing"
            elif key not in oracle:
                yield sub, "extra"
            else:
                yield from shape_diff(oracle[key], candidate[key], sub)
        return
    if isinstance(oracle, list) and isinstance(candidate, list):
        yield from shape_diff(oracle[1], candidate[1], f"{path}[]")
        return
    if oracle != candidate:
        yield path, f"type {oracle} != {candidate}"


def unexplained(endpoint: str, oracle: Any, candidate: Any) -> list[str]:
    return [
        f"{path}: {what}"
        for path, what in shape_diff(shape(oracle), shape(candidate))
        if ALLOWED.get((endpoint, path)) != what
    ]


def compare_forms(oracle_http: int, candidate_http: int, forms: list[str]) -> list[str]:
    problems = []
    for form in forms:
        endpoint = form.split("?", 1)[0].strip("/")
        (o_status, o_body), (c_status, c_body) = (
            fetch(oracle_http, form),
            fetch(candidate_http, form),
        )
        if o_status != c_status:
            problems.append(f"{form}: status {o_status} != {c_status}: {c_body[:200]}")
            continue
        for problem in unexplained(endpoint, json.loads(o_body), json.loads(c_body)):
            problems.append(f"{form}: {problem}")
    return problems


def test_shape_diff_finds_keys_types_and_list_elements() -> None:
    oracle = {"a": 1, "b": [{"x": "s"}, {"y": True}], "c": {"d": 2.5}, "e": []}
    candidate = {"a": 2.0, "b": [{"x": 1, "y": False}], "c": {}, "e": [{"z": 1}], "f": None}
    found = dict(shape_diff(shape(oracle), shape(candidate)))
    assert found == {
        "b[].x": "type string != number",
        "c.d": "missing",
        "f": "extra",
    }


# --- traffic ---------------------------------------------------------------------------------
async def traffic(port: int) -> nats.NATS:
    """The same streams, consumers, subscriptions and messages on either server; one client
    stays connected (returned) and one has come and gone (a closed connection)."""
    gone = await nats.connect(f"nats://{HOST}:{port}", name="gone")
    await gone.subscribe("gone.*")
    await gone.publish("gone.x", b"bye")
    await gone.close()
    nc = await nats.connect(f"nats://{HOST}:{port}", name="probe")
    js = nc.jetstream()
    await js.add_stream(name="S1", subjects=["s1.>"])
    await js.add_stream(name="S2", subjects=["s2.>"], storage="memory")
    await js.add_stream(name="M1", mirror={"name": "S1"})
    for _ in range(5):
        await js.publish("s1.a", b"hello")
    await js.publish("s2.a", b"x", headers={"H": "v"})
    await js.add_consumer("S1", durable_name="C1", description="durable")
    sub = await js.pull_subscribe("s1.a", durable="C1", stream="S1")
    await sub.fetch(2, timeout=5)
    await nc.subscribe("foo.*", queue="q")
    await nc.subscribe("bar")
    await nc.request("s1.a", b"via core", timeout=5)
    await nc.flush()
    # the mirror caught up on both (with S1, which holds 5 more messages each time this runs
    # against the same servers)
    target = (await js.stream_info("S1")).state.messages
    for _ in range(100):
        if (await js.stream_info("M1")).state.messages == target:
            break
        await asyncio.sleep(0.1)
    return nc


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[ServerProc, ServerProc]]:
    with server_pair(
        lambda: start_nats_server(tmp_path / "oracle", name="oracle"),
        lambda: start_jetraft(tmp_path / "candidate", name="candidate"),
    ) as pair:
        yield pair


async def test_every_endpoint_and_option_has_nats_server_s_shape(
    servers: tuple[ServerProc, ServerProc],
) -> None:
    oracle, candidate = servers
    clients = [await traffic(oracle.port), await traffic(candidate.port)]
    try:
        problems = await asyncio.to_thread(
            compare_forms, oracle.http_port, candidate.http_port, SINGLE_FORMS
        )
    finally:
        for nc in clients:
            await nc.close()
    assert not problems, "\n".join(problems)


def test_malformed_options_get_nats_server_s_status_and_text(
    servers: tuple[ServerProc, ServerProc],
) -> None:
    oracle, candidate = servers
    for form in ERROR_FORMS:
        assert fetch(candidate.http_port, form) == fetch(oracle.http_port, form), form


HEALTHZ_FORMS = [
    "/healthz",
    "/healthz?js-enabled-only=true",
    "/healthz?js-enabled=true",
    "/healthz?js-server-only=true",
    "/healthz?js-meta-only=true",
    "/healthz?details=true",
    "/healthz?stream=H",
    "/healthz?stream=H&details=true",
    "/healthz?account=$G&consumer=C",
    "/healthz?account=$G&stream=H",
    "/healthz?account=$G&stream=NOPE",
    "/healthz?account=$G&stream=NOPE&details=true",
    "/healthz?account=other",
    "/healthz?account=other&details=true",
    "/healthz?account=$G&stream=H&consumer=C",
    "/healthz?account=$G&stream=H&consumer=NOPE",
    "/healthz?account=$G&stream=H&consumer=NOPE&details=true",
    "/healthz?details=maybe",
    "/healthz?js-server-only=2",
]


async def test_healthz_options_answer_as_nats_server(
    servers: tuple[ServerProc, ServerProc],
) -> None:
    """Status and body, exactly, for each option form (a stream H with a consumer C)."""
    for proc in servers:
        nc = await nats.connect(proc.url)
        try:
            js = nc.jetstream(timeout=5)
            await js.add_stream(name="H", subjects=["h.>"])
            await js.add_consumer("H", durable_name="C")
        finally:
            await nc.close()
    oracle, candidate = servers
    for form in HEALTHZ_FORMS:
        want = await asyncio.to_thread(fetch, oracle.http_port, form)
        got = await asyncio.to_thread(fetch, candidate.http_port, form)
        status, body = want
        assert got[0] == status, (form, want, got)
        if status == 400 and not body.lstrip().startswith("{"):
            assert got[1] == body, form
        else:
            assert json.loads(got[1]) == json.loads(body), (form, want, got)


def test_the_index_page_links_the_endpoints(servers: tuple[ServerProc, ServerProc]) -> None:
    _oracle, candidate = servers
    status, page = fetch(candidate.http_port, "/")
    assert status == 200
    for path in ("varz", "jsz", "connz", "routez", "subsz", "accountz", "healthz", "metrics"):
        assert f'href="./{path}"' in page


# --- a 3-node cluster each --------------------------------------------------------------------
def _nats_cluster(tmp_path: Path, nodes: int = 3) -> list[ServerProc]:
    ports = distinct_free_ports(3 * nodes)
    client, http, cluster = ports[:nodes], ports[nodes : 2 * nodes], ports[2 * nodes :]
    routes = ",".join(f"nats://{HOST}:{p}" for p in cluster)
    procs = []
    for i in range(nodes):
        name = f"n{i + 1}"
        argv = [str(NATS_SERVER_BIN), "-js", "-n", name, "-a", HOST, "-p", str(client[i])]
        argv += ["-m", str(http[i]), "-sd", str(tmp_path / name), "--cluster_name", "c"]
        argv += ["--cluster", f"nats://{HOST}:{cluster[i]}", "--routes", routes]
        procs.append(
            ServerProc(
                argv,
                name=name,
                port=client[i],
                http_port=http[i],
                store_dir=tmp_path / name,
                log_path=tmp_path / f"{name}.log",
            )
        )
    return procs


def _meta_formed(procs: list[ServerProc]) -> bool:
    for proc in procs:
        status, body = fetch(proc.http_port, "/jsz")
        meta = json.loads(body).get("meta_cluster", {}) if status == 200 else {}
        if not meta.get("leader") or len(meta.get("replicas", [])) != len(procs) - 1:
            return False
    return True


async def _cluster_traffic(urls: list[str]) -> nats.NATS:
    nc = await nats.connect(urls, name="probe")
    js = nc.jetstream()
    await js.add_stream(name="R3", subjects=["r3.>"], num_replicas=3)
    for _ in range(5):
        await js.publish("r3.a", b"hello")
    await js.add_consumer("R3", durable_name="C1")
    await nc.subscribe("bar")
    await nc.flush()
    return nc


def _stream_leader(procs: list[ServerProc]) -> ServerProc:
    for proc in procs:
        _status, body = fetch(proc.http_port, "/jsz?streams=true")
        for account in json.loads(body).get("account_details", []):
            for stream in account.get("stream_detail", []):
                if stream.get("cluster", {}).get("leader") == proc.name:
                    return proc
    raise AssertionError("no node leads R3")


async def test_cluster_documents_have_nats_server_s_shape(tmp_path: Path) -> None:
    oracle = _nats_cluster(tmp_path / "oracle")
    candidate = JetraftCluster(tmp_path / "candidate")
    clients: list[nats.NATS] = []
    try:
        for proc in oracle:
            proc.start(CLUSTER_READY_S)
        await asyncio.to_thread(candidate.start)
        assert await asyncio.to_thread(
            wait_until, lambda: _meta_formed(oracle), CLUSTER_READY_S, 0.2
        )
        clients.append(await _cluster_traffic([p.url for p in oracle]))
        clients.append(await _cluster_traffic(candidate.urls))
        leaders = await asyncio.to_thread(
            lambda: (_stream_leader(oracle), _stream_leader(candidate.nodes))
        )
        # both leaders' view (a leader lists the stream's replicas with their progress)
        problems = await asyncio.to_thread(
            compare_forms, leaders[0].http_port, leaders[1].http_port, CLUSTER_FORMS
        )
        assert not problems, "\n".join(problems)
    finally:
        for nc in clients:
            await nc.close()
        stop_servers([p for p in oracle if p.running])
        candidate.stop()
