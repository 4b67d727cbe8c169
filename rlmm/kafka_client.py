"""``MetadataTopicClient`` over the Kafka protocol, with a real client (confluent-kafka).

Used where the metadata manager runs outside a broker (the CLI, Spark) or is configured
with ``remote.log.metadata.common.client.bootstrap.servers``. It speaks only ordinary
client APIs (Metadata, CreateTopics, Produce, Fetch, ListOffsets), so it works against any
broker holding ``__remote_log_metadata``: tierlog's and Apache Kafka's alike. Reading is open;
a tierlog broker takes writes (``append``, and ``ensure_topic`` creating the topic) only from
its ``super.users`` (docs/CONFIGURATION.md, "Internal topics"): pass the credentials as
client settings.

- ``append``: an idempotent producer with ``acks=all``; the call returns the record's offset
  once the delivery report says the write is acknowledged by every in-sync replica.
- ``read``: a consumer with ``assign()`` at the requested offset. It never joins a group nor
  commits offsets (its ``group.id`` is a random throw-away), reads up to the high watermark
  and returns within ``timeout_s``.
- ``ensure_topic``: creates the topic with ``retention.ms=-1`` and ``cleanup.policy=delete``
  (every event is kept: it is the only record of where remote data is), or checks the
  partition count of the existing one.

confluent-kafka is imported when a client is built, never when ``rlmm`` is imported.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlmm.topic_client import METADATA_TOPIC, MetadataRecord, MetadataTopicError

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

METADATA_TOPIC_CONFIGS = {"retention.ms": "-1", "cleanup.policy": "delete"}
DEFAULT_TIMEOUT_S = 30.0
# How long one consume() call waits; end of partition is signalled by an EOF event sooner.
_POLL_S = 0.2


class KafkaMetadataTopicClient:
    """``__remote_log_metadata`` through confluent-kafka. Thread-safe.

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        timeout_s: the bound of every blocking call (metadata, create, append, read).
        replication_factor: for a topic this client creates; -1 is the broker's
            ``default.replication.factor``.
        **client_config: further librdkafka properties for every client (for example
            ``security.protocol``), in their dotted names; pass them as
            ``**{"security.protocol": "SSL"}``.

    Raises:
        MetadataTopicError: confluent-kafka is not installed, or a property is invalid.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        replication_factor: int = -1,
        **client_config: str,
    ) -> None:
        try:
            import confluent_kafka  # noqa: F401 - fail here, loudly, not at first use
        except ModuleNotFoundError as e:
            raise MetadataTopicError(
                "the Kafka metadata-topic client needs confluent-kafka: pip install confluent-kafka"
            ) from e
        if not bootstrap_servers:
            raise MetadataTopicError("no bootstrap servers given")
        self.bootstrap_servers = bootstrap_servers
        self.timeout_s = timeout_s
        self.replication_factor = replication_factor
        self._common: dict[str, Any] = {**client_config, "bootstrap.servers": bootstrap_servers}
        self._lock = threading.Lock()  # creation of the clients
        self._read_lock = threading.Lock()  # the consumer is used by one thread at a time
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._closed = False

    # -- the underlying clients --------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise MetadataTopicError("the metadata-topic client is closed")

    def _admin_client(self) -> AdminClient:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        with self._lock:
            self._check_open()
            if self._admin is None:
                try:
                    self._admin = AdminClient(dict(self._common))
                except (KafkaException, ValueError, TypeError) as e:
                    raise MetadataTopicError(f"cannot build a Kafka admin client: {e}") from e
            return self._admin

    def _producer_client(self) -> Producer:
        from confluent_kafka import KafkaException, Producer

        with self._lock:
            self._check_open()
            if self._producer is None:
                config = {
                    **self._common,
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 0,
                    # librdkafka fails the delivery itself by then; append waits a bit longer.
                    "message.timeout.ms": int(self.timeout_s * 1000),
                }
                try:
                    self._producer = Producer(config)
                except (KafkaException, ValueError, TypeError) as e:
                    raise MetadataTopicError(f"cannot build a Kafka producer: {e}") from e
            return self._producer

    def _consumer_client(self) -> Consumer:
        from confluent_kafka import Consumer, KafkaException

        with self._lock:
            self._check_open()
            if self._consumer is None:
                config = {
                    **self._common,
                    # librdkafka wants a group id; this one never joins nor commits.
                    "group.id": f"tierlog-rlmm-reader-{uuid.uuid4()}",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": True,
                    "isolation.level": "read_uncommitted",
                    "auto.offset.reset": "earliest",
                    "allow.auto.create.topics": False,
                    "fetch.wait.max.ms": 100,
                }
                try:
                    self._consumer = Consumer(config)
                except (KafkaException, ValueError, TypeError) as e:
                    raise MetadataTopicError(f"cannot build a Kafka consumer: {e}") from e
            return self._consumer

    # -- topic ---------------------------------------------------------------------------------

    def _topic_partitions(self, topic: str) -> int | None:
        """The partition count of ``topic``, or None when it does not exist.

        Asks for the metadata of every topic: a request naming the topic could create it on
        a broker with ``auto.create.topics.enable`` (the admin client is a producer to
        librdkafka, which allows auto-creation).
        """
        from confluent_kafka import KafkaException

        try:
            metadata = self._admin_client().list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            raise MetadataTopicError(
                f"cannot read the metadata of {self.bootstrap_servers}: {e}"
            ) from e
        info = metadata.topics.get(topic)
        if info is None:
            return None
        if info.error is not None:
            raise MetadataTopicError(f"{topic}: {info.error}")
        return len(info.partitions)

    def ensure_topic(self, num_partitions: int) -> None:
        """See ``MetadataTopicClient.ensure_topic``.

        Raises:
            MetadataTopicError: the topic exists with another partition count, or cannot be
                created or seen within ``timeout_s``.
        """
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        if num_partitions <= 0:
            raise ValueError(f"number of partitions must be positive, got {num_partitions}")
        count = self._topic_partitions(METADATA_TOPIC)
        if count is None:
            new = NewTopic(
                METADATA_TOPIC,
                num_partitions=num_partitions,
                replication_factor=self.replication_factor,
                config=dict(METADATA_TOPIC_CONFIGS),
            )
            futures = self._admin_client().create_topics(
                [new], request_timeout=self.timeout_s, operation_timeout=self.timeout_s
            )
            try:
                futures[METADATA_TOPIC].result(timeout=self.timeout_s + 5)
            except KafkaException as e:
                error = e.args[0] if e.args else None
                if not (
                    isinstance(error, KafkaError)
                    and error.code() == KafkaError.TOPIC_ALREADY_EXISTS
                ):
                    raise MetadataTopicError(f"cannot create {METADATA_TOPIC}: {e}") from e
            except TimeoutError as e:
                raise MetadataTopicError(f"creating {METADATA_TOPIC} timed out") from e
            count = self._wait_for_topic()
        if count != num_partitions:
            raise MetadataTopicError(
                f"{METADATA_TOPIC} has {count} partitions but {num_partitions} are configured "
                "(remote.log.metadata.topic.num.partitions): the metadata partition of every "
                "user partition would change"
            )

    def _wait_for_topic(self) -> int:
        deadline = time.monotonic() + self.timeout_s
        while True:
            count = self._topic_partitions(METADATA_TOPIC)
            if count:
                return count
            if time.monotonic() >= deadline:
                raise MetadataTopicError(f"{METADATA_TOPIC} was created but is not visible")
            time.sleep(0.1)

    def partition_count(self) -> int:
        """Raises: MetadataTopicError: the topic does not exist or the cluster is unreachable."""
        count = self._topic_partitions(METADATA_TOPIC)
        if count is None:
            raise MetadataTopicError(f"{METADATA_TOPIC} does not exist on {self.bootstrap_servers}")
        return count

    # -- writes --------------------------------------------------------------------------------

    def append(self, partition: int, value: bytes, *, durable: bool = True) -> int:
        """See ``MetadataTopicClient.append``: returns once acknowledged with ``acks=all``
        (durable by replication, as Kafka's own metadata manager writes; ``durable`` changes
        nothing).

        Raises:
            MetadataTopicError: the delivery failed or was not reported within
                ``timeout_s``. In the second case the record may still be written later
                (events are idempotent to replay, so a retry is safe).
        """
        from confluent_kafka import KafkaException

        producer = self._producer_client()
        done = threading.Event()
        outcome: list[Any] = []

        def on_delivery(err: Any, msg: Any) -> None:
            outcome.append(err if err is not None else msg.offset())
            done.set()

        deadline = time.monotonic() + self.timeout_s + 5
        while True:
            try:
                producer.produce(
                    METADATA_TOPIC, value=value, partition=partition, on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.1)  # the local queue is full: let deliveries drain it
            except KafkaException as e:
                raise MetadataTopicError(
                    f"append to {METADATA_TOPIC}-{partition} failed: {e}"
                ) from e
            if time.monotonic() >= deadline:
                raise MetadataTopicError(f"append to {METADATA_TOPIC}-{partition}: queue full")
        while not done.is_set():
            if time.monotonic() >= deadline:
                raise MetadataTopicError(
                    f"append to {METADATA_TOPIC}-{partition}: no delivery report within "
                    f"{self.timeout_s + 5:.0f}s"
                )
            # Serves this call's callback, or another thread's; either may set `done`.
            producer.poll(0.05)
        result = outcome[0]
        if not isinstance(result, int):
            raise MetadataTopicError(f"append to {METADATA_TOPIC}-{partition} failed: {result}")
        return result

    # -- reads ---------------------------------------------------------------------------------

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        from confluent_kafka import KafkaException, TopicPartition

        consumer = self._consumer_client()
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self.timeout_s, cached=False
            )
        except KafkaException as e:
            # librdkafka sends the request to the leader it last knew and, when that broker
            # is down, lets it time out without refreshing its metadata (its periodic
            # refresh is minutes away): every retry would ask the dead broker again. Ask
            # for the partition's metadata now, so that the next read goes to the leader
            # the controller elected since (Kafka's Java clients refresh on disconnects).
            _quietly(lambda: consumer.list_topics(topic, timeout=self.timeout_s))
            raise MetadataTopicError(f"cannot read the offsets of {topic}-{partition}: {e}") from e
        return int(low), int(high)

    def end_offset(self, partition: int) -> int:
        """The high watermark of the metadata partition.

        Raises:
            MetadataTopicError: the partition does not exist or the broker is unreachable.
        """
        with self._read_lock:
            return self._watermarks(METADATA_TOPIC, partition)[1]

    def high_watermark(self, topic: str, partition: int) -> int:
        """The high watermark of any partition (not part of ``MetadataTopicClient``; the CLI
        uses it for the copy lag of user partitions).

        Raises:
            MetadataTopicError: the partition does not exist or the broker is unreachable.
        """
        with self._read_lock:
            return self._watermarks(topic, partition)[1]

    def read(self, partition: int, start_offset: int, max_records: int) -> list[MetadataRecord]:
        """See ``MetadataTopicClient.read``: the records in ``[start_offset, high watermark)``
        at the time of the call, at most ``max_records``.

        Returns early with the records read so far when ``timeout_s`` passes.

        Raises:
            MetadataTopicError: a consumer error, or nothing at all read within
                ``timeout_s`` although the high watermark is above ``start_offset``.
        """
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        if max_records < 1:
            return []
        with self._read_lock:
            low, high = self._watermarks(METADATA_TOPIC, partition)
            start = max(start_offset, low)
            if start >= high:
                return []
            consumer = self._consumer_client()
            out: list[MetadataRecord] = []
            deadline = time.monotonic() + self.timeout_s
            try:
                consumer.assign([TopicPartition(METADATA_TOPIC, partition, start)])
                reached = False
                while not reached and len(out) < max_records:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        if out:
                            break
                        raise MetadataTopicError(
                            f"{METADATA_TOPIC}-{partition}: nothing read from offset {start} "
                            f"within {self.timeout_s:.0f}s (high watermark {high})"
                        )
                    batch = consumer.consume(
                        min(max_records - len(out), 10_000), timeout=min(left, _POLL_S)
                    )
                    for msg in batch:
                        err = msg.error()
                        # The one consumer serves every partition in turn: a record or an
                        # end-of-partition event of an earlier read's assignment, if the
                        # client ever hands one over late, belongs to another partition.
                        ours = msg.topic() == METADATA_TOPIC and msg.partition() == partition
                        if err is not None:
                            if err.code() == KafkaError._PARTITION_EOF:
                                reached = reached or ours
                                continue
                            raise MetadataTopicError(
                                f"reading {METADATA_TOPIC}-{partition} failed: {err}"
                            )
                        if not ours:
                            continue
                        offset = msg.offset()
                        if offset >= high:
                            reached = True
                            continue
                        if offset >= start and msg.value() is not None:
                            out.append(MetadataRecord(partition, offset, msg.value()))
                        if offset >= high - 1:
                            reached = True
            except KafkaException as e:
                raise MetadataTopicError(f"reading {METADATA_TOPIC}-{partition} failed: {e}") from e
            finally:
                _quietly(consumer.unassign)
            return out[:max_records]

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Flush pending appends (within ``timeout_s``) and close the connections; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            producer, consumer = self._producer, self._consumer
            self._producer = self._consumer = self._admin = None
        if producer is not None:
            producer.flush(self.timeout_s)
        if consumer is not None:
            with self._read_lock:
                _quietly(consumer.close)


def _quietly(call: Callable[[], object]) -> None:
    """Run a clean-up call whose failure must not hide the error being raised."""
    from confluent_kafka import KafkaException

    with contextlib.suppress(KafkaException, RuntimeError):
        call()
