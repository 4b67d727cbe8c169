"""Leader elections and ISR removals as pure functions (Kafka's PartitionLeaderElectionAlgorithms
and the decisions of its ZooKeeper-mode state machines).

Every function takes the partition's current ``LeaderAndIsr``, its assignment (replicas in
preference order) and who is live, and returns the new ``LeaderAndIsr`` or None when there is
nothing to elect. The rules, as Kafka's:

- every election, and every removal of a replica from the ISR by the controller, bumps the
  leader epoch (leaders changing their own ISR keep it: ``LeaderAndIsr.new_isr``);
- the ISR never becomes empty: the last ISR member is kept even when its broker is dead, so
  that it can lead cleanly when it comes back;
- replicas are tried in assignment order, so the preferred replica (the first) wins when it
  can.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence

from core.server.cluster_types import NO_LEADER, LeaderAndIsr, TopicPartition


class ElectionType(enum.IntEnum):
    """Kafka's ElectionType byte values (ElectLeaders requests)."""

    PREFERRED = 0
    UNCLEAN = 1


# -- who leads (Kafka's PartitionLeaderElectionAlgorithms) -------------------------------------
def offline_partition_leader(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int], unclean_allowed: bool
) -> int | None:
    """The first live replica in the ISR; without one, if unclean elections are allowed, the
    first live replica (which may lack records the ISR had)."""
    leader = next((r for r in assignment if r in live and r in isr), None)
    if leader is None and unclean_allowed:
        leader = next((r for r in assignment if r in live), None)
    return leader


def preferred_replica_leader(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int]
) -> int | None:
    """The preferred replica (the first assigned) if it is live and in the ISR."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_leader(
    assignment: Sequence[int],
    isr: Collection[int],
    live_or_shutting_down: Collection[int],
    shutting_down: Collection[int],
) -> int | None:
    """The first replica in the ISR that is live and not shutting down."""
    return next(
        (
            r
            for r in assignment
            if r in live_or_shutting_down and r in isr and r not in shutting_down
        ),
        None,
    )


# -- the new leader and ISR --------------------------------------------------------------------
def elect_offline(
    current: LeaderAndIsr, assignment: Sequence[int], live: Collection[int], unclean_allowed: bool
) -> LeaderAndIsr | None:
    """A leader for a partition whose leader is gone (or a new controller's check).

    A clean leader keeps the live members of the ISR; an unclean one starts a new ISR of
    itself alone, and the partition is RECOVERING (KIP-704).
    """
    leader = offline_partition_leader(assignment, current.isr, live, unclean_allowed)
    if leader is None:
        return None
    if leader in current.isr:
        return current.new_leader_and_isr(leader, [r for r in current.isr if r in live])
    return current.new_recovering_leader_and_isr(leader, [leader])


def elect_preferred(
    current: LeaderAndIsr, assignment: Sequence[int], live: Collection[int]
) -> LeaderAndIsr | None:
    """Move leadership to the preferred replica; the ISR is unchanged."""
    leader = preferred_replica_leader(assignment, current.isr, live)
    return None if leader is None else current.new_leader_and_isr(leader, current.isr)


def elect_for_controlled_shutdown(
    current: LeaderAndIsr,
    assignment: Sequence[int],
    live_or_shutting_down: Collection[int],
    shutting_down: Collection[int],
) -> LeaderAndIsr | None:
    """Move leadership off shutting-down brokers, which also leave the ISR."""
    leader = controlled_shutdown_leader(
        assignment, current.isr, live_or_shutting_down, shutting_down
    )
    if leader is None:
        return None
    return current.new_leader_and_isr(leader, [r for r in current.isr if r not in shutting_down])


def remove_replica_from_isr(current: LeaderAndIsr, replica: int) -> LeaderAndIsr | None:
    """The controller takes a dead (or shutting-down) replica out of the ISR; None if it is
    not in it. If it led, the partition is left without a leader; if it is the last ISR
    member it stays there (Kafka's removeReplicasFromIsr)."""
    if replica not in current.isr:
        return None
    leader = NO_LEADER if current.leader == replica else current.leader
    isr = current.isr if len(current.isr) == 1 else [r for r in current.isr if r != replica]
    return current.new_leader_and_isr(leader, isr)


def initial_leader_and_isr(assignment: Sequence[int], live: Collection[int]) -> LeaderAndIsr | None:
    """A new partition: the first live replica leads, every live replica is in the ISR;
    None without a live replica (the partition waits for one)."""
    live_replicas = [r for r in assignment if r in live]
    if not live_replicas:
        return None
    return LeaderAndIsr(leader=live_replicas[0], leader_epoch=0, isr=tuple(live_replicas))


# -- auto leader rebalance ---------------------------------------------------------------------
def preferred_leader_imbalance(
    assignments: Mapping[TopicPartition, Sequence[int]],
    leaders: Mapping[TopicPartition, int],
    imbalance_percentage: int,
) -> dict[int, list[TopicPartition]]:
    """Kafka's checkAndTriggerAutoLeaderRebalance: for each broker, the partitions that
    prefer it but are led by another, when their share of the partitions preferring it is
    above ``imbalance_percentage`` (brokers within the allowance are left out).

    Partitions without a known leader do not count as imbalanced (Kafka's rule).
    """
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp, replicas in assignments.items():
        if replicas:
            by_preferred.setdefault(replicas[0], []).append(tp)
    result: dict[int, list[TopicPartition]] = {}
    for broker, partitions in sorted(by_preferred.items()):
        not_led = [tp for tp in partitions if tp in leaders and leaders[tp] != broker]
        if len(not_led) / len(partitions) > imbalance_percentage / 100:
            result[broker] = sorted(not_led)
    return result
