"""The controller's election rules (core/server/controller/elections.py), checked on every
combination of ISR, live brokers and current leader for three replicas, plus Kafka's cases
spelled out."""

from __future__ import annotations

import itertools

import pytest

from core.server.cluster_types import NO_LEADER, LeaderAndIsr
from core.server.controller import elections

ASSIGNMENT = (2, 3, 1)  # preference order: 2 is the preferred replica
BROKERS = (1, 2, 3, 4)  # 4 holds no replica


def subsets(items, *, nonempty=False):
    start = 1 if nonempty else 0
    return [set(c) for n in range(start, len(items) + 1) for c in itertools.combinations(items, n)]


def all_states():
    """Every (current LeaderAndIsr, live set) with a non-empty ISR drawn from the replicas."""
    for isr in subsets(ASSIGNMENT, nonempty=True):
        ordered = tuple(r for r in ASSIGNMENT if r in isr)
        for leader in [NO_LEADER, *ordered]:
            current = LeaderAndIsr(leader, 7, ordered, partition_epoch=12)
            for live in subsets(BROKERS):
                yield current, live


def first(candidates):
    return next(iter(candidates), None)


# -- offline -----------------------------------------------------------------------------------
@pytest.mark.parametrize("unclean", [False, True])
def test_offline_election_on_every_state(unclean):
    for current, live in all_states():
        result = elections.elect_offline(current, ASSIGNMENT, live, unclean)
        clean = first(r for r in ASSIGNMENT if r in live and r in current.isr)
        dirty = first(r for r in ASSIGNMENT if r in live)
        expected = clean if clean is not None else (dirty if unclean else None)
        if expected is None:
            assert result is None, (current, live)
            continue
        assert result is not None
        assert result.leader == expected
        assert result.leader_epoch == current.leader_epoch + 1  # every election bumps it
        assert result.partition_epoch == current.partition_epoch  # ZooKeeper bumps that
        if clean is not None:
            assert result.isr == tuple(r for r in current.isr if r in live)
            assert result.leader_recovery_state == 0
        else:
            assert result.isr == (expected,)
            assert result.leader_recovery_state == 1  # RECOVERING after an unclean election
        assert result.leader in result.isr


def test_offline_election_examples():
    state = LeaderAndIsr(1, 4, (1, 2, 3))
    # The dead leader's successor is the first live ISR member in assignment order.
    assert elections.elect_offline(state, (1, 2, 3), {2, 3}, False) == LeaderAndIsr(2, 5, (2, 3))
    assert elections.elect_offline(state, (1, 3, 2), {2, 3}, False) == LeaderAndIsr(3, 5, (2, 3))
    # Only replica 4 (out of the ISR) is live: no clean leader; unclean picks it alone.
    out_of_isr = LeaderAndIsr(1, 4, (1,))
    assert elections.elect_offline(out_of_isr, (1, 4), {4}, False) is None
    assert elections.elect_offline(out_of_isr, (1, 4), {4}, True) == LeaderAndIsr(
        4, 5, (4,), leader_recovery_state=1
    )
    # A recovering partition stays recovering through a clean election (Kafka keeps it).
    recovering = LeaderAndIsr(4, 5, (4, 1), leader_recovery_state=1)
    assert elections.elect_offline(recovering, (1, 4), {1}, False) == LeaderAndIsr(
        1, 6, (1,), leader_recovery_state=1
    )


# -- preferred ---------------------------------------------------------------------------------
def test_preferred_election_on_every_state():
    preferred = ASSIGNMENT[0]
    for current, live in all_states():
        result = elections.elect_preferred(current, ASSIGNMENT, live)
        if preferred in live and preferred in current.isr:
            assert result == LeaderAndIsr(preferred, 8, current.isr, partition_epoch=12)
        else:
            assert result is None, (current, live)


