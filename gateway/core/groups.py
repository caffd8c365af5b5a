"""Consumer groups: committed offsets and memberships.

Committed offsets are keyed by (group, topic, partition), independent of membership, and live in
the key-value store of the backend that owns the topic (namespace ``offsets``), so a restart or a
second gateway on the same backend sees them. A committed offset is the next offset to read.

Memberships: members join with their topics; every join or leave starts a new generation whose
assignment the coordinator computes (range assignment over the union of the members' topics).
Members that miss their session timeout are expired lazily on the next group operation.
Assignment is range by default (``server.group_assignment`` can make ``sticky`` the default); a
group whose members all ask for ``sticky`` keeps each surviving member's partitions across a
rebalance (still balanced to within one).

Membership state is kept in memory (members are connections of this gateway) and a snapshot of
every group (generation, members, assignment) is written after each rebalance to the default
backend's key-value store (namespace ``groups``): a restarted gateway continues the generation
numbering, and ``groups list|describe`` on any gateway of a shared backend sees every group.
Committed offsets are always read from the store (no cache), so two gateways on one shared
backend (NATS) see each other's commits at once.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from gateway.backends.base import Backend
from gateway.core.view import CoreView
from gateway.model import (
    CommitOffset,
    CommittedOffset,
    DescribeGroup,
    ErrorCode,
    GatewayError,
    GroupDescription,
    JoinGroupResult,
    ListOffsets,
    MemberAssignment,
    OffsetSpec,
    SyncGroupResult,
)
from gateway.observability import GROUP_MEMBERS, REBALANCES, limit_hit

log = structlog.get_logger("gateway.groups")

OFFSETS_NS = "offsets"
GROUPS_NS = "groups"


def offset_key(group: str, topic: str, partition: int) -> str:
    return f"{group}\x1f{topic}\x1f{partition}"


@dataclass
class Member:
    member_id: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    protocol: str = "range"
    last_seen: float = field(default_factory=trio.current_time)


@dataclass
class Group:
    name: str
    generation: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    assignment: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    leader: str = ""
    counts: dict[str, int] = field(default_factory=dict)  # partitions per topic when assigned
    loaded: bool = False  # the stored snapshot was consulted


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


def sticky_assign(
    members: list[str],
    topics_of: dict[str, tuple[str, ...]],
    partitions: dict[str, int],
    previous: dict[str, tuple[tuple[str, int], ...]],
) -> dict[str, tuple[tuple[str, int], ...]]:
    """Balanced like :func:`range_assign` (per topic, member counts differ by at most one), but
    every member keeps as many of its ``previous`` partitions as its share allows."""
    out: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
    for topic in sorted(partitions):
        subscribed = sorted(m for m in members if topic in topics_of[m])
        if not subscribed:
            continue
        n = partitions[topic]
        kept = {
            m: sorted(p for t, p in previous.get(m, ()) if t == topic and p < n) for m in subscribed
        }
        per, extra = divmod(n, len(subscribed))
        # the members holding the most keep the extra slots, so the fewest partitions move
        order = sorted(subscribed, key=lambda m: (-len(kept[m]), m))
        quota = {m: per + (1 if i < extra else 0) for i, m in enumerate(order)}
        taken: set[int] = set()
        for m in order:
            mine = [p for p in kept[m] if p not in taken][: quota[m]]
            taken.update(mine)
            out[m].extend((topic, p) for p in mine)
        free = [p for p in range(n) if p not in taken]
        for m in order:
            have = sum(1 for t, _ in out[m] if t == topic)
            while have < quota[m] and free:
                out[m].append((topic, free.pop(0)))
                have += 1
    return {m: tuple(sorted(v)) for m, v in out.items()}


def _parse_offset(raw: bytes) -> CommittedOffset:
    data = json.loads(raw)
    return CommittedOffset(int(data["offset"]), str(data.get("metadata", "")))


class GroupCoordinator:
    def __init__(
        self,
        backend_for: Callable[[str], Backend],
        default_backend: Backend,
        all_backends: Callable[[], Iterable[Backend]] | None = None,
        default_protocol: str = "range",
        max_members: int = 1000,
    ) -> None:
        self.default_protocol = default_protocol
        self.max_members = max_members
        self._backend_for = backend_for
        self._default = default_backend
        self._all_backends = all_backends or (lambda: [default_backend])
        self._groups: dict[str, Group] = {}

    # ------------------------------------------------------------------ offsets
    async def commit(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        metadata: str = "",
        generation: int = -1,
        member_id: str = "",
    ) -> None:
        """Store a committed offset. A member's commit (``generation`` >= 0 and a
        ``member_id``) is fenced: refused unless the member is in the current generation."""
        if not group:
            raise GatewayError(ErrorCode.INVALID_REQUEST, "group name must not be empty")
        if generation >= 0 and member_id:
            await self.check_generation(group, member_id, generation)
        key = offset_key(group, topic, partition)
        value = json.dumps({"offset": offset, "metadata": metadata}).encode()
        await self._backend_for(topic).kv_put(OFFSETS_NS, key, value)

    async def fetch(self, group: str, topic: str, partition: int) -> CommittedOffset:
        # no cache: another gateway on a shared backend may have committed since
        raw = await self._backend_for(topic).kv_get(OFFSETS_NS, offset_key(group, topic, partition))
        if raw is None:
            return CommittedOffset(-1, "")
        return _parse_offset(raw)

    async def _scan(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        """Every backend's entries of ``namespace`` (backends without a scannable store skipped)."""
        out: list[tuple[str, bytes]] = []
        seen: set[int] = set()
        for backend in self._all_backends():
            if id(backend) in seen:
                continue
            seen.add(id(backend))
            try:
                out.extend(await backend.kv_scan(namespace, prefix))
            except GatewayError as exc:
                if exc.code is not ErrorCode.UNSUPPORTED:
                    raise
        return out

    async def committed(self, group: str) -> list[tuple[str, int, CommittedOffset]]:
        """Every committed offset of ``group``: (topic, partition, offset), sorted."""
        out = []
        for key, raw in await self._scan(OFFSETS_NS, f"{group}\x1f"):
            _, topic, partition = key.split("\x1f")
            found = _parse_offset(raw)
            if found.offset >= 0:
                out.append((topic, int(partition), found))
        return sorted(out, key=lambda x: (x[0], x[1]))

    async def known_groups(self) -> list[str]:
        """Groups with members here, a stored snapshot, or committed offsets (any backend)."""
        names = set(self._groups)
        names.update(k for k, _ in await self._scan(GROUPS_NS))
        names.update(k.split("\x1f")[0] for k, _ in await self._scan(OFFSETS_NS))
        return sorted(names)

    async def stored(self, name: str) -> dict[str, Any] | None:
        """The snapshot of ``name`` last written by any gateway on the default backend."""
        try:
            raw = await self._default.kv_get(GROUPS_NS, name)
        except GatewayError as exc:
            if exc.code is ErrorCode.UNSUPPORTED:
                return None
            raise
        return None if raw is None else json.loads(raw)

    async def _save(self, group: Group) -> None:
        snapshot = {
            "generation": group.generation,
            "leader": group.leader,
            "protocol": self._protocol(group),
            "updated_at": time.time(),
            "members": {
                m.member_id: {
                    "topics": list(m.topics),
                    "session_timeout_ms": m.session_timeout_ms,
                    "assignment": [list(tp) for tp in group.assignment.get(m.member_id, ())],
                }
                for m in group.members.values()
            },
        }
        try:
            await self._default.kv_put(GROUPS_NS, group.name, json.dumps(snapshot).encode())
        except GatewayError as exc:
            # the snapshot is for restarts and other gateways; the live group works without it
            if exc.code is not ErrorCode.UNSUPPORTED:
                log.warning("group_snapshot_not_saved", group=group.name, error=exc.message)

    async def _group(self, name: str) -> Group:
        """The in-memory group, created on first use with the generation of its stored snapshot
        (so generations keep growing across restarts and gateways)."""
        group = self._groups.get(name)
        if group is None:
            group = self._groups.setdefault(name, Group(name))
        if not group.loaded:
            try:
                snap = await self.stored(name)
            except GatewayError as exc:  # try again on the group's next operation
                log.warning("group_snapshot_not_loaded", group=name, error=exc.message)
                return group
            group.loaded = True
            if snap is not None:
                group.generation = max(group.generation, int(snap.get("generation", 0)))
        return group

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

    @staticmethod
    def _protocol(group: Group) -> str:
        members = group.members.values()
        if members and all(m.protocol == "sticky" for m in members):
            return "sticky"
        return "range"

    async def _rebalance(self, group: Group, partition_count: PartitionCount) -> None:
        group.generation += 1
        REBALANCES.labels(group=group.name).inc()
        GROUP_MEMBERS.labels(group=group.name).set(len(group.members))
        members = sorted(group.members)
        group.leader = members[0] if members else ""
        topics = sorted({t for m in group.members.values() for t in m.topics})
        counts = {t: await partition_count(t) for t in topics}
        group.counts = counts
        topics_of = {m: group.members[m].topics for m in members}
        if self._protocol(group) == "sticky":
            group.assignment = sticky_assign(members, topics_of, counts, group.assignment)
        else:
            group.assignment = range_assign(members, topics_of, counts)
        await self._save(group)

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
        group = await self._group(name)
        expired = self._expire(group)
        if member_id and member_id not in group.members and not create_member:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        member_id = member_id or f"{name}-{uuid.uuid4().hex[:12]}"
        existing = group.members.get(member_id)
        if existing is None:
            self.check_room(name, len(group.members))
        if (
            expired
            or existing is None
            or existing.topics != tuple(topics)
            or existing.protocol != protocol
        ):
            group.members[member_id] = Member(
                member_id, tuple(topics), session_timeout_ms, protocol
            )
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

    def check_room(self, name: str, members: int) -> None:
        """Refuse a new member of a group that has ``max_group_members`` already."""
        if members >= self.max_members:
            limit_hit("max_group_members", "server", log, group=name, members=members)
            raise GatewayError(
                ErrorCode.INVALID_REQUEST,
                f"group {name!r} has {members} members, the most allowed "
                "(server.max_group_members)",
            )

    async def check_generation(self, name: str, member_id: str, generation: int) -> None:
        """Refuse (UNKNOWN_MEMBER / ILLEGAL_GENERATION) unless ``member_id`` is a member of
        the group's current ``generation``."""
        self._current(name, member_id, generation)

    async def run(self) -> None:
        """Background work while the server runs: none for members held in this process."""

    def _current(self, name: str, member_id: str, generation: int) -> Group:
        """The group, when ``member_id`` is a member of its current ``generation``."""
        group = self._groups.get(name)
        if group is None or member_id not in group.members:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        if generation != group.generation:
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's current {group.generation}",
            )
        return group

    def _member(self, name: str, member_id: str, generation: int) -> Group:
        group = self._current(name, member_id, generation)
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

    def has_members(self, name: str) -> bool:
        group = self._groups.get(name)
        return group is not None and bool(group.members)

    def forget(self, name: str) -> None:
        """Drop an empty group's in-memory state (after its offsets were reset, say)."""
        group = self._groups.get(name)
        if group is not None and not group.members:
            del self._groups[name]

    async def delete(self, name: str) -> int:
        """Drop an empty group everywhere: its state here, its stored snapshot and every
        committed offset (on every backend). Returns how many offsets were deleted."""
        self.forget(name)
        try:
            await self._default.kv_delete(GROUPS_NS, name)
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNSUPPORTED:
                raise
        deleted = 0
        seen: set[int] = set()
        for backend in self._all_backends():
            if id(backend) in seen:
                continue
            seen.add(id(backend))
            try:
                keys = [k for k, _ in await backend.kv_scan(OFFSETS_NS, f"{name}\x1f")]
            except GatewayError as exc:
                if exc.code is not ErrorCode.UNSUPPORTED:
                    raise
                continue
            for key in keys:
                await backend.kv_delete(OFFSETS_NS, key)
                deleted += 1
        return deleted


