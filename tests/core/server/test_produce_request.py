"""Produce requests decoded with their records left in the frame agree with kio's decoder."""

from __future__ import annotations

import contextlib
import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_reader
from kio.static.primitive import Records, i16, i32

from core.server.api_keys import SUPPORTED_VERSIONS, ApiKey
from core.server.errors import InvalidRequestError
from core.server.produce_request import decode_common_shape, decode_with_reader
from core.server.protocol import ProtocolCodec
from tests.core.server.test_protocol import frame, request_header

CODEC = ProtocolCodec(SUPPORTED_VERSIONS)
LOW, HIGH = SUPPORTED_VERSIONS[ApiKey.PRODUCE]
VERSIONS = list(range(LOW, HIGH + 1))


def _request_strategy(version: int) -> st.SearchStrategy[object]:
    cls = load_request_schema(ApiKey.PRODUCE, version)
    module = __import__(cls.__module__, fromlist=["x"])
    partition = st.builds(
        module.PartitionProduceData,
        index=st.integers(-(2**31), 2**31 - 1).map(i32),
        records=st.none() | st.binary(max_size=300).map(Records),
    )
    topic = st.builds(
        module.TopicProduceData,
        name=st.text(max_size=20),
        partition_data=st.lists(partition, max_size=4).map(tuple),
    )
    return st.builds(
        cls,
        transactional_id=st.none() | st.text(max_size=20),
        acks=st.sampled_from([-1, 0, 1, 2]).map(i16),
        timeout=st.integers(-(2**31), 2**31 - 1).map(
            lambda ms: datetime.timedelta(milliseconds=ms)
        ),
        topic_data=st.lists(topic, max_size=3).map(tuple),
    )


def _plain(request: object) -> tuple[object, ...]:
    """The request's fields with records as bytes."""
    return (
        request.transactional_id,  # type: ignore[attr-defined]
        int(request.acks),  # type: ignore[attr-defined]
        request.timeout,  # type: ignore[attr-defined]
        tuple(
            (
                t.name,
                tuple(
                    (int(p.index), None if p.records is None else bytes(p.records))
                    for p in t.partition_data
                ),
            )
            for t in request.topic_data  # type: ignore[attr-defined]
        ),
    )


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_in_place_decoding_matches_kio(version, data):
    request = data.draw(_request_strategy(version))
    raw = frame(ApiKey.PRODUCE, version, request)
    kio_context, from_bytes = CODEC.decode_request(raw, "PLAINTEXT", "x")  # kio's decoder
    context, in_place = CODEC.decode_request(bytearray(raw), "PLAINTEXT", "x")
    assert type(in_place) is type(from_bytes)
    assert _plain(in_place) == _plain(from_bytes) == _plain(request)
    assert context == kio_context
    assert (context.correlation_id, context.client_id) == (42, "test-client")
    assert context.size == len(raw)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("client_id", [None, "", "rdkafka", "é" * 200])
def test_request_headers_read_in_place_are_kios(version, client_id):
    """The header of a Produce frame read in place (client id null, empty, long, not ASCII;
    v2 headers with and without tagged fields) gives the context kio's reader gives."""
    cls = load_request_schema(ApiKey.PRODUCE, version)
    request = data_free_request(cls)
    header = request_header(ApiKey.PRODUCE, version, -7, client_id)
    raw = frame(ApiKey.PRODUCE, version, request, -7, client_id)
    kio_context, _ = CODEC.decode_request(bytes(raw), "PLAINTEXT", "x")
    context, decoded = CODEC.decode_request(bytearray(raw), "PLAINTEXT", "x")
    assert context == kio_context
    assert (context.correlation_id, context.client_id, context.size) == (-7, client_id, len(raw))
    assert _plain(decoded) == _plain(request)
    if cls.__header_schema__.__flexible__:
        # The same header with a tagged field (tag 9, 2 bytes): read by kio's reader (which
        # refuses a tag it does not know) whichever way the frame came.
        tagged = header[:-1] + b"\x01\x09\x02ab" + raw[len(header) :]
        assert _outcome(bytearray(tagged)) == _outcome(bytes(tagged))


def data_free_request(cls: type) -> object:
    return cls(
        transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=1), topic_data=()
    )


