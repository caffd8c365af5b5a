"""What every upstream backend shares: its config, the connection pool, topic-name prefixing,
topic settings, and the offsets namespace of the key-value store."""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from gateway.backends.base import (
    AppendGate,
    Backend,
    Capabilities,
    check_partitions,
    check_topic_name,
    landed_elsewhere,
    offset_mismatch,
    unsupported,
)
from gateway.backends.upstream.pool import Pool
from gateway.model import AppendResult, ErrorCode, GatewayError, Record, RecordBatch, TopicInfo

OFFSETS_NS = "offsets"  # gateway.core.groups: key "group\x1ftopic\x1fpartition"
PROTOCOLS = ("kafka08", "iggy", "tank", "liftbridge", "cursus")


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """``[backends.NAME]`` with ``type = "upstream"``."""

    protocol: str = ""  # kafka08 | iggy | tank | liftbridge | cursus
    address: str = "127.0.0.1:0"  # host:port of the upstream server's listener
    username: str = ""  # Iggy: LOGIN_USER (then the 0.6 dialect: committed offsets); "": none
    password: str = ""
    topic_prefix: str = ""  # prepended to every topic name upstream (several users, one server)
    pool_size: int = 4  # connections at most
    connect_timeout_ms: int = 3_000
    request_timeout_ms: int = 10_000
    local_groups: bool = False
    """For a protocol whose broker has no consumer groups (TANK, Kafka 0.8): true keeps the
    groups in this gateway process, as for a local backend. Right only while ONE gateway uses
    the broker (replicas or ``--workers`` would each run a group of the same name); false
    (default) refuses group joins with a clear error."""
    max_group_connections: int = 1000
    """Iggy: the members this gateway holds in the broker's consumer groups at most (each is a
    connection of its own: an Iggy member is a connection)."""

    def validate(self) -> list[str]:
        problems = []
        if self.protocol not in PROTOCOLS:
            problems.append(
                f"protocol: got {self.protocol!r}, expected one of {', '.join(PROTOCOLS)}"
            )
        host, _, port = self.address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            problems.append(f"address: got {self.address!r}, expected host:port")
        if self.max_group_connections < 1:
            problems.append(
                f"max_group_connections: got {self.max_group_connections}, expected at least 1"
            )
        if self.pool_size < 1:
            problems.append(f"pool_size: got {self.pool_size}, expected at least 1")
        return problems

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.address.rpartition(":")
        return host.strip("[]"), int(port)


def offset_parts(key: str) -> tuple[str, str, int]:
    group, topic, partition = key.split("\x1f")
    return group, topic, int(partition)


UPSTREAM_CAPABILITIES = Capabilities(
    offset_for_timestamp=False,
    kv_store=False,
    committed_offsets=False,
    durable=True,
    notifies_appends=False,
    groups="none",
)
"""What every upstream server backend shares: the server stores (durable) but keeps no gateway
key-value state, has no time index we use and sends no append notifications. Consumer groups:
``"none"`` unless the protocol's backend runs them on the broker (``groups="backend"``), since
two gateways on one broker must not each run a group of the same name. Each protocol's backend
overrides the rest with ``upstream_capabilities(...)``."""


def upstream_capabilities(**overrides: Any) -> Capabilities:
    return replace(UPSTREAM_CAPABILITIES, **overrides)


