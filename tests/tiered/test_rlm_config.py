"""RemoteLogManagerConfig: KIP-405's old key names are read as Kafka's, with a warning."""

from __future__ import annotations

import logging

import pytest

from tiered.rlm_config import RemoteLogManagerConfig


def test_the_index_cache_size_in_mb_is_read_in_bytes_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="tiered.rlm_config"):
        config = RemoteLogManagerConfig.from_props(
            {"remote.log.index.file.cache.total.size.mb": "64"}
        )
    assert config.remote_log_index_file_cache_total_size_bytes == 64 * 1024 * 1024
    (record,) = caplog.records
    message = record.getMessage()
    assert "remote.log.index.file.cache.total.size.mb is deprecated" in message
    assert "use remote.log.index.file.cache.total.size.bytes" in message


def test_the_retry_interval_is_read_as_the_retry_backoff(caplog):
    with caplog.at_level(logging.WARNING, logger="tiered.rlm_config"):
        config = RemoteLogManagerConfig.from_props(
            {"remote.log.manager.task.retry.interval.ms": "250"}
        )
    assert config.remote_log_manager_task_retry_backoff_ms == 250
    assert "use remote.log.manager.task.retry.backoff.ms" in caplog.text


def test_when_both_names_are_set_the_new_one_wins_and_the_old_is_named(caplog):
    with caplog.at_level(logging.WARNING, logger="tiered.rlm_config"):
        config = RemoteLogManagerConfig.from_props(
            {
                "remote.log.index.file.cache.total.size.mb": "64",
                "remote.log.index.file.cache.total.size.bytes": "1000",
            }
        )
    assert config.remote_log_index_file_cache_total_size_bytes == 1000
    assert "remote.log.index.file.cache.total.size.mb is deprecated and ignored" in caplog.text


def test_a_bad_old_value_names_the_old_key():
    with pytest.raises(ValueError, match=r"remote\.log\.index\.file\.cache\.total\.size\.mb"):
        RemoteLogManagerConfig.from_props({"remote.log.index.file.cache.total.size.mb": "0"})
    with pytest.raises(ValueError, match=r"remote\.log\.manager\.task\.retry\.interval\.ms"):
        RemoteLogManagerConfig.from_props({"remote.log.manager.task.retry.interval.ms": "soon"})
    with pytest.raises(ValueError, match=r"total\.size\.mb: .*would exceed"):
        RemoteLogManagerConfig.from_props({"remote.log.index.file.cache.total.size.mb": str(2**62)})


def test_the_old_names_are_keys_the_remote_tier_accepts():
    keys = RemoteLogManagerConfig.keys()
    assert "remote.log.index.file.cache.total.size.mb" in keys
    assert "remote.log.manager.task.retry.interval.ms" in keys
    assert "remote.partition.remover.task.interval.ms" in keys
