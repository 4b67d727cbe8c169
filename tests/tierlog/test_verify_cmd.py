"""``tierlog metadata verify``: the remote tier audited against ``__remote_log_metadata``.

The tier is written as a broker writes it (``tiered_data``: core's PartitionLog, the
RemoteLogManager's CopyTask, the real RLMM over a stopped broker's log dir), on the
local-directory plugin, so that objects can be deleted, planted and aged by path. The S3
variants with real broker processes are in tests/integration/test_remote_tools.py.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.kafka_uuid import uuid_to_base64
from core.log.log_manager import LOCK_FILE
from rlmm.topic_client import LogDirMetadataTopicReader
from rsm_plugins.layout import ObjectSuffix, SegmentManifest, object_key
from tests.support.tiered_data import (
    METADATA_PARTITIONS,
    Producer,
    TieredTopic,
    TierWriter,
    local_rsm_props,
    write_diverged,
    write_tiered_topic,
)
from tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.cli import main

S = RemoteLogSegmentState
HOUR_S = 3600


@dataclass
class Tier:
    root: Path
    bucket: Path
    broker_dir: Path
    rsm_config: Path
    topic: TieredTopic

    def path(self, key: str) -> Path:
        return self.bucket / key

    def key(self, md: RemoteLogSegmentMetadata, suffix: ObjectSuffix) -> str:
        return object_key("", md, suffix)

    def age_everything(self, seconds: float = 2 * HOUR_S) -> None:
        """Make every object look written ``seconds`` ago (the grace period is an hour)."""
        then = time.time() - seconds
        for path in self.bucket.rglob("*"):
            if path.is_file():
                os.utime(path, (then, then))

    def plant(self, tp: TopicIdPartition, start: int = 999, suffix: str = "log") -> str:
        """An object of the layout that belongs to no segment, written two hours ago."""
        key = f"{tp.topic}-{uuid_to_base64(tp.topic_id)}/{tp.partition}/{start:020d}-" + (
            f"{uuid_to_base64(uuid.uuid4())}.{suffix}"
        )
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"left by a copy that never finished")
        then = time.time() - 2 * HOUR_S
        os.utime(path, (then, then))
        return key


def tp_of(tier: Tier, partition: int = 0) -> TopicIdPartition:
    return TopicIdPartition(tier.topic.topic_id, tier.topic.topic, partition)


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[Tier]:
    bucket = tmp_path / "bucket"
    props = local_rsm_props(bucket)
    writer = TierWriter(tmp_path, props, tmp_path / "broker")
    topic = write_tiered_topic(writer, batches=15, producer=Producer(7))
    writer.close()
    rsm_config = tmp_path / "rsm.properties"
    rsm_config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    yield Tier(tmp_path, bucket, tmp_path / "broker", rsm_config, topic)


def verify(
    tier: Tier, *args: str, capsys: pytest.CaptureFixture[str], text: bool = False
) -> tuple[int, Any, str]:
    """Run the command with ``--log-dirs``: the exit status, the JSON (or text) and stderr."""
    argv = ["metadata", "verify", "--log-dirs", str(tier.broker_dir)]
    argv += ["--rsm-config", str(tier.rsm_config), *args]
    if not text:
        argv.append("--json")
    code = main(argv)
    out, err = capsys.readouterr()
    return code, (out if text else json.loads(out)), err


def kinds(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for f in doc["findings"]:
        out.setdefault(f["kind"], []).append(f)
    return out


# -- a healthy tier ---------------------------------------------------------------------------


def test_a_healthy_tier_is_consistent(tier: Tier, capsys) -> None:
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 0, doc["findings"]
    assert doc["consistent"] and doc["findings"] == []
    assert [p["partition"] for p in doc["partitions"]] == [0, 1]
    finished = sum(len(s) for s in tier.topic.segments.values())
    assert finished >= 6
    assert doc["segments_checked"] == finished
    assert sum(p["segments"]["COPY_SEGMENT_FINISHED"] for p in doc["partitions"]) == finished
    code, text, _ = verify(tier, capsys=capsys, text=True)
    assert code == 0 and text.splitlines()[-1] == "consistent"


def test_deep_reads_every_object_of_a_healthy_tier(tier: Tier, capsys) -> None:
    code, doc, _ = verify(tier, "--deep", capsys=capsys)
    assert code == 0, doc["findings"]
    assert doc["objects_read"] == sum(
        len(SegmentManifest.from_json(p.read_bytes()).objects)
        for p in tier.bucket.rglob("*.manifest.json")
    )


# -- missing, resized and corrupted objects ---------------------------------------------------


def test_a_deleted_object_and_a_planted_orphan_are_both_named(tier: Tier, capsys) -> None:
    md = tier.topic.segments[0][1]
    deleted = tier.key(md, ObjectSuffix.OFFSET_INDEX)
    tier.path(deleted).unlink()
    orphan = tier.plant(tp_of(tier, 1))
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 1
    found = kinds(doc)
    assert [f["key"] for f in found["missing_object"]] == [deleted]
    assert found["missing_object"][0]["segment_id"] == uuid_to_base64(md.segment_id)
    assert [f["key"] for f in found["orphan"]] == [orphan]
    assert set(found) == {"missing_object", "orphan"}
    code, text, _ = verify(tier, capsys=capsys, text=True)
    assert code == 1 and deleted in text and orphan in text


def test_an_object_of_the_wrong_size_is_named(tier: Tier, capsys) -> None:
    md = tier.topic.segments[1][0]
    key = tier.key(md, ObjectSuffix.TIME_INDEX)
    data = tier.path(key).read_bytes()
    tier.path(key).write_bytes(data[:-12])
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 1
    assert [(f["kind"], f["key"]) for f in doc["findings"]] == [("wrong_size", key)]


def test_a_log_object_of_another_size_than_the_metadata_is_named(tier: Tier, capsys) -> None:
    md = tier.topic.segments[0][0]
    key = tier.key(md, ObjectSuffix.LOG)
    tier.path(key).write_bytes(tier.path(key).read_bytes() + b"\0" * 10)
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 1
    assert {(f["kind"], f["key"]) for f in doc["findings"]} == {("wrong_size", key)}


def test_only_deep_finds_a_flipped_byte(tier: Tier, capsys) -> None:
    md = tier.topic.segments[0][1]
    key = tier.key(md, ObjectSuffix.LOG)
    data = bytearray(tier.path(key).read_bytes())
    data[len(data) // 2] ^= 0x40
    tier.path(key).write_bytes(bytes(data))
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 0, "without --deep, objects are not read"
    code, doc, _ = verify(tier, "--deep", capsys=capsys)
    assert code == 1
    assert [(f["kind"], f["key"]) for f in doc["findings"]] == [("wrong_checksum", key)]


def test_a_manifest_that_disagrees_with_the_metadata_is_named(tier: Tier, capsys) -> None:
    md = tier.topic.segments[0][0]
    key = tier.key(md, ObjectSuffix.MANIFEST)
    doc = json.loads(tier.path(key).read_bytes())
    doc["segment"]["endOffset"] += 3
    tier.path(key).write_bytes(json.dumps(doc).encode())
    code, out, _ = verify(tier, capsys=capsys)
    assert code == 1
    (finding,) = out["findings"]
    assert (finding["kind"], finding["key"]) == ("manifest_mismatch", key)
    assert "end offset" in finding["message"]


def test_an_unreadable_manifest_is_named(tier: Tier, capsys) -> None:
    md = tier.topic.segments[1][1]
    key = tier.key(md, ObjectSuffix.MANIFEST)
    tier.path(key).write_bytes(b"{not json")
    code, out, _ = verify(tier, capsys=capsys)
    assert code == 1
    assert [(f["kind"], f["key"]) for f in out["findings"]] == [("bad_manifest", key)]


# -- orphans ------------------------------------------------------------------------------------


def test_a_young_orphan_is_a_copy_in_progress_until_the_grace_period(tier: Tier, capsys) -> None:
    key = tier.plant(tp_of(tier))
    now = time.time()
    os.utime(tier.path(key), (now, now))
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 0
    assert [n["kind"] for n in doc["notes"]] == ["young_objects"]
    code, doc, _ = verify(tier, "--grace-period", "0", capsys=capsys)
    assert code == 1 and [f["key"] for f in doc["findings"]] == [key]


def test_objects_of_an_unknown_topic_id_are_orphans_and_foreign_keys_are_left(
    tier: Tier, capsys
) -> None:
    stranger = TopicIdPartition(uuid.uuid4(), tier.topic.topic, 0)
    key = tier.plant(stranger)
    (tier.bucket / "README.txt").write_text("not of the layout")
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 1
    assert [(f["kind"], f["key"]) for f in doc["findings"]] == [("orphan", key)]
    assert any(n["kind"] == "unrecognized" and "README.txt" in n["message"] for n in doc["notes"])


def test_an_object_with_a_suffix_the_layout_never_writes_is_an_orphan(tier: Tier, capsys) -> None:
    md = tier.topic.segments[0][0]
    key = tier.key(md, ObjectSuffix.LOG) + ".bak"
    shutil.copy(tier.path(tier.key(md, ObjectSuffix.LOG)), tier.path(key))
    tier.age_everything()
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 1
    assert [(f["kind"], f["key"]) for f in doc["findings"]] == [("orphan", key)]


def test_topic_and_partition_filters(tier: Tier, capsys) -> None:
    key = tier.plant(tp_of(tier, 1))
    code, doc, _ = verify(tier, "--partition", "0", capsys=capsys)
    assert code == 0 and [p["partition"] for p in doc["partitions"]] == [0]
    code, doc, _ = verify(tier, "--topic", "other", capsys=capsys)
    assert code == 0 and doc["partitions"] == []
    code, doc, _ = verify(tier, "--topic", tier.topic.topic, capsys=capsys)
    assert code == 1 and [f["key"] for f in doc["findings"]] == [key]


# -- repair -------------------------------------------------------------------------------------


def test_repair_is_a_dry_run_without_yes_then_deletes_orphans(tier: Tier, capsys) -> None:
    orphans = [tier.plant(tp_of(tier, 0)), tier.plant(tp_of(tier, 1), suffix="manifest.json")]
    (tier.bucket / "README.txt").write_text("not of the layout")
    code, doc, _ = verify(tier, "--repair", capsys=capsys)
    assert code == 1
    assert doc["repair"]["dry_run"] and sorted(doc["repair"]["deleted_objects"]) == sorted(orphans)
    assert doc["repair"]["deleted_objects"][0].endswith(".manifest.json"), "manifests first"
    assert all(tier.path(k).exists() for k in orphans)
    code, doc, _ = verify(tier, "--repair", "--yes", capsys=capsys)
    assert code == 0, doc
    assert not doc["repair"]["dry_run"] and doc["repair"]["complete"]
    assert not any(tier.path(k).exists() for k in orphans)
    assert (tier.bucket / "README.txt").exists(), "objects not of the layout are never touched"
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 0 and doc["findings"] == []
    code, doc, _ = verify(tier, "--repair", "--yes", capsys=capsys)  # idempotent
    assert code == 0 and doc["repair"]["deleted_objects"] == []


def _stick(tier: Tier, tp: TopicIdPartition, age_s: float) -> RemoteLogSegmentMetadata:
    """The partition's last finished segment moved to DELETE_SEGMENT_STARTED ``age_s`` ago,
    and a copy left COPY_SEGMENT_STARTED as long ago, through the RLMM of the stopped
    broker."""
    from core.log.log_manager import LogManagerConfig
    from rlmm.manager import BROKER_ID_KEY, NUM_PARTITIONS_KEY, TopicBasedRemoteLogMetadataManager
    from tierlog.offline_storage import OfflineBrokerStorage

    then = int((time.time() - age_s) * 1000)
    storage = OfflineBrokerStorage(LogManagerConfig((tier.broker_dir,), node_id=1), {})
    rlmm = TopicBasedRemoteLogMetadataManager(storage.metadata_client())
    try:
        rlmm.configure({NUM_PARTITIONS_KEY: str(METADATA_PARTITIONS), BROKER_ID_KEY: "1"})
        rlmm.on_partition_leadership_changes({tp}, set())
        assert rlmm.wait_ready(tp, 30)
        last = tier.topic.segments[tp.partition][-1]
        rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                last.remote_log_segment_id, then, None, S.DELETE_SEGMENT_STARTED, 1
            )
        ).result(30)
        dangling = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tp, uuid.uuid4()), last.end_offset + 1, last.end_offset + 10,
            then, 1, then, 100, {0: last.end_offset + 1},
        )  # fmt: skip
        rlmm.add_remote_log_segment_metadata(dangling).result(30)
    finally:
        rlmm.close()
        storage.close()
    return last


def test_stuck_segments_are_named_and_repair_finishes_deletions_offline(tier: Tier, capsys) -> None:
    tp = tp_of(tier)
    last = _stick(tier, tp, age_s=2 * HOUR_S)
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 1
    stuck = kinds(doc)["stuck"]
    assert sorted(f["state"] for f in stuck) == ["COPY_SEGMENT_STARTED", "DELETE_SEGMENT_STARTED"]
    assert uuid_to_base64(last.segment_id) in {f["segment_id"] for f in stuck}
    code, doc, _ = verify(tier, "--repair", "--yes", capsys=capsys)
    assert code == 1, "the stuck copy is the leader's to delete: not repaired"
    assert doc["repair"]["finished_deletions"] == [uuid_to_base64(last.segment_id)]
    (left,) = doc["repair"]["not_repaired"]
    assert left["state"] == "COPY_SEGMENT_STARTED" and "copy task" in left["reason"]
    assert not tier.path(tier.key(last, ObjectSuffix.MANIFEST)).exists()
    assert not tier.path(tier.key(last, ObjectSuffix.LOG)).exists()
    # The deletion is finished in the metadata a broker reads at its start.
    code, doc, _ = verify(tier, capsys=capsys)
    assert [f["state"] for f in doc["findings"]] == ["COPY_SEGMENT_STARTED"]


def test_young_stuck_segments_are_in_progress(tier: Tier, capsys) -> None:
    _stick(tier, tp_of(tier), age_s=10)
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 0, doc["findings"]


def test_repair_over_kafka_leaves_stuck_deletions_and_says_why(tier: Tier, capsys) -> None:
    from tierlog.bucket_audit import AuditOptions, audit, repair
    from tierlog.remote_storage_config import open_object_store_rsm
    from tierlog.verify_cmd import NOT_WRITABLE_OVER_KAFKA

    tp = tp_of(tier)
    _stick(tier, tp, age_s=2 * HOUR_S)
    reader = LogDirMetadataTopicReader([tier.broker_dir])
    from rlmm.replay import replay
    from tierlog.metadata_source import Source, read_records

    replayed = replay(read_records(Source(reader, reader.partition_count(), None, lambda t: None)),
                      reader.partition_count())  # fmt: skip
    rsm = open_object_store_rsm(dict(local_rsm_props(tier.bucket)))
    try:
        metadata = {t: list(replayed.cache(t).entries()) for t in replayed.partitions()}
        report = audit(rsm, metadata, AuditOptions())
        result = repair(
            rsm, report, rlmm=None, broker_id=1, dry_run=False,
            metadata_unwritable=NOT_WRITABLE_OVER_KAFKA,
        )  # fmt: skip
    finally:
        rsm.close()
    assert result.finished_deletions == []
    assert {reason for _, reason in result.not_repaired} >= {NOT_WRITABLE_OVER_KAFKA}


def test_repair_refuses_log_dirs_a_running_broker_holds(tier: Tier, capsys) -> None:
    import fcntl

    fd = os.open(tier.broker_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, _, err = verify(tier, "--repair", "--yes", capsys=capsys, text=True)
    finally:
        os.close(fd)
    assert code == 1 and "locked" in err and str(tier.broker_dir) in err


# -- the lineage ------------------------------------------------------------------------------


def test_a_gap_and_an_overlap_are_named(tmp_path: Path, capsys) -> None:
    bucket = tmp_path / "bucket"
    props = local_rsm_props(bucket)
    writer = TierWriter(tmp_path, props, tmp_path / "broker")
    try:
        topic = write_tiered_topic(writer, partitions=1, batches=15)
        segments = topic.segments[0]
        assert len(segments) >= 4
        tp = segments[0].topic_id_partition
        middle = segments[1]
        # A gap: the second segment deleted (as retention would, but in the middle).
        for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
            if state == S.DELETE_SEGMENT_FINISHED:
                writer.rsm.delete_log_segment_data(middle)
            writer.rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(middle.remote_log_segment_id, 1, None, state, 1)
            ).result(30)
        # An overlap: a second copy of the third segment (a leadership change mid-copy).
        third = segments[2]
        duplicate = _second_copy(writer, third, tmp_path / "dup")
    finally:
        writer.close()
    config = tmp_path / "rsm.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    code = main(["metadata", "verify", "--log-dirs", str(tmp_path / "broker"),
                 "--rsm-config", str(config), "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    found = kinds(doc)
    assert set(found) == {"gap", "overlap"}
    (gap,) = found["gap"]
    assert f"offsets {middle.start_offset}..{middle.end_offset} " in gap["message"]
    (overlap,) = found["overlap"]
    assert overlap["segment_id"] in {
        uuid_to_base64(third.segment_id),
        uuid_to_base64(duplicate.segment_id),
    }
    assert f"offsets {third.start_offset}..{third.end_offset} " in overlap["message"]
    del tp


def _second_copy(
    writer: TierWriter, md: RemoteLogSegmentMetadata, scratch: Path
) -> RemoteLogSegmentMetadata:
    """Another copy of ``md``'s segment under a new id, recorded finished."""
    import dataclasses

    from tiered.api import IndexType, LogSegmentData

    scratch.mkdir()
    files = {}
    for index in (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.PRODUCER_SNAPSHOT):
        with writer.rsm.fetch_index(md, index) as f:
            files[index] = scratch / index.value
            files[index].write_bytes(f.read())
    with writer.rsm.fetch_log_segment(md, 0) as f:
        (scratch / "log").write_bytes(f.read())
    with writer.rsm.fetch_index(md, IndexType.LEADER_EPOCH) as f:
        epochs = f.read()
    copy = dataclasses.replace(
        md,
        remote_log_segment_id=RemoteLogSegmentId(md.topic_id_partition, uuid.uuid4()),
        state=S.COPY_SEGMENT_STARTED,
    )
    writer.rlmm.add_remote_log_segment_metadata(copy).result(30)
    writer.rsm.copy_log_segment_data(
        copy,
        LogSegmentData(scratch / "log", files[IndexType.OFFSET], files[IndexType.TIMESTAMP],
                       None, files[IndexType.PRODUCER_SNAPSHOT], epochs),
    )  # fmt: skip
    writer.rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(copy.remote_log_segment_id, 2, None,
                                       S.COPY_SEGMENT_FINISHED, 1)
    ).result(30)  # fmt: skip
    return copy


