"""The commands whose replies differ in the current broker's dialect (``dialect = "2026-08"``):
CREATE, DELETE, REGISTER_GROUP, JOIN_GROUP, SYNC_GROUP, LEAVE_GROUP, HEARTBEAT, COMMIT_OFFSET,
BATCH_COMMIT and FETCH_OFFSET.

Each handler answers as the current upstream broker's command handlers do in standalone mode:
``OK key=value ...`` on success, ``ERROR: snake_case_token key=value ...`` on failure, checks in
the broker's order, group commands fenced by ``generation=`` and ``member=``. The table of
replies is in docs/protocols/cursus.md. Mixed into
:class:`~gateway.protocols.cursus.session.CursusSession` next to the ``2026-04`` handlers.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.core.view import CoreView
from gateway.model import (
    CommitOffset,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    ErrorCode,
    FetchOffset,
    GatewayError,
    GroupDescription,
    Heartbeat,
    ListTopics,
    TopicDescription,
    TopicInfo,
)
from gateway.protocols.base import ConnectionContext
from gateway.protocols.cursus import CursusListenerConfig, codec
from gateway.protocols.cursus.gotext import (
    fnv1a64,
    go_atoi,
    go_list,
    go_parse_error,
    go_quote,
    go_uint,
)
from gateway.protocols.cursus.groups import gen_mismatch, not_owner
from gateway.protocols.cursus.state import DEFAULT_GROUP, CursusState, GroupBinding
from gateway.protocols.cursus.topics import (
    H_EVENT_SOURCING,
    H_IDEMPOTENT,
    NO_SUCH_TOPIC,
    partition_rows,
)

H_PARTITIONER = "cursus.partitioner"  # echoed by METADATA
HOUR_MS = 3_600_000

MAX_TOPIC_NAME_BYTES = 249
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-=")
PARTITIONERS = ("hash_key", "round_robin")
AUTH_POLICIES = ("open", "deny_write", "deny_read", "acl")


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    cleanup_policy: str = "delete"
    partitioner: str = "hash_key"
    auth_policy: str = "open"
    read_acl: tuple[str, ...] = ()
    write_acl: tuple[str, ...] = ()
    retention_hours: int = 0
    retention_bytes: int = 0

    def reply_fields(self) -> str:
        return (
            f"cleanup_policy={self.cleanup_policy} partitioner={self.partitioner} "
            f"auth_policy={self.auth_policy} read_acl={','.join(self.read_acl)} "
            f"write_acl={','.join(self.write_acl)} retention_hours={self.retention_hours} "
            f"retention_bytes={self.retention_bytes}"
        )

    def reply(self, topic: str, partitions: int) -> str:
        return f"OK topic={topic} partitions={partitions} {self.reply_fields()}"


def topic_policy(info: TopicInfo) -> TopicPolicy:
    """A topic's policy as METADATA reports it, from what the gateway keeps: the partitioner
    CREATE was given, retention from the topic's retention settings."""
    retention_ms = go_atoi(info.get("retention_ms") or "0") or 0
    retention_bytes = go_atoi(info.get("retention_bytes") or "0") or 0
    return TopicPolicy(
        partitioner=info.get(H_PARTITIONER) or "hash_key",
        retention_hours=max(retention_ms, 0) // HOUR_MS,
        retention_bytes=max(retention_bytes, 0),
    )


def topic_name_error(name: str) -> str:
    """The broker's topic name rule: the reason a name is refused, or ``""``."""
    if len(name.encode()) > MAX_TOPIC_NAME_BYTES:
        return f"topic name exceeds {MAX_TOPIC_NAME_BYTES} bytes"
    if name in (".", ".."):
        return f"invalid topic name {go_quote(name)}"
    if any(ch not in _NAME_CHARS for ch in name):
        return f"topic name {go_quote(name)} contains unsupported characters"
    return ""


def _cleanup(value: str) -> str | None:
    parts = {p.strip() for p in value.strip().lower().split(",")}
    if not parts <= {"delete", "compact"}:
        return None
    return "compact,delete" if len(parts) == 2 else parts.pop()


