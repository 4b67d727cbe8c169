"""GroupCoordinator: the classic protocol's states, with real purgatories and timing wheel."""

from __future__ import annotations

import asyncio

from core.server.group_coordinator import GroupCoordinator, GroupError, GroupState
from core.server.timing_wheel import Timer
from tests.support.waiting import until

PROTOCOLS = [("range", b"r-meta"), ("roundrobin", b"rr-meta")]


def coordinator(**kwargs) -> GroupCoordinator:
    return GroupCoordinator(
        Timer(asyncio.get_running_loop()),
        initial_rebalance_delay_ms=0,
        min_session_timeout_ms=10,
        **kwargs,
    )


async def join(
    c: GroupCoordinator,
    member_id: str = "",
    *,
    session_ms: int = 10_000,
    rebalance_ms: int = 2_000,
    protocols=None,
):
    return await c.join(
        "g",
        member_id,
        None,
        "client",
        "127.0.0.1",
        session_ms,
        rebalance_ms,
        "consumer",
        protocols or PROTOCOLS,
        require_known_member_id=False,
    )


def test_join_sync_heartbeat_leave_and_session_expiry():
    async def scenario() -> None:
        c = coordinator()
        first = await join(c)
        assert first.error is GroupError.NONE and first.generation == 1
        assert first.leader == first.member_id and first.protocol_name == "range"
        assert [m[0] for m in first.members] == [first.member_id]
        # A second member: the leader must rejoin for generation 2.
        second_task = asyncio.create_task(join(c))
        await until(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE)
        assert c.heartbeat("g", 1, first.member_id) is GroupError.REBALANCE_IN_PROGRESS
        again = await join(c, first.member_id)
        second = await second_task
        assert again.generation == second.generation == 2
        assert len(again.members) == 2 and second.members == ()  # only the leader sees them
        # The leader's sync hands every member its assignment.
        follower_sync = asyncio.create_task(c.sync("g", 2, second.member_id, {}))
        leader_sync = await c.sync(
            "g", 2, again.member_id, {again.member_id: b"A", second.member_id: b"B"}
        )
        assert leader_sync.assignment == b"A" and (await follower_sync).assignment == b"B"
        assert c.groups["g"].state is GroupState.STABLE
        assert c.heartbeat("g", 2, second.member_id) is GroupError.NONE
        assert c.heartbeat("g", 1, second.member_id) is GroupError.ILLEGAL_GENERATION
        assert c.heartbeat("g", 2, "nobody") is GroupError.UNKNOWN_MEMBER_ID
        # The follower leaves: a rebalance, in which the leader alone forms generation 3.
        assert c.leave("g", second.member_id, None) is GroupError.NONE
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        alone = await join(c, again.member_id, session_ms=50)
        assert alone.generation == 3 and [m[0] for m in alone.members] == [alone.member_id]
        await c.sync("g", 3, alone.member_id, {alone.member_id: b"all"})
        # Silent for longer than its session: it expires and the group empties.
        await until(lambda: not c.groups["g"].members)
        assert c.groups["g"].state is GroupState.EMPTY
        assert c.delete("g") is GroupError.NONE and "g" not in c.groups
        c.shutdown()

    asyncio.run(scenario())


def test_a_negative_rebalance_timeout_ends_the_rebalance_at_once():
    # The protocol fuzz test found it: a JoinGroup with rebalance_timeout_ms -1 raised in the
    # timer instead of being served. Kafka does not check the value; on its timer a negative
    # delay has expired already, so the members that have not rejoined are dropped at once.
    async def scenario() -> None:
        c = coordinator()
        first = await join(c, rebalance_ms=-1)
        assert first.error is GroupError.NONE and first.generation == 1
        await c.sync("g", 1, first.member_id, {first.member_id: b"A"})
        # A second member with a negative timeout: the first has not rejoined when the
        # rebalance ends, so the newcomer forms generation 2 alone.
        second = await join(c, rebalance_ms=-1)
        assert second.error is GroupError.NONE and second.generation == 2
        assert [m[0] for m in second.members] == [second.member_id]
        assert first.member_id not in c.groups["g"].members
        c.shutdown()

    asyncio.run(scenario())