class UpstreamBackend(Backend):
    """The common part; a protocol module subclasses it with ``_connect``/``_close`` and the
    operations its protocol has. Topic names are canonical names plus ``topic_prefix``."""

    type_name = "upstream"
    protocol = ""
    protocol_errors: tuple[type[BaseException], ...] = ()
    serial_appends: ClassVar[bool] = False
    """True for protocols whose produce answer carries no offsets (TANK, Iggy): every append
    holds ``append_lock`` (see there). False: plain appends run concurrently."""

    def __init__(self, name: str, config: UpstreamConfig) -> None:
        super().__init__(name)
        self.config = config
        self.host, self.port = config.host_port
        self.pool: Pool[Any] = Pool(
            f"{self.protocol} upstream {config.address}",
            self._connect,
            self._close,
            size=config.pool_size,
            connect_timeout=config.connect_timeout_ms / 1000,
            request_timeout=config.request_timeout_ms / 1000,
            protocol_errors=self.protocol_errors,
        )
        # per-topic settings the protocol has no place for (kept for this process's lifetime)
        self._topic_config: dict[str, tuple[tuple[str, str], ...]] = {}
        self._append_gate = AppendGate()
        if config.local_groups and self.capabilities.groups == "none":
            # an instance attribute: this gateway keeps the groups (one gateway on the broker)
            self.capabilities = replace(type(self).capabilities, groups="gateway")

    # ------------------------------------------------------------------ connections
    async def _connect(self) -> Any:
        raise NotImplementedError

    async def _close(self, client: Any) -> None:
        await client.aclose()

    async def close(self) -> None:
        await self.pool.aclose()

    async def ping(self) -> None:
        """One cheap round trip to the upstream (for /readyz); raises GatewayError."""
        await self.list_topics()

    async def health(self) -> tuple[bool, str]:
        try:
            await self.ping()
        except GatewayError as exc:
            return False, exc.message
        return True, "ok"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type_name,
            "protocol": self.protocol,
            "address": self.config.address,
            "connections_opened": self.pool.opened,
        }

    # ------------------------------------------------------------------ names
    def up(self, topic: str) -> str:
        return self.config.topic_prefix + topic

    def down(self, upstream_name: str) -> str | None:
        prefix = self.config.topic_prefix
        if not upstream_name.startswith(prefix):
            return None
        return upstream_name[len(prefix) :]

    def info(self, topic: str, partitions: int) -> TopicInfo:
        return TopicInfo(topic, partitions, self._topic_config.get(topic, ()))

    @staticmethod
    def check_new_topic(name: str, partitions: int) -> None:
        check_topic_name(name)
        check_partitions(partitions)

    def check_partition(self, topic: str, partition: int, partitions: int) -> None:
        if not 0 <= partition < partitions:
            raise GatewayError(
                ErrorCode.UNKNOWN_PARTITION,
                f"topic {topic!r} has no partition {partition} (it has {partitions})",
            )

    async def call(self, fn: Any, retry: bool = True) -> Any:
        return await self.pool.call(fn, retry=retry)

    def append_lock(self, topic: str, partition: int) -> AbstractAsyncContextManager[None]:
        """Holds off this process's other appends to one partition (the partition's
        :class:`AppendGate` taken exclusive). Taken by every append of a protocol whose produce
        answer carries no offsets (TANK, Iggy: the offsets an append reports are read from the
        watermark after it, which is only its own while no other append of ours runs), and by
        every conditional append (``expected_offset``: no upstream protocol has a conditional
        produce, so the watermark check and the produce must not be split by an append of
        ours). Writers outside this gateway cannot be seen; their records can still shift what
        an append reports, or land between a conditional append's check and its produce
        (docs/decisions.md)."""
        return self._append_gate.exclusive(topic, partition)

    async def append(
        self,
        topic: str,
        partition: int,
        batch: RecordBatch,
        expected_offset: int | None = None,
    ) -> AppendResult:
        if expected_offset is None and not self.serial_appends:
            async with self._append_gate.shared(topic, partition):
                return await self._append(topic, partition, batch)
        async with self.append_lock(topic, partition):
            if expected_offset is not None:
                hw = (await self.partition_info(topic, partition)).high_watermark
                if hw != expected_offset:
                    raise offset_mismatch(topic, partition, expected_offset, hw)
            result = await self._append(topic, partition, batch)
        if expected_offset is not None and batch.count and result.base_offset != expected_offset:
            raise landed_elsewhere(topic, partition, expected_offset, result.base_offset)
        return result

    async def _append(self, topic: str, partition: int, batch: RecordBatch) -> AppendResult:
        """The protocol's produce (called by ``append``, under the gate)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ offsets in the kv store
    async def commit_offset(
        self, group: str, topic: str, partition: int, offset: int, metadata: str
    ) -> None:
        raise unsupported("committed offsets", self.name)

    async def fetch_offset(self, group: str, topic: str, partition: int) -> tuple[int, str] | None:
        raise unsupported("committed offsets", self.name)

    async def kv_put(self, namespace: str, key: str, value: bytes) -> None:
        if namespace != OFFSETS_NS or not self.capabilities.committed_offsets:
            raise unsupported("a key-value store", self.name)
        data = json.loads(value)
        await self.commit_offset(
            *offset_parts(key), int(data["offset"]), str(data.get("metadata", ""))
        )

    async def kv_get(self, namespace: str, key: str) -> bytes | None:
        if namespace != OFFSETS_NS or not self.capabilities.committed_offsets:
            raise unsupported("a key-value store", self.name)
        found = await self.fetch_offset(*offset_parts(key))
        if found is None:
            return None
        return json.dumps({"offset": found[0], "metadata": found[1]}).encode()


def within(records: list[Record], max_records: int, max_bytes: int) -> list[Record]:
    """At most ``max_records`` records, stopping once ``max_bytes`` is reached (soft: the first
    record always comes back)."""
    out: list[Record] = []
    size = 0
    for r in records[: max(1, max_records)]:
        if out and size >= max_bytes:
            break
        out.append(r)
        size += len(r.key or b"") + len(r.value or b"") + sum(len(k) + len(v) for k, v in r.headers)
        size += 24
    return out
