"""/healthz tells the truth in a cluster (issue 17): a node that loses its majority answers 503
with the reason, and 200 again once the cluster healed. Readiness is asked at every request, not
a flag set once.

Must never: sleep blindly (every wait polls with a deadline), or leave a node running.
"""

from __future__ import annotations

import pytest

from tests.servers import JetraftCluster, http_get_json

pytestmark = pytest.mark.integration

UNHEALTHY_TIMEOUT_S = 20.0
HEAL_TIMEOUT_S = 60.0
HTTP_UNAVAILABLE = 503


def test_a_node_without_a_majority_is_unhealthy_until_healed(
    fresh_jetraft_cluster: JetraftCluster,
) -> None:
    cluster = fresh_jetraft_cluster
    cluster.wait_healthy()
    cluster.kill(1)
    # one node down: two of three still reach each other
    cluster.wait_for(lambda: cluster.healthy(0), UNHEALTHY_TIMEOUT_S, "node 0 healthy with 2/3")
    cluster.kill(2)
    cluster.wait_for(lambda: not cluster.healthy(0), UNHEALTHY_TIMEOUT_S, "node 0 unhealthy alone")
    status, body = http_get_json(cluster.nodes[0].http_port, "/healthz")
    assert status == HTTP_UNAVAILABLE
    assert body["status"] == "unavailable" and "majority" in body["error"], body
    cluster.restart(1, HEAL_TIMEOUT_S)  # waits for node 1's own /healthz 200
    cluster.wait_for(lambda: cluster.healthy(0), HEAL_TIMEOUT_S, "node 0 healthy again")
    cluster.restart(2, HEAL_TIMEOUT_S)
    cluster.wait_healthy(timeout_s=HEAL_TIMEOUT_S)
