"""The inter-broker APIs Kafka 4 removed (LeaderAndIsr, StopReplica, UpdateMetadata,
ControlledShutdown): their classes round-trip through kio's serializers and tierlog's codec,
put the bytes of Kafka 3.x's message specifications on the wire, and malformed frames of
them are refused before kio parses them."""

from __future__ import annotations

import io
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from core.server.api_keys import INTER_BROKER_VERSIONS, SUPPORTED_VERSIONS, ApiKey
from core.server.broker_connection import decode_response, encode_request
from core.server.errors import InvalidRequestError
from core.server.interbroker_schema import (
    SCHEMAS,
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    LeaderAndIsrTopicError,
    LeaderAndIsrTopicState,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from core.server.protocol import (
    ProtocolCodec,
    RequestContext,
    load_request_schema,
    load_response_schema,
)

CODEC = ProtocolCodec(SUPPORTED_VERSIONS)
CLASSES = [cls for pair in SCHEMAS.values() for cls in pair]
TOPIC_ID = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")


def encode(entity: object) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def test_one_flexible_version_of_each_api_is_registered():
    assert {(int(k), lo) for k, (lo, hi) in INTER_BROKER_VERSIONS.items() if lo == hi} == set(
        SCHEMAS
    )
    for (api_key, version), (request, response) in SCHEMAS.items():
        assert load_request_schema(api_key, version) is request
        assert load_response_schema(api_key, version) is response
        for cls in (request, response):
            assert (cls.__api_key__, cls.__version__, cls.__flexible__) == (api_key, version, True)
        assert request.__header_schema__.__version__ == 2
        assert response.__header_schema__.__version__ == 1


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_class_round_trips_through_kio(cls, data):
    value = data.draw(st.from_type(cls))
    raw = encode(value)
    decoded, used = entity_reader(cls)(raw, 0)
    assert used == len(raw)
    assert decoded == value


@pytest.mark.parametrize("pair", sorted(SCHEMAS), ids=lambda p: ApiKey(p[0]).name)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_codec_serves_and_the_client_reads_them(pair, data):
    request_cls, response_cls = SCHEMAS[pair]
    request = data.draw(st.from_type(request_cls))
    frame = encode_request(request, 7, "broker-2-controller")
    context, decoded = CODEC.decode_request(frame[4:], "INTERNAL", "127.0.0.1:1")
    assert (context.api_key, context.api_version) == pair
    assert (context.correlation_id, context.client_id) == (7, "broker-2-controller")
    assert decoded == request
    response = data.draw(st.from_type(response_cls))
    answer = CODEC.encode_response(context, response)
    assert decode_response(response_cls, answer[4:]) == response


# LeaderAndIsr v7, byte by byte from LeaderAndIsrRequest.json (flexible versions 4+).
GOLDEN_REQUEST = bytes.fromhex(
    "0000008b"  # frame size: 139 bytes follow (30 of header, 109 of body)
    # request header v2
    "0004"  # api key 4
    "0007"  # version 7
    "0000002a"  # correlation id 42
    "0013"  # client id: int16 length 19, even in header v2
    "62726f6b65722d312d636f6e74726f6c6c6572"  # "broker-1-controller"
    "00"  # no tagged fields
    # body
    "00000001"  # ControllerId 1
    "00"  # isKRaftController false
    "00000005"  # ControllerEpoch 5
    "000000000000002a"  # BrokerEpoch 42
    "02"  # Type 2 (full)
    "02"  # TopicStates: compact array, 1 element (n + 1)
    "07"  # TopicName: compact string length (6 + 1)
    "6f7264657273"  # "orders"
    "000102030405060708090a0b0c0d0e0f"  # TopicId: 16 bytes
    "02"  # PartitionStates: 1 element
    "00000000"  # PartitionIndex 0
    "00000005"  # ControllerEpoch 5
    "00000001"  # Leader 1
    "00000007"  # LeaderEpoch 7
    "030000000100000002"  # Isr [1, 2]
    "00000003"  # PartitionEpoch 3
    "04000000010000000200000003"  # Replicas [1, 2, 3]
    "0200000003"  # AddingReplicas [3]
    "01"  # RemovingReplicas []
    "01"  # IsNew true
    "00"  # LeaderRecoveryState 0
    "00"  # partition state: no tagged fields
    "00"  # topic state: no tagged fields
    "02"  # LiveLeaders: 1 element
    "00000001"  # BrokerId 1
    "036231"  # HostName "b1"
    "00002384"  # Port 9092
    "00"  # live leader: no tagged fields
    "00"  # request: no tagged fields
)
GOLDEN_REQUEST_VALUE = LeaderAndIsrRequest(
    controller_id=1,
    controller_epoch=5,
    broker_epoch=42,
    type_=2,
    topic_states=(
        LeaderAndIsrTopicState(
            topic_name="orders",
            topic_id=TOPIC_ID,
            partition_states=(
                LeaderAndIsrPartitionState(
                    partition_index=0,
                    controller_epoch=5,
                    leader=1,
                    leader_epoch=7,
                    isr=(1, 2),
                    partition_epoch=3,
                    replicas=(1, 2, 3),
                    adding_replicas=(3,),
                    is_new=True,
                ),
            ),
        ),
    ),
    live_leaders=(LeaderAndIsrLiveLeader(broker_id=1, host_name="b1", port=9092),),
)
# LeaderAndIsrResponse v7: response header v1, errors by topic id.
GOLDEN_RESPONSE = bytes.fromhex(
    "0000002a"  # correlation id 42
    "00"  # response header v1: no tagged fields
    "0000"  # ErrorCode 0
    "02"  # Topics: 1 element
    "000102030405060708090a0b0c0d0e0f"  # TopicId
    "02"  # PartitionErrors: 1 element
    "00000000"  # PartitionIndex 0
    "004a"  # ErrorCode 74 (FENCED_LEADER_EPOCH)
    "00"  # partition error: no tagged fields
    "00"  # topic: no tagged fields
    "00"  # response: no tagged fields
)


def test_leader_and_isr_v7_request_has_the_bytes_of_kafkas_specification():
    assert encode_request(GOLDEN_REQUEST_VALUE, 42, "broker-1-controller") == GOLDEN_REQUEST
    context, decoded = CODEC.decode_request(GOLDEN_REQUEST[4:], "INTERNAL", "127.0.0.1:1")
    assert context.client_id == "broker-1-controller"
    assert decoded == GOLDEN_REQUEST_VALUE


def test_leader_and_isr_v7_response_has_the_bytes_of_kafkas_specification():
    value = LeaderAndIsrResponse(
        error_code=ErrorCode.none,
        topics=(
            LeaderAndIsrTopicError(
                topic_id=TOPIC_ID,
                partition_errors=(
                    LeaderAndIsrPartitionError(
                        partition_index=0, error_code=ErrorCode.fenced_leader_epoch
                    ),
                ),
            ),
        ),
    )
    context = RequestContext(4, 7, 42, "broker-1-controller", "INTERNAL", "127.0.0.1:1")
    assert CODEC.encode_response(context, value) == len(GOLDEN_RESPONSE).to_bytes(4) + (
        GOLDEN_RESPONSE
    )
    assert decode_response(LeaderAndIsrResponse, GOLDEN_RESPONSE) == value


def update_metadata_frame() -> bytes:
    request = UpdateMetadataRequest(
        controller_id=1,
        controller_epoch=3,
        broker_epoch=9,
        topic_states=(
            UpdateMetadataTopicState(
                topic_name="orders",
                topic_id=TOPIC_ID,
                partition_states=(
                    UpdateMetadataPartitionState(
                        partition_index=0,
                        controller_epoch=3,
                        leader=1,
                        leader_epoch=4,
                        isr=(1, 2),
                        zk_version=2,
                        replicas=(1, 2),
                    ),
                ),
            ),
        ),
        live_brokers=(
            UpdateMetadataBroker(
                id=1,
                endpoints=(
                    UpdateMetadataEndpoint(
                        port=9092, host="b1", listener="INTERNAL", security_protocol=0
                    ),
                ),
                rack=None,
            ),
        ),
    )
    return encode_request(request, 1, "broker-1-controller")[4:]


@pytest.mark.parametrize(
    "frame",
    [GOLDEN_REQUEST[4:], update_metadata_frame()],
    ids=["LeaderAndIsr", "UpdateMetadata"],
)
def test_every_truncation_is_refused_before_kio_parses_it(frame):
    CODEC.decode_request(frame, "INTERNAL", "x")  # whole: fine
    for cut in range(len(frame)):
        with pytest.raises(InvalidRequestError):
            CODEC.decode_request(frame[:cut], "INTERNAL", "x")


def test_an_oversized_array_count_is_refused():
    frame = GOLDEN_REQUEST[4:]
    # TopicStates' count follows the 30-byte header and ControllerId..Type (18 bytes).
    at = 30 + 18
    assert frame[at] == 0x02
    # 2**31 - 2 elements (uvarint 0xffffffff07): kio's native reader would try to allocate
    # them all and abort the process.
    patched = frame[:at] + bytes.fromhex("ffffffff07") + frame[at + 1 :]
    with pytest.raises(InvalidRequestError, match="array of 2147483646 elements"):
        CODEC.decode_request(patched, "INTERNAL", "x")


def test_an_oversized_string_length_is_refused():
    frame = bytearray(GOLDEN_REQUEST[4:])
    name_at = frame.index(b"\x07orders")
    frame[name_at] = 0x7F  # "orders" claims 126 bytes, more than the frame holds
    with pytest.raises(InvalidRequestError, match="runs past the frame"):
        CODEC.decode_request(bytes(frame), "INTERNAL", "x")


def test_a_codec_without_them_answers_unknown_api_key():
    # The broker loads an inter-broker api only once it has a handler for it.
    codec = ProtocolCodec(SUPPORTED_VERSIONS, {})
    with pytest.raises(InvalidRequestError, match="unknown api key 4"):
        codec.decode_request(GOLDEN_REQUEST[4:], "INTERNAL", "x")
