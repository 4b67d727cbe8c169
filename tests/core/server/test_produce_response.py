"""Produce answers written by the hand encoder are byte for byte kio's."""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32, i64

from core.server.api_keys import SUPPORTED_VERSIONS, ApiKey
from core.server.produce_response import PartitionAnswer, ProduceAnswer, encode_produce_response
from core.server.protocol import ProtocolCodec, RequestContext

CODEC = ProtocolCodec(SUPPORTED_VERSIONS)
LOW, HIGH = SUPPORTED_VERSIONS[ApiKey.PRODUCE]
VERSIONS = list(range(LOW, HIGH + 1))
_TEXT = st.text(max_size=12)


def _kio_frame(version: int, correlation_id: int, response: object) -> bytes:
    """The frame as kio's generic writer encodes it."""
    cls = load_response_schema(ApiKey.PRODUCE, version)
    header_cls = cls.__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(correlation_id=i32(correlation_id)))
    entity_writer(cls)(out, response)
    body = out.getvalue()
    return struct.pack(">i", len(body)) + body


def _module(version: int) -> object:
    cls = load_response_schema(ApiKey.PRODUCE, version)
    return __import__(cls.__module__, fromlist=["x"])


def _leaders(m: Any) -> st.SearchStrategy[object]:
    """KIP-951 leader hints of the version whose kio module is ``m``."""
    return st.builds(
        m.LeaderIdAndEpoch,
        leader_id=st.integers(-1, 5).map(i32),
        leader_epoch=st.integers(-1, 5).map(i32),
    )


def _endpoints(m: Any) -> st.SearchStrategy[tuple[object, ...]]:
    """Up to two KIP-951 node endpoints of the version whose kio module is ``m``."""
    return st.lists(
        st.builds(
            m.NodeEndpoint,
            node_id=st.integers(0, 5).map(i32),
            host=_TEXT,
            port=st.integers(0, 65535).map(i32),
            rack=st.none() | _TEXT,
        ),
        max_size=2,
    ).map(tuple)


def _response_strategy(version: int, tagged: bool) -> st.SearchStrategy[object]:
    """ProduceResponses of ``version``; with ``tagged``, v10+ ones may set the tagged
    fields (current leader, node endpoints)."""
    m = _module(version)
    fields: dict[str, st.SearchStrategy[object]] = {
        "index": st.integers(-(2**31), 2**31 - 1).map(i32),
        "error_code": st.sampled_from(list(ErrorCode)),
        "base_offset": st.integers(-1, 2**63 - 1).map(i64),
        "log_append_time": st.none()
        | st.integers(0, 2**41).map(
            lambda ms: datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
        ),
    }
    if version >= 5:
        fields["log_start_offset"] = st.integers(-1, 2**63 - 1).map(i64)
    if version >= 8:
        fields["record_errors"] = st.lists(
            st.builds(
                m.BatchIndexAndErrorMessage,  # type: ignore[attr-defined]
                batch_index=st.integers(0, 2**31 - 1).map(i32),
                batch_index_error_message=st.none() | _TEXT,
            ),
            max_size=3,
        ).map(tuple)
        fields["error_message"] = st.none() | _TEXT
    top: dict[str, st.SearchStrategy[object]] = {}
    if version >= 10 and tagged:
        fields["current_leader"] = _leaders(m)
        top["node_endpoints"] = _endpoints(m)
    partition = st.builds(m.PartitionProduceResponse, **fields)  # type: ignore[attr-defined]
    topic = st.builds(
        m.TopicProduceResponse,  # type: ignore[attr-defined]
        name=_TEXT,
        partition_responses=st.lists(partition, max_size=4).map(tuple),
    )
    return st.builds(
        load_response_schema(ApiKey.PRODUCE, version),
        responses=st.lists(topic, max_size=3).map(tuple),
        throttle_time=st.integers(0, 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms)),
        **top,
    )


def _answer_of(response: Any) -> ProduceAnswer:
    """kio's ProduceResponse of any version as the same ``ProduceAnswer``."""

    def ms(value: Any) -> int:
        return -1 if value is None else round(value.timestamp() * 1000)

    return ProduceAnswer(
        topics=tuple(
            (
                topic.name,
                tuple(
                    PartitionAnswer(
                        p.index,
                        p.error_code,
                        p.base_offset,
                        ms(p.log_append_time),
                        getattr(p, "log_start_offset", -1),
                        tuple(
                            (e.batch_index, e.batch_index_error_message)
                            for e in getattr(p, "record_errors", ())
                        ),
                        getattr(p, "error_message", None),
                        getattr(p, "current_leader", None),
                    )
                    for p in topic.partition_responses
                ),
            )
            for topic in response.responses
        ),
        throttle_time=response.throttle_time,
        node_endpoints=getattr(response, "node_endpoints", ()),
    )


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_hand_encoding_matches_kio(version, data, correlation_id):
    response = data.draw(_response_strategy(version, tagged=False))
    assert encode_produce_response(correlation_id, version, _answer_of(response)) == _kio_frame(
        version, correlation_id, response
    )


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 10])
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_answers_with_tagged_fields_are_kios(version, data, correlation_id):
    """A leader hint (tagged fields) is left to kio, and the codec's answer is kio's."""
    response = data.draw(_response_strategy(version, tagged=True))
    context = RequestContext(ApiKey.PRODUCE, version, correlation_id, None, "PLAINTEXT", "x")
    assert CODEC.encode_response(context, response) == _kio_frame(version, correlation_id, response)


