"""A plain ``pip install tierlog`` (no extras), in a fresh venv: a working broker with the
local-directory tier, a consumer, the tools, and no pyspark, pyarrow or cloud SDK.

The venv is built once for the module (``base_venv``) from a copy of the project's source,
so the build leaves nothing in the working tree; pip's cache keeps it to about 20 s once the
wheels have been downloaded. Every command runs the venv's own ``tierlog`` and Kafka client
without ``PYTHONPATH``, so nothing comes from the development venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess, start_broker
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "core", "tiered", "rlmm", "rsm_plugins",
           "spark_jobs", "tierlog")  # fmt: skip
HEAVY = ("pyspark", "pyarrow", "boto3", "botocore", "s3fs", "aiobotocore", "fsspec", "hdfs-native")
TOPIC = "tiered"
N = 3000


@dataclass(frozen=True)
class Venv:
    root: Path

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    @property
    def tierlog(self) -> str:
        return str(self.root / "bin" / "tierlog")

    @property
    def env(self) -> dict[str, str]:
        """This process's environment without what would import the development tree."""
        return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def run(
        self, args: Sequence[str | Path], timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args),
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            cwd=self.root,
        )


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    work = tmp_path_factory.mktemp("base-install")
    source = work / "src"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            # Nothing built in the working tree comes along: pip must compile the decoder.
            shutil.copytree(
                path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c")
            )
        else:
            shutil.copy2(path, source / name)
    venv = Venv(work / "venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv.root)], check=True, timeout=120)
    install = venv.run([venv.python, "-m", "pip", "install", "--quiet", str(source)], timeout=600)
    assert install.returncode == 0, install.stderr[-4000:]
    return venv


def test_the_install_compiles_the_record_decoder(base_venv: Venv) -> None:
    probe = (
        "from core.records import native; import core.records._native as m; "
        "print(native.implementation(), m.__file__)"
    )
    out = base_venv.run([base_venv.python, "-c", probe])
    assert out.returncode == 0, out.stderr
    implementation, path = out.stdout.split()
    assert implementation == "compiled"
    assert path.startswith(str(base_venv.root)), path  # the venv's build, not the tree's


def installed(venv: Venv) -> set[str]:
    out = venv.run([venv.python, "-m", "pip", "list", "--format=json"])
    assert out.returncode == 0, out.stderr
    return {p["name"].lower().replace("_", "-") for p in json.loads(out.stdout)}


def test_the_base_install_brings_no_spark_and_no_cloud_sdk(base_venv: Venv) -> None:
    names = installed(base_venv)
    assert "tierlog" in names and "confluent-kafka" in names
    assert sorted(names & set(HEAVY)) == []


PRODUCE = """
import sys
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
admin = AdminClient({"bootstrap.servers": bootstrap})
config = {"segment.bytes": "50000", "local.retention.bytes": "50000",
          "remote.storage.enable": "true", "retention.ms": "-1"}
for future in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
    future.result(30)
producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 10000})
for i in range(n):
    producer.produce(topic, key=str(i).encode(), value=b"%08d" % i * 10)
assert producer.flush(60) == 0
"""

CONSUME = """
import sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "base-install",
                     "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, 0, 0)])
deadline = time.monotonic() + 60
while n and time.monotonic() < deadline:
    msg = consumer.poll(0.5)
    if msg is None:
        continue
    assert not msg.error(), msg.error()
    print(msg.offset(), msg.key().decode(), msg.value().decode())
    n -= 1
consumer.close()
"""


def remote_manifests(bucket: Path) -> list[Path]:
    return list(bucket.rglob("*.manifest.json"))


def local_start(data: Path) -> int:
    logs = sorted(p.name for p in (data / f"{TOPIC}-0").glob("*.log"))
    return int(logs[0].split(".")[0]) if logs else 0


@dataclass(frozen=True)
class TieredRun:
    data: Path
    bucket: Path
    consumed: list[str]


@pytest.fixture(scope="module")
def tiered_run(base_venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TieredRun]:
    """A broker of the base venv with the local-directory tier; records produced, moved to
    the tier, consumed from offset 0 with the base venv's client; then a clean stop."""
    work = tmp_path_factory.mktemp("base-broker")
    bucket = work / "bucket"
    settings = {
        "remote.log.storage.system.enable": "true",
        "rsm.config.storage.root": str(bucket),
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "300",
    }
    broker: BrokerProcess = start_broker(
        work / "broker", settings, program=[base_venv.tierlog], env=base_venv.env
    )
    try:
        data = Path(broker.settings["log.dirs"])
        produced = base_venv.run([base_venv.python, "-c", PRODUCE, broker.bootstrap, TOPIC, str(N)])
        assert produced.returncode == 0, produced.stderr
        # The first segments leave the local disk once the tier holds them.
        wait_until(lambda: local_start(data) > 0, 60, what="local segments moved to the tier")
        consumed = base_venv.run([base_venv.python, "-c", CONSUME, broker.bootstrap, TOPIC, str(N)])
        assert consumed.returncode == 0, consumed.stderr
        code = broker.stop()
        assert code == 0, broker.log_tail()
        yield TieredRun(data, bucket, consumed.stdout.splitlines())
    finally:
        broker.kill()


def test_a_consumer_reads_every_record_back_through_the_local_tier(tiered_run: TieredRun):
    assert remote_manifests(tiered_run.bucket), "nothing was copied to the local-directory tier"
    expected = [f"{i} {i} {f'{i:08d}' * 10}" for i in range(N)]
    assert tiered_run.consumed == expected


def test_dump_log_reads_the_broker_segments(base_venv: Venv, tiered_run: TieredRun):
    segment = sorted((tiered_run.data / f"{TOPIC}-0").glob("*.log"))[0]
    out = base_venv.run([base_venv.tierlog, "dump-log", "--json", str(segment)])
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["batches"], doc
    assert doc["batches"][0]["baseOffset"] == int(segment.name.split(".")[0])


def test_metadata_list_reads_the_remote_segments_offline(base_venv: Venv, tiered_run: TieredRun):
    out = base_venv.run(
        [base_venv.tierlog, "metadata", "list", "--log-dirs", str(tiered_run.data), "--json"]
    )
    assert out.returncode == 0, out.stderr
    segments = json.loads(out.stdout)["segments"]
    assert {s["topic"] for s in segments} == {TOPIC}
    # The first segment left the local disk, so its copy had finished.
    first = min(segments, key=lambda s: s["start_offset"])
    assert (first["start_offset"], first["state"]) == (0, "COPY_SEGMENT_FINISHED")


def test_the_s3_plugin_without_its_extra_stops_the_start_naming_it(
    base_venv: Venv, tmp_path: Path
) -> None:
    settings = {
        "node.id": "1",
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "rsm_plugins.s3.S3RemoteStorageManager",
        "rsm.config.storage.s3.bucket.name": "tierlog",
    }
    args = [base_venv.tierlog, "broker", "start"]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    out = base_venv.run(args, timeout=60)
    assert out.returncode == 1, out.stderr
    error = out.stderr.strip().splitlines()[-1]
    assert error.startswith("tierlog: error: remote.log.storage.manager.class.name="), error
    assert "boto3" in error and "pip install 'tierlog[s3]'" in error, error
    assert "Traceback" not in out.stderr


def test_export_without_the_spark_extra_names_it(base_venv: Venv, tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(f"rsm.config.storage.root={tmp_path / 'bucket'}\n")
    output = tmp_path / "out"
    out = base_venv.run(
        [base_venv.tierlog, "export", "--config", str(config), "--topic", TOPIC, "--output", output]
    )
    assert out.returncode == 1, out.stderr
    assert "pip install 'tierlog[spark]'" in out.stderr and "Traceback" not in out.stderr
