"""Hostile connections: slow-loris clients, connection floods and idle sockets do not take
the broker's service or memory away from real clients.

Protocol fuzzing of a live broker (random, mutated, oversize, truncated frames) is in
tests/integration/test_protocol_fuzz.py; this suite adds what fuzzing does not: connections
that send a frame's length and then trickle (or never send) the rest, more connections than
``max.connections``, and sockets that stay idle past ``connections.max.idle.ms``. Throughout,
a real client produces and consumes, and the broker's resident memory stays bounded.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

from broker_process import BrokerProcess, start_broker, wait_until
from kafka_clients import Rec, consume_confluent, produce_confluent
from soak import SOAK

SLOW_CLIENTS = 400 if SOAK else 120
MAX_CONNECTIONS = SLOW_CLIENTS + 30
RSS_LIMIT_MB = 400


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_slow_loris_floods_and_idle_sockets_leave_real_clients_served(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = start_broker(
        tmp_path / "b",
        {"max.connections": str(MAX_CONNECTIONS), "connections.max.idle.ms": "3000"},
    )
    brokers.append(broker)
    rss_before = rss_mb(broker.pid)
    slow: list[socket.socket] = []
    try:
        # Each announces a 10 MB request and then sends it one small piece at a time.
        for _ in range(SLOW_CLIENTS):
            sock = connect(broker.bootstrap)
            sock.sendall(struct.pack(">i", 10_000_000) + b"\0" * 16)
            slow.append(sock)
        for sock in slow:
            sock.sendall(b"\0" * 1024)
        sent = [Rec(b"k%d" % i, b"v%d" % i) for i in range(200)]
        assert produce_confluent(broker.bootstrap, "served", sent) == list(range(200))
        assert [g.value for g in consume_confluent(broker.bootstrap, "served")] == [
            r.value for r in sent
        ]

        # Beyond max.connections a connection is closed at once.
        flood = [connect(broker.bootstrap) for _ in range(MAX_CONNECTIONS)]
        wait_until(
            lambda: sum(closed_by_peer(s) for s in flood) >= MAX_CONNECTIONS - 40,
            20,
            what="connections beyond max.connections refused",
        )
        for s in flood:
            s.close()

        # A socket that never sends a whole request is closed after connections.max.idle.ms
        # (first wait until the closed flood has left room for it to be accepted at all).
        held: list[socket.socket] = []

        def accepted() -> bool:
            sock = connect(broker.bootstrap)
            if closed_by_peer(sock):
                sock.close()
                return False
            held.append(sock)
            return True

        wait_until(accepted, 20, what="room for a new connection")
        idle = held[0]
        began = time.monotonic()
        wait_until(lambda: closed_by_peer(idle), 20, what="an idle connection closed")
        idle_closed_after = time.monotonic() - began
        idle.close()
        rss_during = rss_mb(broker.pid)
    finally:
        for sock in slow:
            sock.close()
    assert rss_during < RSS_LIMIT_MB, f"broker RSS {rss_during:.0f} MB under slow clients"
    again = [Rec(b"x", b"after")]
    assert produce_confluent(broker.bootstrap, "served", again) == [200]
    print(
        f"\n{SLOW_CLIENTS} slow-loris connections: real client served; RSS {rss_before:.0f} -> "
        f"{rss_during:.0f} MB; idle socket closed after {idle_closed_after:.1f}s"
    )
