"""Kafka wire framing over kio's generated message types.

A request frame (after the 4-byte size) starts with the api key and version (int16 each),
which select the request schema and, through it, the header version (v1 plain, v2
flexible). Responses are the response header (v0, or v1 for flexible versions; ApiVersions
always v0) followed by the body, behind a 4-byte size. A Fetch response's records may be
segment file slices, kept out of the encoded bytes and sent from the file
(``encode_response_frame``, core.server.response_frame).

Message classes come from kio, except for the ZooKeeper-mode controller APIs that Kafka 4
(and so kio) dropped: ``load_request_schema`` / ``load_response_schema`` here fall back to
``core.server.interbroker_schema`` for those.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio import index as kio_index
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer

from core.server.api_keys import INTER_BROKER_VERSIONS, ApiKey
from core.server.errors import InvalidRequestError, UnsupportedVersionRequestError
from core.server.frame_guard import check_frame, check_header
from core.server.interbroker_schema import SCHEMAS as INTER_BROKER_SCHEMAS
from core.server.produce_request import decode_produce_request, decode_request_header
from core.server.produce_response import ProduceAnswer, encode_produce_response
from core.server.response_frame import ResponseFrame, SplicingBuffer

_KEY_AND_VERSION = struct.Struct(">hh")
_SIZE = struct.Struct(">i")


def load_request_schema(api_key: int, version: int) -> type:
    """The request class of (api key, version): kio's, or tierlog's inter-broker one.

    Raises:
        kio.index.KioIndexError: neither knows the pair.
    """
    pair = INTER_BROKER_SCHEMAS.get((api_key, version))
    return pair[0] if pair is not None else kio_index.load_request_schema(api_key, version)


def load_response_schema(api_key: int, version: int) -> type:
    """The response class of (api key, version); see ``load_request_schema``."""
    pair = INTER_BROKER_SCHEMAS.get((api_key, version))
    return pair[1] if pair is not None else kio_index.load_response_schema(api_key, version)


class RequestContext(NamedTuple):
    """What a handler knows about a request besides its body. Immutable; a NamedTuple
    rather than a frozen dataclass, whose ``__init__`` sets each field through
    ``object.__setattr__``: one is made per request."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    listener: str
    client_address: str
    # Kafka's KafkaPrincipal as text: User:ANONYMOUS until TLS or SASL says who it is.
    principal: str = "User:ANONYMOUS"
    # Bytes of the request frame (header and body): what a produce quota counts.
    size: int = 0


@dataclass(frozen=True, slots=True)
class _Codec:
    request_type: type
    request_header_type: type
    response_type: type
    response_header_type: type
    read_header: Any
    read_request: Any
    write_response_header: Any
    write_response: Any
    flexible: bool  # the request header is v2 (ends with tagged fields)


