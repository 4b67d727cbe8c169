"""One transactional id's state in the coordinator, and Kafka's state machine over it.

Kafka's TransactionMetadata: the producer id and epoch (and the previous ones, for
KIP-360 retries), the timeout, the state, the partitions of the open transaction and its
start time. A change is prepared (``pending``), written to ``__transaction_state``, then
completed; while one is pending any other request for the id is answered
CONCURRENT_TRANSACTIONS, as in Kafka.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from core.errors import CoreError
from core.server.transaction_log import TopicPartition, TransactionLogValue, TransactionState

S = TransactionState
MAX_PRODUCER_EPOCH = 32767
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

# Kafka's TransactionState.validPreviousStates, by target state.
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class IllegalTransitionError(CoreError):
    """A state change Kafka's state machine forbids (a coordinator bug)."""

    error_code = -1


def check_transition(current: TransactionState, target: TransactionState) -> None:
    """Raises IllegalTransitionError unless Kafka allows ``current`` -> ``target``."""
    if current not in VALID_PREVIOUS[target]:
        raise IllegalTransitionError(f"transaction state {current.name} -> {target.name}")


@dataclass(slots=True)
class TransactionMetadata:
    """The coordinator's view of one transactional id (mutable; event loop only)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    # The id and epoch before the last bump: a retried InitProducerId or EndTxn carrying
    # them is answered as the first one was (KIP-360).
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending: TransactionState | None = None
    # The __transaction_state partition's leader epoch when this was loaded or written:
    # the coordinator epoch its markers carry.
    coordinator_epoch: int = 0

    def to_value(self) -> TransactionLogValue:
        return self.value_for(self.state, self.partitions)

    def value_for(
        self,
        state: TransactionState,
        partitions: set[TopicPartition] | frozenset[TopicPartition],
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        timeout_ms: int | None = None,
        start_ms: int | None = None,
        now_ms: int | None = None,
    ) -> TransactionLogValue:
        return TransactionLogValue(
            self.producer_id if producer_id is None else producer_id,
            self.producer_epoch if producer_epoch is None else producer_epoch,
            self.timeout_ms if timeout_ms is None else timeout_ms,
            state,
            frozenset()
            if state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
            else frozenset(partitions),
            self.last_update_ms if now_ms is None else now_ms,
            self.start_ms if start_ms is None else start_ms,
        )

    def apply(self, value: TransactionLogValue) -> None:
        """Take a written (or replayed) value as the current state."""
        if value.producer_id != self.producer_id or value.producer_epoch != self.producer_epoch:
            self.last_producer_id = self.producer_id
            self.last_producer_epoch = self.producer_epoch
        self.producer_id = value.producer_id
        self.producer_epoch = value.producer_epoch
        self.timeout_ms = value.timeout_ms
        self.state = value.state
        self.partitions = set(value.partitions)
        self.start_ms = value.start_ms
        self.last_update_ms = value.last_update_ms

    @classmethod
    def from_value(
        cls, transactional_id: str, value: TransactionLogValue, coordinator_epoch: int
    ) -> TransactionMetadata:
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            value.state,
            set(value.partitions),
            value.start_ms,
            value.last_update_ms,
            coordinator_epoch=coordinator_epoch,
        )

    def snapshot(self) -> TransactionMetadata:
        return dataclasses.replace(self, partitions=set(self.partitions))
