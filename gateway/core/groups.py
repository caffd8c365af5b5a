"""Consumer groups: committed offsets and memberships.

Committed offsets are keyed by (group, topic, partition), independent of membership, and live in
the key-value store of the backend that owns the topic (namespace ``offsets``), so a restart or a
second gateway on the same backend sees them. A committed offset is the next offset to read.

Memberships: members join with their topics; every join or leave starts a new generation whose
assignment the coordinator computes (range assignment over the union of the members' topics).
Members that miss their session timeout are expired lazily on the next group operation.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from gateway.backends.base import Backend
from gateway.model import (
    CommittedOffset,
    ErrorCode,
    GatewayError,
    GroupDescription,
    JoinGroupResult,
    MemberAssignment,
    SyncGroupResult,
)
from gateway.observability import GROUP_MEMBERS, REBALANCES

OFFSETS_NS = "offsets"


def offset_key(group: str, topic: str, partition: int) -> str:
    return f"{group}\x1f{topic}\x1f{partition}"


@dataclass
class Member:
    member_id: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    last_seen: float = field(default_factory=trio.current_time)


@dataclass
class Group:
    name: str
    generation: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    assignment: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    leader: str = ""
    counts: dict[str, int] = field(default_factory=dict)  # partitions per topic when assigned


PartitionCount = Callable[[str], Awaitable[int]]


def range_assign(
    members: list[str], topics_of: dict[str, tuple[str, ...]], partitions: dict[str, int]
) -> dict[str, tuple[tuple[str, int], ...]]:
    """Kafka's range assignor: per topic, consecutive partition ranges to the sorted members
    subscribed to it, the first members getting one extra when it does not divide evenly."""
    out: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
    for topic in sorted(partitions):
        subscribed = sorted(m for m in members if topic in topics_of[m])
        if not subscribed:
            continue
        n = partitions[topic]
        per, extra = divmod(n, len(subscribed))
        start = 0
        for i, m in enumerate(subscribed):
            count = per + (1 if i < extra else 0)
            out[m].extend((topic, p) for p in range(start, start + count))
            start += count
    return {m: tuple(v) for m, v in out.items()}


class GroupCoordinator:
    def __init__(self, backend_for: Callable[[str], Backend], default_backend: Backend) -> None:
        self._backend_for = backend_for
        self._default = default_backend
        self._groups: dict[str, Group] = {}
        self._offsets: dict[str, CommittedOffset] = {}

    # ------------------------------------------------------------------ offsets
    async def commit(
        self, group: str, topic: str, partition: int, offset: int, metadata: str = ""
    ) -> None:
        if not group:
            raise GatewayError(ErrorCode.INVALID_REQUEST, "group name must not be empty")
        key = offset_key(group, topic, partition)
        value = json.dumps({"offset": offset, "metadata": metadata}).encode()
        await self._backend_for(topic).kv_put(OFFSETS_NS, key, value)
        self._offsets[key] = CommittedOffset(offset, metadata)

    async def fetch(self, group: str, topic: str, partition: int) -> CommittedOffset:
        key = offset_key(group, topic, partition)
        cached = self._offsets.get(key)
        if cached is not None:
            return cached
        raw = await self._backend_for(topic).kv_get(OFFSETS_NS, key)
        if raw is None:
            return CommittedOffset(-1, "")
        data = json.loads(raw)
        result = CommittedOffset(int(data["offset"]), str(data.get("metadata", "")))
        self._offsets[key] = result
        return result

    # ------------------------------------------------------------------ membership
    def _expire(self, group: Group) -> bool:
        now = trio.current_time()
        dead = [
            m.member_id
            for m in group.members.values()
            if now - m.last_seen > m.session_timeout_ms / 1000
        ]
        for member_id in dead:
            del group.members[member_id]
        return bool(dead)

    async def _rebalance(self, group: Group, partition_count: PartitionCount) -> None:
        group.generation += 1
        REBALANCES.labels(group=group.name).inc()
        GROUP_MEMBERS.labels(group=group.name).set(len(group.members))
        members = sorted(group.members)
        group.leader = members[0] if members else ""
        topics = sorted({t for m in group.members.values() for t in m.topics})
        counts = {t: await partition_count(t) for t in topics}
        group.counts = counts
        group.assignment = range_assign(
            members, {m: group.members[m].topics for m in members}, counts
        )

    async def join(
        self,
        name: str,
        topics: tuple[str, ...],
        member_id: str,
        session_timeout_ms: int,
        partition_count: PartitionCount,
        create_member: bool = False,
    ) -> JoinGroupResult:
        group = self._groups.setdefault(name, Group(name))
        expired = self._expire(group)
        if member_id and member_id not in group.members and not create_member:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        member_id = member_id or f"{name}-{uuid.uuid4().hex[:12]}"
        existing = group.members.get(member_id)
        if expired or existing is None or existing.topics != tuple(topics):
            group.members[member_id] = Member(member_id, tuple(topics), session_timeout_ms)
            await self._rebalance(group, partition_count)
        else:
            existing.last_seen = trio.current_time()
            # a rejoin after partitions were added or removed gets a fresh assignment
            for topic, count in group.counts.items():
                if await partition_count(topic) != count:
                    await self._rebalance(group, partition_count)
                    break
        return JoinGroupResult(
            name, member_id, group.generation, group.leader, tuple(sorted(group.members))
        )

    def _member(self, name: str, member_id: str, generation: int) -> Group:
        group = self._groups.get(name)
        if group is None or member_id not in group.members:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        if generation != group.generation:
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's current {group.generation}",
            )
        group.members[member_id].last_seen = trio.current_time()
        return group

    async def sync(
        self, name: str, member_id: str, generation: int, partition_count: PartitionCount
    ) -> SyncGroupResult:
        group = self._groups.get(name)
        if group is not None and self._expire(group):
            await self._rebalance(group, partition_count)
        group = self._member(name, member_id, generation)
        return SyncGroupResult(MemberAssignment(member_id, group.assignment.get(member_id, ())))

    async def heartbeat(
        self, name: str, member_id: str, generation: int, partition_count: PartitionCount
    ) -> None:
        group = self._groups.get(name)
        if group is not None and self._expire(group):
            await self._rebalance(group, partition_count)
        group = self._groups.get(name)
        if group is None or member_id not in group.members:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        group.members[member_id].last_seen = trio.current_time()
        if generation != group.generation:
            raise GatewayError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {name!r} rebalanced: join again"
            )

    async def leave(self, name: str, member_id: str, partition_count: PartitionCount) -> None:
        group = self._groups.get(name)
        if group is None or member_id not in group.members:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        del group.members[member_id]
        await self._rebalance(group, partition_count)

    async def expire(self, name: str, partition_count: PartitionCount) -> None:
        """Drop the members of ``name`` whose session timed out, rebalancing if any did."""
        group = self._groups.get(name)
        if group is not None and self._expire(group):
            await self._rebalance(group, partition_count)

    def describe(self, name: str) -> GroupDescription:
        """The group as it stands (call :meth:`expire` first to apply session timeouts)."""
        group = self._groups.get(name)
        if group is None:
            return GroupDescription(name, "empty", 0, ())
        members = tuple(
            MemberAssignment(m, group.assignment.get(m, ())) for m in sorted(group.members)
        )
        topics = tuple(sorted({t for m in group.members.values() for t in m.topics}))
        return GroupDescription(
            name, "stable" if members else "empty", group.generation, members, topics
        )

    def group_names(self) -> list[str]:
        return sorted(self._groups)
