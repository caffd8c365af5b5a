"""One Iggy connection: framing through the codec, requests into the model's commands.

Per connection: the dialect (old until LOGIN_USER, see codec), the logged-in user, the client id
and the consumer-group memberships. Shared by every connection of one core (``IggyState``): the
durable id registry, the client table and which model member belongs to which Iggy client.

Mappings (docs/protocols/iggy.md): partition ids are 1-based (model partition = id - 1); the
stored consumer offset is the last offset consumed (model committed offset - 1; 0 when nothing
is stored, like the reference server); a consumer (kind 1) id N keeps its offsets as the model
group ``iggy-consumer-N``; a consumer group (kind 2) is the model group named by the registry
(``"N"`` unless named). Messages, their ids and typed headers: ``messages.py`` (send writes
one canonical block, poll transcodes stored canonical windows).
"""

from __future__ import annotations

import os
import platform
import socket
import struct
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from gateway.core.view import CoreView
from gateway.model import (
    CommitOffset,
    CreatePartitions,
    DeletePartitions,
    DeleteTopic,
    DescribeGroup,
    DescribeTopic,
    ErrorCode,
    Fetch,
    FetchOffset,
    GatewayError,
    GroupDescription,
    JoinGroup,
    LeaveGroup,
    ListOffsets,
    Partitioning,
    Produce,
    Stats,
    SyncGroup,
    TopicDescription,
    now_us,
)
from gateway.observability import (
    RECORDS_IN,
    RECORDS_OUT,
    REQUEST_LATENCY,
    REQUESTS,
    labelled,
    limit_hit,
    protocol_error,
)
from gateway.protocols.answers import LIMIT, MEMORY_LIMIT, AnswerBudget, holding
from gateway.protocols.base import ConnectionContext, PerCore
from gateway.protocols.driver import Connection, drive
from gateway.protocols.iggy import IggyListenerConfig
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.auth import LoginGuard, check_credentials, peer_host
from gateway.protocols.iggy.messages import poll_reply, send_batch
from gateway.protocols.iggy.registry import (
    GroupEntry,
    IggyError,
    Registry,
    StreamEntry,
    TopicEntry,
)

PROTOCOL = "iggy"
GROUP_SESSION_TIMEOUT_MS = 24 * 3600 * 1000  # Iggy members live as long as their connection
RECEIVE_BYTES = 256 * 1024

ERROR_STATUS = {
    ErrorCode.UNKNOWN_TOPIC: c.Status.TOPIC_ID_NOT_FOUND,
    ErrorCode.UNKNOWN_PARTITION: c.Status.PARTITION_NOT_FOUND,
    ErrorCode.OFFSET_OUT_OF_RANGE: c.Status.INVALID_OFFSET,
    ErrorCode.TOPIC_EXISTS: c.Status.TOPIC_NAME_ALREADY_EXISTS,
    ErrorCode.INVALID_REQUEST: c.Status.INVALID_COMMAND,
    ErrorCode.INVALID_TOPIC: c.Status.INVALID_TOPIC_NAME,
    ErrorCode.INVALID_PARTITIONS: c.Status.TOO_MANY_PARTITIONS,
    ErrorCode.RECORD_TOO_LARGE: c.Status.TOO_BIG_MESSAGE_PAYLOAD,
    ErrorCode.CORRUPT_MESSAGE: c.Status.CANNOT_APPEND_MESSAGE,
    ErrorCode.UNKNOWN_GROUP: c.Status.CONSUMER_GROUP_NOT_FOUND,
    ErrorCode.GROUP_EXISTS: c.Status.CONSUMER_GROUP_ALREADY_EXISTS,
    ErrorCode.UNKNOWN_MEMBER: c.Status.CONSUMER_GROUP_MEMBER_NOT_FOUND,
    ErrorCode.UNAUTHORIZED: c.Status.UNAUTHORIZED,
    ErrorCode.UNAUTHENTICATED: c.Status.UNAUTHENTICATED,
    ErrorCode.UNSUPPORTED: c.Status.FEATURE_UNAVAILABLE,
}
"""The canonical errors as Iggy status codes; anything else is 1 (Error)."""


