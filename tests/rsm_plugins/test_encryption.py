"""Client-side encryption of remote objects (rsm.config.encryption.*): reads are identical,
ranged reads open only their chunks, nothing readable rests in the bucket, and a modified
object or a wrong key is refused, never served."""

from __future__ import annotations

import base64
import io
import json
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rsm_plugins.encryption import CHUNK_SIZE, EncryptingStore
from rsm_plugins.layout import CorruptObjectError
from rsm_plugins.local import LocalDirRemoteStorageManager
from tiered.api import IndexType, RemoteStorageError, TopicIdPartition

TP = TopicIdPartition(uuid.UUID(int=7), "payments", 0)


def key_file(directory: Path, key: bytes | None = None) -> Path:
    path = directory / f"kek-{uuid.uuid4().hex[:6]}.b64"
    path.write_text(base64.b64encode(key or os.urandom(32)).decode())
    return path


def encrypted_rsm(root: Path, key_path: Path, key_id: str = "k1") -> LocalDirRemoteStorageManager:
    rsm = LocalDirRemoteStorageManager()
    rsm.configure(
        {
            "storage.root": str(root),
            "encryption.enabled": "true",
            "encryption.key.file": str(key_path),
            "encryption.key.id": key_id,
        }
    )
    return rsm


@pytest.fixture
def env(tmp_path, segments):
    kek = key_file(tmp_path)
    rsm = encrypted_rsm(tmp_path / "bucket", kek)
    seg = segments[0]  # has a transaction index
    md = seg.metadata(TP)
    rsm.copy_log_segment_data(md, seg.data)
    yield rsm, md, seg, tmp_path, kek
    rsm.close()