# ---------------------------------------------------------------------------- operations
# What ``gateway groups`` and the admin API's /v1/groups show and do, on a Core.


async def group_summaries(core: CoreView) -> list[dict[str, Any]]:
    """One line per known group: name, state, generation, member count."""
    out = []
    for name in await core.groups.known_groups():
        d = await describe_group(core, name, offsets=False)
        out.append(
            {
                "name": name,
                "state": d["state"],
                "generation": d["generation"],
                "members": len(d["members"]),
                "protocol": d["protocol"],
            }
        )
    return out


async def describe_group(core: CoreView, name: str, offsets: bool = True) -> dict[str, Any]:
    """Members and assignment (this gateway's live view, else the stored snapshot) and, with
    ``offsets``, every committed offset with the partition's high watermark and the lag."""
    await core.execute(DescribeGroup(name))  # applies session timeouts
    coord: GroupCoordinator = core.groups
    desc = coord.describe(name)
    if desc.members or name in coord.group_names():
        group = coord._groups.get(name)
        members = [
            {
                "member_id": m.member_id,
                "topics": list(group.members[m.member_id].topics) if group else [],
                "assignment": [[t, p] for t, p in m.partitions],
            }
            for m in desc.members
        ]
        result: dict[str, Any] = {
            "group": name,
            "state": desc.state,
            "generation": desc.generation,
            "protocol": coord._protocol(group) if group else "range",
            "source": "live",
            "members": members,
        }
    else:
        snap = await coord.stored(name) or {}
        snap_members = snap.get("members", {})
        result = {
            "group": name,
            "state": "stored" if snap_members else "empty",
            "generation": int(snap.get("generation", 0)),
            "protocol": snap.get("protocol", "range"),
            "source": "stored" if snap else "none",
            "members": [
                {
                    "member_id": mid,
                    "topics": m.get("topics", []),
                    "assignment": m.get("assignment", []),
                }
                for mid, m in sorted(snap_members.items())
            ],
        }
    if offsets:
        rows = []
        for topic, partition, found in await coord.committed(name):
            row: dict[str, Any] = {
                "topic": topic,
                "partition": partition,
                "committed": found.offset,
                "metadata": found.metadata,
            }
            try:
                hw = (await core.execute(ListOffsets(topic, partition, OffsetSpec.LATEST))).offset
                row["high_watermark"] = hw
                row["lag"] = max(0, hw - found.offset)
            except GatewayError as exc:
                row["error"] = exc.message
            rows.append(row)
        result["offsets"] = rows
    return result


