"""Real Kafka clients driven the same way: produce a list of records, read a partition back.

Every client is normalised to the same shapes so that tests compare what they produced with
what each consumer read: ``Rec`` (what a producer sends) and ``Got`` (what a consumer reads).
Headers are ``(str, bytes | None)`` pairs in order; a ``None`` timestamp in a ``Rec`` means
"stamped by the client when sent" (kcat cannot set one).

Only one partition is ever used, so offsets follow the send order.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Header = tuple[str, bytes | None]

KCAT = "kcat"
# kcat reads records from a file split by these delimiters (-D for records, -K for the key);
# neither occurs in the text data sets.
KCAT_RECORD_DELIM = "\x1e"
KCAT_KEY_DELIM = "\x1f"
CLIENT_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Rec:
    """A record to produce."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class Got:
    """A record as a consumer read it. ``create_time`` is False for LogAppendTime."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int
    create_time: bool = True


def unique_group() -> str:
    return f"it-{uuid.uuid4().hex[:12]}"


# -- producers: each returns the offsets the broker acknowledged, in send order ----------------
def produce_confluent(
    bootstrap: str, topic: str, records: Sequence[Rec], config: dict[str, Any] | None = None
) -> list[int]:
    from confluent_kafka import KafkaException, Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **(config or {})}
    )
    offsets: dict[int, int] = {}
    errors: list[Any] = []

    def on_delivery(index: int):
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                offsets[index] = msg.offset()

        return report

    for i, rec in enumerate(records):
        kwargs: dict[str, Any] = {"partition": 0, "on_delivery": on_delivery(i)}
        if rec.headers:
            kwargs["headers"] = list(rec.headers)
        if rec.timestamp is not None:
            kwargs["timestamp"] = rec.timestamp
        while True:
            try:
                producer.produce(topic, value=rec.value, key=rec.key, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    if remaining or errors:
        raise KafkaException(f"confluent producer: {remaining} undelivered, errors {errors[:3]}")
    return [offsets[i] for i in range(len(records))]


def produce_kafka_python(bootstrap: str, topic: str, records: Sequence[Rec]) -> list[int]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [
            producer.send(
                topic,
                value=rec.value,
                key=rec.key,
                headers=list(rec.headers),
                partition=0,
                timestamp_ms=rec.timestamp,
            )
            for rec in records
        ]
        producer.flush(CLIENT_TIMEOUT_S)
        return [f.get(timeout=CLIENT_TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(timeout=10)


def produce_aiokafka(bootstrap: str, topic: str, records: Sequence[Rec]) -> list[int]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic,
                    value=rec.value,
                    key=rec.key,
                    headers=list(rec.headers),
                    partition=0,
                    timestamp_ms=rec.timestamp,
                )
                for rec in records
            ]
            done = await asyncio.wait_for(asyncio.gather(*futures), CLIENT_TIMEOUT_S)
            return [md.offset for md in done]
        finally:
            await producer.stop()

    return asyncio.run(run())


def produce_kcat(
    bootstrap: str,
    topic: str,
    records: Sequence[Rec],
    work_dir: Path,
    headers: Sequence[str],
    extra: Sequence[str] = (),
) -> None:
    """Produce with ``kcat -P -l FILE``: per-record keys and values, the same ``-H`` headers
    on every record (``-H name`` alone is a null value), ``-Z``: empty key/value = null."""
    lines = []
    for rec in records:
        assert rec.timestamp is None, "kcat cannot set a timestamp"
        # Always "key<US>value": kcat skips an empty line, and -Z turns "" into null.
        key, value = (rec.key or b"").decode(), (rec.value or b"").decode()
        lines.append(f"{key}{KCAT_KEY_DELIM}{value}")
    path = work_dir / f"{topic}.kcat-input"
    path.write_text(KCAT_RECORD_DELIM.join(lines) + KCAT_RECORD_DELIM)
    args = [KCAT, "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-Z"]
    args += ["-K", "\\x1f", "-D", "\\x1e", "-X", "acks=all", "-l", str(path)]
    for h in headers:
        args += ["-H", h]
    args += list(extra)  # e.g. -X security.protocol=SASL_SSL
    done = subprocess.run(args, capture_output=True, timeout=CLIENT_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"kcat -P failed: {done.stderr.decode(errors='replace')}"


# -- consumers: each reads partition 0 from offset 0 up to the end offset -----------------
def consume_confluent(
    bootstrap: str,
    topic: str,
    start: int = 0,
    config: dict[str, Any] | None = None,
    timeout_s: float = CLIENT_TIMEOUT_S,
    retry_retriable: bool = False,
    partition: int = 0,
) -> list[Got]:
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            # confluent-kafka requires a group id even for assign(); no offsets are committed.
            "group.id": unique_group(),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            **(config or {}),
        }
    )
    got: list[Got] = []
    try:
        _, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=CLIENT_TIMEOUT_S
        )
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout_s
        next_offset = start
        while next_offset < high:
            assert time.monotonic() < deadline, f"confluent read {len(got)} records, end {high}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                if retry_retriable and (
                    msg.error().retriable() or msg.error().code() == KafkaError.REQUEST_TIMED_OUT
                ):
                    # A client may also meet a Kafka broker answering REQUEST_TIMED_OUT for a
                    # partition; librdkafka reports it (not flagged retriable) and refetches.
                    continue
                raise AssertionError(f"confluent consumer error: {msg.error()}")
            ts_type, ts = msg.timestamp()
            got.append(
                Got(
                    msg.offset(),
                    msg.key(),
                    msg.value(),
                    tuple(msg.headers() or ()),
                    ts,
                    ts_type != TIMESTAMP_LOG_APPEND_TIME,
                )
            )
            next_offset = msg.offset() + 1
    finally:
        consumer.close()
    return got


def consume_kafka_python(bootstrap: str, topic: str, start: int = 0) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    got: list[Got] = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        high = consumer.end_offsets([tp])[tp]
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while consumer.position(tp) < high:
            assert time.monotonic() < deadline, f"kafka-python read {len(got)}, end {high}"
            for msgs in consumer.poll(timeout_ms=500).values():
                got.extend(
                    Got(
                        m.offset,
                        m.key,
                        m.value,
                        tuple(m.headers or ()),
                        m.timestamp,
                        m.timestamp_type == 0,
                    )
                    for m in msgs
                )
    finally:
        consumer.close()
    return got


def consume_aiokafka(bootstrap: str, topic: str, start: int = 0) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[Got]:
        tp = TopicPartition(topic, 0)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
        )
        await consumer.start()
        got: list[Got] = []
        try:
            consumer.assign([tp])
            consumer.seek(tp, start)
            high = (await consumer.end_offsets([tp]))[tp]
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while await consumer.position(tp) < high:
                assert time.monotonic() < deadline, f"aiokafka read {len(got)}, end {high}"
                batches = await consumer.getmany(tp, timeout_ms=500)
                got.extend(
                    Got(
                        m.offset,
                        m.key,
                        m.value,
                        tuple(m.headers or ()),
                        m.timestamp,
                        m.timestamp_type == 0,
                    )
                    for m in batches.get(tp, [])
                )
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


def consume_kcat(
    bootstrap: str, topic: str, start: int = 0, extra: Sequence[str] = (), partition: int = 0
) -> list[Got]:
    """``kcat -C -e -J``: one JSON object per record; text keys, values and headers."""
    offset = "beginning" if start == 0 else str(start)
    args = [KCAT, "-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", offset, "-e"]
    args.append("-J")
    args += list(extra)
    done = subprocess.run(args, capture_output=True, timeout=CLIENT_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"kcat -C failed: {done.stderr.decode(errors='replace')}"
    got = []
    for line in done.stdout.decode().splitlines():
        if not line.strip():
            continue
        doc = json.loads(line)
        flat = doc.get("headers") or []
        headers = tuple(
            (flat[i], None if flat[i + 1] is None else flat[i + 1].encode())
            for i in range(0, len(flat), 2)
        )
        got.append(
            Got(
                doc["offset"],
                None if doc["key"] is None else doc["key"].encode(),
                None if doc["payload"] is None else doc["payload"].encode(),
                headers,
                doc["ts"],
                doc["tstype"] == "create",
            )
        )
    return got
