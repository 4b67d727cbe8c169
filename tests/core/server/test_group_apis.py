"""FindCoordinator, OffsetCommit and OffsetFetch, and the offset store behind them.

Handlers are driven the way a client drives them: the request is framed and decoded by the
protocol codec, the response encoded and decoded again.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from core.errors import CorruptCheckpointError
from core.records.record import decode_records
from core.server.api_keys import ApiKey
from core.server.coordinator_records import partition_for
from core.server.group_apis import OFFSET_METADATA_MAX_BYTES
from core.server.group_offsets import OFFSETS_FILE, CommittedOffset, GroupOffsetStore
from core.server.offsets_topic import OFFSETS_TOPIC

from .fake_broker import FakeBroker, call, schema
from .offsets_storage import OffsetsStorage


# -- the store alone --------------------------------------------------------------------------
@pytest.fixture
def storage(tmp_path: Path):
    opened = [OffsetsStorage(tmp_path)]
    yield opened
    opened[-1].close()


def reopen(storage: list[OffsetsStorage]) -> GroupOffsetStore:
    storage.append(storage[-1].reopen())
    return storage[-1].store()


def test_store_commit_fetch_and_reload(storage) -> None:
    store = storage[0].store()
    assert store.fetch("g", "t", 0) is None and not store.has_group("g")
    version = store.commit(
        "g", {("t", 0): CommittedOffset(5, 2, "m", 1), ("t", 1): CommittedOffset(9)}
    )
    store.commit("g", {("t", 0): CommittedOffset(6, 2, "n", 2)})
    store.commit("h", {("u", 3): CommittedOffset(1)})
    ends = [
        storage[0].replica_manager.partition(OFFSETS_TOPIC, i).log.log_end_offset for i in range(3)
    ]
    assert ends == [0, 0, 0]  # nothing written before a flush
    store.flush(version)
    store.flush()
    reloaded = reopen(storage)
    assert reloaded.groups() == ["g", "h"]
    assert reloaded.group_offsets("g") == {
        ("t", 0): CommittedOffset(6, 2, "n", 2),
        ("t", 1): CommittedOffset(9),
    }
    assert reloaded.fetch_many("g", [("t", 1), ("t", 7)]) == {
        ("t", 1): CommittedOffset(9),
        ("t", 7): None,
    }


def test_commits_are_kafka_records_in_the_groups_partition(storage) -> None:
    store = storage[0].store()
    store.commit("g", {("t", 0): CommittedOffset(5, 2, "m", 1)})
    store.flush()
    index = partition_for("g", 3)
    plog = storage[0].replica_manager.partition(OFFSETS_TOPIC, index).log
    (segment,) = plog.segments()
    ((_, header),) = list(segment.log.scan_batches(0))
    (record,) = decode_records(header)
    # OffsetCommitKey v1: group, topic, partition; OffsetCommitValue v3.
    assert record.key == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00"
    assert record.value == (
        b"\x00\x03"
        + (5).to_bytes(8, "big")
        + (2).to_bytes(4, "big")
        + b"\x00\x01m"
        + (1).to_bytes(8, "big")
    )


def test_store_flush_is_skipped_when_already_durable(storage) -> None:
    store = storage[0].store()
    v = store.commit("g", {("t", 0): CommittedOffset(1)})
    store.flush(v)
    plog = storage[0].replica_manager.partition(OFFSETS_TOPIC, partition_for("g", 3)).log
    end = plog.log_end_offset
    store.flush(v)  # an older or equal version: nothing appended again
    assert plog.log_end_offset == end == 1


def test_store_delete_topic_writes_tombstones_and_forgets_empty_groups(storage) -> None:
    store = storage[0].store()
    store.commit("g", {("t", 0): CommittedOffset(1), ("u", 0): CommittedOffset(2)})
    store.commit("h", {("t", 1): CommittedOffset(3)})
    store.flush(store.delete_topic("t"))
    reloaded = reopen(storage)
    assert reloaded.group_offsets("g") == {("u", 0): CommittedOffset(2)}
    assert not reloaded.has_group("h")


def test_store_imports_the_json_file_of_an_older_tierlog_once(storage, tmp_path: Path) -> None:
    (tmp_path / OFFSETS_FILE).write_text(
        json.dumps({"version": 1, "groups": {"g": {"t": {"0": {"offset": 7, "leader_epoch": 1}}}}})
    )
    store = storage[0].store(legacy=True)
    assert store.fetch("g", "t", 0) == CommittedOffset(7, 1)
    assert not (tmp_path / OFFSETS_FILE).exists()
    assert (tmp_path / (OFFSETS_FILE + ".migrated")).exists()
    assert reopen(storage).fetch("g", "t", 0) == CommittedOffset(7, 1)  # now in the topic


def test_store_refuses_a_corrupt_legacy_file(storage, tmp_path: Path) -> None:
    (tmp_path / OFFSETS_FILE).write_text(
        json.dumps({"version": 1, "groups": {"g": {"t": {"0": {}}}}})
    )
    with pytest.raises(CorruptCheckpointError, match=OFFSETS_FILE):
        storage[0].store(legacy=True)
    (tmp_path / OFFSETS_FILE).write_text("{not json")
    with pytest.raises(CorruptCheckpointError):
        storage[0].store(legacy=True)


# -- handlers ---------------------------------------------------------------------------------
def group_broker(directory: Path) -> FakeBroker:
    """Node 3, advertised as broker.example:9094, with a topic ``t`` of two partitions."""
    broker = FakeBroker(directory, {"node.id": "3"}, endpoint=("broker.example", 9094))
    if broker.topics.get("t") is None:
        broker.make_topic("t", 2)
    return broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = group_broker(tmp_path)
    yield b
    b.close()


# -- FindCoordinator --------------------------------------------------------------------------
def test_find_coordinator_v0_group(broker: FakeBroker) -> None:
    s = schema(ApiKey.FIND_COORDINATOR, 0)
    r = call(broker, ApiKey.FIND_COORDINATOR, 0, s.FindCoordinatorRequest(key="g"))
    assert (r.error_code, r.node_id, r.host, r.port) == (ErrorCode.none, 3, "broker.example", 9094)


def test_find_coordinator_v3_transaction_and_invalid_type(broker: FakeBroker) -> None:
    s = schema(ApiKey.FIND_COORDINATOR, 3)
    txn = call(broker, ApiKey.FIND_COORDINATOR, 3, s.FindCoordinatorRequest(key="x", key_type=1))
    # This broker coordinates every transactional id (it leads __transaction_state).
    assert (txn.error_code, txn.node_id, txn.host, txn.port) == (
        ErrorCode.none,
        3,
        "broker.example",
        9094,
    )
    bad = call(broker, ApiKey.FIND_COORDINATOR, 3, s.FindCoordinatorRequest(key="x", key_type=5))
    assert bad.error_code == ErrorCode.invalid_request


@pytest.mark.parametrize("version", [4, 5])
def test_find_coordinator_batched(broker: FakeBroker, version: int) -> None:
    s = schema(ApiKey.FIND_COORDINATOR, version)
    request = s.FindCoordinatorRequest(key_type=0, coordinator_keys=("a", "b"))
    r = call(broker, ApiKey.FIND_COORDINATOR, version, request)
    assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in r.coordinators] == [
        ("a", ErrorCode.none, 3, "broker.example", 9094),
        ("b", ErrorCode.none, 3, "broker.example", 9094),
    ]


# -- OffsetCommit / OffsetFetch ---------------------------------------------------------------
def commit(
    broker: Any,
    version: int,
    offsets: Mapping[tuple[str, int], tuple[int, int, str | None]],
    *,
    group: str = "g",
    generation: int = -1,
    member: str = "",
) -> dict[tuple[str, int], ErrorCode]:
    s = schema(ApiKey.OFFSET_COMMIT, version)
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), (offset, epoch, metadata) in offsets.items():
        fields = {"committed_leader_epoch": epoch} if version >= 6 else {}
        by_topic.setdefault(topic, []).append(
            s.OffsetCommitRequestPartition(
                partition_index=index,
                committed_offset=offset,
                committed_metadata=metadata,
                **fields,
            )
        )
    extra: dict[str, Any] = {}
    if version <= 4:
        extra["retention_time"] = datetime.timedelta(milliseconds=-1)
    request = s.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        topics=tuple(
            s.OffsetCommitRequestTopic(name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
        **extra,
    )
    response = call(broker, ApiKey.OFFSET_COMMIT, version, request)
    return {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


def fetch(
    broker: Any, version: int, topics: Mapping[str, list[int]] | None, group: str = "g"
) -> dict[tuple[str, int], tuple[int, int, str | None]]:
    s = schema(ApiKey.OFFSET_FETCH, version)
    if version >= 8:
        wanted = (
            None
            if topics is None
            else tuple(
                s.OffsetFetchRequestTopics(name=n, partition_indexes=tuple(p))
                for n, p in topics.items()
            )
        )
        request = s.OffsetFetchRequest(
            groups=(s.OffsetFetchRequestGroup(group_id=group, topics=wanted),), require_stable=True
        )
        (result,) = call(broker, ApiKey.OFFSET_FETCH, version, request).groups
        assert (result.group_id, result.error_code) == (group, ErrorCode.none)
    else:
        assert topics is not None or version >= 2
        wanted = (
            None
            if topics is None
            else tuple(
                s.OffsetFetchRequestTopic(name=n, partition_indexes=tuple(p))
                for n, p in topics.items()
            )
        )
        request = s.OffsetFetchRequest(group_id=group, topics=wanted)
        result = call(broker, ApiKey.OFFSET_FETCH, version, request)
    out = {}
    for t in result.topics:
        for p in t.partitions:
            assert p.error_code == ErrorCode.none
            out[(t.name, p.partition_index)] = (
                p.committed_offset,
                getattr(p, "committed_leader_epoch", -1),
                p.metadata,
            )
    return out


@pytest.mark.parametrize(("commit_version", "fetch_version"), [(2, 1), (5, 4), (9, 7), (9, 9)])
def test_commit_then_fetch(broker: FakeBroker, commit_version: int, fetch_version: int) -> None:
    codes = commit(broker, commit_version, {("t", 0): (42, 3, "meta"), ("t", 1): (7, 3, None)})
    assert codes == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    got = fetch(broker, fetch_version, {"t": [0, 1], "other": [0]})
    epoch = 3 if commit_version >= 6 and fetch_version >= 5 else -1
    assert got == {
        ("t", 0): (42, epoch, "meta"),
        ("t", 1): (7, epoch, ""),
        ("other", 0): (-1, -1, ""),
    }


@pytest.mark.parametrize("version", [2, 7, 8])
def test_fetch_all_committed_partitions(broker: FakeBroker, version: int) -> None:
    commit(broker, 9, {("t", 1): (5, -1, ""), ("t", 0): (4, -1, "")})
    assert fetch(broker, version, None) == {("t", 0): (4, -1, ""), ("t", 1): (5, -1, "")}
    assert fetch(broker, version, None, group="nobody") == {}


def test_commit_errors(broker: FakeBroker) -> None:
    longest = "x" * OFFSET_METADATA_MAX_BYTES
    codes = commit(
        broker,
        8,
        {
            ("t", 0): (1, -1, longest + "x"),
            ("t", 1): (2, -1, longest),
            ("t", 9): (1, -1, ""),
            ("nope", 0): (1, -1, ""),
        },
    )
    assert codes == {
        ("t", 0): ErrorCode.offset_metadata_too_large,
        ("t", 1): ErrorCode.none,
        ("t", 9): ErrorCode.unknown_topic_or_partition,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert fetch(broker, 8, {"t": [0, 1]}) == {("t", 0): (-1, -1, ""), ("t", 1): (2, -1, longest)}


def test_commit_with_a_generation_is_refused(broker: FakeBroker) -> None:
    # Unknown group: ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND from v9 (KIP-848).
    assert commit(broker, 8, {("t", 0): (1, -1, "")}, group="new", generation=1, member="m") == {
        ("t", 0): ErrorCode.illegal_generation
    }
    assert commit(broker, 9, {("t", 0): (1, -1, "")}, group="new", generation=1) == {
        ("t", 0): ErrorCode.group_id_not_found
    }
    # A known simple group has no members.
    commit(broker, 9, {("t", 0): (1, -1, "")}, group="simple")
    assert commit(broker, 2, {("t", 0): (2, -1, "")}, group="simple", generation=0) == {
        ("t", 0): ErrorCode.unknown_member_id
    }
    assert fetch(broker, 9, {"t": [0]}, group="simple") == {("t", 0): (1, -1, "")}
    assert fetch(broker, 9, {"t": [0]}, group="new") == {("t", 0): (-1, -1, "")}


def test_commits_survive_a_restart_in_the_offsets_topic(tmp_path: Path) -> None:
    broker = group_broker(tmp_path)
    commit(broker, 9, {("t", 0): (11, 2, "m")})
    restarted = broker.restart()  # a new broker object over the same dirs
    try:
        assert fetch(restarted, 9, {"t": [0]}) == {("t", 0): (11, 2, "m")}
    finally:
        restarted.close()
