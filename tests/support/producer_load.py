"""A producer thread under load that records every acknowledgement (for crash tests)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Load:
    """A producer thread sending keys ``<name>-<n>`` until stopped."""

    bootstrap: str
    topic: str
    config: dict[str, Any]
    acked: list[tuple[int, bytes]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)
    sent: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def run(self) -> None:
        from confluent_kafka import Producer

        def on_error(err: Any) -> None:
            if err.fatal():
                self.fatal.append(str(err))

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "error_cb": on_error,
                **self.config,
            }
        )

        def report(err: Any, msg: Any) -> None:
            with self.lock:
                if err is None:
                    self.acked.append((msg.offset(), msg.key()))
                else:
                    self.failed.append(f"{msg.key()!r}: {err}")

        while not self.stop.is_set() and not self.fatal:
            key = f"{self.topic}-{self.sent:08d}".encode()
            try:
                producer.produce(
                    self.topic, key=key, value=key * 4, partition=0, on_delivery=report
                )
                self.sent += 1
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        remaining = producer.flush(90)
        if remaining:
            self.failed.append(f"{remaining} messages still queued after flush")
