"""The key-value store of the Kafka backend: the compacted topic ``kv_topic`` (one partition,
key ``namespace \\0 key``, a null value deletes), read to its end before each call so several
gateway instances on one cluster see each other's writes. Committed offsets (namespace
``offsets``) also go through Kafka's own group offsets (FindCoordinator, OffsetCommit,
OffsetFetch), so Kafka consumers of the same group see them."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import trio
from kio.schema.errors import ErrorCode as KErr
from kio.schema.find_coordinator.v2 import request as fc_req
from kio.schema.offset_commit.v6 import request as oc_req
from kio.schema.offset_fetch.v5 import request as of_req
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i64

from gateway.backends.kafka.cluster import KafkaCluster, kafka_error
from gateway.backends.kafka.data import RecordStore
from gateway.backends.kafka.records import encode_batch
from gateway.model import ErrorCode, GatewayError, Record, now_us

OFFSETS_NS = "offsets"

Membership = Callable[[str], "tuple[str, int] | None"]
"""(member id, generation) of this gateway in a cluster group, None when not a member."""


class KafkaKV:
    """The key-value store on one cluster. ``create_topic(name, partitions, config,
    compact=...)`` creates the kv topic the first time."""

    def __init__(
        self,
        cluster: KafkaCluster,
        data: RecordStore,
        create_topic: Callable[..., Awaitable[None]],
        membership: Membership | None = None,
    ) -> None:
        self._cluster = cluster
        self._membership = membership
        self._data = data
        self._create_topic = create_topic
        self._entries: dict[tuple[str, str], bytes] = {}
        self._next = 0
        self._lock = trio.Lock()
        self._ready = False
        self._coordinators: dict[str, int] = {}

    def _key(self, namespace: str, key: str) -> bytes:
        return namespace.encode() + b"\x00" + key.encode()

    async def _sync(self) -> None:
        """Create the compacted kv topic once, then read it to its end (other gateway instances
        write it too)."""
        try:
            await self._catch_up()
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNKNOWN_TOPIC:
                raise
            # the topic went away (an in-memory broker restarted): start over
            self._ready = False
            self._entries.clear()
            self._next = 0
            await self._catch_up()

    async def _catch_up(self) -> None:
        topic = self._cluster.config.kv_topic
        if not self._ready:
            try:
                await self._cluster.topic_meta(topic, 0)
            except GatewayError as exc:
                if exc.code is not ErrorCode.UNKNOWN_TOPIC:
                    raise
                try:
                    await self._create_topic(topic, 1, (), compact=True)
                except GatewayError as exc2:
                    if exc2.code is not ErrorCode.TOPIC_EXISTS:
                        raise
            self._ready = True
        while True:
            records, hw, start = await self._data.fetch(topic, 0, max(self._next, 0), 1 << 22)
            for r in records:
                ns, _, key = (r.key or b"").partition(b"\x00")
                k = (ns.decode(), key.decode())
                if r.value is None:
                    self._entries.pop(k, None)
                else:
                    self._entries[k] = r.value
                self._next = r.offset + 1
            if not records:
                if self._next < start:
                    self._next = start
                    continue
                if self._next > hw:  # the broker lost its data (in-memory broker restart)
                    self._entries.clear()
                    self._next = 0
                    continue
                return

    async def _write(self, namespace: str, key: str, value: bytes | None) -> None:
        async with self._lock:
            await self._sync()
            topic = self._cluster.config.kv_topic
            meta = await self._cluster.topic_meta(topic, 0)
            rec = Record(self._key(namespace, key), value, (), now_us())
            base = await self._data.produce(topic, 0, meta, encode_batch([rec], now_us() // 1000))
            if value is None:
                self._entries.pop((namespace, key), None)
            else:
                self._entries[(namespace, key)] = value
            if base == self._next:
                self._next = base + 1

    async def get(self, namespace: str, key: str) -> bytes | None:
        committed = await self._offset_fetch(key) if namespace == OFFSETS_NS else None
        async with self._lock:
            await self._sync()
            mirrored = self._entries.get((namespace, key))
        if committed is None:
            return mirrored
        # Kafka's group offset wins (a Kafka consumer may have committed since); the mirror
        # keeps the metadata string when it agrees (not every broker stores metadata)
        if (
            mirrored is not None
            and json.loads(mirrored).get("offset") == json.loads(committed)["offset"]
        ):
            return mirrored
        return committed

    async def put(self, namespace: str, key: str, value: bytes) -> None:
        if namespace == OFFSETS_NS:
            await self._offset_commit(key, value)
        await self._write(namespace, key, bytes(value))

    async def delete(self, namespace: str, key: str) -> None:
        if namespace == OFFSETS_NS:
            await self._offset_commit(key, b'{"offset": -1}')
        await self._write(namespace, key, None)

    async def scan(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        async with self._lock:
            await self._sync()
            return sorted(
                (k, v)
                for (ns, k), v in self._entries.items()
                if ns == namespace and k.startswith(prefix)
            )

    @staticmethod
    def _offset_key(key: str) -> tuple[str, str, int] | None:
        parts = key.split("\x1f")
        if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
            return None
        return parts[0], parts[1], int(parts[2])

    async def _coordinator(self, group: str) -> int | None:
        node = self._coordinators.get(group)
        if node is not None:
            return node
        response = await self._cluster.call(
            fc_req.FindCoordinatorRequest(key=group, key_type=i8(0))
        )
        if int(response.error_code):
            raise kafka_error(response.error_code, f"find coordinator of {group}")
        node = int(response.node_id)
        self._cluster.brokers[node] = (response.host, int(response.port))
        self._coordinators[group] = node
        return node

    async def _offset_commit(self, key: str, value: bytes) -> None:
        """Also commit through Kafka's group offsets: Kafka consumers of the group see it. In a
        group this gateway is a member of, as that member (Kafka refuses a plain commit to a
        group with members)."""
        parsed = self._offset_key(key)
        if parsed is None or not (self._cluster.api_ok or {}).get(8):
            return
        group, topic, partition = parsed
        data = json.loads(value)
        member_id, generation = "", -1
        if self._membership is not None:
            member_id, generation = self._membership(group) or ("", -1)
        request = oc_req.OffsetCommitRequest(
            group_id=GroupId(group),
            generation_id_or_member_epoch=i32(generation),
            member_id=member_id,
            topics=(
                oc_req.OffsetCommitRequestTopic(
                    name=TopicName(topic),
                    partitions=(
                        oc_req.OffsetCommitRequestPartition(
                            partition_index=i32(partition),
                            committed_offset=i64(int(data["offset"])),
                            committed_leader_epoch=i32(-1),
                            committed_metadata=str(data.get("metadata", "")),
                        ),
                    ),
                ),
            ),
        )
        response = await self._cluster.call(request, await self._coordinator(group))
        for t in response.topics:
            for p in t.partitions:
                err = KErr(int(p.error_code))
                if err in (KErr.not_coordinator, KErr.coordinator_not_available):
                    self._coordinators.pop(group, None)
                if err is not KErr.none and err is not KErr.unknown_topic_or_partition:
                    raise kafka_error(err, f"commit offset of {group}")

    async def _offset_fetch(self, key: str) -> bytes | None:
        parsed = self._offset_key(key)
        if parsed is None or not (self._cluster.api_ok or {}).get(9):
            return None
        group, topic, partition = parsed
        request = of_req.OffsetFetchRequest(
            group_id=GroupId(group),
            topics=(
                of_req.OffsetFetchRequestTopic(
                    name=TopicName(topic), partition_indexes=(i32(partition),)
                ),
            ),
        )
        response = await self._cluster.call(request, await self._coordinator(group))
        if int(response.error_code):
            err = KErr(int(response.error_code))
            if err in (KErr.not_coordinator, KErr.coordinator_not_available):
                self._coordinators.pop(group, None)
            raise kafka_error(err, f"fetch offset of {group}")
        for t in response.topics:
            for p in t.partitions:
                if int(p.error_code) or int(p.committed_offset) < 0:
                    return None
                return json.dumps(
                    {"offset": int(p.committed_offset), "metadata": p.metadata or ""}
                ).encode()
        return None
