"""The Parquet export: identical rows, incremental re-runs, and a killed run leaves nothing
partial and re-runs to the same output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from archive_data import write_archive

from spark_jobs.export import STAGING, STATE_FILE, run_export, spark_session


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
    config = tmp_path / "server.properties"
    config.write_text(f"rsm.config.storage.root={archive.config.rsm_config['storage.root']}\n")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tierlog",
            "export",
            "--config",
            str(config),
            "--topic",
            "orders",
            "--output",
            str(out),
            "--master",
            "local[1]",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )

    def staged_or_done() -> bool:
        if (out / STATE_FILE).exists():
            return True  # it finished before the kill: the re-run must still match
        return (out / STAGING).exists() and any((out / STAGING).rglob("*.parquet"))

    deadline = time.monotonic() + 120
    while not staged_or_done():
        assert proc.poll() is None, "the export ended without staging anything"
        assert time.monotonic() < deadline, "the export never staged a file"
        time.sleep(0.05)  # polling for the moment to kill
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    # Whatever the moment of the kill: every visible file is complete, none is duplicated.
    for f in files(out):
        if not f.startswith(STAGING):
            ds.dataset(out / f, format="parquet").to_table()
    clean = tmp_path / "clean"
    run_export(spark, options(archive) | {"maxBytesPerPartition": str(128 << 20)}, str(clean))
    run_export(spark, options(archive) | {"maxBytesPerPartition": str(128 << 20)}, str(out))
    assert exported_rows(out) == exported_rows(clean)
    assert not (out / STAGING).exists()
