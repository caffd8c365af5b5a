"""A small trio Kafka 0.8 client on the codec's client role (``ClientConnection``): the upstream
backend's connection and the matrix driver. One request at a time per connection."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from gateway.model import Record
from gateway.protocols.kafka08 import codec as c
from gateway.protocols.kafka08.messageset import decode_message_set, encode_message_set


class Kafka08Error(Exception):
    """The broker answered a partition or topic with a non-zero 0.8 error code."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what}: Kafka 0.8 error {code}")
        self.code = code


class Kafka08Client:
    def __init__(self, stream: trio.abc.Stream, client_id: str = "gateway-upstream") -> None:
        self.stream = stream
        self.conn = c.ClientConnection(client_id)

    @classmethod
    async def connect(cls, host: str, port: int) -> Kafka08Client:
        return cls(await trio.open_tcp_stream(host, port))

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        await self.stream.send_all(self.conn.send_request(api_key, version, body))
        while True:
            answer = self.conn.next_response()
            if answer is not None:
                return answer[1]
            data = await self.stream.receive_some(1 << 18)
            if not data:
                raise EOFError("the Kafka 0.8 server closed the connection")
            self.conn.receive_data(data)

    # ------------------------------------------------------------------ APIs
    async def metadata(self, topics: Sequence[str] = ()) -> Any:
        """MetadataResponse; naming topics auto-creates them where the server does that."""
        return await self.request(c.ApiKey.METADATA, 0, c.METADATA_REQUEST(list(topics)))

    async def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[Record],
        *,
        magic: int = 1,
        acks: int = -1,
        timeout_ms: int = 10_000,
    ) -> int:
        """Append ``records`` (magic 1 keeps timestamps); the base offset of the append."""
        data = encode_message_set(records, 0, magic=magic)
        body = c.PRODUCE_REQUEST(
            acks, timeout_ms, [c.PRODUCE_TOPIC(topic, [c.PRODUCE_PARTITION(partition, data)])]
        )
        resp = await self.request(c.ApiKey.PRODUCE, 0, body)
        result = resp.topics[0].partitions[0]
        if result.error:
            raise Kafka08Error(f"produce {topic}/{partition}", result.error)
        return result.offset

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = 1 << 20,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
    ) -> tuple[list[Record], int]:
        """(records from ``offset``, high watermark). Records carry their offsets; timestamps
        are -1 (0.8 fetch answers are magic 0)."""
        body = c.FETCH_REQUEST(
            -1,
            max_wait_ms,
            min_bytes,
            [c.FETCH_TOPIC(topic, [c.FETCH_PARTITION(partition, offset, max_bytes)])],
        )
        resp = await self.request(c.ApiKey.FETCH, 0, body)
        result = resp.topics[0].partitions[0]
        if result.error:
            raise Kafka08Error(f"fetch {topic}/{partition}@{offset}", result.error)
        records = decode_message_set(result.message_set)
        return [r for r in records if r.offset >= offset], result.high_watermark

    async def offsets(
        self, topic: str, partition: int, time: int, max_offsets: int = 2
    ) -> list[int]:
        body = c.OFFSETS_REQUEST(
            -1, [c.OFFSETS_TOPIC(topic, [c.OFFSETS_PARTITION(partition, time, max_offsets)])]
        )
        resp = await self.request(c.ApiKey.OFFSETS, 0, body)
        result = resp.topics[0].partitions[0]
        if result.error:
            raise Kafka08Error(f"offsets {topic}/{partition}", result.error)
        return list(result.offsets)

    async def commit(
        self, group: str, topic: str, partition: int, offset: int, metadata: str = ""
    ) -> None:
        """OffsetCommit v1 as a simple (generation -1) commit, stored by the broker."""
        body = c.COMMIT_REQUEST_V1(
            group,
            -1,
            "",
            [c.COMMIT_TOPIC_V1(topic, [c.COMMIT_PARTITION_V1(partition, offset, -1, metadata)])],
        )
        resp = await self.request(c.ApiKey.OFFSET_COMMIT, 1, body)
        error = resp.topics[0].partitions[0].error
        if error:
            raise Kafka08Error(f"offset commit {group} {topic}/{partition}", error)

    async def fetch_offset(self, group: str, topic: str, partition: int) -> tuple[int, str]:
        body = c.OFFSET_FETCH_REQUEST(group, [c.OFFSET_FETCH_TOPIC(topic, [partition])])
        resp = await self.request(c.ApiKey.OFFSET_FETCH, 1, body)
        result = resp.topics[0].partitions[0]
        if result.error:
            raise Kafka08Error(f"offset fetch {group} {topic}/{partition}", result.error)
        return result.offset, result.metadata or ""
