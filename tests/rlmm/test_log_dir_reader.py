"""The offline reader of ``__remote_log_metadata`` and the directories rlmm keeps in a log dir."""

from __future__ import annotations

from core.log.files import REMOTE_LOG_INDEX_CACHE_DIR, REMOTE_LOG_METADATA_SNAPSHOTS_DIR
from rlmm import manager
from rlmm.topic_client import METADATA_TOPIC, LogDirMetadataTopicReader
from tiered import remote_index_cache


def test_only_whole_partition_directory_names_are_read(tmp_path):
    (tmp_path / f"{METADATA_TOPIC}-0").mkdir()
    (tmp_path / f"{METADATA_TOPIC}-1").mkdir()
    # Strays a "$"-anchored re.match or \d would take for partitions 7, 8 and 3.
    for stray in (f"{METADATA_TOPIC}-7\n", f"{METADATA_TOPIC}-08", f"{METADATA_TOPIC}-\u0663"):
        (tmp_path / stray).mkdir()
    reader = LogDirMetadataTopicReader([tmp_path])
    assert reader.partition_count() == 2


def test_directories_other_layers_keep_in_a_log_dir_are_the_ones_the_log_manager_skips():
    assert manager.RLMM_DIR == REMOTE_LOG_METADATA_SNAPSHOTS_DIR
    assert remote_index_cache.DIR_NAME == REMOTE_LOG_INDEX_CACHE_DIR
