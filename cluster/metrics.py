"""``/metrics``: the node's numbers in the Prometheus text format (prometheus-client).

Read at scrape time by one custom collector, from the same documents ``/varz`` and ``/jsz``
serve: no thread, no copy of state kept between scrapes. The names and labels are those
prometheus-nats-exporter gives the same numbers (``gnatsd_varz_<key>`` for every number of
/varz, ``jetstream_server_*``, ``jetstream_stream_*`` and ``jetstream_consumer_*`` from /jsz),
so dashboards built for it work against a node directly; jetraft's own numbers (API requests,
Raft leadership and positions) are ``jetraft_*``. The standard ``process_*`` metrics come
from prometheus-client's process collector (it reads ``/proc`` at scrape time).

Must never: change state, or register anything in prometheus-client's global registry (every
server has its own).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from cluster.jsz import JszOptions, jsz
from cluster.monitoring import CpuSampler, MonitoredNode, varz

SERVER_LABELS = ["server_id", "server_name", "cluster", "domain", "meta_leader", "is_meta_leader"]
STREAM_LABELS = [
    *SERVER_LABELS,
    "account",
    "account_id",
    "stream_name",
    "stream_leader",
    "is_stream_leader",
]
CONSUMER_LABELS = [
    *STREAM_LABELS,
    "consumer_name",
    "consumer_leader",
    "is_consumer_leader",
    "consumer_desc",
    "consumer_created",
]
# (metric name, help, /jsz key): prometheus-nats-exporter's jsz server metrics
SERVER_METRICS = (
    ("jetstream_server_total_streams", "Total number of streams in JetStream", "streams"),
    ("jetstream_server_total_consumers", "Total number of consumers in JetStream", "consumers"),
    ("jetstream_server_total_messages", "Total number of stored messages in JetStream", "messages"),
    ("jetstream_server_total_message_bytes", "Total number of bytes stored in JetStream", "bytes"),
)
STREAM_METRICS = (
    ("jetstream_stream_total_messages", "Total number of messages from a stream", "messages"),
    ("jetstream_stream_total_bytes", "Total stored bytes from a stream", "bytes"),
    ("jetstream_stream_first_seq", "First sequence from a stream", "first_seq"),
    ("jetstream_stream_last_seq", "Last sequence from a stream", "last_seq"),
    (
        "jetstream_stream_consumer_count",
        "Total number of consumers from a stream",
        "consumer_count",
    ),
)
# (metric name, help, ConsumerInfo path)
CONSUMER_METRICS = (
    ("jetstream_consumer_delivered_consumer_seq", "Latest consumer sequence delivered",
     ("delivered", "consumer_seq")),
    ("jetstream_consumer_delivered_stream_seq", "Latest stream sequence delivered",
     ("delivered", "stream_seq")),
    ("jetstream_consumer_num_ack_pending", "Number of pending acks from a consumer",
     ("num_ack_pending",)),
    ("jetstream_consumer_num_redelivered", "Number of redelivered messages from a consumer",
     ("num_redelivered",)),
    ("jetstream_consumer_num_waiting", "Number of inflight fetch requests from a pull consumer",
     ("num_waiting",)),
    ("jetstream_consumer_num_pending", "Number of pending messages from a consumer",
     ("num_pending",)),
    ("jetstream_consumer_ack_floor_stream_seq", "Ack floor stream sequence of a consumer",
     ("ack_floor", "stream_seq")),
    ("jetstream_consumer_ack_floor_consumer_seq", "Ack floor consumer sequence of a consumer",
     ("ack_floor", "consumer_seq")),
)  # fmt: skip

RAFT_METRICS = (
    ("jetraft_stream_raft_leader", "1 while this replica leads its stream's group"),
    ("jetraft_stream_applied_index", "The last log index this replica applied"),
    ("jetraft_stream_raft_term", "The Raft term this replica is in"),
    ("jetraft_stream_raft_lag", "Committed entries this replica has not applied yet"),
)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _dig(doc: Mapping[str, Any], path: tuple[str, ...]) -> float:
    value: Any = doc
    for key in path:
        value = value.get(key, 0) if isinstance(value, Mapping) else 0
    return float(value or 0)


class NodeCollector(Collector):
    """Everything /metrics shows, computed when Prometheus scrapes."""

    def __init__(
        self, node: MonitoredNode, cpu: CpuSampler, http_req_stats: Mapping[str, int]
    ) -> None:
        self.node = node
        self.cpu = cpu
        self.http_req_stats = http_req_stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        node = self.node
        doc = varz(node, self.cpu, self.http_req_stats)
        for key, value in doc.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            gauge = GaugeMetricFamily(f"gnatsd_varz_{key}", key, labels=["server_id"])
            gauge.add_metric([node.server_id], value)
            yield gauge
        yield from self._jetstream()

    def _jetstream(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        node = self.node
        js = node.jetstream
        doc = jsz(js, node.js_setup, JszOptions(consumers=True, config=True))
        meta = doc.get("meta_cluster") or {}
        meta_leader = str(meta.get("leader", ""))
        is_meta_leader = not meta or meta_leader == node.name
        server = [
            node.server_id,
            node.name,
            str(meta.get("name", "")),
            "",
            meta_leader,
            _flag(is_meta_leader),
        ]
        disabled = GaugeMetricFamily(
            "jetstream_server_jetstream_disabled", "JetStream disabled or not", labels=SERVER_LABELS
        )
        disabled.add_metric(server, 1.0 if doc.get("disabled") else 0.0)
        yield disabled
        for name, key in (("max_memory", "max_memory"), ("max_storage", "max_storage")):
            gauge = GaugeMetricFamily(
                f"jetstream_server_{name}", f"JetStream {name} (-1: no limit)", labels=SERVER_LABELS
            )
            gauge.add_metric(server, float(doc["config"][key]))
            yield gauge
        for name, help_text, key in SERVER_METRICS:
            gauge = GaugeMetricFamily(name, help_text, labels=SERVER_LABELS)
            gauge.add_metric(server, float(doc[key]))
            yield gauge
        if js is None:
            return
        api = doc["api"]
        requests = CounterMetricFamily(
            "jetraft_jetstream_api_requests",
            "JetStream API requests answered",
            labels=["server_id"],
        )
        requests.add_metric([node.server_id], float(api["total"]))
        yield requests
        errors = CounterMetricFamily(
            "jetraft_jetstream_api_errors", "JetStream API requests answered with an error",
            labels=["server_id"],
        )  # fmt: skip
        errors.add_metric([node.server_id], float(api["errors"]))
        yield errors
        if meta:
            leader = GaugeMetricFamily(
                "jetraft_meta_leader",
                "1 while this node leads the meta group",
                labels=["server_id"],
            )
            leader.add_metric([node.server_id], 1.0 if is_meta_leader else 0.0)
            yield leader
        yield from self._streams(doc, server)

    def _streams(
        self, doc: Mapping[str, Any], server: list[str]
    ) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        node = self.node
        assert node.jetstream is not None
        authority = node.jetstream.authority
        stream_families = {
            name: GaugeMetricFamily(name, help_text, labels=STREAM_LABELS)
            for name, help_text, _key in STREAM_METRICS
        }
        consumer_families = {
            name: GaugeMetricFamily(name, help_text, labels=CONSUMER_LABELS)
            for name, help_text, _path in CONSUMER_METRICS
        }
        raft = {
            name: GaugeMetricFamily(name, help_text, labels=["server_id", "stream_name"])
            for name, help_text in RAFT_METRICS
        }
        for account in doc.get("account_details", []):
            for detail in account.get("stream_detail", []):
                name = detail["name"]
                stream_leader = str(detail.get("cluster", {}).get("leader", ""))
                labels = [
                    *server,
                    account["name"],
                    account["id"],
                    name,
                    stream_leader,
                    _flag(stream_leader == node.name),
                ]
                state = detail["state"]
                for metric, _help, key in STREAM_METRICS:
                    stream_families[metric].add_metric(labels, float(state.get(key, 0)))
                for consumer in detail.get("consumer_detail", []):
                    clabels = [
                        *labels,
                        consumer["name"],
                        stream_leader,
                        _flag(stream_leader == node.name),
                        str(consumer.get("config", {}).get("description", "")),
                        str(consumer.get("created", "")),
                    ]
                    for metric, _help, path in CONSUMER_METRICS:
                        consumer_families[metric].add_metric(clabels, _dig(consumer, path))
                host = authority.hosts.get(name)
                if host is None:
                    continue
                view = authority.raft_view(host)
                rlabels = [node.server_id, name]
                raft["jetraft_stream_raft_leader"].add_metric(rlabels, float(host.is_leader))
                raft["jetraft_stream_applied_index"].add_metric(
                    rlabels, float(host.stream.applied_index)
                )
                if "term" in view:
                    raft["jetraft_stream_raft_term"].add_metric(rlabels, float(view["term"]))
                    raft["jetraft_stream_raft_lag"].add_metric(rlabels, float(view["lag"] or 0))
        yield from stream_families.values()
        yield from consumer_families.values()
        yield from raft.values()


def metrics_text(
    node: MonitoredNode, cpu: CpuSampler, http_req_stats: Mapping[str, int]
) -> tuple[str, bytes]:
    """(content type, body) of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node, cpu, http_req_stats))
    ProcessCollector(registry=registry)
    return CONTENT_TYPE_LATEST, generate_latest(registry)