def test_new_members_get_an_id_first_and_protocols_must_overlap():
    async def scenario() -> None:
        c = coordinator()
        first = await c.join(
            "g",
            "",
            None,
            "client",
            "h",
            10_000,
            2_000,
            "consumer",
            PROTOCOLS,
            require_known_member_id=True,
        )
        assert first.error is GroupError.MEMBER_ID_REQUIRED and first.member_id
        joined = await c.join(
            "g",
            first.member_id,
            None,
            "client",
            "h",
            10_000,
            2_000,
            "consumer",
            PROTOCOLS,
            require_known_member_id=True,
        )
        assert joined.error is GroupError.NONE
        other = await join(c, protocols=[("sticky", b"")])
        assert other.error is GroupError.INCONSISTENT_GROUP_PROTOCOL
        assert (await join(c, session_ms=1)).error is GroupError.INVALID_SESSION_TIMEOUT
        c.shutdown()

    asyncio.run(scenario())


def test_offsets_expire_only_while_a_group_is_empty():
    from core.server.group_offsets import CommittedOffset, GroupOffsetStore

    store = GroupOffsetStore()
    day = 86_400_000
    store.commit("members", {("t", 0): CommittedOffset(5, commit_timestamp_ms=0)})
    store.commit("emptied", {("t", 0): CommittedOffset(5, commit_timestamp_ms=0)})
    store.commit(
        "simple",
        {
            ("t", 0): CommittedOffset(1, commit_timestamp_ms=0),
            ("t", 1): CommittedOffset(2, commit_timestamp_ms=9 * day),
        },
    )
    retention = 7 * day
    now = 10 * day
    # "members" has members: kept however old. "emptied" became empty 2 days ago: kept.
    _, dropped = store.expire(now, retention, {"emptied": 8 * day}, {"members"})
    # "simple" never had members: each offset goes 7 days after its commit.
    assert dropped == 1
    assert store.has_group("members") and store.has_group("emptied")
    assert store.fetch("simple", "t", 0) is None and store.fetch("simple", "t", 1) is not None
    # Once "emptied" has been empty for the retention, all of its offsets go.
    _, dropped = store.expire(15 * day + 1, retention, {"emptied": 8 * day}, {"members"})
    assert not store.has_group("emptied") and store.has_group("members")


def test_the_coordinator_reports_when_groups_became_empty():
    async def scenario() -> None:
        c = coordinator()
        member = await join(c)
        await c.sync("g", member.generation, member.member_id, {})
        empty, active = c.offset_expiry_inputs()
        assert empty == {} and active == {"g"}
        c.leave("g", member.member_id, None)
        empty, active = c.offset_expiry_inputs()
        assert "g" in empty and active == set()
        c.shutdown()

    asyncio.run(scenario())


def test_a_group_stored_in_consumer_offsets_comes_back_with_its_members():
    """Stored at the leader's sync, restored by a new coordinator (a broker restart): the
    members carry on in their generation; one that does not come back expires."""

    async def scenario() -> None:
        stored = {}
        c = coordinator()
        c.on_change = lambda g: stored.__setitem__(g.group_id, GroupCoordinator.metadata_of(g))
        a = await join(c, session_ms=200)
        await c.sync("g", a.generation, a.member_id, {a.member_id: b"all"})
        value = stored["g"]
        assert (value.generation, value.protocol, value.leader) == (1, "range", a.member_id)
        assert [(m.member_id, m.assignment) for m in value.members] == [(a.member_id, b"all")]
        c.shutdown()

        restarted = coordinator()
        restarted.restore(stored)
        group = restarted.groups["g"]
        assert group.state is GroupState.STABLE and group.generation == 1
        assert restarted.heartbeat("g", 1, a.member_id) is GroupError.NONE
        synced = await restarted.sync("g", 1, a.member_id, {})
        assert synced.assignment == b"all"  # no rebalance: the stored assignment holds
        # No more heartbeats: the session (200 ms) runs out and the group empties.
        await until(lambda: group.state is GroupState.EMPTY)
        restarted.shutdown()

    asyncio.run(scenario())


def test_restored_members_sessions_count_from_when_the_broker_serves():
    """A start-up slower than the session timeout expires nobody: a restored member's
    session starts when the broker starts serving (start_restored_sessions), as Kafka
    schedules it when its coordinator loads the group, and then runs its full length."""
    from core.server.coordinator_records import GroupMetadataValue, MemberMetadata

    clock = [0.0]
    timer = Timer(clock=lambda: clock[0])  # no loop: driven by advance_clock below
    c = GroupCoordinator(timer, min_session_timeout_ms=10)
    member = MemberMetadata("a", None, "client", "h", 2_000, 6_000, b"r-meta", b"all")
    c.restore({"g": GroupMetadataValue("consumer", 4, "range", "a", 1_000, (member,))})
    group = c.groups["g"]
    assert timer.size() == 0  # nothing counts down before the broker serves

    clock[0] = 60_000.0  # a minute of recovery before the listeners open
    timer.advance_clock()
    assert set(group.members) == {"a"} and group.state is GroupState.STABLE

    c.start_restored_sessions()
    clock[0] = 65_999.0
    timer.advance_clock()
    assert set(group.members) == {"a"}, "expired before its session.timeout.ms ran out"
    clock[0] = 66_000.0  # session.timeout.ms after the broker started serving
    timer.advance_clock()
    assert not group.members and group.state is GroupState.EMPTY
    c.start_restored_sessions()  # nothing left to start: no effect
    assert timer.size() == 0
    c.shutdown()


