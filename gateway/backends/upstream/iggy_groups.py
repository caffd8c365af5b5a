"""The Iggy broker's own consumer groups for an upstream Iggy backend.

An Iggy group member is a client connection: JOIN_CONSUMER_GROUP makes the connection a member,
the server assigns the topic's partitions over its members, and the member leaves with
LEAVE_CONSUMER_GROUP or by closing the connection. So each member of this gateway holds one
connection of its own to the broker (``max_group_connections`` of them at most), and the
broker's GET_CONSUMER_GROUP is the group's truth for every gateway on it.

Mapping onto the model's groups:

- the Iggy group id is derived from the group name (CRC-32, never 0), the same on every gateway,
  and the group is created on first join (CREATE_CONSUMER_GROUP; one that exists is used);
- a member is known to the broker by its connection's client id (GET_ME);
- Iggy groups have no generation: the generation is derived from the broker's member list and
  assignment (a CRC-32), so a change of either is a rebalance that fences stale heartbeats and
  syncs as the model expects;
- Iggy members have no session timeout: a member of this gateway whose client sent no join,
  sync or heartbeat for its session timeout is dropped here (its connection closed, so the
  broker drops it too), checked every second.
"""

from __future__ import annotations

import time
import uuid
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from gateway.backends.upstream.iggy_status import status_error
from gateway.model import (
    ErrorCode,
    GatewayError,
    GroupDescription,
    JoinGroupResult,
    MemberAssignment,
    SyncGroupResult,
)
from gateway.observability import limit_hit
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyClient, IggyStatusError

log = structlog.get_logger("gateway.backends.upstream")

S = c.Status


def group_id(name: str) -> int:
    """The Iggy group id of the model group ``name`` (u32, never 0)."""
    return (zlib.crc32(name.encode()) & 0x7FFFFFFF) or 1


def fingerprint(members: tuple[tuple[int, tuple[int, ...]], ...]) -> int:
    """The generation of an Iggy group: changes whenever its members or assignment do."""
    return (zlib.crc32(repr(sorted(members)).encode()) & 0x7FFFFFFF) or 1


@dataclass
class Held:
    """One member of this gateway: its own connection to the broker."""

    group: str
    topic: str
    client: IggyClient
    client_id: int
    session_timeout_ms: int
    seen: float = field(default_factory=time.monotonic)
    lock: trio.Lock = field(default_factory=trio.Lock)


