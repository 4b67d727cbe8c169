"""What Kafka 4.0 answers DescribeConfigs for a topic, to compare tierlog's answer with."""

from __future__ import annotations

# Kafka 4.0's topic configs, in the order its DescribeConfigs lists them (the iteration
# order of the Scala HashMap its ConfigHelper gathers them in).
KAFKA_4_TOPIC_CONFIGS = [
    "compression.type",
    "remote.log.delete.on.disable",
    "leader.replication.throttled.replicas",
    "remote.storage.enable",
    "min.insync.replicas",
    "segment.jitter.ms",
    "remote.log.copy.disable",
    "local.retention.ms",
    "cleanup.policy",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "compression.lz4.level",
    "segment.bytes",
    "retention.ms",
    "compression.gzip.level",
    "flush.messages",
    "compression.zstd.level",
    "max.compaction.lag.ms",
    "file.delete.delay.ms",
    "max.message.bytes",
    "min.compaction.lag.ms",
    "message.timestamp.type",
    "local.retention.bytes",
    "preallocate",
    "min.cleanable.dirty.ratio",
    "index.interval.bytes",
    "unclean.leader.election.enable",
    "retention.bytes",
    "delete.retention.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "segment.ms",
    "segment.index.bytes",
]
