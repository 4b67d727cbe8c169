"""Client-side encryption of remote objects: an ``ObjectStore`` that encrypts what it stores.

Enabled for any plugin with ``rsm.config.encryption.enabled=true``. Every object but the
manifest (kept as plain JSON, so that a bucket can still be audited without the key) is
encrypted with its own random 256-bit data key; the data key is wrapped with the
key-encryption key read from ``rsm.config.encryption.key.file`` (32 bytes, base64) under
``rsm.config.encryption.key.id``. The plaintext is cut into chunks that are sealed one by
one with AES-256-GCM (``cryptography``), so a ranged read fetches and opens only the chunks
it covers. Object layout, all integers big-endian::

    offset  size  field
         0     8  magic           b"TLENC\\x00\\x01\\x00"  (format version 1)
         8     4  chunk size      plaintext bytes per chunk (the last may be shorter)
        12     8  plain size      plaintext bytes in the object
        20     1  key id length   n
        21     n  key id          utf-8
      21+n    12  key nonce       nonce of the wrapped data key
      33+n    48  wrapped key     AES-GCM(KEK, data key), AAD = magic + key id
      81+n     -  chunks          chunk i: AES-GCM(data key, nonce i, plaintext, AAD i) + tag

where nonce i is the first four bytes of the key nonce followed by i as 8 bytes (the data
key is used for this object only), and AAD i is i as 8 bytes followed by 1 for the last
chunk and 0 otherwise: chunks cannot be reordered, dropped from the end or moved to another
object without the tag check failing. Sizes and CRC32C reported to the
manifest are the plaintext's, so every check above this layer is unchanged.
"""

from __future__ import annotations

import base64
import io
import os
import struct
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from rsm_plugins.layout import CorruptObjectError, RunningChecksum
from rsm_plugins.store import ObjectInfo, ObjectStore
from tiered.api import RemoteStorageError

MAGIC = b"TLENC\x00\x01\x00"
CHUNK_SIZE = 64 * 1024
TAG_SIZE = 16
KEY_SIZE = 32
_FIXED = struct.Struct(">8sIQB")  # magic, chunk size, plain size, key id length
_HEADER_MAX = _FIXED.size + 255 + 12 + KEY_SIZE + TAG_SIZE
HEADER_CACHE_SIZE = 4096


class EncryptionConfigError(RemoteStorageError):
    """A key file that is missing or does not hold a base64 256-bit key."""


def load_key_file(path: Path, setting: str) -> bytes:
    """The key-encryption key: 32 bytes, base64 in a file.

    Raises:
        EncryptionConfigError: naming ``setting`` (never the key).
    """
    try:
        text = Path(path).read_text().strip()
    except OSError as e:
        raise EncryptionConfigError(f"Invalid value {path} for configuration {setting}: {e}") from e
    try:
        key = base64.b64decode(text, validate=True)
    except ValueError as e:
        raise EncryptionConfigError(
            f"Invalid value {path} for configuration {setting}: not base64"
        ) from e
    if len(key) != KEY_SIZE:
        raise EncryptionConfigError(
            f"Invalid value {path} for configuration {setting}: the key has {len(key)} bytes, "
            f"AES-256 needs {KEY_SIZE} (e.g. `head -c 32 /dev/urandom | base64`)"
        )
    return key


