"""The znode paths of Kafka's ZooKeeper mode (Kafka's ZkData.scala), relative to the chroot.

The table of what each path holds is in ``kafka_zk``'s docstring; the formats are in
``data``.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

# A conditional write with this version matches any znode version (ZooKeeper's -1).
MATCH_ANY_VERSION = -1

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQUENCE_ID = "/brokers/seqid"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONSUMERS = "/consumers"

# Entity types under /config (Kafka's ConfigType in ZooKeeper mode).
CONFIG_TOPICS = "topics"
CONFIG_CLIENTS = "clients"
CONFIG_USERS = "users"
CONFIG_BROKERS = "brokers"
CONFIG_IPS = "ips"
CONFIG_TYPES = (CONFIG_TOPICS, CONFIG_CLIENTS, CONFIG_USERS, CONFIG_BROKERS, CONFIG_IPS)
# The entity name of the defaults (``/config/brokers/<default>``, ``/config/users/<default>``),
# stored as is (Kafka's ConfigEntityName.Default).
DEFAULT_ENTITY = "<default>"

# The persistent paths a Kafka broker creates when it starts (ZkData.PersistentZkPaths), so
# that watches and sequential notifications always have their parent.
PERSISTENT_PATHS = (
    CONSUMERS,
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    BROKER_SEQUENCE_ID,
    ISR_CHANGE_NOTIFICATION,
    PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
    *(f"{CONFIG}/{entity_type}" for entity_type in CONFIG_TYPES),
)


def broker(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}"


def topic_partitions(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions"


def partition(name: str, partition_id: int) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions/{partition_id}"


def partition_state(name: str, partition_id: int) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions/{partition_id}/state"


def config_entity(entity_type: str, sanitized_name: str) -> str:
    """``/config/<type>/<name>``; user and client names must be sanitized first."""
    return f"{CONFIG}/{entity_type}/{sanitized_name}"


def config_change_entity_path(entity_type: str, sanitized_name: str) -> str:
    """The ``entity_path`` of a config change notification: ``<type>/<name>``."""
    return f"{entity_type}/{sanitized_name}"


def delete_topic(name: str) -> str:
    return f"{DELETE_TOPICS}/{name}"


def sequence_number(name: str, prefix: str) -> str:
    """The sequence number in a sequential znode's name (``isr_change_0000000003``: 0000000003)."""
    return name[name.rindex(prefix) + len(prefix) :] if prefix in name else name


def sanitize_entity_name(name: str) -> str:
    """Kafka's Sanitizer.sanitize: a user or client id made safe as one znode name.

    URL-encoding of the UTF-8 bytes as Java's URLEncoder does it, with ``*`` as ``%2A`` and
    space as ``%20``: letters, digits and ``.-_`` stay, everything else is ``%XX``.
    """
    # quote() also keeps '~', which Java's URLEncoder encodes.
    return quote(name, safe="").replace("~", "%7E")


def desanitize_entity_name(sanitized: str) -> str:
    """Kafka's Sanitizer.desanitize."""
    return unquote(sanitized)
