"""The broker settings of replication: ISR lag, and how followers fetch (Kafka's replica.*)."""

from __future__ import annotations

from dataclasses import dataclass

from core.server.config import BrokerConfig
from core.server.replication_quota import UNLIMITED, ReplicationQuota


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    """Kafka's defaults; ``from_config`` reads a broker's.

    Attributes:
        replica_lag_time_max_ms: a follower that has not caught up for this long leaves the
            ISR; the leader checks every half of it.
        replica_fetch_wait_max_ms: how long a follower's fetch waits at the leader.
        replica_fetch_min_bytes: the bytes a follower's fetch waits for.
        replica_fetch_max_bytes: the bytes per partition a follower asks for.
        replica_fetch_response_max_bytes: the size cap of a follower's fetch response.
        replica_fetch_backoff_ms: a follower's pause after a failed fetch.
        replica_socket_timeout_ms: how long a follower waits for the leader's answer.
        num_replica_fetchers: fetchers (connections) per source broker.
        request_timeout_ms: how long a transaction marker waits for the in-sync replicas
            (``request.timeout.ms``, as Kafka's WriteTxnMarkers does).
        leader_throttled_rate, follower_throttled_rate: the replication throttles in
            bytes/s (core/server/replication_quota.py); the default is no throttle.
        quota_window_num, quota_window_size_ms: how the throttled rates are measured.
        remote_log_storage_system_enable: this broker tiers
            (``remote.log.storage.system.enable``): a leader of a tiered partition whose
            log is empty waits for the remote tier to start it (see ReplicaManager).
    """

    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_response_max_bytes: int = 10_485_760
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30_000
    num_replica_fetchers: int = 1
    request_timeout_ms: int = 30_000
    leader_throttled_rate: int = UNLIMITED
    follower_throttled_rate: int = UNLIMITED
    quota_window_num: int = 11
    quota_window_size_ms: int = 1000
    remote_log_storage_system_enable: bool = False

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ReplicationSettings:
        return cls(
            replica_lag_time_max_ms=config.get("replica.lag.time.max.ms"),
            replica_fetch_wait_max_ms=config.get("replica.fetch.wait.max.ms"),
            replica_fetch_min_bytes=config.get("replica.fetch.min.bytes"),
            replica_fetch_max_bytes=config.get("replica.fetch.max.bytes"),
            replica_fetch_response_max_bytes=config.get("replica.fetch.response.max.bytes"),
            replica_fetch_backoff_ms=config.get("replica.fetch.backoff.ms"),
            replica_socket_timeout_ms=config.get("replica.socket.timeout.ms"),
            num_replica_fetchers=config.get("num.replica.fetchers"),
            request_timeout_ms=config.get("request.timeout.ms"),
            leader_throttled_rate=config.get("leader.replication.throttled.rate"),
            follower_throttled_rate=config.get("follower.replication.throttled.rate"),
            quota_window_num=config.get("replication.quota.window.num"),
            quota_window_size_ms=config.get("replication.quota.window.size.seconds") * 1000,
            remote_log_storage_system_enable=config.remote_log_storage_system_enable,
        )

    def leader_quota(self) -> ReplicationQuota:
        return ReplicationQuota(
            self.leader_throttled_rate, self.quota_window_num, self.quota_window_size_ms
        )

    def follower_quota(self) -> ReplicationQuota:
        return ReplicationQuota(
            self.follower_throttled_rate, self.quota_window_num, self.quota_window_size_ms
        )
