"""The Parquet export: identical rows, incremental re-runs, and a killed run leaves nothing
partial and re-runs to the same output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from spark_jobs.export import STAGING, STATE_FILE, run_export, spark_session
from tests.support.waiting import wait_until

from .archive_data import write_archive

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    session = spark_session("local[2]", "tierlog-export-tests")
    yield session
    session.stop()


def options(archive) -> dict[str, str]:
    return {
        "topic": "orders",
        **{f"rsm.config.{k}": v for k, v in archive.config.rsm_config.items()},
        "maxBytesPerPartition": "600",
    }


def exported_rows(output: Path) -> list[tuple]:
    table = ds.dataset(output, format="parquet", partitioning="hive").to_table()
    out = []
    for r in table.to_pylist():
        headers = tuple((h["key"], h["value"]) for h in r["headers"])
        out.append(
            (
                r["offset"],
                r["key"],
                r["value"],
                headers,
                int(r["timestamp"].timestamp() * 1000),
                r["topic"],
                int(r["partition"]),
            )
        )
    return sorted(out)


def files(output: Path) -> set[str]:
    return {str(p.relative_to(output)) for p in output.rglob("*.parquet")}


def test_export_matches_the_log_and_a_rerun_adds_nothing(spark, tmp_path):
    archive = write_archive(tmp_path / "a")
    out = tmp_path / "out"
    first = run_export(spark, options(archive), str(out))
    want = sorted(
        (o, k, v, h, ts, "orders", 0)
        for o, k, v, h, ts in archive.expected
        if o not in archive.aborted_offsets
    )
    assert exported_rows(out) == want
    assert first.rows == len(want) and first.segments > 0
    assert all("/date=" in f and f.startswith("topic=orders/partition=0/") for f in files(out))
    before = {f: (out / f).stat().st_mtime_ns for f in files(out)}
    again = run_export(spark, options(archive), str(out))
    assert again.segments == 0 and again.rows == 0 and again.skipped == first.segments
    assert {f: (out / f).stat().st_mtime_ns for f in files(out)} == before
    assert (out / STATE_FILE).exists() and not (out / STAGING).exists()


def test_a_killed_run_leaves_no_partial_output_and_a_rerun_completes_it(spark, tmp_path):
    archive = write_archive(tmp_path / "a")
    out = tmp_path / "out"
    gate = tmp_path / "gate"
    gate.mkdir()
    # The export reads through held_rsm, which holds it once a range is staged: the kill
    # lands after some ranges were written and before anything was committed.
    config = tmp_path / "server.properties"
    config.write_text(
        "remote.log.storage.manager.class.name=held_rsm.HeldLocalDirRemoteStorageManager\n"
        f"rsm.config.storage.root={archive.config.rsm_config['storage.root']}\n"
        f"rsm.config.hold.staging.dir={out / STAGING}\n"
        f"rsm.config.hold.held.file={gate / 'held'}\n"
        f"rsm.config.hold.release.file={gate / 'release'}\n"
    )
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "tierlog", "export", "--config", str(config)]
    command += ["--topic", "orders", "--output", str(out), "--master", "local[1]"]
    log = tmp_path / "export.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": path},
        )
    try:
        wait_until(
            lambda: (gate / "held").exists() or proc.poll() is not None,
            120,
            what="the export held with a range staged",
        )
        assert proc.poll() is None, f"the export ended unheld:\n{log.read_text()[-3000:]}"
        # Mid-export, for certain: ranges staged, nothing visible, nothing recorded.
        staged = list((out / STAGING).rglob("*.parquet"))
        assert staged
        assert files(out) == {str(p.relative_to(out)) for p in staged}
        assert not (out / STATE_FILE).exists()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        (gate / "release").touch()  # let an orphaned Spark worker go on and exit
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    # The kill left staged files only: no final file, no state; readers ignore "_staging".
    assert not (out / STATE_FILE).exists()
    assert all(f.startswith(STAGING) for f in files(out))
    assert ds.dataset(out, format="parquet", partitioning="hive").count_rows() == 0
    clean = tmp_path / "clean"
    run_export(spark, options(archive) | {"maxBytesPerPartition": str(128 << 20)}, str(clean))
    run_export(spark, options(archive) | {"maxBytesPerPartition": str(128 << 20)}, str(out))
    assert exported_rows(out) == exported_rows(clean)
    assert not (out / STAGING).exists()
