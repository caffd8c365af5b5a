"""The Kafka backend; the mapping is documented in ``gateway.backends.kafka``."""

from __future__ import annotations

import datetime
import json
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import structlog
import trio
from kio.schema.create_partitions.v1 import request as cp_req
from kio.schema.create_topics.v3 import request as ct_req
from kio.schema.delete_topics.v3 import request as dt_req
from kio.schema.errors import ErrorCode as KErr
from kio.schema.fetch.v10 import request as fetch_req
from kio.schema.find_coordinator.v2 import request as fc_req
from kio.schema.list_offsets.v4 import request as lo_req
from kio.schema.metadata.v7 import request as md_req
from kio.schema.offset_commit.v6 import request as oc_req
from kio.schema.offset_fetch.v5 import request as of_req
from kio.schema.produce.v7 import request as produce_req
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from gateway.backends import BackendSpec
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
from gateway.backends.client_tls import client_ssl_context
from gateway.backends.kafka.connection import BrokerConnection, unavailable
from gateway.backends.kafka.records import (
    KafkaRecordError,
    batches_to_canonical,
    canonical_to_batch,
    decode_batches,
    dense_batches,
    encode_batch,
    only_markers_from,
)
from gateway.backends.kafka.sasl import SaslLogin
from gateway.canonical import CANONICAL
from gateway.config import ConfigError
from gateway.model import (
    APPEND_SENT,
    AppendResult,
    ErrorCode,
    GatewayError,
    PartitionInfo,
    Record,
    RecordBatch,
    TopicInfo,
    now_us,
)

log = structlog.get_logger("gateway.backends.kafka")

ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")  # their index is Kafka's codec id

# The one version of each API we speak: inside both Kafka 2.1's and Kafka 4.x's ranges.
API_VERSIONS = {
    0: 7,  # Produce (record batches v2)
    1: 10,  # Fetch
    2: 4,  # ListOffsets
    3: 7,  # Metadata
    8: 6,  # OffsetCommit
    9: 5,  # OffsetFetch
    10: 2,  # FindCoordinator
    19: 3,  # CreateTopics
    20: 3,  # DeleteTopics
    37: 1,  # CreatePartitions
}
API_NAMES = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    19: "CreateTopics",
    20: "DeleteTopics",
    37: "CreatePartitions",
}
REQUIRED_APIS = (0, 1, 2, 3)
OFFSETS_NS = "offsets"
FRESH_S = 0.02
AHEAD_S = 0.5  # read-ahead state older than this is not used
AHEAD_MAX = 64  # partitions with read-ahead state, at most
TOPIC_CONFIG_KEYS = {"retention_ms": "retention.ms", "retention_bytes": "retention.bytes"}

_RETRIABLE_KAFKA = {
    KErr.not_leader_or_follower,
    KErr.leader_not_available,
    KErr.request_timed_out,
    KErr.network_exception,
    KErr.coordinator_not_available,
    KErr.not_coordinator,
    KErr.coordinator_load_in_progress,
    KErr.not_enough_replicas,
    KErr.not_enough_replicas_after_append,
    KErr.kafka_storage_error,
    KErr.fenced_leader_epoch,
    KErr.unknown_leader_epoch,
    KErr.broker_not_available,
    KErr.not_controller,
}
_KAFKA_TO_GATEWAY = {
    KErr.offset_out_of_range: ErrorCode.OFFSET_OUT_OF_RANGE,
    KErr.unknown_topic_or_partition: ErrorCode.UNKNOWN_TOPIC,
    KErr.topic_already_exists: ErrorCode.TOPIC_EXISTS,
    KErr.invalid_topic_exception: ErrorCode.INVALID_TOPIC,
    KErr.invalid_partitions: ErrorCode.INVALID_PARTITIONS,
    KErr.message_too_large: ErrorCode.RECORD_TOO_LARGE,
    KErr.record_list_too_large: ErrorCode.RECORD_TOO_LARGE,
    KErr.corrupt_message: ErrorCode.CORRUPT_MESSAGE,
    KErr.invalid_record: ErrorCode.CORRUPT_MESSAGE,
    KErr.unsupported_version: ErrorCode.UNSUPPORTED,
    KErr.invalid_request: ErrorCode.INVALID_REQUEST,
    KErr.topic_authorization_failed: ErrorCode.UNAUTHORIZED,
    KErr.group_authorization_failed: ErrorCode.UNAUTHORIZED,
    KErr.cluster_authorization_failed: ErrorCode.UNAUTHORIZED,
    KErr.illegal_generation: ErrorCode.ILLEGAL_GENERATION,
    KErr.unknown_member_id: ErrorCode.UNKNOWN_MEMBER,
    KErr.rebalance_in_progress: ErrorCode.REBALANCE_IN_PROGRESS,
}


def kafka_error(code: Any, what: str) -> GatewayError:
    err = KErr(int(code))
    if err in _RETRIABLE_KAFKA:
        return unavailable(f"{what}: Kafka {err.name} (retriable)")
    mapped = _KAFKA_TO_GATEWAY.get(err, ErrorCode.INTERNAL)
    return GatewayError(mapped, f"{what}: Kafka error {err.name}")


