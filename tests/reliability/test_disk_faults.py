"""Disk faults: libfiu (Debian's fiu-utils) makes the broker's pwrite and fsync calls fail at
random while producers run; the broker answers KAFKA_STORAGE_ERROR for the appends that
failed, stays up, never acknowledges what it did not write, and works normally again once
the faults stop, also after a SIGKILL and restart.

The broker runs under ``fiu-run -x``; ``fiu-ctrl`` switches the faults on and off in the
running process. Only ``pwrite`` (segment appends) and ``fsync`` are failed: the broker's
own logging (``write``) stays intact so that the test can read what it reported.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

from tests.support.broker_process import BrokerProcess, restart, start_broker
from tests.support.kafka_clients import consume_confluent
from tests.support.producer_load import Load
from tests.support.s3_harness import broker_log_lines
from tests.support.waiting import wait_until

from .soak import SOAK

TOPIC = "disk-faults"
FAULT_SECONDS = 20 if SOAK else 4
FAULTS = ("posix/io/rw/pwrite", "posix/io/sync/fsync")


def fiu_ctrl(pid: int, command: str) -> None:
    done = subprocess.run(
        ["fiu-ctrl", "-c", command, str(pid)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, f"fiu-ctrl {command}: {done.stderr}"


def test_failing_writes_and_fsyncs_are_refused_not_acknowledged(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    assert shutil.which("fiu-run"), "fiu-utils is installed by `make system-deps`"
    broker = start_broker(
        tmp_path / "b",
        {"log.flush.interval.messages": "1"},  # an fsync per append: fsync faults count
        command_prefix=["fiu-run", "-x"],
    )
    brokers.append(broker)
    load = Load(
        broker.bootstrap,
        TOPIC,
        {"enable.idempotence": False, "message.timeout.ms": 60_000, "batch.size": 8192},
    )
    writer = threading.Thread(target=load.run, daemon=True)
    writer.start()
    try:
        wait_until(lambda: load.acked_count() >= 2000, 60, what="acks before the faults")
        for name in FAULTS:
            fiu_ctrl(broker.pid, f"enable_random name={name},probability=0.3")
        time.sleep(FAULT_SECONDS)  # the length of the outage itself, not a wait for a race
        refused = broker_log_lines(broker, "produce to", "fsync of")
        for name in FAULTS:
            fiu_ctrl(broker.pid, f"disable name={name}")
        assert broker.proc.poll() is None, broker.log_tail()
        mark = load.acked_count()
        wait_until(lambda: load.acked_count() >= mark + 2000, 60, what="acks after the faults")
    finally:
        load.stop.set()
        writer.join(120)
    assert refused, "no append failed: the faults did not reach the log"
    assert not load.fatal, load.fatal

    def check() -> None:
        got = {g.offset: g.key for g in consume_confluent(broker.bootstrap, TOPIC)}
        with load.lock:
            lost = [(o, k) for o, k in load.acked if got.get(o) != k]
        assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"

    check()
    broker.kill()
    broker = restart(broker)
    brokers.append(broker)
    check()
    print(
        f"\n{len(refused)} appends/fsyncs refused in {FAULT_SECONDS}s of faults; "
        f"{len(load.acked)} acknowledged records all read back, also after SIGKILL"
    )