class ProtocolCodec:
    """Decoders and encoders for the supported (api key, version) pairs, loaded once.

    Args:
        supported: for each api key, the inclusive range of versions served.
        inter_broker: the inter-broker-only apis (``INTER_BROKER_VERSIONS``) decoded and
            encoded in addition; they are not advertised in ApiVersions.
    """

    def __init__(
        self,
        supported: Mapping[ApiKey, tuple[int, int]],
        inter_broker: Mapping[ApiKey, tuple[int, int]] = INTER_BROKER_VERSIONS,
    ) -> None:
        self.supported = supported
        self.inter_broker = inter_broker
        self._codecs: dict[tuple[int, int], _Codec] = {}
        for api_key, (low, high) in [*supported.items(), *inter_broker.items()]:
            for version in range(low, high + 1):
                request = load_request_schema(api_key, version)
                response = load_response_schema(api_key, version)
                self._codecs[(api_key, version)] = _Codec(
                    request_type=request,
                    request_header_type=request.__header_schema__,
                    response_type=response,
                    response_header_type=response.__header_schema__,
                    read_header=entity_reader(request.__header_schema__),
                    read_request=entity_reader(request),
                    write_response_header=entity_writer(response.__header_schema__),
                    write_response=entity_writer(response),
                    flexible=bool(request.__header_schema__.__flexible__),
                )

    def response_type(self, api_key: int, api_version: int) -> type:
        return self._codecs[(api_key, api_version)].response_type

    def decode_request(
        self,
        frame: bytes | bytearray | memoryview,
        listener: str,
        client_address: str,
        principal: str = "User:ANONYMOUS",
    ) -> tuple[RequestContext, Any]:
        """Parse one request frame (without its size prefix). A Produce request read from
        a writable frame (``bytearray``) has its records as ``memoryview``s into the frame.

        Raises:
            UnsupportedVersionRequestError: a known api key at an unserved version (the
                caller answers ApiVersions this way; other apis close the connection).
            InvalidRequestError: an unknown api key, a truncated or malformed frame, or
                trailing bytes after the body.
        """
        if len(frame) < _KEY_AND_VERSION.size + 4:
            raise InvalidRequestError(f"request frame of {len(frame)} bytes is too short")
        api_key, api_version = _KEY_AND_VERSION.unpack_from(frame, 0)
        codec = self._codecs.get((api_key, api_version))
        if codec is None:
            if api_key in api_key_map or api_key in self.supported or api_key in self.inter_broker:
                correlation_id = _SIZE.unpack_from(frame, 4)[0]
                raise UnsupportedVersionRequestError(api_key, api_version, correlation_id)
            raise InvalidRequestError(f"unknown api key {api_key}")
        # A Produce body read in place is checked by its own decoder as it goes: the
        # same checks as the guard's walk, which cost a third as much as the decoding.
        in_place = api_key == ApiKey.PRODUCE and not isinstance(frame, bytes)
        try:
            # The usual header of such a frame (no tagged fields) is read here directly;
            # any other goes through the guard and kio's reader, as every request's does.
            head = decode_request_header(frame, codec.flexible) if in_place else None
            if head is None:
                if in_place:
                    check_header(codec.request_header_type, frame)
                else:
                    check_frame(codec.request_type, codec.request_header_type, frame)
        except InvalidRequestError as e:
            raise InvalidRequestError(f"{ApiKey(api_key).name} v{api_version}: {e}") from e
        except UnicodeDecodeError as e:
            raise InvalidRequestError(
                f"malformed {ApiKey(api_key).name} v{api_version} request: {e}"
            ) from e
        try:
            if head is not None:
                correlation_id, client_id, used = head
            else:
                # kio's readers take read-only buffers; a frame is a bytearray (read in place).
                readable = frame if isinstance(frame, bytes) else memoryview(frame).toreadonly()
                header, used = codec.read_header(readable, 0)
                correlation_id, client_id = header.correlation_id, header.client_id
            if in_place:
                # The records as views into the frame: patched and written to the log in
                # place, no copy (kio would copy them into bytes).
                request = decode_produce_request(codec.request_type, memoryview(frame), used)
            else:
                request, _ = codec.read_request(readable, used)
        except Exception as e:  # kio raises assorted errors for malformed input
            raise InvalidRequestError(
                f"malformed {ApiKey(api_key).name} v{api_version} request: {e}"
            ) from e
        context = RequestContext(
            api_key,
            api_version,
            correlation_id,
            client_id,
            listener,
            client_address,
            principal,
            len(frame),
        )
        return context, request

    def encode_response(self, context: RequestContext, response: Any) -> bytes:
        """The response frame, size prefix included, in memory (a Fetch response's records
        read from their segment files)."""
        frame = self.encode_response_frame(context, response)
        return frame if isinstance(frame, bytes) else frame.to_bytes()

    def encode_response_frame(
        self, context: RequestContext, response: Any
    ) -> bytes | ResponseFrame:
        """The response frame, size prefix included: ``bytes``, or for a Fetch response
        whose records are segment file slices a ``ResponseFrame`` that keeps them as slices
        (sent with ``sendfile``, core.server.response_frame)."""
        codec = self._codecs[(context.api_key, context.api_version)]
        if isinstance(response, ProduceAnswer):
            # The most frequent answer under many small produce requests: hand-encoded,
            # unless it carries a leader hint (kio writes that).
            frame = encode_produce_response(context.correlation_id, context.api_version, response)
            if frame is not None:
                return frame
            response = response.to_kio(codec.response_type)
        header = codec.response_header_type(correlation_id=context.correlation_id)
        if context.api_key == ApiKey.FETCH:
            # Only Fetch carries slices; other responses keep the plain BytesIO, whose
            # C write is cheaper than a Python buffer for kio's many small writes.
            spliced = SplicingBuffer()
            codec.write_response_header(spliced, header)
            codec.write_response(spliced, response)
            # The size prefix as a part of its own: prepending it would copy the records
            # a remote read put in the response.
            return ResponseFrame((_SIZE.pack(spliced.size), *spliced.parts()))
        out = io.BytesIO()
        out.write(b"\0\0\0\0")
        codec.write_response_header(out, header)
        codec.write_response(out, response)
        size = out.tell() - 4
        out.seek(0)
        out.write(_SIZE.pack(size))
        # getvalue() hands over the buffer without the copy bytes(getbuffer()) makes.
        return out.getvalue()
