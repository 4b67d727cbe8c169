"""SCRAM credentials and client quotas of a cluster in ZooKeeper, against a real ZooKeeper:
Kafka's ``/config/users``, ``/config/clients`` znodes and formats, ``/config/changes``
notifications reaching another broker, and the two kinds of entries sharing a user's znode.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any, TypeVar

from core.server.config_sync import ConfigChangeSync
from core.server.quota_entity import QuotaEntity
from core.server.sasl import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential
from core.server.scram_credentials import ScramCredentialCache
from core.server.zk_entity_configs import ZkEntityConfigs
from core.server.zk_quota_store import ZkQuotaStore
from core.server.zk_scram_store import ZkScramCredentialStore
from core.server.zookeeper.kafka_zk import KafkaZkClient

T = TypeVar("T")
WAIT_S = 20.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 90.0))


class Node:
    """What one broker runs: the stores and the notification follower."""

    def __init__(self, zk: KafkaZkClient) -> None:
        self.zk = zk
        self.configs = ZkEntityConfigs(zk, asyncio.get_running_loop())
        self.cache = ScramCredentialCache()
        self.scram = ZkScramCredentialStore(self.configs, self.cache)
        self.quotas = ZkQuotaStore(self.configs)
        self.applied: dict[QuotaEntity, dict[str, float]] = {}
        self.sync = ConfigChangeSync(zk, lambda topic, config: None, self.on_entity)

    async def on_entity(self, path: str) -> None:
        parts = path.split("/")
        if len(parts) == 2 and parts[0] == "users":
            await self.scram.reload(parts[1])
        await self.quotas.reload(path, lambda e, v: self.applied.__setitem__(e, dict(v)))

    async def blocking(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


async def node(connect: str) -> Node:
    zk = await KafkaZkClient.connect(connect, session_timeout_ms=20_000)
    await zk.ensure_persistent_paths()
    return Node(zk)


async def wait_for(predicate: Any, what: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            await asyncio.sleep(0.02)
    assert predicate(), what


def test_a_credential_stored_on_one_broker_is_known_to_another(zk_chroot):
    async def scenario() -> None:
        one, two = await node(zk_chroot), await node(zk_chroot)
        try:
            await two.scram.load()
            await two.sync.start()
            credential = ScramCredential.from_password(SCRAM_SHA_256, "s3cret", iterations=4096)
            stored = await one.blocking(
                one.scram.alter, {"alice@example": {SCRAM_SHA_256: credential}}
            )
            assert stored == {"alice@example": None}
            # Kafka's znode (sanitized name) and entry format.
            node_data = json.loads(
                (await one.zk.zookeeper.get("/config/users/alice%40example")).data
            )
            entry = node_data["config"][SCRAM_SHA_256]
            assert node_data["version"] == 1
            assert entry.startswith("salt=") and entry.endswith(",iterations=4096")
            assert set(dict(kv.split("=", 1) for kv in entry.split(","))) == {
                "salt", "stored_key", "server_key", "iterations"
            }  # fmt: skip
            notes = await one.zk.get_config_changes()
            assert "users/alice%40example" in notes.values()
            await wait_for(
                lambda: two.cache.scram_credential(SCRAM_SHA_256, "alice@example") == credential,
                "broker 2 learned alice's credential",
            )
            assert one.scram.user("alice@example") == {SCRAM_SHA_256: credential}
            # Deleted on broker 2: broker 1 still has it until its own sync says otherwise,
            # broker 2 at once.
            await two.blocking(two.scram.alter, {"alice@example": {SCRAM_SHA_256: None}})
            assert two.scram.users() == {}
            # A starting broker loads every user.
            second = ScramCredential.from_password(SCRAM_SHA_512, "x", iterations=4096)
            await one.blocking(one.scram.alter, {"bob": {SCRAM_SHA_512: second}})
            three = await node(zk_chroot)
            try:
                await three.scram.load()
                assert three.scram.users() == {"bob": {SCRAM_SHA_512: second}}
            finally:
                await three.zk.close()
        finally:
            two.sync.stop()
            await one.zk.close()
            await two.zk.close()

    run(scenario())


def test_quotas_and_credentials_share_a_users_znode(zk_chroot):
    async def scenario() -> None:
        one, two = await node(zk_chroot), await node(zk_chroot)
        try:
            await two.sync.start()
            alice = QuotaEntity.of(user="alice")
            credential = ScramCredential.from_password(SCRAM_SHA_256, "pw", iterations=4096)
            await one.blocking(one.scram.alter, {"alice": {SCRAM_SHA_256: credential}})
            await one.blocking(one.quotas.save, {alice: {"producer_byte_rate": 1024.0}})
            config = json.loads((await one.zk.zookeeper.get("/config/users/alice")).data)["config"]
            assert config["producer_byte_rate"] == "1024"
            assert SCRAM_SHA_256 in config  # the quota write kept the credential
            await one.blocking(one.scram.alter, {"alice": {SCRAM_SHA_512: credential}})
            config = json.loads((await one.zk.zookeeper.get("/config/users/alice")).data)["config"]
            assert config["producer_byte_rate"] == "1024"  # the credential write kept the quota
            await wait_for(
                lambda: two.applied.get(alice) == {"producer_byte_rate": 1024.0},
                "broker 2 applied alice's quota",
            )
            # Removing the quota keeps the credentials.
            await one.blocking(one.quotas.save, {alice: {}})
            config = json.loads((await one.zk.zookeeper.get("/config/users/alice")).data)["config"]
            assert "producer_byte_rate" not in config and SCRAM_SHA_512 in config
            await wait_for(lambda: two.applied.get(alice) == {}, "broker 2 removed the quota")
        finally:
            two.sync.stop()
            await one.zk.close()
            await two.zk.close()

    run(scenario())


def test_quota_entities_in_kafkas_paths_are_loaded(zk_chroot):
    async def scenario() -> None:
        one = await node(zk_chroot)
        try:
            changes = {
                QuotaEntity.of(user="alice", client_id="app 1"): {"request_percentage": 25.0},
                QuotaEntity.of(client_id=None): {"consumer_byte_rate": 2048.0},
                QuotaEntity.of(user=None): {"producer_byte_rate": 100.0},
            }
            await one.blocking(one.quotas.save, changes)
            zk = one.zk.zookeeper
            client = json.loads((await zk.get("/config/users/alice/clients/app%201")).data)
            assert client == {"version": 1, "config": {"request_percentage": "25.0"}}
            assert await zk.exists("/config/clients/<default>") is not None
            assert await zk.exists("/config/users/<default>") is not None
            assert await one.blocking(one.quotas.load) == changes
        finally:
            await one.zk.close()

    run(scenario())


def test_a_change_made_while_a_broker_loads_is_applied(zk_chroot):
    """``mark`` before loading, ``start`` after: the change in between is not lost."""

    async def scenario() -> None:
        one, two = await node(zk_chroot), await node(zk_chroot)
        try:
            await two.sync.mark()
            await two.scram.load()
            credential = ScramCredential.from_password(SCRAM_SHA_256, "pw", iterations=4096)
            await one.blocking(one.scram.alter, {"carol": {SCRAM_SHA_256: credential}})
            assert two.scram.user("carol") == {}
            await two.sync.start()
            await wait_for(lambda: two.scram.user("carol") == {SCRAM_SHA_256: credential}, "carol")
        finally:
            two.sync.stop()
            await one.zk.close()
            await two.zk.close()

    run(scenario())
