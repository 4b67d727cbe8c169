"""Transactional produce throughput vs idempotent produce, in the same run.

A tierlog broker (child process) gets ``--records`` 1 KiB records from a confluent-kafka
producer three times, each into a fresh one-partition topic:

- idempotent (``enable.idempotence=true``, no transactions): the baseline;
- transactional, ``--small`` records per transaction (100 by default);
- transactional, ``--large`` records per transaction (10,000 by default).

Each transaction is ``begin_transaction``, the records, ``commit_transaction``: the
coordinator's work per transaction (AddPartitionsToTxn, EndTxn, the PrepareCommit and
CompleteCommit writes with their fsyncs, the markers) is paid once per transaction, the
produce path per record. The rate is records per second from the first ``produce`` to the
last acknowledgement (idempotent) or commit (transactional), the best of ``--rounds``.

Target: transactions of 10,000 records at >= 0.7 x the idempotent rate. The table prints
PASS or MISS for that row; a miss is a finding to report, the benchmark never fails.

    python -m bench.transactions [--records 100000] [--small 100] [--large 10000]
        [--rounds 3] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

from bench._common import DEFAULT_DIR, KiB, describe_machine, scratch_dir
from bench.broker_throughput import running

PAYLOAD = b"t" * KiB
TARGET = 0.7


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def idempotent(bootstrap: str, records: int) -> float:
    from confluent_kafka import Producer

    topic = f"idem-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, PAYLOAD, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return records / (time.perf_counter() - start)


def transactional(bootstrap: str, records: int, per_txn: int) -> float:
    from confluent_kafka import Producer

    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(60)
    start = time.perf_counter()
    sent = 0
    while sent < records:
        producer.begin_transaction()
        for _ in range(min(per_txn, records - sent)):
            while True:
                try:
                    producer.produce(topic, PAYLOAD, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
            sent += 1
        producer.commit_transaction(120)
    return records / (time.perf_counter() - start)


def run(base: Path, records: int, small: int, large: int, rounds: int) -> dict[str, float]:
    base = scratch_dir(base, "transactions", records * KiB * 4 * rounds)
    best: dict[str, float] = {}
    overrides = ["transaction.state.log.num.partitions=4"]
    with running("tierlog", base, overrides) as server:
        for _ in range(rounds):
            for name, rate in (
                ("idempotent", lambda: idempotent(server.bootstrap, records)),
                (f"txn x{small}", lambda: transactional(server.bootstrap, records, small)),
                (f"txn x{large}", lambda: transactional(server.bootstrap, records, large)),
            ):
                best[name] = max(best.get(name, 0.0), rate())
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per run")
    parser.add_argument("--small", type=int, default=100, help="records per small transaction")
    parser.add_argument("--large", type=int, default=10_000, help="records per large one")
    parser.add_argument("--rounds", type=int, default=3, help="best of this many runs")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="scratch directory")
    args = parser.parse_args(argv)
    print(describe_machine(args.dir))
    best = run(args.dir, args.records, args.small, args.large, args.rounds)
    baseline = best["idempotent"]
    print(f"{'producer':<12} {'records/s':>10} {'MiB/s':>7} {'x idempotent':>13}")
    for name, rate in best.items():
        ratio = rate / baseline
        verdict = ""
        if name == f"txn x{args.large}":
            verdict = f"  {'PASS' if ratio >= TARGET else 'MISS'} (target >= {TARGET})"
        print(f"{name:<12} {rate:>10.0f} {rate * KiB / 2**20:>7.1f} {ratio:>13.2f}{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