def _acl(value: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.split(",") if p.strip())


def parse_topic_policy(args: dict[str, str]) -> TopicPolicy | str:
    """The broker's parseTopicPolicy + Policy.Normalize; a str is the error reply."""
    hours = bytes_ = 0
    if args.get("retention_hours"):
        parsed = go_atoi(args["retention_hours"])
        if parsed is None or not -(2**63) <= parsed < 2**63:
            return f"ERROR: invalid_retention_hours value={args['retention_hours']}"
        hours = parsed
    if args.get("retention_bytes"):
        parsed = go_atoi(args["retention_bytes"])
        if parsed is None or not -(2**63) <= parsed < 2**63:
            return f"ERROR: invalid_retention_bytes value={args['retention_bytes']}"
        bytes_ = parsed
    cleanup_raw = args.get("cleanup_policy") or "delete"
    cleanup = _cleanup(cleanup_raw)
    if cleanup is None:
        return _policy_error(f"invalid cleanup policy {go_quote(cleanup_raw)}")
    partitioner = (args.get("partitioner") or "hash_key").strip().lower()
    if partitioner not in PARTITIONERS:
        return _policy_error(f"invalid partitioner {go_quote(partitioner)}")
    auth = (args.get("auth_policy") or "open").strip().lower()
    if auth not in AUTH_POLICIES:
        return _policy_error(f"invalid auth policy {go_quote(auth)}")
    if hours < 0:
        return _policy_error("retention_hours must be >= 0")
    if bytes_ < 0:
        return _policy_error("retention_bytes must be >= 0")
    return TopicPolicy(
        cleanup,
        partitioner,
        auth,
        _acl(args.get("read_acl", "")),
        _acl(args.get("write_acl", "")),
        hours,
        bytes_,
    )


def _policy_error(reason: str) -> str:
    return f"ERROR: invalid_topic_policy reason={go_quote(reason)}"


def _unsupported(field: str, reason: str) -> str:
    return f"ERROR: unsupported_topic_policy field={field} reason={go_quote(reason)}"


def _missing(what: str, command: str) -> str:
    return f"ERROR: missing_{what} command={command}"


def _generation(command: str, args: dict[str, str]) -> int | str:
    """A group command's ``generation=``, or the error reply when it is missing or no number."""
    if not args.get("generation"):
        return _missing("generation", command)
    generation = go_atoi(args["generation"])
    if generation is None:
        return f"ERROR: invalid_generation command={command}"
    return generation


