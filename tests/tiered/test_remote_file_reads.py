"""Remote fetches sent from the object's file (plugins with ``tiered.api.LogSegmentFiles``,
the local-directory one): the bytes a consumer gets, and what is never served."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import OffsetOutOfRangeError
from core.log.file_records import FileSlice
from core.log.txn_index import AbortedTxn
from core.records.batch import HEADER_SIZE, RecordBatchHeader, peek_batch_size
from core.server import response_frame
from core.server.frame_protocol import FrameProtocol
from core.server.response_frame import ResponseFrame, send_response
from rsm_plugins.layout import CorruptObjectError
from tests.rsm_plugins.test_encryption import encrypted_rsm, key_file
from tests.support.waiting import wait_until
from tiered.api import RemoteLogSegmentMetadata, RemoteResourceNotFoundError

from .harness import T0, Env, local_dir_rsm, produce, tiered_config


@pytest.fixture
def file_env(tmp_path) -> Iterator[Env]:
    e = Env(tmp_path, local_dir_rsm(tmp_path / "bucket"), tiered_config())
    yield e
    e.close()


def tiered(env: Env) -> tuple[bytes, list[RemoteLogSegmentMetadata]]:
    """Produce 40 batches, tier every rolled segment and drop it locally; returns the bytes
    of the tiered segments and their metadata in offset order."""
    produce(env.plog, 40, ts=T0)
    expected = b"".join(seg.log.path.read_bytes() for seg in env.plog.segments()[:-1])
    env.copy()
    env.plog.delete_old_segments()
    return expected, sorted(env.segments(), key=lambda m: m.start_offset)


def records_of(answer) -> bytes:
    records = answer.records
    return records.read_bytes() if isinstance(records, FileSlice) else records


def whole(data: bytes) -> tuple[bytes, int | None]:
    """``data``'s whole batches (what a client keeps) and the offset after them."""
    at, next_offset = 0, None
    while (size := peek_batch_size(data, at)) is not None and at + size <= len(data):
        next_offset = RecordBatchHeader(data, at).next_offset
        at += size
    return data[:at], next_offset


def log_object(root: Path, md: RemoteLogSegmentMetadata) -> Path:
    (path,) = root.rglob(f"{md.start_offset:020d}-*.log")
    return path


def test_a_consumer_gets_the_segments_bytes_sent_from_the_object_files(file_env):
    env = file_env
    expected, remote = tiered(env)
    reader = env.rlm.reader
    got = bytearray()
    offset = 0
    at_once = 0
    while offset < env.plog.local_log_start_offset:
        answer = reader.submit_fetch(env.tp, env.plog, offset, 600)
        at_once += answer.done()
        result = answer.result(10)
        # A slice of the object's file, sent with sendfile: no copy in the broker's memory.
        assert isinstance(result.records, FileSlice)
        data, next_offset = whole(result.records.read_bytes())
        assert next_offset is not None, f"no whole batch at offset {offset}"
        got += data
        offset = next_offset
    assert bytes(got) == expected
    # Every segment's first fetch checks its file on the pool; the fetches after it in the
    # same segment are answered at once, without a pool thread.
    assert at_once > 0
    # The same bytes as a read into memory (the path of plugins without files).
    memory = reader.fetch(env.tp, env.plog, remote[1].start_offset, 600).records
    sent = reader.submit_fetch(env.tp, env.plog, remote[1].start_offset, 600).result(10)
    assert records_of(sent) == memory


def sent_over_a_socket(frame: ResponseFrame) -> bytes:
    """What a peer receives of ``frame`` written by the broker's response writer."""

    async def scenario() -> bytes:
        ours, theirs = socket.socketpair()
        with theirs:
            transport, protocol = await asyncio.get_running_loop().connect_accepted_socket(
                lambda: FrameProtocol(4096, lambda p: None), ours
            )
            await send_response(transport, protocol, frame, sendfile=True)
            transport.close()
            await protocol.closed
            theirs.setblocking(True)
            received = bytearray()
            while chunk := theirs.recv(1 << 16):
                received += chunk
            return bytes(received)

    return asyncio.run(scenario())


def test_the_response_writer_sends_small_and_large_slices_of_an_object_file(file_env, monkeypatch):
    """A fetch's slice of an object file goes out like a local segment's: read and written
    with the bytes around it when small, with sendfile when large (the test's segments are
    small: the threshold is lowered to 1 KiB)."""
    monkeypatch.setattr(response_frame, "COALESCE_PART_BYTES", 1024)
    env = file_env
    _, remote = tiered(env)
    reader = env.rlm.reader
    small = reader.submit_fetch(env.tp, env.plog, remote[1].start_offset, 600).result(10)
    assert isinstance(small.records, FileSlice) and small.records.size < 1024
    file = small.records.records
    large = FileSlice(file, 0, file.size)
    assert large.size >= 1024
    frame = ResponseFrame((b"head", small.records, b"middle", large, b"tail"))
    expected = b"head" + small.records.read_bytes() + b"middle" + large.read_bytes() + b"tail"
    assert sent_over_a_socket(frame) == expected


