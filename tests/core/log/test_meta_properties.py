import base64
from pathlib import Path

import pytest

from core.errors import InvalidMetaPropertiesError, LogDirNotUsableError
from core.log import meta_properties
from core.log.meta_properties import MetaProperties

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"
DIR_ID = "AAECAwQFBgcICQoLDA0ODw"  # bytes 0..15


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "meta.properties"


def test_random_directory_id_is_22_char_uuid_without_leading_dash() -> None:
    for _ in range(200):
        text = meta_properties.random_directory_id()
        assert len(text) == 22 and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16


def test_write_bytes(path: Path) -> None:
    meta_properties.write(path, MetaProperties(node_id=3, cluster_id=CLUSTER, directory_id=DIR_ID))
    assert path.read_bytes() == (
        b"#\n#Written by tierlog\nversion=1\nnode.id=3\n"
        b"cluster.id=MkU3OEVBNTcwNTJENDM2Qk\ndirectory.id=AAECAwQFBgcICQoLDA0ODw\n"
    )
    assert meta_properties.read(path) == MetaProperties(3, CLUSTER, DIR_ID)


def test_read_file_written_by_kafka(path: Path) -> None:
    # Java's Properties.store: an empty comment, the date, keys in hash order.
    path.write_bytes(
        b"#\n#Tue Nov 21 10:00:00 UTC 2023\nnode.id=1\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\n"
        b"version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n"
    )
    assert meta_properties.read(path) == MetaProperties(
        node_id=1, cluster_id=CLUSTER, directory_id="J8aAPcfLQt2bqs1JT_rMgQ"
    )


def test_read_accepts_java_properties_syntax(path: Path) -> None:
    path.write_bytes(b"! bang comment\n  version : 1\nnode.id   7\ncluster.id = abc\\\n   def\n")
    assert meta_properties.read(path) == MetaProperties(node_id=7, cluster_id="abcdef")


def test_zookeeper_era_file_reads_as_version_0(path: Path) -> None:
    path.write_bytes(b"#\nversion=0\nbroker.id=5\ncluster.id=x\n")
    mp = meta_properties.read(path)
    assert mp == MetaProperties(node_id=5, cluster_id="x", version=0)
    with pytest.raises(InvalidMetaPropertiesError, match="version 0"):
        meta_properties.check_matches(path.parent, mp, node_id=5)


def test_missing_file_reads_none(path: Path) -> None:
    assert meta_properties.read(path) is None


@pytest.mark.parametrize(
    ("content", "key"),
    [
        (b"version=1\ncluster.id=c\n", "node.id"),
        (b"version=1\nnode.id=x1\ncluster.id=c\n", "node.id"),
        (b"version=1\nnode.id=1\n", "cluster.id"),
        (b"version=1\nnode.id=1\ncluster.id=c\ndirectory.id=nope\n", "directory.id"),
        (b"version=2\nnode.id=1\ncluster.id=c\n", "version"),
    ],
)
def test_malformed_file_error_names_file_and_key(path: Path, content: bytes, key: str) -> None:
    path.write_bytes(content)
    with pytest.raises(InvalidMetaPropertiesError) as info:
        meta_properties.read(path)
    assert str(path) in str(info.value) and key in str(info.value)


def test_check_matches_rejects_other_node_naming_dir(tmp_path: Path) -> None:
    mp = MetaProperties(node_id=1, cluster_id=CLUSTER)
    meta_properties.check_matches(tmp_path, mp, node_id=1, cluster_id=CLUSTER)
    with pytest.raises(LogDirNotUsableError) as info:
        meta_properties.check_matches(tmp_path, mp, node_id=2)
    assert str(tmp_path) in str(info.value)
    assert "node.id 1" in str(info.value) and "node.id 2" in str(info.value)


def test_check_matches_rejects_other_cluster(tmp_path: Path) -> None:
    mp = MetaProperties(node_id=1, cluster_id=CLUSTER)
    with pytest.raises(InvalidMetaPropertiesError, match="another cluster"):
        meta_properties.check_matches(tmp_path, mp, node_id=1, cluster_id="other")


def test_meta_properties_validates_fields() -> None:
    with pytest.raises(ValueError):
        MetaProperties(node_id=1, cluster_id="")
    with pytest.raises(ValueError):
        MetaProperties(node_id=1 << 31, cluster_id="c")
    with pytest.raises(ValueError):
        MetaProperties(node_id=1, cluster_id="c", directory_id="short")