def objects(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_reads_are_identical_and_nothing_readable_rests_in_the_bucket(env) -> None:
    rsm, md, seg, tmp_path, _ = env
    plain = seg.log_bytes()
    with rsm.fetch_log_segment(md, 0) as f:
        assert f.read() == plain
    with rsm.fetch_index(md, IndexType.TRANSACTION) as f:
        assert f.read() == seg.data.transaction_index.read_bytes()
    stored = objects(tmp_path / "bucket")
    manifest = next(v for k, v in stored.items() if k.endswith(".manifest.json"))
    assert json.loads(manifest)  # plain JSON: the bucket can still be audited
    log_object = next(v for k, v in stored.items() if k.endswith(".log"))
    assert log_object.startswith(b"TLENC")
    # A record value written by segment_files must not appear in any stored object.
    sample = plain[-40:]
    assert all(sample not in v for k, v in stored.items() if not k.endswith(".json"))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_ranged_reads_across_chunks_match_the_plaintext(env, data) -> None:
    rsm, md, seg, _, _ = env
    plain = seg.log_bytes()
    start = data.draw(st.integers(0, len(plain) + 10))
    end = data.draw(st.one_of(st.none(), st.integers(start, len(plain) + 10)))
    with rsm.fetch_log_segment(md, start, end) as f:
        assert f.read() == plain[start:end]


def test_chunked_store_round_trips_sizes_around_chunk_boundaries(tmp_path) -> None:
    class Mem:
        def __init__(self) -> None:
            self.objects: dict[str, bytes] = {}

        def put_file(self, key, path):
            self.objects[key] = Path(path).read_bytes()
            return len(self.objects[key]), "0"

        def put_bytes(self, key, data):
            self.objects[key] = data

        def get_range(self, key, start, end):
            return io.BytesIO(self.objects[key][start:end])

        def get_bytes(self, key):
            return self.objects[key]

    store = EncryptingStore(Mem(), os.urandom(32), "k", lambda k: True, chunk_size=1000)
    for size in (0, 1, 999, 1000, 1001, 2000, 2500):
        data = os.urandom(size)
        store.put_bytes(f"b{size}", data)
        assert store.get_bytes(f"b{size}") == data
        path = tmp_path / f"f{size}"
        path.write_bytes(data)
        size_crc = store.put_file(f"f{size}", path)
        assert size_crc[0] == size
        assert store.get_range(f"f{size}", 0, None).read() == data
        assert store.get_range(f"f{size}", size // 2, size).read() == data[size // 2 :]


def test_a_modified_or_truncated_object_is_never_served(env) -> None:
    _, md, _, tmp_path, kek = env
    log_path = next(p for p in (tmp_path / "bucket").rglob("*.log"))
    original = log_path.read_bytes()
    tampered = bytearray(original)
    tampered[len(tampered) // 2] ^= 1
    log_path.write_bytes(bytes(tampered))
    fresh = encrypted_rsm(tmp_path / "bucket", kek)
    middle = (len(original) // 2) - 200
    with pytest.raises(CorruptObjectError):
        fresh.fetch_log_segment(md, 0).read()
    with pytest.raises(CorruptObjectError):
        fresh.fetch_log_segment(md, max(middle - CHUNK_SIZE, 0), middle + CHUNK_SIZE).read()
    log_path.write_bytes(original[: len(original) - 10])  # the last chunk cut short
    with pytest.raises(CorruptObjectError):
        encrypted_rsm(tmp_path / "bucket", kek).fetch_log_segment(md, 0).read()


def test_another_key_or_key_id_cannot_read(env) -> None:
    _, md, _, tmp_path, kek = env
    with pytest.raises(CorruptObjectError, match="does not unwrap"):
        encrypted_rsm(tmp_path / "bucket", key_file(tmp_path)).fetch_log_segment(md, 0).read()
    with pytest.raises(RemoteStorageError, match=r"encryption\.key\.id"):
        encrypted_rsm(tmp_path / "bucket", kek, key_id="k2").fetch_log_segment(md, 0, 10).read()


@pytest.mark.parametrize(
    ("content", "needle"),
    [(None, "rsm.config.encryption.key.file"), (b"short", "32"), (b"!!", "not base64")],
)
def test_bad_key_settings_name_the_setting(tmp_path, content, needle) -> None:
    rsm = LocalDirRemoteStorageManager()
    configs = {"storage.root": str(tmp_path / "b"), "encryption.enabled": "true"}
    if content is not None:
        path = tmp_path / "key"
        path.write_bytes(base64.b64encode(content) if content != b"!!" else content)
        configs["encryption.key.file"] = str(path)
    with pytest.raises(RemoteStorageError, match=needle) as caught:
        rsm.configure(configs)
    assert "rsm.config.encryption.key.file" in str(caught.value)


def test_listing_gives_the_plaintext_sizes_and_manifests_stay_plain(env) -> None:
    rsm, md, seg, tmp_path, _ = env
    manifest = rsm.manifest(md)
    listed = {i.key.rsplit("/", 1)[-1]: i for i in rsm.store.list_objects("")}
    for entry in manifest.objects.values():
        assert listed[entry.key].size == entry.size
    stored = {p.name: p.stat().st_size for p in (tmp_path / "bucket").rglob("*") if p.is_file()}
    log_name = next(n for n in stored if n.endswith(".log"))
    assert stored[log_name] > seg.size == listed[log_name].size  # the header and tags

    from rsm_plugins.layout import TopicManifest

    rsm.write_topic_manifest(TopicManifest(TP.topic_id, TP.topic, 2, {}, 1, 1))
    path = next((tmp_path / "bucket").rglob("topic-manifest.json"))
    assert json.loads(path.read_bytes())["partitions"] == 2  # readable without the key


def test_a_stored_size_no_plaintext_encrypts_to_is_listed_as_unknown(tmp_path) -> None:
    from rsm_plugins.local import LocalDirObjectStore

    inner = LocalDirObjectStore(tmp_path)
    store = EncryptingStore(inner, os.urandom(32), "k", lambda k: True, chunk_size=1000)
    store.put_bytes("a/x", b"x" * 2500)
    # Three sealed chunks of 1016, 1016 and 516 bytes; cut to a third chunk of 10 bytes,
    # shorter than its tag: no plaintext size gives that.
    inner.put_bytes("a/cut", (tmp_path / "a" / "x").read_bytes()[:-506])
    sizes = {i.key: i.size for i in store.list_objects("a/")}
    assert sizes["a/x"] == 2500
    assert sizes["a/cut"] is None