def test_a_diverged_branch_is_noted_not_a_finding(tmp_path: Path, capsys) -> None:
    props = local_rsm_props(tmp_path / "bucket")
    writer = TierWriter(tmp_path, props, tmp_path / "broker")
    try:
        branches = write_diverged(writer)
    finally:
        writer.close()
    config = tmp_path / "rsm.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    code = main(["metadata", "verify", "--log-dirs", str(tmp_path / "broker"),
                 "--rsm-config", str(config), "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc["findings"]
    noted = {n["message"].split()[1] for n in doc["notes"] if n["kind"] == "off_lineage"}
    assert noted == {uuid_to_base64(md.segment_id) for md in branches.diverged}
    # A's copies hold only epoch 0, which B's lineage has (up to 29): B's expiration keeps
    # them, as a later unclean election may need them (tiered.rlm_tasks.ExpirationTask).
    for note in doc["notes"]:
        assert note["message"].endswith(
            "the leader's expiration keeps it (a later unclean election may need it) until "
            "the log start offset passes it; tierlog restore leaves it out"
        ), note


def test_a_branch_of_a_truncated_epoch_is_noted_as_deleted_by_expiration(
    tmp_path: Path, capsys
) -> None:
    """B (epoch 1 from 30) copied first; A, elected uncleanly without knowing epoch 1, leads
    epoch 2 from 30 and copies from 30 on: B's copies from 30 hold epoch 1, which A's
    lineage (0@0, 2@30) truncated away, and A's expiration deletes them."""
    props = local_rsm_props(tmp_path / "bucket")
    writer = TierWriter(tmp_path, props, tmp_path / "broker")
    try:
        tp = TopicIdPartition(uuid.uuid4(), "truncated", 0)
        b = writer.branch(tp, "b")
        b.append(0, 6, "same")
        b.append(1, 8, "bbbb")
        writer.copy(tp, b)
        b_segments = writer.segments(tp)
        a = writer.branch(tp, "a")
        a.append(0, 6, "same")
        a.append(2, 8, "aaaa")
        writer.copy(tp, a)
        a.plog.close()
        b.plog.close()
        writer.manifest(tp.topic, tp.topic_id, 1, {"remote.storage.enable": "true"})
    finally:
        writer.close()
    truncated = {
        uuid_to_base64(md.segment_id) for md in b_segments if 1 in md.segment_leader_epochs
    }
    assert truncated
    config = tmp_path / "rsm.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    code = main(["metadata", "verify", "--log-dirs", str(tmp_path / "broker"),
                 "--rsm-config", str(config), "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc["findings"]
    notes = {n["message"].split()[1]: n["message"] for n in doc["notes"]}
    assert set(notes) == truncated, doc["notes"]
    for message in notes.values():
        assert message.endswith(
            "it holds epoch 1, which the lineage truncated away: the leader's expiration "
            "deletes it once the lineage's segments or local log hold the offsets it may "
            "serve; tierlog restore leaves it out"
        ), message


