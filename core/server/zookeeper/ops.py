"""What ZooKeeper operations take and return: znode stats and data, the ops of a
multi-operation (transaction), and kazoo's exceptions mapped to ``ZkError``."""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from kazoo.protocol.states import ZnodeStat as KazooStat

from core.server.zookeeper.errors import (
    ZkBadVersionError,
    ZkClosedError,
    ZkConnectionLossError,
    ZkError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkNotEmptyError,
    ZkSessionExpiredError,
)


@dataclass(frozen=True, slots=True)
class ZnodeStat:
    """A znode's metadata (ZooKeeper's Stat).

    Attributes:
        czxid: the zxid of the transaction that created the znode (Kafka's broker epoch).
        version: the data version, which conditional writes expect.
        ephemeral_owner: the session that owns an ephemeral znode; 0 for persistent ones.
    """

    czxid: int
    mzxid: int
    pzxid: int
    ctime_ms: int
    mtime_ms: int
    version: int
    cversion: int
    aversion: int
    ephemeral_owner: int
    data_length: int
    num_children: int

    @classmethod
    def of(cls, stat: KazooStat) -> ZnodeStat:
        return cls(
            czxid=stat.czxid,
            mzxid=stat.mzxid,
            pzxid=stat.pzxid,
            ctime_ms=stat.ctime,
            mtime_ms=stat.mtime,
            version=stat.version,
            cversion=stat.cversion,
            aversion=stat.aversion,
            ephemeral_owner=stat.ephemeralOwner,
            data_length=stat.dataLength,
            num_children=stat.numChildren,
        )


@dataclass(frozen=True, slots=True)
class ZnodeData:
    """A znode's data (None: ZooKeeper's null, as Kafka's parent znodes have) and stat."""

    data: bytes | None
    stat: ZnodeStat


@dataclass(frozen=True, slots=True)
class CreateOp:
    path: str
    data: bytes | None = None
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetDataOp:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class DeleteOp:
    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class CheckOp:
    """Fails the transaction unless ``path`` is at ``version``."""

    path: str
    version: int


ZkOp = CreateOp | SetDataOp | DeleteOp | CheckOp
# What each op of a successful multi returns: the created path, the new stat, or None.
OpResult = str | ZnodeStat | None

_KAZOO_ERRORS: tuple[tuple[type[KazooException], type[ZkError]], ...] = (
    # kazoo's ConnectionClosedError is a SessionExpiredError: it must be tested first.
    (ConnectionClosedError, ZkClosedError),
    (SessionExpiredError, ZkSessionExpiredError),
    (ConnectionLoss, ZkConnectionLossError),
    (NodeExistsError, ZkNodeExistsError),
    (NoNodeError, ZkNoNodeError),
    (BadVersionError, ZkBadVersionError),
    (NotEmptyError, ZkNotEmptyError),
)


def map_kazoo_error(
    exc: BaseException, path: str | None, op_index: int | None = None
) -> BaseException:
    """The ``ZkError`` for a kazoo exception; other exceptions are returned unchanged."""
    if not isinstance(exc, KazooException):
        return exc
    kind = next((ours for theirs, ours in _KAZOO_ERRORS if isinstance(exc, theirs)), ZkError)
    name = type(exc).__name__
    return kind(f"{name} on {path}" if path else name, path=path, op_index=op_index)
