"""``S3RemoteStorageManager``: segments as S3 objects, through boto3.

Settings (``rsm.config.`` stripped), named as in Aiven's tiered-storage plugin where it has
the setting (its S3 backend's keys live under ``storage.``):

==============================================  ===========  ================================
``storage.s3.bucket.name``                      required     the bucket; checked at configure
``storage.s3.region``                           boto3 chain  (``us-east-1`` with an endpoint)
``storage.s3.endpoint.url``                     AWS          e.g. ``http://127.0.0.1:4566``
``storage.s3.path.style.access.enabled``        auto         path-style addressing
``storage.s3.multipart.upload.part.size``       25 MiB       5 MiB .. 2 GiB
``storage.s3.storage.class``                    STANDARD     S3 storage class of new objects
``storage.aws.access.key.id``                   chain        static credentials (both or none)
``storage.aws.secret.access.key``               chain
``storage.aws.certificate.check.enabled``       true         TLS certificate verification
``storage.s3.api.call.attempt.timeout``         60000        ms per attempt (connect and read)
==============================================  ===========  ================================

tierlog's own (Aiven has no equivalent): ``storage.s3.multipart.upload.concurrency`` (4:
parts uploaded at once, shared by all copies, so at most concurrency x part size bytes are
buffered), ``storage.s3.retry.max.attempts`` (5, botocore "standard" retries: throttling,
5xx and connection errors), ``storage.s3.sse.algorithm`` (``AES256``, ``aws:kms`` or
``aws:kms:dsse``) and ``storage.s3.sse.kms.key.id``. Without static keys, credentials come
from boto3's usual chain (environment, profile, container or instance role).

What counts as missing: ``NoSuchKey``, ``NotFound`` and HTTP 404 on an object. Throttling
(``SlowDown``, ``Throttling``...), HTTP 5xx, timeouts and connection failures that outlive
botocore's retries are ``RetriableRemoteStorageError``; anything else is
``RemoteStorageError`` (a missing bucket or denied access is not "missing").
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import io
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Literal

from core.config import ConfigKey, ConfigType, at_least, between, one_of
from core.extras import requires_extra
from rsm_plugins.base import ObjectStoreRemoteStorageManager, require, setting
from rsm_plugins.layout import RunningChecksum
from rsm_plugins.store import ObjectInfo, ObjectStore, buffered
from tiered.api import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RetriableRemoteStorageError,
)

# boto3 comes with the s3 extra, not the base install: without it, loading this plugin
# fails at broker start-up naming the pip command.
with requires_extra("s3", "the S3 RemoteStorageManager (rsm_plugins.s3)"):
    import boto3
    import botocore.session
    import botocore.utils
    from boto3.s3.transfer import TransferConfig, create_transfer_manager
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.response import StreamingBody

BUCKET = "storage.s3.bucket.name"
REGION = "storage.s3.region"
ENDPOINT = "storage.s3.endpoint.url"
PATH_STYLE = "storage.s3.path.style.access.enabled"
PART_SIZE = "storage.s3.multipart.upload.part.size"
CONCURRENCY = "storage.s3.multipart.upload.concurrency"
STORAGE_CLASS = "storage.s3.storage.class"
ACCESS_KEY = "storage.aws.access.key.id"
SECRET_KEY = "storage.aws.secret.access.key"
CERT_CHECK = "storage.aws.certificate.check.enabled"
ATTEMPT_TIMEOUT = "storage.s3.api.call.attempt.timeout"
MAX_ATTEMPTS = "storage.s3.retry.max.attempts"
SSE_ALGORITHM = "storage.s3.sse.algorithm"
SSE_KMS_KEY = "storage.s3.sse.kms.key.id"

MIB = 1024 * 1024
STORAGE_CLASSES = (
    "STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING",
    "GLACIER", "DEEP_ARCHIVE", "OUTPOSTS", "GLACIER_IR", "SNOW", "EXPRESS_ONEZONE",
)  # fmt: skip

_MISSING_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_RETRIABLE_CODES = frozenset(
    {
        "SlowDown", "Throttling", "ThrottlingException", "RequestThrottled",
        "TooManyRequestsException", "RequestTimeout", "RequestTimeoutException",
        "InternalError", "ServiceUnavailable", "PriorRequestNotComplete",
    }
)  # fmt: skip


# Ranged GETs by presigned URL (``_PresignedReads``): how long a URL is valid, how long one
# is reused (well inside its validity, so clock skew and a slow read never meet the end), and
# how many objects' URLs are kept.
PRESIGNED_URL_EXPIRES_S = 900
PRESIGNED_URL_REUSE_S = 300
PRESIGNED_URL_CACHE_ENTRIES = 1024
# A store that refuses every URL GET that its ordinary call then serves (an S3-compatible
# store or a proxy without query authentication) would cost an extra request per read: after
# this many such refusals in a row, reads go the ordinary way for PRESIGNED_PAUSE_S.
PRESIGNED_REFUSALS_BEFORE_PAUSE = 8
PRESIGNED_PAUSE_S = 600.0

log = logging.getLogger(__name__)

_SESSION_LOCK = threading.Lock()
_SESSION: boto3.session.Session | None = None


def _parse_timestamp(value: str) -> datetime.datetime:
    """A timestamp of an S3 answer, as botocore's own parser gives it (an aware datetime).

    Listings carry one ISO 8601 ``LastModified`` per object (``2026-11-24T10:00:00.000Z``):
    the standard library parses those; botocore's default goes through dateutil, which was a
    quarter of ``tierlog restore``'s time listing 6,000 objects (docs/BENCHMARKS.md). Every
    GET's answer carries an RFC 1123 ``Last-Modified`` header (``Wed, 25 Nov 2026 07:43:07
    GMT``): dateutil took 0.2 ms of CPU for it, a tenth of a 1 MiB ranged GET's client
    time; ``email.utils`` parses it in 3 us. Anything else goes to botocore's parser."""
    if value[:4].isdigit() and value[4:5] == "-":
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
    elif value[:3].isalpha() and value[3:5] == ", ":
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            pass
        else:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
    return botocore.utils.parse_timestamp(value)