class CommandsAug2026:
    """The topic and group commands in the current broker's dialect. The session provides the
    attributes below and the group look-ups of
    :class:`~gateway.protocols.cursus.groups.GroupCommands`."""

    ctx: ConnectionContext
    core: CoreView
    cfg: CursusListenerConfig
    state: CursusState
    _topic: Callable[[str], Awaitable[TopicInfo | None]]
    _describe_group: Callable[[str], Awaitable[GroupDescription]]
    _group_binding: Callable[[str], Awaitable[GroupBinding | None]]
    _assigned: Callable[[GroupDescription, str], set[int] | None]
    _touch: Callable[[str, str], None]
    _join_and_sync: Callable[[str, str, str], Awaitable[tuple[int, list[int]]]]
    _leave: Callable[[str, str], Awaitable[None]]
    _metadata_head: Callable[[str], Awaitable[tuple[str, TopicInfo | None]]]
    _topic_description: Callable[[str], Awaitable[TopicDescription | None]]
    _group_status: Callable[[str], Awaitable[str]]
    _publish_record: Callable[..., Awaitable[str | bytes]]

    # ------------------------------------------------------------------ CREATE
    async def _create_2026_08(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        topic = args.get("topic", "")
        if not topic:
            return 'ERROR: missing_topic expected="CREATE topic=<name> [partitions=<N>]"'
        reason = topic_name_error(topic)
        if reason:
            return f"ERROR: invalid_topic_name topic={go_quote(topic)} reason={go_quote(reason)}"
        partitions = self.cfg.default_partitions
        if "partitions" in args:
            n = go_atoi(args["partitions"])
            if n is None or n <= 0:
                return 'ERROR: invalid_partitions reason="must be a positive integer"'
            partitions = n
        idempotent = args.get("idempotent", "").lower() == "true"
        event_sourcing = args.get("event_sourcing", "").lower() == "true"
        policy = parse_topic_policy(args)
        if isinstance(policy, str):
            return policy
        existing = await self._topic(topic)
        if "compact" in policy.cleanup_policy:
            if event_sourcing or (existing and existing.get(H_EVENT_SOURCING) == "true"):
                return (
                    "ERROR: invalid_topic_policy field=cleanup_policy "
                    'reason="compaction is not supported for event-sourcing topics"'
                )
            return _unsupported("cleanup_policy", "compaction is not supported by this gateway")
        if policy.auth_policy != "open" or policy.read_acl or policy.write_acl:
            reason = "topic authorization is not supported by this gateway"
            return _unsupported("auth_policy", reason)
        if "replication_factor" in args:
            rf = go_atoi(args["replication_factor"])
            if rf is None or rf <= 0:
                return 'ERROR: invalid_replication_factor reason="must be a positive integer"'
        try:
            info = await self._create_or_grow(topic, partitions, idempotent, event_sourcing,
                                              policy, existing)  # fmt: skip
        except GatewayError as exc:
            return f"ERROR: create_topic_failed topic={topic} reason={go_quote(exc.message)}"
        self.state.groups.setdefault(DEFAULT_GROUP, GroupBinding(topic, info.partitions))
        return policy.reply(topic, info.partitions)

    async def _create_or_grow(
        self,
        topic: str,
        partitions: int,
        idempotent: bool,
        event_sourcing: bool,
        policy: TopicPolicy,
        existing: TopicInfo | None,
    ) -> TopicInfo:
        if existing is None:
            config = [(H_PARTITIONER, policy.partitioner)]
            if idempotent:
                config.append((H_IDEMPOTENT, "true"))
            if event_sourcing:
                config.append((H_EVENT_SOURCING, "true"))
            if policy.retention_hours:
                config.append(("retention_ms", str(policy.retention_hours * HOUR_MS)))
            if policy.retention_bytes:
                config.append(("retention_bytes", str(policy.retention_bytes)))
            try:
                return await self.core.execute(CreateTopic(topic, partitions, tuple(config)))
            except GatewayError as exc:
                if exc.code is not ErrorCode.TOPIC_EXISTS:
                    raise
                existing = await self.core.topic(topic)
        if partitions < existing.partitions:
            raise GatewayError(
                ErrorCode.INVALID_REQUEST,
                f"cannot decrease partition count for topic '{topic}': "
                f"{existing.partitions} -> {partitions}",
            )
        if partitions > existing.partitions:
            grow = CreatePartitions(topic, partitions - existing.partitions)
            return await self.core.execute(grow)
        return existing

    # ------------------------------------------------------------------ PUBLISH
    async def _publish_2026_08(self, args_text: str) -> str | bytes:
        """handlePublish (standalone): the checks in the broker's order; ``partition=`` names
        the partition, else ``key=`` picks it by FNV-1a on a ``hash_key`` topic, else round
        robin (an idempotent producer without either: its producer id's partition)."""
        args = codec.parse_params(args_text)
        for key, token in (
            ("topic", "topic"),
            ("message", "message"),
            ("producerId", "producer_id"),
        ):
            if not args.get(key):
                return f"ERROR: missing_{token} command=PUBLISH"
        topic, producer_id = args["topic"], args["producerId"]
        acks = args.get("acks") or "1"
        idempotent = False
        if "isIdempotent" in args:
            value = args["isIdempotent"].lower()
            if value not in ("true", "false"):
                return f"ERROR: invalid_is_idempotent value={args['isIdempotent']}"
            idempotent = value == "true"
        if acks.lower() not in ("0", "1", "-1", "all"):
            return f"ERROR: invalid_acks value={acks}"
        numbers = {}
        for key, token, func in (
            ("seqNum", "seq_num", "ParseUint"),
            ("epoch", "epoch", "ParseInt"),
            ("partition", "partition", "Atoi"),
        ):
            if key in args:
                parsed = (go_uint if func == "ParseUint" else go_atoi)(args[key])
                if parsed is None:
                    reason = go_quote(go_parse_error(func, args[key]))
                    return f"ERROR: invalid_{token} reason={reason}"
                numbers[key] = parsed
        info = await self._topic(topic)
        if info is None:
            return f"ERROR: topic_not_found topic={topic}"
        partition: int | None = numbers.get("partition", -1)
        key = args.get("key", "")
        if partition is not None and partition < 0:
            partition = None
            if key and topic_policy(info).partitioner == "hash_key":
                partition = fnv1a64(key.encode()) % info.partitions
        if partition is not None and partition >= info.partitions:
            return f"ERROR: partition_not_found partition={partition}"
        msg = codec.Message(
            seq=numbers.get("seqNum", 0),
            producer_id=producer_id.encode(),
            key=key.encode()[:0xFFFF],
            epoch=numbers.get("epoch", 0),
            payload=args["message"].encode(),
        )
        return await self._publish_record(topic, info, msg, acks, idempotent, partition)

    async def _delete_2026_08(self, args_text: str) -> str:
        topic = codec.parse_params(args_text).get("topic", "")
        if not topic:
            return 'ERROR: missing_topic expected="DELETE topic=<name>"'
        reason = topic_name_error(topic)
        if reason:
            return f"ERROR: invalid_topic_name topic={go_quote(topic)} reason={go_quote(reason)}"
        try:
            await self.core.execute(DeleteTopic(topic))
        except GatewayError as exc:
            if exc.code in NO_SUCH_TOPIC:
                return f"ERROR: topic_not_found topic={topic}"
            return f"ERROR: delete_topic_failed topic={topic} reason={go_quote(exc.message)}"
        return f"OK topic={topic} deleted=true"

    async def _register_group_2026_08(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        if not args.get("topic"):
            return _missing("topic", "REGISTER_GROUP")
        if not args.get("group"):
            return _missing("group", "REGISTER_GROUP")
        topic, group = args["topic"], args["group"]
        info = await self._topic(topic)
        if info is None:
            return f"ERROR: topic_not_found topic={topic}"
        binding = await self._group_binding(group)
        if binding is None:
            binding = self.state.groups.setdefault(group, GroupBinding(topic, info.partitions))
        reason = ""
        if binding.topic != topic:
            reason = f"topic mismatch (existing: {binding.topic}, requested: {topic})"
        elif binding.partitions != info.partitions:
            reason = (
                f"partition count mismatch (existing: {binding.partitions}, "
                f"requested: {info.partitions})"
            )
        if reason:
            return f"ERROR: register_group_failed reason={go_quote(reason)}"
        return f"OK group={group} topic={topic} registered=true"

    async def _list_2026_08(self) -> str:
        names = [t.name for t in await self.core.execute(ListTopics())]
        return f"OK count={len(names)} topics={','.join(names)}"

    async def _describe_2026_08(self, args_text: str) -> str:
        topic = codec.parse_params(args_text).get("topic", "")
        if not topic:
            return 'ERROR: missing_topic expected="DESCRIBE topic=<name>"'
        desc = await self._topic_description(topic)
        if desc is None:
            return f"ERROR: topic_not_found topic={topic}"
        policy = topic_policy(desc.topic)
        policy_json: dict[str, object] = {}
        if policy.retention_hours:  # omitempty, in the Go struct's field order
            policy_json["retention_hours"] = policy.retention_hours
        if policy.retention_bytes:
            policy_json["retention_bytes"] = policy.retention_bytes
        policy_json.update(
            cleanup_policy=policy.cleanup_policy,
            partitioner=policy.partitioner,
            auth_policy=policy.auth_policy,
        )
        meta = {
            "status": "OK",
            "topic": topic,
            "partitions": partition_rows(desc) or None,
            "policy": policy_json,
        }
        return json.dumps(meta, indent=2, ensure_ascii=False)

    async def _metadata_2026_08(self, args_text: str) -> str:
        reply, info = await self._metadata_head(args_text)
        return reply if info is None else f"{reply} {topic_policy(info).reply_fields()}"

    async def _find_coordinator_2026_08(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        kind = "group"
        if not args.get("group"):
            if not (args.get("transactional_id") or args.get("txn") or args.get("transaction")):
                return "ERROR: missing_coordinator_key command=FIND_COORDINATOR"
            kind = "transaction"
        return (
            f"OK coordinator_id=standalone coordinator_type={kind} "
            f"host={self.ctx.advertised_host} port={self.ctx.advertised_port}"
        )

    # ------------------------------------------------------------------ group checks
    async def _offset_topic_error(self, group: str, topic: str) -> str:
        """resolveGroupOffsetTopic: an existing group bound to another topic is an error."""
        binding = await self._group_binding(group)
        if binding is not None and binding.topic != topic:
            return f"ERROR: topic_not_assigned_to_group expected={binding.topic} actual={topic}"
        return ""

    async def _member_error(
        self, group: str, member: str, generation: int, partition: int | None = None
    ) -> tuple[str, GroupDescription | None]:
        """validateMemberGenerationLocked (+ the NOT_OWNER check of ValidateOwnershipFailure)."""
        if await self._group_binding(group) is None:
            return f"ERROR: group_not_found group={group}", None
        if not member:
            return "ERROR: missing_member", None
        desc = await self._describe_group(group)
        assigned = self._assigned(desc, member)
        if assigned is None:
            return f"ERROR: member_not_found member={member} group={group}", desc
        if generation >= 0 and desc.generation != generation:
            return gen_mismatch(desc.generation, generation, group, member), desc
        if partition is not None and partition not in assigned:
            return not_owner(partition, member, group, generation), desc
        return "", desc

    def _required_2026_08(self, command: str, args: dict[str, str], keys: tuple[str, ...]) -> str:
        for key in keys:
            if not args.get(key):
                return _missing(key, command)
        return ""

    async def _refresh(self, group: str, member: str, generation: int) -> None:
        """Keep the member's session alive in the core (the broker's LastHeartbeat = now)."""
        try:
            await self.core.execute(Heartbeat(group, member, generation))
        except GatewayError:
            pass  # a rebalance the core has not finished: the next command fences it
        self._touch(group, member)

    def _sorted_assignments(self, desc: GroupDescription, member: str) -> list[int]:
        return sorted(self._assigned(desc, member) or ())

    # ------------------------------------------------------------------ groups
    async def _group_status_2026_08(self, args_text: str) -> str:
        group = codec.parse_params(args_text).get("group", "")
        if not group:
            return _missing("group", "GROUP_STATUS")
        reply = await self._group_status(args_text)  # the 2026-04 JSON, without "status"
        if not reply.startswith("{"):
            reason = f"group '{group}' not found"
            return f"ERROR: group_status_failed reason={go_quote(reason)}"
        status = {"status": "OK", **json.loads(reply)}
        return json.dumps(status, separators=(",", ":"), ensure_ascii=False)

    async def _join_group_2026_08(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        missing = self._required_2026_08("JOIN_GROUP", args, ("topic", "group", "member"))
        if missing:
            return missing
        topic, group, member = args["topic"], args["group"], args["member"]
        error = await self._offset_topic_error(group, topic)
        if error:
            return error
        if args.get("generation"):
            resumed = await self._live_member_2026_08("JOIN_GROUP", args)
            if isinstance(resumed, str):
                return resumed
            generation, desc = resumed
            listed = go_list(self._sorted_assignments(desc, member))
            return f"OK generation={generation} member={member} assignments={listed} resumed=true"
        binding = await self._group_binding(group)
        if binding is None:
            info = await self._topic(topic)
            if info is None:
                return f"ERROR: topic_not_found topic={topic}"
            binding = self.state.groups.setdefault(group, GroupBinding(topic, info.partitions))
        member = f"{member}-{random.randrange(10000):04d}"
        generation, assignments = await self._join_and_sync(group, binding.topic, member)
        listed = go_list(sorted(assignments))
        return f"OK generation={generation} member={member} assignments={listed}"

    async def _sync_group_2026_08(self, args_text: str) -> str:
        live = await self._fenced_2026_08("SYNC_GROUP", args_text)
        if isinstance(live, str):
            return live
        member, generation, desc = live
        assignments = go_list(self._sorted_assignments(desc, member))
        return f"OK generation={generation} member={member} assignments={assignments}"

    async def _leave_group_2026_08(self, args_text: str) -> str:
        checked = await self._member_args_2026_08("LEAVE_GROUP", codec.parse_params(args_text))
        if isinstance(checked, str):
            return checked
        _, group, member, generation = checked
        error, _ = await self._member_error(group, member, generation)
        if error:
            return error
        await self._leave(group, member)
        return f"OK group={group} member={member} left=true"

    async def _heartbeat_2026_08(self, args_text: str) -> str:
        live = await self._fenced_2026_08("HEARTBEAT", args_text)
        if isinstance(live, str):
            return live
        member, generation, _ = live
        return f"OK member={member} generation={generation}"

    async def _fenced_2026_08(
        self, command: str, args_text: str
    ) -> tuple[str, int, GroupDescription] | str:
        """The checks SYNC_GROUP and HEARTBEAT share, in the broker's order (topic, group and
        member given, the group's topic, ``generation=``, the member in that generation), then
        the member's session kept alive: (member, generation, group), or the error reply."""
        args = codec.parse_params(args_text)
        missing = self._required_2026_08(command, args, ("topic", "group", "member"))
        if missing:
            return missing
        topic, group, member = args["topic"], args["group"], args["member"]
        error = await self._offset_topic_error(group, topic)
        if error:
            return error
        live = await self._live_member_2026_08(command, args)
        if isinstance(live, str):
            return live
        return (member, *live)

    async def _member_args_2026_08(
        self, command: str, args: dict[str, str]
    ) -> tuple[str, str, str, int] | str:
        """The checks LEAVE_GROUP and BATCH_COMMIT begin with, in the broker's order (topic,
        group, member and generation given, the generation a number, the group's topic):
        (topic, group, member, generation), or the error reply."""
        missing = self._required_2026_08(command, args, ("topic", "group", "member"))
        if missing:
            return missing
        topic, group, member = args["topic"], args["group"], args["member"]
        generation = _generation(command, args)
        if isinstance(generation, str):
            return generation
        error = await self._offset_topic_error(group, topic)
        if error:
            return error
        return topic, group, member, generation

    async def _live_member_2026_08(
        self, command: str, args: dict[str, str]
    ) -> tuple[int, GroupDescription] | str:
        """``generation=`` and the member in it, then its session kept alive: (generation,
        group), or the error reply."""
        generation = _generation(command, args)
        if isinstance(generation, str):
            return generation
        group, member = args["group"], args["member"]
        error, desc = await self._member_error(group, member, generation)
        if error:
            return error
        assert desc is not None
        await self._refresh(group, member, desc.generation)
        return generation, desc

    # ------------------------------------------------------------------ offsets
    async def _fetch_offset_2026_08(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        if not args.get("topic"):
            return _missing("topic", "FETCH_OFFSET")
        if not args.get("partition"):
            return _missing("partition", "FETCH_OFFSET")
        partition = go_atoi(args["partition"])
        if partition is None:
            return "ERROR: invalid_partition"
        if not args.get("group"):
            return _missing("group", "FETCH_OFFSET")
        topic, group = args["topic"], args["group"]
        binding = await self._group_binding(group)
        if binding is None:
            return f"ERROR: group_not_found group={group}"
        if binding.topic != topic:
            return f"ERROR: topic_not_assigned_to_group expected={binding.topic} actual={topic}"
        if partition < 0:
            return "OK offset=0"
        committed = await self.core.execute(FetchOffset(group, topic, partition))
        return f"OK offset={max(committed.offset, 0)}"

    async def _commit_offset_2026_08(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        validate_only = args.get("validate_only", "").lower() == "true"
        ownership_only = args.get("ownership_only", "").lower() == "true"
        if not args.get("topic"):
            return _missing("topic", "COMMIT_OFFSET")
        if not args.get("partition"):
            return _missing("partition", "COMMIT_OFFSET")
        partition = go_atoi(args["partition"])
        if partition is None or partition < 0:
            return "ERROR: invalid_partition"
        if not args.get("group"):
            return _missing("group", "COMMIT_OFFSET")
        if not args.get("offset"):
            return _missing("offset", "COMMIT_OFFSET")
        offset = go_uint(args["offset"])
        if offset is None or offset >= 2**64:
            return "ERROR: invalid_offset"
        topic, group = args["topic"], args["group"]
        error = await self._offset_topic_error(group, topic)
        if error:
            return error
        member = args.get("member", "")
        if not member:
            return _missing("member", "COMMIT_OFFSET")
        generation = _generation("COMMIT_OFFSET", args)
        if isinstance(generation, str):
            return generation
        error, _ = await self._member_error(group, member, generation, partition)
        if error:
            return error
        if validate_only and ownership_only:
            return "OK validated=true"
        current = (await self.core.execute(FetchOffset(group, topic, partition))).offset
        if current >= 0 and offset < current:
            reason = (
                f"offset regression group={group} topic={topic} partition={partition} "
                f"current={current} got={offset}"
            )
            return f"ERROR: offset_regression reason={go_quote(reason)}"
        if validate_only:
            return "OK validated=true"
        await self.core.execute(
            CommitOffset(group, topic, partition, offset, generation=generation, member_id=member)
        )
        return "OK"

    async def _batch_commit_2026_08(self, args_text: str) -> str:
        checked = await self._member_args_2026_08("BATCH_COMMIT", codec.parse_params(args_text))
        if isinstance(checked, str):
            return checked
        topic, group, member, generation = checked
        text = "BATCH_COMMIT " + args_text
        cut = text.rfind(" ")
        # the member checks once (an entry that parses meets them, in the broker's order)
        member_error, desc = await self._member_error(group, member, generation)
        owned = self._assigned(desc, member) if desc is not None else None
        items: list[tuple[int, int]] = []
        for raw in text[cut + 1 :].split(","):
            pair = raw.strip()
            kv = pair.split(":")
            if len(kv) != 2:
                return f"ERROR: invalid_batch_commit_entry entry={go_quote(pair)}"
            if not kv[0].startswith("P"):
                return f"ERROR: invalid_partition entry={go_quote(pair)}"
            p = go_atoi(kv[0][1:])
            if p is None or p < 0:
                return f"ERROR: invalid_partition entry={go_quote(pair)}"
            o = go_uint(kv[1])
            if o is None or o >= 2**64:
                return f"ERROR: invalid_offset entry={go_quote(pair)}"
            if member_error:
                return member_error
            if owned is None or p not in owned:
                return not_owner(p, member, group, generation)
            items.append((p, o))
        if not items:
            return "ERROR: no_valid_offsets"
        seen: set[int] = set()
        for p, o in items:
            if p in seen:
                return f"ERROR: duplicate_partition partition={p} group={group} topic={topic}"
            seen.add(p)
            current = (await self.core.execute(FetchOffset(group, topic, p))).offset
            if current >= 0 and o < current:
                reason = (
                    f"offset regression for group={group} topic={topic} partition={p}: "
                    f"current={current} attempted={o}"
                )
                return f"ERROR: offset_regression reason={go_quote(reason)}"
        for p, o in items:
            await self.core.execute(
                CommitOffset(group, topic, p, o, generation=generation, member_id=member)
            )
        return f"OK batched={len(items)}"
