"""Batch compression codecs, with the framings Kafka's clients use: cramjam, and for gzip
inflate ISA-L (python-isal) when installed, else zlib.

A compressed batch holds its records as one compressed blob after the 61-byte header. The
codec id is in the low three attribute bits (see ``batch.Compression``).

- GZIP: a gzip stream (RFC 1952), as Java's GZIPOutputStream writes it. Read as Java's
  GZIPInputStream reads it: concatenated members in turn, and bytes after a member that do
  not start another one ignored.
- SNAPPY: two framings exist in the wild. Kafka's Java client writes snappy-java's "xerial"
  stream::

      magic    8 bytes  0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00
      version  int32    1
      compat   int32    1
      then, until the end: int32 length, that many bytes of raw snappy (one block)

  librdkafka and others write a single raw snappy block. We read both, and write the xerial
  stream with 32 KiB blocks like the Java client (snappy-java's default block size), so that
  our batches look like those from the reference implementation to any reader.
- LZ4: the LZ4 frame format as Kafka's Lz4BlockOutputStream writes it: FLG 0x60 (version 1,
  independent blocks, no checksums, no content size), BD 0x40 (64 KiB blocks), the header
  checksum byte, blocks each prefixed by a little-endian uint32 size (high bit set for a block
  stored uncompressed), and a zero end mark. Kafka's Java reader refuses linked blocks, so we
  never write them; we read any valid frame. (Magic 0/1 messages had a wrong header checksum;
  they are not RecordBatch v2 and not read here.)
- ZSTD: a zstd frame; Kafka's producer streams it, so the frame may lack a content size.

Corrupt input raises ``CorruptRecordError``; the libraries' exceptions never leak.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from types import ModuleType

import cramjam

from core.errors import CorruptRecordError, UnsupportedCompressionTypeError
from core.records.batch import Compression

BytesLike = bytes | bytearray | memoryview

# Kafka's default levels (KIP-390, CompressionType): gzip is java.util.zip's default 6,
# zstd 3. lz4 uses the fast compressor at the default level, which compress_block does.
GZIP_DEFAULT_LEVEL = 6
ZSTD_DEFAULT_LEVEL = 3

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_VERSION_COMPAT = struct.Struct(">ii")
XERIAL_HEADER = XERIAL_MAGIC + _XERIAL_VERSION_COMPAT.pack(1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_I32 = struct.Struct(">i")

LZ4_BLOCK_SIZE = 64 * 1024
# Magic 0x184D2204 little-endian, FLG 0x60, BD 0x40, and the header checksum: the second
# byte of xxHash32(FLG BD, seed 0). It is the same for every frame we write, so it is a
# constant here (tests check it against the lz4 reference library) rather than an xxHash
# implementation of our own.
LZ4_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
_LZ4_UNCOMPRESSED_BIT = 0x80000000
_U32LE = struct.Struct("<I")
_LZ4_END_MARK = b"\x00\x00\x00\x00"

# The most one batch's records may decompress to. Kafka's producers bound a batch by
# batch.size and the broker by message.max.bytes (1 MiB by default), so real batches stay
# far below; a batch claiming more is refused rather than allocated (tools and Spark read
# segments that anyone may have written).
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
_FIRST_OUTPUT_BYTES = 64 * 1024
# How cramjam's decompress_into says the output buffer was too small.
_FULL_BUFFER = "failed to write whole buffer"


def compress(codec: int, data: BytesLike, level: int | None = None) -> bytes:
    """Compress the records of a batch with ``codec`` (a ``Compression`` id).

    Args:
        codec: the codec id; ``Compression.NONE`` returns the data unchanged.
        data: the uncompressed record bytes.
        level: gzip or zstd level, or None for Kafka's default; snappy has no levels, and
            lz4 always uses the fast compressor, as Kafka does at its default lz4 level.

    Raises:
        UnsupportedCompressionTypeError: ``codec`` is not a codec Kafka defines.
    """
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(
            cramjam.gzip.compress(data, level=GZIP_DEFAULT_LEVEL if level is None else level)
        )
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        return _lz4_frame_compress(data)
    if codec == Compression.ZSTD:
        return bytes(
            cramjam.zstd.compress(data, level=ZSTD_DEFAULT_LEVEL if level is None else level)
        )
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")


def decompress(codec: int, data: BytesLike, max_size: int | None = None) -> bytes:
    """Decompress the records of a batch compressed with ``codec``, up to ``max_size`` bytes
    (default ``MAX_DECOMPRESSED_BYTES``).

    The output is bounded before it is allocated: a batch whose records would decompress
    to more than ``max_size`` bytes (a decompression bomb, or a corrupt size field) is
    refused, never expanded. Decompression writes into a buffer that starts small and
    grows fourfold up to ``max_size``; snappy's raw blocks state their size up front and
    are refused from that alone.

    Raises:
        UnsupportedCompressionTypeError: ``codec`` is not a codec Kafka defines.
        CorruptRecordError: ``data`` is not valid for the codec, or decompresses to more
            than ``max_size`` bytes (the message says which limit).
    """
    if codec == Compression.NONE:
        return bytes(data)
    out = DecompressionBuffer().decompress(codec, data, max_size)
    return out if isinstance(out, bytes) else bytes(out)


class DecompressionBuffer:
    """Decompresses batch after batch into one buffer that is reused, for the readers that
    decode a whole segment: a fresh output buffer per batch would cost its allocation and
    the page faults of touching it, as much as lz4 or zstd take to fill it.

    The buffer only grows (up to the largest batch decompressed, at most ``max_size``) and
    lives as long as this object. What ``decompress`` returns is valid until its next call.
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def decompress(
        self, codec: int, data: BytesLike, max_size: int | None = None
    ) -> memoryview | bytes:
        """``decompress(codec, data, max_size)`` as a view of this object's buffer (valid
        until the next call), or bytes for gzip (its inflater allocates its output).

        Raises:
            The errors of ``decompress``.
        """
        if max_size is None:
            max_size = MAX_DECOMPRESSED_BYTES
        if codec == Compression.NONE:
            return memoryview(data)
        name = _CODEC_NAMES.get(codec)
        if name is None:
            raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")
        try:
            if codec == Compression.GZIP:
                return _gunzip(data, max_size)
            if codec == Compression.SNAPPY:
                return self._snappy(memoryview(data), max_size)
            first = _stated_size(codec, data)
            if first is not None and first > max_size and codec == Compression.ZSTD:
                raise CorruptRecordError(
                    f"zstd frame of {len(data)} bytes states {first} decompressed bytes: more "
                    f"than {max_size} bytes, the limit for one batch's records"
                )
            return self._bounded(_INTO[codec], data, max_size, name, first)
        except cramjam.DecompressionError as e:
            raise CorruptRecordError(
                f"{name} data of {len(data)} bytes cannot be decompressed: {e}"
            ) from e

    @property
    def capacity(self) -> int:
        """The bytes this object holds now (its buffer's size)."""
        return len(self._buffer)

    def _room(self, size: int) -> bytearray:
        """The buffer, at least ``size`` bytes long (contents undefined). A larger buffer is
        a new object, so that views of the old one stay valid until dropped."""
        if len(self._buffer) < size:
            self._buffer = bytearray(size)
        return self._buffer

    def _bounded(
        self,
        into: Callable[[BytesLike, memoryview], int],
        data: BytesLike,
        max_size: int,
        name: str,
        first: int | None,
    ) -> memoryview:
        """``into(data, buffer)`` with a buffer growing up to ``max_size`` bytes: at first
        the size the data states (a guess when it does not) or the reused buffer's, if
        larger. A buffer one byte larger than the room left means "more to come"."""
        if first is None:
            first = max(_FIRST_OUTPUT_BYTES, 8 * len(data))
        size = min(max_size, max(first, len(self._buffer) - 1, 1))
        while True:
            buffer = memoryview(self._room(size + 1))[: size + 1]
            try:
                written = into(data, buffer)
            except cramjam.DecompressionError as e:
                if _FULL_BUFFER not in str(e):
                    raise  # corrupt input, not a full buffer
                written = size + 1
            if written <= size:
                return buffer[:written]
            # The output did not fit: retry larger until the limit, then refuse.
            buffer.release()
            if size >= max_size:
                raise CorruptRecordError(
                    f"{name} data of {len(data)} bytes decompresses to more than {max_size} "
                    f"bytes, the limit for one batch's records"
                )
            size = min(max_size, size * 4)

    def _snappy(self, view: memoryview, max_size: int) -> memoryview:
        header_size = len(XERIAL_HEADER)
        if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
            length = _snappy_raw_length(view, max_size, max_size)
            return self._snappy_block(view, 0, length)
        # The version and compat ints are not checked: snappy-java itself accepts any version
        # whose stream starts with the magic, and no other version was ever written.
        if len(view) < header_size:
            raise CorruptRecordError(
                f"snappy xerial header is truncated: {len(view)} bytes, {header_size} needed"
            )
        done = 0
        pos, end = header_size, len(view)
        while pos < end:
            if end - pos < _I32.size:
                raise CorruptRecordError(
                    f"snappy xerial block length at byte {pos} is truncated "
                    f"({end - pos} bytes left)"
                )
            length = _I32.unpack_from(view, pos)[0]
            pos += _I32.size
            if length < 0 or pos + length > end:
                raise CorruptRecordError(
                    f"snappy xerial block at byte {pos - _I32.size}: length {length} does not "
                    f"fit the {end - pos} bytes left"
                )
            block = view[pos : pos + length]
            done += self._snappy_block(
                block, done, _snappy_raw_length(block, max_size - done, max_size)
            ).nbytes
            pos += length
        return memoryview(self._buffer)[:done]

    def _snappy_block(self, block: memoryview, at: int, length: int) -> memoryview:
        """A raw snappy block of ``length`` decompressed bytes, written at byte ``at`` of the
        buffer (grown, keeping its first ``at`` bytes, when too small)."""
        if len(self._buffer) < at + length:
            grown = bytearray(max(at + length, 2 * len(self._buffer)))
            grown[:at] = memoryview(self._buffer)[:at]
            self._buffer = grown
        out = memoryview(self._buffer)[at : at + length]
        written = cramjam.snappy.decompress_raw_into(block, out)
        if written != length:
            raise CorruptRecordError(
                f"snappy block of {len(block)} bytes states {length} decompressed bytes but "
                f"holds {written}"
            )
        return out