def test_groups_stored_empty_come_back_empty_and_their_metadata_expires():
    from core.server.coordinator_records import GroupMetadataValue
    from core.server.group_offsets import GroupOffsetStore

    async def scenario() -> None:
        c = coordinator()
        c.restore({"idle": GroupMetadataValue("consumer", 7, None, None, 1_000)})
        group = c.groups["idle"]
        assert group.state is GroupState.EMPTY and group.generation == 7
        assert group.empty_since_ms == 1_000
        c.shutdown()

    asyncio.run(scenario())
    store = GroupOffsetStore()
    store.store_group("idle", GroupMetadataValue("consumer", 7, None, None, 1_000))
    store.expire(1_000 + 59_999, 60_000, {}, set())
    assert "idle" in store.group_metadata()
    store.expire(1_000 + 60_000, 60_000, {}, set())
    assert "idle" not in store.group_metadata()


def test_a_full_group_refuses_new_members_and_keeps_its_own():
    """group.max.size, Kafka's rules for a Stable group: its members may rejoin, a new member
    gets GROUP_MAX_SIZE_REACHED (no member id, not even a KIP-394 one) and changes nothing."""

    async def scenario() -> None:
        c = coordinator(max_size=2)
        a = await join(c)
        await c.sync("g", a.generation, a.member_id, {})
        b_task = asyncio.create_task(join(c))
        await until(lambda: c.groups["g"].state is GroupState.PREPARING_REBALANCE)
        a = await join(c, a.member_id)
        b = await b_task
        await asyncio.gather(c.sync("g", 2, a.member_id, {}), c.sync("g", 2, b.member_id, {}))
        group = c.groups["g"]
        assert group.state is GroupState.STABLE and len(group.members) == 2

        refused = await join(c)
        assert refused.error is GroupError.GROUP_MAX_SIZE_REACHED and refused.member_id == ""
        refused_v4 = await c.join(
            "g", "", None, "client", "h", 10_000, 2_000, "consumer", PROTOCOLS,
            require_known_member_id=True,
        )  # fmt: skip
        assert refused_v4.error is GroupError.GROUP_MAX_SIZE_REACHED
        assert not group.pending
        assert group.state is GroupState.STABLE and group.generation == 2
        assert set(group.members) == {a.member_id, b.member_id}
        # A member of the full group rejoining is taken (here: the current generation).
        again = await join(c, b.member_id)
        assert again.error is GroupError.NONE and again.generation == 2
        c.shutdown()

    asyncio.run(scenario())


def test_a_group_restored_over_its_maximum_keeps_the_first_members_to_rejoin():
    """group.max.size lowered below a stored group's size: on load the group rebalances
    (Kafka's onLoaded), the first members to rejoin fill it, the next is refused and
    leaves, and the new generation has max.size members."""
    from core.server.coordinator_records import GroupMetadataValue, MemberMetadata

    async def scenario() -> None:
        members = tuple(
            MemberMetadata(m, None, "client", "h", 2_000, 10_000, b"r-meta", b"")
            for m in ("a", "b", "c")
        )
        stored = {"g": GroupMetadataValue("consumer", 5, "range", "a", 1_000, members)}
        c = coordinator(max_size=2)
        c.restore(stored)
        group = c.groups["g"]
        assert group.state is GroupState.PREPARING_REBALANCE and len(group.members) == 3
        assert c.heartbeat("g", 5, "c") is GroupError.REBALANCE_IN_PROGRESS
        first = asyncio.create_task(join(c, "c"))
        second = asyncio.create_task(join(c, "a"))
        await until(lambda: group.awaiting_join() == 2)
        last = await join(c, "b")
        assert last.error is GroupError.GROUP_MAX_SIZE_REACHED and last.member_id == ""
        kept = await asyncio.gather(first, second)
        assert [r.error for r in kept] == [GroupError.NONE, GroupError.NONE]
        assert {r.generation for r in kept} == {6}
        assert set(group.members) == {"a", "c"}
        assert c.heartbeat("g", 6, "b") is GroupError.UNKNOWN_MEMBER_ID
        c.shutdown()

    asyncio.run(scenario())