# -- the topic manifest -----------------------------------------------------------------------


def test_a_tiered_topic_without_its_manifest_is_named(tier: Tier, capsys) -> None:
    (manifest,) = tier.bucket.rglob("topic-manifest.json")
    manifest.unlink()
    code, doc, _ = verify(tier, capsys=capsys)
    assert code == 1
    (finding,) = doc["findings"]
    assert finding["kind"] == "topic_manifest" and finding["partition"] is None
    assert finding["key"] == str(manifest.relative_to(tier.bucket))


def test_a_manifest_with_too_few_partitions_is_named(tier: Tier, capsys) -> None:
    (path,) = tier.bucket.rglob("topic-manifest.json")
    doc = json.loads(path.read_bytes())
    doc["partitions"] = 1
    path.write_bytes(json.dumps(doc).encode())
    code, out, _ = verify(tier, capsys=capsys)
    assert code == 1
    assert [f["kind"] for f in out["findings"]] == ["topic_manifest"]
    assert "partition 1 has remote data" in out["findings"][0]["message"]


# -- usage --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--yes"],
        ["--partition", "-1"],
        ["--grace-period", "-5"],
        ["--threads", "0"],
    ],
)
def test_usage_errors_exit_2(tier: Tier, capsys, args: list[str]) -> None:
    code, _, err = verify(tier, *args, capsys=capsys, text=True)
    assert code == 2, err


