"""The Backend interface: what the core needs from a storage system.

Backends are async and trio-native. They take and return :class:`RecordBatch` objects (never
per-record calls), declare what they can do in :class:`Capabilities`, and raise
:class:`GatewayError` with a canonical code. An operation a backend cannot do raises
``ErrorCode.UNSUPPORTED`` (the default implementations below do exactly that), so the conformance
suite can assert it instead of skipping.

Offsets follow the model: dense, 0-based per partition; ``append`` returns the first and last
offset given to the batch; ``read`` returns batch windows starting exactly at the requested offset.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import trio

from gateway.model import (
    AppendResult,
    ErrorCode,
    GatewayError,
    GroupDescription,
    JoinGroupResult,
    PartitionInfo,
    Record,
    RecordBatch,
    SyncGroupResult,
    TopicInfo,
)

AppendListener = Callable[[str, int, int], None]
"""Called with (topic, partition, new high watermark) after records become readable."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    headers: bool = True
    timestamps: bool = True
    keys: bool = True
    topic_admin: bool = True
    delete_partitions: bool = True
    offset_for_timestamp: bool = True
    kv_store: bool = True
    durable: bool = False
    retention: bool = False
    """True when topics honour ``retention_bytes`` / ``retention_ms`` (per-topic config keys, as
    strings) and ``enforce_retention`` applies them now."""
    notifies_appends: bool = True
    """True when every append becomes visible through ``append_listener`` (local backends).
    False: the core's waiters poll ``partition_info`` instead."""
    delete_topics: bool | None = None
    """Whether topics can be deleted; None: as ``topic_admin`` (which covers both deleting
    topics and adding partitions where a backend has both or neither)."""
    create_topics: bool = True
    """True when ``create_topic`` makes a topic with the asked partition count (False: topics
    are made outside the gateway, e.g. a Kafka 0.8 cluster's admin tools)."""
    committed_offsets: bool = True
    """True when committed offsets (key-value namespace ``offsets``) are stored, with their
    metadata: through ``kv_store``, or the upstream protocol's own offset store."""
    exact_committed_offsets: bool = True
    """False where the upstream's offset store holds less than a committed offset (an Iggy
    upstream stores the last offset read, nothing else): metadata reads back as "", and an
    offset of 0 (nothing read yet) reads back as none (-1)."""
    dense_offsets: bool = True
    """True when every offset below the high watermark holds a record. False (a Kafka cluster:
    transaction markers, aborted and compacted records): a read may start after the offset asked
    for and return several batches with gaps between them."""
    shared_groups: bool = False
    """True when several gateway processes can coordinate consumer groups through this backend's
    key-value store: ``kv_get_revision`` / ``kv_put_if`` compare-and-set on an entry's revision.
    The core then keeps group membership in the store instead of in the process."""
    groups: str = "gateway"
    """Who runs consumer-group membership on this backend's topics: ``"gateway"`` (the core's
    coordinator: in the process, or in the key-value store with ``shared_groups``),
    ``"backend"`` (the backend's own server, through the ``group_*`` methods: an upstream
    broker's groups, so every gateway on it sees one group) or ``"none"`` (nothing several
    gateways could share: joins are refused; committed offsets still work)."""


def unsupported(what: str, backend: str) -> GatewayError:
    return GatewayError(ErrorCode.UNSUPPORTED, f"backend {backend!r} does not support {what}")


