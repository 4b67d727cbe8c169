"""What searches for aborted transactions in the remote tier learnt: which runs of remote
segments hold none, so that the next search from the same segment skips them.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict

# Searches for aborted transactions remembered (see TxnFreeRuns).
TXN_FREE_RUNS_MAX_ENTRIES = 1024


class TxnFreeRuns:
    """Runs of remote segments without aborted transactions (KIP-1058's
    ``txn_index_empty``), by the segment a search for aborts started from: segment id ->
    the offset that search reached (the local log start then) through segments without
    aborts only. Remote segments are immutable and new ones only follow the last, so a
    later search from the same segment finds the same segments up to that offset and
    can start there. Thread-safe; the TXN_FREE_RUNS_MAX_ENTRIES newest are kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reached: OrderedDict[uuid.UUID, int] = OrderedDict()

    def get(self, segment_id: uuid.UUID) -> int | None:
        with self._lock:
            return self._reached.get(segment_id)

    def put(self, segment_id: uuid.UUID, reached: int) -> None:
        with self._lock:
            if self._reached.get(segment_id, -1) >= reached:
                return
            self._reached[segment_id] = reached
            self._reached.move_to_end(segment_id)
            while len(self._reached) > TXN_FREE_RUNS_MAX_ENTRIES:
                self._reached.popitem(last=False)
