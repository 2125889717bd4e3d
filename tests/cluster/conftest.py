"""Fixtures for tests that run a real 3-node jetraft cluster.

``jetraft_cluster`` is one cluster per test module, for tests that only add and remove their own
streams; ``fresh_jetraft_cluster`` is one per test, for tests that kill or restart nodes. Either
way every node is stopped by pid afterwards, whatever happened.
Must never: share a cluster between tests that change its membership or kill nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import JetraftCluster, start_jetraft_cluster

CLUSTER_NODES = 3


@pytest.fixture(scope="module")
def jetraft_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JetraftCluster]:
    cluster = start_jetraft_cluster(tmp_path_factory.mktemp("cluster"), CLUSTER_NODES)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def fresh_jetraft_cluster(tmp_path: Path) -> Iterator[JetraftCluster]:
    cluster = start_jetraft_cluster(tmp_path, CLUSTER_NODES)
    try:
        yield cluster
    finally:
        cluster.stop()
