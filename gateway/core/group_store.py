"""Consumer groups shared by every gateway process on one backend (NATS JetStream).

The in-process :class:`~gateway.core.groups.GroupCoordinator` keeps members in memory, so two
replicas behind a load balancer would form two groups of the same name. This coordinator keeps
the whole group (generation, leader, members, assignment) in one entry of the default backend's
key-value store (namespace ``groups``, the same entry the in-process coordinator writes as its
snapshot) and changes it only by compare-and-set on the entry's revision: read, change, write
if nobody wrote in between, else read again. Every gateway on the backend therefore sees and
changes one group.

Members are held by two clocks, both wall-clock deadlines in the entry (gateways on different
machines compare them, so clocks must be roughly in sync, as NTP keeps them):

- ``seen``: the client's last join, sync or heartbeat; the member leaves when its session
  timeout passes without one (the protocol's own rule, as in one process). Written at most
  every quarter of the session timeout, so heartbeats do not each cost a write.
- ``deadline``: the lease of the gateway that holds the member's connection. That gateway renews
  it every third of ``server.group_lease_ms`` while it runs; when it dies (a killed replica),
  the lease runs out and the member leaves, whatever its session timeout (Iggy members have
  none of their own).

Any gateway drops expired members (by compare-and-set) on its next operation on the group, which
starts a new generation. The generation fences stale members: their sync, heartbeat or commit
with an old generation gets ILLEGAL_GENERATION / REBALANCE_IN_PROGRESS, the protocol's
rebalance answer.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog
import trio

from gateway.backends.base import Backend
from gateway.core.groups import (
    GROUPS_NS,
    Group,
    GroupCoordinator,
    Member,
    PartitionCount,
    range_assign,
    sticky_assign,
)
from gateway.model import (
    ErrorCode,
    GatewayError,
    JoinGroupResult,
    MemberAssignment,
    SyncGroupResult,
)
from gateway.observability import GROUP_MEMBERS, REBALANCES

log = structlog.get_logger("gateway.groups")

CAS_ATTEMPTS = 64
"""Compare-and-set retries before an operation gives up with a retriable error."""

State = dict[str, Any]
Change = Callable[[State, float], Awaitable[bool]]


def _empty() -> State:
    return {"generation": 0, "leader": "", "protocol": "range", "members": {}, "counts": {}}


class SharedGroupCoordinator(GroupCoordinator):
    """The group coordinator of a backend with ``shared_groups``: same interface as
    :class:`GroupCoordinator`, state in the backend. ``describe`` answers from the entry last
    read, which every operation (and ``expire``, called before each describe) refreshes."""

    def __init__(
        self,
        backend_for: Callable[[str], Backend],
        default_backend: Backend,
        all_backends: Callable[[], Iterable[Backend]] | None = None,
        default_protocol: str = "range",
        lease_ms: int = 10_000,
        max_members: int = 1000,
    ) -> None:
        super().__init__(backend_for, default_backend, all_backends, default_protocol, max_members)
        self.lease_s = lease_ms / 1000
        self.instance = uuid.uuid4().hex[:12]  # this process, the owner of its members' leases
        self._mine: dict[str, set[str]] = {}  # group -> members whose connection is here

    # ------------------------------------------------------------------ the entry
    async def _read(self, name: str) -> tuple[State, int]:
        raw, revision = await self._default.kv_get_revision(GROUPS_NS, name)
        state = _empty() if raw is None else json.loads(raw)
        state.setdefault("members", {})
        state.setdefault("counts", {})
        return state, revision

    async def _update(self, name: str, change: Change) -> State:
        """Apply ``change`` (which returns whether it changed anything) to the stored entry by
        compare-and-set, re-reading and re-applying when another gateway wrote first."""
        for _ in range(CAS_ATTEMPTS):
            state, revision = await self._read(name)
            now = time.time()
            if not await change(state, now):
                self._cache(name, state)
                return state
            state["updated_at"] = now
            if await self._default.kv_put_if(GROUPS_NS, name, json.dumps(state).encode(), revision):
                self._cache(name, state)
                return state
            await trio.sleep(random.uniform(0.001, 0.02))
        raise GatewayError(
            ErrorCode.REBALANCE_IN_PROGRESS, f"group {name!r} is changing too fast; try again"
        )

    def _cache(self, name: str, state: State) -> None:
        """Mirror the entry as the in-process :class:`Group` that ``describe`` reads (groups
        that do not exist are not kept: asking about any name must not grow memory)."""
        if not state["members"] and not int(state["generation"]):
            self._groups.pop(name, None)
            return
        group = Group(name, int(state["generation"]), loaded=True)
        group.leader = state.get("leader", "")
        group.counts = dict(state.get("counts", {}))
        for mid, m in state["members"].items():
            group.members[mid] = Member(
                mid, tuple(m["topics"]), int(m["session_timeout_ms"]), m.get("protocol", "range")
            )
            group.assignment[mid] = tuple((t, int(p)) for t, p in m.get("assignment", ()))
        self._groups[name] = group
        GROUP_MEMBERS.labels(group=name).set(len(group.members))
        mine = self._mine.get(name)
        if mine is not None:
            mine &= set(state["members"])
            if not mine:
                del self._mine[name]

    @staticmethod
    def _expired(state: State, now: float) -> bool:
        dead = [
            mid
            for mid, m in state["members"].items()
            # a snapshot written by a gateway without shared groups has neither: its members
            # lived in that process and are gone
            if now > m.get("deadline", 0) or now - m.get("seen", 0) > m["session_timeout_ms"] / 1000
        ]
        for mid in dead:
            del state["members"][mid]
        if dead:
            log.info("group_members_expired", members=dead)
        return bool(dead)

    async def _reassign(self, name: str, state: State, partition_count: PartitionCount) -> None:
        state["generation"] = int(state["generation"]) + 1
        members = sorted(state["members"])
        state["leader"] = members[0] if members else ""
        protos = [m.get("protocol", "range") for m in state["members"].values()]
        state["protocol"] = "sticky" if protos and all(p == "sticky" for p in protos) else "range"
        topics = sorted({t for m in state["members"].values() for t in m["topics"]})
        counts = {t: await partition_count(t) for t in topics}
        state["counts"] = counts
        topics_of = {mid: tuple(state["members"][mid]["topics"]) for mid in members}
        if state["protocol"] == "sticky":
            previous = {
                mid: tuple((t, int(p)) for t, p in m.get("assignment", ()))
                for mid, m in state["members"].items()
            }
            assignment = sticky_assign(members, topics_of, counts, previous)
        else:
            assignment = range_assign(members, topics_of, counts)
        for mid in members:
            state["members"][mid]["assignment"] = [list(tp) for tp in assignment[mid]]
        REBALANCES.labels(group=name).inc()

    def _renew(self, member: dict[str, Any], now: float) -> bool:
        """Refresh the member's ``seen`` and lease if a quarter of its session timeout (or a
        third of the lease) has passed; True when that needs a write."""
        timeout = member["session_timeout_ms"] / 1000
        if now - member.get("seen", 0) < min(timeout / 4, self.lease_s / 3):
            return False
        member["seen"] = now
        member["deadline"] = now + self.lease_s
        member["owner"] = self.instance
        return True

    # ------------------------------------------------------------------ membership
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
        protocol = protocol or self.default_protocol
        chosen = member_id or f"{name}-{uuid.uuid4().hex[:12]}"

        async def change(state: State, now: float) -> bool:
            expired = self._expired(state, now)
            existing = state["members"].get(chosen)
            if member_id and existing is None and not create_member:
                raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
            if existing is None:
                self.check_room(name, len(state["members"]))
            fresh = {
                "topics": list(topics),
                "session_timeout_ms": session_timeout_ms,
                "protocol": protocol,
                "assignment": [],
                "seen": now,
                "deadline": now + self.lease_s,
                "owner": self.instance,
            }
            if (
                expired
                or existing is None
                or existing["topics"] != list(topics)
                or existing.get("protocol") != protocol
            ):
                if existing is not None:
                    fresh["assignment"] = existing.get("assignment", [])
                state["members"][chosen] = fresh
                await self._reassign(name, state, partition_count)
                return True
            for topic, count in state["counts"].items():
                if await partition_count(topic) != count:
                    await self._reassign(name, state, partition_count)
                    return True
            return self._renew(existing, now)

        state = await self._update(name, change)
        self._mine.setdefault(name, set()).add(chosen)
        return JoinGroupResult(
            name, chosen, int(state["generation"]), state["leader"], tuple(sorted(state["members"]))
        )

    async def _touch(
        self, name: str, member_id: str, generation: int, partition_count: PartitionCount
    ) -> State:
        """Expire, then check the member and refresh its ``seen`` (written only now and then)."""

        async def change(state: State, now: float) -> bool:
            if self._expired(state, now):
                await self._reassign(name, state, partition_count)
                member = state["members"].get(member_id)
                if member is not None:
                    self._renew(member, now)
                return True
            member = state["members"].get(member_id)
            return member is not None and self._renew(member, now)

        state = await self._update(name, change)
        if member_id in state["members"]:  # the member's connection is here now
            self._mine.setdefault(name, set()).add(member_id)
        return state

    async def sync(
        self, name: str, member_id: str, generation: int, partition_count: PartitionCount
    ) -> SyncGroupResult:
        state = await self._touch(name, member_id, generation, partition_count)
        member = state["members"].get(member_id)
        if member is None:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        if generation != state["generation"]:
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's current {state['generation']}",
            )
        partitions = tuple((t, int(p)) for t, p in member.get("assignment", ()))
        return SyncGroupResult(MemberAssignment(member_id, partitions))

    async def heartbeat(
        self, name: str, member_id: str, generation: int, partition_count: PartitionCount
    ) -> None:
        state = await self._touch(name, member_id, generation, partition_count)
        if member_id not in state["members"]:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        if generation != state["generation"]:
            raise GatewayError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {name!r} rebalanced: join again"
            )

    async def leave(self, name: str, member_id: str, partition_count: PartitionCount) -> None:
        async def change(state: State, now: float) -> bool:
            if member_id not in state["members"]:
                raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
            del state["members"][member_id]
            self._expired(state, now)
            await self._reassign(name, state, partition_count)
            return True

        await self._update(name, change)

    async def expire(self, name: str, partition_count: PartitionCount) -> None:
        async def change(state: State, now: float) -> bool:
            if self._expired(state, now):
                await self._reassign(name, state, partition_count)
                return True
            return False

        await self._update(name, change)

    async def check_generation(self, name: str, member_id: str, generation: int) -> None:
        """Fence a commit: the member must be in the group's current generation."""
        state, _ = await self._read(name)
        if member_id not in state["members"]:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        if generation != state["generation"]:
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's current {state['generation']}",
            )

    async def _save(self, group: Group) -> None:  # the entry is the state; nothing to mirror
        return None

    async def stored(self, name: str) -> dict[str, Any] | None:
        raw, _ = await self._default.kv_get_revision(GROUPS_NS, name)
        return None if raw is None else json.loads(raw)

    # ------------------------------------------------------------------ leases
    async def run(self) -> None:
        """Renew the leases of the members whose connections are on this gateway, every third
        of the lease, until cancelled (with the server)."""
        while True:
            await trio.sleep(self.lease_s / 3)
            for name in list(self._mine):
                try:
                    await self._update(name, self._renewer(name))
                except GatewayError as exc:  # the backend is down: the next round tries again
                    log.warning("group_lease_not_renewed", group=name, error=exc.message)
                except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
                    log.warning("group_lease_not_renewed", group=name, error=repr(exc))

    def _renewer(self, name: str) -> Change:
        async def change(state: State, now: float) -> bool:
            mine = self._mine.get(name, set())
            changed = False
            for mid in mine & set(state["members"]):
                member = state["members"][mid]
                if member.get("deadline", 0) - now < self.lease_s * 2 / 3:
                    member["deadline"] = now + self.lease_s
                    member["owner"] = self.instance
                    changed = True
            return changed

        return change
