"""gufo-liftbridge 0.2.0 side of the Iggy <-> Liftbridge interop test; prints one JSON object.

Usage: gufo_iggy_driver.py PORT consume STREAM COUNT | PORT publish STREAM"""

import asyncio
import json
import sys

from gufo.liftbridge.client import LiftbridgeClient
from gufo.liftbridge.types import StartPosition


async def main() -> dict:
    port, mode, stream = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    async with LiftbridgeClient([f"127.0.0.1:{port}"]) as client:
        if mode == "publish":
            await client.create_stream(stream, subject=stream, partitions=1)
            await client.publish(
                b"hello",
                stream=stream,
                partition=0,
                key=b"k1",
                headers={"h": b"v", "bin": b"\x00\x01"},
            )
            await client.publish(b"world", stream=stream, partition=0)
            return {"ok": True}
        got = []

        async def run() -> None:
            async for m in client.subscribe(
                stream, partition=0, start_position=StartPosition.EARLIEST
            ):
                got.append(
                    {
                        "offset": m.offset,
                        "value": m.value.hex(),
                        "key": m.key.hex() if m.key else None,
                        "ts": m.timestamp,
                        "headers": {k: v.hex() for k, v in m.headers.items()},
                    }
                )
                if len(got) == int(sys.argv[4]):
                    return

        await asyncio.wait_for(run(), 15)
        return {"messages": got}


print(json.dumps(asyncio.run(main())))
