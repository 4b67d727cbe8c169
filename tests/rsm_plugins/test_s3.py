"""The RSM contract against S3RemoteStorageManager over a real S3 HTTP endpoint.

moto's server on 127.0.0.1, started by the ``s3_endpoint`` fixture, or LocalStack (or any
S3) when ``TIERLOG_S3_ENDPOINT`` is set. Each test gets its own bucket.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from rsm_plugins.s3 import S3RemoteStorageManager, _parse_timestamp
from tiered.api import (
    IndexType,
    RemoteResourceNotFoundError,
    RetriableRemoteStorageError,
    TopicIdPartition,
)

from .contract import KEY_PREFIX, MakeRsm, RemoteStorageManagerContract
from .segment_files import SegmentFiles

MIB = 1024 * 1024


class BucketBackdoor:
    def __init__(self, client: Any, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    def read(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None

    def write(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def all_keys(self) -> set[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
        return {o["Key"] for page in pages for o in page.get("Contents", [])}


@pytest.fixture
def bucket(s3_endpoint: Any) -> str:
    name = f"tierlog-{uuid.uuid4().hex[:12]}"
    s3_endpoint.create_bucket(name)
    return name


@pytest.fixture
def s3_client(s3_endpoint: Any) -> Iterator[Any]:
    client = s3_endpoint.client()
    yield client
    client.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TestS3(RemoteStorageManagerContract):
    @pytest.fixture
    def make_rsm(self, s3_endpoint: Any, bucket: str) -> Iterator[MakeRsm]:
        made: list[S3RemoteStorageManager] = []

        def make(overrides: Mapping[str, str] | None = None) -> S3RemoteStorageManager:
            plugin = S3RemoteStorageManager()
            plugin.configure({**s3_endpoint.rsm_configs(bucket, KEY_PREFIX), **(overrides or {})})
            made.append(plugin)
            return plugin

        yield make
        for plugin in made:
            plugin.close()

    @pytest.fixture
    def backdoor(self, s3_client: Any, bucket: str) -> BucketBackdoor:
        return BucketBackdoor(s3_client, bucket)

    @pytest.fixture
    def invalid_settings(self, s3_endpoint: Any, bucket: str) -> list[tuple[dict[str, str], str]]:
        good = s3_endpoint.rsm_configs(bucket)
        without_bucket = {k: v for k, v in good.items() if k != "storage.s3.bucket.name"}
        return [
            (without_bucket, "rsm.config.storage.s3.bucket.name"),
            ({**good, "storage.s3.bucket.name": "no-such-bucket-here"},
             "rsm.config.storage.s3.bucket.name"),
            ({**good, "storage.s3.endpoint.url": f"http://127.0.0.1:{_closed_port()}"},
             "rsm.config.storage.s3.endpoint.url"),
            ({**good, "storage.s3.multipart.upload.part.size": "1024"},
             "rsm.config.storage.s3.multipart.upload.part.size"),
            ({**good, "storage.s3.storage.class": "COLD"}, "rsm.config.storage.s3.storage.class"),
            ({k: v for k, v in good.items() if k != "storage.aws.secret.access.key"},
             "rsm.config.storage.aws.secret.access.key"),
            ({**good, "storage.s3.sse.kms.key.id": "k"}, "rsm.config.storage.s3.sse.kms.key.id"),
        ]  # fmt: skip

    # -- S3-specific ----------------------------------------------------------------------------

    @pytest.fixture
    def big_segment(self, segments: list[SegmentFiles], tmp_path) -> SegmentFiles:
        """A segment whose .log spans several 5 MiB parts (the log's bytes repeated)."""
        seg = segments[1]
        data = seg.log_bytes()
        big = tmp_path / "big.log"
        with big.open("wb") as f:
            for _ in range(12 * MIB // len(data) + 1):
                f.write(data)
        return SegmentFiles(
            data=seg.data.__class__(
                big, seg.data.offset_index, seg.data.time_index, None,
                seg.data.producer_snapshot_index, seg.data.leader_epoch_index,
            ),
            start_offset=seg.start_offset,
            end_offset=seg.end_offset,
            max_timestamp_ms=seg.max_timestamp_ms,
            size=big.stat().st_size,
            leader_epochs=seg.leader_epochs,
        )  # fmt: skip

    def test_multipart_upload_of_a_large_log(self, make_rsm, big_segment, s3_client, bucket):
        rsm = make_rsm({"storage.s3.multipart.upload.part.size": str(5 * MIB)})
        tp = TopicIdPartition(uuid.uuid4(), "big", 0)
        md = big_segment.metadata(tp)
        rsm.copy_log_segment_data(md, big_segment.data)
        data = big_segment.log_bytes()
        with rsm.fetch_log_segment(md, 0) as f:
            assert f.read() == data
        start, end = 5 * MIB - 100, 10 * MIB + 100  # across part boundaries
        with rsm.fetch_log_segment(md, start, end) as f:
            assert f.read() == data[start:end]
        assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    def test_storage_class_and_encryption_are_applied(self, make_rsm, segments, s3_client, bucket):
        rsm = make_rsm(
            {"storage.s3.storage.class": "STANDARD_IA", "storage.s3.sse.algorithm": "AES256"}
        )
        md = segments[1].metadata(TopicIdPartition(uuid.uuid4(), "sc", 0))
        rsm.copy_log_segment_data(md, segments[1].data)
        key = next(
            o["Key"]
            for o in s3_client.list_objects_v2(Bucket=bucket)["Contents"]
            if o["Key"].endswith(".index")
        )
        head = s3_client.head_object(Bucket=bucket, Key=key)
        assert head.get("StorageClass") == "STANDARD_IA"
        assert head.get("ServerSideEncryption") == "AES256"
        with rsm.fetch_index(md, IndexType.OFFSET) as f:
            assert f.read() == segments[1].data.offset_index.read_bytes()

    def test_delete_aborts_an_abandoned_multipart_upload(
        self, rsm, copied, s3_client, bucket, backdoor
    ):
        md, _ = copied
        log_key = next(k for k in self.segment_keys(backdoor, md) if k.endswith(".log"))
        s3_client.create_multipart_upload(Bucket=bucket, Key=log_key)
        rsm.delete_log_segment_data(md)
        assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    def test_a_failed_upload_aborts_its_multipart_upload(
        self, make_rsm, big_segment, s3_client, bucket
    ):
        rsm = make_rsm(
            {
                "storage.s3.multipart.upload.part.size": str(5 * MIB),
                "storage.s3.retry.max.attempts": "1",
            }
        )
        events = rsm.store.client.meta.events
        started: list[str] = []
        events.register(
            "after-call.s3.CreateMultipartUpload",
            lambda parsed, **_: started.append(parsed["UploadId"]),
        )

        def fail_the_third_part(params, **_):
            if params["PartNumber"] == 3:
                raise EndpointConnectionError(endpoint_url="http://injected")

        events.register("before-parameter-build.s3.UploadPart", fail_the_third_part)
        md = big_segment.metadata(TopicIdPartition(uuid.uuid4(), "big", 0))
        with pytest.raises(RetriableRemoteStorageError, match="injected"):
            rsm.copy_log_segment_data(md, big_segment.data)
        assert len(started) == 1  # the failure came mid-upload
        assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    # -- ranged reads by presigned URL ----------------------------------------------------------

    @pytest.fixture
    def an_object(self, s3_client, bucket) -> bytes:
        data = bytes(range(256)) * (3 * MIB // 256) + b"tail-bytes"
        s3_client.put_object(Bucket=bucket, Key="obj", Body=data)
        return data

    @staticmethod
    def get_object_calls(rsm: S3RemoteStorageManager) -> list[str]:
        calls: list[str] = []
        rsm.store.client.meta.events.register(
            "before-call.s3.GetObject",
            lambda params, **_: calls.append(params["headers"].get("Range", "")),
        )
        return calls

    def test_ranged_reads_go_by_presigned_url_and_return_the_same_bytes(self, make_rsm, an_object):
        rsm = make_rsm()
        calls = self.get_object_calls(rsm)
        size = len(an_object)
        for start, end in [(0, MIB), (MIB, 2 * MIB + 5), (size - 10, size), (size - 4, size + 9)]:
            with rsm.store.get_range("obj", start, end) as f:
                assert f.read() == an_object[start:end]
        assert calls == []  # no get_object call: each range was one GET of the URL

    def test_a_range_past_the_end_and_a_missing_object_answer_as_the_ordinary_call(
        self, make_rsm, an_object
    ):
        rsm = make_rsm()
        calls = self.get_object_calls(rsm)
        size = len(an_object)
        with rsm.store.get_range("obj", size + 5, size + 50) as f:
            assert f.read() == b""
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.store.get_range("no-such-object", 0, 100)
        assert len(calls) == 2  # each refused URL GET fell back to get_object

    def test_a_url_that_stops_working_falls_back_and_is_presigned_again(
        self, make_rsm, an_object, monkeypatch
    ):
        rsm = make_rsm()
        client = rsm.store.client
        presign = client.generate_presigned_url
        presigned: list[str] = []

        def first_one_broken(method: str, Params: dict, **kwargs: Any) -> str:
            presigned.append(Params["Key"])
            if len(presigned) == 1:  # as a URL whose credentials expired: refused
                Params = {**Params, "Key": "no-such-object"}
            return presign(method, Params=Params, **kwargs)

        monkeypatch.setattr(client, "generate_presigned_url", first_one_broken)
        calls = self.get_object_calls(rsm)
        for start in (0, 100, 200):
            with rsm.store.get_range("obj", start, start + 50) as f:
                assert f.read() == an_object[start : start + 50]
        assert calls == ["bytes=0-49"]  # the refused GET went the ordinary way, once
        assert presigned == ["obj", "obj"]  # then a new URL, used for the next reads

    def test_a_store_that_refuses_every_url_is_read_the_ordinary_way_after_a_few(
        self, make_rsm, an_object, monkeypatch, caplog
    ):
        """An S3-compatible store (or a proxy) without query authentication refuses every
        URL GET, which the ordinary call then serves: after a few such refusals in a row,
        reads stop trying the URL (one request per read, not two) and the log says so."""
        from rsm_plugins import s3 as s3_module

        rsm = make_rsm()
        client = rsm.store.client
        presign = client.generate_presigned_url

        def always_broken(method: str, Params: dict, **kwargs: Any) -> str:
            return presign(method, Params={**Params, "Key": "no-such-object"}, **kwargs)

        monkeypatch.setattr(client, "generate_presigned_url", always_broken)
        calls = self.get_object_calls(rsm)
        refusals = s3_module.PRESIGNED_REFUSALS_BEFORE_PAUSE
        with caplog.at_level("WARNING", logger="rsm_plugins.s3"):
            for start in range(refusals + 3):
                with rsm.store.get_range("obj", start, start + 10) as f:
                    assert f.read() == an_object[start : start + 10]
        assert len(calls) == refusals + 3  # every read served by get_object
        assert "refused and then served by GetObject" in caplog.text
        urls_tried = []
        monkeypatch.setattr(
            client, "generate_presigned_url", lambda *a, **k: urls_tried.append(a) or ""
        )
        with rsm.store.get_range("obj", 0, 10) as f:
            assert f.read() == an_object[:10]
        assert urls_tried == [], "the URL path was tried again during the pause"


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-24T10:00:00.000Z",  # a listing's LastModified
        "2026-11-24T10:00:00Z",
        "2026-11-24T10:00:00.123456+02:00",
        "Tue, 24 Nov 2026 10:00:00 GMT",  # a response header's Last-Modified
        "Tue, 24 Nov 2026 10:00:00 -0000",  # RFC 2822's "no zone": UTC, as botocore says
        "Tue, 24 Nov 2026 11:00:00 +0100",
        "1795568117",  # epoch seconds: botocore's parser
    ],
)
def test_answer_timestamps_parse_as_botocore_parses_them(text: str) -> None:
    import botocore.utils

    parsed, expected = _parse_timestamp(text), botocore.utils.parse_timestamp(text)
    assert parsed == expected and parsed.utcoffset() == expected.utcoffset()
