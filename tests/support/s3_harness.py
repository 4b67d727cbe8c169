"""Helpers for the end-to-end tiering tests on S3: the endpoint, a fault proxy, the bucket.

* ``launcher``: localstack/launcher.py loaded by path (the folder shares LocalStack's package
  name), so ``start_s3_endpoint()`` honours ``TIERLOG_S3_ENDPOINT``.
* ``FaultProxy``: an HTTP/1.1 forwarder on 127.0.0.1 in front of the S3 endpoint that can
  hold the requests matching a predicate, so a test knows the broker is in the middle of a
  copy (objects written, manifest not yet) before it SIGKILLs it. Held requests are never
  forwarded: the broker dies before they reach S3.
* ``Bucket``: what the bucket holds, per topic, read back with boto3 and the manifests.
* ``metadata_segments``: ``tierlog metadata list --json`` over the Kafka protocol.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import logging
import random
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
MANIFEST_SUFFIX = ".manifest.json"
TOPIC_MANIFEST = "topic-manifest.json"  # one per tiered topic, beside its partition folders
TOPIC_ID_CHARS = 22  # Kafka's uuid text: base64url of 16 bytes, no padding

# moto's server logs every request at INFO through werkzeug: pytest would show them all.
logging.getLogger("werkzeug").setLevel(logging.WARNING)


def _load_launcher() -> ModuleType:
    path = REPO / "localstack" / "launcher.py"
    spec = importlib.util.spec_from_file_location("tierlog_localstack_launcher", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


launcher = sys.modules.get("tierlog_localstack_launcher") or _load_launcher()


def tiering_settings(endpoint_url: str, endpoint: Any, bucket: str) -> dict[str, str]:
    """Broker settings: tiering on, the S3 RSM on ``endpoint_url``, fast task intervals."""
    rsm = endpoint.rsm_configs(bucket)
    rsm["storage.s3.endpoint.url"] = endpoint_url
    rsm["storage.s3.retry.max.attempts"] = "2"
    rsm["storage.s3.api.call.attempt.timeout"] = "10000"
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "rsm_plugins.s3.S3RemoteStorageManager",
        **{f"rsm.config.{k}": v for k, v in rsm.items() if v != ""},
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "200",
        "remote.log.manager.task.retry.backoff.ms": "200",
        "remote.log.manager.task.retry.backoff.max.ms": "1000",
        "log.retention.check.interval.ms": "300",
        "remote.partition.remover.task.interval.ms": "300",
    }


# -- fixtures (imported by the test modules and conftests that use them) -----------------------
@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[Any]:
    """moto's server on 127.0.0.1 (or the endpoint named by TIERLOG_S3_ENDPOINT)."""
    endpoint = launcher.start_s3_endpoint()
    yield endpoint
    endpoint.stop()


@pytest.fixture
def bucket(s3_endpoint: Any) -> Iterator[Bucket]:
    """A bucket of the test's own."""
    name = f"tierlog-e2e-{uuid.uuid4().hex[:10]}"
    s3_endpoint.create_bucket(name)
    client = s3_endpoint.client()
    yield Bucket(client, name)
    client.close()


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    """Brokers a test started; each still running at the end is SIGKILLed (by its pid)."""
    started: list[BrokerProcess] = []
    yield started
    for b in started:
        b.kill()


# -- the bucket ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RemoteObject:
    key: str
    size: int

    @property
    def stem(self) -> str:
        """``<topic>-<topicId>/<partition>/<startOffset>-<segmentId>``: one segment copy."""
        name = self.key.rsplit("/", 1)[-1]
        folder = self.key[: len(self.key) - len(name)]
        return folder + name.split(".", 1)[0]

    @property
    def is_topic_manifest(self) -> bool:
        """``<topic>-<topicId>/topic-manifest.json``: the topic's, not a segment's."""
        return self.key.count("/") == 1 and self.key.endswith("/" + TOPIC_MANIFEST)

    @property
    def topic(self) -> str:
        """The topic name of ``<topic>-<topicId>/`` (a topic id is 22 characters)."""
        return self.key.split("/", 1)[0][: -(TOPIC_ID_CHARS + 1)]