class Backend(abc.ABC):
    """One configured storage system. ``name`` is its key in the ``[backends]`` config table."""

    capabilities: Capabilities = Capabilities()  # a backend may narrow it per instance
    type_name: ClassVar[str] = ""

    def __init__(self, name: str) -> None:
        self.name = name
        self.append_listener: AppendListener | None = None

    # ------------------------------------------------------------------ lifecycle
    async def open(self, nursery: trio.Nursery) -> None:  # noqa: B027 - optional hook
        """Connect / recover. Background tasks (fsync timers, reconnects) go into ``nursery``."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Flush and release everything; background tasks must end."""

    async def flush(self) -> None:  # noqa: B027 - optional hook
        """Make every acknowledged append durable under the configured policy."""

    async def health(self) -> tuple[bool, str]:
        """(reachable, reason) for /readyz."""
        return True, "ok"

    def describe(self) -> dict[str, Any]:
        """Static facts for the status page."""
        return {"name": self.name, "type": self.type_name}

    def stored_form(self, record: Record) -> Record:
        """What a read returns for ``record`` once appended (offset aside). Backends that keep
        every field return it as it is; a backend whose storage cannot carry a field (an
        upstream protocol without headers, say) says here exactly how the record degrades,
        and the conformance suite holds it to that."""
        return record

    def _appended(self, topic: str, partition: int, high_watermark: int) -> None:
        if self.append_listener is not None:
            self.append_listener(topic, partition, high_watermark)

    # ------------------------------------------------------------------ topics
    @abc.abstractmethod
    async def create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...] = ()
    ) -> TopicInfo:
        """Raises TOPIC_EXISTS, INVALID_TOPIC, INVALID_PARTITIONS."""

    async def delete_topic(self, name: str) -> None:
        raise unsupported("deleting topics", self.name)

    @abc.abstractmethod
    async def list_topics(self) -> list[TopicInfo]: ...

    @abc.abstractmethod
    async def topic(self, name: str) -> TopicInfo:
        """Raises UNKNOWN_TOPIC."""

    async def create_partitions(self, name: str, count: int) -> TopicInfo:
        raise unsupported("adding partitions", self.name)

    async def delete_partitions(self, name: str, count: int) -> TopicInfo:
        raise unsupported("deleting partitions", self.name)

    # ------------------------------------------------------------------ data
    @abc.abstractmethod
    async def append(
        self,
        topic: str,
        partition: int,
        batch: RecordBatch,
        expected_offset: int | None = None,
    ) -> AppendResult:
        """Store ``batch`` at the end of the partition. Returns once it is acknowledged-durable
        under the backend's policy. Raises UNKNOWN_TOPIC / UNKNOWN_PARTITION.

        With ``expected_offset`` the append happens only if the partition's next offset (where
        the batch's first record would go) is exactly that; otherwise it raises OFFSET_MISMATCH
        (see :func:`offset_mismatch`) having appended nothing, also for an empty batch. The
        check must not be separable from the append: in one critical section (local logs), a
        conditional write of the storage system (JetStream), or under ``AppendGate.exclusive``
        where the storage has neither."""

    @abc.abstractmethod
    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        """Batches from ``offset``, at most ``max_records`` records, stopping once ``max_bytes``
        is reached but always returning at least one batch when data exists. With dense offsets
        the first window starts exactly at ``offset``; otherwise at the first record at or after
        it, each batch a dense window (gaps fall between batches). ``offset == high watermark``
        gives ``[]``. Raises OFFSET_OUT_OF_RANGE outside ``[log start, high watermark]``."""

    @abc.abstractmethod
    async def partition_info(self, topic: str, partition: int) -> PartitionInfo: ...

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp_us: int) -> int:
        """The first offset whose timestamp is >= ``timestamp_us``; the high watermark if none."""
        raise unsupported("offset lookup by timestamp", self.name)

    async def enforce_retention(self) -> None:
        """Apply retention now (backends with retention also do it periodically)."""
        raise unsupported("retention", self.name)

    # ------------------------------------------------------------------ key-value store
    async def kv_get(self, namespace: str, key: str) -> bytes | None:
        raise unsupported("a key-value store", self.name)

    async def kv_put(self, namespace: str, key: str, value: bytes) -> None:
        raise unsupported("a key-value store", self.name)

    async def kv_delete(self, namespace: str, key: str) -> None:
        raise unsupported("a key-value store", self.name)

    async def kv_scan(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        raise unsupported("a key-value store", self.name)

    async def kv_get_revision(self, namespace: str, key: str) -> tuple[bytes | None, int]:
        """(value, revision) of an entry; revision 0 when it never existed. Backends with
        ``shared_groups`` only."""
        raise unsupported("compare-and-set in its key-value store", self.name)

    async def kv_put_if(self, namespace: str, key: str, value: bytes, revision: int) -> int | None:
        """Write ``value`` only if the entry is still at ``revision`` (0: does not exist yet).
        Returns the new revision, or None when another writer changed it first."""
        raise unsupported("compare-and-set in its key-value store", self.name)

    # ------------------------------------------------------------------ groups (groups="backend")
    async def group_join(
        self, group: str, topics: tuple[str, ...], member_id: str, session_timeout_ms: int
    ) -> JoinGroupResult:
        """Join (or rejoin) ``member_id`` (empty: a new member; its id is picked) to the
        server's group; the answer names the member as the caller knows it."""
        raise unsupported("consumer groups", self.name)

    async def group_sync(self, group: str, member_id: str, generation: int) -> SyncGroupResult:
        raise unsupported("consumer groups", self.name)

    async def group_heartbeat(self, group: str, member_id: str, generation: int) -> None:
        raise unsupported("consumer groups", self.name)

    async def group_leave(self, group: str, member_id: str) -> None:
        raise unsupported("consumer groups", self.name)

    async def group_describe(self, group: str) -> GroupDescription:
        """The server's view of the group (members of this gateway under the ids it gave)."""
        raise unsupported("consumer groups", self.name)


def offset_mismatch(topic: str, partition: int, expected: int, actual: int) -> GatewayError:
    """The error of a conditional append that found the next offset elsewhere."""
    return GatewayError(
        ErrorCode.OFFSET_MISMATCH,
        f"{topic}/{partition}: the next offset is {actual}, the append expected {expected}",
    )


def landed_elsewhere(topic: str, partition: int, expected: int, base: int) -> GatewayError:
    """A conditional append that passed the check but whose records the storage put at
    ``base``: a writer outside this gateway appended in between (possible only where the
    storage has no conditional append). Not OFFSET_MISMATCH: the records *are* stored."""
    return GatewayError(
        ErrorCode.INTERNAL,
        f"{topic}/{partition}: the append expected offset {expected} but was stored at {base} "
        "(a writer outside this gateway appended in between)",
    )


class _GateState:
    __slots__ = ("shared", "exclusive", "waiting", "changed")

    def __init__(self) -> None:
        self.shared = 0
        self.exclusive = False
        self.waiting = 0  # exclusive holders waiting: new shared holders queue behind them
        self.changed = trio.Event()

    def notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


class AppendGate:
    """Per-(topic, partition) shared/exclusive gate for backends whose storage has no
    conditional append (Kafka, most upstream protocols). Plain appends hold it shared, so they
    still run concurrently (pipelined produces keep their throughput); a conditional append
    holds it exclusive across its high-watermark check and its append, so no append of *this
    gateway* lands in between. Writers outside this gateway are not seen (docs/decisions.md
    2026-11-25). Exclusive holders waiting block new shared holders (no starvation).

    Taking it shared when nobody holds or waits for it exclusive does not checkpoint: the plain
    append path gets no extra scheduling point."""

    def __init__(self) -> None:
        self._gates: dict[tuple[str, int], _GateState] = {}

    def _state(self, topic: str, partition: int) -> _GateState:
        key = (topic, partition)
        state = self._gates.get(key)
        if state is None:
            state = self._gates[key] = _GateState()
        return state

    def _release(self, topic: str, partition: int, state: _GateState) -> None:
        state.notify()
        if not (state.shared or state.exclusive or state.waiting):
            self._gates.pop((topic, partition), None)

    @asynccontextmanager
    async def shared(self, topic: str, partition: int) -> AsyncIterator[None]:
        state = self._state(topic, partition)
        while state.exclusive or state.waiting:
            await state.changed.wait()
            state = self._state(topic, partition)
        state.shared += 1
        try:
            yield
        finally:
            state.shared -= 1
            self._release(topic, partition, state)

    @asynccontextmanager
    async def exclusive(self, topic: str, partition: int) -> AsyncIterator[None]:
        state = self._state(topic, partition)
        state.waiting += 1
        try:
            while state.exclusive or state.shared:
                await state.changed.wait()
        except BaseException:
            state.waiting -= 1
            self._release(topic, partition, state)
            raise
        state.waiting -= 1
        state.exclusive = True
        try:
            yield
        finally:
            state.exclusive = False
            self._release(topic, partition, state)


def check_topic_name(name: str) -> None:
    """The topic names every backend accepts: 1..249 of ``[A-Za-z0-9._-]``, not ``.``/``..``."""
    if not name or len(name) > 249 or name in {".", ".."}:
        raise GatewayError(ErrorCode.INVALID_TOPIC, f"invalid topic name {name!r}")
    for ch in name:
        if not (ch.isascii() and (ch.isalnum() or ch in "._-")):
            raise GatewayError(
                ErrorCode.INVALID_TOPIC,
                f"invalid topic name {name!r}: only ASCII letters, digits, '.', '_' and '-'",
            )


def check_partitions(count: int) -> None:
    if count < 1 or count > 100_000:
        raise GatewayError(
            ErrorCode.INVALID_PARTITIONS, f"partition count must be 1..100000, got {count}"
        )


class GroupClient(Protocol):
    """A backend's own client of its server's consumer groups (the Kafka cluster's coordinator,
    an Iggy broker's groups)."""

    async def join(
        self, group: str, topics: tuple[str, ...], member_id: str, session_timeout_ms: int
    ) -> JoinGroupResult: ...

    async def sync(self, group: str, member_id: str, generation: int) -> SyncGroupResult: ...

    async def heartbeat(self, group: str, member_id: str, generation: int) -> None: ...

    async def leave(self, group: str, member_id: str) -> None: ...

    async def describe(self, group: str) -> GroupDescription: ...


class GroupsByClient:
    """The ``group_*`` methods of a backend with ``groups = "backend"`` answered by its
    :class:`GroupClient` in ``self.groups`` (put before the backend's base class)."""

    groups: GroupClient

    async def group_join(
        self, group: str, topics: tuple[str, ...], member_id: str, session_timeout_ms: int
    ) -> JoinGroupResult:
        return await self.groups.join(group, topics, member_id, session_timeout_ms)

    async def group_sync(self, group: str, member_id: str, generation: int) -> SyncGroupResult:
        return await self.groups.sync(group, member_id, generation)

    async def group_heartbeat(self, group: str, member_id: str, generation: int) -> None:
        await self.groups.heartbeat(group, member_id, generation)

    async def group_leave(self, group: str, member_id: str) -> None:
        await self.groups.leave(group, member_id)

    async def group_describe(self, group: str) -> GroupDescription:
        return await self.groups.describe(group)
