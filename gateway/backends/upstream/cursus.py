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
    PartitionInfo,
    Record,
    RecordBatch,
    TopicInfo,
)
from gateway.protocols.cursus import codec
from gateway.protocols.cursus.client import CursusClient, ok_fields

_CURSUS_HEADERS = (codec.RESERVED_HEADER_PREFIX + "cursus.",)
_MEMBER = re.compile(r"member=(\S+)")


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
    )

    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
        self._group_id = uuid.uuid4().hex[:12]
        self._members: dict[str, tuple[str, str]] = {}  # topic -> (group, member)

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


def make(name: str, config: Any) -> CursusUpstream:
    return CursusUpstream(name, config)