def test_a_leader_hint_goes_to_kio():
    m = _module(11)
    partition = m.PartitionProduceResponse(  # type: ignore[attr-defined]
        index=i32(0),
        error_code=ErrorCode.not_leader_or_follower,
        base_offset=i64(-1),
        record_errors=(),
        current_leader=m.LeaderIdAndEpoch(leader_id=i32(2), leader_epoch=i32(7)),  # type: ignore[attr-defined]
    )
    response = m.ProduceResponse(  # type: ignore[attr-defined]
        responses=(m.TopicProduceResponse(name="t", partition_responses=(partition,)),)  # type: ignore[attr-defined]
    )
    assert encode_produce_response(1, 11, _answer_of(response)) is None
    context = RequestContext(ApiKey.PRODUCE, 11, 1, None, "PLAINTEXT", "x")
    assert CODEC.encode_response(context, response) == _kio_frame(11, 1, response)


# -- ProduceAnswer: what handle_produce builds ---------------------------------------------------
_MS = st.integers(0, 2**41)  # millisecond timestamps up to the year 2039 and well beyond


def _answer_strategy(version: int, tagged: bool) -> st.SearchStrategy[ProduceAnswer]:
    """ProduceAnswers as the handler builds them: errors, messages, record errors, log append
    times, throttle times, and with ``tagged`` (v10+) leader hints and node endpoints."""
    m = _module(version)
    leader = st.none()
    endpoints: st.SearchStrategy[tuple[object, ...]] = st.just(())
    if tagged:
        leader = st.none() | _leaders(m)
        endpoints = _endpoints(m)
    partition = st.builds(
        PartitionAnswer,
        index=st.integers(-(2**31), 2**31 - 1),
        error_code=st.sampled_from(list(ErrorCode)),
        base_offset=st.integers(-1, 2**63 - 1),
        log_append_time_ms=st.just(-1) | _MS,
        log_start_offset=st.integers(-1, 2**63 - 1),
        record_errors=st.lists(
            st.tuples(st.integers(0, 2**31 - 1), st.none() | _TEXT), max_size=3
        ).map(tuple),
        error_message=st.none() | _TEXT,
        current_leader=leader,
    )
    topic = st.tuples(_TEXT, st.lists(partition, max_size=4).map(tuple))
    return st.builds(
        ProduceAnswer,
        topics=st.lists(topic, max_size=3).map(tuple),
        throttle_time=st.integers(0, 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms)),
        node_endpoints=endpoints,
    )


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_an_answer_is_encoded_as_kio_encodes_it(version, data, correlation_id):
    """The handler's answer, hand-encoded, is byte for byte kio's ProduceResponse of the
    same fields; the throttle a quota sets (dataclasses.replace) included."""
    answer = data.draw(_answer_strategy(version, tagged=False))
    kio = answer.to_kio(load_response_schema(ApiKey.PRODUCE, version))
    assert encode_produce_response(correlation_id, version, answer) == _kio_frame(
        version, correlation_id, kio
    )
    throttled = dataclasses.replace(answer, throttle_time=datetime.timedelta(milliseconds=7))
    context = RequestContext(ApiKey.PRODUCE, version, correlation_id, None, "PLAINTEXT", "x")
    frame = CODEC.encode_response(context, throttled)
    assert frame[-5 if version >= 9 else -4 :][:4] == struct.pack(">i", 7)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_an_answer_with_leader_hints_is_kios(version, data, correlation_id):
    """With a leader hint set (v10+), the codec hands the answer to kio's writer; the
    frame is kio's whatever the version."""
    answer = data.draw(_answer_strategy(version, tagged=version >= 10))
    kio = answer.to_kio(load_response_schema(ApiKey.PRODUCE, version))
    context = RequestContext(ApiKey.PRODUCE, version, correlation_id, None, "PLAINTEXT", "x")
    assert CODEC.encode_response(context, answer) == _kio_frame(version, correlation_id, kio)


@settings(max_examples=500, deadline=None)
@given(ms=_MS)
def test_a_log_append_time_is_answered_to_the_millisecond(ms):
    """kio's datetime field goes through a float of seconds; the hand encoder writes the
    milliseconds as they are, and both agree."""
    answer = ProduceAnswer((("t", (PartitionAnswer(0, 0, 5, ms, 0),)),))
    kio = answer.to_kio(load_response_schema(ApiKey.PRODUCE, 11))
    frame = encode_produce_response(1, 11, answer)
    assert frame == _kio_frame(11, 1, kio)
    # size, correlation id, header tags, 1 topic, "t", 1 partition, index, error, base offset
    assert struct.unpack_from(">q", frame, 4 + 4 + 1 + 1 + 2 + 1 + 4 + 2 + 8)[0] == ms