def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    bootstrap: str = "127.0.0.1:9092"  # host:port[,host:port...]
    client_id: str = "gateway"
    kv_topic: str = "__gateway_kv"
    replication_factor: int = -1  # -1: the broker's default
    request_timeout_ms: int = 10_000
    connect_timeout_ms: int = 3_000
    metadata_max_age_ms: int = 5_000
    max_response_bytes: int = 128 << 20
    read_ahead: bool = True  # see KafkaBackend.read
    isolation: str = "read_committed"  # or "read_uncommitted": see gateway.backends.kafka
    compression: str = "none"  # of the batches the gateway writes: none|gzip|snappy|lz4|zstd
    # TLS to the brokers (tls = true, or implied by any of the files)
    tls: bool = False
    tls_ca_file: str = ""  # PEM bundle to trust; "" = the system's
    tls_cert_file: str = ""  # client certificate (mutual TLS), with tls_key_file
    tls_key_file: str = ""
    tls_server_name: str = ""  # the name to verify; "" = the host of each broker address
    # SASL (SaslHandshake v1 + SaslAuthenticate); "" = none
    sasl_mechanism: str = ""  # "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512"
    sasl_username: str = ""
    sasl_password: str = ""
    sasl_password_file: str = ""  # read at start; preferred over sasl_password

    def validate(self) -> list[str]:
        problems = []
        if self.isolation not in ISOLATION_LEVELS:
            problems.append(
                f"isolation: got {self.isolation!r}, expected one of {tuple(ISOLATION_LEVELS)}"
            )
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            problems.append(
                f"tls_cert_file/tls_key_file: got cert={self.tls_cert_file!r} "
                f"key={self.tls_key_file!r}, expected both or neither"
            )
        for key in ("tls_ca_file", "tls_cert_file", "tls_key_file", "sasl_password_file"):
            path = getattr(self, key)
            if path and not os.path.isfile(path):
                problems.append(f"{key}: got {path!r}, expected a readable file")
        if self.compression not in CODECS:
            problems.append(f"compression: got {self.compression!r}, expected one of {CODECS}")
        if self.sasl_mechanism and self.sasl_mechanism not in SASL_MECHANISMS:
            problems.append(
                f"sasl_mechanism: got {self.sasl_mechanism!r}, expected one of {SASL_MECHANISMS}"
            )
        if self.sasl_mechanism and not self.sasl_username:
            problems.append("sasl_username: got '', expected a user name with sasl_mechanism")
        if self.sasl_mechanism and not (self.sasl_password or self.sasl_password_file):
            problems.append(
                "sasl_password: got nothing, expected sasl_password or sasl_password_file"
            )
        return problems

    @property
    def uses_tls(self) -> bool:
        return self.tls or bool(self.tls_ca_file or self.tls_cert_file)


class _Fetched(NamedTuple):
    """One partition of a Fetch answer. ``hw`` is what readers may read up to: the high
    watermark, or under read-committed the last stable offset."""

    data: bytes
    hw: int
    start: int
    aborted: tuple[tuple[int, int], ...] | None  # (producer id, first offset); None: uncommitted


@dataclass
class _Ahead:
    """Read-ahead state of one partition (see ``KafkaBackend.read``): the canonical batch last
    served from (its records past the client's cut are served from it) and the Fetch already
    sent for the offset after it."""

    last: RecordBatch  # canonical, from the last Fetch answer used
    at: float  # when that answer arrived
    next_offset: int  # where the read-ahead Fetch starts (last.last_offset + 1)
    done: trio.Event
    max_bytes: int = 1 << 20
    result: _Fetched | None = None
    result_at: float = 0.0


@dataclass
class _TopicMeta:
    info: TopicInfo
    leaders: list[int]
    at: float


