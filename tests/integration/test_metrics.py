"""``/metrics``: Prometheus text that prometheus-client's own parser reads, with the metric names
prometheus-nats-exporter uses for the same numbers (``gnatsd_varz_*``, ``jetstream_*``) and
jetraft's own (``jetraft_*``), each with a plausible value after known traffic; in a cluster
exactly one replica of a stream says it leads."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.monitoring import go_float, go_uptime
from tests.servers import HOST, start_jetraft, start_jetraft_cluster

pytestmark = pytest.mark.integration

HTTP_TIMEOUT_S = 5.0
Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(http_port: int) -> tuple[str, Samples]:
    url = f"http://{HOST}:{http_port}/metrics"
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as reply:
        content_type = reply.headers["Content-Type"]
        text = reply.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return content_type, samples


def one(samples: Samples, name: str, **labels: str) -> float:
    found = [v for lbls, v in samples[name] if all(lbls.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


async def test_metrics_parse_and_carry_the_node_s_numbers(tmp_path: Path) -> None:
    server = start_jetraft(tmp_path)
    try:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="S1", subjects=["s1.>"])
        await js.add_stream(name="S2", subjects=["s2.>"], storage="memory")
        for _ in range(5):
            await js.publish("s1.a", b"hello")
        await js.add_consumer("S1", durable_name="C1")
        sub = await js.pull_subscribe("s1.a", durable="C1", stream="S1")
        await sub.fetch(2, timeout=5)
        try:
            await js.stream_info("NOPE")
        except nats.js.errors.NotFoundError:
            pass
        content_type, samples = scrape(server.http_port)
        await nc.close()
    finally:
        server.stop()
    assert content_type.startswith("text/plain")
    assert one(samples, "gnatsd_varz_connections") == 1
    assert one(samples, "gnatsd_varz_total_connections") >= 1  # and the readiness probe's
    assert one(samples, "gnatsd_varz_in_msgs") >= 5 + 4  # the publishes and API requests
    assert one(samples, "gnatsd_varz_in_bytes") >= 5 * len(b"hello")
    assert one(samples, "gnatsd_varz_out_msgs") >= 5 + 2  # the PubAcks and fetched messages
    assert one(samples, "gnatsd_varz_out_bytes") > 0
    assert one(samples, "gnatsd_varz_mem") > 1024 * 1024
    assert one(samples, "gnatsd_varz_cores") >= 1
    assert 0 <= one(samples, "gnatsd_varz_cpu") <= 100 * one(samples, "gnatsd_varz_cores")
    assert one(samples, "gnatsd_varz_subscriptions") > 0
    assert one(samples, "jetstream_server_jetstream_disabled") == 0
    assert one(samples, "jetstream_server_total_streams") == 2
    assert one(samples, "jetstream_server_total_consumers") == 1
    assert one(samples, "jetstream_server_total_messages") == 5
    assert one(samples, "jetstream_stream_total_messages", stream_name="S1") == 5
    assert one(samples, "jetstream_stream_total_messages", stream_name="S2") == 0
    assert one(samples, "jetstream_stream_total_bytes", stream_name="S1") > 5 * len(b"hello")
    assert one(samples, "jetstream_stream_last_seq", stream_name="S1") == 5
    assert one(samples, "jetstream_stream_consumer_count", stream_name="S1") == 1
    assert one(samples, "jetstream_consumer_delivered_stream_seq", consumer_name="C1") == 2
    assert one(samples, "jetstream_consumer_num_pending", consumer_name="C1") == 3
    assert one(samples, "jetstream_consumer_num_ack_pending", consumer_name="C1") == 2
    assert one(samples, "jetraft_stream_raft_leader", stream_name="S1") == 1
    assert one(samples, "jetraft_stream_applied_index", stream_name="S1") >= 5
    assert one(samples, "jetraft_jetstream_api_requests_total") >= 4
    assert one(samples, "jetraft_jetstream_api_errors_total") >= 1
    assert one(samples, "process_resident_memory_bytes") > 0
    assert "jetraft_meta_leader" not in samples  # no meta group on a single server


async def test_in_a_cluster_one_replica_leads_and_the_meta_leader_is_known(
    tmp_path: Path,
) -> None:
    with start_jetraft_cluster(tmp_path) as cluster:
        nc = await nats.connect(cluster.urls)
        js = nc.jetstream()
        await js.add_stream(name="R3", subjects=["r3.>"], num_replicas=3)
        await js.publish("r3.a", b"x")
        await nc.close()
        scraped = [scrape(node.http_port)[1] for node in cluster.nodes]
    assert sum(one(s, "jetraft_stream_raft_leader", stream_name="R3") for s in scraped) == 1
    assert sum(one(s, "jetraft_meta_leader") for s in scraped) == 1
    meta_leaders = set()
    for s in scraped:
        assert one(s, "jetraft_stream_raft_term", stream_name="R3") >= 1
        assert one(s, "gnatsd_varz_routes") == 4  # a dialed and an accepted link per peer
        ((labels, streams),) = s["jetstream_server_total_streams"]
        assert streams == 1
        meta_leaders.add(labels["meta_leader"])
        if labels["is_meta_leader"] == "true":
            assert one(s, "jetraft_meta_leader") == 1
    assert len(meta_leaders) == 1 and meta_leaders != {""}


def test_go_formats() -> None:
    assert [go_uptime(s * 1_000_000_000) for s in (0, 7, 62, 3601, 90061, 31_622_401)] == [
        "0s",
        "7s",
        "1m2s",
        "1h0m1s",
        "1d1h1m1s",
        "1y1d0h0m1s",
    ]
    assert go_float(2.0) == 2 and isinstance(go_float(2.0), int) and go_float(0.5) == 0.5
