"""Produce requests of the Kafka backend: one record batch v2 to one partition leader, acks = all.

With idempotence on (see ``idempotence.py``) a produce that fails in a way that may not have
reached the log (the connection dropped, no answer within ``request_timeout_ms``, a retriable
broker error such as NOT_LEADER_OR_FOLLOWER) is sent again, with the same producer fields and
sequence, until ``delivery_timeout_ms`` after the first send: the broker stores it once. A
produce never written (no connection) is tried once more on a new connection, then fails at once
with its sequences given back when no later batch took any. With idempotence off a produce is
sent once and its failure goes back to the client, as a retry could store it twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
from kio.schema.errors import ErrorCode as KErr
from kio.schema.produce.v7 import request as produce_req
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32

from gateway.backends.kafka.cluster import KafkaCluster, TopicMeta, kafka_error, log, ms
from gateway.backends.kafka.idempotence import RESET_ERRORS, IdempotentProducer, Stamp
from gateway.backends.kafka.sasl import LoginRefused
from gateway.model import ErrorCode, GatewayError
from gateway.observability import limit_hit

PartitionError = Callable[[str, int, Any, str], Awaitable[GatewayError]]
RETRY_CODES = (ErrorCode.BACKEND_UNAVAILABLE, ErrorCode.TIMEOUT)
BACKOFF_S = 0.05
BACKOFF_MAX_S = 1.0
UNKNOWN_OFFSET = -1  # a duplicate the broker no longer holds the offsets of (see _idempotent)


class Producer:
    """Writes record batches; ``partition_error`` turns a partition's error code into the
    model's error (``RecordStore.partition_error``: it also drops stale metadata)."""

    def __init__(self, cluster: KafkaCluster, partition_error: PartitionError) -> None:
        self.cluster = cluster
        self.config = cluster.config
        self._partition_error = partition_error
        self.idempotence = IdempotentProducer(
            cluster.name, cluster.config.idempotence, cluster.call, cluster.api_range
        )

    async def produce(
        self,
        topic: str,
        partition: int,
        meta: TopicMeta,
        data: bytes,
        count: int,
        on_sent: Callable[[], None] | None = None,
    ) -> int:
        """The base offset of ``data`` (one batch of ``count`` records) once stored;
        ``UNKNOWN_OFFSET`` for a retry the broker recognised only as a duplicate."""
        if self.idempotence.state == "pending" and self.cluster.api_ok is None:
            await self.cluster.negotiate()
        if not await self.idempotence.ensure():
            response = await self.cluster.call(
                self._request(topic, partition, data), self.cluster.leader(meta, partition), on_sent
            )
            code, base = _answer(response)
            if code:
                what = f"produce to {topic}/{partition}"
                raise await self._partition_error(topic, partition, code, what)
            return base
        return await self._idempotent(topic, partition, data, count, on_sent)

    async def _idempotent(
        self,
        topic: str,
        partition: int,
        data: bytes,
        count: int,
        on_sent: Callable[[], None] | None,
    ) -> int:
        idem = self.idempotence
        p = idem.partition(topic, partition)
        what = f"produce to {topic}/{partition}"
        deadline = trio.current_time() + self.config.delivery_timeout_ms / 1000
        stamp: Stamp | None = None
        stamped = b""
        notify = on_sent
        sent = False  # some attempt was written (the broker may have stored the batch)
        attempt = 0
        unsent = 0  # failures before any attempt was written
        try:
            while True:
                held = True
                await p.lock.acquire()

                def written() -> None:
                    # the batch is on the wire: the partition's next batch may take its turn
                    nonlocal held, notify, sent
                    sent = True
                    if held:
                        held = False
                        p.lock.release()
                    if notify is not None:
                        callback = notify
                        notify = None
                        callback()

                error: GatewayError | None = None
                code = 0
                try:
                    if stamp is None or not idem.current(stamp):
                        if stamp is not None:
                            p.in_flight.discard(stamp)
                        stamped, stamp = idem.take(p, data, count)
                        p.in_flight.add(stamp)
                    meta = await self.cluster.topic_meta(topic, partition)
                    response = await self.cluster.call(
                        self._request(topic, partition, stamped),
                        self.cluster.leader(meta, partition),
                        written,
                    )
                    code, base = _answer(response)
                    if not code:
                        return base
                except LoginRefused:
                    raise
                except GatewayError as exc:
                    error = exc
                finally:
                    if held:
                        held = False
                        p.lock.release()
                assert stamp is not None
                if code:
                    err = KErr(code)
                    if err is KErr.duplicate_sequence_number:
                        return UNKNOWN_OFFSET  # stored before, and its answer was lost
                    if not idem.current(stamp) and trio.current_time() < deadline:
                        continue  # refused under an epoch reset since: again under the new one
                    if err is KErr.out_of_order_sequence_number and idem.earlier_in_flight(
                        p, stamp
                    ):
                        # an earlier batch is being retried: send this again after it
                        error = GatewayError(ErrorCode.BACKEND_UNAVAILABLE, f"{what}: {err.name}")
                    elif err in RESET_ERRORS or err is KErr.out_of_order_sequence_number:
                        if trio.current_time() > deadline:
                            raise self._expired(kafka_error(err, what), topic, partition)
                        await idem.reset(stamp, err.name)
                        if not idem.on:  # the cluster no longer gives producer ids
                            raise kafka_error(err, what)
                        continue  # at once, with the new epoch (no backoff: nothing is wrong)
                    else:
                        error = await self._partition_error(topic, partition, code, what)
                assert error is not None
                if error.code not in RETRY_CODES:
                    raise error
                if not sent:
                    unsent += 1  # once more on a new connection (the old one broke), then
                    # the error: the cluster is down, as the client sees without idempotence
                    if unsent > 1 and idem.give_back(p, stamp, count):
                        raise error  # never written: its sequences are free again
                pause = min(BACKOFF_S * (1 << attempt), BACKOFF_MAX_S)
                if trio.current_time() + pause > deadline:
                    raise self._expired(error, topic, partition)
                attempt += 1
                await trio.sleep(pause)
        finally:
            if stamp is not None:
                p.in_flight.discard(stamp)

    def _expired(self, error: GatewayError, topic: str, partition: int) -> GatewayError:
        """``delivery_timeout_ms`` ran out: counted, logged (rate-limited), the last error."""
        limit_hit(
            "delivery_timeout_ms",
            "server",
            log,
            backend=self.cluster.name,
            topic=topic,
            partition=partition,
            error=error.message,
        )
        return error

    def _request(self, topic: str, partition: int, data: bytes) -> Any:
        return produce_req.ProduceRequest(
            transactional_id=None,
            acks=i16(-1),
            timeout=ms(self.config.request_timeout_ms),
            topic_data=(
                produce_req.TopicProduceData(
                    name=TopicName(topic),
                    partition_data=(
                        produce_req.PartitionProduceData(
                            index=i32(partition), records=Records.parse(data)
                        ),
                    ),
                ),
            ),
        )


def _answer(response: Any) -> tuple[int, int]:
    """(error code, base offset) of the one partition of a Produce answer."""
    for t in response.responses:
        for p in t.partition_responses:
            return int(p.error_code), int(p.base_offset)
    raise GatewayError(ErrorCode.INTERNAL, "empty Produce response")
