"""Every producer x every consumer: what one real client writes, every other reads back intact.

One broker serves the module. Each producer writes the same data set (keys, values, headers
with null values, explicit out-of-order timestamps, null keys, tombstones, empty byte strings,
records large enough to span several batches) to a topic of its own, once; then every
consumer reads each topic from offset 0, and the records must be identical, in offset order.

kcat reads and writes text, sets no per-record timestamp and only the same ``-H`` headers on
every record, and cannot tell an empty key or value from a null one (``-Z``): its data set
is the text subset, and its records must carry a timestamp taken while it ran.

KafkaJS (Node.js, through ``js/kafkajs_client.js``) cannot send a null header value (its
encoder throws on one): its data set has ``b"not-null"`` there, as kafka-python's. Its
header object would also reorder repeated names that are not adjacent and integer-like
names; the data set has neither, so every consumer, KafkaJS too, reads the headers in
order. KafkaJS has gzip built in and takes the other codecs as plugins: the tests add
pure-JavaScript ones for snappy and lz4 (both ways) and zstd (reading only, so no KafkaJS
zstd producer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.kafka_clients import (
    Got,
    Rec,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    consume_kcat,
    produce_aiokafka,
    produce_confluent,
    produce_kafka_python,
    produce_kcat,
)

from .kafkajs_driver import consume_kafkajs, produce_kafkajs

N_RECORDS = 300
BASE_TS = 1_700_000_000_000
KCAT_HEADERS = ("trace=abc", "null-valued", "empty=", "é=ü")


def text_value(i: int) -> str:
    # Mostly small, a few large ones (several batches, fetch-size boundaries), non-ASCII text.
    size = 40_000 if i % 97 == 5 else (i * 37) % 600
    return f"value-{i}-" + "€" * (i % 5) + "abcdefghij"[i % 10] * size


def data_set(*, null_header_values: bool = True, null_key_and_value: bool = True) -> list[Rec]:
    """The full data set; the flags drop what a client refuses to send (kafka-python: no
    null header value; kafka-python and aiokafka: not both key and value null)."""
    records = []
    for i in range(N_RECORDS):
        key: bytes | None = f"key-{i % 40}-ключ".encode()
        value: bytes | None = text_value(i).encode()
        if i % 10 == 3:
            key = None
        elif i % 29 == 4:
            key = b""
        if i % 7 == 2:
            value = None  # a tombstone
        elif i % 31 == 6:
            value = b""
        if key is None and value is None and not null_key_and_value:
            key = b"tombstone-key"
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 1:
            null_valued = None if null_header_values else b"not-null"
            headers = (("trace", str(i).encode()), ("null-valued", null_valued))
        elif i % 3 == 2:
            headers = (("dup", b"a"), ("dup", b"b"), ("é", "ü".encode()), ("empty", b""))
        # Explicit timestamps, a few going backwards.
        ts = BASE_TS + i * 1000 if i % 17 else BASE_TS - i * 60_000
        records.append(Rec(key, value, headers, ts))
    return records


def kcat_data_set() -> list[Rec]:
    """The text subset kcat can express: no timestamps, empty byte strings become null."""
    headers = tuple(
        (h.split("=", 1)[0], h.split("=", 1)[1].encode() if "=" in h else None)
        for h in KCAT_HEADERS
    )
    return [
        replace(r, key=r.key or None, value=r.value or None, headers=headers, timestamp=None)
        for r in data_set()
    ]


@dataclass
class Produced:
    topic: str
    records: list[Rec]
    ts_window: tuple[int, int]  # for records the client timestamped: [start, end] in ms


ProducerFn = Callable[[str, str, list[Rec], Path], list[int] | None]


def _confluent(config: dict[str, object]) -> ProducerFn:
    return lambda b, t, recs, _: produce_confluent(b, t, recs, config)


def _kafkajs(compression: str) -> ProducerFn:
    return lambda b, t, recs, _: produce_kafkajs(b, t, recs, compression=compression)


PRODUCER_FNS: dict[str, ProducerFn] = {
    "confluent-none": _confluent({"compression.type": "none"}),
    "confluent-gzip": _confluent({"compression.type": "gzip"}),
    "confluent-snappy": _confluent({"compression.type": "snappy"}),
    "confluent-lz4": _confluent({"compression.type": "lz4"}),
    "confluent-zstd": _confluent({"compression.type": "zstd"}),
    "confluent-idempotent": _confluent({"enable.idempotence": True, "compression.type": "lz4"}),
    "kafka-python": lambda b, t, recs, _: produce_kafka_python(b, t, recs),
    "aiokafka": lambda b, t, recs, _: produce_aiokafka(b, t, recs),
    "kcat": lambda b, t, recs, d: produce_kcat(b, t, recs, d, KCAT_HEADERS),
    "kafkajs": _kafkajs("none"),
    "kafkajs-gzip": _kafkajs("gzip"),
    "kafkajs-snappy": _kafkajs("snappy"),
    "kafkajs-lz4": _kafkajs("lz4"),
}

DATA_SETS: dict[str, Callable[[], list[Rec]]] = {
    "kafka-python": lambda: data_set(null_header_values=False, null_key_and_value=False),
    "aiokafka": lambda: data_set(null_key_and_value=False),
    "kcat": kcat_data_set,
    **{
        name: lambda: data_set(null_header_values=False)
        for name in PRODUCER_FNS
        if name.startswith("kafkajs")
    },
}

CONSUMER_FNS: dict[str, Callable[[str, str], list[Got]]] = {
    "confluent": consume_confluent,
    "kafka-python": consume_kafka_python,
    "aiokafka": consume_aiokafka,
    "kcat": consume_kcat,
    "kafkajs": consume_kafkajs,
}


@pytest.fixture(scope="module")
def matrix_broker(tmp_path_factory: pytest.TempPathFactory):
    # KafkaJS reads only through a group (a fresh one per read): no join delay.
    settings = {"group.initial.rebalance.delay.ms": "0"}
    b = start_broker(tmp_path_factory.mktemp("matrix") / "broker", settings)
    yield b
    if b.proc.poll() is None:
        code = b.stop()
        assert code == 0, f"broker exited with {code}:\n{b.log_tail()}"


@pytest.fixture(scope="module")
def produced(matrix_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory):
    """Produce lazily, once per producer: a producer's failure fails only its own row."""
    cache: dict[str, Produced | BaseException] = {}
    work = tmp_path_factory.mktemp("kcat-input")

    def get(name: str) -> Produced:
        if name not in cache:
            topic = f"matrix-{name}"
            records = DATA_SETS.get(name, data_set)()
            start = int(time.time() * 1000)
            try:
                offsets = PRODUCER_FNS[name](matrix_broker.bootstrap, topic, records, work)
                if offsets is not None:
                    assert offsets == list(range(len(records))), "acknowledged offsets"
                cache[name] = Produced(topic, records, (start, int(time.time() * 1000) + 1))
            except Exception as e:  # noqa: BLE001 - remembered and re-raised for each consumer
                cache[name] = e
        found = cache[name]
        if isinstance(found, BaseException):
            raise AssertionError(f"producer {name} failed:\n{matrix_broker.log_tail()}") from found
        return found

    return get


@pytest.mark.parametrize("consumer", list(CONSUMER_FNS))
@pytest.mark.parametrize("producer", list(PRODUCER_FNS))
def test_records_round_trip(produced, matrix_broker: BrokerProcess, producer: str, consumer: str):
    p = produced(producer)
    got = CONSUMER_FNS[consumer](matrix_broker.bootstrap, p.topic)

    assert [g.offset for g in got] == list(range(len(p.records))), "offsets 0..n-1, in order"
    assert all(g.create_time for g in got), "CreateTime, as produced"
    for g, want in zip(got, p.records, strict=True):
        assert (g.key, g.value) == (want.key, want.value), f"offset {g.offset}"
        assert g.headers == want.headers, f"offset {g.offset}"
        if want.timestamp is not None:
            assert g.timestamp == want.timestamp, f"offset {g.offset}"
        else:
            lo, hi = p.ts_window
            assert lo <= g.timestamp <= hi, f"offset {g.offset}: client timestamp {g.timestamp}"
    assert matrix_broker.proc.poll() is None, matrix_broker.log_tail()
