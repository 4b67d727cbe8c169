"""Optional dependencies: what the broker path imports, and the errors naming a missing extra.

A missing package is simulated with ``sys.modules[name] = None`` (Python's import then
raises ModuleNotFoundError, and ``importlib.util.find_spec`` answers None, as for a package
that is not installed). ``test_packaging`` checks the same with a real base install.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.extras import MissingExtraError, install_command, requires_extra
from tiered.api import RSM_CLASS_NAME, PluginLoadError, RemoteStorageManager, load_plugin
from tierlog.cli import main

EXTRAS_MODULES = (
    "pyspark", "pyarrow", "boto3", "botocore", "s3fs", "aiobotocore", "fsspec", "hdfs_native",
    "requests",
)  # fmt: skip

BROKER_PATH = """
import json, sys
from tierlog import cli
cli.build_parser()
import tierlog.assembly, tierlog.remote_tier, rsm_plugins.local, rlmm.manager
import tierlog.dump_log, tierlog.metadata_cmd, tierlog.groups_cmd, tierlog.export_cmd
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_the_broker_and_the_tools_import_no_optional_package() -> None:
    out = subprocess.run(
        [sys.executable, "-c", BROKER_PATH], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(out.stdout))
    assert sorted(loaded & set(EXTRAS_MODULES)) == []


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """``without("boto3", reimport="rsm_plugins.s3")``: boto3 is "not installed" and the
    module that imports it is imported afresh."""

    def block(*modules: str, reimport: tuple[str, ...] = ()) -> None:
        for name in modules:
            # Submodules too: an import of an already loaded ``pkg.sub`` skips ``pkg``.
            loaded = [m for m in sys.modules if m.startswith(f"{name}.")]
            for blocked in (name, *loaded):
                monkeypatch.setitem(sys.modules, blocked, None)
        for name in reimport:
            if name in sys.modules:
                monkeypatch.delitem(sys.modules, name)

    yield block


def test_requires_extra_names_the_pip_command() -> None:
    with pytest.raises(MissingExtraError) as raised, requires_extra("s3", "the thing"):
        import tierlog_no_such_module  # noqa: F401
    assert str(raised.value) == (
        "the thing needs tierlog_no_such_module, which is not installed: pip install 'tierlog[s3]'"
    )
    assert raised.value.name == "tierlog_no_such_module"
    assert isinstance(raised.value, ModuleNotFoundError)
    assert install_command("hdfs") == "pip install 'tierlog[hdfs]'"


def test_the_s3_plugin_without_boto3_names_the_s3_extra(without) -> None:
    without("boto3", "botocore", reimport=("rsm_plugins.s3",))
    with pytest.raises(PluginLoadError) as raised:
        load_plugin(
            "rsm_plugins.s3.S3RemoteStorageManager", RemoteStorageManager, key=RSM_CLASS_NAME
        )
    message = str(raised.value)
    assert message.startswith(
        "remote.log.storage.manager.class.name=rsm_plugins.s3.S3RemoteStorageManager: "
        "cannot import rsm_plugins.s3: "
    )
    assert message.endswith("needs boto3, which is not installed: pip install 'tierlog[s3]'")


def test_the_fsspec_plugin_without_fsspec_names_the_hdfs_extra(without) -> None:
    without("fsspec", reimport=("rsm_plugins.fsspec",))
    with pytest.raises(PluginLoadError, match=r"pip install 'tierlog\[hdfs\]'$"):
        load_plugin(
            "rsm_plugins.fsspec.FsspecRemoteStorageManager",
            RemoteStorageManager,
            key=RSM_CLASS_NAME,
        )


def test_a_plugin_module_that_does_not_exist_is_named() -> None:
    with pytest.raises(PluginLoadError) as raised:
        load_plugin("rsm_plugins.nosuch.Plugin", RemoteStorageManager, key=RSM_CLASS_NAME)
    assert str(raised.value) == (
        "remote.log.storage.manager.class.name=rsm_plugins.nosuch.Plugin: cannot import "
        "rsm_plugins.nosuch: No module named 'rsm_plugins.nosuch'"
    )


@pytest.mark.parametrize(
    ("blocked", "module"),
    [("pyarrow", "spark_jobs.archive"), ("pyspark", "spark_jobs.datasource")],
)
def test_the_spark_jobs_without_their_packages_name_the_spark_extra(
    without, blocked: str, module: str
) -> None:
    without(blocked, reimport=("spark_jobs.archive", "spark_jobs.datasource", "spark_jobs.export"))
    with pytest.raises(MissingExtraError, match=r"pip install 'tierlog\[spark\]'$"):
        __import__(module)


def test_export_with_a_plugin_whose_extra_is_missing_names_it_before_spark_starts(
    without, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import spark_jobs.export

    def no_spark(*args: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(spark_jobs.export, "spark_session", no_spark)
    without("boto3", "botocore", reimport=("rsm_plugins.s3",))
    config = tmp_path / "server.properties"
    config.write_text(
        "remote.log.storage.manager.class.name=rsm_plugins.s3.S3RemoteStorageManager\n"
        "rsm.config.storage.s3.bucket.name=archive\n"
    )
    argv = ["export", "--config", str(config), "--topic", "t", "--output", str(tmp_path / "out")]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("tierlog: error: remote.log.storage.manager.class.name=")
    assert err[0].endswith("pip install 'tierlog[s3]'")