@dataclass(frozen=True, slots=True)
class _Header:
    chunk_size: int
    plain_size: int
    key_id: str
    nonce_prefix: bytes
    data_key: bytes
    size: int  # header bytes

    @property
    def chunks(self) -> int:
        return -(-self.plain_size // self.chunk_size) if self.plain_size else 0

    def chunk_offset(self, index: int) -> int:
        """Where sealed chunk ``index`` starts in the object."""
        return self.size + index * (self.chunk_size + TAG_SIZE)


class EncryptingStore(ObjectStore):
    """Encrypts objects on the way into ``inner`` and decrypts them on the way out.

    Args:
        inner: the plugin's store.
        key: the key-encryption key (32 bytes).
        key_id: stored in each object; reading an object wrapped under another id fails.
        encrypts: which keys to encrypt (the manifest stays plain).
    """

    def __init__(
        self,
        inner: ObjectStore,
        key: bytes,
        key_id: str,
        encrypts: Callable[[str], bool],
        *,
        chunk_size: int = CHUNK_SIZE,
    ) -> None:
        if len(key) != KEY_SIZE:
            raise ValueError("the key-encryption key must have 32 bytes")
        if not 0 < len(key_id.encode()) <= 255:
            raise ValueError("the key id must have 1 to 255 bytes")
        self.inner = inner
        self._kek = AESGCM(key)
        self.key_id = key_id
        self.encrypts = encrypts
        self.chunk_size = chunk_size
        self._headers: OrderedDict[str, _Header] = OrderedDict()
        self._lock = threading.Lock()

    # -- writing ---------------------------------------------------------------------------
    def _header_bytes(self, plain_size: int) -> tuple[bytes, AESGCM, bytes]:
        data_key = AESGCM.generate_key(bit_length=256)
        key_nonce = os.urandom(12)
        kid = self.key_id.encode()
        wrapped = self._kek.encrypt(key_nonce, data_key, MAGIC + kid)
        head = _FIXED.pack(MAGIC, self.chunk_size, plain_size, len(kid)) + kid + key_nonce + wrapped
        return head, AESGCM(data_key), key_nonce[:4]

    def _seal(self, aead: AESGCM, prefix: bytes, index: int, last: bool, chunk: bytes) -> bytes:
        return aead.encrypt(prefix + index.to_bytes(8, "big"), chunk, _aad(index, last))

    def _sealed_chunks(
        self, read: Callable[[int], bytes], plain_size: int, aead: AESGCM, prefix: bytes
    ) -> Iterator[bytes]:
        chunks = -(-plain_size // self.chunk_size) if plain_size else 0
        for i in range(chunks):
            chunk = read(self.chunk_size)
            yield self._seal(aead, prefix, i, i == chunks - 1, chunk)

    def _forget(self, key: str) -> None:
        with self._lock:
            self._headers.pop(key, None)

    def put_file(self, key: str, path: Path) -> tuple[int, str]:
        if not self.encrypts(key):
            return self.inner.put_file(key, path)
        self._forget(key)  # a rewrite (an idempotent copy again) has a new data key
        plain_size = path.stat().st_size
        head, aead, prefix = self._header_bytes(plain_size)
        checksum = RunningChecksum()
        # The sealed object goes to a private temporary file, so that the store can stream
        # it (multipart uploads) without the whole segment in memory.
        with open(path, "rb") as src, tempfile.NamedTemporaryFile(prefix="tierlog-enc-") as out:

            def read(n: int) -> bytes:
                data = src.read(n)
                checksum.update(data)
                return data

            out.write(head)
            for sealed in self._sealed_chunks(read, plain_size, aead, prefix):
                out.write(sealed)
            out.flush()
            if checksum.size != plain_size:
                raise RemoteStorageError(f"{path} changed size while it was being encrypted")
            self.inner.put_file(key, Path(out.name))
        return checksum.result()

    def put_bytes(self, key: str, data: bytes) -> None:
        if not self.encrypts(key):
            self.inner.put_bytes(key, data)
            return
        self._forget(key)
        head, aead, prefix = self._header_bytes(len(data))
        stream = io.BytesIO(data)
        self.inner.put_bytes(
            key, head + b"".join(self._sealed_chunks(stream.read, len(data), aead, prefix))
        )

    # -- reading ---------------------------------------------------------------------------
    def _parse_header(self, key: str, data: bytes) -> _Header:
        if len(data) < _FIXED.size or data[:8] != MAGIC:
            raise CorruptObjectError(f"{key}: not an encrypted object (encryption is enabled)")
        _, chunk_size, plain_size, kid_len = _FIXED.unpack_from(data)
        end = _FIXED.size + kid_len + 12 + KEY_SIZE + TAG_SIZE
        if len(data) < end or chunk_size <= 0:
            raise CorruptObjectError(f"{key}: truncated encryption header")
        kid = data[_FIXED.size : _FIXED.size + kid_len]
        key_id = kid.decode("utf-8", "replace")
        if key_id != self.key_id:
            raise RemoteStorageError(
                f"{key}: encrypted under key id {key_id!r}, but "
                f"rsm.config.encryption.key.id is {self.key_id!r}"
            )
        nonce_at = _FIXED.size + kid_len
        nonce = data[nonce_at : nonce_at + 12]
        try:
            data_key = self._kek.decrypt(nonce, data[nonce_at + 12 : end], MAGIC + kid)
        except InvalidTag as e:
            raise CorruptObjectError(
                f"{key}: the data key does not unwrap: the object was modified or "
                "rsm.config.encryption.key.file holds another key"
            ) from e
        return _Header(chunk_size, plain_size, key_id, nonce[:4], data_key, end)

    def _header(self, key: str) -> _Header:
        with self._lock:
            cached = self._headers.get(key)
            if cached is not None:
                self._headers.move_to_end(key)
                return cached
        with self.inner.get_range(key, 0, _HEADER_MAX) as stream:
            header = self._parse_header(key, _read_all(stream))
        with self._lock:
            self._headers[key] = header
            while len(self._headers) > HEADER_CACHE_SIZE:
                self._headers.popitem(last=False)
        return header

    def _open(self, key: str, header: _Header, first: int, sealed: bytes) -> bytes:
        """Plaintext of consecutive sealed chunks from chunk ``first``."""
        aead = AESGCM(header.data_key)
        out = []
        step = header.chunk_size + TAG_SIZE
        for n, at in enumerate(range(0, len(sealed), step)):
            index = first + n
            nonce = header.nonce_prefix + index.to_bytes(8, "big")
            try:
                out.append(
                    aead.decrypt(
                        nonce, sealed[at : at + step], _aad(index, index == header.chunks - 1)
                    )
                )
            except InvalidTag as e:
                raise CorruptObjectError(
                    f"{key}: chunk {index} fails its authentication tag (modified or truncated)"
                ) from e
        return b"".join(out)

    def get_range(self, key: str, start: int, end: int | None) -> BinaryIO:
        if not self.encrypts(key):
            return self.inner.get_range(key, start, end)
        try:
            return self._get_range(key, self._header(key), start, end)
        except CorruptObjectError:
            # The header cached may be of an object another writer has replaced since.
            self._forget(key)
            return self._get_range(key, self._header(key), start, end)

    def _get_range(self, key: str, header: _Header, start: int, end: int | None) -> BinaryIO:
        end = header.plain_size if end is None else min(end, header.plain_size)
        if start >= end:
            return io.BytesIO(b"")
        first, last = start // header.chunk_size, (end - 1) // header.chunk_size
        with self.inner.get_range(
            key, header.chunk_offset(first), header.chunk_offset(last + 1)
        ) as stream:
            sealed = _read_all(stream)
        expected = header.chunk_offset(last + 1) - header.chunk_offset(first)
        if last == header.chunks - 1:
            expected -= header.chunks * header.chunk_size - header.plain_size
        if len(sealed) != expected:
            raise CorruptObjectError(
                f"{key}: {len(sealed)} bytes where the encryption header promises {expected}"
            )
        plain = self._open(key, header, first, sealed)
        skip = start - first * header.chunk_size
        return io.BytesIO(plain[skip : skip + (end - start)])

    def get_bytes(self, key: str) -> bytes:
        data = self.inner.get_bytes(key)
        if not self.encrypts(key):
            return data
        header = self._parse_header(key, data)
        sealed = data[header.size :]
        expected = header.plain_size + header.chunks * TAG_SIZE
        if len(sealed) != expected:
            raise CorruptObjectError(
                f"{key}: {len(sealed)} bytes where the encryption header promises {expected}"
            )
        return self._open(key, header, 0, sealed)

    # -- the rest passes through -----------------------------------------------------------
    def delete(self, keys: list[str]) -> None:
        for key in keys:
            self._forget(key)
        self.inner.delete(keys)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list_keys(self, prefix: str) -> Iterator[str]:
        return self.inner.list_keys(prefix)

    def list_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        """The inner listing, with the plaintext size of each encrypted object.

        The plaintext size follows from the stored one for objects written by this store
        (its key id and chunk size); an object whose stored size fits no plaintext size
        under them (another key id, a truncated object) is listed with size None.
        """
        for info in self.inner.list_objects(prefix):
            if info.size is not None and self.encrypts(info.key):
                yield ObjectInfo(info.key, self.plain_size(info.size), info.last_modified_ms)
            else:
                yield info

    def plain_size(self, stored: int) -> int | None:
        """The plaintext size of an object of ``stored`` bytes written by this store, or None
        when no plaintext size encrypts to that many bytes."""
        body = stored - (_FIXED.size + len(self.key_id.encode()) + 12 + KEY_SIZE + TAG_SIZE)
        if body < 0:
            return None
        chunks = -(-body // (self.chunk_size + TAG_SIZE))
        plain = body - chunks * TAG_SIZE
        if plain < 0 or -(-plain // self.chunk_size) != chunks:
            return None
        return plain

    def close(self) -> None:
        self.inner.close()


def _aad(index: int, last: bool) -> bytes:
    return index.to_bytes(8, "big") + (b"\x01" if last else b"\x00")


def _read_all(stream: BinaryIO) -> bytes:
    parts = []
    while chunk := stream.read(1 << 20):
        parts.append(chunk)
    return b"".join(parts)
