"""The partition log in Apache Kafka's on-disk format: segments, indexes, checkpoints,
leader-epoch cache, producer state, recovery, retention and the LogManager."""