def status_for(exc: GatewayError) -> int:
    return int(ERROR_STATUS.get(exc.code, c.Status.ERROR))


# ----------------------------------------------------------------------------- shared state


class ClientInfo:
    __slots__ = ("client_id", "address", "groups")

    def __init__(self, client_id: int, address: str) -> None:
        self.client_id = client_id
        self.address = address
        self.groups: set[tuple[int, int, int]] = set()  # (group id, topic id, stream id)


class IggyState:
    """What every Iggy connection of one core shares."""

    def __init__(self, core: CoreView, listener: IggyListenerConfig) -> None:
        self.registry = Registry(core, listener.default_stream, listener.stream_separator)
        self.clients: dict[int, ClientInfo] = {}
        self.member_client: dict[str, int] = {}
        self.member_topics: dict[str, set[str]] = {}
        self._next_client = 0
        self.started_us = now_us()
        self.logins = LoginGuard(
            listener.max_concurrent_logins, listener.login_backoff_s, listener.max_login_peers
        )

    def new_client(self, address: str) -> ClientInfo:
        self._next_client += 1
        info = ClientInfo(self._next_client, address)
        self.clients[info.client_id] = info
        return info


_STATES: PerCore[IggyState] = PerCore()


def state_for(core: CoreView, listener: IggyListenerConfig) -> IggyState:
    return _STATES.get(core, lambda: IggyState(core, listener))


# ----------------------------------------------------------------------------- session


