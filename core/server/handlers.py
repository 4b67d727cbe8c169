"""The broker's handler table, and ApiVersions, which advertises exactly that table.

Each handler module keeps a ``HANDLERS`` table of the apis it serves; this module merges
them and checks the result when it is imported, so that a wiring mistake stops the broker
from starting instead of surfacing as a request that decodes and gets no answer:

- every api advertised in ``SUPPORTED_VERSIONS`` has a handler;
- every handler serves an api with a version range (``SUPPORTED_VERSIONS``, or
  ``INTER_BROKER_VERSIONS`` for the controller's apis);
- no api is served by two modules.

ApiVersions answers with the version range of every api in the table, the inter-broker
apis included once they have a handler (Kafka's ZooKeeper-mode brokers advertise them too;
other brokers negotiate their versions from it).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from kio.schema.errors import ErrorCode

from core.server import (
    acl_apis,
    admin_apis,
    apis,
    cluster_apis,
    controller_apis,
    group_apis,
    log_dir_apis,
    membership_apis,
    partition_apis,
    producer_apis,
    quota_apis,
    sasl_apis,
    scram_apis,
    transaction_apis,
)
from core.server.api_keys import INTER_BROKER_VERSIONS, SUPPORTED_VERSIONS, ApiKey
from core.server.handler_support import NO_THROTTLE, BrokerServices, Handler
from core.server.kio_build import make, nested
from core.server.protocol import RequestContext


class HandlerTableError(RuntimeError):
    """The handler tables do not match the advertised apis (a bug, found at import)."""


def merge_handlers(
    tables: Mapping[str, Mapping[int, Handler]],
    advertised: Mapping[ApiKey, tuple[int, int]],
    inter_broker: Mapping[ApiKey, tuple[int, int]],
) -> dict[ApiKey, Handler]:
    """One table from the ``tables`` of each module (by module name).

    Raises:
        HandlerTableError: an advertised api has no handler, a handler has no version range,
            or two modules serve the same api; the message names the apis and modules.
    """
    merged: dict[ApiKey, Handler] = {}
    owner: dict[ApiKey, str] = {}
    problems = []
    for module, table in tables.items():
        for key, handler in table.items():
            api = ApiKey(key)
            if api in owner:
                problems.append(f"{api.name} is served by both {owner[api]} and {module}")
            owner[api] = module
            merged[api] = handler
    missing = sorted(set(advertised) - set(merged))
    if missing:
        names = ", ".join(api.name for api in missing)
        problems.append(f"advertised apis without a handler: {names}")
    unversioned = sorted(api for api in merged if api not in advertised and api not in inter_broker)
    if unversioned:
        names = ", ".join(f"{api.name} ({owner[api]})" for api in unversioned)
        problems.append(f"handlers without an advertised version range: {names}")
    if problems:
        raise HandlerTableError("; ".join(problems))
    return merged


def advertised_versions(
    handlers: Mapping[ApiKey, Handler],
    supported: Mapping[ApiKey, tuple[int, int]] = SUPPORTED_VERSIONS,
    inter_broker: Mapping[ApiKey, tuple[int, int]] = INTER_BROKER_VERSIONS,
) -> dict[ApiKey, tuple[int, int]]:
    """The version range of every api in ``handlers``, as ApiVersions advertises it."""
    return {api: supported.get(api) or inter_broker[api] for api in sorted(handlers)}


async def handle_api_versions(broker: BrokerServices, ctx: RequestContext, request: Any) -> Any:
    return api_versions_response(broker.codec.response_type(ctx.api_key, ctx.api_version))


def api_versions_response(response_type: type, error: ErrorCode = ErrorCode.none) -> Any:
    """An ApiVersions response of ``response_type`` listing ``ADVERTISED_VERSIONS``."""
    version_cls = nested(response_type, "ApiVersion")
    keys = tuple(
        make(version_cls, api_key=int(k), min_version=lo, max_version=hi)
        for k, (lo, hi) in ADVERTISED_VERSIONS.items()
    )
    return make(
        response_type,
        error_code=error,
        api_keys=keys,
        throttle_time=NO_THROTTLE,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )


HANDLERS: Mapping[ApiKey, Handler] = MappingProxyType(
    merge_handlers(
        {
            "handlers": {ApiKey.API_VERSIONS: handle_api_versions},
            "apis": apis.HANDLERS,
            "admin_apis": admin_apis.HANDLERS,
            "group_apis": group_apis.HANDLERS,
            "membership_apis": membership_apis.HANDLERS,
            "acl_apis": acl_apis.HANDLERS,
            "sasl_apis": sasl_apis.HANDLERS,
            "controller_apis": controller_apis.HANDLERS,
            "partition_apis": partition_apis.HANDLERS,
            "log_dir_apis": log_dir_apis.HANDLERS,
            "producer_apis": producer_apis.HANDLERS,
            "cluster_apis": cluster_apis.HANDLERS,
            "scram_apis": scram_apis.HANDLERS,
            "quota_apis": quota_apis.HANDLERS,
            "transaction_apis": transaction_apis.HANDLERS,
        },
        SUPPORTED_VERSIONS,
        INTER_BROKER_VERSIONS,
    )
)
# What ApiVersions advertises: the range of every api in HANDLERS.
ADVERTISED_VERSIONS: Mapping[ApiKey, tuple[int, int]] = MappingProxyType(
    advertised_versions(HANDLERS)
)
# The inter-broker apis the codec must decode: those with a handler.
SERVED_INTER_BROKER_VERSIONS: Mapping[ApiKey, tuple[int, int]] = MappingProxyType(
    {api: r for api, r in INTER_BROKER_VERSIONS.items() if api in HANDLERS}
)
