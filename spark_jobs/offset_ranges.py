"""Sets of Kafka offsets as sorted, disjoint, inclusive ranges; and such sets per partition.

The exports record which offsets they have dealt with (exported, or read and left out for
good: control records, aborted transactions) so that a re-run exports only the others: the
Iceberg export per partition, the Parquet export per remote segment. Offsets are inclusive,
as in Kafka's RemoteLogSegmentMetadata.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OffsetRanges:
    """Offsets as ``(first, last)`` pairs: sorted, disjoint, adjacent ones merged."""

    ranges: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, pairs: Iterable[tuple[int, int]]) -> OffsetRanges:
        """The union of ``pairs`` (in any order, overlapping or not).

        Raises:
            ValueError: a pair with ``first > last``.
        """
        merged: list[tuple[int, int]] = []
        for first, last in sorted(pairs):
            if first > last:
                raise ValueError(f"not an offset range: {first}..{last}")
            if merged and first <= merged[-1][1] + 1:
                if last > merged[-1][1]:
                    merged[-1] = (merged[-1][0], last)
            else:
                merged.append((first, last))
        return cls(tuple(merged))

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def count(self) -> int:
        """How many offsets."""
        return sum(last - first + 1 for first, last in self.ranges)

    def union(self, other: OffsetRanges) -> OffsetRanges:
        return OffsetRanges.of((*self.ranges, *other.ranges))

    def missing_from(self, first: int, last: int) -> OffsetRanges:
        """The offsets of ``first..last`` that are not in this set."""
        out = []
        at = first
        for lo, hi in self.ranges:
            if hi < at:
                continue
            if lo > last:
                break
            if lo > at:
                out.append((at, lo - 1))
            at = max(at, hi + 1)
            if at > last:
                break
        if at <= last:
            out.append((at, last))
        return OffsetRanges(tuple(out))

    def overlaps(self, other: OffsetRanges) -> bool:
        """Whether an offset is in both sets."""
        a, b = self.ranges, other.ranges
        i = j = 0
        while i < len(a) and j < len(b):
            if a[i][1] < b[j][0]:
                i += 1
            elif b[j][1] < a[i][0]:
                j += 1
            else:
                return True
        return False


TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class ExportedRanges:
    """Offset sets by (topic, partition), with the JSON form stored in the table:
    ``{"<topic>": {"<partition>": [[first, last], ...]}}``."""

    by_partition: Mapping[TopicPartition, OffsetRanges]

    @classmethod
    def empty(cls) -> ExportedRanges:
        return cls({})

    def of(self, topic: str, partition: int) -> OffsetRanges:
        return self.by_partition.get((topic, partition), OffsetRanges())

    def union(self, other: ExportedRanges) -> ExportedRanges:
        out = dict(self.by_partition)
        for tp, ranges in other.by_partition.items():
            out[tp] = out.get(tp, OffsetRanges()).union(ranges)
        return ExportedRanges(out)

    def overlaps(self, other: ExportedRanges) -> bool:
        return any(self.of(*tp).overlaps(ranges) for tp, ranges in other.by_partition.items())

    def count(self) -> int:
        return sum(r.count() for r in self.by_partition.values())

    def to_json(self) -> str:
        doc: dict[str, dict[str, list[list[int]]]] = {}
        for (topic, partition), ranges in sorted(self.by_partition.items()):
            if ranges:
                doc.setdefault(topic, {})[str(partition)] = [[lo, hi] for lo, hi in ranges]
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str) -> ExportedRanges:
        """Parse the JSON form.

        Raises:
            ValueError: not that form, naming ``source``.
        """
        try:
            doc = json.loads(text)
            out = {
                (str(topic), int(partition)): OffsetRanges.of(
                    (int(lo), int(hi)) for lo, hi in pairs
                )
                for topic, partitions in doc.items()
                for partition, pairs in partitions.items()
            }
        except (ValueError, TypeError, AttributeError) as e:
            raise ValueError(f"{source}: not a map of topic to partition to ranges: {e}") from e
        return cls(out)
