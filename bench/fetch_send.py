"""Fetch answers on the wire: the event loop's CPU per answer of ``send_response``.

A broker process's event loop sends each Fetch answer with
``core.server.response_frame.send_response``: encoded chunks and ``FileSlice`` parts of a
segment file. This benchmark builds answers of a few shapes (one or five partitions of a
few hundred bytes, as the load soak's consumers get; single slices of 1 KiB to 1 MiB) over
one segment file in the page cache, sends each shape many times to a real loopback TCP
connection (a child process reads and discards), and reports the sending thread's CPU time
(``time.thread_time``: user and system, the ``send`` and ``sendfile`` syscalls included) per
answer, the minimum over the rounds. The plain-Python baseline writes the same bytes,
already in memory, with one ``transport.write`` per answer: the least any sender can do.

``--compare FILE`` also times another implementation of the module (for instance an older
commit's, ``git show REV:core/server/response_frame.py > /tmp/old.py``), alternating with
the current one each round; ``--coalesce N`` overrides COALESCE_PART_BYTES of the current
one (as many columns as values), to find where a copy starts to cost more than sendfile.

    python -m bench.fetch_send [--rounds 5] [--answers 2000] [--compare FILE]
        [--coalesce 65536,1] [--dir bench-data]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from bench._common import DEFAULT_DIR, KiB, MiB, describe_machine, scratch_dir
from core.log.file_records import FileRecords, FileSlice
from core.server.frame_protocol import FrameProtocol
from core.server.response_frame import ResponseFrame

SEGMENT_BYTES = 8 * MiB
# Bytes of answers sent per shape and implementation in one round, at most.
ROUND_BYTES = 64 * MiB
READER = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
while s.recv(1 << 20):
    pass
"""

Send = Callable[[asyncio.Transport, FrameProtocol, ResponseFrame], Awaitable[None]]


def shapes(segment: FileRecords) -> dict[str, ResponseFrame]:
    """Answers as the Fetch handler's frames look: encoded chunks around each slice."""

    def frame(slice_sizes: list[int]) -> ResponseFrame:
        parts: list[bytes | FileSlice] = [os.urandom(70)]
        position = 4096
        for size in slice_sizes:
            parts.append(FileSlice(segment, position, size))
            parts.append(os.urandom(40))
            position += size + 4096
        return ResponseFrame(tuple(parts))

    return {
        "1 x 300 B": frame([300]),
        "5 x 300 B": frame([300] * 5),
        "1 x 4 KiB": frame([4 * KiB]),
        "1 x 16 KiB": frame([16 * KiB]),
        "1 x 32 KiB": frame([32 * KiB]),
        "1 x 64 KiB": frame([64 * KiB]),
        "1 x 128 KiB": frame([128 * KiB]),
        "1 x 256 KiB": frame([256 * KiB]),
        "1 x 512 KiB": frame([512 * KiB]),
        "1 x 1 MiB": frame([MiB]),
    }


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def senders(compare: Path | None, coalesce: list[int]) -> dict[str, Send]:
    own = Path(__file__).resolve().parent.parent / "core" / "server" / "response_frame.py"
    out: dict[str, Send] = {}
    for value in coalesce:
        module = load(own, f"_bench_response_frame_{value}")
        module.COALESCE_PART_BYTES = value
        out[f"current@{value}"] = _sender(module)
    if compare is not None:
        out["compare"] = _sender(load(compare, "_bench_response_frame_compare"))

    async def baseline(transport: asyncio.Transport, protocol: Any, frame: Any) -> None:
        transport.write(frame.baseline)
        await protocol.drain()

    out["baseline"] = baseline
    return out


def _sender(module: ModuleType) -> Send:
    async def send(transport: asyncio.Transport, protocol: Any, frame: Any) -> None:
        await module.send_response(transport, protocol, frame.frame, sendfile=True)

    return send


class Shape:
    def __init__(self, frame: ResponseFrame) -> None:
        self.frame = frame
        self.baseline = frame.to_bytes()


async def run(args: argparse.Namespace, segment: FileRecords) -> None:
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    reader = subprocess.Popen([sys.executable, "-c", READER, str(listener.getsockname()[1])])
    transport: asyncio.Transport | None = None
    try:
        sock, _ = await loop.sock_accept(listener)
        transport, protocol = await loop.connect_accepted_socket(
            lambda: FrameProtocol(64 * KiB, lambda p: None), sock
        )
        sends = senders(args.compare, args.coalesce)
        table: dict[str, dict[str, float]] = {}
        for name, frame in shapes(segment).items():
            shape = Shape(frame)
            answers = max(50, min(args.answers, ROUND_BYTES // frame.size))
            best = {impl: float("inf") for impl in sends}
            order = list(sends)
            for round_ in range(args.rounds):
                for impl in order if round_ % 2 == 0 else reversed(order):
                    send = sends[impl]
                    start = time.thread_time()
                    for _ in range(answers):
                        await send(transport, protocol, shape)  # type: ignore[arg-type]
                    cpu = time.thread_time() - start
                    best[impl] = min(best[impl], cpu / answers)
                    # Let the reader take everything before the next side starts.
                    while transport.get_write_buffer_size():
                        await asyncio.sleep(0.001)
            table[f"{name} ({frame.size:,} B)"] = best
            print(
                f"  {name:>12}: "
                + ", ".join(f"{impl} {us * 1e6:.1f} us" for impl, us in best.items()),
                flush=True,
            )
        print()
        impls = list(sends)
        print("| answer | " + " | ".join(f"{i} us/answer" for i in impls) + " |")
        print("|---|" + "---:|" * len(impls))
        for row, best in table.items():
            print(f"| {row} | " + " | ".join(f"{best[i] * 1e6:.1f}" for i in impls) + " |")
    finally:
        if transport is not None:
            transport.abort()
        listener.close()
        try:
            reader.wait(timeout=30)
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--answers", type=int, default=2000, help="answers per shape and round")
    parser.add_argument("--compare", type=Path, help="another response_frame.py to time too")
    parser.add_argument(
        "--coalesce",
        type=lambda s: [int(v) for v in s.split(",")],
        default=None,
        help="COALESCE_PART_BYTES values for the current module (default: its own)",
    )
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    if args.coalesce is None:
        from core.server import response_frame

        args.coalesce = [response_frame.COALESCE_PART_BYTES]
    print(describe_machine(args.dir))
    directory = scratch_dir(args.dir, "fetch_send", SEGMENT_BYTES)
    segment = FileRecords(directory / "00000000000000000000.log")
    try:
        segment.append(os.urandom(SEGMENT_BYTES))
        asyncio.run(run(args, segment))
    finally:
        segment.close()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