class IggyGroups:
    """The members this gateway holds in the broker's groups (see the module docstring)."""

    def __init__(
        self,
        backend_name: str,
        connect: Callable[[], Awaitable[IggyClient]],
        split: Callable[[str], tuple[str, str]],
        max_connections: int,
        connect_timeout: float = 3.0,
        request_timeout: float = 10.0,
    ) -> None:
        self.backend_name = backend_name
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._connect = connect
        self._split = split
        self.max_connections = max_connections
        self._held: dict[tuple[str, str], Held] = {}  # (group, member id) -> its connection

    def _ids(self, topic: str, group: str) -> tuple[c.Identifier, c.Identifier, int]:
        stream, name = self._split(topic)
        return c.Identifier(stream), c.Identifier(name), group_id(group)

    @staticmethod
    def _mapped(exc: IggyStatusError, what: str) -> GatewayError:

        if exc.status == S.CONSUMER_GROUP_MEMBER_NOT_FOUND:
            return GatewayError(ErrorCode.UNKNOWN_MEMBER, f"{what}: not a member")
        if exc.status == S.CONSUMER_GROUP_NOT_FOUND:
            return GatewayError(ErrorCode.UNKNOWN_GROUP, f"{what}: no such group")
        return status_error(exc, what)

    async def _call(self, client: IggyClient, request: c.Request, what: str) -> Any:
        try:
            with trio.fail_after(self.request_timeout):
                return await client.call(request)
        except trio.TooSlowError:
            raise GatewayError(ErrorCode.TIMEOUT, f"{what}: no answer from Iggy") from None
        except IggyStatusError as exc:
            raise self._mapped(exc, what) from None
        except (OSError, EOFError, trio.BrokenResourceError, c.RemoteProtocolError) as exc:
            raise GatewayError(
                ErrorCode.BACKEND_UNAVAILABLE, f"{what}: Iggy upstream {exc}"
            ) from None

    async def _members(
        self, client: IggyClient, topic: str, group: str
    ) -> tuple[tuple[int, tuple[int, ...]], ...]:
        stream, name, gid = self._ids(topic, group)
        details = await self._call(client, c.GetConsumerGroup(stream, name, gid), f"group {group}")
        return tuple((int(m), tuple(int(p) for p in parts)) for m, parts in details.members)

    async def _drop(self, key: tuple[str, str]) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            with trio.CancelScope(shield=True):
                try:
                    await held.client.aclose()
                except (OSError, trio.BrokenResourceError):
                    pass

    async def sweep(self) -> None:
        """Drop the members whose client has been silent for its session timeout."""
        now = time.monotonic()
        for key, held in list(self._held.items()):
            if now - held.seen > held.session_timeout_ms / 1000:
                log.info("group_member_expired", backend=self.backend_name, member=key[1])
                await self._drop(key)

    async def run(self) -> None:
        while True:
            await trio.sleep(1)
            await self.sweep()

    async def aclose(self) -> None:
        for key in list(self._held):
            await self._drop(key)

    # ------------------------------------------------------------------ the group operations
    async def join(
        self, group: str, topics: tuple[str, ...], member_id: str, session_timeout_ms: int
    ) -> JoinGroupResult:
        if len(topics) != 1:
            raise GatewayError(
                ErrorCode.INVALID_REQUEST,
                f"group {group!r}: an Iggy group reads one topic, not {len(topics)}",
            )
        topic = topics[0]
        await self.sweep()
        key = (group, member_id)
        held = self._held.get(key) if member_id else None
        if held is not None and held.topic != topic:
            await self._drop(key)
            held = None
        if held is None:
            held = await self._new_member(group, topic, session_timeout_ms)
            key = (group, member_id or f"{group}-{uuid.uuid4().hex[:12]}")
            self._held[key] = held
        held.seen = time.monotonic()
        held.session_timeout_ms = session_timeout_ms
        desc = await self.describe(group, topic)
        members = tuple(m.member_id for m in desc.members) or (key[1],)
        return JoinGroupResult(group, key[1], desc.generation, members[0], members)

    async def _new_member(self, group: str, topic: str, session_timeout_ms: int) -> Held:
        if len(self._held) >= self.max_connections:
            limit_hit("max_group_connections", "iggy", log, backend=self.backend_name)
            raise GatewayError(
                ErrorCode.INVALID_REQUEST,
                f"the gateway holds {len(self._held)} members in the Iggy broker's groups, the "
                f"most allowed (backends.{self.backend_name}.max_group_connections)",
            )
        try:
            with trio.fail_after(self.connect_timeout):
                client = await self._connect()
        except (OSError, trio.TooSlowError) as exc:
            raise GatewayError(
                ErrorCode.BACKEND_UNAVAILABLE, f"Iggy upstream unreachable: {exc!r}"
            ) from None
        try:
            stream, name, gid = self._ids(topic, group)
            try:
                await client.call(c.CreateConsumerGroup(stream, name, gid))
            except IggyStatusError as exc:
                if exc.status != S.CONSUMER_GROUP_ALREADY_EXISTS:  # one that exists is used
                    raise self._mapped(exc, f"create group {group}") from None
            await self._call(client, c.JoinConsumerGroup(stream, name, gid), f"join {group}")
            me = await self._call(client, c.GetMe(), "get me")
        except BaseException:
            with trio.CancelScope(shield=True):
                await client.aclose()
            raise
        return Held(group, topic, client, int(me.client_id), session_timeout_ms)

    def _held_of(self, group: str, member_id: str) -> Held:
        held = self._held.get((group, member_id))
        if held is None:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        held.seen = time.monotonic()
        return held

    async def sync(self, group: str, member_id: str, generation: int) -> SyncGroupResult:
        held = self._held_of(group, member_id)
        desc = await self.describe(group, held.topic)
        if generation != desc.generation:
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's current {desc.generation}",
            )
        for m in desc.members:
            if m.member_id == member_id:
                return SyncGroupResult(m)
        raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")

    async def heartbeat(self, group: str, member_id: str, generation: int) -> None:
        held = self._held_of(group, member_id)
        desc = await self.describe(group, held.topic)
        if member_id not in {m.member_id for m in desc.members}:
            await self._drop((group, member_id))
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        if generation != desc.generation:
            raise GatewayError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {group!r} rebalanced: join again"
            )

    async def leave(self, group: str, member_id: str) -> None:
        held = self._held_of(group, member_id)
        stream, name, gid = self._ids(held.topic, group)
        try:
            async with held.lock:
                await self._call(held.client, c.LeaveConsumerGroup(stream, name, gid), "leave")
        finally:
            await self._drop((group, member_id))

    async def describe(self, group: str, topic: str | None = None) -> GroupDescription:
        """The broker's group, this gateway's members under their model ids."""
        await self.sweep()
        mine = {h.client_id: mid for (g, mid), h in self._held.items() if g == group}
        if topic is None:
            topic = next((h.topic for (g, _), h in self._held.items() if g == group), None)
        if topic is None:
            return GroupDescription(group, "empty", 0, ())
        held = next((h for (g, _), h in self._held.items() if g == group), None)
        if held is None:
            return GroupDescription(group, "empty", 0, ())
        async with held.lock:
            members = await self._members(held.client, topic, group)
        out = tuple(
            MemberAssignment(
                mine.get(client_id, f"iggy-client-{client_id}"),
                tuple((topic, p - 1) for p in sorted(parts)),
            )
            for client_id, parts in members
        )
        state = "stable" if out else "empty"
        return GroupDescription(
            group,
            state,
            fingerprint(members),
            tuple(sorted(out, key=lambda m: m.member_id)),
            (topic,),
        )
