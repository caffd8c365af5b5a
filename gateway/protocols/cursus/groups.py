"""The consumer-group commands: REGISTER_GROUP, JOIN_GROUP, SYNC_GROUP, LEAVE_GROUP,
HEARTBEAT, GROUP_STATUS, and the offset commands COMMIT_OFFSET, FETCH_OFFSET and BATCH_COMMIT;
with the group look-ups that CONSUME and STREAM use too.

Replies are the broker's, plus the newer dialect's rebalance tokens (GEN_MISMATCH,
member_not_found, NOT_OWNER) from HEARTBEAT and commits and FETCH_OFFSET ``OK offset=N``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.core.view import CoreView
from gateway.model import (
    CommitOffset,
    DescribeGroup,
    ErrorCode,
    FetchOffset,
    GatewayError,
    GroupDescription,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    SyncGroup,
    TopicInfo,
)
from gateway.protocols.cursus import codec
from gateway.protocols.cursus.gotext import go_atoi, go_list, go_time, go_uint
from gateway.protocols.cursus.state import CursusState, GroupBinding


class GroupCommands:
    """The group commands and look-ups of
    :class:`~gateway.protocols.cursus.session.CursusSession`, which mixes this class in and
    provides the attributes below."""

    core: CoreView
    cfg: Any
    state: CursusState
    _topic: Callable[[str], Awaitable[TopicInfo | None]]

    # ------------------------------------------------------------------ group look-ups
    async def _describe_group(self, group: str) -> GroupDescription:
        desc = await self.core.execute(DescribeGroup(group))
        self.state.saw(desc)
        return desc

    async def _group_binding(self, group: str) -> GroupBinding | None:
        """The topic a group is bound to, or None when the group does not exist for Cursus."""
        binding = self.state.groups.get(group)
        if binding is not None:
            return binding
        desc = await self._describe_group(group)
        if desc.generation > 0 and desc.topics:
            info = await self._topic(desc.topics[0])
            binding = GroupBinding(desc.topics[0], info.partitions if info else 0)
            self.state.groups[group] = binding
            return binding
        return None

    @staticmethod
    def _assigned(desc: GroupDescription, member: str) -> set[int] | None:
        for m in desc.members:
            if m.member_id == member:
                return {p for _, p in m.partitions}
        return None

    async def _owns(self, group: str, member: str, generation: int, partition: int) -> bool:
        """The broker's ValidateOwnershipAtomic: member present, exact generation, assigned."""
        desc = await self._describe_group(group)
        assigned = self._assigned(desc, member)
        return assigned is not None and desc.generation == generation and partition in assigned

    def _touch(self, group: str, member: str) -> None:
        self.state.heartbeats[(group, member)] = time.time()

    # ------------------------------------------------------------------ groups
    async def _register_group(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        topic, group = args.get("topic", ""), args.get("group", "")
        if not topic:
            return "REGISTER_GROUP requires topic parameter"
        if not group:
            return "REGISTER_GROUP requires group parameter"
        info = await self._topic(topic)
        if info is None:
            return f"topic '{topic}' does not exist"
        binding = self.state.groups.setdefault(group, GroupBinding(topic, info.partitions))
        if binding.partitions != info.partitions:
            return (
                f"ERROR: partition count mismatch (existing: {binding.partitions}, "
                f"requested: {info.partitions})"
            )
        return f"\u2705 Group '{group}' registered for topic '{topic}'"

    def _required(self, name: str, args: dict[str, str], keys: tuple[str, ...]) -> str | None:
        for key in keys:
            if not args.get(key):
                return f"{name} requires {key} parameter"
        return None

    async def _join_group(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        missing = self._required("JOIN_GROUP", args, ("topic", "group", "member"))
        if missing:
            return missing
        topic, group = args["topic"], args["group"]
        binding = self.state.groups.get(group) or await self._group_binding(group)
        if binding is None:
            info = await self._topic(topic)
            if info is None:
                return f"topic '{topic}' not found"
            binding = self.state.groups.setdefault(group, GroupBinding(topic, info.partitions))
        desc = await self._describe_group(group)
        taken = {m.member_id for m in desc.members}
        if args["member"] in taken:
            # A current member rejoining under the id it was given (cursus-client does so after
            # GEN_MISMATCH). The broker would add a second suffix and leave the old id behind
            # until its session times out, and that timeout's rebalance makes every member
            # rejoin again, for ever; keeping the id makes a rejoin converge.
            member = args["member"]
        else:
            while True:
                member = f"{args['member']}-{random.randrange(10000):04d}"
                if member not in taken:
                    break
        generation, assignments = await self._join_and_sync(group, binding.topic, member)
        return f"OK generation={generation} member={member} assignments={go_list(assignments)}"

    async def _join_and_sync(self, group: str, topic: str, member: str) -> tuple[int, list[int]]:
        """Join ``member`` to ``group`` on ``topic`` and take its assignment: the generation
        and the partitions of ``topic`` the member was given."""
        joined = await self.core.execute(
            JoinGroup(
                group,
                (topic,),
                member,
                session_timeout_ms=self.cfg.session_timeout_ms,
                create_member=True,
            )
        )
        synced = await self.core.execute(SyncGroup(group, member, joined.generation))
        self._touch(group, member)
        if self.state.rebalances.get(group, (None, 0.0))[0] != joined.generation:
            self.state.rebalances[group] = (joined.generation, time.time())
        return joined.generation, [p for t, p in synced.assignment.partitions if t == topic]

    async def _sync_group(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        missing = self._required("SYNC_GROUP", args, ("topic", "group", "member"))
        if missing:
            return missing
        group, member = args["group"], args["member"]
        if await self._group_binding(group) is None:
            return f"member {member} not found in group or no assignments"
        desc = await self._describe_group(group)
        if self._assigned(desc, member) is None:
            return "OK assignments=[]"
        synced = await self.core.execute(SyncGroup(group, member, desc.generation))
        self._touch(group, member)
        return f"OK assignments={go_list([p for _, p in synced.assignment.partitions])}"

    async def _leave_group(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        missing = self._required("LEAVE_GROUP", args, ("topic", "group", "member"))
        if missing:
            return missing
        group, member = args["group"], args["member"]
        if await self._group_binding(group) is None:
            return "ERROR: group not found"
        await self._leave(group, member)
        return f"\u2705 Left group '{group}'"

    async def _leave(self, group: str, member: str) -> None:
        """Take ``member`` out of ``group`` (already gone is fine) and forget its heartbeat."""
        try:
            await self.core.execute(LeaveGroup(group, member))
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNKNOWN_MEMBER:
                raise
        self.state.heartbeats.pop((group, member), None)
        await self._describe_group(group)

    async def _heartbeat(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        missing = self._required("HEARTBEAT", args, ("topic", "group", "member"))
        if missing:
            return missing
        group, member = args["group"], args["member"]
        if await self._group_binding(group) is None:
            return f"ERROR: group_not_found group={group}"
        desc = await self._describe_group(group)
        generation = desc.generation
        if args.get("generation"):
            g = go_atoi(args["generation"])
            if g is None:
                return f"ERROR: invalid generation value: {args['generation']}"
            generation = g
        try:
            await self.core.execute(Heartbeat(group, member, generation))
        except GatewayError as exc:
            if exc.code is ErrorCode.UNKNOWN_MEMBER:
                return f"ERROR: member_not_found member={member} group={group}"
            if exc.code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                current = (await self._describe_group(group)).generation
                return gen_mismatch(current, generation, group, member)
            raise
        self._touch(group, member)
        return "OK"

    async def _group_status(self, args_text: str) -> str:
        group = codec.parse_params(args_text).get("group", "")
        if not group:
            return "GROUP_STATUS requires group parameter"
        binding = await self._group_binding(group)
        if binding is None:
            return f"ERROR: group '{group}' not found"
        desc = await self._describe_group(group)
        members = [
            {
                "member_id": m.member_id,
                "last_heartbeat": go_time(self.state.heartbeats.get((group, m.member_id))),
                "assignments": [p for _, p in m.partitions],
            }
            for m in desc.members
        ]
        status = {
            "group_name": group,
            "topic_name": binding.topic,
            "state": "Stable" if members else "Dead",
            "generation": desc.generation,
            "member_count": len(members),
            "partition_count": binding.partitions,
            "members": members,
            "last_rebalance": go_time(self.state.rebalances.get(group, (0, 0.0))[1]),
        }
        return json.dumps(status, separators=(",", ":"), ensure_ascii=False)

    # ------------------------------------------------------------------ offsets
    async def _commit_offset(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        partition = offset_partition(args, "COMMIT_OFFSET")
        if isinstance(partition, str):
            return partition
        if not args.get("group"):
            return "COMMIT_OFFSET requires groupID parameter"
        if not args.get("offset"):
            return "COMMIT_OFFSET requires offset parameter"
        offset = go_uint(args["offset"])
        if offset is None:
            return "invalid offset"
        topic, group = args["topic"], args["group"]
        binding = await self._group_binding(group)
        if binding is None:
            return f"ERROR: group '{group}' not found"
        if binding.topic != topic:
            return f"ERROR topic_not_assigned_to_group: {binding.topic} {topic}"
        generation, member = -1, args.get("member", "")
        if args.get("generation") and member:  # the newer clients' ownership check
            g = go_atoi(args["generation"])
            desc = await self._describe_group(group)
            assigned = self._assigned(desc, member)
            if g is not None and assigned is not None and g != desc.generation:
                return gen_mismatch(desc.generation, g, group, member)
            if g is None or assigned is None or partition not in assigned:
                return not_owner(partition, member, group, args["generation"])
            generation = g
        await self.core.execute(
            CommitOffset(group, topic, partition, offset, generation=generation, member_id=member)
        )
        return "OK"

    async def _fetch_offset(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        partition = offset_partition(args, "FETCH_OFFSET")
        if isinstance(partition, str):
            return partition
        if not args.get("group"):
            return "FETCH_OFFSET requires group parameter"
        topic, group = args["topic"], args["group"]
        plain = self.cfg.fetch_offset_reply == "integer"
        binding = await self._group_binding(group)
        committed = await self.core.execute(FetchOffset(group, topic, partition))
        if binding is None and committed.offset < 0:
            if plain:
                return f"ERROR group_not_found: {group}"
            return f"ERROR: group_not_found group={group}"
        if binding is not None and binding.topic != topic:
            if plain:
                return f"ERROR topic_not_assigned_to_group: {binding.topic} {topic}"
            return f"ERROR: topic_not_assigned_to_group expected={binding.topic} actual={topic}"
        offset = max(committed.offset, 0)
        return str(offset) if plain else f"OK offset={offset}"

    async def _batch_commit(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        topic, group, member = args.get("topic", ""), args.get("group", ""), args.get("member", "")
        generation = go_atoi(args.get("generation")) or 0
        cut = args_text.rstrip().rfind(" ")
        data = args_text.rstrip()[cut + 1 :]
        valid: list[tuple[int, int]] = []
        desc = await self._describe_group(group) if group else None
        for pair in data.split(","):
            kv = pair.split(":")
            if len(kv) != 2:
                continue
            p = go_atoi(kv[0].removeprefix("P"))
            o = go_uint(kv[1])
            if p is None or o is None or desc is None:
                continue
            assigned = self._assigned(desc, member)
            if assigned is None or desc.generation != generation or p not in assigned:
                continue
            valid.append((p, o))
        if not valid:
            return "ERROR: no_valid_offsets"
        for p, o in valid:
            await self.core.execute(
                CommitOffset(group, topic, p, o, generation=generation, member_id=member)
            )
        return f"OK batched={len(valid)}"


def offset_partition(args: dict[str, str], command: str) -> int | str:
    """The partition of a COMMIT_OFFSET or FETCH_OFFSET, or the broker's reply when its topic or
    partition is missing or the partition is not a number (checked in the broker's order)."""
    if not args.get("topic"):
        return f"{command} requires topic parameter"
    if not args.get("partition"):
        return f"{command} requires partition parameter"
    partition = go_atoi(args["partition"])
    return "invalid partition" if partition is None else partition


def gen_mismatch(current: int, requested: int, group: str, member: str) -> str:
    """The rebalance token for a member that sent another generation than the group's."""
    return (
        f"ERROR: GEN_MISMATCH current={current} requested={requested} group={group} member={member}"
    )


def not_owner(partition: int, member: str, group: str, generation: int | str) -> str:
    """The rebalance token for a commit to a partition the member is not assigned."""
    return (
        f"ERROR: NOT_OWNER partition={partition} member={member} group={group} "
        f"generation={generation}"
    )
