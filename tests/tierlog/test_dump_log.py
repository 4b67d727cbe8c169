"""``tierlog dump-log`` on real segment files written by PartitionLog.

Every test runs the command as a user would (``main([...])`` or the console script) and
checks what is printed: stdout for the dump, stderr for problems, and the exit status.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.log.config import LogConfig
from core.log.file_records import FileRecords
from core.log.partition_log import PartitionLog
from core.log.txn_index import AbortedTxn, TransactionIndex
from core.records.batch import Compression
from core.records.builder import RecordBatchBuilder, build_control_batch
from core.records.record import ControlRecordType
from tierlog.cli import main

T0 = 1_700_000_000_000
BATCHES = 20
RECORDS_PER_BATCH = 3


def seg(offset: int, suffix: str) -> str:
    return f"{offset:020d}{suffix}"


@dataclass
class Run:
    status: int
    out: str
    err: str

    def docs(self) -> list[dict]:
        return [json.loads(line) for line in self.out.splitlines()]


@pytest.fixture
def dump(capsys: pytest.CaptureFixture[str]):
    def run(*args: str | Path) -> Run:
        status = main(["dump-log", *map(str, args)])
        captured = capsys.readouterr()
        return Run(status, captured.out, captured.err)

    return run


def batch(i: int, *, compression: Compression = Compression.NONE) -> bytearray:
    builder = RecordBatchBuilder(compression=compression)
    for j in range(RECORDS_PER_BATCH):
        builder.append(
            f"value-{i}-{j}".encode(),
            key=f"key-{j}".encode(),
            headers=[("trace", b"t"), ("n", str(j).encode())],
            timestamp=T0 + 10 * i + j,
        )
    return builder.build()


@pytest.fixture
def partition(tmp_path: Path) -> Path:
    """A closed partition of 60 records in three segments, with index entries and snapshots."""
    directory = tmp_path / "orders-0"
    log = PartitionLog(
        directory, "orders", 0, LogConfig(segment_bytes=1200, index_interval_bytes=150)
    )
    for i in range(BATCHES):
        log.append_as_leader(batch(i), leader_epoch=3 if i < 10 else 5)
    log.close()
    return directory


def log_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


BATCH_LINE = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: -1 lastSequence: -1 "
    r"producerId: -1 producerEpoch: -1 partitionLeaderEpoch: (\d+) isTransactional: false "
    r"isControl: false deleteHorizonMs: none position: (\d+) CreateTime: (\d+) size: (\d+) "
    r"magic: 2 compresscodec: (\w+) crc: (\d+) isvalid: (true|false)$"
)


# -- .log ------------------------------------------------------------------------------------


def test_log_lists_every_batch_with_kafkas_fields(dump, partition: Path) -> None:
    files = log_files(partition)
    assert len(files) >= 3, "the fixture should roll several segments"
    run = dump(*files)
    assert run.status == 0, run.err
    assert run.err == ""
    lines = run.out.splitlines()
    assert lines[0] == f"Dumping {files[0]}"
    assert lines[1] == "Log starting offset: 0"
    batches = [BATCH_LINE.match(line) for line in lines if line.startswith("baseOffset")]
    assert all(batches), [line for line in lines if line.startswith("baseOffset")][:2]
    offsets = [(int(m[1]), int(m[2]), int(m[3])) for m in batches]  # type: ignore[index]
    expected = [(3 * i, 3 * i + 2, 3) for i in range(BATCHES)]
    assert offsets == expected
    epochs = [int(m[4]) for m in batches]  # type: ignore[index]
    assert epochs == [3] * 10 + [5] * 10
    assert {m[10] for m in batches} == {"true"}  # type: ignore[index]
    # Positions restart at 0 in each segment and advance by the batch sizes.
    first_segment = [m for m in batches if int(m[1]) < int(files[1].name[:20])]  # type: ignore[index]
    positions = [int(m[5]) for m in first_segment]  # type: ignore[index]
    sizes = [int(m[7]) for m in first_segment]  # type: ignore[index]
    assert positions == [sum(sizes[:k]) for k in range(len(sizes))]
    # No records without --deep-iteration.
    assert not any(line.startswith("|") for line in lines)


def test_deep_iteration_and_print_data_show_records(dump, partition: Path) -> None:
    first = log_files(partition)[0]
    run = dump("--print-data", first)
    assert run.status == 0, run.err
    records = [line for line in run.out.splitlines() if line.startswith("| ")]
    assert records[0] == (
        f"| offset: 0 CreateTime: {T0} keySize: 5 valueSize: 9 sequence: -1 "
        "headerKeys: [trace,n] key: key-0 payload: value-0-0"
    )
    assert records[4] == (
        f"| offset: 4 CreateTime: {T0 + 11} keySize: 5 valueSize: 9 sequence: -1 "
        "headerKeys: [trace,n] key: key-1 payload: value-1-1"
    )
    assert [int(r.split()[2]) for r in records] == list(range(len(records)))

    run = dump("--deep-iteration", first)
    records = [line for line in run.out.splitlines() if line.startswith("| ")]
    assert records[0].endswith("headerKeys: [trace,n]")  # no data without --print-data


def test_idempotent_compressed_and_control_batches(dump, tmp_path: Path) -> None:
    path = tmp_path / seg(100, ".log")
    idempotent = RecordBatchBuilder(
        compression=Compression.GZIP,
        base_offset=100,
        producer_id=7,
        producer_epoch=2,
        base_sequence=40,
        is_transactional=True,
        partition_leader_epoch=1,
    )
    idempotent.append(b"\x00\xffbinary", key=None, timestamp=T0)
    idempotent.append(None, key=b"tomb", timestamp=T0 + 1)
    marker = build_control_batch(
        ControlRecordType.COMMIT,
        producer_id=7,
        producer_epoch=2,
        coordinator_epoch=9,
        base_offset=102,
        partition_leader_epoch=1,
        timestamp=T0 + 2,
    )
    records = FileRecords(path)
    records.append(idempotent.build())
    records.append(marker)
    records.close()

    run = dump("--print-data", path)
    assert run.status == 0, run.err
    lines = run.out.splitlines()
    assert lines[2].startswith(
        "baseOffset: 100 lastOffset: 101 count: 2 baseSequence: 40 lastSequence: 41 "
        "producerId: 7 producerEpoch: 2 partitionLeaderEpoch: 1 isTransactional: true "
        "isControl: false"
    )
    assert "compresscodec: gzip" in lines[2]
    # A null key is not printed (as Kafka); binary bytes are escaped onto one line.
    assert lines[3] == (
        f"| offset: 100 CreateTime: {T0} keySize: -1 valueSize: 8 sequence: 40 headerKeys: [] "
        "payload: \\x00\\xffbinary"
    )
    assert lines[4] == (
        f"| offset: 101 CreateTime: {T0 + 1} keySize: 4 valueSize: -1 sequence: 41 "
        "headerKeys: [] key: tomb"
    )
    assert "isTransactional: true isControl: true" in lines[5]
    assert lines[6].endswith("endTxnMarker: COMMIT coordinatorEpoch: 9")

    doc = dump("--json", "--print-data", path).docs()[0]
    first, second = doc["batches"][0]["records"]
    # The documented bytes rule: valid UTF-8 as a string, anything else as base64, null as null.
    assert first["key"] is None
    assert base64.b64decode(first["value"]["base64"]) == b"\x00\xffbinary"
    assert second["key"] == "tomb"
    assert second["value"] is None
    control = doc["batches"][1]["records"][0]
    assert control["endTxnMarker"] == "COMMIT"
    assert control["coordinatorEpoch"] == 9


def test_json_matches_the_log(dump, partition: Path) -> None:
    files = log_files(partition)
    run = dump("--json", "--print-data", *files)
    assert run.status == 0, run.err
    docs = run.docs()
    assert [d["file"] for d in docs] == [str(f) for f in files]
    assert all(d["type"] == "log" and d["errors"] == [] for d in docs)
    assert [d["baseOffset"] for d in docs] == [int(f.name[:20]) for f in files]
    batches = [b for d in docs for b in d["batches"]]
    assert [(b["baseOffset"], b["lastOffset"], b["count"]) for b in batches] == [
        (3 * i, 3 * i + 2, 3) for i in range(BATCHES)
    ]
    assert all(b["isvalid"] and b["compresscodec"] == "none" for b in batches)
    records = [r for b in batches for r in b["records"]]
    assert [r["offset"] for r in records] == list(range(BATCHES * RECORDS_PER_BATCH))
    assert records[7]["key"] == "key-1"
    assert records[7]["value"] == "value-2-1"
    assert records[7]["timestamp"] == T0 + 21
    assert records[7]["headers"] == [{"key": "trace", "value": "t"}, {"key": "n", "value": "1"}]
    # The text form of the same file shows the same batches.
    text = dump(files[0]).out
    for b in docs[0]["batches"]:
        assert f"baseOffset: {b['baseOffset']} lastOffset: {b['lastOffset']}" in text
        assert f"position: {b['position']} CreateTime: {b['maxTimestamp']}" in text


def test_corrupt_byte_is_reported_and_the_next_file_still_dumped(dump, partition: Path) -> None:
    first, second = log_files(partition)[:2]
    doc = dump("--json", first).docs()[0]
    victim = doc["batches"][2]
    # Flip a byte inside the CRC-covered records of the third batch.
    data = bytearray(first.read_bytes())
    data[victim["position"] + victim["size"] - 3] ^= 0xFF
    first.write_bytes(data)

    run = dump(first, second)
    assert run.status == 1
    lines = run.out.splitlines()
    bad = [line for line in lines if "isvalid: false" in line]
    assert len(bad) == 1
    assert f"baseOffset: {victim['baseOffset']} " in bad[0]
    assert f"position: {victim['position']} " in bad[0]
    # The batches after it, and the next file, are still dumped.
    assert sum("isvalid: true" in line for line in lines) == len(doc["batches"]) - 1 + len(
        dump("--json", second).docs()[0]["batches"]
    )
    assert f"Dumping {second}" in lines
    errors = run.err.splitlines()
    assert len(errors) == 1
    assert errors[0].startswith(f"tierlog: error: {first}: batch at byte {victim['position']} ")
    assert "CRC mismatch" in errors[0]

    doc = dump("--json", first).docs()[0]
    assert [b["isvalid"] for b in doc["batches"]].count(False) == 1
    assert doc["errors"][0]["position"] == victim["position"]


def test_torn_tail_reports_its_position(dump, partition: Path) -> None:
    first = log_files(partition)[0]
    size = first.stat().st_size
    doc = dump("--json", first).docs()[0]
    last = doc["batches"][-1]
    with first.open("r+b") as f:
        f.truncate(size - 10)  # the last batch loses its tail, as after a crash

    run = dump("--deep-iteration", first)
    assert run.status == 1
    assert f"Found {last['size'] - 10} invalid bytes at the end of {first.name}" in run.out
    assert run.out.count("isvalid: true") == len(doc["batches"]) - 1
    assert run.err.splitlines() == [
        f"tierlog: error: {first}: torn or corrupt data at byte {last['position']}: the batch "
        f"there claims {last['size']} bytes, past the end of the file ({size - 10} bytes); "
        f"the {last['size'] - 10} bytes from there on are not record batches"
    ]


def test_max_bytes_reads_whole_batches_only(dump, partition: Path) -> None:
    first = log_files(partition)[0]
    doc = dump("--json", first).docs()[0]
    limit = doc["batches"][2]["position"] + 5  # two whole batches and part of the third
    run = dump("--max-bytes", limit, first)
    assert run.status == 0, run.err
    assert run.out.count("baseOffset:") == 2
    assert "invalid bytes" not in run.out


# -- indexes ---------------------------------------------------------------------------------


def test_offset_and_time_indexes_list_entries_that_match_the_log(dump, partition: Path) -> None:
    base = int(log_files(partition)[0].name[:20])
    log_doc = dump("--json", partition / seg(base, ".log")).docs()[0]
    by_position = {b["position"]: b for b in log_doc["batches"]}

    run = dump(partition / seg(base, ".index"), partition / seg(base, ".timeindex"))
    assert run.status == 0, run.err
    assert run.err == ""
    entries = re.findall(r"^offset: (\d+) position: (\d+)$", run.out, re.M)
    assert len(entries) >= 2
    for offset, position in entries:
        assert by_position[int(position)]["lastOffset"] == int(offset)
    times = re.findall(r"^timestamp: (\d+) offset: (\d+)$", run.out, re.M)
    assert len(times) >= 2
    max_ts = {b["lastOffset"]: b["maxTimestamp"] for b in log_doc["batches"]}
    for timestamp, offset in times:
        assert max_ts[int(offset)] == int(timestamp)

    run = dump("--verify-index-only", partition / seg(base, ".index"))
    assert run.status == 0
    assert "offset:" not in run.out  # verification only: entries are not listed
    assert f"All {len(entries)} entries of" in run.out

    run = dump("--index-sanity-check", partition / seg(base, ".index"))
    assert run.status == 0
    assert f"{partition / seg(base, '.index')} passed sanity check." in run.out


def test_tampered_offset_index_is_reported_by_verify(dump, partition: Path) -> None:
    index = partition / seg(0, ".index")
    data = bytearray(index.read_bytes())
    assert len(data) >= 16
    # Rename entry 1's offset to another one between its neighbours: offsets and positions
    # still increase, so the index looks sane to the broker, but the entry no longer names
    # the last offset of the batch at its position.
    rel0 = struct.unpack_from(">i", data, 0)[0]
    rel1, pos1 = struct.unpack_from(">ii", data, 8)
    wrong = rel1 - 1
    assert wrong > rel0, "the fixture's batches hold several records each"
    struct.pack_into(">ii", data, 8, wrong, pos1)
    index.write_bytes(data)

    run = dump("--verify-index-only", index)
    assert run.status == 1
    assert run.out.splitlines() == [f"Dumping {index}"]
    err = run.err.splitlines()
    assert err[0] == f"Mismatches in :{index.absolute()}"
    assert err[1] == f"  Index offset: {wrong}, log offset: {rel1}"
    assert err[2] == (
        f"tierlog: error: {index}: 1 of {len(data) // 8} index entries do not match the log "
        f"{partition / seg(0, '.log')} (first: entry 1, offset {wrong} at position {pos1})"
    )

    doc = dump("--json", "--verify-index-only", index).docs()[0]
    assert doc["entries"] == []
    assert doc["mismatches"] == [
        {"entry": 1, "indexOffset": wrong, "position": pos1, "logOffset": rel1}
    ]


def test_tampered_time_index_is_reported_by_verify(dump, partition: Path) -> None:
    index = partition / seg(0, ".timeindex")
    data = bytearray(index.read_bytes())
    timestamp = struct.unpack_from(">q", data, 0)[0]
    next_timestamp = struct.unpack_from(">q", data, 12)[0]
    struct.pack_into(">q", data, 0, timestamp + 1)  # still below the next: the index is sane
    assert timestamp + 1 < next_timestamp
    index.write_bytes(data)

    run = dump("--verify-index-only", index)
    assert run.status == 1
    assert run.err.splitlines()[:2] == [
        f"Found timestamp mismatch in :{index.absolute()}",
        f"  Index timestamp: {timestamp + 1}, log timestamp: {timestamp}",
    ]
    assert run.err.splitlines()[2].startswith(f"tierlog: error: {index}: 1 problems")


# -- other files -----------------------------------------------------------------------------


def test_producer_snapshot_txn_index_and_leader_epochs(dump, tmp_path: Path) -> None:
    directory = tmp_path / "payments-0"
    log = PartitionLog(directory, "payments", 0, LogConfig(segment_bytes=400))
    for i in range(6):
        builder = RecordBatchBuilder(producer_id=42, producer_epoch=1, base_sequence=2 * i)
        builder.append(b"a", timestamp=T0 + i)
        builder.append(b"b", timestamp=T0 + i)
        log.append_as_leader(builder.build(), leader_epoch=0 if i < 3 else 2)
    log.close()
    snapshot = sorted(directory.glob("*.snapshot"))[-1]

    run = dump(snapshot, directory / "leader-epoch-checkpoint")
    assert run.status == 0, run.err
    assert (
        f"producerId: 42 producerEpoch: 1 coordinatorEpoch: -1 currentTxnFirstOffset: none "
        f"lastTimestamp: {T0 + 5} firstSequence: 10 lastSequence: 11 lastOffset: 11 "
        f"offsetDelta: 1 timestamp: {T0 + 5}"
    ) in run.out.splitlines()
    assert "epoch: 0 startOffset: 0\nepoch: 2 startOffset: 6\n" in run.out

    txn_path = tmp_path / seg(10, ".txnindex")
    txn_index = TransactionIndex(txn_path, 10)
    txn_index.append(
        AbortedTxn(producer_id=7, first_offset=5, last_offset=12, last_stable_offset=5)
    )
    txn_index.close()
    run = dump(txn_path)
    assert run.status == 0, run.err
    assert (
        "version: 0 producerId: 7 firstOffset: 5 lastOffset: 12 lastStableOffset: 5"
        in run.out.splitlines()
    )
    docs = dump("--json", txn_path, directory / "leader-epoch-checkpoint").docs()
    assert docs[0]["entries"] == [
        {"version": 0, "producerId": 7, "firstOffset": 5, "lastOffset": 12, "lastStableOffset": 5}
    ]
    assert docs[1]["entries"] == [{"epoch": 0, "startOffset": 0}, {"epoch": 2, "startOffset": 6}]


NOT_THAT_FILE = b"hello, this is a text file and nothing else\n"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (seg(0, ".index"), "index file {path} is corrupt: its size 44 is not a multiple of 8"),
        (seg(0, ".timeindex"), "is corrupt: its size 44 is not a multiple of 12"),
        (seg(0, ".txnindex"), "transaction index {path} is corrupt"),
        (seg(0, ".snapshot"), "producer snapshot {path} has unknown version"),
        ("leader-epoch-checkpoint", "malformed line 1 in checkpoint file {path}"),
        (seg(0, ".log"), "{path}: torn or corrupt data at byte 0"),
    ],
)
def test_a_file_that_is_not_what_its_name_says_gives_one_error_line(
    dump, tmp_path: Path, name: str, expected: str
) -> None:
    path = tmp_path / name
    path.write_bytes(NOT_THAT_FILE)
    run = dump(path)
    assert run.status == 1
    err = run.err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("tierlog: error: ")
    assert expected.format(path=path) in err[0]
    assert "Traceback" not in run.err


def test_random_bytes_named_like_an_index_or_snapshot(dump, tmp_path: Path) -> None:
    noise = bytes((i * 7919 + 13) % 251 for i in range(4096))  # deterministic, not zeros
    paths = [tmp_path / seg(0, s) for s in (".index", ".timeindex", ".snapshot", ".log")]
    for path in paths:
        path.write_bytes(noise)
    run = dump(*paths)
    assert run.status == 1
    err = run.err.splitlines()
    assert len(err) == len(paths)
    for line, path in zip(err, paths, strict=True):
        assert line.startswith("tierlog: error: ") and str(path) in line


def test_missing_unknown_and_directory_arguments(dump, tmp_path: Path, partition: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    good = log_files(partition)[0]
    run = dump(tmp_path / "nope.log", tmp_path / "notes.txt", partition, good)
    assert run.status == 1
    assert run.err.splitlines() == [
        f"tierlog: error: {tmp_path / 'nope.log'}: no such file",
        f"tierlog: error: {tmp_path / 'notes.txt'}: unknown file type: the name must end in "
        ".log, .index, .timeindex, .txnindex, .snapshot or be leader-epoch-checkpoint",
        f"tierlog: error: {partition}: is a directory, not a file",
    ]
    assert f"Dumping {good}" in run.out  # the good file is dumped all the same


def test_paths_starting_with_a_dash(dump, partition: Path, monkeypatch) -> None:
    # The partition directory of a topic named "-orders" ('-' is legal in topic names),
    # given relative to the log dir as a user would: a value, not an unknown option.
    shutil.copytree(partition, partition.parent / "-orders-0")
    monkeypatch.chdir(partition.parent)
    name = f"-orders-0/{log_files(partition)[0].name}"
    for argv in ((name,), (name, "--deep-iteration"), ("--deep-iteration", "--", name)):
        run = dump(*argv)
        assert (run.status, run.err) == (0, ""), argv
        assert run.out.startswith(f"Dumping {name}\nLog starting offset: 0\nbaseOffset: 0 ")
        assert ("| offset: 0 CreateTime: " in run.out) == ("--deep-iteration" in argv)


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump-log"]) == 2
    assert "the following arguments are required: FILE" in capsys.readouterr().err
    assert main(["dump-log", "--max-bytes", "-1", "x.log"]) == 2
    assert main(["no-such-command"]) == 2
    assert main([]) == 2
    assert main(["--help"]) == 0


# -- the installed command ---------------------------------------------------------------------


def test_console_script_and_python_m(partition: Path) -> None:
    script = Path(sys.executable).with_name("tierlog")
    first = log_files(partition)[0]
    for command in ([str(script)], [sys.executable, "-m", "tierlog"]):
        done = subprocess.run(
            [*command, "dump-log", "--deep-iteration", str(first), str(partition / "missing")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1
        assert done.stdout.startswith(f"Dumping {first}\nLog starting offset: 0\nbaseOffset: 0 ")
        assert "| offset: 0 CreateTime: " in done.stdout
        assert done.stderr == f"tierlog: error: {partition / 'missing'}: no such file\n"


def test_index_entry_with_negative_position_is_an_error(dump, tmp_path: Path) -> None:
    path = tmp_path / seg(0, ".index")
    path.write_bytes(struct.pack(">ii", 5, -200))  # no sibling log: still certainly wrong
    run = dump(path)
    assert run.status == 1
    assert "position: -200" not in run.out  # never listed as if it were an entry
    assert run.err.strip().splitlines() == [
        f"tierlog: error: index file {path} is corrupt: non-zero bytes follow its 0 valid "
        "entries (slot 0 breaks the ordering of the index)"
    ]


def test_deleted_segment_names_are_understood(dump, partition: Path) -> None:
    first = log_files(partition)[0]
    index = partition / seg(0, ".index")
    first.rename(f"{first}.deleted")
    index.rename(f"{index}.deleted")
    run = dump(f"{first}.deleted", f"{index}.deleted")
    assert run.status == 0, run.err
    assert "Log starting offset: 0" in run.out
    assert "offset: " in run.out.split(f"Dumping {index}.deleted")[1]


def test_offsets_decoder_shows_consumer_offsets_records(tmp_path: Path, dump) -> None:
    from core.server.coordinator_records import (
        CommittedOffset,
        GroupMetadataValue,
        MemberMetadata,
        group_metadata_key,
        group_metadata_value,
        offset_commit_key,
        offset_commit_value,
    )

    directory = tmp_path / "__consumer_offsets-0"
    log = PartitionLog(directory, "__consumer_offsets", 0, LogConfig(cleanup_policy=("compact",)))
    builder = RecordBatchBuilder()
    builder.append(
        offset_commit_value(CommittedOffset(42, 3, "m", T0)),
        key=offset_commit_key("g", "orders", 1),
        timestamp=T0,
    )
    member = MemberMetadata("c-1", None, "c", "/127.0.0.1", 300000, 45000, b"sub", b"as")
    builder.append(
        group_metadata_value(GroupMetadataValue("consumer", 4, "range", "c-1", T0, (member,))),
        key=group_metadata_key("g"),
        timestamp=T0,
    )
    builder.append(None, key=offset_commit_key("g", "orders", 0), timestamp=T0)
    log.append_as_leader(builder.build(), leader_epoch=0)
    log.close()

    run = dump("--offsets-decoder", directory / seg(0, ".log"))
    assert run.status == 0, run.err
    lines = [line for line in run.out.splitlines() if "| offset:" in line]
    assert len(lines) == 3
    assert (
        'key: {"type":"1","data":{"group":"g","topic":"orders","partition":1}} '
        'payload: {"version":"3","data":{"offset":42,"leaderEpoch":3,"metadata":"m",'
        f'"commitTimestamp":{T0}}}}}' in lines[0]
    )
    assert '"generation":4' in lines[1] and '"memberId":"c-1"' in lines[1]
    assert lines[2].endswith("payload: <DELETE>")