_CODEC_NAMES = {int(c): c.name.lower() for c in Compression if c != Compression.NONE}
# cramjam's decompress_into for the codecs whose output goes to the reused buffer.
_INTO: dict[int, Callable[[BytesLike, memoryview], int]] = {
    Compression.LZ4: cramjam.lz4.decompress_into,
    Compression.ZSTD: cramjam.zstd.decompress_into,
}


# -- gzip ----------------------------------------------------------------------------------
# Inflate through ISA-L (python-isal, the ``isal`` package: 2.5x zlib's speed on Kafka's
# batches here) when installed, else through the standard library's zlib; both have zlib's
# decompressobj interface, which bounds the output (``max_length``).
try:
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover - the fallback is tested by selecting it
    _isal_zlib = None
GZIP_INFLATERS: dict[str, ModuleType] = {"zlib": zlib}
if _isal_zlib is not None:
    GZIP_INFLATERS = {"isal": _isal_zlib, **GZIP_INFLATERS}
gzip_inflater: ModuleType = next(iter(GZIP_INFLATERS.values()))
"""The module that inflates gzip batches (the first of ``GZIP_INFLATERS``); tests set it."""
_GZIP_WBITS = 16 + 15  # a gzip header and trailer around a deflate stream, 32 KiB window
_GZIP_MAGIC = b"\x1f\x8b"