async def delete_group(core: CoreView, name: str) -> dict[str, Any]:
    """Forget the group ``name`` (snapshot and committed offsets); refused while it has live
    members on this gateway."""
    coord: GroupCoordinator = core.groups
    await core.execute(DescribeGroup(name))  # applies session timeouts
    classic = getattr(core, "classic", None)  # Kafka's client-assigned groups
    if coord.has_members(name) or (classic is not None and classic.get(name) is not None):
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"group {name!r} has active members; stop them first"
        )
    if name not in await coord.known_groups():
        raise GatewayError(ErrorCode.UNKNOWN_GROUP, f"unknown group {name!r}")
    return {"group": name, "offsets_deleted": await coord.delete(name)}


async def reset_offsets(
    core: CoreView,
    name: str,
    topic: str,
    to: str | int,
    partitions: Iterable[int] | None = None,
    force: bool = False,
) -> list[dict[str, Any]]:
    """Commit new offsets for ``name`` on ``topic``: ``to`` is ``"earliest"``, ``"latest"``,
    an offset (int), or ``"timestamp:<us>"``. Refused while the group has live members on this
    gateway unless ``force`` (their next commit would overwrite the reset anyway)."""
    coord: GroupCoordinator = core.groups
    await core.execute(DescribeGroup(name))
    if coord.has_members(name) and not force:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"group {name!r} has active members; stop them first (or force)",
        )
    info = await core.topic(topic)
    chosen = sorted(set(partitions)) if partitions else list(range(info.partitions))
    out = []
    for p in chosen:
        if not 0 <= p < info.partitions:
            raise GatewayError(ErrorCode.UNKNOWN_PARTITION, f"{topic} has no partition {p}")
        if to == "earliest":
            offset = (await core.execute(ListOffsets(topic, p, OffsetSpec.EARLIEST))).offset
        elif to == "latest":
            offset = (await core.execute(ListOffsets(topic, p, OffsetSpec.LATEST))).offset
        elif isinstance(to, str) and to.startswith("timestamp:"):
            ts = int(to.split(":", 1)[1])
            offset = (await core.execute(ListOffsets(topic, p, ts))).offset
        elif isinstance(to, int) and not isinstance(to, bool):
            r = await core.execute(ListOffsets(topic, p, OffsetSpec.LATEST))
            offset = min(max(to, r.log_start_offset), r.high_watermark)
        else:
            raise GatewayError(ErrorCode.INVALID_REQUEST, f"cannot reset to {to!r}")
        await core.execute(CommitOffset(name, topic, p, offset, "reset"))
        out.append({"topic": topic, "partition": p, "committed": offset})
    return out
