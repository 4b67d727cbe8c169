"""Start an S3 endpoint on 127.0.0.1 without Docker, for tests, benchmarks and demos.

Kinds, chosen by ``start_s3_endpoint(kind)`` or ``--kind`` on the command line:

* ``external``: ``TIERLOG_S3_ENDPOINT`` is set (e.g. ``http://127.0.0.1:4566``): use it,
  start nothing. This wins over every other kind, so a LocalStack started with
  ``docker compose`` serves the whole test suite.
* ``moto`` (default): moto's ``ThreadedMotoServer`` in this process, on a free port.
* ``moto-process``: the ``moto_server`` command in a child process (no GIL shared with the
  caller: use it for benchmarks).
* ``localstack``: LocalStack's runtime in a child process. It needs Python >= 3.12 with
  ``localstack-core[runtime]`` installed (see README.md); name that interpreter with
  ``TIERLOG_LOCALSTACK_PYTHON``. Started with loopback-only listeners, S3 only.

Credentials are LocalStack's and moto's defaults (``test``/``test``, region ``us-east-1``),
or ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_DEFAULT_REGION`` for ``external``.

This file is importable on its own (tests load it by path, since the folder name is also
LocalStack's package name): ``importlib.util.spec_from_file_location``.
Command line: ``python localstack/launcher.py [--kind moto|moto-process|localstack]
[--bucket NAME]`` prints the endpoint URL and serves until interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_ENDPOINT = "TIERLOG_S3_ENDPOINT"
ENV_LOCALSTACK_PYTHON = "TIERLOG_LOCALSTACK_PYTHON"
KINDS = ("moto", "moto-process", "localstack")
HOST = "127.0.0.1"


class LauncherError(RuntimeError):
    """The endpoint could not be started or reached; the message says what to install or set."""


@dataclass
class S3Endpoint:
    """A running S3 endpoint. ``stop()`` (or leaving the ``with`` block) ends what was started."""

    url: str
    kind: str
    region: str = "us-east-1"
    access_key: str = "test"
    secret_key: str = "test"
    _stop: Any = field(default=None, repr=False)
    _session: Any = field(default=None, repr=False)

    def client(self) -> Any:
        """A boto3 S3 client for this endpoint (path-style addressing)."""
        import boto3
        from botocore.config import Config

        if self._session is None:
            self._session = boto3.session.Session()
        return self._session.client(
            "s3",
            endpoint_url=self.url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}),
        )

    def create_bucket(self, name: str) -> None:
        """Create ``name`` if it does not exist."""
        client = self.client()
        try:
            args: dict[str, Any] = {"Bucket": name}
            if self.region != "us-east-1":
                args["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
            with contextlib.suppress(
                client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists
            ):
                client.create_bucket(**args)
        finally:
            client.close()

    def rsm_configs(self, bucket: str, key_prefix: str = "") -> dict[str, str]:
        """The ``rsm.config.*`` settings (prefix stripped) of S3RemoteStorageManager here."""
        return {
            "storage.s3.bucket.name": bucket,
            "storage.s3.endpoint.url": self.url,
            "storage.s3.region": self.region,
            "storage.s3.path.style.access.enabled": "true",
            "storage.aws.access.key.id": self.access_key,
            "storage.aws.secret.access.key": self.secret_key,
            "key.prefix": key_prefix,
        }

    def stop(self) -> None:
        if self._stop is not None:
            stop, self._stop = self._stop, None
            stop()

    def __enter__(self) -> S3Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_s3_endpoint(kind: str | None = None, *, timeout: float = 60.0) -> S3Endpoint:
    """An S3 endpoint: ``TIERLOG_S3_ENDPOINT`` if set, else a new one of ``kind`` (moto).

    Raises:
        LauncherError: an unknown kind, a missing dependency (named), or no answer in time.
    """
    external = os.environ.get(ENV_ENDPOINT)
    if external:
        return S3Endpoint(
            url=external.rstrip("/"),
            kind="external",
            region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
            access_key=os.environ.get("AWS_ACCESS_KEY_ID", "test"),
            secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
        )
    kind = kind or "moto"
    if kind == "moto":
        return _start_moto_thread()
    if kind == "moto-process":
        return _start_moto_process(timeout)
    if kind == "localstack":
        return _start_localstack(timeout)
    raise LauncherError(f"unknown S3 endpoint kind {kind!r}; one of {', '.join(KINDS)}")


def _start_moto_thread() -> S3Endpoint:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as e:
        raise LauncherError("moto is not installed: pip install 'moto[server]'") from e
    server = ThreadedMotoServer(ip_address=HOST, port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return S3Endpoint(url=f"http://{host}:{port}", kind="moto", _stop=server.stop)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _s3_up(body: str) -> bool:
    """True when LocalStack's health document says S3 is up."""
    with contextlib.suppress(ValueError, AttributeError, KeyError, TypeError):
        return json.loads(body)["services"].get("s3") in ("running", "available")
    return False


