"""A real tierlog cluster for the tests: one ZooKeeper and N ``tierlog broker start``
processes sharing it, and waits (with deadlines) on what the cluster records.

What the helpers read is ZooKeeper's, the cluster's record: ``/controller``,
``/brokers/ids`` and each partition's ``state`` znode (leader, leader epoch, ISR), written
by the controller and by leaders changing their ISR. Clients see the same through Metadata
once the controller's UpdateMetadata arrived; tests that care about what a client sees ask
a client.

Each test gets a chroot of its own on the session's ZooKeeper (``zk_chroot``), so clusters
of different tests never meet. Brokers are killed (SIGKILL) at the end of the test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from core.server.api_keys import ApiKey
from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.kafka_wire import call, metadata_request

DEADLINE_S = 30.0
# Short ZooKeeper sessions and replica lag: a SIGKILLed broker's registration goes within
# seconds, and a dead follower leaves the ISR within seconds (Kafka's defaults are 18 s
# and 30 s). The tests' ZooKeeper runs tickTime=500, so 4 s sessions are allowed.
CLUSTER_SETTINGS: dict[str, str] = {
    "zookeeper.session.timeout.ms": "4000",
    "zookeeper.connection.timeout.ms": "10000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "controlled.shutdown.retry.backoff.ms": "500",
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "auto.leader.rebalance.enable": "false",
}


@dataclass
class Cluster:
    """Brokers 1..N of one cluster; ``brokers[id]`` is the running (or dead) process."""

    base_dir: Path
    zk_connect: str  # with the cluster's chroot
    settings: dict[str, str]
    brokers: dict[int, BrokerProcess] = field(default_factory=dict)
    _zk: KazooClient | None = None

    # -- brokers ---------------------------------------------------------------------------
    def start_broker(
        self,
        broker_id: int,
        extra: Mapping[str, str] | None = None,
        command_prefix: Sequence[str] = (),
    ) -> BrokerProcess:
        """Start broker ``broker_id``; ``command_prefix`` runs it under a program that execs
        it (``ip netns exec <ns>`` to start it in a network namespace)."""
        settings = {
            **self.settings,
            "node.id": str(broker_id),
            "zookeeper.connect": self.zk_connect,
            **(extra or {}),
        }
        process = start_broker(
            self.base_dir / f"broker-{broker_id}", settings, command_prefix=command_prefix
        )
        self.brokers[broker_id] = process
        return process

    def restart(self, broker_id: int) -> BrokerProcess:
        """Start a stopped or killed broker again, on its data and ports."""
        old = self.brokers[broker_id]
        assert old.proc.poll() is not None, f"broker {broker_id} is still running"
        self.brokers[broker_id] = restart(old)
        return self.brokers[broker_id]

    def kill(self, broker_id: int) -> None:
        """SIGKILL: a crash."""
        self.brokers[broker_id].kill()

    def stop(self, broker_id: int, timeout: float = 60.0) -> int:
        """SIGTERM (controlled shutdown) and wait; the exit status."""
        return self.brokers[broker_id].stop(timeout)

    def alive(self) -> list[int]:
        return sorted(b for b, p in self.brokers.items() if p.proc.poll() is None)

    @property
    def bootstrap(self) -> str:
        """Every running broker, as clients are configured."""
        return ",".join(self.brokers[b].bootstrap for b in self.alive())

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(
            f"--- broker {b} ---\n{p.log_tail(lines)}" for b, p in sorted(self.brokers.items())
        )

    # -- what ZooKeeper records ------------------------------------------------------------
    @property
    def zk(self) -> KazooClient:
        if self._zk is None:
            self._zk = KazooClient(hosts=self.zk_connect)
            self._zk.start(timeout=DEADLINE_S)
        return self._zk

    def _json(self, path: str) -> Any | None:
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return None
        return json.loads(data) if data else None

    def controller(self) -> int | None:
        """The broker holding ``/controller``, None without one."""
        data = self._json("/controller")
        return data["brokerid"] if data else None

    def registered(self) -> list[int]:
        """The brokers registered at ``/brokers/ids``."""
        try:
            return sorted(int(c) for c in self.zk.get_children("/brokers/ids"))
        except NoNodeError:
            return []

    def state(self, topic: str, partition: int) -> dict[str, Any] | None:
        """``{"leader", "leader_epoch", "isr", ...}`` of a partition, None before created."""
        return self._json(f"/brokers/topics/{topic}/partitions/{partition}/state")

    def replicas(self, topic: str, partition: int) -> list[int]:
        data = self._json(f"/brokers/topics/{topic}")
        return list(data["partitions"][str(partition)]) if data else []

    def leader(self, topic: str, partition: int) -> int:
        state = self.state(topic, partition)
        return state["leader"] if state else -1

    def isr(self, topic: str, partition: int) -> list[int]:
        state = self.state(topic, partition)
        return sorted(state["isr"]) if state else []

    # -- waits -------------------------------------------------------------------------------
    def wait(self, predicate: Callable[[], object], what: str, timeout: float = DEADLINE_S) -> Any:
        """Poll until ``predicate()`` is truthy (its value is returned); fail after ``timeout``
        with the brokers' log tails."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.log_tails()}")

    def wait_controller(self, among: list[int] | None = None, timeout: float = DEADLINE_S) -> int:
        """A controller among ``among`` (default: the running brokers)."""
        candidates = among if among is not None else self.alive()

        def found() -> int | None:
            c = self.controller()
            return c if c in candidates else None

        return self.wait(found, f"a controller among {candidates}", timeout)

    def wait_registered(self, brokers: list[int], timeout: float = DEADLINE_S) -> None:
        self.wait(
            lambda: set(brokers) <= set(self.registered()), f"brokers {brokers} registered", timeout
        )

    def plaintext_endpoint(self, broker_id: int) -> str | None:
        """``host:port`` of a listener of the broker that takes unauthenticated plaintext
        connections, or None."""
        protocols = dict(
            pair.split(":", 1)
            for pair in self.settings.get("listener.security.protocol.map", "").split(",")
            if pair
        )
        for name, endpoint in self.brokers[broker_id].endpoints.items():
            if protocols.get(name, name) == "PLAINTEXT":
                return endpoint
        return None

    def wait_metadata_propagated(self, brokers: list[int], timeout: float = DEADLINE_S) -> None:
        """Every broker of ``brokers`` answers Metadata with all of them and a controller:
        the controller's first UpdateMetadata reached each. Until then a broker answers with
        itself alone and no controller (Kafka: no broker at all), and a client that
        bootstraps then may keep that answer (kafka-python's admin client does, and fails
        with UnknownBrokerIdError when it learns the controller's id). Asked on a plaintext
        listener; a cluster without one (SASL-only) is not waited for here."""
        endpoints = {b: self.plaintext_endpoint(b) for b in brokers}
        if None in endpoints.values():
            return

        def knows_all(endpoint: str) -> bool:
            try:
                answer = call(endpoint, ApiKey.METADATA, 12, metadata_request([]))
            except OSError:
                return False
            listed = {int(b.node_id) for b in answer.brokers}
            return listed == set(brokers) and int(answer.controller_id) in listed

        self.wait(
            lambda: all(knows_all(e) for e in endpoints.values() if e is not None),
            f"brokers {brokers} all listed, with a controller, by each of them",
            timeout,
        )

    def wait_leader(
        self,
        topic: str,
        partition: int,
        among: list[int] | None = None,
        timeout: float = DEADLINE_S,
    ) -> int:
        """A leader among ``among`` (default: the running brokers); returns it."""
        candidates = among if among is not None else self.alive()

        def found() -> int | None:
            leader = self.leader(topic, partition)
            return leader if leader in candidates else None

        return self.wait(found, f"a leader of {topic}-{partition} among {candidates}", timeout)

    def wait_isr(
        self, topic: str, partition: int, size: int, timeout: float = DEADLINE_S
    ) -> list[int]:
        """An ISR of exactly ``size`` replicas; returns it."""

        def found() -> list[int] | None:
            isr = self.isr(topic, partition)
            return isr if len(isr) == size else None

        return self.wait(found, f"ISR of {topic}-{partition} with {size} replicas", timeout)

    def wait_topic(
        self, topic: str, partitions: int, isr: int, timeout: float = DEADLINE_S
    ) -> None:
        """Every partition led, with ISRs of ``isr`` replicas."""
        for p in range(partitions):
            self.wait_leader(topic, p, timeout=timeout)
            self.wait_isr(topic, p, isr, timeout=timeout)

    def close(self) -> None:
        for process in self.brokers.values():
            process.kill()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()


