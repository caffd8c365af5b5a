"""Consumer groups run by the backend's own server (``Capabilities.groups == "backend"``).

An upstream backend is another broker, which may have consumer groups of its own (Cursus). Two
gateways on that broker, each with its in-process coordinator, would form two groups of one
name and hand the same partitions to two members. This coordinator has the same interface as
:class:`~gateway.core.groups.GroupCoordinator`, but every membership call (join, sync,
heartbeat, leave) goes to the default backend's ``group_*`` methods, so the broker decides the
members, the generation and the assignment, and every gateway on it sees one group.

``describe`` answers from the view last fetched: ``expire`` (which the core calls before each
describe) asks the broker. Committed offsets stay where they always were
(:meth:`GroupCoordinator.commit`); a member's fenced commit is checked against the broker's
current generation.
"""

from __future__ import annotations

from typing import Any

from gateway.core.groups import Group, GroupCoordinator, Member, PartitionCount
from gateway.model import (
    ErrorCode,
    GatewayError,
    GroupDescription,
    JoinGroupResult,
    SyncGroupResult,
)
from gateway.observability import GROUP_MEMBERS


class BackendGroupCoordinator(GroupCoordinator):
    """Membership delegated to the default backend (see the module docstring)."""

    def _check_topics(self, name: str, topics: tuple[str, ...]) -> None:
        for topic in topics:
            if self._backend_for(topic) is not self._default:
                raise GatewayError(
                    ErrorCode.INVALID_REQUEST,
                    f"group {name!r}: topic {topic!r} is not on backend {self._default.name!r}, "
                    "whose server runs the consumer groups",
                )

    def _cache(self, desc: GroupDescription) -> GroupDescription:
        """Mirror the broker's view as the in-process :class:`Group` that ``describe``,
        ``has_members`` and ``gateway groups`` read. Groups without members are not kept
        (asking about any name must not grow memory)."""
        if not desc.members:
            self._groups.pop(desc.group, None)
            GROUP_MEMBERS.labels(group=desc.group).set(0)
            return desc
        group = Group(desc.group, desc.generation, loaded=True)
        for m in desc.members:
            topics = tuple(sorted({t for t, _ in m.partitions} | set(desc.topics)))
            group.members[m.member_id] = Member(m.member_id, topics, 0)
            group.assignment[m.member_id] = m.partitions
        group.leader = min(group.members)
        self._groups[desc.group] = group
        GROUP_MEMBERS.labels(group=desc.group).set(len(group.members))
        return desc

    async def _refresh(self, name: str) -> GroupDescription:
        return self._cache(await self._default.group_describe(name))

    async def join(
        self,
        name: str,
        topics: tuple[str, ...],
        member_id: str,
        session_timeout_ms: int,
        partition_count: PartitionCount,
        create_member: bool = False,
        protocol: str = "",
    ) -> JoinGroupResult:
        self._check_topics(name, topics)
        present = {m.member_id for m in (await self._refresh(name)).members}
        if member_id and member_id not in present and not create_member:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        if member_id not in present:
            self.check_room(name, len(present))
        joined = await self._default.group_join(name, topics, member_id, session_timeout_ms)
        await self._refresh(name)
        return joined

    async def sync(
        self, name: str, member_id: str, generation: int, partition_count: PartitionCount
    ) -> SyncGroupResult:
        return await self._default.group_sync(name, member_id, generation)

    async def heartbeat(
        self, name: str, member_id: str, generation: int, partition_count: PartitionCount
    ) -> None:
        await self._default.group_heartbeat(name, member_id, generation)

    async def leave(self, name: str, member_id: str, partition_count: PartitionCount) -> None:
        await self._default.group_leave(name, member_id)
        await self._refresh(name)

    async def expire(self, name: str, partition_count: PartitionCount) -> None:
        """Fetch the broker's view (it expires members by its own session timeouts)."""
        await self._refresh(name)

    async def check_generation(self, name: str, member_id: str, generation: int) -> None:
        desc = await self._refresh(name)
        if member_id not in {m.member_id for m in desc.members}:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        if generation != desc.generation:
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's current {desc.generation}",
            )

    async def _save(self, group: Group) -> None:  # the broker holds the group
        return None

    async def stored(self, name: str) -> dict[str, Any] | None:  # the broker is the state
        return None