# -- controlled shutdown -----------------------------------------------------------------------
def test_controlled_shutdown_election_on_every_state():
    for current, live in all_states():
        for shutting_down in subsets(sorted(live)):
            result = elections.elect_for_controlled_shutdown(
                current, ASSIGNMENT, live, shutting_down
            )
            eligible = [
                r for r in ASSIGNMENT if r in live and r in current.isr and r not in shutting_down
            ]
            if not eligible:
                assert result is None
                continue
            assert result is not None
            assert result.leader == eligible[0]
            assert result.leader_epoch == current.leader_epoch + 1
            # Shutting-down brokers leave the ISR; the ISR keeps the new leader.
            assert result.isr == tuple(r for r in current.isr if r not in shutting_down)
            assert result.leader in result.isr


def test_controlled_shutdown_skips_the_stopping_broker_even_if_preferred():
    state = LeaderAndIsr(1, 3, (1, 2, 3))
    assert elections.elect_for_controlled_shutdown(
        state, (1, 2, 3), {1, 2, 3}, {1}
    ) == LeaderAndIsr(2, 4, (2, 3))
    # Its only ISR partner is stopping too: no leader (the partition stays where it is).
    assert elections.elect_for_controlled_shutdown(state, (1, 2), {1, 2, 3}, {1, 2}) is None


# -- ISR removal -------------------------------------------------------------------------------
def test_removing_a_replica_from_the_isr_on_every_state():
    for current, _live in all_states():
        for replica in BROKERS:
            result = elections.remove_replica_from_isr(current, replica)
            if replica not in current.isr:
                assert result is None
                continue
            assert result is not None
            assert result.leader_epoch == current.leader_epoch + 1  # the controller bumps it
            if len(current.isr) == 1:
                assert result.isr == current.isr  # the last ISR member is never removed
            else:
                assert result.isr == tuple(r for r in current.isr if r != replica)
            assert result.leader == (NO_LEADER if current.leader == replica else current.leader)


def test_the_last_isr_member_stays_and_the_partition_loses_its_leader():
    assert elections.remove_replica_from_isr(LeaderAndIsr(2, 1, (2,)), 2) == LeaderAndIsr(
        NO_LEADER, 2, (2,)
    )
    assert elections.remove_replica_from_isr(LeaderAndIsr(2, 1, (2, 3)), 3) == LeaderAndIsr(
        2, 2, (2,)
    )


# -- new partitions ----------------------------------------------------------------------------
def test_initial_leader_is_the_first_live_replica_and_the_isr_all_live_replicas():
    for live in subsets(BROKERS):
        result = elections.initial_leader_and_isr(ASSIGNMENT, live)
        live_replicas = tuple(r for r in ASSIGNMENT if r in live)
        if not live_replicas:
            assert result is None
        else:
            assert result == LeaderAndIsr(live_replicas[0], 0, live_replicas)


# -- auto rebalance ----------------------------------------------------------------------------
def test_imbalance_counts_partitions_preferring_a_broker_and_led_by_another():
    assignments = {("t", p): ((1, 2) if p < 4 else (2, 1)) for p in range(8)}
    leaders = {("t", p): 2 for p in range(8)}
    # Broker 1 prefers 4 partitions and leads none (100% > 10%); broker 2 leads all its own.
    assert elections.preferred_leader_imbalance(assignments, leaders, 10) == {
        1: [("t", 0), ("t", 1), ("t", 2), ("t", 3)]
    }
    leaders[("t", 0)] = leaders[("t", 1)] = leaders[("t", 2)] = 1
    # One of four (25%) is within a 25% allowance, above a 24% one.
    assert elections.preferred_leader_imbalance(assignments, leaders, 25) == {}
    assert elections.preferred_leader_imbalance(assignments, leaders, 24) == {1: [("t", 3)]}
    # A partition with no known leader does not count as imbalanced.
    del leaders[("t", 3)]
    assert elections.preferred_leader_imbalance(assignments, leaders, 0) == {}


def test_election_type_bytes_are_kafkas():
    assert elections.ElectionType.PREFERRED == 0
    assert elections.ElectionType.UNCLEAN == 1
