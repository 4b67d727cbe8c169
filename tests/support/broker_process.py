"""Real broker processes for the tests: started, waited for, stopped or killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 60.0


@dataclass
class BrokerProcess:
    """A ``tierlog broker start`` child process.

    ``bootstrap`` is ``host:port`` of its PLAINTEXT listener; its stderr (the log) goes to
    ``log_file`` so a failing test can show it.
    """

    proc: subprocess.Popen[str]
    bootstrap: str
    log_dir: Path
    log_file: Path
    settings: dict[str, str] = field(default_factory=dict)
    # listener name -> host:port, for brokers with several listeners
    endpoints: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: the broker gets no chance to flush or write its clean-shutdown marker."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def start_broker(
    log_dir: Path,
    settings: Mapping[str, str] | None = None,
    *,
    port: int = 0,
    command_prefix: Sequence[str] = (),
    program: Sequence[str] = (sys.executable, "-m", "tierlog"),
    env: Mapping[str, str] | None = None,
) -> BrokerProcess:
    """Start a broker on 127.0.0.1 and wait for its "listening on" line.

    ``command_prefix`` runs the broker under another program that execs it (``fiu-run -x``
    for disk faults), so the process id is still the broker's. ``program`` is the
    ``tierlog`` command (another venv's, for one), ``env`` its environment (default this
    process's).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    merged = {
        "node.id": "1",
        "log.dirs": str(log_dir / "data"),
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        **(settings or {}),
    }
    args = [*command_prefix, *program, "broker", "start"]
    for key, value in merged.items():
        args += ["--set", f"{key}={value}"]
    log_file = log_dir / f"broker-{time.monotonic_ns()}.log"
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    with open(log_file, "w") as err:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "listening on" in line or not line:
            break
    if "listening on" not in line:
        proc.kill()
        proc.wait()
        raise RuntimeError(
            f"broker did not start (exit {proc.returncode}):\n{log_file.read_text()[-4000:]}"
        )
    endpoints = dict(e.split("://", 1) for e in line.strip().rsplit(" ", 1)[-1].split(","))
    bootstrap = next(iter(endpoints.values()))
    return BrokerProcess(proc, bootstrap, log_dir, log_file, dict(merged), endpoints)


def restart(broker: BrokerProcess) -> BrokerProcess:
    """Start a broker again on the same data, the same settings and the same ports."""
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    settings = dict(broker.settings)
    endpoints = broker.endpoints or {"PLAINTEXT": f"127.0.0.1:{port}"}
    settings["listeners"] = ",".join(f"{name}://{hp}" for name, hp in endpoints.items())
    return start_broker(broker.log_dir, settings, port=port)