def _wait_http(
    url: str,
    proc: subprocess.Popen[bytes],
    timeout: float,
    ready: Callable[[str], bool] = lambda body: True,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LauncherError(f"the endpoint process exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if ready(response.read().decode("utf-8", "replace")):
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise LauncherError(f"no answer from {url} within {timeout:.0f} s")


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _start_moto_process(timeout: float) -> S3Endpoint:
    command = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    if not Path(command).exists():
        raise LauncherError("moto_server not found: pip install 'moto[server]'")
    port = _free_port()
    proc = subprocess.Popen(
        [command, "-H", HOST, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://{HOST}:{port}"
    try:
        _wait_http(url + "/moto-api/", proc, timeout)
    except BaseException:
        _terminate(proc)
        raise
    return S3Endpoint(url=url, kind="moto-process", _stop=lambda: _terminate(proc))


def _start_localstack(timeout: float) -> S3Endpoint:
    python = os.environ.get(ENV_LOCALSTACK_PYTHON)
    if not python:
        raise LauncherError(
            f"set {ENV_LOCALSTACK_PYTHON} to a Python >= 3.12 with localstack-core[runtime] "
            "installed (see localstack/README.md), or use Docker and set "
            f"{ENV_ENDPOINT}=http://127.0.0.1:4566"
        )
    port = _free_port()
    state = Path(tempfile.mkdtemp(prefix="tierlog-localstack-"))
    env = {
        **os.environ,
        "OVERRIDE_IN_DOCKER": "0",
        "GATEWAY_SERVER": "hypercorn",  # else it binds 0.0.0.0
        "GATEWAY_LISTEN": f"{HOST}:{port}",
        "DNS_ADDRESS": "0",  # no DNS server (it would bind 0.0.0.0)
        "DISABLE_EVENTS": "1",
        "SKIP_SSL_CERT_DOWNLOAD": "1",
        "SERVICES": "s3",
        "EAGER_SERVICE_LOADING": "1",
        "FILESYSTEM_ROOT": str(state / "fs"),
        "CONFIG_DIR": str(state / "config"),
        "TMPDIR": str(state / "tmp"),
    }
    (state / "tmp").mkdir()
    log = open(state / "localstack.log", "wb")  # noqa: SIM115 - closed by stop
    proc = subprocess.Popen(
        [python, "-m", "localstack.runtime.main"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://{HOST}:{port}"

    def stop() -> None:
        _terminate(proc)
        log.close()
        shutil.rmtree(state, ignore_errors=True)

    try:
        _wait_http(url + "/_localstack/health", proc, timeout, ready=_s3_up)
    except LauncherError as e:
        stop()
        raise LauncherError(f"{e}; LocalStack's log was in {state / 'localstack.log'}") from e
    except BaseException:
        stop()
        raise
    return S3Endpoint(url=url, kind="localstack", _stop=stop)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kind", choices=KINDS, default="moto")
    parser.add_argument("--bucket", action="append", default=[], help="bucket to create")
    args = parser.parse_args(argv)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # stop what was started on SIGTERM too
    endpoint = start_s3_endpoint(args.kind)
    with endpoint:
        for bucket in args.bucket:
            endpoint.create_bucket(bucket)
        print(f"{ENV_ENDPOINT}={endpoint.url}  ({endpoint.kind})", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
