"""Batch compression codecs, all through cramjam, with the framings Kafka's clients use.

A compressed batch holds its records as one compressed blob after the 61-byte header. The
codec id is in the low three attribute bits (see ``batch.Compression``).

- GZIP: a gzip stream (RFC 1952), as Java's GZIPOutputStream writes it.
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

Corrupt input raises ``CorruptRecordError``; cramjam's exceptions never leak.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

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
_BOUNDED: dict[int, Callable[[BytesLike, bytearray], int]] = {
    Compression.GZIP: cramjam.gzip.decompress_into,
    Compression.LZ4: cramjam.lz4.decompress_into,
    Compression.ZSTD: cramjam.zstd.decompress_into,
    Compression.SNAPPY: cramjam.snappy.decompress_into,  # not used: see _snappy_decompress
}


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
    if max_size is None:
        max_size = MAX_DECOMPRESSED_BYTES
    if codec not in _BOUNDED:
        raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")
    name = Compression(codec).name.lower()
    try:
        if codec == Compression.SNAPPY:
            return _snappy_decompress(data, max_size)
        first = _stated_size(codec, data)
        if first is not None and first > max_size and codec == Compression.ZSTD:
            raise CorruptRecordError(
                f"zstd frame of {len(data)} bytes states {first} decompressed bytes: more "
                f"than {max_size} bytes, the limit for one batch's records"
            )
        return _bounded(_BOUNDED[codec], data, max_size, name, first)
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(
            f"{name} data of {len(data)} bytes cannot be decompressed: {e}"
        ) from e


def _bounded(
    into: Callable[[BytesLike, bytearray], int],
    data: BytesLike,
    max_size: int,
    name: str,
    first: int | None = None,
) -> bytes:
    """``into(data, buffer)`` with buffers growing up to ``max_size`` bytes, the first one
    ``first`` bytes when the data states its size (a guess otherwise)."""
    if first is None:
        first = max(_FIRST_OUTPUT_BYTES, 8 * len(data))
    size = min(max_size, max(first, 1))
    while True:
        buffer = bytearray(size + 1)  # one spare byte: a full buffer means "more to come"
        try:
            written = into(data, buffer)
        except cramjam.DecompressionError as e:
            if _FULL_BUFFER not in str(e):
                raise  # corrupt input, not a full buffer
            # The output did not fit: retry larger until the limit, then refuse.
            if size >= max_size:
                raise CorruptRecordError(
                    f"{name} data of {len(data)} bytes decompresses to more than {max_size} "
                    f"bytes, the limit for one batch's records"
                ) from None
            size = min(max_size, size * 4)
            continue
        if written <= size:
            return bytes(memoryview(buffer)[:written])
        if size >= max_size:
            raise CorruptRecordError(
                f"{name} data of {len(data)} bytes decompresses to more than {max_size} "
                f"bytes, the limit for one batch's records"
            )
        size = min(max_size, size * 4)


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


def _snappy_raw_length(block: memoryview) -> int:
    """The uncompressed length a raw snappy block states first (a little-endian varint)."""
    length = shift = 0
    for i in range(min(5, len(block))):
        byte = block[i]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length
        shift += 7
    raise CorruptRecordError(
        f"snappy block of {len(block)} bytes does not start with a valid length varint"
    )


def _snappy_raw(block: memoryview, budget: int, max_size: int) -> bytes:
    """A raw snappy block, refused from its stated length if that is above ``budget``
    (what is left of ``max_size`` for the batch)."""
    length = _snappy_raw_length(block)
    if length > budget:
        raise CorruptRecordError(
            f"snappy block of {len(block)} bytes states {length} decompressed bytes: the "
            f"batch's records would exceed {max_size} bytes, the limit for one batch's records"
        )
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: BytesLike, max_size: int) -> bytes:
    view = memoryview(data)
    header_size = len(XERIAL_HEADER)
    if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return _snappy_raw(view, max_size, max_size)
    # The version and compat ints are not checked: snappy-java itself accepts any version
    # whose stream starts with the magic, and no other version was ever written.
    if len(view) < header_size:
        raise CorruptRecordError(
            f"snappy xerial header is truncated: {len(view)} bytes, {header_size} needed"
        )
    out = bytearray()
    pos, end = header_size, len(view)
    while pos < end:
        if end - pos < _I32.size:
            raise CorruptRecordError(
                f"snappy xerial block length at byte {pos} is truncated ({end - pos} bytes left)"
            )
        length = _I32.unpack_from(view, pos)[0]
        pos += _I32.size
        if length < 0 or pos + length > end:
            raise CorruptRecordError(
                f"snappy xerial block at byte {pos - _I32.size}: length {length} does not fit "
                f"the {end - pos} bytes left"
            )
        out += _snappy_raw(view[pos : pos + length], max_size - len(out), max_size)
        pos += length
    return bytes(out)


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
