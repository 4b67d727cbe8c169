"""Fixtures every test directory may use, registered once (their code is in tests/support):
a real ZooKeeper (``zookeeper``, ``zk_chroot``, ``zookeeper_factory``), an S3 endpoint with a
bucket per test (``s3_endpoint``, ``bucket``) and the broker processes a test started
(``brokers``, SIGKILLed at the end) and clusters of broker processes on that ZooKeeper
(``cluster_factory``)."""

from __future__ import annotations

from tests.support.cluster import cluster_factory  # noqa: F401 - fixture
from tests.support.s3_harness import brokers, bucket, s3_endpoint  # noqa: F401 - fixtures
from tests.support.zookeeper_server import (  # noqa: F401 - fixtures
    zk_chroot,
    zookeeper,
    zookeeper_factory,
    zookeeper_server,
)