def _session() -> boto3.session.Session:
    """One boto3 session for every client (loading a session's data costs ~0.1 s), its
    answers' timestamps parsed by ``_parse_timestamp``."""
    global _SESSION  # noqa: PLW0603 - a lazily built, lock-guarded cache
    if _SESSION is None:
        core = botocore.session.get_session()
        parsers = core.get_component("response_parser_factory")
        parsers.set_parser_defaults(timestamp_parser=_parse_timestamp)
        _SESSION = boto3.session.Session(botocore_session=core)
    return _SESSION


def _convert(e: Exception, what: str) -> RemoteStorageError:
    """Our error for a boto3/botocore error; the caller raises it ``from e``."""
    if isinstance(e, ClientError):
        error = e.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        message = f"{what}: {code or status} {error.get('Message', '')}".rstrip()
        if code in _MISSING_CODES:
            return RemoteResourceNotFoundError(message)
        if code in _RETRIABLE_CODES or status >= 500 or status == 429:
            return RetriableRemoteStorageError(message)
        return RemoteStorageError(message)
    if isinstance(e, BotoConnectionError | HTTPClientError):
        return RetriableRemoteStorageError(f"{what}: {e}")
    return RemoteStorageError(f"{what}: {e}")


class _Body(io.RawIOBase):
    """A GET response body as a raw stream whose read errors are ours."""

    def __init__(self, body: Any, what: str) -> None:
        self._body = body
        self._what = what

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        try:
            data = self._body.read(len(view))
        except (BotoCoreError, OSError) as e:
            raise RetriableRemoteStorageError(f"{self._what}: read failed: {e}") from e
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