def test_rsm_config_is_required_and_read(tier: Tier, capsys, tmp_path: Path) -> None:
    assert main(["metadata", "verify", "--log-dirs", str(tier.broker_dir)]) == 2
    missing = tmp_path / "nope.properties"
    code = main(["metadata", "verify", "--log-dirs", str(tier.broker_dir),
                 "--rsm-config", str(missing)])  # fmt: skip
    assert code == 1 and str(missing) in capsys.readouterr().err
    bad = tmp_path / "bad.properties"
    bad.write_text("remote.log.storage.manager.class.name=no.such.Plugin\n")
    code = main(["metadata", "verify", "--log-dirs", str(tier.broker_dir),
                 "--rsm-config", str(bad)])  # fmt: skip
    assert code == 1 and "no.such.Plugin" in capsys.readouterr().err


def test_an_encrypted_tier_is_audited_with_plaintext_sizes(tmp_path: Path, capsys) -> None:
    import base64

    key_file = tmp_path / "kek"
    key_file.write_text(base64.b64encode(os.urandom(32)).decode())
    props = {
        **local_rsm_props(tmp_path / "bucket"),
        "rsm.config.encryption.enabled": "true",
        "rsm.config.encryption.key.file": str(key_file),
    }
    writer = TierWriter(tmp_path, props, tmp_path / "broker")
    try:
        write_tiered_topic(writer, partitions=1)
    finally:
        writer.close()
    config = tmp_path / "rsm.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    for extra in ([], ["--deep"]):
        code = main(["metadata", "verify", "--log-dirs", str(tmp_path / "broker"),
                     "--rsm-config", str(config), "--json", *extra])  # fmt: skip
        doc = json.loads(capsys.readouterr().out)
        assert code == 0, doc["findings"]


