"""The handler table: ApiVersions advertises exactly what is served, and a table that does
not match the advertised apis stops the broker at import."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from core.server import apis, sasl_apis
from core.server.api_keys import INTER_BROKER_VERSIONS, SUPPORTED_VERSIONS, ApiKey
from core.server.broker import Broker
from core.server.config import load_broker_config
from core.server.handlers import HANDLERS, HandlerTableError, merge_handlers

from .fake_broker import FakeBroker, call, schema


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[FakeBroker]:
    b = FakeBroker(tmp_path)
    yield b
    b.close()


def served_ranges() -> dict[int, tuple[int, int]]:
    return {int(api): SUPPORTED_VERSIONS.get(api) or INTER_BROKER_VERSIONS[api] for api in HANDLERS}


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_advertises_exactly_the_handler_table(
    broker: FakeBroker, version: int
) -> None:
    request = schema(ApiKey.API_VERSIONS, version).ApiVersionsRequest(
        **({"client_software_name": "t", "client_software_version": "1"} if version >= 3 else {})
    )
    response = call(broker, ApiKey.API_VERSIONS, version, request)
    assert response.error_code == ErrorCode.none
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised == served_ranges()
    assert [k.api_key for k in response.api_keys] == sorted(advertised)


def test_the_broker_decodes_every_advertised_version_and_nothing_unserved(
    tmp_path: Path,
) -> None:
    codec = Broker(load_broker_config(None, {"log.dirs": str(tmp_path)})).codec
    decoded = {**codec.supported, **codec.inter_broker}
    assert decoded == served_ranges()
    for api, (low, high) in decoded.items():
        for version in range(low, high + 1):
            assert codec.response_type(api, version) is not None


def test_an_advertised_api_without_a_handler_is_refused() -> None:
    table = {k: v for k, v in apis.HANDLERS.items() if k != ApiKey.FETCH}
    with pytest.raises(HandlerTableError, match=r"advertised apis without a handler: FETCH\b"):
        merge_handlers({"apis": table}, {ApiKey.FETCH: (4, 16)}, {})


def test_a_handler_without_a_version_range_is_refused() -> None:
    advertised = {api: SUPPORTED_VERSIONS[api] for api in apis.HANDLERS}
    table = {**apis.HANDLERS, ApiKey.LEADER_AND_ISR: apis.HANDLERS[ApiKey.METADATA]}
    with pytest.raises(HandlerTableError, match=r"without an advertised version range: "):
        merge_handlers({"apis": table}, advertised, {})
    # With its inter-broker range it is served.
    merged = merge_handlers({"apis": table}, advertised, INTER_BROKER_VERSIONS)
    assert ApiKey.LEADER_AND_ISR in merged


def test_an_api_served_twice_is_refused() -> None:
    advertised = {api: SUPPORTED_VERSIONS[api] for api in sasl_apis.HANDLERS}
    with pytest.raises(HandlerTableError, match="SASL_HANDSHAKE is served by both a and b"):
        merge_handlers({"a": sasl_apis.HANDLERS, "b": sasl_apis.HANDLERS}, advertised, {})
