"""Child process of the crash test: appends known batches until it is killed.

Usage: python crash_writer.py LOG_DIR

Prints ``start <log end offset>`` once the log is open (after any recovery), then
``flushed <offset>`` each time every offset below ``<offset>`` has been fsynced.
"""

from __future__ import annotations

import sys
from pathlib import Path

from core.log.config import LogConfig
from core.log.log_manager import LogManager, LogManagerConfig
from core.records.builder import RecordBatchBuilder

RECORDS_PER_BATCH = 4
CONFIG = LogConfig(segment_bytes=48 * 1024, index_interval_bytes=1024, retention_ms=-1)


def expected_batch(batch_index: int) -> bytearray:
    """Batch ``batch_index`` as the client sends it; content depends only on the index."""
    builder = RecordBatchBuilder()
    for r in range(RECORDS_PER_BATCH):
        n = batch_index * RECORDS_PER_BATCH + r
        value = (f"record-{n:08d}-".encode() * (1 + n % 40))[: 50 + (n * 37) % 900]
        builder.append(value, key=f"k{n}".encode(), timestamp=1_700_000_000_000 + n)
    return builder.build()


def stored_batch(batch_index: int) -> bytes:
    """The same batch as the log stores it: base offset and leader epoch 0 patched in."""
    from core.records.batch import RecordBatchHeader

    data = expected_batch(batch_index)
    header = RecordBatchHeader(data)
    header.set_base_offset(batch_index * RECORDS_PER_BATCH)
    header.set_partition_leader_epoch(0)
    return bytes(data)


def main() -> None:
    log_dir = Path(sys.argv[1])
    manager = LogManager(
        LogManagerConfig(
            log_dirs=(log_dir,),
            flush_offset_checkpoint_interval_ms=20,
            flush_start_offset_checkpoint_interval_ms=20,
            high_watermark_checkpoint_interval_ms=20,
            default_log_config=CONFIG,
        )
    )
    manager.startup()
    plog = manager.get_or_create_log("crash", 0)
    end = plog.log_end_offset
    assert end % RECORDS_PER_BATCH == 0, end
    print(f"start {end}", flush=True)
    index = end // RECORDS_PER_BATCH
    while True:
        plog.append_as_leader(expected_batch(index), 0)
        index += 1
        if index % 5 == 0:
            plog.flush()
            print(f"flushed {plog.log_end_offset}", flush=True)


if __name__ == "__main__":
    main()