def test_over_kafka_a_segment_deleted_during_the_audit_is_not_reported(
    tier: Tier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running broker's retention may delete a segment between the metadata read and the
    listing: its objects are then missing, but so is the segment, on a second read."""
    import argparse

    from core.log.log_manager import LogManagerConfig
    from rlmm.manager import BROKER_ID_KEY, NUM_PARTITIONS_KEY, TopicBasedRemoteLogMetadataManager
    from rlmm.replay import replay
    from tierlog import metadata_source
    from tierlog.bucket_audit import AuditOptions, audit
    from tierlog.offline_storage import OfflineBrokerStorage
    from tierlog.remote_storage_config import open_object_store_rsm
    from tierlog.verify_cmd import _drop_segments_gone_since

    def source() -> metadata_source.Source:
        reader = LogDirMetadataTopicReader([tier.broker_dir])
        return metadata_source.Source(reader, reader.partition_count(), None, lambda tp: None)

    before = source()
    replayed = replay(metadata_source.read_records(before), before.num_partitions)
    metadata = {tp: list(replayed.cache(tp).entries()) for tp in replayed.partitions()}
    oldest, kept = tier.topic.segments[0][0], tier.topic.segments[1][0]
    tier.path(tier.key(kept, ObjectSuffix.LOG)).unlink()  # really missing
    # Retention deletes the oldest segment of partition 0 meanwhile.
    storage = OfflineBrokerStorage(LogManagerConfig((tier.broker_dir,), node_id=1), {})
    rlmm = TopicBasedRemoteLogMetadataManager(storage.metadata_client())
    rsm = open_object_store_rsm(dict(local_rsm_props(tier.bucket)))
    try:
        rlmm.configure({NUM_PARTITIONS_KEY: str(METADATA_PARTITIONS), BROKER_ID_KEY: "1"})
        rlmm.on_partition_leadership_changes({tp_of(tier)}, set())
        assert rlmm.wait_ready(tp_of(tier), 30)
        for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
            if state == S.DELETE_SEGMENT_FINISHED:
                rsm.delete_log_segment_data(oldest)
            rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(oldest.remote_log_segment_id, 1, None, state, 1)
            ).result(30)
    finally:
        rlmm.close()
        storage.close()
    try:
        report = audit(rsm, metadata, AuditOptions(grace_ms=10**9))
    finally:
        rsm.close()
    missing = {f.segment_id for f in report.findings if f.kind.value == "missing_object"}
    assert missing == {oldest.segment_id, kept.segment_id}
    monkeypatch.setattr(metadata_source, "open_source", lambda args: source())
    _drop_segments_gone_since(report, argparse.Namespace(), lambda message: None)
    assert {f.segment_id for f in report.findings} == {kept.segment_id}