class _ChecksumOnFirstRead:
    """A file as the transfer manager reads it, with the size and CRC32C of its bytes.

    The manager reads a multipart upload's parts in order, and a single PUT's body once or
    more (botocore may read it for a checksum, then again to send it, and again on a
    retry): each byte counts once, when first read.
    """

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.checksum = RunningChecksum()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._f.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._f.seek(offset, whence)

    def read(self, size: int = -1) -> bytes:
        position = self._f.tell()
        data = self._f.read(size)
        seen = self.checksum.size
        if position <= seen < position + len(data):
            self.checksum.update(memoryview(data)[seen - position :])
        return data

    def close(self) -> None:
        """The manager closes the body it was given; the file is closed by its opener."""


class _PresignedReads:
    """Ranged GETs of objects through a presigned URL, sent on the client's own HTTP session.

    A ``get_object`` call costs about 1 ms of client CPU in botocore's per-request machinery
    (event hooks, parameter checks, endpoint rules, signing, response parsing) on top of the
    HTTP exchange: about half of a 1 MiB ranged GET's client CPU, and a remote fetch is one
    such GET per ``max.partition.fetch.bytes``. A URL presigned once per object (SigV4 query
    authentication signs the host alone, so every range of the object can use it) makes each
    GET the HTTP exchange alone, over the same connection pool, TLS settings, proxies and
    timeouts as the client's calls.

    Only a ``206 Partial Content`` answer whose ``Content-Range`` starts at the byte asked
    for is used. Anything else (an error status, a connection failure, credentials that
    expired under the URL) returns None and the caller makes the ordinary ``get_object``
    call, which retries and reports errors as every other call does; the URL is dropped
    then, and the next read presigns a new one. Thread-safe."""

    def __init__(self, client: Any, bucket: str) -> None:
        self._client = client
        self._bucket = bucket
        # The client's HTTP session (botocore's, with the client's pool and settings).
        self._http = getattr(getattr(client, "_endpoint", None), "http_session", None)
        self._lock = threading.Lock()
        self._urls: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._refusals = 0  # URL GETs refused in a row that the ordinary call then served
        self._paused_until = 0.0

    def get(self, key: str, start: int, end: int) -> tuple[Any, int] | Literal[False] | None:
        """(the urllib3 response, its length) of bytes ``[start, end)`` of ``key``; False
        when the URL GET was refused, None when none was tried (the caller then makes the
        ordinary call either way, and tells ``served_after_refusal`` when that one
        served what the URL GET refused)."""
        if self._http is None or time.monotonic() < self._paused_until:
            return None
        url = self._url(key)
        if url is None:
            return None
        request = AWSRequest(
            method="GET", url=url, headers={"Range": f"bytes={start}-{end - 1}"}, stream_output=True
        )
        try:
            response = self._http.send(request.prepare())
        except (BotoCoreError, OSError, ValueError):
            self._forget(key)
            return False
        content_range = response.headers.get("Content-Range", "")
        length = response.headers.get("Content-Length", "")
        if (
            response.status_code != 206
            or not content_range.startswith(f"bytes {start}-")
            or not length.isdigit()
        ):
            response.raw.close()
            self._forget(key)
            return False
        with self._lock:
            self._refusals = 0
        return response.raw, int(length)

    def served_after_refusal(self) -> None:
        """The ordinary call served a read whose URL GET was refused."""
        with self._lock:
            self._refusals += 1
            if self._refusals < PRESIGNED_REFUSALS_BEFORE_PAUSE:
                return
            self._refusals = 0
            self._paused_until = time.monotonic() + PRESIGNED_PAUSE_S
        log.warning(
            "s3://%s: %d ranged GETs by presigned URL in a row were refused and then served "
            "by GetObject; reads use GetObject alone for the next %.0f s",
            self._bucket,
            PRESIGNED_REFUSALS_BEFORE_PAUSE,
            PRESIGNED_PAUSE_S,
        )

    def _url(self, key: str) -> str | None:
        now = time.monotonic()
        with self._lock:
            held = self._urls.get(key)
            if held is not None and now - held[0] < PRESIGNED_URL_REUSE_S:
                self._urls.move_to_end(key)
                return held[1]
        try:
            url = self._client.generate_presigned_url(
                "get_object",
                Params={"Bucket": self._bucket, "Key": key},
                ExpiresIn=PRESIGNED_URL_EXPIRES_S,
            )
        except (BotoCoreError, ClientError, ValueError):
            return None  # e.g. no credentials: the ordinary call reports it
        with self._lock:
            self._urls[key] = (now, url)
            self._urls.move_to_end(key)
            while len(self._urls) > PRESIGNED_URL_CACHE_ENTRIES:
                self._urls.popitem(last=False)
        return url

    def _forget(self, key: str) -> None:
        with self._lock:
            self._urls.pop(key, None)