class KafkaBackend(Backend):
    capabilities = Capabilities(
        retention=False,
        delete_partitions=False,  # Kafka cannot remove partitions
        durable=True,
        notifies_appends=False,
        dense_offsets=False,  # transaction markers, aborted and compacted records
    )
    type_name = "kafka"

    def __init__(self, name: str, config: KafkaConfig) -> None:
        super().__init__(name)
        self.config = config
        self._bootstrap = []
        for part in config.bootstrap.split(","):
            host, _, port = part.strip().rpartition(":")
            self._bootstrap.append((host or "127.0.0.1", int(port or 9092)))
        self._brokers: dict[int, tuple[str, int]] = {}
        self._conns: dict[Any, BrokerConnection] = {}
        self._conn_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None
        self._topics: dict[str, _TopicMeta] = {}
        self._api_ok: dict[int, bool] | None = None
        self._kv: dict[tuple[str, str], bytes] = {}
        self._kv_next = 0
        self._kv_lock = trio.Lock()
        self._kv_ready = False
        self._coordinators: dict[str, int] = {}
        self._topic_configs: dict[str, tuple[tuple[str, str], ...]] = {}
        self._hw_hint: dict[tuple[str, int], int] = {}
        # (log start, high watermark, when) from the last Fetch answer: a Fetch right after a
        # read (the core asks for the high watermark of every fetch result) needs no round trip
        self._fresh: dict[tuple[str, int], tuple[int, int, float]] = {}
        self._ahead: dict[tuple[str, int], _Ahead] = {}
        self._timeout = config.request_timeout_ms / 1000
        self._isolation = ISOLATION_LEVELS[config.isolation]
        self._codec = CODECS.index(config.compression)
        try:
            self._ssl = (
                client_ssl_context(config.tls_ca_file, config.tls_cert_file, config.tls_key_file)
                if config.uses_tls
                else None
            )
            self._sasl = _sasl_login(config)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError([f"backends.{name}: {exc}"]) from None
        self._last_failure = ""
        self._gate = AppendGate()

    # ------------------------------------------------------------------ lifecycle
    async def open(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        try:
            await self._negotiate()
        except GatewayError:
            pass  # the broker is down: every call reports it until it is back

    async def close(self) -> None:
        for conn in list(self._conns.values()):
            await conn.aclose()
        self._conns.clear()

    async def health(self) -> tuple[bool, str]:
        try:
            await self._metadata([])
        except GatewayError as exc:
            return False, exc.message
        return True, "ok"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type_name, "bootstrap": self.config.bootstrap}

    # ------------------------------------------------------------------ connections
    async def _connection(self, node: int | None) -> BrokerConnection:
        """The connection to broker ``node`` (None: any bootstrap broker)."""
        key: Any = node if node is not None else "bootstrap"
        conn = self._conns.get(key)
        if conn is not None and not conn.closed:
            return conn
        async with self._conn_lock:
            conn = self._conns.get(key)
            if conn is not None and not conn.closed:
                return conn
            assert self._nursery is not None, "open() the backend first"
            if conn is not None:  # a connection was lost: the cluster may have changed since
                self._topics.clear()
            addresses = [self._brokers[node]] if node in self._brokers else self._bootstrap
            last: GatewayError | None = None
            for host, port in addresses:
                conn = BrokerConnection(
                    host,
                    port,
                    self.config.client_id,
                    self.config.max_response_bytes,
                    ssl_context=self._ssl,
                    server_name=self.config.tls_server_name,
                    authenticate=self._sasl,
                )
                try:
                    await conn.connect(self._nursery, self.config.connect_timeout_ms / 1000)
                except GatewayError as exc:
                    last = exc
                    continue
                self._conns[key] = conn
                self._last_failure = ""
                return conn
            assert last is not None
            if last.message != self._last_failure:  # once per distinct cause, not per call
                self._last_failure = last.message
                log.warning("kafka backend cannot connect", backend=self.name, reason=last.message)
            raise last

    async def _call(
        self, request: Any, node: int | None = None, on_sent: Callable[[], None] | None = None
    ) -> Any:
        if self._api_ok is None:
            await self._negotiate()
        conn = await self._connection(node)
        return await conn.call(request, self._timeout, on_sent)

    async def _negotiate(self) -> None:
        """ApiVersions: check the broker speaks the version we use of every API."""
        from kio.schema.api_versions.v0.request import ApiVersionsRequest

        conn = await self._connection(None)
        response = await conn.call(ApiVersionsRequest(), self._timeout)
        if int(response.error_code):
            raise kafka_error(response.error_code, "ApiVersions")
        ranges = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }
        ok = {}
        for key, version in API_VERSIONS.items():
            lo, hi = ranges.get(key, (1, 0))
            ok[key] = lo <= version <= hi
        missing = [API_NAMES[k] for k in REQUIRED_APIS if not ok[k]]
        if missing:
            pinned = ", ".join(f"{API_NAMES[k]} v{API_VERSIONS[k]}" for k in REQUIRED_APIS)
            raise GatewayError(
                ErrorCode.UNSUPPORTED,
                f"the Kafka broker does not support {', '.join(missing)} at the versions the "
                f"gateway speaks ({pinned})",
            )
        self._api_ok = ok
        # an instance attribute: what this broker can do
        self.capabilities = replace(
            type(self).capabilities,
            topic_admin=ok[19] and ok[20] and ok[37],
            kv_store=True,
        )

    def _require(self, api: int, what: str) -> None:
        if self._api_ok is not None and not self._api_ok.get(api):
            raise unsupported(
                f"{what} (the broker has no {API_NAMES[api]} v{API_VERSIONS[api]})", self.name
            )

    # ------------------------------------------------------------------ metadata
    async def _metadata(self, topics: list[str] | None) -> Any:
        request = md_req.MetadataRequest(
            topics=None
            if topics is None
            else tuple(md_req.MetadataRequestTopic(name=t) for t in topics),
            allow_auto_topic_creation=False,
        )
        response = await self._call(request)
        for b in response.brokers:
            self._brokers[int(b.node_id)] = (b.host, int(b.port))
        return response

    async def _topic_meta(
        self, name: str, partition: int | None = None, fresh: bool = False
    ) -> _TopicMeta:
        meta = self._topics.get(name)
        now = trio.current_time()
        if (
            meta is not None
            and not fresh
            and now - meta.at < self.config.metadata_max_age_ms / 1000
            and (partition is None or 0 <= partition < meta.info.partitions)
        ):
            return meta
        response = await self._metadata([name])
        meta = None
        for t in response.topics:
            if t.name != name:
                continue
            err = KErr(int(t.error_code))
            if err is KErr.unknown_topic_or_partition:
                break
            if err is not KErr.none:
                raise kafka_error(err, f"metadata of {name}")
            parts = sorted(t.partitions, key=lambda p: int(p.partition_index))
            leaders = [int(p.leader_id) for p in parts]
            config = self._topic_configs.get(name, ())
            meta = _TopicMeta(TopicInfo(name, len(parts), config), leaders, now)
        if meta is None or meta.info.partitions == 0:
            self._topics.pop(name, None)
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        self._topics[name] = meta
        if partition is not None and not 0 <= partition < meta.info.partitions:
            raise GatewayError(
                ErrorCode.UNKNOWN_PARTITION,
                f"topic {name!r} has no partition {partition} (it has {meta.info.partitions})",
            )
        return meta

    def _leader(self, meta: _TopicMeta, partition: int) -> int | None:
        leader = meta.leaders[partition]
        return leader if leader >= 0 and leader in self._brokers else None

    async def _partition_error(
        self, name: str, partition: int, err: Any, what: str
    ) -> GatewayError:
        e = KErr(int(err))
        self._forget_ahead(name)
        if e is KErr.unknown_topic_or_partition:
            try:
                await self._topic_meta(name, partition, fresh=True)
            except GatewayError as exc:
                return exc
            return unavailable(f"{what}: {name}/{partition} is not available yet")
        if e in _RETRIABLE_KAFKA:
            self._topics.pop(name, None)
        return kafka_error(e, what)

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
            self._topic_configs[name] = tuple(config)
        return info

    async def _create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...], compact: bool = False
    ) -> None:
        if self._api_ok is None:
            await self._negotiate()
        self._require(19, "creating topics")
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
                    name=name,
                    num_partitions=i32(partitions),
                    replication_factor=i16(self.config.replication_factor),
                    assignments=(),
                    configs=tuple(configs),
                ),
            ),
            timeout=_ms(self.config.request_timeout_ms),
            validate_only=False,
        )
        response = await self._call(request)
        for t in response.topics:
            if int(t.error_code):
                raise kafka_error(t.error_code, f"creating topic {name}")
        self._topics.pop(name, None)
        self._forget_ahead(name)
        # wait until the metadata shows leaders for every partition
        with trio.move_on_after(self._timeout):
            while True:
                try:
                    meta = await self._topic_meta(name, fresh=True)
                    if meta.info.partitions >= partitions and all(x >= 0 for x in meta.leaders):
                        return
                except GatewayError as exc:
                    if exc.code is not ErrorCode.UNKNOWN_TOPIC:
                        raise
                await trio.sleep(0.02)

    async def delete_topic(self, name: str) -> None:
        if self._api_ok is None:
            await self._negotiate()
        if not self.capabilities.topic_admin:
            raise unsupported(
                "deleting topics (the broker cannot add partitions, so topic "
                "administration is off as a whole)",
                self.name,
            )
        await self._topic_meta(name, fresh=True)
        request = dt_req.DeleteTopicsRequest(
            topic_names=(name,), timeout=_ms(self.config.request_timeout_ms)
        )
        response = await self._call(request)
        for r in response.responses:
            if int(r.error_code):
                raise kafka_error(r.error_code, f"deleting topic {name}")
        self._topics.pop(name, None)
        self._forget_ahead(name)
        self._topic_configs.pop(name, None)
        # wait until it is gone from the metadata
        with trio.move_on_after(self._timeout):
            while True:
                try:
                    await self._topic_meta(name, fresh=True)
                except GatewayError as exc:
                    if exc.code is ErrorCode.UNKNOWN_TOPIC:
                        return
                    raise
                await trio.sleep(0.02)

    async def list_topics(self) -> list[TopicInfo]:
        response = await self._metadata(None)
        out = []
        for t in response.topics:
            if int(t.error_code) or t.is_internal or self._is_internal(t.name):
                continue
            out.append(TopicInfo(t.name, len(t.partitions), self._topic_configs.get(t.name, ())))
        return sorted(out, key=lambda i: i.name)

    async def topic(self, name: str) -> TopicInfo:
        meta = await self._topic_meta(name)
        if name not in self._topic_configs:
            raw = await self.kv_get("_gw.topics", name)
            self._topic_configs[name] = tuple(tuple(kv) for kv in json.loads(raw)) if raw else ()
        return TopicInfo(name, meta.info.partitions, self._topic_configs[name])

    async def create_partitions(self, name: str, count: int) -> TopicInfo:
        if self._api_ok is None:
            await self._negotiate()
        if not self.capabilities.topic_admin:
            raise unsupported("adding partitions", self.name)
        meta = await self._topic_meta(name, fresh=True)
        total = meta.info.partitions + count
        check_partitions(total)
        request = cp_req.CreatePartitionsRequest(
            topics=(cp_req.CreatePartitionsTopic(name=name, count=i32(total), assignments=None),),
            timeout=_ms(self.config.request_timeout_ms),
            validate_only=False,
        )
        response = await self._call(request)
        for r in response.results:
            if int(r.error_code):
                raise kafka_error(r.error_code, f"adding partitions to {name}")
        with trio.move_on_after(self._timeout):
            while (await self._topic_meta(name, fresh=True)).info.partitions < total:
                await trio.sleep(0.02)
        return await self.topic(name)

    # ------------------------------------------------------------------ data
    async def append(
        self,
        topic: str,
        partition: int,
        batch: RecordBatch,
        expected_offset: int | None = None,
    ) -> AppendResult:
        """Kafka has no conditional produce (KIP-27 was never done). A conditional append holds
        the partition's gate exclusive across a fresh high-watermark read and the produce, so no
        append of this gateway comes in between; a producer outside this gateway still can, and
        then the records land at other offsets: that is reported (INTERNAL, see
        ``landed_elsewhere``), not undone."""
        if expected_offset is None:
            async with self._gate.shared(topic, partition):
                return await self._append(topic, partition, batch)
        async with self._gate.exclusive(topic, partition):
            self._fresh.pop((topic, partition), None)  # a cached watermark may be stale
            hw = (await self.partition_info(topic, partition)).high_watermark
            if hw != expected_offset:
                raise offset_mismatch(topic, partition, expected_offset, hw)
            result = await self._append(topic, partition, batch)
        if batch.count and result.base_offset != expected_offset:
            raise landed_elsewhere(topic, partition, expected_offset, result.base_offset)
        return result

    async def _append(self, topic: str, partition: int, batch: RecordBatch) -> AppendResult:
        meta = await self._topic_meta(topic, partition)
        now = now_us()
        if not batch.count:
            info = await self.partition_info(topic, partition)
            return AppendResult(partition, info.high_watermark, info.high_watermark - 1, now)
        block = batch.encoded_as(CANONICAL)
        if block is not None:  # a canonical block (Kafka 0.8 produce): no per-record objects
            data, count = canonical_to_batch(block, now // 1000, codec=self._codec)
        else:
            records = batch.records
            data, count = encode_batch(records, now // 1000, codec=self._codec), len(records)
        base = await self._produce(topic, partition, meta, data)
        self._hw_hint[(topic, partition)] = base + count
        self._fresh.pop((topic, partition), None)
        return AppendResult(partition, base, base + count - 1, now)

    async def _produce(self, topic: str, partition: int, meta: _TopicMeta, data: bytes) -> int:
        request = produce_req.ProduceRequest(
            transactional_id=None,
            acks=i16(-1),
            timeout=_ms(self.config.request_timeout_ms),
            topic_data=(
                produce_req.TopicProduceData(
                    name=topic,
                    partition_data=(
                        produce_req.PartitionProduceData(index=i32(partition), records=data),
                    ),
                ),
            ),
        )
        response = await self._call(request, self._leader(meta, partition), APPEND_SENT.get())
        for t in response.responses:
            for p in t.partition_responses:
                if int(p.error_code):
                    raise await self._partition_error(
                        topic, partition, p.error_code, f"produce to {topic}/{partition}"
                    )
                return int(p.base_offset)
        raise GatewayError(ErrorCode.INTERNAL, "empty Produce response")

    async def _list_offset(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp) from ListOffsets: -1 latest, -2 earliest, else a time in ms."""
        meta = await self._topic_meta(topic, partition)
        request = lo_req.ListOffsetsRequest(
            replica_id=i32(-1),
            isolation_level=i8(0),
            topics=(
                lo_req.ListOffsetsTopic(
                    name=topic,
                    partitions=(
                        lo_req.ListOffsetsPartition(
                            partition_index=i32(partition),
                            current_leader_epoch=i32(-1),
                            timestamp=i64(timestamp),
                        ),
                    ),
                ),
            ),
        )
        response = await self._call(request, self._leader(meta, partition))
        for t in response.topics:
            for p in t.partitions:
                if int(p.error_code):
                    raise await self._partition_error(
                        topic, partition, p.error_code, f"list offsets of {topic}/{partition}"
                    )
                return int(p.offset), int(p.timestamp)
        raise GatewayError(ErrorCode.INTERNAL, "empty ListOffsets response")

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        """From a Fetch at the last high watermark seen (no records decoded): its answer carries
        the log start and high watermark. (Tansu 0.6 answers ListOffsets "latest" with the base
        offset of the last batch plus one, so ListOffsets is not used for the high watermark.)"""
        fresh = self._fresh.get((topic, partition))
        if fresh is not None and trio.current_time() - fresh[2] < FRESH_S:
            return PartitionInfo(topic, partition, fresh[0], fresh[1])
        hint = self._hw_hint.get((topic, partition), 0)
        try:
            _, hw, start = await self._fetch(topic, partition, hint, 1, 0)
        except GatewayError as exc:
            if exc.code is not ErrorCode.OFFSET_OUT_OF_RANGE:
                raise
            earliest, _ = await self._list_offset(topic, partition, -2)
            _, hw, start = await self._fetch(topic, partition, max(earliest, 0), 1, 0)
        return PartitionInfo(topic, partition, max(start, 0), max(hw, 0))

    async def _fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, max_records: int = 1 << 62
    ) -> tuple[list[Record], int, int]:
        got = await self._fetch_raw(topic, partition, offset, max_bytes)
        try:
            return decode_batches(got.data, offset, max_records, got.aborted), got.hw, got.start
        except KafkaRecordError as exc:
            raise GatewayError(ErrorCode.CORRUPT_MESSAGE, f"{topic}/{partition}: {exc}") from exc

    async def _fetch_raw(
        self, topic: str, partition: int, offset: int, max_bytes: int, wait_ms: int = 1
    ) -> _Fetched:
        """One Fetch of one partition. ``wait_ms``: the broker's max wait (min bytes is 1, so
        it answers as soon as it has a record). Under read-committed the broker answers up to
        the last stable offset, with the aborted transactions among the batches it sends."""
        meta = await self._topic_meta(topic, partition)
        request = fetch_req.FetchRequest(
            replica_id=i32(-1),
            max_wait=_ms(wait_ms),  # Tansu answers a zero wait with no partitions at all
            min_bytes=i32(1),
            max_bytes=i32(max(max_bytes, 1)),
            isolation_level=i8(self._isolation),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=(
                fetch_req.FetchTopic(
                    topic=topic,
                    partitions=(
                        fetch_req.FetchPartition(
                            partition=i32(partition),
                            current_leader_epoch=i32(-1),
                            fetch_offset=i64(offset),
                            log_start_offset=i64(-1),
                            partition_max_bytes=i32(max(max_bytes, 1)),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        response = await self._call(request, self._leader(meta, partition))
        if int(response.error_code):
            raise kafka_error(response.error_code, f"fetch from {topic}/{partition}")
        for t in response.responses:
            for p in t.partitions:
                if int(p.error_code):
                    raise await self._partition_error(
                        topic, partition, p.error_code, f"fetch from {topic}/{partition}"
                    )
                hw = int(p.high_watermark)
                aborted = None
                if self._isolation:
                    lso = int(p.last_stable_offset)
                    if 0 <= lso < hw:
                        hw = lso
                    aborted = tuple(
                        (int(a.producer_id), int(a.first_offset))
                        for a in p.aborted_transactions or ()
                    )
                data = p.records or b""
                if 0 <= offset < hw and only_markers_from(data, offset, aborted) >= hw:
                    # nothing but transaction markers (or aborted records) from here to the
                    # end: for readers the log ends here (a Kafka 0.8 client cannot skip them,
                    # and would wait at ``offset`` below a high watermark it never reaches)
                    hw = offset
                start = int(p.log_start_offset)
                self._hw_hint[(topic, partition)] = hw
                self._fresh[(topic, partition)] = (max(start, 0), hw, trio.current_time())
                return _Fetched(data, hw, start, aborted)
        raise unavailable(f"fetch from {topic}/{partition}: the broker answered no partition")

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        """One Fetch. The records come back as one canonical block (no per-record objects,
        what the embedded log returns), or decoded when not dense (compaction, transactions).

        Read-ahead (on by default; ``read_ahead = false`` turns it off), for a consumer catching
        up: when an answer ends below the high watermark, the Fetch for the offset after it is
        sent at once, in the background, so the broker's work and the round trip overlap with
        the consumer handling this answer. A read from
        inside the last answer (a Kafka 0.8 client cuts answers at its max bytes, in other
        units than v2 records) gets the rest of that answer plus the read-ahead one. Offsets
        below the high watermark never change in Kafka, so these are the records a Fetch would
        get now; state older than ``AHEAD_S`` is not used, and creating or deleting the topic
        here, or a partition error, drops it."""
        ahead = self._ahead.get((topic, partition))
        if ahead is not None:
            served = await self._read_from_ahead(
                ahead, topic, partition, offset, max_records, max_bytes
            )
            if served is not None:
                return served
            self._ahead.pop((topic, partition), None)
        got = await self._fetch_raw(topic, partition, offset, max_bytes)
        self._check_range(topic, partition, offset, got)
        batches = self._batch_from(topic, partition, got, offset, max_records, max_bytes)
        if not batches and 0 <= offset < got.hw:
            # records may exist there but none came: the first batch is larger than max_bytes
            # and the broker sent a partial one, or (Tansu, loaded) its 1 ms wait ran out first;
            # or only transaction markers or aborted records lie between here and ``hw``
            room = max(max_bytes, 1 << 24)
            got = await self._fetch_raw(topic, partition, offset, room, wait_ms=500)
            self._check_range(topic, partition, offset, got)
            batches = self._batch_from(topic, partition, got, offset, max_records, room)
        if batches and ahead is None and self.config.read_ahead:  # not after a miss: two
            # consumers at other offsets would thrash
            self._read_ahead(topic, partition, batches[-1], got.hw, max_bytes)
        return batches

    @staticmethod
    def _check_range(topic: str, partition: int, offset: int, got: _Fetched) -> None:
        """OFFSET_OUT_OF_RANGE only outside [log start, high watermark]: an offset inside a gap
        (a transaction marker, aborted or compacted records) reads the records after it."""
        start = max(got.start, 0)
        if offset < start or offset > got.hw:
            raise GatewayError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} of {topic}/{partition} is outside its range "
                f"[{start}, {got.hw}] (log start, high watermark)",
            )

    async def _read_from_ahead(
        self,
        ahead: _Ahead,
        topic: str,
        partition: int,
        offset: int,
        max_records: int,
        max_bytes: int,
    ) -> list[RecordBatch] | None:
        """The records from ``offset`` out of the read-ahead state, or None when it does not
        hold them (the caller then fetches)."""
        last = ahead.last
        if trio.current_time() - ahead.at >= AHEAD_S:
            return None
        out: list[RecordBatch] = []
        if last.first_offset <= offset < ahead.next_offset:
            rest = last.slice(offset, max_records)
            # enough for this read (a Kafka 0.8 entry is at most ~1.2x a canonical record, so
            # below this the client takes all of it): the read-ahead answer waits for the next
            if rest.count >= max_records or rest.size_bytes * 5 >= max_bytes * 4:
                return [rest]
            out.append(rest)
        elif offset != ahead.next_offset:
            return None
        await ahead.done.wait()
        if ahead.result is None or trio.current_time() - ahead.result_at >= AHEAD_S:
            return out or None
        got = ahead.result
        left = max_records - sum(b.count for b in out)
        following = self._batch_from(
            topic, partition, got, ahead.next_offset, left, ahead.max_bytes
        )
        if not following or following[0].first_offset != ahead.next_offset:
            return out or None
        out.extend(following)
        # the core asks for the high watermark next: the one of this answer, as if it had just
        # arrived (it is at most AHEAD_S old; every Fetch answer is a little)
        self._fresh[(topic, partition)] = (max(got.start, 0), got.hw, trio.current_time())
        self._ahead.pop((topic, partition), None)
        self._read_ahead(topic, partition, following[-1], got.hw, ahead.max_bytes)
        return out

    def _read_ahead(
        self, topic: str, partition: int, batch: RecordBatch, hw: int, max_bytes: int
    ) -> None:
        """Keep ``batch`` (canonical) and, when the partition has more, fetch what follows it."""
        following = batch.last_offset + 1
        if batch.encoded_as(CANONICAL) is None or following >= hw or self._nursery is None:
            return
        if len(self._ahead) >= AHEAD_MAX:
            self._ahead.clear()
        ahead = _Ahead(batch, trio.current_time(), following, trio.Event(), max_bytes)
        self._ahead[(topic, partition)] = ahead
        self._nursery.start_soon(self._fetch_ahead, topic, partition, ahead)

    async def _fetch_ahead(self, topic: str, partition: int, ahead: _Ahead) -> None:
        try:
            ahead.result = await self._fetch_raw(
                topic, partition, ahead.next_offset, ahead.max_bytes
            )
            ahead.result_at = trio.current_time()
        except GatewayError:
            pass  # the read from there fetches again and reports the error
        finally:
            ahead.done.set()

    def _forget_ahead(self, topic: str) -> None:
        for key in [k for k in self._ahead if k[0] == topic]:
            del self._ahead[key]

    def _batch_from(
        self,
        topic: str,
        partition: int,
        got: _Fetched,
        offset: int,
        max_records: int,
        max_bytes: int = 1 << 62,
    ) -> list[RecordBatch]:
        """The records from ``offset`` in a Fetch answer, as batches of consecutive offsets: one
        canonical block when they are dense (no per-record objects; it stops converting at
        ``max_bytes``, as the broker sends whole batches beyond it, which the reader would drop),
        else decoded records cut at every gap (transaction markers, aborted transactions,
        compaction), each batch keeping the offsets the cluster gave its records."""
        try:
            canonical = batches_to_canonical(
                got.data, max(offset, 0), max_records, max_bytes, got.aborted
            )
            if canonical is not None:
                block, count, max_ts = canonical
                if not count:
                    return []
                batch = RecordBatch(
                    encoded=block,
                    codec=CANONICAL,
                    count=count,
                    base_offset=offset,
                    max_timestamp_us=max_ts,
                )
                return [batch]
            records = decode_batches(got.data, max(offset, 0), max_records, got.aborted)
            return dense_batches(records)
        except KafkaRecordError as exc:
            raise GatewayError(ErrorCode.CORRUPT_MESSAGE, f"{topic}/{partition}: {exc}") from exc

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp_us: int) -> int:
        """ListOffsets by the millisecond, then a scan for the microsecond (the sub-millisecond
        part of a timestamp is a record header, which the broker does not index)."""
        target_ms = max(timestamp_us, 0) // 1000
        offset, _ = await self._list_offset(topic, partition, target_ms)
        hw = (await self.partition_info(topic, partition)).high_watermark
        if offset < 0:
            return hw
        while offset < hw:
            records, hw, _ = await self._fetch(topic, partition, offset, 1 << 20)
            if not records:
                break
            for r in records:
                if r.timestamp_us >= timestamp_us:
                    return r.offset
            offset = records[-1].offset + 1
        return hw

    # ------------------------------------------------------------------ key-value store
    def _kv_key(self, namespace: str, key: str) -> bytes:
        return namespace.encode() + b"\x00" + key.encode()

    async def _kv_sync(self) -> None:
        """Create the compacted kv topic once, then read it to its end (other gateway instances
        write it too)."""
        try:
            await self._kv_catch_up()
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNKNOWN_TOPIC:
                raise
            # the topic went away (an in-memory broker restarted): start over
            self._kv_ready = False
            self._kv.clear()
            self._kv_next = 0
            await self._kv_catch_up()

    async def _kv_catch_up(self) -> None:
        topic = self.config.kv_topic
        if not self._kv_ready:
            try:
                await self._topic_meta(topic, 0)
            except GatewayError as exc:
                if exc.code is not ErrorCode.UNKNOWN_TOPIC:
                    raise
                try:
                    await self._create_topic(topic, 1, (), compact=True)
                except GatewayError as exc2:
                    if exc2.code is not ErrorCode.TOPIC_EXISTS:
                        raise
            self._kv_ready = True
        while True:
            records, hw, start = await self._fetch(topic, 0, max(self._kv_next, 0), 1 << 22)
            for r in records:
                ns, _, key = (r.key or b"").partition(b"\x00")
                k = (ns.decode(), key.decode())
                if r.value is None:
                    self._kv.pop(k, None)
                else:
                    self._kv[k] = r.value
                self._kv_next = r.offset + 1
            if not records:
                if self._kv_next < start:
                    self._kv_next = start
                    continue
                if self._kv_next > hw:  # the broker lost its data (in-memory broker restart)
                    self._kv.clear()
                    self._kv_next = 0
                    continue
                return

    async def _kv_write(self, namespace: str, key: str, value: bytes | None) -> None:
        async with self._kv_lock:
            await self._kv_sync()
            topic = self.config.kv_topic
            meta = await self._topic_meta(topic, 0)
            rec = Record(self._kv_key(namespace, key), value, (), now_us())
            base = await self._produce(topic, 0, meta, encode_batch([rec], now_us() // 1000))
            if value is None:
                self._kv.pop((namespace, key), None)
            else:
                self._kv[(namespace, key)] = value
            if base == self._kv_next:
                self._kv_next = base + 1

    async def kv_get(self, namespace: str, key: str) -> bytes | None:
        committed = await self._offset_fetch(key) if namespace == OFFSETS_NS else None
        async with self._kv_lock:
            await self._kv_sync()
            mirrored = self._kv.get((namespace, key))
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

    async def kv_put(self, namespace: str, key: str, value: bytes) -> None:
        if namespace == OFFSETS_NS:
            await self._offset_commit(key, value)
        await self._kv_write(namespace, key, bytes(value))

    async def kv_delete(self, namespace: str, key: str) -> None:
        if namespace == OFFSETS_NS:
            await self._offset_commit(key, b'{"offset": -1}')
        await self._kv_write(namespace, key, None)

    async def kv_scan(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        async with self._kv_lock:
            await self._kv_sync()
            return sorted(
                (k, v)
                for (ns, k), v in self._kv.items()
                if ns == namespace and k.startswith(prefix)
            )

    # ------------------------------------------------------------------ committed offsets
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
        response = await self._call(fc_req.FindCoordinatorRequest(key=group, key_type=i8(0)))
        if int(response.error_code):
            raise kafka_error(response.error_code, f"find coordinator of {group}")
        node = int(response.node_id)
        self._brokers[node] = (response.host, int(response.port))
        self._coordinators[group] = node
        return node

    async def _offset_commit(self, key: str, value: bytes) -> None:
        """Also commit through Kafka's group offsets: Kafka consumers of the group see it."""
        parsed = self._offset_key(key)
        if parsed is None or not (self._api_ok or {}).get(8):
            return
        group, topic, partition = parsed
        data = json.loads(value)
        request = oc_req.OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            topics=(
                oc_req.OffsetCommitRequestTopic(
                    name=topic,
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
        response = await self._call(request, await self._coordinator(group))
        for t in response.topics:
            for p in t.partitions:
                err = KErr(int(p.error_code))
                if err in (KErr.not_coordinator, KErr.coordinator_not_available):
                    self._coordinators.pop(group, None)
                if err is not KErr.none and err is not KErr.unknown_topic_or_partition:
                    raise kafka_error(err, f"commit offset of {group}")

    async def _offset_fetch(self, key: str) -> bytes | None:
        parsed = self._offset_key(key)
        if parsed is None or not (self._api_ok or {}).get(9):
            return None
        group, topic, partition = parsed
        request = of_req.OffsetFetchRequest(
            group_id=group,
            topics=(
                of_req.OffsetFetchRequestTopic(name=topic, partition_indexes=(i32(partition),)),
            ),
        )
        response = await self._call(request, await self._coordinator(group))
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


def _sasl_login(config: KafkaConfig) -> SaslLogin | None:
    if not config.sasl_mechanism:
        return None
    password = config.sasl_password
    if config.sasl_password_file:
        with open(config.sasl_password_file) as f:
            password = f.read().rstrip("\n")
    return SaslLogin(config.sasl_mechanism, config.sasl_username, password)


def _factory(name: str, options: Any, config: Any) -> Backend:
    return KafkaBackend(name, options)


BACKEND = BackendSpec("kafka", KafkaConfig, _factory)
