"""The Parquet export: identical rows, incremental re-runs (time-bounded ones included: each
record exactly once), a state file of the previous format migrated, and a killed run leaves
nothing partial and re-runs to the same output."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from spark_jobs.datasource import TierlogReader
from spark_jobs.export import STAGING, STATE_FILE, run_export, spark_session
from tests.support.waiting import wait_until

from .archive_data import T0, write_archive

HERE = Path(__file__).parent
HOUR = 3_600_000


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


def wanted(archive, *, since: int | None = None, until: int | None = None) -> list[tuple]:
    """The committed records with ``since <= timestamp < until``, as exported_rows gives them."""
    return sorted(
        (o, k, v, h, ts, "orders", 0)
        for o, k, v, h, ts in archive.expected
        if o not in archive.aborted_offsets
        and (since is None or ts >= since)
        and (until is None or ts < until)
    )


def straddled(archive, offset: int) -> bool:
    """Whether a planned range holds both ``offset`` and the next one."""
    return any(
        s.range.start <= offset < s.range.end for s in TierlogReader(options(archive)).partitions()
    )


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


def test_daily_until_runs_export_every_record_once(spark, tmp_path):
    archive = write_archive(tmp_path / "a", ts_step_ms=HOUR)  # record n at T0 + n hours
    out = tmp_path / "out"
    # Each bound falls inside a segment: its later records wait for the next run.
    day1, day2 = T0 + 50 * HOUR + 1, T0 + 90 * HOUR + 1
    assert straddled(archive, 50) and straddled(archive, 90)
    first = run_export(spark, options(archive) | {"endingTimestamp": str(day1)}, str(out))
    assert exported_rows(out) == wanted(archive, until=day1)
    second = run_export(spark, options(archive) | {"endingTimestamp": str(day2)}, str(out))
    assert exported_rows(out) == wanted(archive, until=day2)  # each record once: no overlap
    third = run_export(spark, options(archive), str(out))
    assert exported_rows(out) == wanted(archive)
    assert first.rows + second.rows + third.rows == len(wanted(archive))
    again = run_export(spark, options(archive), str(out))
    assert again.rows == 0 and again.segments == 0
    assert not (out / STAGING).exists()


def test_records_before_since_are_exported_by_a_later_run_without_it(spark, tmp_path):
    archive = write_archive(tmp_path / "a", ts_step_ms=HOUR)
    out = tmp_path / "out"
    since = T0 + 70 * HOUR  # inside a segment: its earlier records are left for later
    assert straddled(archive, 69)
    first = run_export(spark, options(archive) | {"startingTimestamp": str(since)}, str(out))
    assert exported_rows(out) == wanted(archive, since=since)
    before = set(files(out))
    second = run_export(spark, options(archive), str(out))
    assert exported_rows(out) == wanted(archive)
    assert first.rows + second.rows == len(wanted(archive))
    # The straddled segment's two parts are two files: the first run's is still there.
    assert before < files(out)


def test_a_state_file_of_the_previous_format_is_migrated(spark, tmp_path):
    archive = write_archive(tmp_path / "a")
    out = tmp_path / "out"
    out.mkdir()
    splits = list(TierlogReader(options(archive)).partitions())
    done = splits[0].range.segment  # exported by an earlier version of the export
    other = "other/0/00000000-0000-0000-0000-000000000007/0"  # a topic this run does not read
    legacy = [f"orders/0/{done.segment_id}/{done.start_offset}", other]
    (out / STATE_FILE).write_text(json.dumps({"exported": legacy, "updated": "2026-01-01"}))
    summary = run_export(spark, options(archive), str(out))
    assert exported_rows(out) == [r for r in wanted(archive) if r[0] > done.end_offset]
    assert summary.skipped == 1 and summary.segments == len(splits) - 1
    state = json.loads((out / STATE_FILE).read_text())
    assert state["version"] == 2
    assert state["segments"][str(done.segment_id)] == {
        "topic": "orders",
        "partition": 0,
        "offsets": [[done.start_offset, done.end_offset]],
    }
    assert len(state["segments"]) == len(splits)
    assert state["exported"] == [other]  # kept until a run reads that topic
    assert run_export(spark, options(archive), str(out)).rows == 0


def test_a_state_file_that_cannot_be_read_is_refused(spark, tmp_path):
    archive = write_archive(tmp_path / "a")
    out = tmp_path / "out"
    out.mkdir()
    (out / STATE_FILE).write_text('{"version": 2, "segments": {"x": {"topic": "orders"}}}')
    with pytest.raises(ValueError, match=re.escape(f"{STATE_FILE}: not a tierlog export state")):
        run_export(spark, options(archive), str(out))
    assert not files(out)


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
