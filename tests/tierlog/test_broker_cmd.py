"""``tierlog broker start`` helpers: the warning about world-readable files with secrets."""

from __future__ import annotations

import logging
from pathlib import Path

from tierlog.broker_cmd import secret_keys, warn_if_secrets_are_world_readable


def test_secret_keys_are_found_by_declaration_and_by_name():
    keys = [
        "ssl.key.password",
        "listener.name.sasl_ssl.plain.sasl.jaas.config",
        "rsm.config.storage.aws.secret.access.key",
        "log.dirs",
        "ssl.keystore.location",
    ]
    assert secret_keys(keys) == [
        "listener.name.sasl_ssl.plain.sasl.jaas.config",
        "rsm.config.storage.aws.secret.access.key",
        "ssl.key.password",
    ]


def test_a_world_readable_file_with_secrets_is_warned_about_without_values(tmp_path: Path, caplog):
    path = tmp_path / "server.properties"
    path.write_text('log.dirs=/data\nsasl.jaas.config=x required user_a="hunter2";\n')
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        assert warn_if_secrets_are_world_readable(path)
    assert "sasl.jaas.config" in caplog.text and "chmod 600" in caplog.text
    assert "hunter2" not in caplog.text
    path.chmod(0o600)
    assert not warn_if_secrets_are_world_readable(path)
    plain = tmp_path / "plain.properties"
    plain.write_text("log.dirs=/data\n")
    plain.chmod(0o644)
    assert not warn_if_secrets_are_world_readable(plain)


def test_the_inert_keys_a_config_sets_are_logged_in_one_line(tmp_path: Path, caplog):
    from core.server.config import load_broker_config
    from tierlog.broker_cmd import log_inert_keys

    path = tmp_path / "server.properties"
    path.write_text("num.io.threads=16\nnum.partitions=3\nnum.network.threads=8\n")
    config = load_broker_config(path, {"replica.lag.time.max.ms": "10000"})
    with caplog.at_level(logging.INFO, logger="tierlog.broker"):
        log_inert_keys(config)
    lines = [r.getMessage() for r in caplog.records if "no effect" in r.getMessage()]
    assert lines == ["accepted with no effect in tierlog: num.io.threads, num.network.threads"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tierlog.broker"):
        log_inert_keys(load_broker_config(None, {"num.partitions": "2"}))
    assert not [r for r in caplog.records if "no effect" in r.getMessage()]


def test_tiered_storage_in_a_cluster_stops_start_up_naming_both_keys(tmp_path: Path):
    import subprocess
    import sys

    # Refused before the broker opens anything (ZooKeeper is not even asked).
    result = subprocess.run(
        [sys.executable, "-m", "tierlog", "broker", "start",
         "--set", f"log.dirs={tmp_path / 'data'}",
         "--set", "zookeeper.connect=127.0.0.1:9/none",
         "--set", "remote.log.storage.system.enable=true",
         "--set", "listeners=PLAINTEXT://127.0.0.1:0"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "remote.log.storage.system.enable=true with zookeeper.connect" in result.stderr
    assert not (tmp_path / "data").exists()
