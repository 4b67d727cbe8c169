"""Errors of the ZooKeeper layer (``client``, ``data``, ``kafka_zk``).

Every failure a caller of the ZooKeeper layer can see is a ``ZkError``; kazoo's own exceptions
never escape it. The subclasses follow ZooKeeper's result codes (NODEEXISTS, NONODE,
BADVERSION, NOTEMPTY, SESSIONEXPIRED, CONNECTIONLOSS) plus the conditions Kafka's
KafkaZkClient reports on top of them (a moved controller, a broker id registered by another
session, a znode whose content cannot be read).
"""

from __future__ import annotations


class ZkError(Exception):
    """A ZooKeeper operation failed.

    Attributes:
        path: the znode the failing operation addressed, when known.
        op_index: in a multi-operation (transaction), the index of the operation that failed;
            None for single operations.
    """

    def __init__(self, message: str, *, path: str | None = None, op_index: int | None = None):
        super().__init__(message)
        self.path = path
        self.op_index = op_index


class ZkNodeExistsError(ZkError):
    """The znode to create exists already (NODEEXISTS)."""


class ZkBrokerIdInUseError(ZkNodeExistsError):
    """``/brokers/ids/<id>`` exists and belongs to another ZooKeeper session."""


class ZkNoNodeError(ZkError):
    """The znode (or the parent of the znode to create) does not exist (NONODE)."""


class ZkBadVersionError(ZkError):
    """A conditional write or check found another znode version (BADVERSION)."""


class ZkNotEmptyError(ZkError):
    """A znode to delete has children (NOTEMPTY)."""


class ZkSessionExpiredError(ZkError):
    """The session expired: its ephemeral znodes are gone and its watches were dropped."""


class ZkConnectionLossError(ZkError):
    """The connection to ZooKeeper was lost while the operation was in flight.

    The operation may or may not have been applied.
    """


class ZkConnectionTimeoutError(ZkError):
    """No ZooKeeper server answered within the connection timeout at start."""


class ZkClosedError(ZkError):
    """The client was closed; no more operations can run on it."""


class ZkControllerMovedError(ZkError):
    """A write fenced on the controller epoch znode version found a newer controller.

    Kafka's ControllerMovedException: the writer is no longer the controller.
    """


class ZkDataError(ZkError):
    """A znode's content is not in the format Kafka writes."""


class ZkProducerIdsExhaustedError(ZkError):
    """The next producer-id block would pass the largest int64 (Kafka treats it as fatal)."""
