"""The RemoteStorageManager contract, written once and run against every plugin.

A base class of tests in the manner of fsspec's ``tests/abstract`` and zarr's
``testing/store.py``. A plugin's test module subclasses ``RemoteStorageManagerContract`` and
supplies three fixtures:

* ``make_rsm``: a callable returning a new, configured plugin over the same (initially empty)
  storage, with ``KEY_PREFIX`` as ``rsm.config.key.prefix``; extra settings as keyword
  overrides ``make_rsm({"setting": "value"})``.
* ``backdoor``: a ``Backdoor`` reading and writing the storage without the plugin, by key.
* ``invalid_settings``: ``(configs, setting name the error must contain)`` pairs that
  ``configure`` must reject with ``RemoteStorageError``.

Segments are real files written by core's PartitionLog (``segment_files``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import crc32c
import pytest

from core.kafka_uuid import uuid_to_base64
from rsm_plugins.base import ObjectStoreRemoteStorageManager
from rsm_plugins.layout import SegmentManifest, TopicManifest, parse_key
from tiered.api import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
    from_kafka_end_position,
)

from .segment_files import SegmentFiles

KEY_PREFIX = "tierlog-test/"
SUFFIXES = ("log", "index", "timeindex", "snapshot", "leader-epoch-checkpoint", "manifest.json")
KEY_RE = re.compile(
    re.escape(KEY_PREFIX) + r"(?P<topic>[^/]+)-(?P<topic_id>[A-Za-z0-9_-]{22})/(?P<partition>\d+)/"
    r"(?P<offset>\d{20})-(?P<segment_id>[A-Za-z0-9_-]{22})\.(?P<suffix>[a-z.-]+)"
)

MakeRsm = Callable[..., RemoteStorageManager]


class Backdoor(Protocol):
    """Direct access to the plugin's storage, by full object key."""

    def read(self, key: str) -> bytes | None:
        """The object's bytes, or None if it does not exist."""

    def write(self, key: str, data: bytes) -> None:
        """Replace the object (to simulate corruption)."""

    def all_keys(self) -> set[str]:
        """Every object key in the storage."""


def _crc(data: bytes) -> str:
    return f"{crc32c.crc32c(data):08x}"