def test_records_are_writable_views_into_the_frame():
    cls = load_request_schema(ApiKey.PRODUCE, HIGH)
    module = __import__(cls.__module__, fromlist=["x"])
    request = cls(
        transactional_id=None,
        acks=i16(1),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            module.TopicProduceData(
                name="t",
                partition_data=(
                    module.PartitionProduceData(index=i32(0), records=Records(b"abcdef")),
                ),
            ),
        ),
    )
    raw = bytearray(frame(ApiKey.PRODUCE, HIGH, request))
    _, decoded = CODEC.decode_request(raw, "PLAINTEXT", "x")
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and not records.readonly
    records[0:1] = b"X"  # what the log does to base offsets and epochs: lands in the frame
    assert b"Xbcdef" in raw


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_produce_frames_decode_or_raise_invalid_request(data):
    version = data.draw(st.sampled_from(VERSIONS))
    raw = bytearray(frame(ApiKey.PRODUCE, version, data.draw(_request_strategy(version))))
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(4, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    # Either it decodes, or InvalidRequestError (the connection is closed); nothing else.
    with contextlib.suppress(InvalidRequestError):
        CODEC.decode_request(raw[:cut], "PLAINTEXT", "x")


def _outcome(raw: bytes | bytearray) -> tuple[object, ...] | None:
    """The decoded request's context and fields, or None when the frame is refused."""
    try:
        context, request = CODEC.decode_request(raw, "PLAINTEXT", "x")
    except InvalidRequestError:
        return None
    return context, _plain(request)


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_in_place_decoder_refuses_what_the_frame_guard_and_kio_refuse(data):
    """The in-place decoder makes the frame guard's body checks itself (the guard walks
    only the header of such a frame): on damaged frames it must refuse exactly the frames
    the guard and kio refuse (the decoding of ``bytes``), and agree on the others."""
    version = data.draw(st.sampled_from(VERSIONS))
    raw = bytearray(frame(ApiKey.PRODUCE, version, data.draw(_request_strategy(version))))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(4, len(raw) - 1))
        # Often a length or count byte turned to 0xff (-1 / null, or a huge value).
        raw[pos] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]) | st.integers(0, 255))
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    assert _outcome(bytearray(raw)) == _outcome(bytes(raw))


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_common_shape_path_decodes_as_the_reader(data):
    """Flexible bodies are first tried by straight code that gives up (None) on anything
    but the shape clients send; whatever it decodes, intact or damaged, the field by field
    reader decodes the same (on the frames it gives up on, the reader alone decides)."""
    version = data.draw(st.sampled_from([v for v in VERSIONS if v >= 9]))
    cls = load_request_schema(ApiKey.PRODUCE, version)
    raw = bytearray(frame(ApiKey.PRODUCE, version, data.draw(_request_strategy(version))))
    offset = entity_reader(cls.__header_schema__)(bytes(raw), 0)[1]
    for _ in range(data.draw(st.integers(0, 4))):
        if offset < len(raw):
            pos = data.draw(st.integers(offset, len(raw) - 1))
            raw[pos] = data.draw(
                st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]) | st.integers(0, 255)
            )
    raw = raw[: data.draw(st.integers(offset, len(raw)))]
    view = memoryview(raw)
    try:
        common = decode_common_shape(cls, view, offset)
    except UnicodeDecodeError:
        with pytest.raises(UnicodeDecodeError):
            decode_with_reader(cls, view, offset)
        return
    if common is not None:
        assert _plain(common) == _plain(decode_with_reader(cls, view, offset))


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 9])
def test_a_clients_request_takes_the_common_shape_path(version):
    """What librdkafka and the Java client send (a topic, a partition, a batch of a few
    hundred bytes, with or without a transactional id) never needs the reader."""
    cls = load_request_schema(ApiKey.PRODUCE, version)
    module = __import__(cls.__module__, fromlist=["x"])
    for transactional_id in (None, "txn-1"):
        request = cls(
            transactional_id=transactional_id,
            acks=i16(-1),
            timeout=datetime.timedelta(seconds=30),
            topic_data=(
                module.TopicProduceData(
                    name="load",
                    partition_data=(
                        module.PartitionProduceData(index=i32(7), records=Records(b"r" * 300)),
                    ),
                ),
            ),
        )
        raw = bytearray(frame(ApiKey.PRODUCE, version, request))
        offset = entity_reader(cls.__header_schema__)(bytes(raw), 0)[1]
        decoded = decode_common_shape(cls, memoryview(raw), offset)
        assert decoded is not None
        assert _plain(decoded) == _plain(request)