class Bucket:
    """Read-only views of a bucket (a test's own; it is never shared between tests)."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name

    def objects(self, topic: str | None = None) -> list[RemoteObject]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name)
        out = [RemoteObject(o["Key"], o["Size"]) for p in pages for o in p.get("Contents", [])]
        if topic is not None:
            out = [o for o in out if o.topic == topic]
        return out

    def log_bytes(self, topic: str) -> int:
        """Bytes of the ``.log`` objects of ``topic``: the remote size of its partitions."""
        return sum(o.size for o in self.objects(topic) if o.key.endswith(".log"))

    def segment_count(self, topic: str) -> int:
        return sum(1 for o in self.objects(topic) if o.key.endswith(MANIFEST_SUFFIX))

    def manifest(self, key: str) -> dict[str, Any]:
        return json.loads(self.client.get_object(Bucket=self.name, Key=key)["Body"].read())

    def manifests(self, topic: str | None = None) -> dict[str, dict[str, Any]]:
        """Manifests by stem."""
        return {
            o.stem: self.manifest(o.key)
            for o in self.objects(topic)
            if o.key.endswith(MANIFEST_SUFFIX)
        }

    def incomplete_stems(self, topic: str | None = None) -> set[str]:
        """Stems with objects but no manifest: copies in progress, or left by a crash."""
        by_stem: dict[str, set[str]] = {}
        for o in self.objects(topic):
            if not o.is_topic_manifest:
                by_stem.setdefault(o.stem, set()).add(o.key)
        return {s for s, keys in by_stem.items() if s + MANIFEST_SUFFIX not in keys}


def orphan_report(bucket: Bucket, finished_ids: set[str]) -> list[str]:
    """Objects in ``bucket`` that belong to no segment listed COPY_SEGMENT_FINISHED.

    Every object (topic manifests aside) must be named in the manifest of its stem, and that
    manifest's segment id must be among ``finished_ids`` (Kafka uuid text, as ``tierlog
    metadata list`` prints).
    """
    problems: list[str] = []
    objects = [o for o in bucket.objects() if not o.is_topic_manifest]
    manifests = {o.stem: bucket.manifest(o.key) for o in objects if o.key.endswith(MANIFEST_SUFFIX)}
    for o in objects:
        doc = manifests.get(o.stem)
        if doc is None:
            problems.append(f"{o.key}: no manifest for its segment")
            continue
        seg_id = doc["segment"]["segmentId"]
        if seg_id not in finished_ids:
            problems.append(f"{o.key}: segment {seg_id} is not COPY_SEGMENT_FINISHED")
            continue
        name = o.key.rsplit("/", 1)[-1]
        if (
            name not in {e["key"] for e in doc["objects"].values()}
            and o.key != o.stem + MANIFEST_SUFFIX
        ):
            problems.append(f"{o.key}: not listed in its manifest")
    return problems


# -- the broker's view ------------------------------------------------------------------------
def metadata_segments(
    bootstrap: str, topic: str | None = None, state: str | None = None
) -> list[dict[str, Any]]:
    """Every remote segment ``tierlog metadata list --json`` shows (all pages)."""
    segments: list[dict[str, Any]] = []
    cursor = "0"
    while True:
        args = [sys.executable, "-m", "tierlog", "metadata", "list"]
        args += ["--bootstrap-server", bootstrap, "--json", "--cursor", cursor]
        if topic is not None:
            args += ["--topic", topic]
        if state is not None:
            args += ["--state", state]
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"tierlog metadata list failed: {done.stderr[-2000:]}"
        doc = json.loads(done.stdout)
        segments += doc["segments"]
        cursor = str(doc["next_cursor"])
        if cursor == "0":
            return segments


def metadata_segments_offline(log_dirs: str, topic: str) -> list[dict[str, Any]]:
    """The same listing read from the log dirs of a stopped broker."""
    args = [sys.executable, "-m", "tierlog", "metadata", "list", "--log-dirs", log_dirs]
    args += ["--json", "--topic", topic, "--num-partitions", "3"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"tierlog metadata list --log-dirs failed: {done.stderr[-2000:]}"
    return json.loads(done.stdout)["segments"]


def local_segment_bases(broker: BrokerProcess, topic: str, partition: int = 0) -> list[int]:
    d = Path(broker.settings["log.dirs"]) / f"{topic}-{partition}"
    return sorted(int(p.name.split(".")[0]) for p in d.glob("*.log"))


def local_log_start(broker: BrokerProcess, topic: str) -> int:
    bases = local_segment_bases(broker, topic)
    return bases[0] if bases else 0


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    """(low, high) watermark of partition 0: ListOffsets earliest and latest."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()


