"""Client quota configs: Kafka's entity precedence, AlterClientQuotas validation,
DescribeClientQuotas filters, and the durable file in ZooKeeper's entity config shape."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from core.server.quota_entity import (
    InvalidQuotaError,
    QuotaEntity,
    UnsupportedEntityTypeError,
    entity_of_path,
    entity_path,
)
from core.server.quota_store import QUOTA_FILE, LocalQuotaStore, QuotaStoreError
from core.server.quotas import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    UNLIMITED,
    ClientQuotaManager,
    ClientQuotas,
    FilterComponent,
    QuotaAlteration,
    QuotaOp,
    QuotaType,
)

E = QuotaEntity.of


def produce_manager() -> ClientQuotaManager:
    return ClientQuotaManager(QuotaType.PRODUCE, 11, 1000, clock=lambda: 0)


# -- precedence ---------------------------------------------------------------------------------
def test_the_most_specific_quota_applies_in_kafkas_order() -> None:
    m = produce_manager()
    levels = [
        E(user="alice", client_id="c1"),
        E(user="alice", client_id=None),
        E(user="alice"),
        E(user=None, client_id="c1"),
        E(user=None, client_id=None),
        E(user=None),
        E(client_id="c1"),
        E(client_id=None),
    ]
    for rank, entity in enumerate(levels, start=1):
        m.set_limit(entity, rank)
    assert m.quota_for("bob", "c1") == 4  # users/<default>/clients/c1
    assert m.quota_for("bob", "c2") == 5  # users/<default>/clients/<default>
    for rank, entity in enumerate(levels, start=1):
        assert m.quota_for("alice", "c1") == rank, f"with {entity} the most specific"
        m.set_limit(entity, None)
    assert not m.enabled
    assert m.quota_for("alice", "c1") == UNLIMITED


def test_a_user_quota_is_shared_by_the_users_clients_a_default_client_quota_is_not() -> None:
    shared = produce_manager()
    shared.set_limit(E(user="alice"), 300)  # 3000 bytes of burst over the 10 s span
    assert shared.metric_tags("alice", "c1") == shared.metric_tags("alice", "c2") == ("alice", "")
    assert shared.record("alice", "c1", 2000) == 0
    assert shared.record("alice", "c2", 2000) > 0

    each = produce_manager()
    each.set_limit(E(client_id=None), 300)
    assert each.metric_tags("alice", "c1") == ("", "c1")
    assert each.record("alice", "c1", 2000) == 0
    assert each.record("alice", "c2", 2000) == 0


def test_idle_sensors_expire_after_an_hour() -> None:
    now = [0]
    m = ClientQuotaManager(QuotaType.FETCH, 11, 1000, clock=lambda: now[0])
    m.set_limit(E(client_id=None), 1000)
    m.record("u", "old", 1)
    now[0] = 3_600_000
    m.record("u", "new", 1)
    assert [x.client_id for x in m.metrics()] == ["new"]


# -- AlterClientQuotas --------------------------------------------------------------------------
def alteration(pairs, *ops) -> QuotaAlteration:
    return QuotaAlteration(tuple(pairs), tuple(QuotaOp(*op) for op in ops))


def alter(quotas: ClientQuotas, *alterations, validate_only=False):
    return asyncio.run(quotas.alter(list(alterations), validate_only))


@pytest.fixture
def quotas(tmp_path: Path) -> ClientQuotas:
    return ClientQuotas.open(LocalQuotaStore(tmp_path))


def test_alter_sets_enforces_and_persists_in_zookeepers_shape(
    quotas: ClientQuotas, tmp_path: Path
) -> None:
    errors = alter(
        quotas,
        alteration([("user", "alice")], ("producer_byte_rate", 1048576.0, False)),
        alteration(
            [("client-id", "c 1"), ("user", "alice")],
            ("request_percentage", 25.5, False),
            ("consumer_byte_rate", 2000.0, False),
        ),
        alteration([("client-id", None)], ("consumer_byte_rate", 4096.0, False)),
        alteration([("ip", "10.0.0.1")], ("connection_creation_rate", 5.0, False)),
    )
    assert errors == [None] * 4
    assert quotas.produce.quota_for("alice", "x") == 1048576
    assert quotas.request.quota_for("alice", "c 1") == 25.5
    assert quotas.fetch.quota_for("bob", "other") == 4096
    document = json.loads((tmp_path / QUOTA_FILE).read_text())
    assert document == {
        "version": 1,
        "entities": {
            "clients/<default>": {"version": 1, "config": {"consumer_byte_rate": "4096"}},
            "ips/10.0.0.1": {"version": 1, "config": {"connection_creation_rate": "5"}},
            "users/alice": {"version": 1, "config": {"producer_byte_rate": "1048576"}},
            "users/alice/clients/c%201": {
                "version": 1,
                "config": {"consumer_byte_rate": "2000", "request_percentage": "25.5"},
            },
        },
    }
    reopened = ClientQuotas.open(LocalQuotaStore(tmp_path))
    assert reopened.configs() == quotas.configs()
    assert reopened.request.quota_for("alice", "c 1") == 25.5


def test_an_alteration_whose_client_went_away_is_saved_and_enforced(
    quotas: ClientQuotas, tmp_path: Path
) -> None:
    """Cancelled while the file is written (the connection closed): what is saved is also
    enforced at once, not only after a restart."""

    async def scenario() -> None:
        change = alteration([("user", "carol")], ("producer_byte_rate", 2048.0, False))
        request = asyncio.ensure_future(quotas.alter([change], False))
        await asyncio.sleep(0)  # the save is now on its executor thread
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        async with asyncio.timeout(30):
            while quotas.produce.quota_for("carol", "x") != 2048:
                await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert ClientQuotas.open(LocalQuotaStore(tmp_path)).produce.quota_for("carol", "x") == 2048


def test_removing_every_key_removes_the_entity(quotas: ClientQuotas, tmp_path: Path) -> None:
    alter(quotas, alteration([("user", "bob")], ("producer_byte_rate", 10.0, False)))
    assert alter(
        quotas,
        alteration([("user", "bob")], ("producer_byte_rate", 0.0, True), ("absent", 0.0, True)),
    ) == [None]
    assert quotas.configs() == {}
    assert not quotas.produce.enabled
    assert json.loads((tmp_path / QUOTA_FILE).read_text())["entities"] == {}


@pytest.mark.parametrize(
    ("pairs", "ops", "message"),
    [
        ([], [("producer_byte_rate", 1.0, False)], "Invalid empty client quota entity"),
        ([("group", "g")], [("producer_byte_rate", 1.0, False)], "Unhandled client quota"),
        ([("user", "a"), ("user", "b")], [("producer_byte_rate", 1.0, False)], "duplicate"),
        ([("user", "")], [("producer_byte_rate", 1.0, False)], "Empty user not supported"),
        ([("user", "a"), ("ip", "1.2.3.4")], [("request_percentage", 1.0, False)], "ip cannot"),
        ([("ip", "not-an-ip")], [("connection_creation_rate", 1.0, False)], "not a valid IP"),
        ([("user", "a")], [("fetch_rate", 1.0, False)], "Invalid configuration key fetch_rate"),
        ([("user", "a")], [("connection_creation_rate", 1.0, False)], "Invalid configuration"),
        ([("ip", None)], [("producer_byte_rate", 1.0, False)], "Invalid configuration key"),
        ([("user", "a")], [("producer_byte_rate", 1.5, False)], "must be a Long value"),
        ([("user", "a")], [("producer_byte_rate", 0.0, False)], "must be greater than 0"),
        ([("user", "a")], [("request_percentage", -1.0, False)], "must be greater than 0"),
        ([("user", "a")], [("request_percentage", float("nan"), False)], "finite"),
        (
            [("user", "a")],
            [("producer_byte_rate", 1.0, False), ("producer_byte_rate", 2.0, False)],
            "Duplicate quota key producer_byte_rate",
        ),
    ],
)
def test_alter_refuses_what_kafka_refuses(quotas: ClientQuotas, pairs, ops, message) -> None:
    (error,) = alter(quotas, alteration(pairs, *ops))
    assert isinstance(error, InvalidQuotaError)
    assert error.error_code == 42
    assert message in str(error)
    assert quotas.configs() == {}


def test_one_bad_entry_does_not_stop_the_others_and_duplicates_are_refused(
    quotas: ClientQuotas,
) -> None:
    good = alteration([("client-id", "ok")], ("producer_byte_rate", 100.0, False))
    bad = alteration([("client-id", "bad")], ("producer_byte_rate", 1.25, False))
    twice = alteration([("user", "u")], ("producer_byte_rate", 5.0, False))
    errors = alter(quotas, good, bad, twice, twice)
    assert errors[0] is None
    assert "Long" in str(errors[1])
    assert all("duplicate entity" in str(e) for e in errors[2:])
    assert quotas.configs() == {E(client_id="ok"): {"producer_byte_rate": 100.0}}


def test_validate_only_changes_nothing(quotas: ClientQuotas, tmp_path: Path) -> None:
    ok = alteration([("user", "a")], ("consumer_byte_rate", 5.0, False))
    assert alter(quotas, ok, validate_only=True) == [None]
    assert quotas.configs() == {}
    assert not (tmp_path / QUOTA_FILE).exists()


def test_a_failed_write_changes_nothing_and_says_so(tmp_path: Path) -> None:
    directory = tmp_path / "gone"
    directory.mkdir()
    quotas = ClientQuotas.open(LocalQuotaStore(directory))
    directory.rmdir()
    (error,) = alter(quotas, alteration([("user", "a")], ("consumer_byte_rate", 5.0, False)))
    assert error is not None and error.error_code == 56
    assert quotas.configs() == {}
    assert not quotas.fetch.enabled


def test_a_damaged_file_stops_the_broker_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / QUOTA_FILE).write_text('{"version":1,"entities":{"users/a":{"config":3}}}')
    with pytest.raises(QuotaStoreError, match=QUOTA_FILE):
        ClientQuotas.open(LocalQuotaStore(tmp_path))
    (tmp_path / QUOTA_FILE).write_text('{"version":1,"entities":{"topics/t":{"config":{}}}}')
    with pytest.raises(QuotaStoreError, match="not a client quota entity path"):
        ClientQuotas.open(LocalQuotaStore(tmp_path))


def test_entity_paths_round_trip() -> None:
    for entity, path in [
        (E(user="a b"), "users/a%20b"),
        (E(user=None), "users/<default>"),
        (E(user="<default>"), "users/%3Cdefault%3E"),
        (E(user="u", client_id=None), "users/u/clients/<default>"),
        (E(client_id="c*"), "clients/c%2A"),
        (E(ip="::1"), "ips/::1"),
        (E(ip=None), "ips/<default>"),
    ]:
        assert entity_path(entity) == path
        assert entity_of_path(path) == entity


# -- DescribeClientQuotas -----------------------------------------------------------------------
@pytest.fixture
def described(quotas: ClientQuotas) -> ClientQuotas:
    entries = [
        [("user", "alice")],
        [("user", None)],
        [("user", "alice"), ("client-id", "c1")],
        [("user", None), ("client-id", None)],
        [("client-id", "c1")],
        [("client-id", None)],
    ]
    alter(quotas, *(alteration(p, ("producer_byte_rate", 1.0, False)) for p in entries))
    alter(quotas, alteration([("ip", "10.0.0.1")], ("connection_creation_rate", 1.0, False)))
    return quotas


def names(quotas: ClientQuotas, strict: bool, *components) -> set[str]:
    found = quotas.describe([FilterComponent(*c) for c in components], strict)
    return {entity_path(entity) for entity, _ in found}


def test_describe_filters_as_kafka(described: ClientQuotas) -> None:
    everything = names(described, False)
    assert len(everything) == 7
    assert names(described, False, ("user", MATCH_EXACT, "alice")) == {
        "users/alice",
        "users/alice/clients/c1",
    }
    assert names(described, True, ("user", MATCH_EXACT, "alice")) == {"users/alice"}
    assert names(described, True, ("user", MATCH_DEFAULT, None)) == {"users/<default>"}
    assert names(described, False, ("client-id", MATCH_SPECIFIED, None)) == {
        "users/alice/clients/c1",
        "users/<default>/clients/<default>",
        "clients/c1",
        "clients/<default>",
    }
    assert names(
        described, True, ("user", MATCH_SPECIFIED, None), ("client-id", MATCH_DEFAULT, None)
    ) == {"users/<default>/clients/<default>"}
    assert names(described, True, ("ip", MATCH_SPECIFIED, None)) == {"ips/10.0.0.1"}


@pytest.mark.parametrize(
    ("components", "error", "message"),
    [
        ([("", MATCH_EXACT, "a")], InvalidQuotaError, "empty entity type"),
        ([("user", MATCH_EXACT, None)], InvalidQuotaError, "MATCH_TYPE_EXACT"),
        ([("user", MATCH_DEFAULT, "a")], InvalidQuotaError, "MATCH_TYPE_DEFAULT"),
        ([("user", MATCH_SPECIFIED, "a")], InvalidQuotaError, "MATCH_TYPE_SPECIFIED"),
        ([("user", 7, None)], InvalidQuotaError, "Unknown match type 7"),
        ([("user", 2, None), ("user", 1, None)], InvalidQuotaError, "more than once"),
        ([("ip", 2, None), ("user", 2, None)], InvalidQuotaError, "IP filter component"),
        ([("group", 2, None)], UnsupportedEntityTypeError, "Unsupported entity type group"),
    ],
)
def test_describe_refuses_malformed_filters(
    described: ClientQuotas, components, error, message
) -> None:
    with pytest.raises(error, match=message):
        described.describe([FilterComponent(*c) for c in components], False)
