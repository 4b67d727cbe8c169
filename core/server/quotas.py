"""Client quotas: Kafka's ClientQuotaManager for produce, fetch and request time, and the
quota configs they enforce (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546).

Each quota type has a manager that keeps one rate sensor per quota entity in use
(``core.server.sampled_rate``: ``quota.window.num`` samples of
``quota.window.size.seconds``). A request's (user, client id) is mapped to the entity whose
quota applies, in Kafka's order of precedence:

1. ``/config/users/<user>/clients/<client-id>``
2. ``/config/users/<user>/clients/<default>``
3. ``/config/users/<user>``
4. ``/config/users/<default>/clients/<client-id>``
5. ``/config/users/<default>/clients/<default>``
6. ``/config/users/<default>``
7. ``/config/clients/<client-id>``
8. ``/config/clients/<default>``

and the sensor is shared by every client mapped to the same entity: a user quota is shared
by all of that user's client ids, a ``<default>`` client quota gives each client id its own
sensor with the default limit (Kafka's metric tags). The user is the principal's name
(``User:alice`` is ``alice``; ``ANONYMOUS`` without authentication).

A recorded value that takes the rate above the quota returns the throttle time, the delay
after which the rate is back at the quota (``sampled_rate.throttle_time_ms``); the caller
sets it as the response's ``throttle_time_ms`` and the connection is muted that long
(KIP-219, ``core.server.throttle``). Produce and fetch throttle times are not capped
(Kafka's), request-time ones are capped at one window (Kafka's ClientRequestQuotaManager).

A type with no quota configured records nothing (Kafka's ``quotasEnabled``). Sensors idle
for an hour are dropped, as Kafka expires them.

``connection_creation_rate`` (ip entities) and ``controller_mutation_rate`` are stored,
validated and described, but not enforced: tierlog does not throttle connection accepts
(Kafka's ConnectionQuotas) nor topic creations and deletions (KIP-599).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from core.errors import CoreError, KafkaStorageError
from core.server.quota_entity import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    ENTITY_TYPES,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    InvalidQuotaError,
    QuotaEntity,
    UnsupportedEntityTypeError,
    validate_entity,
    validate_value,
)
from core.server.quota_store import ClientQuotaStore, Configs
from core.server.sampled_rate import SampledStat, throttle_time_ms

log = logging.getLogger(__name__)

# Kafka's bound for "no quota": Long.MAX_VALUE as a double.
UNLIMITED = float(2**63 - 1)
_INT32_MAX = 2**31 - 1
# Kafka drops the sensors of a client idle this long (InactiveSensorExpirationTimeSeconds).
SENSOR_EXPIRY_MS = 3_600_000
_SWEEP_INTERVAL_MS = 60_000
# Kafka's default MetricConfig, used by the throttle-time average (2 samples of 30 s).
_AVERAGE_SAMPLES = 2
_AVERAGE_WINDOW_MS = 30_000
# DescribeClientQuotas match types.
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class QuotaType(enum.Enum):
    """Kafka's QuotaType names (the ``type=`` of its quota metrics)."""

    PRODUCE = "Produce"
    FETCH = "Fetch"
    REQUEST = "Request"


QUOTA_KEY = {
    QuotaType.PRODUCE: PRODUCER_BYTE_RATE,
    QuotaType.FETCH: CONSUMER_BYTE_RATE,
    QuotaType.REQUEST: REQUEST_PERCENTAGE,
}


def user_of(principal: str) -> str:
    """The user quotas are set for: the name of a ``Type:name`` principal."""
    return principal.split(":", 1)[1] if ":" in principal else principal


@dataclass(slots=True)
class _Sensors:
    rate: SampledStat
    throttle: SampledStat  # throttle times computed, for their average
    last_used_ms: int


@dataclass(frozen=True, slots=True)
class QuotaMetric:
    """One sensor as a metrics reader sees it (Kafka's ``kafka.server:type=<type>,
    user=<user>,client-id=<client-id>`` metrics; ``""`` where the tag does not apply)."""

    quota_type: QuotaType
    user: str
    client_id: str
    rate: float  # bytes per second, or percent for Request
    throttle_time_avg_ms: float  # NaN when nothing was throttled in the last minute
    limit: float  # UNLIMITED when no quota applies


# The quota levels in use, as Kafka's QuotaTypes bits.
_CLIENT_LEVEL = 1
_USER_LEVEL = 2
_USER_CLIENT_LEVEL = 4