def _gunzip(data: BytesLike, max_size: int) -> bytes:
    """Every gzip member of ``data`` (Java's GZIPInputStream reads concatenated members),
    at most ``max_size`` bytes in all. Bytes after a member that do not start another one
    are ignored, as GZIPInputStream ignores them."""
    module = gzip_inflater
    pieces: list[bytes] = []
    done = 0
    rest: BytesLike = data
    while True:
        inflater = module.decompressobj(_GZIP_WBITS)
        try:
            piece = inflater.decompress(rest, max_size - done + 1)
        except module.error as e:
            raise CorruptRecordError(
                f"gzip data of {len(data)} bytes cannot be decompressed at byte "
                f"{len(data) - len(rest)}: {e}"
            ) from e
        done += len(piece)
        if done > max_size:
            raise CorruptRecordError(
                f"gzip data of {len(data)} bytes decompresses to more than {max_size} "
                f"bytes, the limit for one batch's records"
            )
        if not inflater.eof:
            raise CorruptRecordError(
                f"gzip data of {len(data)} bytes is truncated: the member at byte "
                f"{len(data) - len(rest)} ends without its trailer"
            )
        pieces.append(piece)
        rest = inflater.unused_data
        if not rest.startswith(_GZIP_MAGIC):
            break
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _stated_size(codec: int, data: BytesLike) -> int | None:
    """The decompressed size the data states, if its format has one: a zstd frame's content
    size, a gzip member's ISIZE (size mod 2^32 of the last member). Only a first buffer
    size (a wrong claim costs a retry, never a wrong result): the exact fit saves zeroing a
    guessed 64 KiB buffer per small batch."""
    if codec == Compression.ZSTD:
        return _zstd_content_size(memoryview(data))
    if codec == Compression.GZIP and len(data) >= 18:  # 10-byte header, 8-byte trailer
        return int.from_bytes(memoryview(data)[-4:], "little") or None
    return None


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_DICT_ID_BYTES = (0, 1, 2, 4)
_ZSTD_FCS_BYTES = (0, 2, 4, 8)


