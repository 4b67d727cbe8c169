"""Request framing: every supported (api, version) round-trips, and bad frames fail cleanly."""

from __future__ import annotations

import contextlib
import datetime
import io
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.static.primitive import Records, i16, i32, i64Timedelta

from core.server.api_keys import SUPPORTED_VERSIONS, ApiKey
from core.server.errors import InvalidRequestError, UnsupportedVersionRequestError
from core.server.protocol import ProtocolCodec

# Record data is opaque bytes to the protocol layer.
st.register_type_strategy(Records, st.binary(max_size=200).map(Records))
# kio cannot read back an int64 duration beyond Python's timedelta range (~2**63 ms); no
# client sends one, so keep generated durations within a few centuries.
st.register_type_strategy(
    i64Timedelta,
    st.integers(-(10**13), 10**13).map(lambda ms: datetime.timedelta(milliseconds=ms)),
)

CODEC = ProtocolCodec(SUPPORTED_VERSIONS)
PAIRS = [(k, v) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items()) for v in range(lo, hi + 1)]


def request_header(
    api_key: int, version: int, correlation_id: int = 42, client_id: str | None = "test-client"
) -> bytes:
    """The request header of a frame of ``api_key`` at ``version``, as kio writes it."""
    header_cls = load_request_schema(api_key, version).__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(
        out,
        header_cls(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(correlation_id),
            client_id=client_id,
        ),
    )
    return out.getvalue()


def frame(
    api_key: int,
    version: int,
    request: object,
    correlation_id: int = 42,
    client_id: str | None = "test-client",
) -> bytes:
    """A request frame (no size prefix): ``request_header`` and the body."""
    out = io.BytesIO()
    out.write(request_header(api_key, version, correlation_id, client_id))
    entity_writer(load_request_schema(api_key, version))(out, request)
    return out.getvalue()


@pytest.mark.parametrize(
    ("api_key", "version"), PAIRS, ids=[f"{ApiKey(k).name}-v{v}" for k, v in PAIRS]
)
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_supported_request_round_trips(api_key, version, data):
    request = data.draw(st.from_type(load_request_schema(api_key, version)))
    context, decoded = CODEC.decode_request(frame(api_key, version, request), "PLAINTEXT", "x")
    assert (context.api_key, context.api_version, context.correlation_id) == (api_key, version, 42)
    assert context.client_id == "test-client"
    assert decoded == request


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_frames_decode_or_raise_invalid_request(data):
    api_key, version = data.draw(st.sampled_from(PAIRS))
    request = data.draw(st.from_type(load_request_schema(api_key, version)))
    raw = bytearray(frame(api_key, version, request))
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(4, len(raw) - 1)) if len(raw) > 4 else 0
        raw[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    # Either it decodes, or InvalidRequestError (the connection is closed); nothing else.
    with contextlib.suppress(InvalidRequestError):
        CODEC.decode_request(bytes(raw[:cut]), "PLAINTEXT", "x")


def test_huge_array_count_is_refused_before_parsing():
    # A Metadata v9 request whose topics array claims 2**31 - 2 entries in 5 bytes: kio's
    # native reader would try to allocate for all of them and abort the process.
    head = frame(
        3,
        9,
        load_request_schema(3, 9)(
            topics=(),
            allow_auto_topic_creation=True,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ),
    )
    header_len = len(head) - 5  # the v9 body is: compact array, 3 booleans, tagged fields
    bad = head[:header_len] + b"\xff\xff\xff\xff\x07" + b"\x00" * 4
    with pytest.raises(InvalidRequestError, match="array of"):
        CODEC.decode_request(bad, "PLAINTEXT", "x")


def test_unknown_api_key_and_unsupported_version():
    with pytest.raises(InvalidRequestError, match="unknown api key 999"):
        CODEC.decode_request(struct.pack(">hhi", 999, 0, 1) + b"\x00\x00", "P", "x")
    with pytest.raises(UnsupportedVersionRequestError) as info:
        CODEC.decode_request(struct.pack(">hhi", 18, 99, 7) + b"\x00\x00", "P", "x")
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (18, 99, 7)


def test_trailing_bytes_are_ignored_as_kafka_does():
    # librdkafka 2.16 sends three bytes after a Metadata v12 body; Kafka ignores them.
    frame_bytes = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    context, request = CODEC.decode_request(frame_bytes, "P", "x")
    assert (context.api_key, context.api_version, context.client_id) == (3, 12, "rdkafka")
    assert request.topics is None
