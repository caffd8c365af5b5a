"""The Kafka backend as an idempotent producer (``idempotence = true``, the default).

The backend asks the cluster for a producer id (InitProducerId without a transactional id, at
the first produce) and writes every record batch with that id, its epoch and a sequence number
per partition (the batch's first sequence; the next batch starts after its last record). A
produce whose answer was lost (the connection dropped, the request timed out, a leader moved) is
sent again with the *same* bytes, so the same sequence: the broker recognises the retry and
answers with the offsets of the first write instead of storing the records twice.

Ordering: the broker accepts a partition's batches only in sequence order, so a batch takes its
sequence and is written to the connection under the partition's lock (released once written;
the round trips still overlap). A retry that arrives before an earlier batch's retry gets
OUT_OF_ORDER_SEQUENCE_NUMBER and is sent again after it. When the earliest batch in flight gets
OUT_OF_ORDER_SEQUENCE_NUMBER (a batch before it was lost for good), or the broker forgot or
fenced the producer (UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED), the producer
is reset as librdkafka does: the epoch is bumped (InitProducerId v3+ with the current id and
epoch; a fresh id from older brokers), every partition's sequence starts again at 0, and the
batch is written anew under the new epoch.

A cluster that cannot give a producer id (no InitProducerId, or an error answer such as Tansu
0.6's UNKNOWN_SERVER_ERROR) turns idempotence off for the backend's lifetime: one log line
naming the cluster's answer, ``gateway_kafka_idempotent{backend}`` 0, and plain produces (not
retried: a retry could store the batch twice) from then on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio
from kio.schema.errors import ErrorCode as KErr
from prometheus_client import Counter, Gauge

from gateway.backends.kafka.records import stamp_producer
from gateway.model import ErrorCode, GatewayError
from gateway.observability import REGISTRY

log = structlog.get_logger("gateway.backends.kafka")

IDEMPOTENT = Gauge(
    "gateway_kafka_idempotent",
    "1 when the Kafka backend writes as an idempotent producer, 0 when the cluster refused it "
    "or idempotence = false (absent until the first produce asks)",
    ["backend"],
    registry=REGISTRY,
)
PRODUCER_RESETS = Counter(
    "gateway_kafka_producer_resets_total",
    "Producer id resets (epoch bumps) of the Kafka backend, by the broker error that caused it",
    ["backend", "error"],
    registry=REGISTRY,
)

INIT_PRODUCER_ID = 22
SEQUENCE_WRAP = 1 << 31  # sequences are int32 and wrap to 0 (as the broker computes them)
RESET_ERRORS = {
    KErr.unknown_producer_id,
    KErr.invalid_producer_epoch,
    KErr.producer_fenced,
    KErr.invalid_producer_id_mapping,
}


@dataclass(frozen=True, slots=True)
class Stamp:
    """The producer fields one batch was written with."""

    producer_id: int
    epoch: int
    sequence: int


@dataclass
class _Partition:
    next_seq: int = 0
    lock: trio.Lock = field(default_factory=trio.Lock)
    in_flight: set[Stamp] = field(default_factory=set)  # of the batches not answered yet


class IdempotentProducer:
    """Producer id, epoch and per-partition sequences of one backend. ``call`` sends a request
    to any broker (``KafkaCluster.call``); ``api_range`` gives the broker's version range of an
    API, or None."""

    def __init__(
        self,
        backend: str,
        enabled: bool,
        call: Callable[..., Any],
        api_range: Callable[[int], tuple[int, int] | None],
    ) -> None:
        self.backend = backend
        self._call = call
        self._api_range = api_range
        self.state = "pending" if enabled else "off"
        self.reason = "" if enabled else "idempotence = false"
        self.producer_id = -1
        self.epoch = -1
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._init_lock = trio.Lock()
        if not enabled:
            IDEMPOTENT.labels(backend).set(0)

    @property
    def on(self) -> bool:
        return self.state == "on"

    def describe(self) -> str:
        return self.state if not self.reason else f"{self.state} ({self.reason})"

    async def ensure(self) -> bool:
        """Whether produces are idempotent; asks the cluster for a producer id the first time.
        A retriable failure (the cluster is down) raises, and the next produce asks again."""
        if self.state != "pending":
            return self.on
        async with self._init_lock:
            if self.state == "pending":
                await self._init(bump=False)
        return self.on

    async def _init(self, bump: bool) -> None:
        versions = self._api_range(INIT_PRODUCER_ID)
        if versions is None:
            self._turn_off("the cluster has no InitProducerId API")
            return
        lo, hi = versions
        version = next((v for v in (4, 3, 2, 1, 0) if lo <= v <= hi), None)
        if version is None:
            self._turn_off(f"the cluster's InitProducerId versions are {lo}-{hi}")
            return
        response = await self._call(_request(version, self.producer_id, self.epoch, bump))
        if bump and version >= 3 and int(response.error_code):
            # the broker forgot the producer (an in-memory broker restarted): a new id
            response = await self._call(_request(version, -1, -1, False))
        err = KErr(int(response.error_code))
        if err is not KErr.none:
            if err in (KErr.coordinator_not_available, KErr.coordinator_load_in_progress):
                raise GatewayError(
                    ErrorCode.BACKEND_UNAVAILABLE,
                    f"InitProducerId: Kafka {err.name} (retriable)",
                )
            if bump:  # the cluster gave an id before: a failed reset is not a refusal
                raise GatewayError(
                    ErrorCode.BACKEND_UNAVAILABLE, f"InitProducerId (reset): Kafka {err.name}"
                )
            self._turn_off(f"the cluster answered InitProducerId with {err.name.upper()}")
            return
        self.producer_id = int(response.producer_id)
        self.epoch = int(response.producer_epoch)
        self.state = "on"
        self.reason = ""
        for p in self._partitions.values():
            p.next_seq = 0
        IDEMPOTENT.labels(self.backend).set(1)

    def _turn_off(self, reason: str) -> None:
        self.state = "off"
        self.reason = reason
        IDEMPOTENT.labels(self.backend).set(0)
        log.warning(
            "kafka backend: idempotent produce is off, plain produce instead (a produce retried "
            "after a lost answer may be stored twice)",
            backend=self.backend,
            reason=reason,
        )

    async def reset(self, stale: Stamp, error: str) -> None:
        """Bump the epoch (or get a new id) unless another batch already did since ``stale``
        was written."""
        async with self._init_lock:
            if (self.producer_id, self.epoch) != (stale.producer_id, stale.epoch):
                return
            await self._init(bump=True)
            PRODUCER_RESETS.labels(self.backend, error).inc()
            log.warning(
                "kafka backend: producer reset, sequences start again",
                backend=self.backend,
                error=error,
                producer_id=self.producer_id,
                epoch=self.epoch,
            )

    def partition(self, topic: str, partition: int) -> _Partition:
        key = (topic, partition)
        p = self._partitions.get(key)
        if p is None:
            p = self._partitions[key] = _Partition()
        return p

    def take(self, p: _Partition, data: bytes, count: int) -> tuple[bytes, Stamp]:
        """``data`` stamped with the producer and the partition's next sequences (call under
        ``p.lock``, and write it before releasing the lock)."""
        stamp = Stamp(self.producer_id, self.epoch, p.next_seq)
        p.next_seq = (p.next_seq + count) % SEQUENCE_WRAP
        return stamp_producer(data, stamp.producer_id, stamp.epoch, stamp.sequence), stamp

    def give_back(self, p: _Partition, stamp: Stamp, count: int) -> bool:
        """Return the sequences of a batch that was never written, when no later batch took
        any since; whether they were returned."""
        if not self.current(stamp) or p.next_seq != (stamp.sequence + count) % SEQUENCE_WRAP:
            return False
        p.next_seq = stamp.sequence
        return True

    def current(self, stamp: Stamp) -> bool:
        return (stamp.producer_id, stamp.epoch) == (self.producer_id, self.epoch)

    @staticmethod
    def earlier_in_flight(p: _Partition, stamp: Stamp) -> bool:
        """Whether a batch of the same epoch written before ``stamp``'s is still unanswered."""
        return any(
            s.sequence < stamp.sequence
            for s in p.in_flight
            if (s.producer_id, s.epoch) == (stamp.producer_id, stamp.epoch)
        )


def _request(version: int, producer_id: int, epoch: int, bump: bool) -> Any:
    import datetime
    import importlib

    from kio.static.primitive import i16, i32Timedelta

    module = importlib.import_module(f"kio.schema.init_producer_id.v{version}.request")
    fields: dict[str, Any] = {
        "transactional_id": None,
        "transaction_timeout": i32Timedelta.parse(datetime.timedelta(milliseconds=60_000)),
    }
    if version >= 3 and bump and producer_id >= 0:
        fields["producer_id"] = producer_id
        fields["producer_epoch"] = i16(epoch)
    return module.InitProducerIdRequest(**fields)
