"""A real standalone ZooKeeper for the tests, and its pytest fixtures.

The server is Debian's ``zookeeper`` package (3.8, jars in /usr/share/java; ``make
system-deps`` installs it) run as ``java ... QuorumPeerMain zoo.cfg`` on 127.0.0.1, a free
port and a data dir of its own. Tests can stop, kill, pause and restart a server of their own
(``zookeeper_factory``) on the same port and data dir, to cut brokers off from ZooKeeper; the
session-wide one (``zookeeper``) is shared and must be left running.

Fixtures (import them into a conftest.py): ``zookeeper_server`` (session), ``zookeeper`` (its
connect string), ``zk_chroot`` (a connect string with a chroot of the test's own, so that tests
share one server without seeing each other's znodes) and ``zookeeper_factory``.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kazoo.client import KazooClient

JAVA_LIB = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_LIB / "zookeeper.jar"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
# The JVM is small and short-lived: a serial GC and the C1 compiler start it fastest.
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


def find_java() -> str:
    """The ``java`` to run: $JAVA_HOME's, the one on PATH, or any under /usr/lib/jvm."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    if found := shutil.which("java"):
        candidates.append(found)
    candidates += sorted(glob.glob("/usr/lib/jvm/*/bin/java"), reverse=True)
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError(
        "no java runtime found for ZooKeeper (set JAVA_HOME, or on Debian/Ubuntu: "
        "apt-get install -y openjdk-17-jre-headless)"
    )


def zookeeper_classpath() -> str:
    """ZooKeeper's classpath; ``TIERLOG_ZOOKEEPER_CLASSPATH`` overrides Debian's jars."""
    if override := os.environ.get("TIERLOG_ZOOKEEPER_CLASSPATH"):
        return override
    if not ZOOKEEPER_JAR.exists():
        raise RuntimeError(
            f"ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing): run `make system-deps` "
            "(Debian's zookeeper package) or set TIERLOG_ZOOKEEPER_CLASSPATH"
        )
    # /usr/share/java holds several SLF4J bindings; putting the simple one first makes
    # ZooKeeper log to stderr (our log file) instead of to the no-op binding.
    simple_logger = JAVA_LIB / "slf4j-simple.jar"
    prefix = f"{simple_logger}:" if simple_logger.exists() else ""
    return f"{prefix}{JAVA_LIB}/*"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def four_letter_word(port: int, word: str, timeout: float = 2.0, address: str = "127.0.0.1") -> str:
    """Send a four-letter command (``ruok``, ``srvr``, ...) and return the whole answer."""
    with socket.create_connection((address, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


@dataclass
class ZooKeeperServer:
    """One standalone ZooKeeper process; ``start`` again reuses its port and data dir."""

    base_dir: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    # Where it listens: another local address lets a network namespace reach it.
    address: str = "127.0.0.1"
    # How long each start took to serve, in seconds (reported by the test suite).
    start_times: list[float] = field(default_factory=list)

    @property
    def connect_string(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "zookeeper.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.base_dir / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=500",
                    f"dataDir={self.data_dir}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.address}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,cons,mntr",
                    # Tests open many sessions from one address (the default limit is 60).
                    "maxClientCnxns=0",
                    # Honour Kafka-sized session timeouts (tickTime * 20 would cap them at 10 s).
                    "maxSessionTimeout=60000",
                    "",
                ]
            )
        )
        return config

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the server and wait until it serves requests.

        Raises:
            RuntimeError: it exited or did not serve within ``timeout``; the log tail is in
                the message.
        """
        if self.running:
            raise RuntimeError(f"ZooKeeper on port {self.port} is already running")
        config = self._write_config()
        args = [
            find_java(),
            *JVM_OPTIONS,
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            zookeeper_classpath(),
            MAIN_CLASS,
            str(config),
        ]
        started = time.monotonic()
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with {self.proc.returncode} at start:\n{self.log_tail()}"
                )
            if self.serving():
                self.start_times.append(time.monotonic() - started)
                return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"ZooKeeper did not serve within {timeout:g} s:\n{self.log_tail()}")

    def serving(self) -> bool:
        """True once the server answers ``srvr`` as a standalone server that serves requests."""
        try:
            answer = four_letter_word(self.port, "srvr", timeout=0.5, address=self.address)
            return "Mode: standalone" in answer
        except OSError:
            return False

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
        if not self.running:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL: a crash (it also ends a paused server)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(STOP_TIMEOUT_S)

    def pause(self) -> None:
        """SIGSTOP: connections stay open but nothing is answered (a hung server)."""
        assert self.proc is not None and self.running
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None and self.running
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def start_zookeeper(base_dir: Path, port: int = 0, address: str = "127.0.0.1") -> ZooKeeperServer:
    """Start a server in ``base_dir`` on ``address:port`` (port 0: a free one, tried up to 3
    times)."""
    base_dir.mkdir(parents=True, exist_ok=True)
    attempts = 3 if port == 0 else 1
    for attempt in range(attempts):
        server = ZooKeeperServer(base_dir, port or free_port(), address=address)
        try:
            server.start()
            return server
        except RuntimeError:
            # Another process may have taken the free port between the probe and the bind.
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def expire_session(connect_string: str, client_id: tuple[int, bytes]) -> None:
    """End a session from outside, as a ZooKeeper-side expiry would (blocking).

    A second client joins the session with its id and password and closes it: ZooKeeper
    deletes the session's ephemeral znodes, and the original client is told its session
    expired when it next talks to the server (kazoo's own test technique).
    """
    intruder = KazooClient(hosts=connect_string, client_id=client_id)
    intruder.start(timeout=START_TIMEOUT_S)
    try:
        intruder.stop()
    finally:
        intruder.close()


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper shared by the whole session; tests must not stop it."""
    server = start_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def zookeeper(zookeeper_server: ZooKeeperServer) -> str:
    """The shared server's connect string, ``127.0.0.1:<port>``."""
    return zookeeper_server.connect_string


@pytest.fixture
def zk_chroot(zookeeper: str) -> str:
    """A connect string with a chroot of this test's own (``127.0.0.1:<port>/t-<hex>``).

    The chroot does not exist yet: connecting with ``KafkaZkClient.connect`` creates it, as a
    Kafka broker creates its chroot.
    """
    return f"{zookeeper}/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def zookeeper_factory(tmp_path: Path) -> Iterator[Callable[[], ZooKeeperServer]]:
    """Start ZooKeeper servers of the test's own, to stop or restart; killed at the end."""
    started: list[ZooKeeperServer] = []

    def factory() -> ZooKeeperServer:
        server = start_zookeeper(tmp_path / f"zookeeper-{len(started)}")
        started.append(server)
        return server

    yield factory
    for server in started:
        server.kill()