class IggySession:
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        cfg = ctx.listener
        assert isinstance(cfg, IggyListenerConfig)
        self.cfg = cfg
        self.log = ctx.log
        self.state = state_for(self.core, self.cfg)
        self.registry = self.state.registry
        self.client = self.state.new_client(ctx.peer)
        self.conn = c.ServerConnection(self.cfg.max_frame_bytes)
        self.user_id: int | None = None
        # model group name -> (member id, canonical topics joined through this connection)
        self.memberships: dict[str, tuple[str, set[str]]] = {}
        self._rr: dict[str, int] = {}
        # each handler takes its own request type: the dispatch by type(req) pairs them
        self._handlers: dict[type[c.Request], Callable[[Any], Awaitable[object]]] = {
            c.Ping: self.ping,
            c.GetStats: self.get_stats,
            c.GetMe: self.get_me,
            c.GetClient: self.get_client,
            c.GetClients: self.get_clients,
            c.LoginUser: self.login,
            c.PollMessages: self.poll,
            c.SendMessages: self.send,
            c.GetConsumerOffset: self.get_offset,
            c.StoreConsumerOffset: self.store_offset,
            c.GetStream: self.get_stream,
            c.GetStreams: self.get_streams,
            c.CreateStream: self.create_stream,
            c.DeleteStream: self.delete_stream,
            c.GetTopic: self.get_topic,
            c.GetTopics: self.get_topics,
            c.CreateTopic: self.create_topic,
            c.DeleteTopic: self.delete_topic,
            c.CreatePartitions: self.create_partitions,
            c.DeletePartitions: self.delete_partitions,
            c.GetConsumerGroup: self.get_group,
            c.GetConsumerGroups: self.get_groups,
            c.CreateConsumerGroup: self.create_group,
            c.DeleteConsumerGroup: self.delete_group,
            c.JoinConsumerGroup: self.join_group,
            c.LeaveConsumerGroup: self.leave_group,
        }

    # ------------------------------------------------------------------ dispatch
    async def handle(self, req: c.Request) -> bytes:
        """The response frame for one decoded request."""
        code = req.CODE
        api = c.Code(code).name.lower()
        start = time.perf_counter()
        try:
            if (
                self.user_id is None
                and not self.cfg.allow_anonymous
                and code not in (c.Code.PING, c.Code.LOGIN_USER)
            ):
                raise IggyError(c.Status.UNAUTHENTICATED, "log in first")
            result = await self._handlers[type(req)](req)
            out = self.conn.send_response(code, result)
            outcome = "ok"
        except (IggyError, c.ValidationError) as exc:
            out = self.error(api, exc.status, str(exc))
            outcome = str(exc.status)
        except GatewayError as exc:
            status = status_for(exc)
            out = self.error(api, status, exc.message)
            outcome = str(status)
        labelled(REQUESTS, PROTOCOL, api, outcome).inc()
        labelled(REQUEST_LATENCY, PROTOCOL, api).observe(time.perf_counter() - start)
        return out

    def error(self, api: str, status: int, message: str) -> bytes:
        protocol_error(
            self.log, PROTOCOL, f"status_{status}", api=api, status=int(status), error=message
        )
        return c.ServerConnection.send_error(status)

    async def close(self) -> None:
        for name, (member_id, _) in list(self.memberships.items()):
            try:
                await self.core.execute(LeaveGroup(name, member_id))
            except GatewayError:
                pass
            self.state.member_client.pop(member_id, None)
            self.state.member_topics.pop(member_id, None)
        self.memberships.clear()
        self.state.clients.pop(self.client.client_id, None)

    # ------------------------------------------------------------------ system
    async def ping(self, req: c.Ping) -> None:
        return None

    async def login(self, req: c.LoginUser) -> c.LoginResult:
        users, cfg, guard = self.cfg.users, self.cfg, self.state.logins
        guard.configure(cfg.max_concurrent_logins, cfg.login_backoff_s, cfg.max_login_peers)
        host = peer_host(self.ctx.peer)
        if any("password_hash" in u for u in users):
            if not guard.limiter.available_tokens:
                limit_hit("max_concurrent_logins", PROTOCOL, self.log, peer=host)
            async with guard.limiter:  # at most max_concurrent_logins scrypt checks at once
                self._refuse_if_backing_off(host)
                user_id = await trio.to_thread.run_sync(
                    check_credentials, users, req.username, req.password
                )
        else:
            self._refuse_if_backing_off(host)
            user_id = check_credentials(users, req.username, req.password)
        if user_id is None:
            guard.failed(host, trio.current_time())
            raise IggyError(
                c.Status.INVALID_CREDENTIALS, f"invalid credentials for {req.username!r}"
            )
        guard.succeeded(host)
        self.user_id = user_id
        self.log.info("iggy_login", user=req.username, client_id=self.client.client_id)
        return c.LoginResult(user_id)

    def _refuse_if_backing_off(self, host: str) -> None:
        """Repeated failed logins from ``host``: refuse without checking (login_backoff_s)."""
        wait = self.state.logins.refused_for(host, trio.current_time())
        if wait > 0:
            limit_hit("login_backoff_s", PROTOCOL, self.log, peer=host, retry_in_s=round(wait, 2))
            raise IggyError(
                c.Status.INVALID_CREDENTIALS,
                f"too many failed logins from {host}: retry in {wait:.1f} s",
            )

    async def get_stats(self, req: c.GetStats) -> c.StatsRecord:
        stats = await self.core.execute(Stats())
        await self.registry.sync()
        uname = platform.uname()
        return c.StatsRecord(
            process_id=os.getpid(),
            run_time=now_us() - self.state.started_us,
            start_time=self.state.started_us,
            streams_count=len(self.registry.streams),
            topics_count=stats.topics,
            partitions_count=stats.partitions,
            segments_count=stats.partitions,
            messages_count=stats.records,
            clients_count=len(self.state.clients),
            consumer_groups_count=len(list(self.registry.all_groups())),
            hostname=socket.gethostname(),
            os_name=uname.system,
            os_version=uname.version,
            kernel_version=uname.release,
        )

    def _client_record(self, info: ClientInfo) -> c.ClientRecord:
        groups = tuple(sorted(info.groups))
        return c.ClientRecord(info.client_id, 1, info.address, len(groups), groups)

    async def get_me(self, req: c.GetMe) -> c.ClientRecord:
        return self._client_record(self.client)

    async def get_client(self, req: c.GetClient) -> c.ClientRecord:
        info = self.state.clients.get(req.client_id)
        if info is None:
            raise IggyError(c.Status.CLIENT_NOT_FOUND, f"client {req.client_id} not found")
        return self._client_record(info)

    async def get_clients(self, req: c.GetClients) -> list[c.ClientRecord]:
        return [self._client_record(i) for _, i in sorted(self.state.clients.items())]

    # ------------------------------------------------------------------ streams / topics
    async def _describe(self, t: TopicEntry) -> TopicDescription:
        return await self.core.execute(DescribeTopic(t.canonical))

    def _topic_record(self, t: TopicEntry, d: TopicDescription) -> c.TopicRecord:
        messages = sum(p.high_watermark - p.log_start_offset for p in d.partitions)
        if self.conn.dialect is c.Dialect.V06:
            expiry = t.expiry_us
        else:
            expiry = min(t.expiry_us // 1000, 0xFFFFFFFF)
        return c.TopicRecord(
            t.id,
            t.created_at,
            len(d.partitions),
            expiry,
            0,
            messages,
            t.name,
            t.compression,
            t.max_size,
            t.replication,
        )

    def _partition_records(
        self, t: TopicEntry, d: TopicDescription
    ) -> tuple[c.PartitionRecord, ...]:
        return tuple(
            c.PartitionRecord(
                p.partition + 1,
                t.created_at,
                1,
                max(0, p.high_watermark - 1),
                0,
                p.high_watermark - p.log_start_offset,
            )
            for p in d.partitions
        )

    async def _stream_details(self, s: StreamEntry) -> c.StreamDetails:
        topics = []
        messages = 0
        for t in self.registry.topics_of(s.id):
            try:
                d = await self._describe(t)
            except GatewayError as exc:
                if exc.code is ErrorCode.UNKNOWN_TOPIC:
                    continue
                raise
            rec = self._topic_record(t, d)
            messages += rec.messages_count
            topics.append(rec)
        record = c.StreamRecord(s.id, s.created_at, len(topics), 0, messages, s.name)
        return c.StreamDetails(record, tuple(topics))

    async def get_stream(self, req: c.GetStream) -> c.StreamDetails:
        s = await self.registry.stream(req.stream)
        return await self._stream_details(s)

    async def get_streams(self, req: c.GetStreams) -> list[c.StreamRecord]:
        await self.registry.sync()
        out = []
        for s in sorted(self.registry.streams.values(), key=lambda s: s.id):
            out.append((await self._stream_details(s)).stream)
        return out

    async def create_stream(self, req: c.CreateStream) -> c.StreamDetails | None:
        await self.registry.sync()
        s = await self.registry.create_stream(req.stream_id, req.name)
        if self.conn.dialect is c.Dialect.V06:
            return c.StreamDetails(c.StreamRecord(s.id, s.created_at, 0, 0, 0, s.name))
        return None

    async def delete_stream(self, req: c.DeleteStream) -> None:
        s = await self.registry.stream(req.stream)
        for t in self.registry.topics_of(s.id):
            await self._drop_topic(t)
        await self.registry.forget_stream(s)

    async def _drop_topic(self, t: TopicEntry) -> None:
        try:
            await self.core.execute(DeleteTopic(t.canonical))
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNKNOWN_TOPIC:
                raise
        await self.registry.forget_topic(t)

    async def get_topic(self, req: c.GetTopic) -> c.TopicDetails:
        t = await self.registry.topic(req.stream, req.topic)
        d = await self._describe(t)
        return c.TopicDetails(self._topic_record(t, d), self._partition_records(t, d))

    async def get_topics(self, req: c.GetTopics) -> list[c.TopicRecord]:
        s = await self.registry.stream(req.stream)
        await self.registry.sync()
        out = []
        for t in self.registry.topics_of(s.id):
            out.append(self._topic_record(t, await self._describe(t)))
        return out

    async def create_topic(self, req: c.CreateTopic) -> c.TopicDetails | None:
        s = await self.registry.stream(req.stream)
        dialect = self.conn.dialect
        t = await self.registry.create_topic(
            s,
            req.topic_id,
            req.name,
            req.partitions_count,
            req.expiry_us(dialect),
            req.compression_algorithm,
            req.max_topic_size,
            req.replication_factor or 1,
        )
        if dialect is c.Dialect.V06:
            d = await self._describe(t)
            return c.TopicDetails(self._topic_record(t, d), self._partition_records(t, d))
        return None

    async def delete_topic(self, req: c.DeleteTopic) -> None:
        t = await self.registry.topic(req.stream, req.topic)
        await self._drop_topic(t)

    async def create_partitions(self, req: c.CreatePartitions) -> None:
        t = await self.registry.topic(req.stream, req.topic)
        await self.core.execute(CreatePartitions(t.canonical, req.partitions_count))

    async def delete_partitions(self, req: c.DeletePartitions) -> None:
        t = await self.registry.topic(req.stream, req.topic)
        await self.core.execute(DeletePartitions(t.canonical, req.partitions_count))

    # ------------------------------------------------------------------ messages
    async def send(self, req: c.SendMessages) -> None:
        t = await self.registry.topic(req.stream, req.topic)
        p = req.partitioning
        key: bytes | None = None
        partition: int | None = None
        mode = Partitioning.ROUND_ROBIN
        if p.kind == c.PartitioningKind.PARTITION_ID:
            pid = struct.unpack("<I", p.value)[0]
            if pid == 0:
                raise IggyError(c.Status.PARTITION_NOT_FOUND, "partition 0")
            partition, mode = pid - 1, Partitioning.EXPLICIT
        elif p.kind == c.PartitioningKind.MESSAGES_KEY:
            key, mode = p.value, Partitioning.KEY_HASH
        batch = send_batch(req.messages, key, now_us())
        try:
            await self.core.execute(Produce(t.canonical, batch, partition, mode))
        except GatewayError as exc:
            if exc.code is ErrorCode.UNKNOWN_PARTITION:
                raise IggyError(c.Status.PARTITION_NOT_FOUND, exc.message) from None
            raise
        labelled(RECORDS_IN, PROTOCOL).inc(len(req.messages))

    def _consumer_group_name(self, consumer: c.Consumer) -> str:
        return f"iggy-consumer-{consumer.id.value}"

    async def _partitions(self, t: TopicEntry) -> int:
        info = await self.core.topic(t.canonical)
        return info.partitions

    async def _group_for(self, t: TopicEntry, consumer: c.Consumer) -> GroupEntry:
        if not isinstance(consumer.id.value, int):
            for g in self.registry.groups_of(t):
                if g.name == consumer.id.value:
                    return g
            raise IggyError(c.Status.CONSUMER_GROUP_NOT_FOUND, f"group {consumer.id.value!r}")
        return await self.registry.group(t, consumer.id.value)

    async def _offsets_key(
        self, t: TopicEntry, consumer: c.Consumer, partition_id: int, count: int
    ) -> tuple[str, int]:
        """(model group name, 0-based partition) for a poll or an offset command."""
        if consumer.kind == c.ConsumerKind.CONSUMER_GROUP:
            g = await self._group_for(t, consumer)
            return g.name, partition_id - 1
        if not 1 <= partition_id <= count:
            raise IggyError(c.Status.PARTITION_NOT_FOUND, f"partition {partition_id}")
        return self._consumer_group_name(consumer), partition_id - 1

    async def _member_partitions(self, g: GroupEntry, t: TopicEntry) -> list[int]:
        membership = self.memberships.get(g.name)
        if membership is None or t.canonical not in membership[1]:
            raise IggyError(
                c.Status.CONSUMER_GROUP_MEMBER_NOT_FOUND,
                f"client {self.client.client_id} is not a member of group {g.id}",
            )
        for _ in range(3):
            member_id, generation = await self._join(g, membership[0], membership[1])
            try:
                synced = await self.core.execute(SyncGroup(g.name, member_id, generation))
            except GatewayError as exc:
                if exc.code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS):
                    membership = self.memberships[g.name]
                    continue
                raise
            return [p for topic, p in synced.assignment.partitions if topic == t.canonical]
        return []

    async def poll(self, req: c.PollMessages) -> c.PolledMessages | bytes:
        """The answer object when empty, else the hand-written payload (the hot path)."""
        t = await self.registry.topic(req.stream, req.topic)
        count = await self._partitions(t)
        if count == 0:
            raise IggyError(c.Status.NO_PARTITIONS, f"topic {t.name!r} has no partitions")
        consumer = req.consumer
        if consumer.kind == c.ConsumerKind.CONSUMER_GROUP:
            g = await self._group_for(t, consumer)
            mine = await self._member_partitions(g, t)
            if not mine:
                return c.PolledMessages(0, 0)
            i = self._rr.get(g.name, 0)
            self._rr[g.name] = i + 1
            partition = sorted(mine)[i % len(mine)]
            group = g.name
        else:
            group, partition = await self._offsets_key(t, consumer, req.partition_id, count)
        topic = t.canonical
        part = await self.core.router.backend_for(topic).partition_info(topic, partition)
        start, hw = part.log_start_offset, part.high_watermark
        kind = req.kind
        if kind == c.PollingKind.OFFSET:
            offset = max(req.value, start)
        elif kind == c.PollingKind.TIMESTAMP:
            offset = (await self.core.execute(ListOffsets(topic, partition, req.value))).offset
        elif kind == c.PollingKind.FIRST:
            offset = start
        elif kind == c.PollingKind.LAST:
            offset = max(start, hw - req.count)
        else:
            committed = (await self.core.execute(FetchOffset(group, topic, partition))).offset
            offset = max(committed, start) if committed >= 0 else start
        current = max(0, hw - 1)
        if offset >= hw:
            return c.PolledMessages(partition + 1, current)
        # the answer's budget, whatever count (up to 2^32 - 1) asks for, taken from the pool
        cap, key = min(
            (self.cfg.max_answer_bytes, LIMIT), (self.cfg.max_poll_bytes, "max_poll_bytes")
        )
        budget = await AnswerBudget.take(cap, cap)
        limit = budget.limit
        if budget.key == MEMORY_LIMIT:
            key = MEMORY_LIMIT
        if not limit:  # the answer pool is empty: no messages, the client polls again
            limit_hit(key, PROTOCOL, self.log, limit_bytes=0, asked=req.count, answered=0)
            return c.PolledMessages(partition + 1, current)
        result = await self.core.execute(Fetch(topic, partition, offset, req.count, limit, 0))
        payload, n, last = poll_reply(
            topic, partition, max(0, result.high_watermark - 1), result.batches, limit
        )
        budget.spend(len(payload))
        budget.trim()
        if n < req.count and offset + n < result.high_watermark:
            limit_hit(key, PROTOCOL, self.log, limit_bytes=limit, asked=req.count, answered=n)
        if n and req.auto_commit:
            await self.core.execute(CommitOffset(group, topic, partition, last + 1))
        labelled(RECORDS_OUT, PROTOCOL).inc(n)
        return payload

    async def get_offset(self, req: c.GetConsumerOffset) -> c.ConsumerOffsetRecord | None:
        """The stored offset is the last one read (the committed offset - 1). Nothing stored
        (or a committed offset of 0: nothing read yet): the 0.6 dialect answers an empty OK, as
        Iggy 0.6 does (its SDK reads "none"); the old dialect answers a stored offset of 0, as
        the 2023 server did."""
        t = await self.registry.topic(req.stream, req.topic)
        count = await self._partitions(t)
        group, partition = await self._offsets_key(t, req.consumer, req.partition_id, count)
        if not 0 <= partition < count:
            raise IggyError(c.Status.PARTITION_NOT_FOUND, f"partition {req.partition_id}")
        part = await self.core.router.backend_for(t.canonical).partition_info(
            t.canonical, partition
        )
        committed = (await self.core.execute(FetchOffset(group, t.canonical, partition))).offset
        if committed <= 0 and self.conn.dialect is c.Dialect.V06:
            return None
        return c.ConsumerOffsetRecord(
            partition + 1, max(0, part.high_watermark - 1), max(0, committed - 1)
        )

    async def store_offset(self, req: c.StoreConsumerOffset) -> None:
        t = await self.registry.topic(req.stream, req.topic)
        count = await self._partitions(t)
        group, partition = await self._offsets_key(t, req.consumer, req.partition_id, count)
        if not 0 <= partition < count:
            raise IggyError(c.Status.PARTITION_NOT_FOUND, f"partition {req.partition_id}")
        part = await self.core.router.backend_for(t.canonical).partition_info(
            t.canonical, partition
        )
        if req.offset > max(0, part.high_watermark - 1):
            raise IggyError(c.Status.INVALID_OFFSET, f"offset {req.offset} beyond the log")
        await self.core.execute(CommitOffset(group, t.canonical, partition, req.offset + 1))

    # ------------------------------------------------------------------ consumer groups
    async def _group(
        self,
        req: c.GetConsumerGroup
        | c.DeleteConsumerGroup
        | c.JoinConsumerGroup
        | c.LeaveConsumerGroup,
    ) -> tuple[TopicEntry, GroupEntry]:
        t = await self.registry.topic(req.stream, req.topic)
        return t, await self.registry.group(t, req.group_id)

    def _members_of(
        self, g: GroupEntry, t: TopicEntry, desc: GroupDescription
    ) -> list[tuple[int, tuple[int, ...]]]:
        out = []
        for m in desc.members:
            parts = tuple(sorted(p + 1 for topic, p in m.partitions if topic == t.canonical))
            topics = self.state.member_topics.get(m.member_id)
            if topics is not None and t.canonical not in topics:
                continue
            if topics is None and not parts:
                continue
            client_id = self.state.member_client.get(m.member_id)
            if client_id is None:
                client_id = zlib.crc32(m.member_id.encode()) & 0x7FFFFFFF
            out.append((client_id, parts))
        return sorted(out)

    async def get_group(self, req: c.GetConsumerGroup) -> c.GroupDetails:
        t, g = await self._group(req)
        desc = await self.core.execute(DescribeGroup(g.name))
        members = self._members_of(g, t, desc)
        count = await self._partitions(t)
        return c.GroupDetails(c.GroupRecord(g.id, count, len(members)), tuple(members))

    async def get_groups(self, req: c.GetConsumerGroups) -> list[c.GroupRecord]:
        t = await self.registry.topic(req.stream, req.topic)
        count = await self._partitions(t)
        out = []
        for g in self.registry.groups_of(t):
            desc = await self.core.execute(DescribeGroup(g.name))
            out.append(c.GroupRecord(g.id, count, len(self._members_of(g, t, desc))))
        return out

    async def create_group(self, req: c.CreateConsumerGroup) -> None:
        t = await self.registry.topic(req.stream, req.topic)
        await self.registry.create_group(t, req.group_id)

    async def delete_group(self, req: c.DeleteConsumerGroup) -> None:
        t, g = await self._group(req)
        membership = self.memberships.get(g.name)
        if membership is not None and t.canonical in membership[1]:
            await self._leave(g, t)
        await self.registry.delete_group(g)

    async def _join(self, g: GroupEntry, member_id: str, topics: set[str]) -> tuple[str, int]:
        """Join (or refresh) this connection's member of ``g`` for ``topics``; (member id,
        generation). A member the coordinator forgot joins again as a new one."""
        try:
            joined = await self.core.execute(
                JoinGroup(g.name, tuple(sorted(topics)), member_id, GROUP_SESSION_TIMEOUT_MS)
            )
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNKNOWN_MEMBER:
                raise
            joined = await self.core.execute(
                JoinGroup(g.name, tuple(sorted(topics)), "", GROUP_SESSION_TIMEOUT_MS)
            )
        if joined.member_id != member_id:
            self.state.member_client.pop(member_id, None)
            self.state.member_topics.pop(member_id, None)
        self.memberships[g.name] = (joined.member_id, topics)
        self.state.member_client[joined.member_id] = self.client.client_id
        self.state.member_topics[joined.member_id] = topics
        return joined.member_id, joined.generation

    async def join_group(self, req: c.JoinConsumerGroup) -> None:
        t, g = await self._group(req)
        member_id, topics = self.memberships.get(g.name, ("", set()))
        topics = set(topics) | {t.canonical}
        await self._join(g, member_id, topics)
        self.client.groups.add((g.id, t.id, t.stream_id))

    async def _leave(self, g: GroupEntry, t: TopicEntry) -> None:
        member_id, topics = self.memberships[g.name]
        topics = set(topics) - {t.canonical}
        self.client.groups.discard((g.id, t.id, t.stream_id))
        if topics:
            await self._join(g, member_id, topics)
            return
        del self.memberships[g.name]
        self.state.member_client.pop(member_id, None)
        self.state.member_topics.pop(member_id, None)
        try:
            await self.core.execute(LeaveGroup(g.name, member_id))
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNKNOWN_MEMBER:
                raise

    async def leave_group(self, req: c.LeaveConsumerGroup) -> None:
        t, g = await self._group(req)
        membership = self.memberships.get(g.name)
        if membership is None or t.canonical not in membership[1]:
            raise IggyError(c.Status.CONSUMER_GROUP_MEMBER_NOT_FOUND, f"not in group {g.id}")
        await self._leave(g, t)


