"""NATS ingestion for the Liftbridge listener (``[listeners.liftbridge] nats = "nats://..."``).

Liftbridge streams capture NATS subjects: the gateway subscribes to every stream partition's
subject (partition 0 on the stream subject, partition i on ``<subject>.<i>``; a queue
subscription when the stream has a group) on a real NATS server and stores what arrives
(docs/protocols/liftbridge.md):

- a publish envelope (magic, version 0, header length 8 or 12, flags, CRC-32C when flagged,
  MsgType 0, a protobuf ``Message``): key, value and headers are stored; an Ack envelope goes to
  the message's ack inbox when its ack policy asks for one (LEADER, ALL), or when it is rejected;
- a broken envelope (bad version, type, CRC or protobuf) is rejected: not stored, logged once and
  counted (``gateway_protocol_errors_total{protocol="liftbridge",kind="envelope_crc"}``, ...);
- anything else is a plain NATS message: the whole payload is the value, no key.

Every stored message gets the headers ``subject`` and ``reply`` (the NATS subject and reply-to).
Paused partitions are not listening (messages are lost, as in Liftbridge); readonly partitions
drop them. Streams are picked up by polling the topic list (``poll_s``).
"""

from __future__ import annotations

import time
from typing import Any

import structlog
import trio

from gateway.backends.nats.client import NatsClient
from gateway.core.view import CoreView
from gateway.model import Acks, ErrorCode, GatewayError, ListTopics, Produce, Record, RecordBatch
from gateway.observability import RECORDS_IN, protocol_error
from gateway.protocols.liftbridge import LiftbridgeListenerConfig, envelope
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.service import (
    CORRELATION_HEADER,
    PROTOCOL,
    partition_subject,
    stream_subject,
)
from gateway.protocols.liftbridge.state import state_for

log = structlog.get_logger("gateway.liftbridge.nats")


class NatsIngest:
    def __init__(self, core: CoreView, url: str, poll_s: float = 0.5) -> None:
        self.core = core
        self.state = state_for(core)
        self.client = NatsClient(url, name="gateway-liftbridge")
        self.poll_s = poll_s
        # (stream, partition) -> (subject, queue, sid)
        self.subscriptions: dict[tuple[str, int], tuple[str, str, int]] = {}
        self.by_sid: dict[int, tuple[str, int, str]] = {}
        self.ingested = 0

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.client.run)
            nursery.start_soon(self._consume)
            while True:
                try:
                    await self._sync_subscriptions()
                except GatewayError as exc:
                    log.warning("liftbridge_nats_sync_failed", error=exc.message)
                await trio.sleep(self.poll_s)

    async def _sync_subscriptions(self) -> None:
        topics = await self.core.execute(ListTopics())
        wanted: dict[tuple[str, int], tuple[str, str]] = {}
        for info in topics:
            base = stream_subject(info)
            group = info.get("liftbridge.group") or ""
            for p in range(info.partitions):
                wanted[(info.name, p)] = (partition_subject(base, p), group)
        for key, (subject, queue, sid) in list(self.subscriptions.items()):
            if wanted.get(key) != (subject, queue):
                self.client.unsubscribe(sid)
                del self.subscriptions[key]
                self.by_sid.pop(sid, None)
        for key, (subject, queue) in wanted.items():
            if key not in self.subscriptions:
                sid = self.client.subscribe(subject, queue)
                self.subscriptions[key] = (subject, queue, sid)
                self.by_sid[sid] = (key[0], key[1], subject)

    async def _consume(self) -> None:
        async for msgs in self.client.messages:
            runs: dict[tuple[str, int], list[tuple[Any, pb.Message | None]]] = {}
            for msg in msgs:
                target = self.by_sid.get(msg.sid)
                if target is None:
                    continue
                stream, partition, _ = target
                await self.state.refresh(stream)
                flags = self.state.get(stream, partition)
                if flags is not None and (flags.paused or flags.readonly):
                    continue
                try:
                    env = envelope.decode_publish(msg.payload)
                except envelope.EnvelopeError as exc:
                    protocol_error(log, PROTOCOL, exc.kind, subject=msg.subject, error=str(exc))
                    continue
                runs.setdefault((stream, partition), []).append((msg, env))
            for (stream, partition), items in runs.items():
                await self._store(stream, partition, items)

    async def _store(
        self, stream: str, partition: int, items: list[tuple[Any, pb.Message | None]]
    ) -> None:
        received_ns = time.time_ns()
        now_us = received_ns // 1000
        records = []
        for msg, env in items:
            nats_headers = (("subject", msg.subject.encode()), ("reply", msg.reply.encode()))
            if env is None:
                records.append(Record(None, msg.payload, nats_headers, now_us))
            else:
                headers = tuple(env.headers.items()) + nats_headers
                if env.correlationId:
                    headers += ((CORRELATION_HEADER, env.correlationId.encode()),)
                records.append(Record(env.key or None, env.value, headers, now_us))
        try:
            result = await self.core.execute(
                Produce(stream, RecordBatch(records), partition, acks=Acks.ALL)
            )
        except GatewayError as exc:
            if exc.code not in (ErrorCode.UNKNOWN_TOPIC, ErrorCode.UNKNOWN_PARTITION):
                log.warning("liftbridge_nats_store_failed", stream=stream, error=exc.message)
            error = pb.Ack.TOO_LARGE if exc.code is ErrorCode.RECORD_TOO_LARGE else pb.Ack.UNKNOWN
            for msg, env in items:
                if env is not None and env.ackInbox:
                    self._ack(env, stream, partition, msg.subject, -1, received_ns, error)
            return
        RECORDS_IN.labels(protocol=PROTOCOL).inc(len(records))
        self.ingested += len(records)
        for k, (msg, env) in enumerate(items):
            if env is not None and env.ackInbox and env.ackPolicy != pb.NONE:
                self._ack(env, stream, partition, msg.subject, result.base_offset + k, received_ns)

    def _ack(
        self,
        env: pb.Message,
        stream: str,
        partition: int,
        msg_subject: str,
        offset: int,
        received_ns: int,
        error: pb.Ack.Error = pb.Ack.OK,
    ) -> None:
        subscription = self.subscriptions.get((stream, partition))
        base = subscription[0] if subscription else msg_subject
        if partition and subscription:
            base = base.rsplit(".", 1)[0]
        ack = pb.Ack(
            stream=stream,
            partitionSubject=base,
            msgSubject=msg_subject,
            ackInbox=env.ackInbox,
            correlationId=env.correlationId,
            ackPolicy=env.ackPolicy,
            receptionTimestamp=received_ns,
            commitTimestamp=time.time_ns(),
            ackError=error,
        )
        if offset >= 0 and not error:
            ack.offset = offset
        try:
            self.client.publish(env.ackInbox, envelope.encode_ack(ack))
        except GatewayError as exc:
            log.warning("liftbridge_nats_ack_failed", inbox=env.ackInbox, error=exc.message)


async def run_ingest(core: CoreView, listener: LiftbridgeListenerConfig) -> None:
    """The listener's background task: NATS ingestion when ``nats`` is configured."""
    url = listener.nats
    if not url:
        return
    await NatsIngest(core, url).run()
