"""Event-loop CPU per one-record Produce request: the load soak's request, in process.

The load soak (tests/reliability/test_load.py) has librdkafka send ~10,000 Produce requests
a second, each of one partition's batch of one record (v9, acks=all, not idempotent, no
quota, no authorizer), spread over 100 partitions; the broker's event loop spends most of
its time on them. This benchmark times that request through a real ``Broker`` (started in
this process, its log dir in the scratch directory) and reports the CPU time of the event
loop's thread per request (``time.thread_time``: the other threads' work, such as
background flushes, is not counted):

- ``direct``: frame -> ``ProtocolCodec.decode_request`` -> ``Broker.handle`` (quotas,
  handle_produce, the append) -> ``encode_response_frame``, with no socket: the request
  path itself. Reported: the minimum over ``--rounds`` rounds of ``--requests`` requests.
- ``socket``: the same requests sent by a client process over ``--connections`` TCP
  connections to the broker's listener at ``--rate`` requests a second (each connection
  sends its share when due, without waiting for answers, as librdkafka pipelines), for
  ``--seconds``; the client reads every answer. Reported: the event loop's CPU time over
  the run divided by the requests answered (the loop's idle wake-ups and timers included,
  as in the soak).

- ``gil``: the compiled append alone (``PartitionLog.append_as_leader`` of the same
  one-record batches over 100 logs), with and without another thread running Python code
  meanwhile; reported: CPU and wall time per append. An append that let go of the GIL has
  to wait for that thread to hand it back (up to the 5 ms switch interval).

Compare two versions of the code by running the same command with each on PYTHONPATH, in
alternation; the numbers depend on the machine and its load (print ``uptime`` with them).

    python -m bench.produce_requests [--mode direct|socket|both] [--rounds 5]
        [--requests 20000] [--rate 4000] [--seconds 10] [--connections 20]
        [--segment-bytes 262144] [--profile out.prof]
    python -m bench.produce_requests --mode gil [--requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import io
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from bench._common import DEFAULT_DIR, describe_machine, scratch_dir
from core.records.builder import RecordBatchBuilder
from core.server.api_keys import ApiKey
from core.server.broker import Broker
from core.server.config import load_broker_config

TOPIC = "load"
PARTITIONS = 100
VERSION = 9
VALUE = b"v" * 200  # the soak's value
LISTENER = "PLAINTEXT"


def produce_frame(partition: int, correlation_id: int, seq: int) -> bytes:
    """A Produce v9 frame (size prefix included) as librdkafka sends it under the soak:
    one partition, one batch of one keyed record, acks=-1, not idempotent."""
    builder = RecordBatchBuilder()
    builder.append(VALUE, key=b"p00-%09d" % seq, timestamp=int(time.time() * 1000))
    request_type = load_request_schema(ApiKey.PRODUCE, VERSION)
    module = sys.modules[request_type.__module__]
    header_type = request_type.__header_schema__
    out = io.BytesIO()
    entity_writer(header_type)(
        out,
        header_type(
            request_api_key=i16(ApiKey.PRODUCE),
            request_api_version=i16(VERSION),
            correlation_id=i32(correlation_id),
            client_id="rdkafka",
        ),
    )
    entity_writer(request_type)(
        out,
        request_type(
            transactional_id=None,
            acks=i16(-1),
            timeout=datetime.timedelta(milliseconds=30_000),
            topic_data=(
                module.TopicProduceData(
                    name=TOPIC,
                    partition_data=(
                        module.PartitionProduceData(
                            index=i32(partition), records=bytes(builder.build())
                        ),
                    ),
                ),
            ),
        ),
    )
    body = out.getvalue()
    return len(body).to_bytes(4, "big") + body


async def _start_broker(directory: Path, segment_bytes: int) -> Broker:
    config = load_broker_config(
        None,
        {
            "node.id": "1",
            "log.dirs": str(directory),
            "listeners": f"{LISTENER}://127.0.0.1:0",
            "offsets.topic.num.partitions": "1",
        },
    )
    broker = Broker(config)
    await broker.start()
    await broker.create_topic(TOPIC, PARTITIONS, {"segment.bytes": str(segment_bytes)})
    deadline = time.monotonic() + 30
    while any(broker.replica_manager.partition(TOPIC, p) is None for p in range(PARTITIONS)):
        if time.monotonic() > deadline:
            raise SystemExit("the topic's partitions did not come up within 30 s")
        await asyncio.sleep(0.05)
    return broker


async def _direct_round(broker: Broker, frames: list[bytes], requests: int) -> float:
    """Event-loop CPU seconds per request over ``requests`` requests."""
    codec = broker.codec
    n = len(frames)
    begin = time.thread_time()
    for i in range(requests):
        # As the connection receives a body: a new bytearray, the size prefix read apart.
        frame = bytearray(frames[i % n][4:])
        context, request = codec.decode_request(frame, LISTENER, "127.0.0.1:40000")
        response = await broker.handle(context, request)
        answer = codec.encode_response_frame(context, response)
        if not isinstance(answer, bytes) or answer[8:10] == b"\xff\xff":
            raise SystemExit(f"unexpected answer {answer!r}")
    return (time.thread_time() - begin) / requests


async def run_direct(
    directory: Path, rounds: int, requests: int, segment_bytes: int, profile: Path | None
) -> list[float]:
    broker = await _start_broker(directory, segment_bytes)
    try:
        frames = [produce_frame(p, p, p) for p in range(PARTITIONS)]
        await _direct_round(broker, frames, min(requests, 2000))  # warm-up
        results = []
        for _ in range(rounds):
            results.append(await _direct_round(broker, frames, requests))
        if profile is not None:
            profiler = cProfile.Profile()
            profiler.enable()
            await _direct_round(broker, frames, requests)
            profiler.disable()
            profiler.dump_stats(profile)
        return results
    finally:
        await broker.stop()


async def run_socket(
    directory: Path, rate: int, seconds: float, connections: int, segment_bytes: int
) -> tuple[float, float, float, int]:
    """Event-loop CPU seconds per request (all, user, system) and requests answered, over
    one client run."""
    broker = await _start_broker(directory, segment_bytes)
    try:
        port = broker.bound[0].port
        begin = time.thread_time()
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        client = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.produce_requests",
            "--client",
            f"127.0.0.1:{port}",
            "--rate",
            str(rate),
            "--seconds",
            str(seconds),
            "--connections",
            str(connections),
            stdout=subprocess.PIPE,
        )
        out, _ = await client.communicate()
        cpu = time.thread_time() - begin
        after = resource.getrusage(resource.RUSAGE_THREAD)
        if client.returncode != 0:
            raise SystemExit(f"the client failed ({client.returncode})")
        answered = int(out.split()[-1])
        user = (after.ru_utime - usage.ru_utime) / answered
        system = (after.ru_stime - usage.ru_stime) / answered
        return cpu / answered, user, system, answered
    finally:
        await broker.stop()


def run_gil(
    directory: Path, appends: int, rounds: int
) -> list[tuple[str, list[float], list[float]]]:
    """(case, CPU us, wall us of each round) per append, without and with a busy Python
    thread (how long the GIL is away varies: every round is reported)."""
    from core.log.config import LogConfig
    from core.log.partition_log import PartitionLog

    config = LogConfig().with_overrides({"segment.bytes": str(1 << 30)})
    logs = [PartitionLog(directory / f"t-{p}", "t", p, config) for p in range(PARTITIONS)]
    builder = RecordBatchBuilder()
    builder.append(VALUE, key=b"p00-000000001", timestamp=int(time.time() * 1000))
    batch = bytes(builder.build())
    stop = threading.Event()

    def busy() -> None:  # pure Python, as a background task's parsing or bookkeeping
        while not stop.is_set():
            sum(range(100))

    def timed() -> tuple[float, float]:
        cpu, wall = time.thread_time(), time.perf_counter()
        for i in range(appends):
            logs[i % PARTITIONS].append_as_leader(bytearray(batch), 0)
        return (time.thread_time() - cpu) / appends, (time.perf_counter() - wall) / appends

    out = []
    try:
        timed()  # warm-up: the segments' files
        alone = [timed() for _ in range(rounds)]
        out.append(("alone", [c * 1e6 for c, _ in alone], [w * 1e6 for _, w in alone]))
        thread = threading.Thread(target=busy)
        thread.start()
        try:
            beside = [timed() for _ in range(rounds)]
        finally:
            stop.set()
            thread.join()
        out.append(
            (
                "beside a busy Python thread",
                [c * 1e6 for c, _ in beside],
                [w * 1e6 for _, w in beside],
            )
        )
    finally:
        for log in logs:
            log.close()
    return out


# -- the client process ------------------------------------------------------------------------
async def _client(address: str, rate: int, seconds: float, connections: int) -> int:
    host, port = address.rsplit(":", 1)
    per_connection = rate / connections
    count = int(per_connection * seconds)
    frames = [
        [produce_frame((c + i * connections) % PARTITIONS, i, i) for i in range(PARTITIONS)]
        for c in range(connections)
    ]
    answered = 0

    async def one(c: int) -> None:
        nonlocal answered
        reader, writer = await asyncio.open_connection(host, int(port))

        async def read_answers() -> None:
            nonlocal answered
            for _ in range(count):
                size = int.from_bytes(await reader.readexactly(4), "big")
                answer = await reader.readexactly(size)
                if answer[-6:-4] == b"\xff\xff":  # never: a sanity check on the layout
                    raise RuntimeError("unexpected answer")
                answered += 1

        reading = asyncio.create_task(read_answers())
        loop = asyncio.get_running_loop()
        start = loop.time() + c / rate  # connections staggered over one interval
        mine = frames[c]
        for i in range(count):
            due = start + i / per_connection
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(mine[i % PARTITIONS])
        await reading
        writer.close()

    await asyncio.gather(*(one(c) for c in range(connections)))
    return answered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["direct", "socket", "both", "gil"], default="both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=4000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--segment-bytes", type=int, default=256 * 1024)
    parser.add_argument("--profile", type=Path, default=None, help="cProfile of a direct round")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        print(asyncio.run(_client(args.client, args.rate, args.seconds, args.connections)))
        return
    directory = scratch_dir(args.dir, "produce_requests", 64 * 1024 * 1024)
    print(describe_machine(directory))
    print(f"load average {os.getloadavg()}")
    try:
        if args.mode == "gil":
            for case, cpu, wall in run_gil(directory / "gil", args.requests, args.rounds):
                print(
                    f"append {case}: CPU {', '.join(f'{c:.1f}' for c in cpu)} us, "
                    f"wall {', '.join(f'{w:.1f}' for w in wall)} us (rounds)"
                )
        if args.mode in ("direct", "both"):
            results = asyncio.run(
                run_direct(
                    directory / "direct",
                    args.rounds,
                    args.requests,
                    args.segment_bytes,
                    args.profile,
                )
            )
            rounds = ", ".join(f"{r * 1e6:.1f}" for r in results)
            print(f"direct: {min(results) * 1e6:.1f} us/request (min; rounds {rounds})")
        if args.mode in ("socket", "both"):
            per_request, user, system, answered = asyncio.run(
                run_socket(
                    directory / "socket",
                    args.rate,
                    args.seconds,
                    args.connections,
                    args.segment_bytes,
                )
            )
            print(
                f"socket: {per_request * 1e6:.1f} us/request of event-loop CPU (user "
                f"{user * 1e6:.1f}, system {system * 1e6:.1f}) "
                f"({answered} requests at {args.rate}/s over {args.connections} connections)"
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