class S3ObjectStore(ObjectStore):
    """Objects in one bucket, uploaded through boto3's transfer manager: files of
    ``part_size`` or more go up as multipart uploads, their parts in parallel."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        *,
        part_size: int,
        concurrency: int,
        put_args: Mapping[str, str],
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.part_size = part_size
        self._put_args = dict(put_args)
        config = TransferConfig(
            multipart_threshold=part_size,
            multipart_chunksize=part_size,
            max_concurrency=concurrency,
            use_threads=True,  # parts in parallel; False would send them one by one
            preferred_transfer_client="classic",  # never the CRT client, whatever is installed
        )
        # Parts read but not yet sent, over all uploads: at most concurrency x part size bytes.
        config.max_in_memory_upload_chunks = concurrency
        # One manager for the store, not one per upload as ``client.upload_fileobj`` builds:
        # the concurrency and the memory bound hold over all the copies running at once. A
        # failed multipart upload is aborted by the manager.
        self._transfers = create_transfer_manager(client, config)
        self._presigned = _PresignedReads(client, bucket)

    def _call(self, what: str, method: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, method)(Bucket=self.bucket, **kwargs)
        except (ClientError, BotoCoreError) as e:
            raise _convert(e, f"{what} s3://{self.bucket}/{kwargs.get('Key', '')}") from e

    def put_bytes(self, key: str, data: bytes) -> None:
        self._call("put", "put_object", Key=key, Body=data, **self._put_args)

    def put_file(self, key: str, path: Path) -> tuple[int, str]:
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as e:
            raise RemoteStorageError(f"cannot read {path}: {e}") from e
        with f:
            body = _ChecksumOnFirstRead(f)
            try:
                self._transfers.upload(body, self.bucket, key, extra_args=self._put_args).result()
            except (ClientError, BotoCoreError) as e:
                raise _convert(e, f"upload s3://{self.bucket}/{key}") from e
            except OSError as e:
                raise RemoteStorageError(f"cannot read {path}: {e}") from e
            size = f.seek(0, os.SEEK_END)
        if body.checksum.size != size:  # the transfer manager read something out of order
            raise RemoteStorageError(
                f"upload s3://{self.bucket}/{key}: read {body.checksum.size} of {size} bytes "
                f"of {path} in order; the checksum is incomplete"
            )
        return body.checksum.result()

    def get_range(self, key: str, start: int, end: int | None) -> BinaryIO:
        if end == start:
            self._call("head", "head_object", Key=key)
            return io.BytesIO(b"")
        what = f"s3://{self.bucket}/{key}"
        fast = None if end is None else self._presigned.get(key, start, end)
        if fast:
            raw, length = fast
            return buffered(_Body(StreamingBody(raw, length), what))
        byte_range = f"bytes={start}-" if end is None else f"bytes={start}-{end - 1}"
        try:
            response = self._call("get", "get_object", Key=key, Range=byte_range)
        except RemoteStorageError as e:
            cause = e.__cause__
            if isinstance(cause, ClientError) and cause.response["Error"].get("Code") in (
                "InvalidRange",
                "416",
            ):
                self._call("head", "head_object", Key=key)  # past the end: nothing to read
                return io.BytesIO(b"")
            raise
        if fast is False:
            self._presigned.served_after_refusal()
        return buffered(_Body(response["Body"], what))

    def get_bytes(self, key: str) -> bytes:
        with self.get_range(key, 0, None) as f:
            return f.read()

    def delete(self, keys: list[str]) -> None:
        if not keys:
            return
        self._call("delete", "delete_object", Key=keys[0])
        rest = [{"Key": k} for k in keys[1:]]
        if rest:
            response = self._call(
                "delete", "delete_objects", Delete={"Objects": rest, "Quiet": True}
            )
            errors = [e for e in response.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                raise RemoteStorageError(f"delete from s3://{self.bucket}: {errors}")
        # A copy that died mid-upload leaves parts that cost money: abort them too.
        wanted = set(keys)
        prefix = os.path.commonprefix(keys)  # noqa: RUF071 - a key prefix, not a path
        uploads = self._call("list multipart uploads", "list_multipart_uploads", Prefix=prefix)
        for upload in uploads.get("Uploads", []):
            if upload["Key"] in wanted:
                with contextlib.suppress(RemoteResourceNotFoundError):
                    self._call(
                        "abort multipart upload",
                        "abort_multipart_upload",
                        Key=upload["Key"],
                        UploadId=upload["UploadId"],
                    )

    def exists(self, key: str) -> bool:
        try:
            self._call("head", "head_object", Key=key)
        except RemoteResourceNotFoundError:
            return False
        return True

    def list_keys(self, prefix: str) -> Iterator[str]:
        for info in self.list_objects(prefix):
            yield info.key

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    modified = item.get("LastModified")
                    yield ObjectInfo(
                        item["Key"],
                        int(item["Size"]),
                        None if modified is None else int(modified.timestamp() * 1000),
                    )
        except (ClientError, BotoCoreError) as e:
            raise _convert(e, f"list s3://{self.bucket}/{prefix}") from e

    def close(self) -> None:
        self._transfers.shutdown(cancel=True)
        self.client.close()


def _config_keys() -> tuple[ConfigKey, ...]:
    s, t = setting, ConfigType
    return (
        ConfigKey(s(BUCKET), t.STRING, None, "S3 bucket holding the segments (must exist)."),
        ConfigKey(s(REGION), t.STRING, None, "AWS region of the bucket."),
        ConfigKey(s(ENDPOINT), t.STRING, None, "Custom S3 endpoint URL (LocalStack, moto...)."),
        ConfigKey(s(PATH_STYLE), t.BOOLEAN, None, "Path-style addressing; unset: auto."),
        ConfigKey(
            s(PART_SIZE), t.INT, 25 * MIB, "Multipart upload part size in bytes.",
            between(5 * MIB, 2 * 1024 * MIB),
        ),
        ConfigKey(
            s(CONCURRENCY), t.INT, 4, "Parts uploaded in parallel (all copies together).",
            between(1, 64),
        ),
        ConfigKey(
            s(STORAGE_CLASS), t.STRING, "STANDARD", "Storage class of new objects.",
            one_of(*STORAGE_CLASSES),
        ),
        ConfigKey(s(ACCESS_KEY), t.PASSWORD, None, "AWS access key id (static credentials)."),
        ConfigKey(s(SECRET_KEY), t.PASSWORD, None, "AWS secret access key."),
        ConfigKey(s(CERT_CHECK), t.BOOLEAN, True, "Verify TLS certificates."),
        ConfigKey(
            s(ATTEMPT_TIMEOUT), t.LONG, 60_000, "Connect and read timeout of one attempt, ms.",
            at_least(1),
        ),
        ConfigKey(
            s(MAX_ATTEMPTS), t.INT, 5, "Attempts per call (botocore standard retries).",
            between(1, 20),
        ),
        ConfigKey(
            s(SSE_ALGORITHM), t.STRING, "", "Server-side encryption; empty: the bucket's default.",
            one_of("", "AES256", "aws:kms", "aws:kms:dsse"),
        ),
        ConfigKey(s(SSE_KMS_KEY), t.STRING, None, "KMS key id for aws:kms encryption."),
    )  # fmt: skip


class S3RemoteStorageManager(ObjectStoreRemoteStorageManager):
    """The RSM over an S3 bucket (``rsm.config.storage.s3.bucket.name``)."""

    CONFIG_KEYS = _config_keys()

    def create_store(self, values: Mapping[str, Any]) -> ObjectStore:
        bucket = require(values, BUCKET, "the S3 bucket holding the segments")
        endpoint = values[ENDPOINT] or None
        region = values[REGION] or ("us-east-1" if endpoint else None)
        access, secret = values[ACCESS_KEY], values[SECRET_KEY]
        if (access is None) != (secret is None):
            missing = SECRET_KEY if secret is None else ACCESS_KEY
            raise RemoteStorageError(
                f"Missing required configuration {setting(missing)}: static credentials need "
                f"both {setting(ACCESS_KEY)} and {setting(SECRET_KEY)}"
            )
        if values[SSE_KMS_KEY] and not values[SSE_ALGORITHM].startswith("aws:kms"):
            raise RemoteStorageError(
                f"Invalid value for configuration {setting(SSE_KMS_KEY)}: it needs "
                f"{setting(SSE_ALGORITHM)}=aws:kms or aws:kms:dsse"
            )
        timeout = values[ATTEMPT_TIMEOUT] / 1000
        s3_options = {} if values[PATH_STYLE] is None else {
            "addressing_style": "path" if values[PATH_STYLE] else "virtual"
        }  # fmt: skip

        def client(attempts: int, connect_timeout: float) -> Any:
            config = Config(
                region_name=region,
                retries={"max_attempts": attempts, "mode": "standard"},
                connect_timeout=connect_timeout,
                read_timeout=timeout,
                max_pool_connections=max(10, values[CONCURRENCY] * 2),
                s3=s3_options or None,
            )
            try:
                with _SESSION_LOCK:  # creating clients from one session is not thread-safe
                    return _session().client(
                        "s3",
                        endpoint_url=endpoint,
                        aws_access_key_id=access,
                        aws_secret_access_key=secret,
                        verify=values[CERT_CHECK],
                        config=config,
                    )
            except (BotoCoreError, ValueError) as e:
                raise RemoteStorageError(
                    f"Invalid S3 settings ({setting(ENDPOINT)}={endpoint}, "
                    f"{setting(REGION)}={region}): {e}"
                ) from e

        # Report a missing bucket or an unreachable endpoint now, by name, and quickly.
        probe = client(1, min(timeout, 10.0))
        try:
            probe.head_bucket(Bucket=bucket)
        except ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            reason = {404: "does not exist", 403: "access denied"}.get(status, str(e))
            raise RemoteStorageError(
                f"Invalid value {bucket} for configuration {setting(BUCKET)}: bucket {reason} "
                f"at {endpoint or 'AWS'}"
            ) from e
        except BotoCoreError as e:
            raise RemoteStorageError(
                f"Invalid value {endpoint} for configuration {setting(ENDPOINT)}: cannot reach "
                f"S3 to check bucket {bucket} ({e})"
            ) from e
        finally:
            probe.close()
        put_args = {"StorageClass": values[STORAGE_CLASS]}
        if values[SSE_ALGORITHM]:
            put_args["ServerSideEncryption"] = values[SSE_ALGORITHM]
        if values[SSE_KMS_KEY]:
            put_args["SSEKMSKeyId"] = values[SSE_KMS_KEY]
        return S3ObjectStore(
            client(values[MAX_ATTEMPTS], timeout),
            bucket,
            part_size=values[PART_SIZE],
            concurrency=values[CONCURRENCY],
            put_args=put_args,
        )
