"""Client-assigned consumer groups: Kafka's classic group protocol.

Cursus, Iggy and Liftbridge members let the coordinator assign partitions
(:mod:`gateway.core.groups`). A Kafka consumer assigns them itself: every member sends opaque
metadata for the protocols (assignors) it supports, one member (the leader) gets every member's
metadata in its JoinGroup answer, computes the assignment and sends it in SyncGroup, and each
member receives its part. The coordinator only runs the rounds:

- **A rebalance is a round.** It starts when a member joins that the group does not know, when a
  member's metadata changes, when the leader joins again (to announce new partitions, say), or
  when a member leaves or misses its session timeout. During the round (state ``joining``)
  heartbeats answer REBALANCE_IN_PROGRESS, so every member joins again; each JoinGroup waits
  until all members have joined, or until the round's deadline (the largest rebalance timeout
  of the members), when the members that did not join are dropped. Then the generation grows,
  the group picks the protocol every member supports that the members prefer most, and every
  waiting JoinGroup is answered (state ``syncing``).
- **SyncGroup**: the leader's carries the assignment (state ``stable``); a follower's waits for
  it, and gets REBALANCE_IN_PROGRESS if a new round starts meanwhile.
- **Static members** (``group.instance.id``): a rejoin under a new member id replaces the old
  member (fencing it: FENCED_INSTANCE_ID) without a rebalance when nothing else changed.
- **MEMBER_ID_REQUIRED**: a new member (JoinGroup v4+) is first handed its member id and must
  join again with it, so a member whose first answer was lost is not counted twice. Ids handed
  out but not used yet count against ``server.max_group_members`` and lapse after the session
  timeout.

Committed offsets are the gateway's one store (:meth:`GroupCoordinator.commit`), keyed by
(group, topic, partition) like every other protocol's. The Kafka listener refuses a commit
without a member id and generation (``assign()`` and commit) into a group that has members
(:meth:`ClassicGroups.check_simple_commit`), as Kafka does, and a member's commit into a group
that does not exist (:meth:`ClassicGroups.exists`) with ILLEGAL_GENERATION; the other
protocols' commits into the one store are not Kafka's business and are not checked. Groups
live in this process (the gateway answers FindCoordinator with itself); a group is forgotten
when its last member has gone, after its snapshot (generation, members, decoded assignment)
was written like the other groups', so ``gateway groups`` shows it and a later round continues
its generation numbering.
A group name is used by one kind of member at a time: a client-assigned join into a group with
server-assigned members (and the reverse) is INCONSISTENT_GROUP_PROTOCOL, as Kafka answers a
member of another protocol type.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import structlog
import trio

from gateway.core.groups import Group, GroupCoordinator, Member
from gateway.model import (
    ErrorCode,
    GatewayError,
    GroupDescription,
    JoinGroup,
    JoinGroupResult,
    MemberAssignment,
    MemberIdRequired,
    SyncGroup,
    SyncGroupResult,
)
from gateway.observability import GROUP_MEMBERS, REBALANCES, limit_hit

log = structlog.get_logger("gateway.groups")

Assignments = tuple[tuple[str, bytes, tuple[tuple[str, int], ...]], ...]

# Kafka's names of the states (DescribeGroups, ListGroups)
STATE_NAMES = {
    "empty": "Empty",
    "joining": "PreparingRebalance",
    "syncing": "CompletingRebalance",
    "stable": "Stable",
}


@dataclass
class ClassicMember(Member):
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 0
    protocols: tuple[tuple[str, bytes], ...] = ()
    joined: bool = False  # joined in the current round
    busy: int = 0  # JoinGroup / SyncGroup calls waiting: alive whatever its last heartbeat

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""


@dataclass
class Round:
    """One rebalance: its waiters hold it, its completion fills the answer they share."""

    deadline: float
    done: trio.Event = field(default_factory=trio.Event)
    generation: int = -1
    protocol: str = ""
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass
class ClassicGroup(Group):
    state: str = "empty"  # empty | joining | syncing | stable
    protocol_type: str = ""
    protocol_name: str = ""
    round: Round | None = None
    data: dict[str, bytes] = field(default_factory=dict)  # the leader's assignment
    pending: dict[str, float] = field(default_factory=dict)  # ids handed out -> lapse time
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    changed: trio.Event = field(default_factory=trio.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def classic_members(self) -> list[ClassicMember]:
        return [m for m in self.members.values() if isinstance(m, ClassicMember)]


class ClassicGroups:
    """The client-assigned groups of one gateway (see the module docstring)."""

    def __init__(self, coordinator: GroupCoordinator, max_groups: int = 10_000) -> None:
        self.coordinator = coordinator
        self.max_groups = max_groups
        self.groups: dict[str, ClassicGroup] = {}
        self._swept = -1.0

    def _sweep(self) -> None:
        """Apply session timeouts to every group (at most once a second): groups whose members
        all went silent are forgotten, so only live groups count against ``max_groups``."""
        now = trio.current_time()
        if now - self._swept < 1:
            return
        self._swept = now
        for group in list(self.groups.values()):
            self._expire(group)

    # ------------------------------------------------------------------ queries
    def has(self, name: str) -> bool:
        return name in self.groups

    def get(self, name: str) -> ClassicGroup | None:
        group = self.groups.get(name)
        if group is not None:
            self._expire(group)
        return self.groups.get(name)

    def names(self) -> list[str]:
        return sorted(self.groups)

    @staticmethod
    def describe(group: ClassicGroup) -> GroupDescription:
        """The group as the other protocols' DescribeGroup shows groups."""
        members = tuple(
            MemberAssignment(m, group.assignment.get(m, ())) for m in sorted(group.members)
        )
        state = {"empty": "empty", "stable": "stable"}.get(group.state, "rebalancing")
        topics = tuple(sorted({t for m in group.members.values() for t in m.topics}))
        return GroupDescription(group.name, state, group.generation, members, topics)

    # ------------------------------------------------------------------ lifecycle
    async def _group(self, name: str, protocol_type: str) -> ClassicGroup:
        group = self.groups.get(name)
        if group is None:
            self._sweep()
            if len(self.groups) >= self.max_groups:
                limit_hit("max_kafka_groups", "server", log, group=name, groups=len(self.groups))
                raise GatewayError(
                    ErrorCode.INVALID_REQUEST,
                    f"the gateway holds {len(self.groups)} Kafka groups, the most allowed "
                    "(server.max_kafka_groups)",
                )
            if self.coordinator.has_members(name):
                raise GatewayError(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"group {name!r} has members that let the gateway assign partitions",
                )
            group = ClassicGroup(name, protocol_type=protocol_type, loaded=True)
            try:
                snap = await self.coordinator.stored(name)
            except GatewayError as exc:
                log.warning("group_snapshot_not_loaded", group=name, error=exc.message)
                snap = None
            if snap is not None:
                group.generation = int(snap.get("generation", 0))
            self.groups[name] = group
        elif group.members and protocol_type != group.protocol_type:
            raise GatewayError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group {name!r} has protocol type {group.protocol_type!r}, not {protocol_type!r}",
            )
        group.protocol_type = group.protocol_type if group.members else protocol_type
        return group

    def _forget_if_empty(self, group: ClassicGroup) -> None:
        """Drop a group without members, and its metric series (a client naming ever new
        groups must not grow the metrics page)."""
        if not group.members and not group.pending and self.groups.get(group.name) is group:
            del self.groups[group.name]
            for metric in (GROUP_MEMBERS, REBALANCES):
                try:
                    metric.remove(group.name)
                except KeyError:  # never set
                    pass

    def _expire(self, group: ClassicGroup) -> None:
        """Drop the members whose session timed out (not those waiting in a call) and the
        member ids handed out that lapsed; a member dropped starts a round."""
        now = trio.current_time()
        for mid, lapse in list(group.pending.items()):
            if now > lapse:
                del group.pending[mid]
        dead = [
            m.member_id
            for m in group.classic_members()
            if not m.busy
            and not (group.state == "joining" and m.joined)
            and now - m.last_seen > m.session_timeout_ms / 1000
        ]
        for mid in dead:
            log.info("group_member_expired", group=group.name, member=mid)
            self._remove(group, mid)
        if dead:
            self._members_changed(group)
        self._forget_if_empty(group)

    def _remove(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members.pop(member_id, None)
        if isinstance(member, ClassicMember) and member.instance_id is not None:
            if group.instances.get(member.instance_id) == member_id:
                del group.instances[member.instance_id]
        group.assignment.pop(member_id, None)
        group.data.pop(member_id, None)

    def _members_changed(self, group: ClassicGroup) -> None:
        """After members left: a new round for those that stay, or the group is empty."""
        GROUP_MEMBERS.labels(group=group.name).set(len(group.members))
        if group.state == "joining":
            self._maybe_complete(group)
        elif group.members:
            self._start_round(group)
        else:
            self._empty(group)

    def _empty(self, group: ClassicGroup) -> None:
        group.generation += 1  # as Kafka does: the empty group is a generation of its own
        group.state = "empty"
        group.leader = ""
        group.protocol_name = ""
        group.assignment = {}
        group.data = {}
        if group.round is not None:
            self._finish(group, group.round)
        group.notify()

    def _start_round(self, group: ClassicGroup) -> Round:
        timeout_ms = max(
            (m.rebalance_timeout_ms or m.session_timeout_ms for m in group.classic_members()),
            default=0,
        )
        group.round = Round(trio.current_time() + timeout_ms / 1000)
        group.state = "joining"
        for m in group.classic_members():
            m.joined = False
        group.notify()
        return group.round

    def _maybe_complete(self, group: ClassicGroup) -> None:
        if group.state == "joining" and all(m.joined for m in group.classic_members()):
            self._complete(group)

    def _complete(self, group: ClassicGroup) -> None:
        """End the round: members that did not join are dropped, the generation grows."""
        rnd = group.round
        assert rnd is not None
        for m in group.classic_members():
            if not m.joined:
                log.info("group_member_dropped", group=group.name, member=m.member_id)
                self._remove(group, m.member_id)
        if not group.members:
            self._empty(group)
            return
        group.generation += 1
        REBALANCES.labels(group=group.name).inc()
        GROUP_MEMBERS.labels(group=group.name).set(len(group.members))
        members = group.classic_members()
        group.protocol_name = self._choose(members)
        if group.leader not in group.members:
            group.leader = members[0].member_id
        group.state = "syncing"
        group.assignment = {}
        group.data = {}
        now = trio.current_time()
        for m in members:
            m.joined = False
            m.last_seen = now
        rnd.generation = group.generation
        rnd.protocol = group.protocol_name
        rnd.leader = group.leader
        rnd.members = tuple(
            (m.member_id, m.instance_id, m.metadata(group.protocol_name)) for m in members
        )
        self._finish(group, rnd)
        group.notify()

    @staticmethod
    def _finish(group: ClassicGroup, rnd: Round) -> None:
        rnd.done.set()
        if group.round is rnd:
            group.round = None

    @staticmethod
    def _choose(members: list[ClassicMember]) -> str:
        """The protocol every member supports that most members list first (Kafka's vote;
        ties go to the earlier choice of the first member)."""
        common = set(n for n, _ in members[0].protocols)
        for m in members[1:]:
            common &= {n for n, _ in m.protocols}
        order = [n for n, _ in members[0].protocols if n in common]
        votes = dict.fromkeys(order, 0)
        for m in members:
            first = next(n for n, _ in m.protocols if n in common)
            votes[first] += 1
        return max(order, key=lambda n: votes[n])

    # ------------------------------------------------------------------ join
    async def join(self, cmd: JoinGroup) -> JoinGroupResult:
        group = await self._group(cmd.group, cmd.protocol_type)
        self._expire(group)
        self.groups[cmd.group] = group  # _expire may have forgotten an empty group
        if not cmd.protocols:
            raise GatewayError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "no protocol given")
        common = {n for n, _ in cmd.protocols}
        for m in group.classic_members():
            if m.member_id != cmd.member_id:
                common &= {n for n, _ in m.protocols}
        if not common:
            raise GatewayError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group {cmd.group!r}: no protocol of {[n for n, _ in cmd.protocols]} "
                "is supported by every member",
            )
        member_id = cmd.member_id
        member = group.members.get(member_id) if member_id else None
        if member_id and member is None and member_id not in group.pending:
            owner = group.instances.get(cmd.instance_id or "")
            if owner is not None:
                raise GatewayError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"instance {cmd.instance_id!r} is now member {owner!r}",
                )
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        if member is None:
            if cmd.instance_id is not None and cmd.instance_id in group.instances:
                return await self._static_rejoin(group, cmd)
            if not member_id:
                member_id = f"{cmd.client_id or 'member'}-{uuid.uuid4()}"
                self.coordinator.check_room(cmd.group, len(group.members) + len(group.pending))
                if cmd.require_member_id and cmd.instance_id is None:
                    group.pending[member_id] = (
                        trio.current_time() + max(cmd.session_timeout_ms, 1000) / 1000
                    )
                    raise MemberIdRequired(member_id)
            group.pending.pop(member_id, None)
            member = ClassicMember(member_id, cmd.topics, cmd.session_timeout_ms)
            group.members[member_id] = member
            if cmd.instance_id is not None:
                group.instances[cmd.instance_id] = member_id
            changed = True
        else:
            assert isinstance(member, ClassicMember)
            if cmd.instance_id != member.instance_id:
                raise GatewayError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"member {member_id!r} has instance id {member.instance_id!r}",
                )
            changed = member.protocols != cmd.protocols or member_id == group.leader
        self._update(member, cmd)
        if group.state != "joining":
            if not changed and group.state in ("syncing", "stable"):
                return self._current(group, member_id)
            self._start_round(group)
        return await self._wait_round(group, member)

    def _update(self, member: ClassicMember, cmd: JoinGroup) -> None:
        member.topics = cmd.topics
        member.protocols = cmd.protocols
        member.protocol = cmd.protocols[0][0]
        member.instance_id = cmd.instance_id
        member.session_timeout_ms = cmd.session_timeout_ms
        member.rebalance_timeout_ms = cmd.rebalance_timeout_ms
        member.client_id = cmd.client_id
        member.client_host = cmd.client_host
        member.last_seen = trio.current_time()

    def _current(self, group: ClassicGroup, member_id: str) -> JoinGroupResult:
        """The answer of the generation under way (a member that joins again unchanged)."""
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member_id == group.leader:
            members = tuple(
                (m.member_id, m.instance_id, m.metadata(group.protocol_name))
                for m in group.classic_members()
            )
        return JoinGroupResult(
            group.name,
            member_id,
            group.generation,
            group.leader,
            tuple(sorted(group.members)),
            group.protocol_name,
            members,
        )

    async def _static_rejoin(self, group: ClassicGroup, cmd: JoinGroup) -> JoinGroupResult:
        """A static member comes back under a new member id: the old id is fenced; nothing
        else changes unless its protocols did (or the group is rebalancing)."""
        assert cmd.instance_id is not None
        old_id = group.instances[cmd.instance_id]
        old = group.members.pop(old_id)
        assert isinstance(old, ClassicMember)
        new_id = f"{cmd.client_id or 'member'}-{uuid.uuid4()}"
        changed = old.protocols != cmd.protocols
        old.member_id = new_id
        group.members[new_id] = old
        group.instances[cmd.instance_id] = new_id
        if old_id in group.assignment:
            group.assignment[new_id] = group.assignment.pop(old_id)
        if old_id in group.data:
            group.data[new_id] = group.data.pop(old_id)
        was_leader = group.leader == old_id
        if was_leader:
            group.leader = new_id
        self._update(old, cmd)
        group.notify()  # calls of the old id waiting answer FENCED_INSTANCE_ID
        if group.state == "stable" and not changed and not was_leader:
            return self._current(group, new_id)
        if group.state != "joining":
            self._start_round(group)
        return await self._wait_round(group, old)

    async def _wait_round(self, group: ClassicGroup, member: ClassicMember) -> JoinGroupResult:
        rnd = group.round
        assert rnd is not None
        member.joined = True
        member.busy += 1
        try:
            self._maybe_complete(group)
            while not rnd.done.is_set():
                with trio.move_on_at(self._next_check(group, rnd)):
                    await rnd.done.wait()
                if rnd.done.is_set():
                    break
                self._expire(group)
                if not rnd.done.is_set() and trio.current_time() >= rnd.deadline:
                    self._complete(group)
        finally:
            member.busy -= 1
            member.last_seen = trio.current_time()
        mid = member.member_id
        if rnd.generation < 0 or group.members.get(mid) is not member:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"member {mid!r} left the group")
        return JoinGroupResult(
            group.name,
            mid,
            rnd.generation,
            rnd.leader,
            tuple(m for m, _, _ in rnd.members),
            rnd.protocol,
            rnd.members if mid == rnd.leader else (),
        )

    @staticmethod
    def _next_check(group: ClassicGroup, rnd: Round) -> float:
        """When a waiting join must look again: the round's deadline, or the earliest session
        expiry of a member that has not joined yet."""
        at = rnd.deadline
        for m in group.classic_members():
            if not m.joined and not m.busy:
                at = min(at, m.last_seen + m.session_timeout_ms / 1000 + 0.001)
        return at

    # ------------------------------------------------------------------ sync, heartbeat
    def _member(
        self, name: str, member_id: str, instance_id: str | None
    ) -> tuple[ClassicGroup, ClassicMember]:
        group = self.get(name)
        if group is not None and instance_id is not None:
            owner = group.instances.get(instance_id)
            if owner is not None and owner != member_id:
                raise GatewayError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"instance {instance_id!r} is now member {owner!r}",
                )
        member = group.members.get(member_id) if group is not None else None
        if group is None or not isinstance(member, ClassicMember):
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        return group, member

    async def sync(self, cmd: SyncGroup) -> SyncGroupResult:
        group, member = self._member(cmd.group, cmd.member_id, cmd.instance_id)
        if group.state == "joining":
            raise GatewayError(ErrorCode.REBALANCE_IN_PROGRESS, f"group {cmd.group!r} rebalances")
        if cmd.generation != group.generation:
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {cmd.generation} is not the group's current {group.generation}",
            )
        member.last_seen = trio.current_time()
        if group.state == "syncing" and cmd.member_id == group.leader:
            self._assign(group, cmd.assignments)
            await self.coordinator._save(group)
        generation = group.generation
        member.busy += 1
        try:
            while group.state == "syncing" and group.generation == generation:
                changed = group.changed
                leader = group.members.get(group.leader)
                deadline = (
                    leader.last_seen + leader.session_timeout_ms / 1000 + 0.001
                    if leader is not None and not getattr(leader, "busy", 0)
                    else trio.current_time() + 1
                )
                with trio.move_on_at(deadline):
                    await changed.wait()
                self._expire(group)
        finally:
            member.busy -= 1
            member.last_seen = trio.current_time()
        if group.members.get(cmd.member_id) is not member:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"member {cmd.member_id!r} left")
        if group.state != "stable" or group.generation != generation:
            raise GatewayError(ErrorCode.REBALANCE_IN_PROGRESS, f"group {cmd.group!r} rebalances")
        return SyncGroupResult(
            MemberAssignment(cmd.member_id, group.assignment.get(cmd.member_id, ())),
            group.data.get(cmd.member_id, b""),
            group.protocol_name,
        )

    def _assign(self, group: ClassicGroup, assignments: Assignments) -> None:
        group.data = {}
        group.assignment = {}
        for mid, data, partitions in assignments:
            if mid in group.members:
                group.data[mid] = data
                group.assignment[mid] = partitions
        group.state = "stable"
        group.notify()

    async def heartbeat(
        self, name: str, member_id: str, generation: int, instance_id: str | None = None
    ) -> None:
        group, member = self._member(name, member_id, instance_id)
        member.last_seen = trio.current_time()
        if group.state == "joining":
            raise GatewayError(ErrorCode.REBALANCE_IN_PROGRESS, f"group {name!r} rebalances")
        if generation != group.generation:
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's current {group.generation}",
            )

    def check_generation(
        self, name: str, member_id: str, generation: int, instance_id: str | None = None
    ) -> None:
        """A member's commit: refused unless it is a member of the current generation. While
        the members join again the current generation still commits (what an eager consumer
        does as it gives its partitions up); while they wait for the leader's assignment,
        REBALANCE_IN_PROGRESS. Kafka's order: a fenced static instance, an unknown member,
        then a wrong generation (-1 included: a member's id without its generation), then the
        rebalance."""
        group, member = self._member(name, member_id, instance_id)
        member.last_seen = trio.current_time()
        if generation != group.generation:
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's current {group.generation}",
            )
        if group.state == "syncing":
            raise GatewayError(ErrorCode.REBALANCE_IN_PROGRESS, f"group {name!r} rebalances")

    def check_simple_commit(self, name: str) -> None:
        """A commit without a generation and member id (a consumer that assigns itself its
        partitions) into group ``name``: UNKNOWN_MEMBER while the group has members, as Kafka
        answers (only members commit into a group that has some); an empty or unknown group
        takes it."""
        group = self.get(name)
        if group is not None and group.members:
            raise GatewayError(
                ErrorCode.UNKNOWN_MEMBER,
                f"group {name!r} has {len(group.members)} members: only they commit offsets "
                "(this commit has no member id and generation)",
            )

    async def exists(self, name: str) -> bool:
        """Whether a Kafka broker would know group ``name``: a group with members (of either
        kind), a snapshot (a group whose members have all gone), or committed offsets (a
        group of simple consumers). A member's commit into a group that does not exist is
        ILLEGAL_GENERATION, into one that does UNKNOWN_MEMBER. A store that cannot answer
        counts as a yes (the commit then gets the answer of an existing group)."""
        if self.get(name) is not None or self.coordinator.has_members(name):
            return True
        try:
            if await self.coordinator.stored(name) is not None:
                return True
            return bool(await self.coordinator.committed(name))
        except GatewayError as exc:
            log.warning("group_existence_unknown", group=name, error=exc.message)
            return True

    async def leave(self, name: str, member_id: str, instance_id: str | None = None) -> None:
        group = self.get(name)
        if group is not None and not member_id and instance_id is not None:
            member_id = group.instances.get(instance_id, "")
        if group is not None and instance_id is not None:
            owner = group.instances.get(instance_id)
            if owner is not None and owner != member_id:
                raise GatewayError(
                    ErrorCode.FENCED_INSTANCE_ID, f"instance {instance_id!r} is member {owner!r}"
                )
        if group is None or member_id not in group.members:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        self._remove(group, member_id)
        self._members_changed(group)
        await self.coordinator._save(group)
        self._forget_if_empty(group)
