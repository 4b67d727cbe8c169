"""The classic consumer-group protocol: Kafka's GroupCoordinator for one broker.

States and transitions (Kafka's GroupState)::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
      ^                  ^      |                                                 |
      |                  |      +--no member left--> Empty                        | leader's
      |   join, leave,   |                                                        | SyncGroup
      |   session expiry +-------------------- Stable <---------------------------+
      +---------------- last member leaves / expires (after the rebalance)
    any --DeleteGroups--> Dead

A JoinGroup waits in the join purgatory as a ``DelayedJoin`` keyed by the group until every
known member has (re)joined or the longest rebalance timeout passes (members that did not
rejoin are removed); the first rebalance of an empty group also waits
``group.initial.rebalance.delay.ms`` for more members (Kafka's InitialDelayedJoin). Each
member has a ``DelayedHeartbeat`` for its session timeout in the heartbeat purgatory, completed
(and replaced) by every heartbeat, join or sync; on expiry the member is removed. The leader
member computes the assignment (range, round-robin, cooperative-sticky: whatever the clients
agree on) and hands it over in its SyncGroup.

``group.max.size`` bounds the members, with Kafka's rules (``_admits``): an Empty group
takes anyone; while it prepares a rebalance, a member already waiting is kept and others
are taken while fewer than the maximum are waiting; a Stable or CompletingRebalance group
takes its own members and new ones while it is smaller than the maximum. A refused join gets
GROUP_MAX_SIZE_REACHED, and a refused existing member leaves the group. A group restored
above the maximum (the key was lowered) rebalances at once, so that the first members to
rejoin stay and the others are refused.

Static members (``group.instance.id``) keep their place across restarts: a join with a known
instance id and no member id replaces the old member id without a rebalance when the group
is stable, as in Kafka (KIP-345).

Durability, as in Kafka: when a rebalance completes (the leader's SyncGroup) and when a
group becomes empty, ``on_change`` receives the group so that its metadata (generation,
protocol, leader, members with their subscriptions and assignments) is written to
``__consumer_offsets`` as a GroupMetadata record. After a restart ``restore`` brings the
groups back as they were stored: a stable group's members keep their member ids and
generation and carry on heartbeating without a rebalance; members that do not come back
expire after their session timeout. Runs on the event loop only.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from core.clock import now_ms
from core.server.consumer_protocol import SubscriptionFormatError, subscription_topics
from core.server.coordinator_records import GroupMetadataValue, MemberMetadata, partition_for
from core.server.purgatory import DelayedOperation, DelayedOperationPurgatory
from core.server.timing_wheel import Timer

log = logging.getLogger(__name__)


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupError(enum.Enum):
    """The error codes the coordinator answers with (Kafka's names, kio's enum values)."""

    NONE = 0
    UNKNOWN_MEMBER_ID = 25
    ILLEGAL_GENERATION = 22
    REBALANCE_IN_PROGRESS = 27
    INCONSISTENT_GROUP_PROTOCOL = 23
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82
    GROUP_ID_NOT_FOUND = 69
    NON_EMPTY_GROUP = 68
    INVALID_SESSION_TIMEOUT = 26
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    GROUP_MAX_SIZE_REACHED = 81


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: GroupError
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # for the leader only


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: GroupError
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    heartbeat: DelayedHeartbeat | None = None
    is_new: bool = True

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending: set[str] = field(default_factory=set)  # member ids handed out, not yet joined
    join_op: DelayedJoin | None = None
    empty_since_ms: int | None = None  # when it last became Empty after having members

    def awaiting_join(self) -> int:
        """Members whose JoinGroup waits for the rebalance to complete."""
        return sum(1 for m in self.members.values() if m.join_future is not None)

    def all_joined(self) -> bool:
        return (
            bool(self.members)
            and all(m.join_future is not None for m in self.members.values())
            and not self.pending
        )

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def select_protocol(self) -> str | None:
        """The protocol every member supports, the most preferred by votes (Kafka's rule)."""
        common = None
        for m in self.members.values():
            names = {name for name, _ in m.protocols}
            common = names if common is None else common & names
        if not common:
            return None
        votes: dict[str, int] = dict.fromkeys(common, 0)
        for m in self.members.values():
            first = next(name for name, _ in m.protocols if name in common)
            votes[first] += 1
        return max(sorted(votes), key=lambda name: votes[name])


class DelayedJoin(DelayedOperation):
    """Completes when every member has rejoined, or at the rebalance timeout."""

    def __init__(self, coordinator: GroupCoordinator, group: Group, delay_ms: int) -> None:
        # The rebalance timeout is the client's (JoinGroup v1+), unchecked like Kafka's: a
        # negative one expires at once, as it does on Kafka's timer.
        super().__init__(max(delay_ms, 0))
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        if self.group.all_joined():
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        if self.group.state is not GroupState.DEAD:  # not unloaded meanwhile
            self.coordinator._complete_join(self.group)


class DelayedHeartbeat(DelayedOperation):
    """A member's session: completed (and replaced) by each heartbeat, or it expires."""

    def __init__(self, coordinator: GroupCoordinator, group: Group, member: Member) -> None:
        super().__init__(member.session_timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.member = member
        self.alive = False

    def try_complete(self) -> bool:
        if self.alive or self.group.members.get(self.member.member_id) is not self.member:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        if self.group.members.get(self.member.member_id) is self.member and not self.alive:
            log.info(
                "group %s: member %s expired (session.timeout.ms=%d)",
                self.group.group_id,
                self.member.member_id,
                self.member.session_timeout_ms,
            )
            self.coordinator._remove_member(self.group, self.member, "session expired")


class GroupCoordinator:
    """The groups this broker coordinates.

    By default every group (tools, tests). A broker calls ``coordinate_partitions``: it then
    coordinates the groups of the ``__consumer_offsets`` partitions it leads and has loaded
    (``partition_loaded``); ``status`` answers COORDINATOR_LOAD_IN_PROGRESS for a group of a
    partition being loaded and NOT_COORDINATOR for one of a partition it does not lead
    (Kafka's GroupMetadataManager ownedPartitions / loadingPartitions), and
    ``partition_unloaded`` forgets a partition's groups when its leadership moves away.
    """

    def __init__(
        self,
        timer: Timer,
        *,
        initial_rebalance_delay_ms: int = 3000,
        min_session_timeout_ms: int = 6000,
        max_session_timeout_ms: int = 1_800_000,
        max_size: int = 2**31 - 1,
        on_change: Callable[[Group], None] | None = None,
    ) -> None:
        self.groups: dict[str, Group] = {}
        self.max_size = max_size  # group.max.size
        self.on_change = on_change
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.join_purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory(
            "Rebalance", timer
        )
        self.heartbeat_purgatory: DelayedOperationPurgatory[tuple[str, str]] = (
            DelayedOperationPurgatory("Heartbeat", timer)
        )
        self._per_partition = False  # False: every group is this broker's
        self._partition_count = 0
        self._owned: set[int] = set()
        self._loading: set[int] = set()
        # Restored groups whose members' sessions start_restored_sessions() starts.
        # Set once the broker serves: partitions loaded later start their sessions at once.
        self._serving = False
        self._sessions_to_start: list[Group] = []

    # -- which groups are this broker's ------------------------------------------------------
    def coordinate_partitions(self, count: int) -> None:
        """Coordinate only the groups of loaded partitions of a ``count``-partition
        ``__consumer_offsets`` (the broker's mode; none are loaded yet). 0: the topic does
        not exist yet (no group is coordinated here)."""
        self._per_partition = True
        self._partition_count = count

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self._partition_count) if self._partition_count else 0

    def status(self, group_id: str) -> GroupError:
        """Whether requests for the group are served here now (NONE), later
        (COORDINATOR_LOAD_IN_PROGRESS) or by another broker (NOT_COORDINATOR)."""
        if not self._per_partition:
            return GroupError.NONE
        if not self._partition_count:
            return GroupError.NOT_COORDINATOR
        index = self.partition_of(group_id)
        if index in self._owned:
            return GroupError.NONE
        if index in self._loading:
            return GroupError.COORDINATOR_LOAD_IN_PROGRESS
        return GroupError.NOT_COORDINATOR

    @property
    def loading(self) -> bool:
        """Whether any partition is being loaded (ListGroups answers
        COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        return bool(self._loading)

    def partition_loading(self, index: int) -> None:
        self._owned.discard(index)
        self._loading.add(index)

    def partition_loaded(self, index: int, stored: Mapping[str, GroupMetadataValue]) -> None:
        """Partition ``index`` is loaded: its groups come back (``restore``) and are served."""
        if index not in self._loading:
            return  # unloaded while it loaded
        self._loading.discard(index)
        self.restore({g: v for g, v in stored.items() if self.partition_of(g) == index})
        self._owned.add(index)
        if self._serving:
            # Loaded while serving (a leadership change): the sessions count from now.
            self.start_restored_sessions()

    def partition_unloaded(self, index: int) -> list[str]:
        """Forget partition ``index``'s groups (Kafka's onResignation): waiting joins and
        syncs are answered NOT_COORDINATOR (the members look the coordinator up again),
        sessions and rebalances stop. Returns the group ids forgotten."""
        self._owned.discard(index)
        self._loading.discard(index)
        gone = [g for g in self.groups if self.partition_of(g) == index]
        for group_id in gone:
            self._unload(self.groups.pop(group_id))
        if gone:
            log.info("unloaded %d groups of %s-%d", len(gone), "__consumer_offsets", index)
        return gone

    def _unload(self, group: Group) -> None:
        group.state = GroupState.DEAD
        members = list(group.members.values())
        group.members.clear()
        group.static.clear()
        group.pending.clear()
        for m in members:
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(
                    JoinResult(GroupError.NOT_COORDINATOR, member_id=m.member_id)
                )
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result(SyncResult(GroupError.NOT_COORDINATOR))
            self.heartbeat_purgatory.check_and_complete((group.group_id, m.member_id))
        op, group.join_op = group.join_op, None
        if op is not None:
            op.force_complete()  # a no-op for a dead group
        self.join_purgatory.check_and_complete(group.group_id)

    def shutdown(self) -> None:
        self.join_purgatory.shutdown()
        self.heartbeat_purgatory.shutdown()

    # -- JoinGroup ---------------------------------------------------------------------------
    async def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        *,
        require_known_member_id: bool,
    ) -> JoinResult:
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return JoinResult(GroupError.INVALID_SESSION_TIMEOUT, member_id=member_id)
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            group = self.groups[group_id] = Group(group_id)
        if not self._admits(group, member_id):
            self._refuse(group, member_id)
            return JoinResult(GroupError.GROUP_MAX_SIZE_REACHED, member_id="")
        if group.members and (
            protocol_type != group.protocol_type
            or not (
                {n for n, _ in protocols}
                & {n for m in group.members.values() for n, _ in m.protocols}
            )
        ):
            return JoinResult(GroupError.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if member_id == "":
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if group_instance_id is not None:
                old = group.static.get(group_instance_id)
                if old is not None and old in group.members:
                    # KIP-345: the static member is back under a new member id.
                    member = group.members.pop(old)
                    member.member_id = new_id
                    group.members[new_id] = member
                    group.static[group_instance_id] = new_id
                    if group.leader_id == old:
                        group.leader_id = new_id
                    if group.state is GroupState.STABLE and member.protocols == protocols:
                        self._touch(group, member)
                        return self._join_answer(group, member)
                    return await self._add_or_update(
                        group, member, protocols, session_timeout_ms, rebalance_timeout_ms
                    )
            elif require_known_member_id:
                group.pending.add(new_id)
                return JoinResult(GroupError.MEMBER_ID_REQUIRED, member_id=new_id)
            member = Member(
                new_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protocols,
            )
            return await self._add_or_update(
                group, member, protocols, session_timeout_ms, rebalance_timeout_ms
            )
        member = group.members.get(member_id)
        if member is None:
            if member_id not in group.pending:
                return JoinResult(GroupError.UNKNOWN_MEMBER_ID, member_id=member_id)
            group.pending.discard(member_id)
            member = Member(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protocols,
            )
        return await self._add_or_update(
            group, member, protocols, session_timeout_ms, rebalance_timeout_ms
        )

    def _admits(self, group: Group, member_id: str) -> bool:
        """Kafka's acceptJoiningMember: room for this member under group.max.size?"""
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        member = group.members.get(member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            # Counting the members already waiting, not the group's size: the size may be
            # above the maximum after it was lowered, and the last members to rejoin are
            # the ones refused.
            waiting = member is not None and member.join_future is not None
            return waiting or group.awaiting_join() < self.max_size
        return member is not None or len(group.members) < self.max_size

    def _refuse(self, group: Group, member_id: str) -> None:
        """A join refused for group.max.size: the member, if it was one, leaves the group
        (Kafka's group.remove), and so does a member id handed out but not yet joined."""
        group.pending.discard(member_id)
        member = group.members.get(member_id)
        if member is not None:
            why = f"refused: group.max.size={self.max_size} reached"
            self._remove_member(group, member, why)
            return
        log.info(
            "group %s: join by %s refused: group.max.size=%d reached",
            group.group_id,
            member_id or "a new member",
            self.max_size,
        )
        if group.state is GroupState.PREPARING_REBALANCE:
            # The rebalance may have waited for that pending member only.
            self.join_purgatory.check_and_complete(group.group_id)

    async def _add_or_update(
        self,
        group: Group,
        member: Member,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> JoinResult:
        known = group.members.get(member.member_id) is member
        if (
            known
            and group.state is GroupState.STABLE
            and member.protocols == protocols
            and member.member_id != group.leader_id
        ):
            # A follower rejoining with nothing changed: the current generation still holds.
            self._touch(group, member)
            return self._join_answer(group, member)
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        if not known:
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static[member.group_instance_id] = member.member_id
            if group.protocol_type is None:
                group.protocol_type = member.protocol_type
        loop = asyncio.get_running_loop()
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(
                JoinResult(GroupError.REBALANCE_IN_PROGRESS, member_id=member.member_id)
            )
        member.join_future = loop.create_future()
        future = member.join_future
        self._touch(group, member)
        self._prepare_rebalance(group)
        self.join_purgatory.check_and_complete(group.group_id)
        return await future

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            return
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Syncs waiting for an assignment that will not come: rejoin.
            for m in group.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result(SyncResult(GroupError.REBALANCE_IN_PROGRESS))
        initial = group.state is GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        delay = group.rebalance_timeout_ms()
        if initial and self.initial_rebalance_delay_ms > 0:
            delay = min(self.initial_rebalance_delay_ms, delay)
            group.join_op = DelayedJoin(self, group, delay)
            group.join_op.initial = True  # type: ignore[attr-defined]
            # The initial delay always runs out: more members may be on their way.
            self.join_purgatory.try_complete_else_watch(
                _NeverEarly(group.join_op), [f"{group.group_id}\0initial-delay"]
            )
            return
        group.join_op = DelayedJoin(self, group, delay)
        self.join_purgatory.try_complete_else_watch(group.join_op, [group.group_id])

    def _complete_join(self, group: Group) -> None:
        for m in list(group.members.values()):
            if m.join_future is None:
                self._remove_member(group, m, "did not rejoin in time", rebalance=False)
        group.pending.clear()
        group.generation += 1
        group.join_op = None
        if not group.members:
            group.state = GroupState.EMPTY
            group.empty_since_ms = now_ms()
            group.protocol_name = group.leader_id = None
            self._changed(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        log.info(
            "group %s: generation %d with %d members (protocol %s)",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol_name,
        )
        for m in group.members.values():
            future, m.join_future = m.join_future, None
            m.is_new = False
            self._touch(group, m)
            if future is not None and not future.done():
                future.set_result(self._join_answer(group, m))

    def _join_answer(self, group: Group, member: Member) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == group.leader_id and group.protocol_name is not None:
            members = tuple(
                (m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                for m in group.members.values()
            )
        return JoinResult(
            GroupError.NONE,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            member.member_id,
            members,
        )

    # -- SyncGroup ---------------------------------------------------------------------------
    async def sync(
        self, group_id: str, generation: int, member_id: str, assignments: dict[str, bytes]
    ) -> SyncResult:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return SyncResult(GroupError.UNKNOWN_MEMBER_ID)
        if generation != group.generation:
            return SyncResult(GroupError.ILLEGAL_GENERATION)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(GroupError.REBALANCE_IN_PROGRESS)
        self._touch(group, member)
        if group.state is GroupState.STABLE:
            return SyncResult(
                GroupError.NONE, member.assignment, group.protocol_type, group.protocol_name
            )
        member.sync_future = asyncio.get_running_loop().create_future()
        future = member.sync_future
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = GroupState.STABLE
            self._changed(group)
            for m in group.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result(
                        SyncResult(
                            GroupError.NONE, m.assignment, group.protocol_type, group.protocol_name
                        )
                    )
        return await future

    # -- Heartbeat, LeaveGroup ---------------------------------------------------------------
    def heartbeat(self, group_id: str, generation: int, member_id: str) -> GroupError:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return GroupError.UNKNOWN_MEMBER_ID
        self._touch(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return GroupError.REBALANCE_IN_PROGRESS
        if generation != group.generation:
            return GroupError.ILLEGAL_GENERATION
        return GroupError.NONE

    def leave(self, group_id: str, member_id: str, group_instance_id: str | None) -> GroupError:
        group = self.groups.get(group_id)
        if group is None:
            return GroupError.UNKNOWN_MEMBER_ID
        if group_instance_id is not None and not member_id:
            member_id = group.static.get(group_instance_id, "")
        member = group.members.get(member_id)
        if member is None:
            return GroupError.UNKNOWN_MEMBER_ID
        self._remove_member(group, member, "left the group")
        return GroupError.NONE

    def _remove_member(
        self, group: Group, member: Member, why: str, *, rebalance: bool = True
    ) -> None:
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None:
            group.static.pop(member.group_instance_id, None)
        for future in (member.join_future, member.sync_future):
            if future is not None and not future.done():
                future.set_result(
                    JoinResult(GroupError.UNKNOWN_MEMBER_ID)
                    if future is member.join_future
                    else SyncResult(GroupError.UNKNOWN_MEMBER_ID)
                )
        self.heartbeat_purgatory.check_and_complete((group.group_id, member.member_id))
        log.info("group %s: member %s %s", group.group_id, member.member_id, why)
        if not rebalance:
            return
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            if group.members:
                self._prepare_rebalance(group)
            else:
                group.state = GroupState.EMPTY
                group.empty_since_ms = now_ms()
                group.generation += 1
                group.protocol_name = group.leader_id = None
                self._changed(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self.join_purgatory.check_and_complete(group.group_id)
            if not group.members and group.join_op is not None:
                group.join_op.force_complete()

    def _touch(self, group: Group, member: Member) -> None:
        """Restart the member's session: complete its heartbeat operation, arm a new one."""
        if member.heartbeat is not None:
            member.heartbeat.alive = True
        key = (group.group_id, member.member_id)
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat = DelayedHeartbeat(self, group, member)
        self.heartbeat_purgatory.try_complete_else_watch(member.heartbeat, [key])

    # -- durability --------------------------------------------------------------------------
    def _changed(self, group: Group) -> None:
        if self.on_change is not None:
            self.on_change(group)

    @staticmethod
    def metadata_of(group: Group) -> GroupMetadataValue:
        """The group as Kafka's GroupMetadataValue stores it."""
        protocol = group.protocol_name
        return GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp_ms=now_ms(),
            members=tuple(
                MemberMetadata(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(protocol) if protocol is not None else b"",
                    m.assignment,
                )
                for m in group.members.values()
            ),
        )

    def restore(self, stored: Mapping[str, GroupMetadataValue]) -> None:
        """Bring back groups from their stored metadata (at start, before serving).

        A group stored with members comes back Stable at its generation. Its members'
        sessions are not started here but by :meth:`start_restored_sessions`, which the
        broker calls once it serves: Kafka schedules them when its coordinator loads the
        group, and it loads while already serving, so a member's session.timeout.ms counts
        from when its client can reach the coordinator again, however slow the start-up
        was. A group stored empty comes back Empty, empty since its stored timestamp (for
        offsets.retention.minutes).
        """
        for group_id, value in stored.items():
            group = Group(
                group_id,
                generation=value.generation,
                protocol_type=value.protocol_type or None,
                protocol_name=value.protocol,
                leader_id=value.leader,
            )
            for m in value.members:
                protocols = [(value.protocol, m.subscription)] if value.protocol else []
                member = Member(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    value.protocol_type,
                    protocols,
                    assignment=m.assignment,
                    is_new=False,
                )
                group.members[m.member_id] = member
                if m.group_instance_id is not None:
                    group.static[m.group_instance_id] = m.member_id
            if group.members and value.protocol is not None:
                group.state = GroupState.STABLE
                self._sessions_to_start.append(group)
                if len(group.members) > self.max_size:
                    # Kafka's onLoaded: group.max.size was lowered. The members learn of the
                    # rebalance from their heartbeats; the first max_size to rejoin stay.
                    log.info(
                        "group %s: %d members, over group.max.size=%d: rebalancing",
                        group_id,
                        len(group.members),
                        self.max_size,
                    )
                    self._prepare_rebalance(group)
            else:
                group.members.clear()
                group.static.clear()
                group.state = GroupState.EMPTY
                stamp = value.current_state_timestamp_ms
                group.empty_since_ms = stamp if stamp >= 0 else now_ms()
            self.groups[group_id] = group
        if stored:
            log.info("restored %d groups from %s", len(stored), "__consumer_offsets")

    def start_restored_sessions(self) -> None:
        """Start the session of every member restored since the last call (Kafka's
        completeAndScheduleNextHeartbeatExpiration at load): each expires
        session.timeout.ms from now unless its client heartbeats, joins or leaves first."""
        self._serving = True
        groups, self._sessions_to_start = self._sessions_to_start, []
        for group in groups:
            if self.groups.get(group.group_id) is not group:
                continue  # deleted meanwhile
            for member in list(group.members.values()):
                if member.heartbeat is None:  # not heard from since the restore
                    self._touch(group, member)

    # -- admin -------------------------------------------------------------------------------
    def offset_expiry_inputs(self) -> tuple[dict[str, int], set[str]]:
        """For ``GroupOffsetStore.expire``: when each empty group became empty, and the
        groups with members."""
        empty = {
            gid: g.empty_since_ms
            for gid, g in self.groups.items()
            if not g.members and g.empty_since_ms is not None
        }
        active = {gid for gid, g in self.groups.items() if g.members}
        return empty, active

    @staticmethod
    def subscribed_topics(group: Group) -> set[str] | None:
        """The topics the members of a ``consumer`` group subscribe to, read from their
        metadata for the group's protocol (Kafka's GroupMetadata.subscribedTopics); None
        when unknown: no protocol chosen yet, or metadata that does not parse (Kafka then
        treats no topic as subscribed)."""
        if group.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in group.members.values():
            try:
                topics.update(subscription_topics(member.metadata(group.protocol_name)))
            except SubscriptionFormatError as e:
                log.info("group %s: member %s: %s", group.group_id, member.member_id, e)
                return None
        return topics

    def delete(self, group_id: str) -> GroupError:
        group = self.groups.get(group_id)
        if group is None:
            return GroupError.GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return GroupError.NON_EMPTY_GROUP
        group.state = GroupState.DEAD
        del self.groups[group_id]
        return GroupError.NONE

    def validate_commit(self, group_id: str, generation: int, member_id: str) -> GroupError:
        """OffsetCommit from a group member: its generation must be the group's."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return GroupError.NONE if generation < 0 else GroupError.UNKNOWN_MEMBER_ID
        if generation < 0:
            return GroupError.NONE if not group.members else GroupError.UNKNOWN_MEMBER_ID
        if member_id not in group.members:
            return GroupError.UNKNOWN_MEMBER_ID
        if group.state is GroupState.PREPARING_REBALANCE:
            return GroupError.REBALANCE_IN_PROGRESS
        if generation != group.generation:
            return GroupError.ILLEGAL_GENERATION
        self._touch(group, group.members[member_id])
        return GroupError.NONE


class _NeverEarly(DelayedOperation):
    """Runs ``inner`` only at its deadline (the initial rebalance delay)."""

    def __init__(self, inner: DelayedJoin) -> None:
        super().__init__(inner.delay_ms)
        self.inner = inner

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        group = self.inner.group
        if group.join_op is not self.inner:
            return
        # After the initial delay, wait for the members that joined to be complete as usual.
        group.join_op = DelayedJoin(self.inner.coordinator, group, group.rebalance_timeout_ms())
        self.inner.coordinator.join_purgatory.try_complete_else_watch(
            group.join_op, [group.group_id]
        )
