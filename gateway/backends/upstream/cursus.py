"""Upstream Cursus: a Cursus broker (or a gateway's Cursus listener) through
``gateway.protocols.cursus.client.CursusClient`` (the codec's client role).

Mapping: records are Cursus messages (key, payload; the Cursus-only fields travel as the
reserved ``_gw.cursus.*`` headers, as at the Cursus listener); other headers and timestamps do
not exist in Cursus and are dropped (a read gives timestamp -1); an empty key is no key, a key
keeps at most 65,535 bytes (a u16 length) and a null value is empty. Appends are binary batches
(acks -1 = all), their offsets from the ack's ``last_offset``. Reads are CONSUME as the one
member of a private consumer group per topic (``_gw-upstream-<id>-<topic>``, joined on first
read; joined again when the broker forgot the member). Topics: CREATE, LIST, DESCRIBE, DELETE;
partitions are added with CREATE and a larger count. Cursus reports no log start (0 is
assumed). No partition deletion, time index, offset metadata or key-value store (UNSUPPORTED).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from gateway.backends.base import unsupported
from gateway.backends.upstream.base import UpstreamBackend, upstream_capabilities, within
from gateway.model import (
    AppendResult,
    ErrorCode,
    GatewayError,
    GroupDescription,
    JoinGroupResult,
    MemberAssignment,
    PartitionInfo,
    Record,
    RecordBatch,
    SyncGroupResult,
    TopicInfo,
)
from gateway.protocols.cursus import codec
from gateway.protocols.cursus.client import CursusClient, assignments, ok_fields

_CURSUS_HEADERS = (codec.RESERVED_HEADER_PREFIX + "cursus.",)
_MEMBER = re.compile(r"member=(\S+)")
_GENERATION = re.compile(r"generation=(\d+)")


def _text_error(text: str, what: str) -> GatewayError:
    low = text.lower()
    if "offset_out_of_range" in low:
        code = ErrorCode.OFFSET_OUT_OF_RANGE
    elif "partition" in low and ("out of range" in low or "not_found" in low):
        code = ErrorCode.UNKNOWN_PARTITION
    elif "does not exist" in low or "not found" in low or "topic_not_found" in low:
        code = ErrorCode.UNKNOWN_TOPIC
    elif "unavailable" in low or "shutting down" in low:
        code = ErrorCode.BACKEND_UNAVAILABLE
    else:
        code = ErrorCode.INTERNAL
    return GatewayError(code, f"{what}: Cursus answered {text[:200]!r}")


def _created(reply: str, partitions: int) -> bool:
    """A CREATE reply saying the topic has ``partitions`` partitions, in either broker dialect:
    ``Topic 'T' now has N partitions`` or ``OK topic=T partitions=N ...``."""
    if reply.startswith("OK "):
        return f"partitions={partitions}" in reply.split()
    return f"now has {partitions} partitions" in reply


class CursusUpstream(UpstreamBackend):
    protocol = "cursus"
    protocol_errors = (codec.RemoteProtocolError,)
    capabilities = upstream_capabilities(
        headers=False,
        timestamps=False,
        delete_partitions=False,
        groups="backend",
    )

    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
        self._group_id = uuid.uuid4().hex[:12]
        self._members: dict[str, tuple[str, str]] = {}  # topic -> (group, member)
        # consumer groups run by the broker: the member ids it gave this gateway's members
        self._upstream_ids: dict[tuple[str, str], str] = {}  # (group, our id) -> broker's id
        self._group_topics: dict[str, str] = {}  # group -> its topic (a Cursus group has one)

    async def _connect(self) -> CursusClient:
        return await CursusClient.connect(self.host, self.port)

    def stored_form(self, record: Record) -> Record:
        headers = tuple((k, v) for k, v in record.headers if k.startswith(_CURSUS_HEADERS))
        key = record.key[:0xFFFF] if record.key else None  # a u16 length
        return Record(key, record.value or b"", headers, -1, record.offset)

    async def _text(self, command: str, retry: bool = True) -> str:
        return await self.call(lambda c: c.text(command), retry=retry)

    async def ping(self) -> None:
        await self._text("LIST")

    # ------------------------------------------------------------------ topics
    async def _describe(self, topic: str) -> list[dict[str, Any]]:
        reply = await self._text(f"DESCRIBE topic={self.up(topic)}")
        if not reply.startswith("{"):
            raise _text_error(reply, f"DESCRIBE {topic}")
        return json.loads(reply)["partitions"]

    async def create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...] = ()
    ) -> TopicInfo:
        self.check_new_topic(name, partitions)
        if name in {t.name for t in await self.list_topics()}:
            raise GatewayError(ErrorCode.TOPIC_EXISTS, f"topic {name!r} already exists")
        reply = await self._text(f"CREATE topic={self.up(name)} partitions={partitions}", False)
        if not _created(reply, partitions):
            raise _text_error(reply, f"CREATE {name}")
        self._topic_config[name] = tuple(config)
        self._members.pop(name, None)
        return self.info(name, partitions)

    async def list_topics(self) -> list[TopicInfo]:
        reply = await self._text("LIST")
        if reply.startswith("OK "):  # the current broker: OK count=N topics=a,b
            names = ok_fields(reply).get("topics", "")
            upstream_names = names.split(",") if names else []
        elif reply == "(no topics)" or not reply:
            return []
        else:
            upstream_names = reply.split(", ")
        out = []
        for upstream_name in upstream_names:
            name = self.down(upstream_name)
            if name is not None:
                out.append(self.info(name, len(await self._describe(name))))
        return out

    async def topic(self, name: str) -> TopicInfo:
        return self.info(name, len(await self._describe(name)))

    async def delete_topic(self, name: str) -> None:
        reply = await self._text(f"DELETE topic={self.up(name)}", False)
        if "deleted" not in reply:
            raise _text_error(reply, f"DELETE {name}")
        self._members.pop(name, None)

    async def create_partitions(self, name: str, count: int) -> TopicInfo:
        current = len(await self._describe(name))
        total = current + count
        reply = await self._text(f"CREATE topic={self.up(name)} partitions={total}", False)
        if not _created(reply, total):
            raise _text_error(reply, f"CREATE {name} partitions={total}")
        self._members.pop(name, None)  # the group must see the new partitions
        return self.info(name, total)

    async def delete_partitions(self, name: str, count: int) -> TopicInfo:
        raise unsupported("deleting partitions (Cursus has no such command)", self.name)

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        parts = await self._describe(topic)
        self.check_partition(topic, partition, len(parts))
        return PartitionInfo(topic, partition, 0, int(parts[partition]["hwm"]))

    # ------------------------------------------------------------------ data
    async def _append(self, topic: str, partition: int, batch: RecordBatch) -> AppendResult:
        records = batch.records
        if not records:
            info = await self.partition_info(topic, partition)
            return AppendResult(partition, info.high_watermark, info.high_watermark - 1)
        messages = [codec.record_to_message(r._replace(offset=0)) for r in records]
        ack = await self.call(
            lambda c: c.produce(self.up(topic), partition, messages, acks="-1"), retry=False
        )
        if isinstance(ack, str):
            raise _text_error(ack, f"produce {topic}/{partition}")
        if ack.status != "OK":
            raise _text_error(ack.error or ack.status, f"produce {topic}/{partition}")
        last = ack.last_offset
        return AppendResult(partition, last - len(records) + 1, last)

    async def _join(self, client: CursusClient, topic: str) -> tuple[str, str]:
        group = f"_gw-upstream-{self._group_id}-{topic}"
        reply = await client.text(f"JOIN_GROUP topic={self.up(topic)} group={group} member=gw")
        found = _MEMBER.search(reply)
        if not reply.startswith("OK") or not found:
            raise _text_error(reply, f"JOIN_GROUP {topic}")
        self._members[topic] = (group, found.group(1))
        return self._members[topic]

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        if offset < 0:
            raise GatewayError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is negative")
        if partition < 0:
            raise GatewayError(ErrorCode.UNKNOWN_PARTITION, f"no partition {partition}")
        batch_size = max(1, min(max_records, 100_000))

        async def consume(client: CursusClient) -> Any:
            member = self._members.get(topic) or await self._join(client, topic)
            for attempt in range(2):
                group, member_id = member
                reply = await client.consume(
                    self.up(topic), partition, offset, member_id, group=group, batch=batch_size
                )
                if isinstance(reply, str) and "not found" in reply and "heartbeat" in reply:
                    if attempt == 0:  # the broker expired our member: join again
                        member = await self._join(client, topic)
                        continue
                return reply
            return reply

        reply = await self.call(consume)
        if isinstance(reply, str):
            raise _text_error(reply, f"CONSUME {topic}/{partition}@{offset}")
        records = within(
            [
                codec.message_to_record(m, -1, m.offset)
                for m in reply.messages()
                if m.offset >= offset
            ],
            max_records,
            max_bytes,
        )
        if not records:
            return []
        return [RecordBatch(records, base_offset=records[0].offset)]

    # ------------------------------------------------------------------ consumer groups
    # The broker's own groups (JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, GROUP_STATUS),
    # under ``topic_prefix`` like topics: every gateway on the broker sees one group. The broker
    # picks member ids (it may add a suffix to the one asked for); this gateway's members keep
    # the id they were given here and the broker's id is mapped.

    def _down_member(self, group: str, upstream_id: str) -> str:
        for (g, ours), theirs in self._upstream_ids.items():
            if g == group and theirs == upstream_id:
                return ours
        return upstream_id

    def _up_member(self, group: str, member_id: str) -> str:
        return self._upstream_ids.get((group, member_id), member_id)

    async def _group_topic(self, group: str) -> str:
        topic = self._group_topics.get(group)
        if topic is None:
            status = await self._group_status(group)
            topic = self.down(str(status.get("topic_name", ""))) if status else None
            if not topic:
                raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"group {group!r} has no members")
            self._group_topics[group] = topic
        return topic

    async def _group_status(self, group: str) -> dict[str, Any] | None:
        reply = await self._text(f"GROUP_STATUS group={self.up(group)}")
        if not reply.startswith("{"):
            if "not found" in reply:
                return None
            raise _text_error(reply, f"GROUP_STATUS {group}")
        status: dict[str, Any] = json.loads(reply)
        return status

    async def group_join(
        self, group: str, topics: tuple[str, ...], member_id: str, session_timeout_ms: int
    ) -> JoinGroupResult:
        if len(topics) != 1:
            raise GatewayError(
                ErrorCode.INVALID_REQUEST,
                f"group {group!r}: a Cursus group reads one topic, not {len(topics)}",
            )
        ours = member_id or f"{group}-{uuid.uuid4().hex[:12]}"
        asked = self._up_member(group, ours)
        reply = await self._text(
            f"JOIN_GROUP topic={self.up(topics[0])} group={self.up(group)} member={asked}", False
        )
        found = _MEMBER.search(reply)
        generation = _GENERATION.search(reply)
        if not reply.startswith("OK") or not found or not generation:
            raise _text_error(reply, f"JOIN_GROUP {group}")
        self._upstream_ids[(group, ours)] = found.group(1)
        self._group_topics[group] = topics[0]
        desc = await self.group_describe(group)
        members = tuple(m.member_id for m in desc.members) or (ours,)
        return JoinGroupResult(group, ours, int(generation.group(1)), members[0], members)

    async def group_sync(self, group: str, member_id: str, generation: int) -> SyncGroupResult:
        desc = await self.group_describe(group)
        if member_id not in {m.member_id for m in desc.members}:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        if generation != desc.generation:
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's current {desc.generation}",
            )
        topic = await self._group_topic(group)
        reply = await self._text(
            f"SYNC_GROUP topic={self.up(topic)} group={self.up(group)} "
            f"member={self._up_member(group, member_id)} generation={generation}"
        )
        if not reply.startswith("OK"):
            if "not found" in reply:
                raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
            if "GEN_MISMATCH" in reply:
                raise GatewayError(ErrorCode.ILLEGAL_GENERATION, f"group {group!r} rebalanced")
            raise _text_error(reply, f"SYNC_GROUP {group}")
        partitions = tuple((topic, p) for p in assignments(reply))
        return SyncGroupResult(MemberAssignment(member_id, partitions))

    async def group_heartbeat(self, group: str, member_id: str, generation: int) -> None:
        topic = await self._group_topic(group)
        reply = await self._text(
            f"HEARTBEAT topic={self.up(topic)} group={self.up(group)} "
            f"member={self._up_member(group, member_id)} generation={generation}"
        )
        if reply.startswith("OK"):
            return
        if "GEN_MISMATCH" in reply:
            raise GatewayError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {group!r} rebalanced: join again"
            )
        if "not_found" in reply or "not found" in reply:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        raise _text_error(reply, f"HEARTBEAT {group}")

    async def group_leave(self, group: str, member_id: str) -> None:
        topic = await self._group_topic(group)
        upstream_id = self._upstream_ids.pop((group, member_id), member_id)
        reply = await self._text(
            f"LEAVE_GROUP topic={self.up(topic)} group={self.up(group)} member={upstream_id}",
            False,
        )
        if "not found" in reply or "not_found" in reply:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        if reply.startswith("ERROR") or "ERROR:" in reply:
            raise _text_error(reply, f"LEAVE_GROUP {group}")

    async def group_describe(self, group: str) -> GroupDescription:
        status = await self._group_status(group) or {}
        members = status.get("members") or []
        generation = int(status.get("generation", 0))
        if not members:
            # forget the group's ids: nothing of it is left on the broker
            for key in [k for k in self._upstream_ids if k[0] == group]:
                del self._upstream_ids[key]
            self._group_topics.pop(group, None)
            return GroupDescription(group, "empty", generation, ())
        topic = self.down(str(status.get("topic_name", ""))) or ""
        if topic:
            self._group_topics[group] = topic
        live = {str(m["member_id"]) for m in members}
        for key in [k for k, v in self._upstream_ids.items() if k[0] == group and v not in live]:
            del self._upstream_ids[key]  # expired or left on the broker: bounded by its members
        out = tuple(
            MemberAssignment(
                self._down_member(group, str(m["member_id"])),
                tuple((topic, int(p)) for p in m.get("assignments") or ()),
            )
            for m in members
        )
        return GroupDescription(
            group,
            "stable",
            generation,
            tuple(sorted(out, key=lambda m: m.member_id)),
            (topic,) if topic else (),
        )


def make(name: str, config: Any) -> CursusUpstream:
    return CursusUpstream(name, config)