# ----------------------------------------------------------------------------- connection


async def handle_connection(stream: trio.abc.Stream, ctx: ConnectionContext) -> None:
    """Serve one Iggy connection until the peer closes, a frame is undecodable (closed without
    an error frame, like the reference server) or the gateway drains. Idle and read timeouts
    are the server's (its stream wrapper)."""
    await drive(stream, ctx, IggyConnectionSession(ctx))


class IggyConnectionSession:
    """The driver's session for Iggy: whole frames in order (the driver's framing is the
    codec's ``next_frame``), decoded here so that a request failing validation is answered
    with its status instead of closing the connection."""

    receive_bytes = RECEIVE_BYTES

    def __init__(self, ctx: ConnectionContext) -> None:
        self.session = IggySession(ctx)
        self.framing = self
        self.receive_data = self.session.conn.receive_data
        self.next_request = self.session.conn.next_frame

    @property
    def buffered(self) -> int:
        return self.session.conn.buffered

    async def handle(self, frame: c.RawRequest, io: Connection) -> bool:
        session = self.session
        try:
            req = session.conn.decode(frame)
        except c.ValidationError as exc:
            out = session.error("validate", exc.status, str(exc))
        else:
            if type(req) is c.PollMessages:
                with holding():  # the answer's share of the pool, given back once it is sent
                    await io.send(await session.handle(req))
                return True
            out = await session.handle(req)
        await io.send(out)
        return True

    async def close(self) -> None:
        await self.session.close()
