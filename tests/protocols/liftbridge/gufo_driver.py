"""Drives gufo-liftbridge 0.2.0 (asyncio, grpcio) against a gateway; prints one JSON result.

Run as ``python gufo_driver.py PORT``; every RPC gufo has is exercised.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from gufo.liftbridge.client import LiftbridgeClient
from gufo.liftbridge.error import ErrorAlreadyExists, ErrorNotFound
from gufo.liftbridge.types import StartPosition

PORT = int(sys.argv[1])
out: dict = {}


async def take(client: LiftbridgeClient, n: int, stream: str, partition: int, **kw) -> list:
    got = []

    async def run() -> None:
        async for m in client.subscribe(stream, partition=partition, **kw):
            got.append(
                {
                    "offset": m.offset,
                    "value": m.value.decode(),
                    "key": m.key.decode(),
                    "ts": m.timestamp,
                    "headers": {k: v.decode() for k, v in m.headers.items()},
                    "subject": m.subject,
                    "partition": m.partition,
                }
            )
            if len(got) == n:
                return

    await asyncio.wait_for(run(), 15)
    return got


async def main() -> None:
    async with LiftbridgeClient([f"127.0.0.1:{PORT}"]) as client:
        await client.create_stream("orders", subject="orders.subj", partitions=3)
        try:
            await client.create_stream("orders", subject="orders.subj", partitions=3)
            out["exists"] = "no error"
        except ErrorAlreadyExists:
            out["exists"] = "ErrorAlreadyExists"

        await client.publish(b"first", stream="orders", partition=0, key=b"k1", headers={"h": b"v"})
        time.sleep(0.05)
        t_between = time.time()
        time.sleep(0.05)
        await client.publish(b"second", stream="orders", partition=0)
        await client.publish(b"third", stream="orders", partition=0)

        reqs = [
            client.get_publish_request(
                b"bulk-%d" % i, stream="orders", partition=1, correlation_id=f"c{i}"
            )
            for i in range(5)
        ]
        out["bulk_acks"] = [
            [r.ack.offset, r.ack.correlationId, r.correlationId, r.ack.stream, r.ack.msgSubject]
            async for r in client.publish_bulk(reqs)
        ]

        md = await client.get_metadata()
        out["metadata"] = {
            "brokers": [[b.id, b.host, b.port] for b in md.brokers],
            "streams": {
                s.name: {
                    "subject": s.subject,
                    "partitions": {
                        str(p.id): [p.leader, p.high_watermark, p.newest_offset]
                        for p in s.partitions.values()
                    },
                }
                for s in md.metadata
            },
        }
        pmd = await client.get_partition_metadata("orders", 1)
        out["partition_metadata"] = [pmd.id, pmd.high_watermark]

        out["earliest"] = await take(client, 3, "orders", 0, start_position=StartPosition.EARLIEST)
        out["offset"] = await take(client, 2, "orders", 1, start_offset=3)
        out["latest"] = await take(client, 1, "orders", 0, start_position=StartPosition.LATEST)
        out["timestamp"] = await take(client, 2, "orders", 0, start_timestamp=t_between)

        # NEW_ONLY: only messages published after the subscription exists
        async def later() -> None:
            await asyncio.sleep(0.5)
            await client.publish(b"fresh", stream="orders", partition=2)

        task = asyncio.create_task(later())
        out["new_only"] = await take(client, 1, "orders", 2, start_position=StartPosition.NEW_ONLY)
        await task

        await client.set_cursor(stream="orders", partition=1, cursor_id="cur1", offset=2)
        out["cursor"] = await client.get_cursor(stream="orders", partition=1, cursor_id="cur1")
        out["cursor_unset"] = await client.get_cursor(
            stream="orders", partition=1, cursor_id="nope"
        )
        out["resume"] = await take(
            client, 2, "orders", 1, start_position=StartPosition.RESUME, cursor_id="cur1"
        )

        try:
            await client.publish(b"x", stream="missing", partition=0)
            out["publish_missing"] = "no error"
        except ErrorNotFound:
            out["publish_missing"] = "ErrorNotFound"

        await client.delete_stream("orders")
        try:
            await client.delete_stream("orders")
            out["delete_again"] = "no error"
        except ErrorNotFound:
            out["delete_again"] = "ErrorNotFound"
        md = await client.get_metadata()
        out["after_delete"] = sorted(s.name for s in md.metadata)
    print(json.dumps(out))


asyncio.run(main())