def start_cluster(
    base_dir: Path,
    zk_connect: str,
    size: int = 3,
    settings: Mapping[str, str] | None = None,
) -> Cluster:
    """Start brokers 1..``size`` and wait until all are registered, one is controller, and
    each broker's metadata lists them all (what a client bootstrapping then sees)."""
    cluster = Cluster(base_dir, zk_connect, {**CLUSTER_SETTINGS, **(settings or {})})
    try:
        # Started side by side: each start waits for its broker's "listening on" line.
        with ThreadPoolExecutor(size) as pool:
            for started in pool.map(cluster.start_broker, range(1, size + 1)):
                assert started.proc.poll() is None
        cluster.wait_registered(list(range(1, size + 1)))
        cluster.wait_controller()
        cluster.wait_metadata_propagated(list(range(1, size + 1)))
    except BaseException:
        cluster.close()
        raise
    return cluster


@pytest.fixture
def cluster_factory(tmp_path: Path, zk_chroot: str) -> Iterator[Callable[..., Cluster]]:
    """Start clusters on the session's ZooKeeper (one chroot per test); brokers are
    SIGKILLed at the end."""
    started: list[Cluster] = []

    def factory(size: int = 3, settings: Mapping[str, str] | None = None) -> Cluster:
        name = f"cluster-{len(started)}"
        cluster = start_cluster(tmp_path / name, f"{zk_chroot}-{len(started)}", size, settings)
        started.append(cluster)
        return cluster

    yield factory
    for cluster in started:
        cluster.close()
