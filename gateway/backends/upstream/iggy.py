"""Upstream Iggy: an Iggy server (or a gateway's Iggy listener) through
``gateway.protocols.iggy.client.IggyClient`` (the codec's client role). Without ``username``
the connection speaks the pre-authentication dialect; with it, it logs in (LOGIN_USER) and
speaks the 0.6 dialect.

Mapping: the upstream topic name (``topic_prefix`` + canonical name) is split as the Iggy
listener does: ``s.t`` is stream ``s`` topic ``t``, an undotted name is a topic of stream
``default``; streams are created on demand (ids: the next free number). Partition p is Iggy
partition p + 1. Records are messages: value = payload (a null value is empty), headers = Iggy
headers (raw, or typed by ``_gw.iggy.kinds``; names must be 1..255 bytes), the message id from
``_gw.iggy.id``. Iggy has no record keys (dropped) and stamps its own time (a read gives the
server's append time). SEND_MESSAGES answers no offsets: they are read back from the partition
right after the send (exact while one writer appends). Topics, partitions (add and delete) are
Iggy's own; no time index through this backend, no key-value store (UNSUPPORTED).

Committed offsets (with ``username`` only: the old dialect has numeric consumer ids) are Iggy's
consumer offsets (STORE/GET_CONSUMER_OFFSET) of the consumer (kind 1) named by the group (a
string id of 1..255 bytes; a longer name is refused), on the topic's stream, topic and
partition. Iggy stores the last offset read, so committed offset n is stored as n - 1; a commit
of 0 (nothing read) stores nothing and reads back as no offset (refused over a stored offset:
Iggy cannot go back to "nothing read"). Commit metadata is dropped (Iggy has none).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import trio

from gateway.backends.base import GroupsByClient, unsupported
from gateway.backends.upstream.base import UpstreamBackend, upstream_capabilities, within
from gateway.backends.upstream.iggy_groups import IggyGroups
from gateway.backends.upstream.iggy_status import status_error
from gateway.model import (
    RESERVED_HEADER_PREFIX,
    AppendResult,
    ErrorCode,
    GatewayError,
    PartitionInfo,
    Record,
    RecordBatch,
    TopicInfo,
)
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyClient, IggyStatusError
from gateway.protocols.iggy.messages import (
    ID_HEADER,
    KINDS_HEADER,
    derived_id,
    headers_from_model,
    headers_to_model,
)

DEFAULT_STREAM = "default"


def _sendable(headers: Any, kinds: bool = False) -> tuple[tuple[str, bytes], ...]:
    """The headers Iggy can carry: names of 1..255 bytes, non-empty values (Iggy rejects empty
    ones, 4019); reserved headers other than the Iggy message id are dropped (``kinds``: keep
    ``_gw.iggy.kinds`` too, which says how to type the headers that are sent)."""
    out = []
    for k, v in headers:
        if k.startswith(RESERVED_HEADER_PREFIX):
            if k == ID_HEADER or (kinds and k == KINDS_HEADER):
                out.append((k, v))
        elif k and len(k.encode()) <= 255 and v:
            out.append((k, v))
    return tuple(out)


class IggyUpstream(GroupsByClient, UpstreamBackend):
    protocol = "iggy"
    groups: IggyGroups
    serial_appends = True  # the send answer has no offsets: read from the watermark after
    protocol_errors = (c.RemoteProtocolError,)
    capabilities = upstream_capabilities(
        keys=False,
        timestamps=False,
        groups="backend",  # the broker's groups (iggy_groups.py)
        committed_offsets=True,  # Iggy's consumer offsets (with a login: see the docstring)
        exact_committed_offsets=False,
    )

    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
        if not config.username:  # the old dialect: numeric consumer ids, no room for a name
            self.capabilities = replace(self.capabilities, committed_offsets=False)
        self.groups = IggyGroups(
            name,
            self._connect,
            self.split,
            config.max_group_connections,
            config.connect_timeout_ms / 1000,
            config.request_timeout_ms / 1000,
        )

    async def open(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self.groups.run)  # drops members whose clients went silent

    async def close(self) -> None:
        await self.groups.aclose()
        await super().close()

    async def _connect(self) -> IggyClient:
        client = await IggyClient.connect(self.host, self.port)
        if self.config.username:
            try:
                await client.login(self.config.username, self.config.password)
            except IggyStatusError as exc:
                await client.aclose()
                raise status_error(exc, "Iggy login") from None
        return client

    def stored_form(self, record: Record) -> Record:
        return Record(None, record.value or b"", _sendable(record.headers), -1, record.offset)

    def split(self, topic: str) -> tuple[str, str]:
        name = self.up(topic)
        stream, sep, rest = name.partition(".")
        return (stream, rest) if sep else (DEFAULT_STREAM, name)

    def canonical(self, stream: str, topic: str) -> str | None:
        return self.down(topic if stream == DEFAULT_STREAM else f"{stream}.{topic}")

    async def _iggy(self, request: c.Request, what: str, retry: bool = True) -> Any:
        async def run(client: IggyClient) -> Any:
            try:
                return await client.call(request)
            except IggyStatusError as exc:
                return exc

        result = await self.call(run, retry=retry)
        if isinstance(result, IggyStatusError):
            raise status_error(result, what)
        if result is None and request.CODE in (c.Code.GET_STREAMS, c.Code.GET_TOPICS):
            return []  # an empty answer: none
        return result

    async def ping(self) -> None:
        await self._iggy(c.Ping(), "ping")

    # ------------------------------------------------------------------ topics
    async def _details(self, topic: str) -> c.TopicDetails:
        stream, name = self.split(topic)
        return await self._iggy(
            c.GetTopic(c.Identifier(stream), c.Identifier(name)), f"get topic {topic}"
        )

    async def _ensure_stream(self, stream: str) -> None:
        streams = await self._iggy(c.GetStreams(), "get streams")
        if any(s.name == stream for s in streams):
            return
        next_id = max((s.id for s in streams), default=0) + 1
        try:
            await self._iggy(c.CreateStream(next_id, stream), f"create stream {stream}", False)
        except GatewayError:
            streams = await self._iggy(c.GetStreams(), "get streams")
            if not any(s.name == stream for s in streams):
                raise

    async def create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...] = ()
    ) -> TopicInfo:
        self.check_new_topic(name, partitions)
        stream, topic = self.split(name)
        await self._ensure_stream(stream)
        topics = await self._iggy(c.GetTopics(c.Identifier(stream)), f"get topics of {stream}")
        if any(t.name == topic for t in topics):
            raise GatewayError(ErrorCode.TOPIC_EXISTS, f"topic {name!r} already exists")
        next_id = max((t.id for t in topics), default=0) + 1
        await self._iggy(
            c.CreateTopic(c.Identifier(stream), next_id, partitions, 0, topic),
            f"create topic {name}",
            False,
        )
        self._topic_config[name] = tuple(config)
        return self.info(name, partitions)

    async def list_topics(self) -> list[TopicInfo]:
        out = []
        for s in await self._iggy(c.GetStreams(), "get streams"):
            for t in await self._iggy(c.GetTopics(c.Identifier(s.id)), f"get topics of {s.name}"):
                name = self.canonical(s.name, t.name)
                if name is not None:
                    out.append(self.info(name, t.partitions_count))
        return out

    async def topic(self, name: str) -> TopicInfo:
        return self.info(name, (await self._details(name)).topic.partitions_count)

    async def delete_topic(self, name: str) -> None:
        stream, topic = self.split(name)
        await self._iggy(
            c.DeleteTopic(c.Identifier(stream), c.Identifier(topic)), f"delete {name}", False
        )

    async def create_partitions(self, name: str, count: int) -> TopicInfo:
        stream, topic = self.split(name)
        await self._iggy(
            c.CreatePartitions(c.Identifier(stream), c.Identifier(topic), count),
            f"create partitions of {name}",
            False,
        )
        return await self.topic(name)

    async def delete_partitions(self, name: str, count: int) -> TopicInfo:
        current = await self.topic(name)
        if not 1 <= count < current.partitions:
            raise GatewayError(
                ErrorCode.INVALID_PARTITIONS,
                f"cannot delete {count} of the {current.partitions} partitions of {name!r}",
            )
        stream, topic = self.split(name)
        await self._iggy(
            c.DeletePartitions(c.Identifier(stream), c.Identifier(topic), count),
            f"delete partitions of {name}",
            False,
        )
        return await self.topic(name)

    @staticmethod
    def _watermarks(p: c.PartitionRecord) -> tuple[int, int]:
        hw = p.current_offset + 1 if p.messages_count else 0
        return max(0, hw - p.messages_count), hw

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        details = await self._details(topic)
        self.check_partition(topic, partition, len(details.partitions))
        start, hw = self._watermarks(details.partitions[partition])
        return PartitionInfo(topic, partition, start, hw)

    # ------------------------------------------------------------------ data
    async def _append(self, topic: str, partition: int, batch: RecordBatch) -> AppendResult:
        records = batch.records
        if not records:
            info = await self.partition_info(topic, partition)
            return AppendResult(partition, info.high_watermark, info.high_watermark - 1)
        if partition < 0:
            raise GatewayError(ErrorCode.UNKNOWN_PARTITION, f"no partition {partition}")
        messages = []
        for r in records:
            mid, block = headers_from_model(_sendable(r.headers, kinds=True))
            messages.append(c.Message(mid, r.value or b"", block))
        stream, name = self.split(topic)
        send = c.SendMessages(
            c.Identifier(stream),
            c.Identifier(name),
            c.Partitioning.partition_id(partition + 1),
            messages,
        )

        async def run(client: IggyClient) -> Any:
            try:
                await client.call(send)
                return await client.call(c.GetTopic(c.Identifier(stream), c.Identifier(name)))
            except IggyStatusError as exc:
                return exc

        result = await self.call(run, retry=False)  # under append_lock
        if isinstance(result, IggyStatusError):
            raise status_error(result, f"send to {topic}/{partition}")
        _, hw = self._watermarks(result.partitions[partition])
        return AppendResult(partition, hw - len(records), hw - 1)

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        if offset < 0:
            raise GatewayError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is negative")
        if partition < 0:
            raise GatewayError(ErrorCode.UNKNOWN_PARTITION, f"no partition {partition}")
        stream, name = self.split(topic)
        poll = c.PollMessages(
            c.Consumer(c.ConsumerKind.CONSUMER, c.Identifier(1)),
            c.Identifier(stream),
            c.Identifier(name),
            partition + 1,
            c.PollingKind.OFFSET,
            offset,
            max(1, min(max_records, 1_000_000)),
            False,
        )
        polled = await self._iggy(poll, f"poll {topic}/{partition}@{offset}")
        upstream_name = self.up(topic)
        records = []
        for m in polled.messages:
            if m.offset < offset:
                continue
            raw_id = m.id.to_bytes(16, "little")
            if m.id == derived_id(upstream_name, partition, m.offset):
                raw_id = bytes(16)  # no id of its own: stored without one
            headers = headers_to_model(m.headers, raw_id)
            records.append(Record(None, m.payload, headers, m.timestamp, m.offset))
        records = within(records, max_records, max_bytes)
        if not records:
            info = await self.partition_info(topic, partition)
            if offset > info.high_watermark or offset < info.log_start_offset:
                raise GatewayError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"offset {offset} outside [{info.log_start_offset}, {info.high_watermark}]",
                )
            return []
        return [RecordBatch(records, base_offset=records[0].offset)]

    # ------------------------------------------------------------------ committed offsets
    def _offset_request(
        self, group: str, topic: str, partition: int
    ) -> tuple[c.Consumer, c.Identifier, c.Identifier, int]:
        """(consumer, stream, topic, partition id) of ``group``'s offset on a partition."""
        if not self.capabilities.committed_offsets:
            raise unsupported(
                "committed offsets without a login (set username: the old Iggy dialect has "
                "numeric consumer ids only)",
                self.name,
            )
        size = len(group.encode())
        if not 1 <= size <= 255:
            raise GatewayError(
                ErrorCode.INVALID_REQUEST,
                f"group name {group[:40]!r}... is {size} bytes; an Iggy consumer name is "
                "1..255 bytes",
            )
        if partition < 0:
            raise GatewayError(ErrorCode.UNKNOWN_PARTITION, f"no partition {partition}")
        stream, name = self.split(topic)
        consumer = c.Consumer(c.ConsumerKind.CONSUMER, c.Identifier(group))
        return consumer, c.Identifier(stream), c.Identifier(name), partition + 1

    async def commit_offset(
        self, group: str, topic: str, partition: int, offset: int, metadata: str
    ) -> None:
        where = f"offset commit {group} {topic}/{partition}"
        args = self._offset_request(group, topic, partition)
        if offset <= 0:  # nothing read: Iggy's "no stored offset"
            if await self.fetch_offset(group, topic, partition) is None:
                return
            raise GatewayError(
                ErrorCode.UNSUPPORTED,
                f"{where}: Iggy stores the last offset read and cannot go back to "
                f"nothing read (offset {offset})",
            )
        await self._iggy(c.StoreConsumerOffset(*args, offset - 1), where)

    async def fetch_offset(self, group: str, topic: str, partition: int) -> tuple[int, str] | None:
        args = self._offset_request(group, topic, partition)
        got = await self._iggy(
            c.GetConsumerOffset(*args), f"offset fetch {group} {topic}/{partition}"
        )
        if got is None:  # an empty answer: no stored offset
            return None
        return got.stored_offset + 1, ""


def make(name: str, config: Any) -> IggyUpstream:
    return IggyUpstream(name, config)