def _zstd_content_size(view: memoryview) -> int | None:
    """Frame_Content_Size of a zstd frame header (RFC 8878, 3.1.1.1), None if absent."""
    if len(view) < 6 or view[:4] != _ZSTD_MAGIC:
        return None
    descriptor = view[4]
    single_segment = descriptor & 0x20
    fcs_flag = descriptor >> 6
    at = 5 + (0 if single_segment else 1) + _ZSTD_DICT_ID_BYTES[descriptor & 0x03]
    width = 1 if fcs_flag == 0 and single_segment else _ZSTD_FCS_BYTES[fcs_flag]
    if width == 0 or len(view) < at + width:
        return None
    size = int.from_bytes(view[at : at + width], "little")
    return size + 256 if width == 2 else size


# -- snappy --------------------------------------------------------------------------------
def _xerial_compress(data: BytesLike) -> bytes:
    view = memoryview(data)
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


def _snappy_raw_length(block: memoryview, budget: int, max_size: int) -> int:
    """The uncompressed length a raw snappy block states first (a little-endian varint),
    refused if above ``budget`` (what is left of ``max_size`` for the batch)."""
    length = shift = 0
    for i in range(min(5, len(block))):
        byte = block[i]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if length > budget:
                raise CorruptRecordError(
                    f"snappy block of {len(block)} bytes states {length} decompressed bytes: "
                    f"the batch's records would exceed {max_size} bytes, the limit for one "
                    f"batch's records"
                )
            return length
        shift += 7
    raise CorruptRecordError(
        f"snappy block of {len(block)} bytes does not start with a valid length varint"
    )


# -- lz4 -----------------------------------------------------------------------------------
def _lz4_frame_compress(data: BytesLike) -> bytes:
    view = memoryview(data)
    out = bytearray(LZ4_FRAME_HEADER)
    for start in range(0, len(view), LZ4_BLOCK_SIZE):
        chunk = view[start : start + LZ4_BLOCK_SIZE]
        block = cramjam.lz4.compress_block(chunk, store_size=False)
        if len(block) >= len(chunk):
            # Incompressible: stored as is, flagged by the high bit, as Kafka does.
            out += _U32LE.pack(len(chunk) | _LZ4_UNCOMPRESSED_BIT)
            out += chunk
        else:
            out += _U32LE.pack(len(block))
            out += block
    out += _LZ4_END_MARK
    return bytes(out)