def broker_log_lines(broker: BrokerProcess, *needles: str) -> list[str]:
    try:
        text = broker.log_file.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines() if any(n in line for n in needles)]


# -- the fault proxy ----------------------------------------------------------------------------
Hold = Callable[[str, str], bool]
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection"}


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client killed mid-request (the broker, SIGKILLed) is expected: say nothing."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


@dataclass
class Chaos:
    """Faults a ``FaultProxy`` injects at random, each with its probability per request.

    ``error500``: 500 InternalError; ``slowdown``: 503 SlowDown (S3's throttling answer);
    ``reset``: the connection is reset without an answer; ``stall``: the request waits
    ``stall_s`` before it is forwarded; ``truncate``: the answer announces its full length
    but only half the body is sent before the connection closes. Faults hit requests whose
    method is in ``methods``.
    """

    error500: float = 0.0
    slowdown: float = 0.0
    reset: float = 0.0
    stall: float = 0.0
    truncate: float = 0.0
    stall_s: float = 2.0
    methods: frozenset[str] = frozenset({"GET", "PUT", "POST", "DELETE", "HEAD"})
    seed: int = 8
    injected: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def pick(self, method: str) -> str | None:
        if method not in self.methods:
            return None
        with self._lock:
            roll = self._rng.random()
            for name in ("error500", "slowdown", "reset", "stall", "truncate"):
                p = getattr(self, name)
                if roll < p:
                    self.injected[name] += 1
                    return name
                roll -= p
        return None


_S3_ERRORS = {
    "error500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
}


class FaultProxy:
    """Forward HTTP requests to ``upstream``; hold those for which ``hold(method, path)``;
    inject random faults while a ``Chaos`` plan is set (``chaos(plan)``).

    A held request waits until ``release()`` and is then dropped: the connection is closed
    with no answer and nothing reaches S3.
    """

    def __init__(self, upstream: str) -> None:
        url = urllib.parse.urlsplit(upstream)
        self.upstream = (url.hostname or HOST, url.port or 80)
        self._hold: Hold | None = None
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._chaos: Chaos | None = None
        self.held: list[str] = []
        self.held_event = threading.Event()
        self.server = _QuietServer((HOST, 0), self._handler())
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server.server_address[1]}"

    def hold(self, predicate: Hold | None) -> None:
        """Hold the matching requests from now on (``None``: forward everything)."""
        with self._lock:
            self._hold = predicate
            self.held = []
            self.held_event.clear()
            self._release.clear()

    def chaos(self, plan: Chaos | None) -> None:
        """Inject ``plan``'s faults from now on (``None``: none)."""
        with self._lock:
            self._chaos = plan

    def _fault(self, method: str) -> str | None:
        with self._lock:
            plan = self._chaos
        return plan.pick(method) if plan is not None else None

    def release(self) -> None:
        """Drop the held requests and forward everything again."""
        with self._lock:
            self._hold = None
        self._release.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def _should_hold(self, method: str, path: str) -> bool:
        with self._lock:
            if self._hold is None or not self._hold(method, path):
                return False
            self.held.append(f"{method} {path}")
            self.held_event.set()
            return True

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    parts = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length", 0) or 0)
                return self.rfile.read(length) if length else b""

            def _s3_error(self, fault: str) -> None:
                status, code, message = _S3_ERRORS[fault]
                body = (
                    f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                    f"<Message>{message}</Message></Error>"
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _reset(self) -> None:
                # SO_LINGER 0: close sends a TCP RST, what a crashed proxy or LB does.
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True

            def _forward(self) -> None:
                body = self._body()
                if proxy._should_hold(self.command, self.path):
                    proxy._release.wait()
                    self.close_connection = True
                    return
                fault = proxy._fault(self.command)
                if fault in _S3_ERRORS:
                    self._s3_error(fault)
                    return
                if fault == "reset":
                    self._reset()
                    return
                if fault == "stall":
                    plan = proxy._chaos
                    time.sleep(plan.stall_s if plan is not None else 0)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                except OSError:
                    self.close_connection = True
                    return
                finally:
                    conn.close()
                self.send_response(response.status, response.reason)
                for k, v in response.getheaders():
                    if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                if self.command == "HEAD":
                    self.send_header(
                        "Content-Length", response.getheader("Content-Length", "0") or "0"
                    )
                else:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    if fault == "truncate" and len(data) > 1:
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                        self._reset()
                        return
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        return Handler
