"""trio_maint.testing.LocalCluster itself: the sync context manager, membership changes,
ports."""

from __future__ import annotations

import pytest

from trio_maint.testing import ClusterError, LocalCluster


def test_testing_cluster_sync_membership() -> None:
    """The sync context manager, a replica added and removed, and the port rule."""
    with LocalCluster(masters=2, replicas=0, node_timeout=1.0) as cluster:
        assert len(cluster.masters) == 2
        assert all(n.port + 10000 < 65536 and n.port < 55535 for n in cluster.nodes)
        master = cluster.masters[0]
        replica = cluster.add_node(replica_of=master)
        assert cluster.replicas_of(master) == [replica]
        assert cluster.role_of(replica) == "replica"
        with pytest.raises(ClusterError):
            cluster.remove_node(master)  # serves slots
        cluster.remove_node(replica)
        assert replica not in cluster.nodes
        assert replica.server.process is not None
        assert replica.server.process.poll() is not None  # stopped and reaped
    assert cluster.nodes == []
