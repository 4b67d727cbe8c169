"""KafkaJS, the Node.js client, driven through ``js/kafkajs_client.js``.

One JSON command goes to the script's stdin; bytes travel as base64. ``make node-deps``
(part of ``make test``) installs KafkaJS from ``js/package-lock.json``; without it every
call here fails saying so.

What KafkaJS cannot express, so its producer's data set leaves it out:
- a null header value (its encoder measures every header value as a string and throws);
- headers in an order its header object cannot keep (a repeated name is sent with all its
  values at its first position; integer-like names come first) - the script refuses those.
KafkaJS reads only as a group member: a plain read from offset 0 joins a fresh group.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.kafka_clients import CLIENT_TIMEOUT_S, Got, Rec

JS_DIR = Path(__file__).parent / "js"
SCRIPT = JS_DIR / "kafkajs_client.js"


class KafkaJSError(AssertionError):
    """A KafkaJS call answered an error; ``doc`` is the error as the script reported it."""

    def __init__(self, doc: dict[str, Any]) -> None:
        super().__init__(f"KafkaJS: {doc.get('name')}: {doc.get('message')} ({doc})")
        self.doc = doc


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        raise AssertionError("KafkaJS tests need Node.js on the PATH (run `make node-deps`)")
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        raise AssertionError(f"KafkaJS is not installed in {JS_DIR}: run `make node-deps`")
    return node


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def client_config(
    bootstrap: str, ssl: dict[str, Any] | None = None, sasl: dict[str, Any] | None = None
) -> dict[str, Any]:
    """KafkaJS's connection settings: ``ssl`` as its ``ssl`` option (e.g. ``{"ca": PEM}``),
    ``sasl`` as its ``sasl`` option (``{"mechanism": "scram-sha-256", ...}``)."""
    config: dict[str, Any] = {"brokers": [bootstrap]}
    if ssl is not None:
        config["ssl"] = ssl
    if sasl is not None:
        config["sasl"] = sasl
    return config


def call(command: dict[str, Any], timeout_s: float = CLIENT_TIMEOUT_S + 30) -> Any:
    """Run one one-shot command; its result, or KafkaJSError."""
    done = subprocess.run(
        [_node(), str(SCRIPT)],
        input=json.dumps(command) + "\n",
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise AssertionError(f"kafkajs_client.js exited {done.returncode}:\n{done.stderr[-4000:]}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if not answer["ok"]:
        raise KafkaJSError(answer["error"])
    return answer["result"]


def produce_kafkajs(
    bootstrap: str,
    topic: str,
    records: Sequence[Rec],
    *,
    compression: str = "none",
    idempotent: bool = False,
    client: dict[str, Any] | None = None,
) -> list[int]:
    """Produce to partition 0 with acks=-1, 50 records per send (one batch each); the
    acknowledged offsets in send order."""
    command = {
        "op": "produce",
        "client": client or client_config(bootstrap),
        "topic": topic,
        "compression": compression,
        "idempotent": idempotent,
        "records": [
            {
                "key": _b64(r.key),
                "value": _b64(r.value),
                "headers": [[name, _b64(v)] for name, v in r.headers],
                "timestamp": r.timestamp,
            }
            for r in records
        ],
    }
    return list(call(command)["offsets"])


def consume_kafkajs(
    bootstrap: str, topic: str, start: int = 0, *, client: dict[str, Any] | None = None
) -> list[Got]:
    """Read partition 0 from ``start`` up to its end offset when the read began."""
    command = {
        "op": "consume",
        "client": client or client_config(bootstrap),
        "topic": topic,
        "start": start,
        "groupId": f"kafkajs-{uuid.uuid4().hex[:12]}",
        "timeoutMs": int(CLIENT_TIMEOUT_S * 1000),
    }
    return [
        Got(
            r["offset"],
            _bytes(r["key"]),
            _bytes(r["value"]),
            tuple((name, _bytes(v)) for name, v in r["headers"]),
            r["timestamp"],
            r["create_time"],
        )
        for r in call(command)["records"]
    ]


def admin_calls(
    bootstrap: str, calls: Sequence[tuple[str, Sequence[Any]]], client: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """KafkaJS admin calls in order, e.g. ``("createTopics", [{"topics": [...]}])``; each
    answer is ``{"ok": True, "result": ...}`` or ``{"ok": False, "error": {...}}``."""
    command = {
        "op": "admin",
        "client": client or client_config(bootstrap),
        "calls": [{"call": name, "args": list(args)} for name, args in calls],
    }
    return list(call(command)["results"])


class GroupMember:
    """A KafkaJS consumer-group member in its own Node process.

    A reader thread collects the JSON lines it prints; ``events()`` returns those seen so
    far. ``leave()`` closes its stdin: it disconnects, which sends LeaveGroup, and exits.
    """

    def __init__(
        self, bootstrap: str, topic: str, group: str, *, metadata_max_age_ms: int | None = None
    ) -> None:
        command: dict[str, Any] = {
            "op": "group",
            "client": client_config(bootstrap),
            "topic": topic,
            "groupId": group,
        }
        if metadata_max_age_ms is not None:
            command["metadataMaxAge"] = metadata_max_age_ms  # KafkaJS's metadata.max.age.ms
        self.proc = subprocess.Popen(
            [_node(), str(SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                with self._lock:
                    self._events.append(json.loads(line))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self._stderr.append(line)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self._events if kind is None or e["event"] == kind]

    def partitions(self) -> set[int]:
        """The partitions of its latest assignment."""
        assigned = self.events("assigned")
        return set(assigned[-1]["partitions"]) if assigned else set()

    def records(self) -> set[tuple[int, int]]:
        return {(e["partition"], e["offset"]) for e in self.events("record")}

    def log(self) -> str:
        with self._lock:
            return "".join(self._stderr[-40:])

    def leave(self, timeout_s: float = 30) -> int:
        """Close stdin (the member disconnects and leaves its group); its exit status."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
