"""The cluster side of the Kafka backend: connections to the brokers (TLS, SASL), the API
versions checked at connect, Kafka's error codes as the model's, and the topic metadata (leaders
per partition, cached for ``metadata_max_age_ms``)."""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
import trio
from kio.schema.errors import ErrorCode as KErr
from kio.schema.metadata.v7 import request as md_req
from kio.schema.types import TopicName
from kio.static.primitive import i32Timedelta

from gateway.backends.base import unsupported
from gateway.backends.client_tls import client_ssl_context
from gateway.backends.kafka.config import (
    API_NAMES,
    API_VERSIONS,
    REQUIRED_APIS,
    KafkaConfig,
    sasl_login,
)
from gateway.backends.kafka.connection import BrokerConnection, unavailable
from gateway.config import ConfigError
from gateway.model import ErrorCode, GatewayError, TopicInfo

log = structlog.get_logger("gateway.backends.kafka")

RETRIABLE_KAFKA = {
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
    if err in RETRIABLE_KAFKA:
        return unavailable(f"{what}: Kafka {err.name} (retriable)")
    mapped = _KAFKA_TO_GATEWAY.get(err, ErrorCode.INTERNAL)
    return GatewayError(mapped, f"{what}: Kafka error {err.name}")


def ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


@dataclass
class TopicMeta:
    info: TopicInfo
    leaders: list[int]
    at: float


class KafkaCluster:
    """The brokers of one cluster, as the backend's parts reach them: ``call`` sends a request
    to a broker (the partition leader, a coordinator, or any bootstrap broker) over a kept
    connection, opened again after a loss. ``on_negotiated`` gets which pinned API versions the
    broker supports, once they are known."""

    def __init__(
        self, name: str, config: KafkaConfig, on_negotiated: Callable[[dict[int, bool]], None]
    ) -> None:
        self.name = name
        self.config = config
        self._on_negotiated = on_negotiated
        self._bootstrap = []
        for part in config.bootstrap.split(","):
            host, _, port = part.strip().rpartition(":")
            self._bootstrap.append((host or "127.0.0.1", int(port or 9092)))
        self.brokers: dict[int, tuple[str, int]] = {}
        self._conns: dict[Any, BrokerConnection] = {}
        self._conn_lock = trio.Lock()
        self.nursery: trio.Nursery | None = None
        self.topics: dict[str, TopicMeta] = {}
        self.topic_configs: dict[str, tuple[tuple[str, str], ...]] = {}
        self.api_ok: dict[int, bool] | None = None
        self.api_ranges: dict[int, tuple[int, int]] = {}  # the broker's, from ApiVersions
        self.timeout = config.request_timeout_ms / 1000
        try:
            self._ssl = (
                client_ssl_context(config.tls_ca_file, config.tls_cert_file, config.tls_key_file)
                if config.uses_tls
                else None
            )
            self._sasl = sasl_login(config)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError([f"backends.{name}: {exc}"]) from None
        self._last_failure = ""

    async def open(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        try:
            await self.negotiate()
        except GatewayError:
            pass  # the broker is down: every call reports it until it is back

    async def close(self) -> None:
        for conn in list(self._conns.values()):
            await conn.aclose()
        self._conns.clear()

    async def connection(self, node: int | None) -> BrokerConnection:
        """The connection to broker ``node`` (None: any bootstrap broker)."""
        key: Any = node if node is not None else "bootstrap"
        conn = self._conns.get(key)
        if conn is not None and not conn.closed:
            return conn
        async with self._conn_lock:
            conn = self._conns.get(key)
            if conn is not None and not conn.closed:
                return conn
            assert self.nursery is not None, "open() the backend first"
            if conn is not None:  # a connection was lost: the cluster may have changed since
                self.topics.clear()
            addresses = [self.brokers[node]] if node in self.brokers else self._bootstrap
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
                    await conn.connect(self.nursery, self.config.connect_timeout_ms / 1000)
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

    async def call(
        self, request: Any, node: int | None = None, on_sent: Callable[[], None] | None = None
    ) -> Any:
        if self.api_ok is None:
            await self.negotiate()
        conn = await self.connection(node)
        return await conn.call(request, self.timeout, on_sent)

    async def negotiate(self) -> None:
        """ApiVersions: check the broker speaks the version we use of every API."""
        from kio.schema.api_versions.v0.request import ApiVersionsRequest

        conn = await self.connection(None)
        response = await conn.call(ApiVersionsRequest(), self.timeout)
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
        self.api_ranges = ranges
        self.api_ok = ok
        self._on_negotiated(ok)

    def api_range(self, api: int) -> tuple[int, int] | None:
        """The broker's (min, max) version of ``api``, None when it has none (known once
        negotiated: callers call first)."""
        return self.api_ranges.get(api)

    def require(self, api: int, what: str) -> None:
        if self.api_ok is not None and not self.api_ok.get(api):
            raise unsupported(
                f"{what} (the broker has no {API_NAMES[api]} v{API_VERSIONS[api]})", self.name
            )

    async def metadata(self, topics: list[str] | None) -> Any:
        request = md_req.MetadataRequest(
            topics=None
            if topics is None
            else tuple(md_req.MetadataRequestTopic(name=TopicName(t)) for t in topics),
            allow_auto_topic_creation=False,
        )
        response = await self.call(request)
        for b in response.brokers:
            self.brokers[int(b.node_id)] = (b.host, int(b.port))
        return response

    async def topic_meta(
        self, name: str, partition: int | None = None, fresh: bool = False
    ) -> TopicMeta:
        meta = self.topics.get(name)
        now = trio.current_time()
        if (
            meta is not None
            and not fresh
            and now - meta.at < self.config.metadata_max_age_ms / 1000
            and (partition is None or 0 <= partition < meta.info.partitions)
        ):
            return meta
        response = await self.metadata([name])
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
            config = self.topic_configs.get(name, ())
            meta = TopicMeta(TopicInfo(name, len(parts), config), leaders, now)
        if meta is None or meta.info.partitions == 0:
            self.topics.pop(name, None)
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        self.topics[name] = meta
        if partition is not None and not 0 <= partition < meta.info.partitions:
            raise GatewayError(
                ErrorCode.UNKNOWN_PARTITION,
                f"topic {name!r} has no partition {partition} (it has {meta.info.partitions})",
            )
        return meta

    def leader(self, meta: TopicMeta, partition: int) -> int | None:
        leader = meta.leaders[partition]
        return leader if leader >= 0 and leader in self.brokers else None
