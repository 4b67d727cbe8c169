"""Where a new topic's (or new partitions') replicas go: Kafka's rack-unaware placement.

Kafka's ``AdminUtils.assignReplicasToBrokersRackUnaware``, which ZooKeeper-mode brokers use
for CreateTopics and CreatePartitions without explicit assignments:

- brokers are taken in id order; the first replica of partition ``p`` is the broker at
  ``(p + start) % n``, so leaders (first replicas) go round the brokers;
- the other replicas follow it at a shift that grows by one every ``n`` partitions
  (``1 + (shift + j) % (n - 1)`` places after the first), so that the followers of one
  broker's leaders do not all sit on its neighbour;
- ``start`` and the initial shift are random, so that clusters with many small topics do
  not load broker 0 first (fixed values make it deterministic, for tests and for
  CreatePartitions, which continues an existing topic's pattern).

Racks are not considered (Kafka's rack-aware variant is used only when every broker has
one; tierlog always places rack-unaware and says so in docs/OPERATIONS.md).

Explicit assignments (CreateTopics ``assignments``, CreatePartitions ``assignments``) are
checked as Kafka checks them: ``validate_assignment``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from core.errors import CoreError
from core.server.topics import InvalidPartitionsError, InvalidReplicationFactorError


class InvalidReplicaAssignmentError(CoreError):
    """INVALID_REPLICA_ASSIGNMENT."""

    error_code = 39


def assign_replicas(
    partitions: int,
    replication_factor: int,
    brokers: Sequence[int],
    *,
    start_index: int = -1,
    first_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """Replicas of partitions ``first_partition .. first_partition + partitions - 1``.

    Args:
        brokers: the live broker ids (any order; they are sorted).
        start_index: the broker index of partition 0's first replica and the initial shift;
            -1 draws both at random (Kafka draws them separately).

    Raises:
        InvalidPartitionsError: ``partitions`` < 1.
        InvalidReplicationFactorError: ``replication_factor`` < 1 or above the brokers.
    """
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    ids = sorted(set(brokers))
    if replication_factor > len(ids):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(ids)}."
        )
    n = len(ids)
    rng = rng or random.Random()
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    out: dict[int, tuple[int, ...]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[partition] = tuple(replicas)
    return out


def validate_assignment(
    assignment: Mapping[int, Sequence[int]],
    live_brokers: Sequence[int],
    *,
    first_partition: int = 0,
    replication_factor: int | None = None,
) -> dict[int, tuple[int, ...]]:
    """An explicit assignment, checked as Kafka checks one; returned as tuples.

    Partition ids must run from ``first_partition`` without gaps, every partition needs
    replicas, none twice, all on live brokers, and all partitions the same count (or
    ``replication_factor`` when given: the topic's, for CreatePartitions).

    Raises:
        InvalidReplicaAssignmentError: the first rule broken, named.
    """
    if not assignment:
        raise InvalidReplicaAssignmentError("Replica assignment is empty.")
    expected = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected:
        raise InvalidReplicaAssignmentError(
            f"Partitions should be a consecutive 0-based integer sequence from "
            f"{first_partition}, got {sorted(assignment)}."
        )
    live = set(live_brokers)
    counts = set()
    out = {}
    for partition, replicas in sorted(assignment.items()):
        if not replicas:
            raise InvalidReplicaAssignmentError(
                f"Cannot have replication factor of 0 for partition id {partition}."
            )
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"Duplicate brokers not allowed in replica assignment: "
                f"{', '.join(map(str, replicas))} for partition id {partition}."
            )
        unknown = sorted(set(replicas) - live)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}."
            )
        counts.add(len(replicas))
        out[partition] = tuple(replicas)
    if len(counts) > 1:
        raise InvalidReplicaAssignmentError(
            "All partitions should have the same number of replicas."
        )
    if replication_factor is not None and counts != {replication_factor}:
        raise InvalidReplicaAssignmentError(
            f"Inconsistent replication factor between partitions, partition 0 has "
            f"{replication_factor} while partitions [{', '.join(map(str, out))}] have "
            f"replication factors [{', '.join(str(len(r)) for r in out.values())}]."
        )
    return out
