"""Iggy's streams, topics and consumer groups on the gateway's canonical topics.

Naming rule (docs/protocols/iggy.md; configurable): stream ``default_stream`` (``default``)
holds the undotted canonical names; stream ``s`` topic ``t`` is the canonical topic ``s.t``
(split at the first ``stream_separator``). Stream names may not contain the separator, nor may
topic names of the default stream, so the mapping is one to one.

Numeric ids are durable: they live in the key-value store of the default backend (namespace
``iggy``) as JSON, so a restart or a second gateway on the same backend sees the same ids.
Canonical topics created through other protocols get ids on first sight (``sync``), as do the
streams they imply. Iggy streams without topics exist only here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import trio

from gateway.core.view import CoreView
from gateway.model import CreateTopic, ErrorCode, GatewayError, ListTopics, now_us
from gateway.protocols.iggy.codec import Identifier, Status

NS = "iggy"


class IggyError(Exception):
    """A request failed with Iggy status ``status``."""

    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(message or str(status))
        self.status = status


@dataclass
class StreamEntry:
    id: int
    name: str
    created_at: int


@dataclass
class TopicEntry:
    stream_id: int
    id: int
    name: str
    canonical: str
    created_at: int
    expiry_us: int = 0
    compression: int = 1
    max_size: int = 0
    replication: int = 1


@dataclass
class GroupEntry:
    canonical: str
    id: int
    name: str
    created_at: int


class Registry:
    def __init__(
        self, core: CoreView, default_stream: str = "default", separator: str = "."
    ) -> None:
        self.core = core
        self.default_stream = default_stream
        self.sep = separator
        self.lock = trio.Lock()
        self.streams: dict[int, StreamEntry] = {}
        self.topics: dict[tuple[int, int], TopicEntry] = {}
        self.groups: dict[tuple[str, int], GroupEntry] = {}
        self._loaded = False
        self._kv_ok = True

    # ------------------------------------------------------------------ kv
    @property
    def _kv(self) -> Any:
        return self.core.router.default_backend

    async def _put(self, key: str, obj: Any) -> None:
        if self._kv_ok:
            try:
                await self._kv.kv_put(NS, key, json.dumps(asdict(obj)).encode())
            except GatewayError as exc:
                if exc.code is not ErrorCode.UNSUPPORTED:
                    raise
                self._kv_ok = False

    async def _delete(self, key: str) -> None:
        if self._kv_ok:
            try:
                await self._kv.kv_delete(NS, key)
            except GatewayError as exc:
                if exc.code is not ErrorCode.UNSUPPORTED:
                    raise
                self._kv_ok = False

    async def load(self) -> None:
        """(Re)read every entry from the store."""
        if not self._kv_ok:
            return
        try:
            rows = await self._kv.kv_scan(NS, "")
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNSUPPORTED:
                raise
            self._kv_ok = False
            return
        streams, topics, groups = {}, {}, {}
        for key, raw in rows:
            data = json.loads(raw)
            if key.startswith("stream/"):
                s = StreamEntry(**data)
                streams[s.id] = s
            elif key.startswith("topic/"):
                t = TopicEntry(**data)
                topics[(t.stream_id, t.id)] = t
            elif key.startswith("group/"):
                g = GroupEntry(**data)
                groups[(g.canonical, g.id)] = g
        self.streams, self.topics, self.groups = streams, topics, groups
        self._loaded = True

    # ------------------------------------------------------------------ naming
    def canonical(self, stream: str, topic: str) -> str:
        return topic if stream == self.default_stream else f"{stream}{self.sep}{topic}"

    def split(self, canonical: str) -> tuple[str, str]:
        if self.sep not in canonical:
            return self.default_stream, canonical
        stream, topic = canonical.split(self.sep, 1)
        return stream, topic

    def check_stream_name(self, name: str) -> None:
        if self.sep in name:
            raise IggyError(
                Status.INVALID_STREAM_NAME, f"stream names may not contain {self.sep!r}"
            )

    def check_topic_name(self, stream: StreamEntry, name: str) -> None:
        if stream.name == self.default_stream and self.sep in name:
            raise IggyError(
                Status.INVALID_TOPIC_NAME,
                f"topics of stream {self.default_stream!r} may not contain {self.sep!r}",
            )

    # ------------------------------------------------------------------ sync
    async def sync(self) -> None:
        """Reload, then give ids to canonical topics (and their streams) seen for the first time
        and forget topics that no longer exist."""
        async with self.lock:
            await self.load()
            infos = await self.core.execute(ListTopics())
            names = {i.name for i in infos}
            by_canonical = {t.canonical: t for t in self.topics.values()}
            for key, t in list(self.topics.items()):
                if t.canonical not in names:
                    del self.topics[key]
                    await self._delete(f"topic/{t.stream_id}/{t.id}")
            for name in sorted(names - by_canonical.keys()):
                stream_name, topic_name = self.split(name)
                if stream_name != self.default_stream and not stream_name:
                    continue
                stream = self._stream_by_name(stream_name)
                if stream is None:
                    stream = StreamEntry(self._next_stream_id(), stream_name, now_us())
                    self.streams[stream.id] = stream
                    await self._put(f"stream/{stream.id}", stream)
                if self._topic_by_name(stream.id, topic_name) is not None:
                    continue
                t = TopicEntry(
                    stream.id, self._next_topic_id(stream.id), topic_name, name, now_us()
                )
                self.topics[(stream.id, t.id)] = t
                await self._put(f"topic/{t.stream_id}/{t.id}", t)
            self._loaded = True

    async def ensure_loaded(self) -> None:
        if not self._loaded:
            await self.sync()

    def _next_stream_id(self) -> int:
        return max(self.streams, default=0) + 1

    def _next_topic_id(self, stream_id: int) -> int:
        return max((tid for sid, tid in self.topics if sid == stream_id), default=0) + 1

    def _stream_by_name(self, name: str) -> StreamEntry | None:
        for s in self.streams.values():
            if s.name == name:
                return s
        return None

    def _topic_by_name(self, stream_id: int, name: str) -> TopicEntry | None:
        for (sid, _), t in self.topics.items():
            if sid == stream_id and t.name == name:
                return t
        return None

    # ------------------------------------------------------------------ lookups
    def _find_stream(self, ident: Identifier) -> StreamEntry | None:
        if isinstance(ident.value, int):
            return self.streams.get(ident.value)
        return self._stream_by_name(ident.value)

    async def stream(self, ident: Identifier) -> StreamEntry:
        await self.ensure_loaded()
        s = self._find_stream(ident)
        if s is None:
            await self.sync()
            s = self._find_stream(ident)
        if s is None:
            if isinstance(ident.value, int):
                raise IggyError(Status.STREAM_ID_NOT_FOUND, f"stream {ident.value} not found")
            raise IggyError(Status.STREAM_NAME_NOT_FOUND, f"stream {ident.value!r} not found")
        return s

    def _find_topic(self, stream: StreamEntry, ident: Identifier) -> TopicEntry | None:
        if isinstance(ident.value, int):
            return self.topics.get((stream.id, ident.value))
        return self._topic_by_name(stream.id, ident.value)

    async def topic(self, stream_ident: Identifier, ident: Identifier) -> TopicEntry:
        stream = await self.stream(stream_ident)
        t = self._find_topic(stream, ident)
        if t is None:
            await self.sync()
            t = self._find_topic(stream, ident)
        if t is None:
            if isinstance(ident.value, int):
                raise IggyError(Status.TOPIC_ID_NOT_FOUND, f"topic {ident.value} not found")
            raise IggyError(Status.TOPIC_NAME_NOT_FOUND, f"topic {ident.value!r} not found")
        return t

    def topics_of(self, stream_id: int) -> list[TopicEntry]:
        return sorted(
            (t for (sid, _), t in self.topics.items() if sid == stream_id), key=lambda t: t.id
        )

    # ------------------------------------------------------------------ changes
    async def create_stream(self, stream_id: int, name: str) -> StreamEntry:
        self.check_stream_name(name)
        await self.ensure_loaded()
        async with self.lock:
            if stream_id and stream_id in self.streams:
                raise IggyError(Status.STREAM_ID_ALREADY_EXISTS, f"stream {stream_id} exists")
            if self._stream_by_name(name) is not None:
                raise IggyError(Status.STREAM_NAME_ALREADY_EXISTS, f"stream {name!r} exists")
            entry = StreamEntry(stream_id or self._next_stream_id(), name, now_us())
            self.streams[entry.id] = entry
            await self._put(f"stream/{entry.id}", entry)
            return entry

    async def forget_stream(self, stream: StreamEntry) -> None:
        async with self.lock:
            self.streams.pop(stream.id, None)
            await self._delete(f"stream/{stream.id}")

    async def create_topic(
        self,
        stream: StreamEntry,
        topic_id: int,
        name: str,
        partitions: int,
        expiry_us: int,
        compression: int = 1,
        max_size: int = 0,
        replication: int = 1,
    ) -> TopicEntry:
        self.check_topic_name(stream, name)
        async with self.lock:
            if topic_id and (stream.id, topic_id) in self.topics:
                raise IggyError(Status.TOPIC_ID_ALREADY_EXISTS, f"topic {topic_id} exists")
            if self._topic_by_name(stream.id, name) is not None:
                raise IggyError(Status.TOPIC_NAME_ALREADY_EXISTS, f"topic {name!r} exists")
            canonical = self.canonical(stream.name, name)
            config: tuple[tuple[str, str], ...] = ()
            if expiry_us:
                config = (("retention_ms", str(max(1, expiry_us // 1000))),)
            try:
                await self.core.execute(CreateTopic(canonical, partitions, config))
            except GatewayError as exc:
                if exc.code is ErrorCode.TOPIC_EXISTS:
                    raise IggyError(Status.TOPIC_NAME_ALREADY_EXISTS, exc.message) from None
                if exc.code is ErrorCode.INVALID_TOPIC:
                    raise IggyError(Status.INVALID_TOPIC_NAME, exc.message) from None
                raise
            entry = TopicEntry(
                stream.id,
                topic_id or self._next_topic_id(stream.id),
                name,
                canonical,
                now_us(),
                expiry_us,
                compression,
                max_size,
                replication,
            )
            self.topics[(stream.id, entry.id)] = entry
            await self._put(f"topic/{entry.stream_id}/{entry.id}", entry)
            return entry

    async def forget_topic(self, t: TopicEntry) -> None:
        async with self.lock:
            self.topics.pop((t.stream_id, t.id), None)
            await self._delete(f"topic/{t.stream_id}/{t.id}")
            for key in [k for k in self.groups if k[0] == t.canonical]:
                del self.groups[key]
                await self._delete(f"group/{key[0]}/{key[1]}")

    # ------------------------------------------------------------------ groups
    def groups_of(self, t: TopicEntry) -> list[GroupEntry]:
        return sorted(
            (g for (c, _), g in self.groups.items() if c == t.canonical), key=lambda g: g.id
        )

    async def group(self, t: TopicEntry, group_id: int) -> GroupEntry:
        g = self.groups.get((t.canonical, group_id))
        if g is None:
            await self.load()
            g = self.groups.get((t.canonical, group_id))
        if g is None:
            raise IggyError(Status.CONSUMER_GROUP_NOT_FOUND, f"consumer group {group_id}")
        return g

    async def create_group(self, t: TopicEntry, group_id: int, name: str = "") -> GroupEntry:
        async with self.lock:
            if (t.canonical, group_id) in self.groups:
                raise IggyError(Status.CONSUMER_GROUP_ALREADY_EXISTS, f"group {group_id}")
            g = GroupEntry(t.canonical, group_id, name or str(group_id), now_us())
            self.groups[(t.canonical, group_id)] = g
            await self._put(f"group/{t.canonical}/{group_id}", g)
            return g

    async def delete_group(self, g: GroupEntry) -> None:
        async with self.lock:
            self.groups.pop((g.canonical, g.id), None)
            await self._delete(f"group/{g.canonical}/{g.id}")

    def all_groups(self) -> Iterable[GroupEntry]:
        return self.groups.values()
