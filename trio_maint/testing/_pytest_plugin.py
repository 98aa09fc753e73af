"""pytest plugin (entry point ``pytest11``) providing trio_maint's fixtures.

* ``redis_server`` (session scope): a real :class:`~trio_maint.testing.RedisServer` on a free
  loopback port, shared by the session's tests (flush it yourself if a test needs it empty).
* ``redis_cluster`` (session scope): a real :class:`~trio_maint.testing.LocalCluster` (3 masters
  with one replica each) on free loopback ports, shared by the session's tests.
* ``maintenance_simulator`` (function scope, needs pytest-trio): a running
  :class:`~trio_maint.testing.MaintenanceSimulator` forwarding to ``redis_server``; point your
  client at ``maintenance_simulator.url`` and inject notifications. See docs/testing.md.

A fixture of the same name in your own ``conftest.py`` overrides these.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from ._cluster import LocalCluster
from ._server import RedisServer
from ._simulator import MaintenanceSimulator


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server for the test session (stopped and reaped at the end).

    :raises RedisServerNotFoundError: no ``redis-server`` binary (Debian: ``redis-server``).
    """
    with RedisServer() as server:
        yield server


@pytest.fixture
async def maintenance_simulator(redis_server: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    """A :class:`MaintenanceSimulator` in front of ``redis_server``, closed after the test."""
    async with MaintenanceSimulator(backend=redis_server) as sim:
        yield sim


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """A real Redis Cluster (3 masters + 1 replica each) for the test session, stopped and
    reaped at the end. Tests that migrate slots or fail over change its layout.

    :raises RedisServerNotFoundError: no ``redis-server`` binary.
    """
    with LocalCluster() as cluster:
        yield cluster
