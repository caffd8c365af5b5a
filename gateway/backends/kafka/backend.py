"""The Kafka backend: one :class:`KafkaBackend` composed of the cluster (connections, API
versions, metadata: ``cluster.py``), the records (appends and reads: ``data.py``) and the
key-value store (``kv.py``); topic administration is here. The mapping onto Kafka is described
in ``gateway/backends/kafka/__init__.py``."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import trio
from kio.schema.create_partitions.v1 import request as cp_req
from kio.schema.create_topics.v3 import request as ct_req
from kio.schema.delete_topics.v3 import request as dt_req
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32

from gateway.backends import BackendSpec
from gateway.backends.base import (
    Backend,
    Capabilities,
    GroupsByClient,
    check_partitions,
    check_topic_name,
    unsupported,
)
from gateway.backends.kafka.cluster import KafkaCluster, kafka_error, ms
from gateway.backends.kafka.config import TOPIC_CONFIG_KEYS, KafkaConfig
from gateway.backends.kafka.data import RecordStore
from gateway.backends.kafka.groups import KafkaGroups
from gateway.backends.kafka.kv import KafkaKV
from gateway.model import (
    AppendResult,
    ErrorCode,
    GatewayError,
    PartitionInfo,
    RecordBatch,
    TopicInfo,
)

__all__ = ["BACKEND", "KafkaBackend", "KafkaConfig"]


class KafkaBackend(GroupsByClient, Backend):
    capabilities = Capabilities(
        retention=False,
        delete_partitions=False,  # Kafka cannot remove partitions
        durable=True,
        notifies_appends=False,
        dense_offsets=False,  # transaction markers, aborted and compacted records
        groups="backend",  # the cluster's group coordinator (groups.py)
    )
    type_name = "kafka"
    groups: KafkaGroups

    def __init__(self, name: str, config: KafkaConfig) -> None:
        super().__init__(name)
        self.config = config
        self.cluster = KafkaCluster(name, config, self._negotiated)
        self.records = RecordStore(self.cluster)
        self.groups = KafkaGroups(name, self.cluster)
        self.kv = KafkaKV(self.cluster, self.records, self._create_topic, self.groups.membership)

    def _negotiated(self, ok: dict[int, bool]) -> None:
        # an instance attribute: what this broker can do
        self.capabilities = replace(
            type(self).capabilities,
            topic_admin=ok[19] and ok[20] and ok[37],
            kv_store=True,
        )

    async def open(self, nursery: trio.Nursery) -> None:
        await self.cluster.open(nursery)

    async def close(self) -> None:
        await self.groups.close()
        await self.cluster.close()

    async def health(self) -> tuple[bool, str]:
        try:
            await self.cluster.metadata([])
        except GatewayError as exc:
            return False, exc.message
        return True, "ok"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type_name,
            "bootstrap": self.config.bootstrap,
            "idempotence": self.records.producer.idempotence.describe(),
        }

    # ------------------------------------------------------------------ topics
    def _is_internal(self, name: str) -> bool:
        return name == self.config.kv_topic or name.startswith("__")

    async def create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...] = ()
    ) -> TopicInfo:
        check_topic_name(name)
        check_partitions(partitions)
        await self._create_topic(name, partitions, config)
        info = TopicInfo(name, partitions, tuple(config))
        if config:
            await self.kv_put("_gw.topics", name, json.dumps([list(kv) for kv in config]).encode())
            self.cluster.topic_configs[name] = tuple(config)
        return info

    async def _create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...], compact: bool = False
    ) -> None:
        if self.cluster.api_ok is None:
            await self.cluster.negotiate()
        self.cluster.require(19, "creating topics")
        configs = [
            ct_req.CreatableTopicConfig(name=TOPIC_CONFIG_KEYS[k], value=v)
            for k, v in config
            if k in TOPIC_CONFIG_KEYS
        ]
        if compact:
            configs.append(ct_req.CreatableTopicConfig(name="cleanup.policy", value="compact"))
        request = ct_req.CreateTopicsRequest(
            topics=(
                ct_req.CreatableTopic(
                    name=TopicName(name),
                    num_partitions=i32(partitions),
                    replication_factor=i16(self.config.replication_factor),
                    assignments=(),
                    configs=tuple(configs),
                ),
            ),
            timeout=ms(self.config.request_timeout_ms),
            validate_only=False,
        )
        response = await self.cluster.call(request)
        for t in response.topics:
            if int(t.error_code):
                raise kafka_error(t.error_code, f"creating topic {name}")
        self.cluster.topics.pop(name, None)
        self.records.forget_ahead(name)
        # wait until the metadata shows leaders for every partition
        with trio.move_on_after(self.cluster.timeout):
            while True:
                try:
                    meta = await self.cluster.topic_meta(name, fresh=True)
                    if meta.info.partitions >= partitions and all(x >= 0 for x in meta.leaders):
                        return
                except GatewayError as exc:
                    if exc.code is not ErrorCode.UNKNOWN_TOPIC:
                        raise
                await trio.sleep(0.02)

    async def delete_topic(self, name: str) -> None:
        if self.cluster.api_ok is None:
            await self.cluster.negotiate()
        if not self.capabilities.topic_admin:
            raise unsupported(
                "deleting topics (the broker cannot add partitions, so topic "
                "administration is off as a whole)",
                self.name,
            )
        await self.cluster.topic_meta(name, fresh=True)
        request = dt_req.DeleteTopicsRequest(
            topic_names=(TopicName(name),), timeout=ms(self.config.request_timeout_ms)
        )
        response = await self.cluster.call(request)
        for r in response.responses:
            if int(r.error_code):
                raise kafka_error(r.error_code, f"deleting topic {name}")
        self.cluster.topics.pop(name, None)
        self.records.forget_ahead(name)
        self.cluster.topic_configs.pop(name, None)
        # wait until it is gone from the metadata
        with trio.move_on_after(self.cluster.timeout):
            while True:
                try:
                    await self.cluster.topic_meta(name, fresh=True)
                except GatewayError as exc:
                    if exc.code is ErrorCode.UNKNOWN_TOPIC:
                        return
                    raise
                await trio.sleep(0.02)

    async def list_topics(self) -> list[TopicInfo]:
        response = await self.cluster.metadata(None)
        out = []
        for t in response.topics:
            if int(t.error_code) or t.is_internal or self._is_internal(t.name):
                continue
            out.append(
                TopicInfo(t.name, len(t.partitions), self.cluster.topic_configs.get(t.name, ()))
            )
        return sorted(out, key=lambda i: i.name)

    async def topic(self, name: str) -> TopicInfo:
        meta = await self.cluster.topic_meta(name)
        if name not in self.cluster.topic_configs:
            raw = await self.kv_get("_gw.topics", name)
            self.cluster.topic_configs[name] = (
                tuple(tuple(kv) for kv in json.loads(raw)) if raw else ()
            )
        return TopicInfo(name, meta.info.partitions, self.cluster.topic_configs[name])

    async def create_partitions(self, name: str, count: int) -> TopicInfo:
        if self.cluster.api_ok is None:
            await self.cluster.negotiate()
        if not self.capabilities.topic_admin:
            raise unsupported("adding partitions", self.name)
        meta = await self.cluster.topic_meta(name, fresh=True)
        total = meta.info.partitions + count
        check_partitions(total)
        request = cp_req.CreatePartitionsRequest(
            topics=(
                cp_req.CreatePartitionsTopic(
                    name=TopicName(name), count=i32(total), assignments=None
                ),
            ),
            timeout=ms(self.config.request_timeout_ms),
            validate_only=False,
        )
        response = await self.cluster.call(request)
        for r in response.results:
            if int(r.error_code):
                raise kafka_error(r.error_code, f"adding partitions to {name}")
        with trio.move_on_after(self.cluster.timeout):
            while (await self.cluster.topic_meta(name, fresh=True)).info.partitions < total:
                await trio.sleep(0.02)
        return await self.topic(name)

    # ------------------------------------------------------------------ records
    async def append(
        self,
        topic: str,
        partition: int,
        batch: RecordBatch,
        expected_offset: int | None = None,
    ) -> AppendResult:
        return await self.records.append(topic, partition, batch, expected_offset)

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        return await self.records.read(topic, partition, offset, max_records, max_bytes)

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        return await self.records.partition_info(topic, partition)

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp_us: int) -> int:
        return await self.records.offset_for_timestamp(topic, partition, timestamp_us)

    # ------------------------------------------------------------------ key-value store
    async def kv_get(self, namespace: str, key: str) -> bytes | None:
        return await self.kv.get(namespace, key)

    async def kv_put(self, namespace: str, key: str, value: bytes) -> None:
        await self.kv.put(namespace, key, value)

    async def kv_delete(self, namespace: str, key: str) -> None:
        await self.kv.delete(namespace, key)

    async def kv_scan(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        return await self.kv.scan(namespace, prefix)


def _factory(name: str, options: Any, config: Any) -> Backend:
    return KafkaBackend(name, options)


BACKEND = BackendSpec("kafka", KafkaConfig, _factory)
