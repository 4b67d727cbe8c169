"""RemoteIndexCache: parsing, size-weighted LRU eviction, restart cleanup."""

from __future__ import annotations

import struct

from tiered.remote_index_cache import (
    DIR_NAME,
    OffsetIndexView,
    RemoteIndexCache,
    TimeIndexView,
)

from .harness import produce


def test_index_views_parse_kafka_entries_and_ignore_a_zero_tail():
    data = struct.pack(">iiiiii", 0, 0, 5, 300, 9, 700) + bytes(16)
    view = OffsetIndexView.parse(100, data)
    assert view.relatives == [0, 5, 9]
    assert view.lookup(100) == 0 and view.lookup(104) == 0
    assert view.lookup(105) == 300 and view.lookup(200) == 700 and view.lookup(99) == 0
    times = TimeIndexView.parse(100, struct.pack(">qiqi", 1000, 3, 2000, 8) + bytes(12))
    assert times.timestamps == [1000, 2000]
    assert times.lookup(999) == 100 and times.lookup(1500) == 103 and times.lookup(5000) == 108


def tiered(env):
    produce(env.plog, 40)
    env.copy()
    env.plog.delete_old_segments()
    return sorted(env.segments(), key=lambda m: m.start_offset)


def test_eviction_is_lru_by_bytes_and_deletes_files(env, memory_rsm):
    remote = tiered(env)
    one = len(memory_rsm.objects[(remote[0].segment_id, "index")]) + len(
        memory_rsm.objects[(remote[0].segment_id, "timeindex")]
    )
    cache = RemoteIndexCache(env.tmp_path / "c", memory_rsm, max_bytes=int(one * 2.5))
    cache.offset_index(remote[0])
    cache.offset_index(remote[1])
    cache.offset_index(remote[0])  # now most recently used
    cache.offset_index(remote[2])  # evicts remote[1]
    assert remote[0].segment_id in cache and remote[2].segment_id in cache
    assert remote[1].segment_id not in cache
    files = {p.name for p in (env.tmp_path / "c" / DIR_NAME).iterdir()}
    assert not any(str(remote[1].segment_id) in f for f in files)
    assert len(files) == 6  # .index, .timeindex, .txnindex (empty: no aborts) of two
    fetched = memory_rsm.index_fetches
    cache.time_index(remote[0])
    assert memory_rsm.index_fetches == fetched  # a hit


def test_restart_after_a_crash_drops_the_cache(env, memory_rsm):
    # Cache files are not fsynced: after a crash (no close()) none of them is trusted.
    remote = tiered(env)
    # From inside the segment: a read from its first offset starts at byte 0 without indexes.
    env.rlm.read_remote(env.tp, env.plog, remote[0].start_offset + 1, 100)
    directory = env.tmp_path / "logs" / DIR_NAME
    assert any(directory.iterdir())
    cache = RemoteIndexCache(env.tmp_path / "logs", memory_rsm, 1 << 20)
    assert len(cache) == 0 and not any(directory.iterdir())
    fetched = memory_rsm.index_fetches
    assert cache.lookup_position(remote[0], remote[0].start_offset) == 0
    assert memory_rsm.index_fetches > fetched  # downloaded again


def test_restart_removes_leftovers_and_keeps_complete_entries(env, memory_rsm):
    remote = tiered(env)
    # From inside the segment: a read from its first offset starts at byte 0 without indexes.
    env.rlm.read_remote(env.tp, env.plog, remote[0].start_offset + 1, 100)
    env.rlm.index_cache.close()  # a clean shutdown
    directory = env.tmp_path / "logs" / DIR_NAME
    (directory / "00000000000000000000_junk.index.tmp").write_bytes(b"x")
    half = directory / f"{remote[1].start_offset:020d}_{remote[1].segment_id}.index"
    half.write_bytes(b"\0" * 8)
    fetched = memory_rsm.index_fetches
    cache = RemoteIndexCache(env.tmp_path / "logs", memory_rsm, 1 << 20)
    names = {p.name for p in directory.iterdir()}
    assert not any(n.endswith(".tmp") for n in names)
    assert half.name not in names
    assert len(cache) == 1
    assert cache.lookup_position(remote[0], remote[0].start_offset) == 0
    assert memory_rsm.index_fetches == fetched  # read from disk, not fetched again


def test_reads_use_the_cache(env, memory_rsm):
    remote = tiered(env)
    # From inside the segment: a read from its first offset starts at byte 0 without indexes.
    env.rlm.read_remote(env.tp, env.plog, remote[0].start_offset + 1, 100)
    fetched = memory_rsm.index_fetches
    for offset in range(remote[0].start_offset, remote[0].end_offset + 1):
        env.rlm.read_remote(env.tp, env.plog, offset, 100)
    assert memory_rsm.index_fetches == fetched
