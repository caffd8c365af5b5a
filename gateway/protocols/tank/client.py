"""A small TANK client on the codec's client role (trio). It does what a tank-cli user does:
create_topic, produce (plain, keyed, compressed, explicit sequence numbers), consume (from 0,
from a sequence number, at the tail with a long poll), discover_partitions, discover_topics,
status. One request at a time per client; open two clients for a produce during a long poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from gateway.protocols.tank.bundle import TankMessage, encode_bundle
from gateway.protocols.tank.codec import (
    NEED_DATA,
    U64_MAX,
    ConsumePartitionRequest,
    ConsumePartitionResult,
    ConsumeRequest,
    ConsumeResponse,
    ConsumeTopic,
    CreateTopicRequest,
    DiscoverPartitionsRequest,
    DiscoverTopicsRequest,
    DiscoverTopologyRequest,
    Ping,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
    ReloadConfRequest,
    Role,
    StatusRequest,
    TankConnection,
)

TAIL = U64_MAX
Message = tuple[bytes | None, bytes | None, int]  # (key, content, timestamp_ms)


class TankError(Exception):
    """The broker answered with an error code."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what}: error {code:#04x}")
        self.code = code


class TankClient:
    def __init__(self, stream: trio.abc.Stream, client_id: bytes = b"gateway") -> None:
        self.stream = stream
        self.conn = TankConnection(Role.CLIENT)
        self.client_id = client_id
        self._next_id = 0
        self.pings = 0
        self.unclaimed: dict[int, Any] = {}

    @classmethod
    async def connect(cls, host: str, port: int, client_id: bytes = b"gateway") -> TankClient:
        return cls(await trio.open_tcp_stream(host, port), client_id)

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self) -> TankClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def request(self, req: Any) -> Any:
        """Send ``req`` and return the response carrying its request id."""
        await self.stream.send_all(self.conn.send(req))
        return await self.response(req.request_id)

    async def response(self, request_id: int) -> Any:
        """The response to ``request_id``; responses to other requests that arrive first (a
        parked consume answered late) are kept for their own ``response()`` call."""
        if request_id in self.unclaimed:
            return self.unclaimed.pop(request_id)
        while True:
            event = self.conn.next_event()
            if event is NEED_DATA:
                data = await self.stream.receive_some(1 << 20)
                if not data:
                    raise ConnectionError("the broker closed the connection")
                self.conn.receive_data(data)
                continue
            if isinstance(event, Ping):
                self.pings += 1
                continue
            if event.request_id == request_id:
                return event
            self.unclaimed[event.request_id] = event

    # ------------------------------------------------------------------ requests
    async def create_topic(self, topic: str, partitions: int, config: bytes = b"") -> int:
        """The CreateTopic error byte (0 = created, 1 = already exists, ...)."""
        resp = await self.request(CreateTopicRequest(self._id(), topic, partitions, config))
        return resp.err

    async def produce(
        self,
        topic: str,
        partition: int,
        messages: Sequence[Message],
        *,
        compress: bool | None = None,
        base_seqnum: int | None = None,
        sparse: bool = False,
    ) -> int | None:
        """Produce one bundle; returns the partition's status byte (None: unknown topic).
        ``base_seqnum`` uses ProduceWithSeqnum (0x05), with a SPARSE bundle when ``sparse``."""
        bundle = encode_bundle(
            messages, compress=compress, first_seq=base_seqnum if sparse else None
        )
        part = ProducePartition(partition, bundle, base_seqnum or 0)
        req = ProduceRequest(
            self._id(),
            [ProduceTopic(topic, [part])],
            with_seqnum=base_seqnum is not None,
            client_id=self.client_id,
        )
        resp = await self.request(req)
        statuses = resp.topics[0].statuses
        return None if statuses is None else statuses[0]

    async def consume_raw(
        self,
        topic: str,
        partition: int,
        seq: int,
        *,
        fetch_size: int = 1 << 20,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        client_version: int = 2,
    ) -> ConsumePartitionResult | None:
        """One consume request; None for an unknown topic."""
        req = ConsumeRequest(
            self._id(),
            [ConsumeTopic(topic, [ConsumePartitionRequest(partition, seq, fetch_size)])],
            max_wait_ms,
            min_bytes,
            client_version,
            self.client_id,
        )
        resp: ConsumeResponse = await self.request(req)
        parts = resp.topics[0].partitions
        return None if parts is None else parts[0]

    async def consume(
        self,
        topic: str,
        partition: int,
        seq: int,
        *,
        fetch_size: int = 1 << 20,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
    ) -> tuple[list[TankMessage], int]:
        """Messages from ``seq`` on (as TankClient::process_consume: messages below ``seq`` are
        skipped; a fetch too small for one whole bundle is retried with a larger size) and the
        high watermark. Raises TankError for a boundary fault or a partition error."""
        while True:
            part = await self.consume_raw(
                topic,
                partition,
                seq,
                fetch_size=fetch_size,
                max_wait_ms=max_wait_ms,
                min_bytes=min_bytes,
            )
            if part is None:
                raise TankError(f"consume {topic}: unknown topic", 0xFF)
            if part.err not in (0, 0xFE):
                raise TankError(f"consume {topic}/{partition}", part.err)
            msgs = part.messages()
            chunk_len = (
                sum(len(c) for c in part.chunk) if isinstance(part.chunk, list) else len(part.chunk)
            )
            if not msgs and chunk_len:
                fetch_size *= 2
                continue
            if seq not in (0, TAIL):
                msgs = [m for m in msgs if m.seq >= seq]
            return msgs, part.hwmark

    async def discover_partitions(self, topic: str) -> list[tuple[int, int]]:
        resp = await self.request(DiscoverPartitionsRequest(self._id(), topic))
        return [(p.first_available, p.hwmark) for p in resp.partitions]

    async def discover_topics(self) -> list[tuple[str, int]]:
        resp = await self.request(DiscoverTopicsRequest(self._id()))
        return [(t.name, t.partitions) for t in resp.topics]

    async def discover_topology(self) -> Any:
        return await self.request(DiscoverTopologyRequest(self._id()))

    async def status(self) -> Any:
        return await self.request(StatusRequest(self._id()))

    async def reload_conf(self, topic: str, partition: int) -> int:
        return (await self.request(ReloadConfRequest(self._id(), topic, partition))).err