def test_the_next_segments_file_is_checked_before_the_consumer_reaches_it(file_env):
    """A segment's first fetch would wait for its file's check (a pass over the whole
    file) on the pool; the check is done ahead, while the consumer reads the segment before,
    and that fetch is answered at once."""
    env = file_env
    _, remote = tiered(env)
    reader = env.rlm.reader
    offset = 0
    while offset < remote[1].start_offset:
        _, offset = whole(records_of(reader.submit_fetch(env.tp, env.plog, offset, 600).result(10)))
    wait_until(lambda: reader._pending == 0, 10, what="the check ahead done")
    answer = reader.submit_fetch(env.tp, env.plog, offset, 600)
    assert answer.done(), "the segment's first fetch waited for its file's check"
    assert isinstance(answer.result().records, FileSlice)


def test_a_corrupt_object_file_is_never_served(file_env, tmp_path):
    env = file_env
    _, remote = tiered(env)
    path = log_object(tmp_path / "bucket", remote[1])
    data = bytearray(path.read_bytes())
    data[HEADER_SIZE + 10] ^= 0xFF  # inside the first batch's records
    path.write_bytes(bytes(data))
    reader = env.rlm.reader
    with pytest.raises(CorruptObjectError, match="crc32c"):
        reader.submit_fetch(env.tp, env.plog, remote[1].start_offset, 600).result(10)
    # Not a fetch later, nor one from a later batch of the same object.
    later = remote[1].start_offset + 5
    with pytest.raises(CorruptObjectError):
        reader.submit_fetch(env.tp, env.plog, later, 600).result(10)
    # The other segments are served.
    assert records_of(reader.submit_fetch(env.tp, env.plog, 0, 600).result(10))


def test_an_object_file_changed_after_its_check_is_checked_again(file_env, tmp_path):
    env = file_env
    _, remote = tiered(env)
    reader = env.rlm.reader
    md = remote[1]
    first = reader.submit_fetch(env.tp, env.plog, md.start_offset, 600).result(10)
    _, next_offset = whole(records_of(first))
    path = log_object(tmp_path / "bucket", md)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # the last batch of the object
    path.write_bytes(bytes(data))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a newer mtime
    # The consumer's next fetch would have been answered at once from the checked file.
    with pytest.raises(CorruptObjectError):
        reader.submit_fetch(env.tp, env.plog, next_offset, 600).result(10)


def test_a_deleted_segment_is_not_served_from_its_file(file_env, tmp_path):
    env = file_env
    _, remote = tiered(env)
    reader = env.rlm.reader
    # A consumer in segment 1: its next fetch would be answered at once from the file.
    first = reader.submit_fetch(env.tp, env.plog, remote[1].start_offset, 300).result(10)
    _, next_offset = whole(records_of(first))
    assert next_offset is not None and next_offset <= remote[1].end_offset
    env.retain_only(remote[2:])
    assert env.expire() == 2
    with pytest.raises(OffsetOutOfRangeError):
        reader.submit_fetch(env.tp, env.plog, next_offset, 600).result(10)
    # An object removed from the bucket behind the broker's back is an error, not bytes.
    log_object(tmp_path / "bucket", remote[2]).unlink()
    with pytest.raises(RemoteResourceNotFoundError):
        reader.submit_fetch(env.tp, env.plog, remote[2].start_offset, 600).result(10)


def test_read_committed_fetches_from_the_file_carry_their_aborts(file_env):
    env = file_env
    produce(env.plog, 40, ts=T0)
    s1 = env.plog.segments()[1].base_offset
    env.plog.segments()[1].append_aborted_txn(AbortedTxn(7, s1, s1 + 3, s1 + 4))
    env.copy()
    env.plog.delete_old_segments()
    reader = env.rlm.reader
    sent = reader.submit_fetch(env.tp, env.plog, s1, 1 << 20, read_committed=True).result(10)
    assert isinstance(sent.records, FileSlice)
    memory = reader.fetch(env.tp, env.plog, s1, 1 << 20, read_committed=True)
    assert sent.aborted_txns == memory.aborted_txns
    assert (7, s1) in sent.aborted_txns
    assert records_of(sent) == memory.records


def test_encrypted_objects_are_read_into_memory(tmp_path):
    """With client-side encryption the file is ciphertext: fetches read and decrypt."""
    rsm = encrypted_rsm(tmp_path / "bucket", key_file(tmp_path))
    env = Env(tmp_path, rsm, tiered_config())
    try:
        expected, _ = tiered(env)
        answer = env.rlm.reader.submit_fetch(env.tp, env.plog, 0, 1 << 20).result(10)
        assert isinstance(answer.records, bytes)
        assert answer.records == expected[: len(answer.records)]
    finally:
        env.close()
