"""The RemoteLogMetadataManager contract, written once and run against every implementation.

The docstrings of ``tiered.api.RemoteLogMetadataManager`` as tests, in the manner of
``tests/rsm_plugins/contract.py``. An implementation's test module subclasses
``RemoteLogMetadataManagerContract`` and supplies one fixture:

* ``make_rlmm``: a callable returning a new, configured manager over the same (initially
  empty) metadata storage; the test closes what it makes.

Each test uses partitions of a fresh topic id, so the storage may be shared between tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import pytest

from tiered.api import (
    InvalidStateTransitionError,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TopicIdPartition,
)
from tiered.api import RemoteLogSegmentState as S
from tiered.api import RemotePartitionDeleteState as P

MakeRlmm = Callable[[], RemoteLogMetadataManager]
TIMEOUT_S = 15.0


def wait_ready(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not rlmm.is_ready(tp):
        assert time.monotonic() < deadline, f"{tp} never became ready"
        time.sleep(0.01)


def load(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> RemoteLogMetadataManager:
    rlmm.on_partition_leadership_changes({tp}, set())
    wait_ready(rlmm, tp)
    return rlmm


def segment(
    tp: TopicIdPartition, start: int, end: int, epochs: dict[int, int] | None = None, size=100
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tp),
        start,
        end,
        max_timestamp_ms=1_700_000_000_000 + start,
        broker_id=1,
        event_timestamp_ms=1,
        segment_size_in_bytes=size,
        segment_leader_epochs=epochs or {0: start},
    )


def update(md: RemoteLogSegmentMetadata, state: S, custom: bytes | None = None):
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2, custom, state, 1)


def done(future: Future[None]) -> None:
    future.result(TIMEOUT_S)


def states(rlmm: RemoteLogMetadataManager, tp: TopicIdPartition) -> dict[uuid.UUID, S]:
    return {md.segment_id: md.state for md in rlmm.list_remote_log_segments(tp)}


class RemoteLogMetadataManagerContract:
    """Tests every RLMM must pass. Subclasses provide ``make_rlmm``."""

    @pytest.fixture
    def rlmm(self, make_rlmm: MakeRlmm) -> Iterator[RemoteLogMetadataManager]:
        manager = make_rlmm()
        yield manager
        manager.close()

    @pytest.fixture
    def tp(self) -> TopicIdPartition:
        return TopicIdPartition(uuid.uuid4(), "orders", 3)

    @pytest.fixture
    def loaded(self, rlmm, tp) -> RemoteLogMetadataManager:
        return load(rlmm, tp)

    def add(self, rlmm, md: RemoteLogSegmentMetadata, *later: S) -> RemoteLogSegmentMetadata:
        done(rlmm.add_remote_log_segment_metadata(md))
        for state in later:
            done(rlmm.update_remote_log_segment_metadata(update(md, state)))
        return md

    # -- add ------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "state", [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED]
    )
    def test_add_takes_only_copy_segment_started(self, loaded, tp, state) -> None:
        md = dataclasses.replace(segment(tp, 0, 9), state=state)
        with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
            loaded.add_remote_log_segment_metadata(md)
        assert states(loaded, tp) == {}

    def test_a_started_copy_is_listed_but_never_served(self, loaded, tp) -> None:
        md = self.add(loaded, segment(tp, 0, 9))
        assert states(loaded, tp) == {md.segment_id: S.COPY_SEGMENT_STARTED}
        assert loaded.remote_log_segment_metadata(tp, 0, 5) is None
        assert loaded.highest_offset_for_epoch(tp, 0) is None
        assert loaded.remote_log_size(tp, 0) == 0

    def test_a_finished_copy_is_served_with_its_metadata(self, loaded, tp) -> None:
        md = self.add(loaded, segment(tp, 0, 9))
        done(loaded.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED, b"c")))
        found = loaded.remote_log_segment_metadata(tp, 0, 5)
        assert found is not None
        assert found.remote_log_segment_id == md.remote_log_segment_id
        assert (found.start_offset, found.end_offset) == (0, 9)
        assert found.state == S.COPY_SEGMENT_FINISHED
        assert found.custom_metadata == b"c"
        assert found.segment_size_in_bytes == md.segment_size_in_bytes
        assert dict(found.segment_leader_epochs) == {0: 0}
        assert loaded.highest_offset_for_epoch(tp, 0) == 9
        assert loaded.remote_log_size(tp, 0) == 100

    # -- update ---------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "path",
        [
            (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
            (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),  # a failed copy
        ],
        ids=["copied then deleted", "failed copy deleted"],
    )
    def test_valid_transitions(self, loaded, tp, path) -> None:
        md = self.add(loaded, segment(tp, 0, 9))
        for state in path:
            done(loaded.update_remote_log_segment_metadata(update(md, state)))
            if state == S.DELETE_SEGMENT_FINISHED:
                assert states(loaded, tp) == {}  # a deleted segment is forgotten
            else:
                assert states(loaded, tp) == {md.segment_id: state}
            served = loaded.remote_log_segment_metadata(tp, 0, 5)
            assert (served is not None) == (state == S.COPY_SEGMENT_FINISHED)

    @pytest.mark.parametrize(
        ("path", "bad"),
        [
            ((), S.DELETE_SEGMENT_FINISHED),
            ((S.COPY_SEGMENT_FINISHED,), S.DELETE_SEGMENT_FINISHED),
            ((S.DELETE_SEGMENT_STARTED,), S.COPY_SEGMENT_FINISHED),
            ((S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED), S.COPY_SEGMENT_FINISHED),
        ],
    )
    def test_invalid_transitions_fail_the_future_and_change_nothing(
        self, loaded, tp, path, bad
    ) -> None:
        md = self.add(loaded, segment(tp, 0, 9), *path)
        before = states(loaded, tp)
        with pytest.raises(InvalidStateTransitionError):
            done(loaded.update_remote_log_segment_metadata(update(md, bad)))
        assert states(loaded, tp) == before

    def test_an_update_cannot_carry_copy_segment_started(self, tp) -> None:
        with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
            update(segment(tp, 0, 9), S.COPY_SEGMENT_STARTED)

    def test_update_of_an_unknown_segment_fails_not_found(self, loaded, tp) -> None:
        with pytest.raises(RemoteResourceNotFoundError):
            unknown = update(segment(tp, 0, 9), S.COPY_SEGMENT_FINISHED)
            done(loaded.update_remote_log_segment_metadata(unknown))
        md = self.add(
            loaded, segment(tp, 0, 9), S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED
        )
        with pytest.raises(RemoteResourceNotFoundError):
            done(loaded.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_FINISHED)))

    def test_retries_are_idempotent(self, loaded, tp) -> None:
        md = segment(tp, 0, 9)
        done(loaded.add_remote_log_segment_metadata(md))
        done(loaded.add_remote_log_segment_metadata(md))  # a retried add
        for state in (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED):
            for _ in range(2):  # a retried update
                done(loaded.update_remote_log_segment_metadata(update(md, state)))
                assert states(loaded, tp) == {md.segment_id: state}
        done(loaded.update_remote_log_segment_metadata(update(md, S.DELETE_SEGMENT_FINISHED)))
        assert states(loaded, tp) == {}

    def test_adding_a_segment_known_in_a_later_state_changes_nothing(self, loaded, tp) -> None:
        md = self.add(loaded, segment(tp, 0, 9), S.COPY_SEGMENT_FINISHED)
        with contextlib.suppress(RemoteStorageError):  # it may be refused, never applied
            done(loaded.add_remote_log_segment_metadata(md))
        assert states(loaded, tp) == {md.segment_id: S.COPY_SEGMENT_FINISHED}
        assert loaded.remote_log_segment_metadata(tp, 0, 5) is not None

    # -- lookups over several epochs ------------------------------------------------------

    @pytest.fixture
    def three(self, loaded, tp) -> list[RemoteLogSegmentMetadata]:
        """Finished segments a: 0-9 in epoch 0, b: 10-29 in epochs 0 (10-19) and 1 (20-29),
        c: 30-39 in epoch 1; and d: 40-49 in epoch 1, copy started only."""
        finished = S.COPY_SEGMENT_FINISHED
        return [
            self.add(loaded, segment(tp, 0, 9, {0: 0}, size=10), finished),
            self.add(loaded, segment(tp, 10, 29, {0: 10, 1: 20}, size=20), finished),
            self.add(loaded, segment(tp, 30, 39, {1: 30}, size=30), finished),
            self.add(loaded, segment(tp, 40, 49, {1: 40}, size=40)),
        ]

    # (epoch, offset) -> index in ``three`` of the segment a lookup returns, or None
    LOOKUPS = (
        (0, 0, 0), (0, 9, 0), (0, 10, 1), (0, 19, 1), (1, 20, 1), (1, 29, 1), (1, 35, 2),
        (0, 25, None),  # offset 25 is in epoch 1, not 0
        (1, 15, None),  # offset 15 is in epoch 0, not 1
        (1, 45, None),  # only a started copy holds it
        (1, 50, None),  # beyond every segment
        (2, 5, None),  # an epoch without segments
    )  # fmt: skip

    def test_lookup_by_epoch_and_offset_returns_finished_segments_only(
        self, loaded, tp, three
    ) -> None:
        ids = [md.remote_log_segment_id for md in three]
        for epoch, offset, expected in self.LOOKUPS:
            found = loaded.remote_log_segment_metadata(tp, epoch, offset)
            got = None if found is None else ids.index(found.remote_log_segment_id)
            assert got == expected, f"lookup of epoch {epoch}, offset {offset}"

    def test_highest_offset_for_epoch_ends_where_the_epoch_ends(self, loaded, tp, three) -> None:
        assert loaded.highest_offset_for_epoch(tp, 0) == 19
        assert loaded.highest_offset_for_epoch(tp, 1) == 39  # d is not finished
        assert loaded.highest_offset_for_epoch(tp, 2) is None

    def test_list_by_partition_and_by_epoch(self, loaded, tp, three) -> None:
        a, b, c, d = (md.segment_id for md in three)
        assert [md.segment_id for md in loaded.list_remote_log_segments(tp)] == [a, b, c, d]
        assert [md.segment_id for md in loaded.list_remote_log_segments(tp, 0)] == [a, b]
        assert [md.segment_id for md in loaded.list_remote_log_segments(tp, 1)] == [b, c, d]
        assert list(loaded.list_remote_log_segments(tp, 2)) == []

    def test_remote_log_size_counts_finished_segments_of_the_epoch(self, loaded, tp, three) -> None:
        assert loaded.remote_log_size(tp, 0) == 10 + 20
        assert loaded.remote_log_size(tp, 1) == 20 + 30  # not d, a started copy
        assert loaded.remote_log_size(tp, 2) == 0

    def test_a_deleting_segment_leaves_lookups_but_stays_listed(self, loaded, tp, three) -> None:
        done(loaded.update_remote_log_segment_metadata(update(three[0], S.DELETE_SEGMENT_STARTED)))
        assert loaded.remote_log_segment_metadata(tp, 0, 5) is None
        assert loaded.remote_log_size(tp, 0) == 20
        assert states(loaded, tp)[three[0].segment_id] == S.DELETE_SEGMENT_STARTED

    def test_partitions_are_independent(self, loaded, tp, three) -> None:
        other = TopicIdPartition(tp.topic_id, tp.topic, tp.partition + 1)
        load(loaded, other)
        assert list(loaded.list_remote_log_segments(other)) == []
        self.add(loaded, segment(other, 0, 99), S.COPY_SEGMENT_FINISHED)
        assert loaded.highest_offset_for_epoch(other, 0) == 99
        assert loaded.highest_offset_for_epoch(tp, 0) == 19

    # -- partition deletion ---------------------------------------------------------------

    def put_delete(self, rlmm, tp, state: P) -> None:
        event = RemotePartitionDeleteMetadata(tp, state, 3, 1)
        done(rlmm.put_remote_partition_delete_metadata(event))

    def test_partition_deletion_lifecycle(self, loaded, tp, three) -> None:
        for state in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED):
            for _ in range(2):  # repeatable
                self.put_delete(loaded, tp, state)
                assert len(states(loaded, tp)) == 4  # metadata kept while deleting
        for md in three:  # what the partition remover does
            for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
                done(loaded.update_remote_log_segment_metadata(update(md, state)))
        assert states(loaded, tp) == {}
        self.put_delete(loaded, tp, P.DELETE_PARTITION_FINISHED)
        for read in (
            lambda: list(loaded.list_remote_log_segments(tp)),
            lambda: loaded.remote_log_segment_metadata(tp, 0, 5),
            lambda: loaded.highest_offset_for_epoch(tp, 0),
            lambda: loaded.remote_log_size(tp, 0),
        ):
            with pytest.raises(RemoteResourceNotFoundError):
                read()

    @pytest.mark.parametrize(
        "steps",
        [
            (P.DELETE_PARTITION_STARTED,),  # not marked first
            (P.DELETE_PARTITION_FINISHED,),
            (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_FINISHED),  # STARTED skipped
        ],
    )
    def test_a_deletion_step_out_of_order_is_not_applied(self, loaded, tp, three, steps) -> None:
        for state in steps:
            with contextlib.suppress(RemoteStorageError):  # it may be refused, never applied
                self.put_delete(loaded, tp, state)
        assert len(states(loaded, tp)) == 4
        assert loaded.highest_offset_for_epoch(tp, 1) == 39

    # -- loading ----------------------------------------------------------------------------

    def test_reads_raise_until_the_partition_is_loaded(self, rlmm, tp) -> None:
        assert not rlmm.is_ready(tp)
        for read in (
            lambda: list(rlmm.list_remote_log_segments(tp)),
            lambda: list(rlmm.list_remote_log_segments(tp, 0)),
            lambda: rlmm.remote_log_segment_metadata(tp, 0, 5),
            lambda: rlmm.highest_offset_for_epoch(tp, 0),
            lambda: rlmm.remote_log_size(tp, 0),
        ):
            with pytest.raises(RemoteStorageError):
                read()
        load(rlmm, tp)
        assert list(rlmm.list_remote_log_segments(tp)) == []

    def test_stopping_a_partition_unloads_it(self, loaded, tp, three) -> None:
        loaded.on_stop_partitions({tp})
        assert not loaded.is_ready(tp)
        with pytest.raises(RemoteStorageError):
            loaded.highest_offset_for_epoch(tp, 0)
        loaded.on_stop_partitions({tp})  # again, and an unknown partition: nothing happens
        loaded.on_stop_partitions({TopicIdPartition(uuid.uuid4(), "never", 0)})
        load(loaded, tp)  # loading again reads what was stored
        assert loaded.highest_offset_for_epoch(tp, 0) == 19

    def test_loading_twice_keeps_the_metadata(self, loaded, tp, three) -> None:
        loaded.on_partition_leadership_changes(set(), {tp})  # now a follower, say
        assert loaded.is_ready(tp)
        assert loaded.highest_offset_for_epoch(tp, 1) == 39

    def test_writes_for_a_partition_not_loaded_here_are_stored(self, rlmm, tp) -> None:
        md = segment(tp, 0, 9)
        done(rlmm.add_remote_log_segment_metadata(md))  # a remover or a tool writing
        with pytest.raises(RemoteResourceNotFoundError):  # it cannot check a transition
            done(rlmm.update_remote_log_segment_metadata(update(md, S.COPY_SEGMENT_FINISHED)))
        load(rlmm, tp)
        assert states(rlmm, tp) == {md.segment_id: S.COPY_SEGMENT_STARTED}

    def test_another_instance_reads_what_was_stored(self, make_rlmm, loaded, tp, three) -> None:
        other = make_rlmm()
        try:
            load(other, tp)
            assert [md.segment_id for md in other.list_remote_log_segments(tp)] == [
                md.segment_id for md in three
            ]
            assert other.highest_offset_for_epoch(tp, 0) == 19
        finally:
            other.close()