class ClientQuotaManager:
    """One quota type's limits and sensors (Kafka's ClientQuotaManager with its
    DefaultQuotaCallback).

    Args:
        quota_type: what is measured.
        samples: ``quota.window.num``.
        window_ms: ``quota.window.size.seconds`` in ms.
        bounded: cap throttle times at one window (request quotas).
        clock: milliseconds of a monotonic clock.
    """

    def __init__(
        self,
        quota_type: QuotaType,
        samples: int,
        window_ms: int,
        *,
        bounded: bool = False,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.quota_type = quota_type
        self.samples = samples
        self.window_ms = window_ms
        self.bounded = bounded
        self.clock = clock
        self._limits: dict[QuotaEntity, float] = {}
        self._levels = 0
        self._sensors: dict[tuple[str, str], _Sensors] = {}
        self._next_sweep_ms = 0

    # -- limits --------------------------------------------------------------------------------
    def set_limit(self, entity: QuotaEntity, limit: float | None) -> None:
        """The quota of a user / client-id / (user, client-id) entity; None removes it."""
        if limit is None:
            if self._limits.pop(entity, None) is not None:
                log.info("removed the %s quota of %s", self.quota_type.value, entity)
        else:
            self._limits[entity] = limit
            log.info("%s quota of %s is now %g", self.quota_type.value, entity, limit)
        levels = 0
        for e in self._limits:
            types = e.types
            if types == {USER, CLIENT_ID}:
                levels |= _USER_CLIENT_LEVEL
            elif types == {USER}:
                levels |= _USER_LEVEL
            else:
                levels |= _CLIENT_LEVEL
        self._levels = levels

    @property
    def enabled(self) -> bool:
        return self._levels != 0

    def _has(self, **names: str | None) -> bool:
        return QuotaEntity.of(**names) in self._limits

    def _get(self, **names: str | None) -> float | None:
        return self._limits.get(QuotaEntity.of(**names))

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """The (user, client-id) of the sensor a request counts against: the entity whose
        quota applies, ``""`` for a level it does not name (Kafka's quotaMetricTags)."""
        levels = self._levels
        if levels in (0, _CLIENT_LEVEL):
            return "", client_id
        if levels == _USER_LEVEL:
            return user, ""
        if levels == _USER_CLIENT_LEVEL:
            return user, client_id
        if self._has(user=user, client_id=client_id) or self._has(user=user, client_id=None):
            return user, client_id
        if self._has(user=user):
            return user, ""
        if self._has(user=None, client_id=client_id) or self._has(user=None, client_id=None):
            return user, client_id
        if self._has(user=None):
            return user, ""
        return "", client_id

    def limit(self, tags: tuple[str, str]) -> float:
        """The quota of the sensor with ``tags`` (Kafka's DefaultQuotaCallback.quotaLimit)."""
        user, client_id = tags
        found: float | None = None
        if user and client_id:
            for u, c in ((user, client_id), (user, None), (None, client_id), (None, None)):
                found = self._get(user=u, client_id=c)
                if found is not None:
                    break
        elif user:
            found = self._get(user=user)
            if found is None:
                found = self._get(user=None)
        elif client_id:
            found = self._get(client_id=client_id)
            if found is None:
                found = self._get(client_id=None)
        return UNLIMITED if found is None else found

    def quota_for(self, user: str, client_id: str) -> float:
        """The quota that applies to a request of ``user`` and ``client_id``."""
        return self.limit(self.metric_tags(user, client_id))

    # -- recording -----------------------------------------------------------------------------
    def _sensors_for(self, tags: tuple[str, str], now_ms: int) -> _Sensors:
        sensors = self._sensors.get(tags)
        if sensors is None:
            sensors = _Sensors(
                SampledStat(self.samples, self.window_ms),
                SampledStat(_AVERAGE_SAMPLES, _AVERAGE_WINDOW_MS),
                now_ms,
            )
            self._sensors[tags] = sensors
        sensors.last_used_ms = now_ms
        if now_ms >= self._next_sweep_ms:
            self._expire(now_ms)
        return sensors

    def _expire(self, now_ms: int) -> None:
        self._next_sweep_ms = now_ms + _SWEEP_INTERVAL_MS
        idle = [t for t, s in self._sensors.items() if now_ms - s.last_used_ms >= SENSOR_EXPIRY_MS]
        for tags in idle:
            del self._sensors[tags]

    def record(self, user: str, client_id: str, value: float) -> int:
        """Record ``value`` for a request of ``user`` and ``client_id``; the throttle time
        in ms when it takes the rate above the quota, else 0 (Kafka's
        maybeRecordAndGetThrottleTimeMs)."""
        if not self.enabled:
            return 0
        now = self.clock()
        tags = self.metric_tags(user, client_id)
        sensors = self._sensors_for(tags, now)
        sensors.rate.record(value, now)
        bound = self.limit(tags)
        observed = sensors.rate.rate(now)
        if observed <= bound:
            return 0
        throttle = throttle_time_ms(observed, bound, sensors.rate.window_size_ms(now))
        if self.bounded:
            throttle = min(throttle, self.window_ms)
        throttle = max(0, min(throttle, _INT32_MAX))
        if throttle > 0:
            sensors.throttle.record(throttle, now)
            log.debug(
                "%s quota of %s violated: %.1f > %g, throttle %d ms",
                self.quota_type.value,
                tags,
                observed,
                bound,
                throttle,
            )
        return throttle

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back a recorded value (a throttled fetch answers no data: Kafka's
        unrecordQuotaSensor)."""
        if not self.enabled:
            return
        now = self.clock()
        self._sensors_for(self.metric_tags(user, client_id), now).rate.record(-value, now)

    def max_value_in_window(self, user: str, client_id: str) -> float:
        """The most that can be recorded at once without a sure throttle: the quota times
        the ``samples - 1`` windows of the shortest span (Kafka bounds a fetch's size by
        it)."""
        if not self.enabled:
            return math.inf
        bound = self.quota_for(user, client_id)
        return bound * (self.samples - 1) * self.window_ms / 1000

    def metrics(self) -> list[QuotaMetric]:
        """The sensors, measured now without changing them (safe from another thread)."""
        now = self.clock()
        out = []
        for tags, sensors in list(self._sensors.items()):
            out.append(
                QuotaMetric(
                    self.quota_type,
                    tags[0],
                    tags[1],
                    sensors.rate.peek_rate(now),
                    sensors.throttle.peek_average(now),
                    self.limit(tags),
                )
            )
        return out


@dataclass(frozen=True, slots=True)
class FilterComponent:
    """One DescribeClientQuotas filter component."""

    entity_type: str
    match_type: int
    match: str | None


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float
    remove: bool


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    """One AlterClientQuotas entry: the entity as (type, name) pairs in request order."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[QuotaOp, ...]


class ClientQuotas:
    """The client quota configs, durable in ``store``, and the managers enforcing them
    (Kafka's QuotaManagers for clients).

    Args:
        store: where the configs live; ``load`` must have been called (``open`` does).
        samples: ``quota.window.num``.
        window_seconds: ``quota.window.size.seconds``.
        clock: milliseconds of a monotonic clock, for the sensors.
    """

    def __init__(
        self,
        store: ClientQuotaStore,
        *,
        samples: int = 11,
        window_seconds: int = 1,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.store = store
        window_ms = window_seconds * 1000
        self.produce = ClientQuotaManager(QuotaType.PRODUCE, samples, window_ms, clock=clock)
        self.fetch = ClientQuotaManager(QuotaType.FETCH, samples, window_ms, clock=clock)
        self.request = ClientQuotaManager(
            QuotaType.REQUEST, samples, window_ms, bounded=True, clock=clock
        )
        self._managers = {m.quota_type: m for m in (self.produce, self.fetch, self.request)}
        self._configs: Configs = {}
        self._alter_lock = asyncio.Lock()

    @classmethod
    def open(
        cls,
        store: ClientQuotaStore,
        *,
        samples: int = 11,
        window_seconds: int = 1,
        clock: Callable[[], int] = monotonic_ms,
    ) -> ClientQuotas:
        """Load the stored configs (blocking: call it off the event loop).

        Raises:
            QuotaStoreError: the store cannot be read.
        """
        quotas = cls(store, samples=samples, window_seconds=window_seconds, clock=clock)
        for entity, values in store.load().items():
            quotas.apply(entity, values)
        return quotas

    # -- configs -------------------------------------------------------------------------------
    def configs(self) -> Mapping[QuotaEntity, Mapping[str, float]]:
        return self._configs

    def apply(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        """Make ``values`` the config of ``entity`` in memory and in the managers (after the
        store has it; a cluster's change notifications call this too)."""
        if values:
            self._configs[entity] = dict(values)
        else:
            self._configs.pop(entity, None)
        if IP in entity.types:
            return
        for quota_type, manager in self._managers.items():
            manager.set_limit(entity, values.get(QUOTA_KEY[quota_type]))

    def describe(
        self, components: Sequence[FilterComponent], strict: bool
    ) -> list[tuple[QuotaEntity, Mapping[str, float]]]:
        """The entities matching a DescribeClientQuotas filter, with their values (Kafka's
        ClientQuotasImage.describe).

        Raises:
            InvalidQuotaError: a malformed filter.
            UnsupportedEntityTypeError: a filter on an unknown entity type.
        """
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for c in components:
            if not c.entity_type:
                raise InvalidQuotaError("Invalid empty entity type.")
            if c.entity_type in exact or c.entity_type in specified:
                raise InvalidQuotaError(
                    f"Entity type {c.entity_type} cannot appear more than once in the filter."
                )
            if c.entity_type not in ENTITY_TYPES:
                raise UnsupportedEntityTypeError(f"Unsupported entity type {c.entity_type}")
            if c.match_type == MATCH_EXACT:
                if c.match is None:
                    raise InvalidQuotaError(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null."
                    )
                exact[c.entity_type] = c.match
            elif c.match_type == MATCH_DEFAULT:
                if c.match is not None:
                    raise InvalidQuotaError(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                    )
                exact[c.entity_type] = None
            elif c.match_type == MATCH_SPECIFIED:
                if c.match is not None:
                    raise InvalidQuotaError(
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                    )
                specified.add(c.entity_type)
            else:
                raise InvalidQuotaError(f"Unknown match type {c.match_type}")
        named = set(exact) | specified
        if IP in named and named & {USER, CLIENT_ID}:
            raise InvalidQuotaError(
                "Invalid entity filter component combination. IP filter component should "
                "not be used with user or clientId filter component."
            )
        found = []
        for entity, values in self._configs.items():
            names = entity.as_dict()
            if strict and len(names) != len(named):
                continue
            if any(t not in names or names[t] != n for t, n in exact.items()):
                continue
            if any(t not in names for t in specified):
                continue
            found.append((entity, values))
        return found

    async def alter(
        self, alterations: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[CoreError | None]:
        """Validate and apply AlterClientQuotas entries: per entry, None or the error that
        refused it. The valid entries are saved together, then applied.

        Kafka's rules (ClientQuotaControlManager): an entity named twice in the request is
        refused each time, a key twice in one entry refuses the entry, a removal of a key
        the entity does not have is no error.
        """
        # Saving and applying are one task: a request cancelled (its client gone) while the
        # file is written must not leave quotas saved but not enforced until a restart.
        return await asyncio.shield(
            asyncio.ensure_future(self._locked_alter(alterations, validate_only))
        )

    async def _locked_alter(
        self, alterations: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[CoreError | None]:
        async with self._alter_lock:
            return await self._alter(alterations, validate_only)

    async def _alter(
        self, alterations: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[CoreError | None]:
        results: list[CoreError | None] = []
        changes: dict[QuotaEntity, dict[str, float]] = {}
        changed_at: dict[QuotaEntity, int] = {}
        counts = Counter(QuotaEntity.from_pairs(a.entity) for a in alterations)
        for alteration in alterations:
            entity = QuotaEntity.from_pairs(alteration.entity)
            try:
                if counts[entity] > 1:
                    raise InvalidQuotaError(f"Ignoring duplicate entity {entity}")
                keys = validate_entity(entity, [t for t, _ in alteration.entity])
                values = dict(self._configs.get(entity, {}))
                seen: set[str] = set()
                for op in alteration.ops:
                    if op.key in seen:
                        raise InvalidQuotaError(
                            f"Duplicate quota key {op.key} not updating quota for this entity "
                            f"{entity}"
                        )
                    seen.add(op.key)
                    if op.remove:
                        values.pop(op.key, None)
                    else:
                        values[op.key] = validate_value(keys, op.key, op.value)
            except CoreError as e:
                results.append(e)
                continue
            results.append(None)
            if values != self._configs.get(entity, {}):
                changes[entity] = values
                changed_at[entity] = len(results) - 1
        if validate_only or not changes:
            return results
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self.store.save, changes)
        except OSError as e:
            log.error("cannot persist client quotas: %s", e)
            failure = KafkaStorageError(f"the client quotas could not be persisted: {e}")
            for index in changed_at.values():
                results[index] = failure
            return results
        for entity, values in changes.items():
            self.apply(entity, values)
        return results

    # -- metrics -------------------------------------------------------------------------------
    def metrics(self) -> list[QuotaMetric]:
        out: list[QuotaMetric] = []
        for manager in self._managers.values():
            out.extend(manager.metrics())
        return out