class RemoteStorageManagerContract:
    """Tests every RSM plugin must pass. Subclasses provide the fixtures named above."""

    # -- fixtures shared by the cases ---------------------------------------------------------

    @pytest.fixture
    def rsm(self, make_rsm: MakeRsm) -> Iterator[RemoteStorageManager]:
        plugin = make_rsm()
        yield plugin
        plugin.close()

    @pytest.fixture
    def tp(self) -> TopicIdPartition:
        return TopicIdPartition(uuid.uuid4(), "orders", 3)

    @pytest.fixture
    def copied(
        self, rsm: RemoteStorageManager, tp: TopicIdPartition, segments: list[SegmentFiles]
    ) -> tuple[RemoteLogSegmentMetadata, SegmentFiles]:
        """The second segment (two leader epochs, no txn index), copied."""
        seg = segments[1]
        md = seg.metadata(tp)
        assert rsm.copy_log_segment_data(md, seg.data) is None
        return md, seg

    @staticmethod
    def segment_keys(backdoor: Backdoor, md: RemoteLogSegmentMetadata) -> set[str]:
        marker = f"-{uuid_to_base64(md.segment_id)}."
        return {k for k in backdoor.all_keys() if marker in k}

    # -- copy and fetch -----------------------------------------------------------------------

    def test_copy_then_fetch_whole_log(self, rsm, copied) -> None:
        md, seg = copied
        with rsm.fetch_log_segment(md, 0) as f:
            assert f.read() == seg.log_bytes()
        with rsm.fetch_log_segment(md, 0, seg.size) as f:
            assert f.read() == seg.log_bytes()

    @pytest.mark.parametrize(
        ("start", "end"),
        [
            (0, 1),
            (1, 2),
            (0, 61),  # one batch header
            (100, 5000),
            ("last", None),  # the last byte, to the end
            ("last", "size"),
            (17, None),
            (5000, "size"),
            (0, "size+1000"),  # past the end: fewer bytes, no error
            (123, 123),  # empty range
            ("size", None),  # at the end: nothing left
            ("size", "size+10"),
        ],
    )
    def test_ranged_fetch_is_half_open(self, rsm, copied, start, end) -> None:
        md, seg = copied
        data = seg.log_bytes()

        def resolve(v: int | str | None) -> int | None:
            if not isinstance(v, str):
                return v
            return {"last": seg.size - 1, "size": seg.size, "size+10": seg.size + 10}.get(
                v, seg.size + 1000
            )

        s, e = resolve(start), resolve(end)
        assert s is not None
        with rsm.fetch_log_segment(md, s, e) as f:
            assert f.read() == data[s:e]

    def test_kafka_inclusive_end_converts_in_one_place(self, rsm, copied) -> None:
        md, seg = copied
        end_inclusive = 999
        with rsm.fetch_log_segment(md, 10, from_kafka_end_position(end_inclusive)) as f:
            got = f.read()
        assert got == seg.log_bytes()[10 : end_inclusive + 1]
        assert len(got) == end_inclusive - 10 + 1

    def test_small_reads_of_a_range_add_up(self, rsm, copied) -> None:
        md, seg = copied
        parts = []
        with rsm.fetch_log_segment(md, 300, 4300) as f:
            while chunk := f.read(333):
                parts.append(chunk)
        assert b"".join(parts) == seg.log_bytes()[300:4300]

    def test_invalid_positions_raise_value_error(self, rsm, copied) -> None:
        md, _ = copied
        with pytest.raises(ValueError, match="negative"):
            rsm.fetch_log_segment(md, -1)
        with pytest.raises(ValueError, match="below"):
            rsm.fetch_log_segment(md, 10, 9)

    @pytest.mark.parametrize(
        "index_type",
        [
            IndexType.OFFSET,
            IndexType.TIMESTAMP,
            IndexType.PRODUCER_SNAPSHOT,
            IndexType.LEADER_EPOCH,
        ],
    )
    def test_fetch_index_returns_the_copied_bytes(self, rsm, copied, index_type) -> None:
        md, seg = copied
        expected = {
            IndexType.OFFSET: seg.data.offset_index.read_bytes(),
            IndexType.TIMESTAMP: seg.data.time_index.read_bytes(),
            IndexType.PRODUCER_SNAPSHOT: seg.data.producer_snapshot_index.read_bytes(),
            IndexType.LEADER_EPOCH: seg.data.leader_epoch_index,
        }[index_type]
        with rsm.fetch_index(md, index_type) as f:
            assert f.read() == expected

    def test_transaction_index_is_copied_when_present(self, rsm, tp, segments) -> None:
        seg = segments[0]
        assert seg.data.transaction_index is not None
        md = seg.metadata(tp)
        rsm.copy_log_segment_data(md, seg.data)
        with rsm.fetch_index(md, IndexType.TRANSACTION) as f:
            assert f.read() == seg.data.transaction_index.read_bytes()

    def test_missing_transaction_index_raises_not_found(self, rsm, copied) -> None:
        md, seg = copied
        assert seg.data.transaction_index is None
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_index(md, IndexType.TRANSACTION)

    def test_copy_is_idempotent(self, rsm, copied, backdoor) -> None:
        md, seg = copied
        keys = self.segment_keys(backdoor, md)
        manifest = backdoor.read(next(k for k in keys if k.endswith(".manifest.json")))
        assert rsm.copy_log_segment_data(md, seg.data) is None
        assert self.segment_keys(backdoor, md) == keys
        assert backdoor.read(next(k for k in keys if k.endswith(".manifest.json"))) == manifest
        with rsm.fetch_log_segment(md, 0) as f:
            assert f.read() == seg.log_bytes()

    def test_segments_copied_together_are_each_complete(self, rsm, tp, segments, backdoor):
        """``copy_log_segments_data`` (the copy task's call) stores every segment as
        ``copy_log_segment_data`` would, manifest included."""
        mds = [seg.metadata(tp) for seg in segments]
        assert rsm.copy_log_segments_data(
            [(md, seg.data) for md, seg in zip(mds, segments, strict=True)]
        ) == [None] * len(segments)
        for md, seg in zip(mds, segments, strict=True):
            keys = self.segment_keys(backdoor, md)
            assert any(k.endswith(".manifest.json") for k in keys)
            with rsm.fetch_log_segment(md, 0) as f:
                assert f.read() == seg.log_bytes()
            with rsm.fetch_index(md, IndexType.OFFSET) as f:
                assert f.read() == seg.data.offset_index.read_bytes()

    def test_segments_copied_together_store_no_manifest_when_one_fails(
        self, rsm, tp, segments, backdoor, tmp_path
    ) -> None:
        """A batch whose second segment cannot be read completes none: no manifest is
        stored (the caller then deletes what the batch left)."""
        mds = [seg.metadata(tp) for seg in segments[:2]]
        broken = dataclasses.replace(segments[1].data, time_index=tmp_path / "gone.timeindex")
        with pytest.raises(RemoteStorageError):
            rsm.copy_log_segments_data([(mds[0], segments[0].data), (mds[1], broken)])
        for md in mds:
            keys = self.segment_keys(backdoor, md)
            assert not any(k.endswith(".manifest.json") for k in keys)
            with pytest.raises(RemoteResourceNotFoundError):
                rsm.fetch_index(md, IndexType.OFFSET)

    def test_another_instance_reads_what_was_copied(self, make_rsm, copied) -> None:
        md, seg = copied
        other = make_rsm()
        try:
            with other.fetch_log_segment(md, 0) as f:
                assert f.read() == seg.log_bytes()
            with other.fetch_index(md, IndexType.OFFSET) as f:
                assert f.read() == seg.data.offset_index.read_bytes()
        finally:
            other.close()

    # -- missing and deleted --------------------------------------------------------------------

    def test_missing_segment_raises_not_found(self, rsm, tp, segments) -> None:
        md = segments[1].metadata(tp)
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(md, 0).read()
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(md, 10, 20).read()
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(md, 10, 10).read()
        for index_type in IndexType:
            with pytest.raises(RemoteResourceNotFoundError):
                rsm.fetch_index(md, index_type)

    def test_delete_then_fetch_raises_not_found(self, rsm, copied, backdoor) -> None:
        md, _ = copied
        rsm.delete_log_segment_data(md)
        assert self.segment_keys(backdoor, md) == set()
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(md, 0, 100).read()
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_index(md, IndexType.OFFSET)

    def test_delete_is_idempotent_and_leaves_other_segments(
        self, rsm, tp, segments, backdoor
    ) -> None:
        kept, gone = segments[0].metadata(tp), segments[2].metadata(tp)
        rsm.copy_log_segment_data(kept, segments[0].data)
        rsm.copy_log_segment_data(gone, segments[2].data)
        rsm.delete_log_segment_data(gone)
        rsm.delete_log_segment_data(gone)
        rsm.delete_log_segment_data(segments[1].metadata(tp))  # never copied
        assert self.segment_keys(backdoor, gone) == set()
        assert len(self.segment_keys(backdoor, kept)) == 7  # six objects + txnindex
        with rsm.fetch_log_segment(kept, 0) as f:
            assert f.read() == segments[0].log_bytes()

    def test_delete_removes_a_partial_copy(self, rsm, copied, backdoor) -> None:
        md, _ = copied
        manifest = next(k for k in self.segment_keys(backdoor, md) if k.endswith(".json"))
        backdoor.write(manifest, b"")  # then remove it through the plugin below
        rsm.delete_log_segment_data(md)
        assert self.segment_keys(backdoor, md) == set()

    # -- layout and manifest --------------------------------------------------------------------

    def test_object_keys_follow_the_layout(self, copied, tp, backdoor) -> None:
        md, _ = copied
        keys = self.segment_keys(backdoor, md)
        suffixes = set()
        for key in keys:
            m = KEY_RE.fullmatch(key)
            assert m is not None, key
            assert m["topic"] == tp.topic
            assert m["topic_id"] == uuid_to_base64(tp.topic_id)
            assert int(m["partition"]) == tp.partition
            assert int(m["offset"]) == md.start_offset
            assert m["segment_id"] == uuid_to_base64(md.segment_id)
            suffixes.add(m["suffix"])
        assert suffixes == set(SUFFIXES)

    def test_manifest_describes_the_segment_and_every_object(self, copied, backdoor) -> None:
        md, _ = copied
        keys = self.segment_keys(backdoor, md)
        manifest_key = next(k for k in keys if k.endswith(".manifest.json"))
        raw = backdoor.read(manifest_key)
        assert raw is not None
        doc = json.loads(raw)
        assert doc["version"] == 1
        assert doc["checksumAlgorithm"] == "crc32c"
        seg = doc["segment"]
        assert seg["topicId"] == uuid_to_base64(md.topic_id_partition.topic_id)
        assert seg["segmentId"] == uuid_to_base64(md.segment_id)
        assert (seg["startOffset"], seg["endOffset"]) == (md.start_offset, md.end_offset)
        assert seg["segmentSizeInBytes"] == md.segment_size_in_bytes
        assert seg["segmentLeaderEpochs"] == {
            str(e): o for e, o in md.segment_leader_epochs.items()
        }
        assert set(doc["objects"]) == set(SUFFIXES) - {"manifest.json"}
        folder = manifest_key.rsplit("/", 1)[0] + "/"
        for entry in doc["objects"].values():
            data = backdoor.read(folder + entry["key"])
            assert data is not None, entry
            assert entry["size"] == len(data)
            assert entry["crc32c"] == _crc(data)
        assert SegmentManifest.from_json(raw).metadata == md

    # -- integrity ------------------------------------------------------------------------------

    def _corrupt(self, backdoor: Backdoor, md: RemoteLogSegmentMetadata, suffix: str) -> bytes:
        key = next(k for k in self.segment_keys(backdoor, md) if k.endswith("." + suffix))
        data = backdoor.read(key)
        assert data
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0xFF
        backdoor.write(key, bytes(flipped))
        return data

    @pytest.mark.parametrize(
        "suffix", ["index", "timeindex", "snapshot", "leader-epoch-checkpoint"]
    )
    def test_corrupted_index_is_never_served(self, rsm, copied, backdoor, suffix) -> None:
        md, _ = copied
        self._corrupt(backdoor, md, suffix)
        index_type = IndexType(suffix)
        with pytest.raises(RemoteStorageError) as info:
            rsm.fetch_index(md, index_type)
        assert not isinstance(info.value, RemoteResourceNotFoundError)

    def test_truncated_index_is_never_served(self, rsm, copied, backdoor) -> None:
        md, _ = copied
        key = next(k for k in self.segment_keys(backdoor, md) if k.endswith(".index"))
        backdoor.write(key, (backdoor.read(key) or b"")[:-8])
        with pytest.raises(RemoteStorageError, match="manifest"):
            rsm.fetch_index(md, IndexType.OFFSET)

    def test_corrupted_log_fails_a_whole_read(self, rsm, copied, backdoor) -> None:
        md, _ = copied
        self._corrupt(backdoor, md, "log")
        with pytest.raises(RemoteStorageError), rsm.fetch_log_segment(md, 0) as f:
            f.read()

    @pytest.mark.parametrize("damage", ["flipped", "truncated"])
    def test_a_damaged_log_fails_a_whole_read_into_a_buffer(
        self, rsm, copied, backdoor, damage
    ) -> None:
        # How the archive reader reads: readinto a reused buffer (no copy of each read).
        md, _ = copied
        if damage == "flipped":
            self._corrupt(backdoor, md, "log")
        else:
            key = next(k for k in self.segment_keys(backdoor, md) if k.endswith(".log"))
            backdoor.write(key, (backdoor.read(key) or b"")[:-10])
        buffer = bytearray(4096)
        with pytest.raises(RemoteStorageError), rsm.fetch_log_segment(md, 0) as f:
            while f.readinto(buffer):
                pass

    def test_corrupted_manifest_is_an_error_not_missing(self, make_rsm, copied, backdoor) -> None:
        md, _ = copied
        key = next(k for k in self.segment_keys(backdoor, md) if k.endswith(".manifest.json"))
        backdoor.write(key, b"{not json")
        fresh = make_rsm()  # no cached manifest
        try:
            with pytest.raises(RemoteStorageError) as info:
                fresh.fetch_index(md, IndexType.OFFSET)
            assert not isinstance(info.value, RemoteResourceNotFoundError)
        finally:
            fresh.close()

    # -- listing and topic manifests (what `tierlog metadata verify` and `restore` use) -------

    def test_listing_gives_every_object_with_its_size_and_time(self, rsm, copied) -> None:
        md, seg = copied
        assert isinstance(rsm, ObjectStoreRemoteStorageManager)
        now_ms = time.time_ns() // 1_000_000
        manifest = rsm.manifest(md)
        listed = {
            info.key: info
            for info in rsm.store.list_objects(KEY_PREFIX + md.topic_id_partition.topic)
        }
        names = {k.rsplit("/", 1)[-1]: info for k, info in listed.items()}
        assert set(names) == {e.key for e in manifest.objects.values()} | {
            next(n for n in names if n.endswith(".manifest.json"))
        }
        for entry in manifest.objects.values():
            info = names[entry.key]
            assert info.size == entry.size  # the size readers see, encrypted or not
            assert info.last_modified_ms is not None
            # Written moments ago (remote clocks are coarse, S3's in whole seconds).
            assert abs(info.last_modified_ms - now_ms) < 60_000, info
        assert names[f"{md.start_offset:020d}-{uuid_to_base64(md.segment_id)}.log"].size == (
            seg.size
        )
        for key in listed:
            parsed = parse_key(KEY_PREFIX, key)
            assert parsed is not None and parsed.segment_id == md.segment_id
            assert parsed.partition == md.topic_id_partition.partition

    def test_listing_by_prefix_leaves_other_topics_out(self, rsm, copied, segments) -> None:
        other = TopicIdPartition(uuid.uuid4(), "orders-eu", 0)
        rsm.copy_log_segment_data(segments[0].metadata(other), segments[0].data)
        prefix = KEY_PREFIX + "orders-eu-"
        keys = [info.key for info in rsm.store.list_objects(prefix)]
        assert keys and all(k.startswith(prefix) for k in keys)
        assert all(parse_key(KEY_PREFIX, k).topic == "orders-eu" for k in keys)  # type: ignore[union-attr]

    def test_topic_manifest_round_trips_and_is_deleted(self, rsm, tp, backdoor) -> None:
        assert rsm.read_topic_manifest(tp.topic, tp.topic_id) is None
        manifest = TopicManifest(tp.topic_id, tp.topic, 6, {"retention.ms": "-1"}, 1234, 1)
        rsm.write_topic_manifest(manifest)
        assert rsm.read_topic_manifest(tp.topic, tp.topic_id) == manifest
        key = next(k for k in backdoor.all_keys() if k.endswith("/topic-manifest.json"))
        assert key == f"{KEY_PREFIX}{tp.topic}-{uuid_to_base64(tp.topic_id)}/topic-manifest.json"
        assert json.loads(backdoor.read(key) or b"")["partitions"] == 6  # plain JSON
        parsed = parse_key(KEY_PREFIX, key)
        assert parsed is not None and parsed.is_topic_manifest and parsed.topic_id == tp.topic_id
        rsm.delete_topic_manifest(tp.topic, tp.topic_id)
        rsm.delete_topic_manifest(tp.topic, tp.topic_id)  # idempotent
        assert rsm.read_topic_manifest(tp.topic, tp.topic_id) is None

    # -- concurrency ----------------------------------------------------------------------------

    def test_concurrent_copies_of_different_segments(self, rsm, segments, backdoor) -> None:
        jobs = [
            (segments[i % len(segments)].metadata(TopicIdPartition(uuid.uuid4(), "c", i % 4)), i)
            for i in range(12)
        ]
        barrier = threading.Barrier(6)

        def copy(job: tuple[RemoteLogSegmentMetadata, int]) -> None:
            md, i = job
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=5)
            rsm.copy_log_segment_data(md, segments[i % len(segments)].data)

        with ThreadPoolExecutor(6) as pool:
            list(pool.map(copy, jobs))
        for md, i in jobs:
            with rsm.fetch_log_segment(md, 0) as f:
                assert f.read() == segments[i % len(segments)].log_bytes()
            assert len(self.segment_keys(backdoor, md)) == 7 if i % len(segments) == 0 else 6

    # -- configuration --------------------------------------------------------------------------

    def test_invalid_settings_are_rejected_by_name(
        self,
        rsm: RemoteStorageManager,
        invalid_settings: list[tuple[Mapping[str, str], str]],
    ) -> None:
        assert invalid_settings, "each plugin lists at least one invalid configuration"
        for configs, name in invalid_settings:
            plugin = type(rsm)()
            with pytest.raises(RemoteStorageError, match=re.escape(name)):
                plugin.configure(configs)

    def test_unconfigured_plugin_raises(self, rsm, tp, segments) -> None:
        plugin = type(rsm)()
        with pytest.raises(RemoteStorageError, match="not configured"):
            plugin.fetch_log_segment(segments[0].metadata(tp), 0)
