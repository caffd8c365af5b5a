"""Drives iggy-py 0.4.0 (run with the .test-venvs/iggy-py interpreter) against a gateway and
prints one JSON object. Usage: iggy_py_driver.py HOST:PORT SCENARIO"""

import asyncio
import json
import os
import sys

import iggy_py
from iggy_py import IggyClient, PollingStrategy, SendMessage


def rows(msgs):
    return [
        {
            "offset": m.offset(),
            "payload": bytes(m.payload()).decode(),
            "id": m.id(),
            "checksum": m.checksum(),
            "timestamp": m.timestamp(),
            "state": str(m.state()),
            "length": m.length(),
        }
        for m in msgs
    ]


async def connect(addr):
    c = IggyClient(addr)
    await c.connect()
    await c.ping()
    await c.login_user("iggy", "iggy")
    return c


async def setup(addr):
    c = await connect(addr)
    await c.create_stream("s1", 1)
    await c.create_topic(1, "t1", 3, None, 1, None)
    s = await c.get_stream(1)
    t = await c.get_topic(1, 1)
    await c.send_messages(1, 1, 1, [SendMessage(f"m{i}") for i in range(5)])
    await c.send_messages(1, 1, 2, [SendMessage("other")])
    out = {
        "stream": [s.id, s.name, s.topics_count, s.messages_count],
        "topic": [t.id, t.name, t.messages_count],
        "first": rows(await c.poll_messages(1, 1, 1, PollingStrategy.First(), 2, False)),
        "offset": rows(await c.poll_messages(1, 1, 1, PollingStrategy.Offset(value=3), 10, False)),
        "last": rows(await c.poll_messages(1, 1, 1, PollingStrategy.Last(), 2, False)),
        "timestamp": rows(
            await c.poll_messages(1, 1, 2, PollingStrategy.Timestamp(value=0), 10, False)
        ),
        "next": rows(await c.poll_messages(1, 1, 1, PollingStrategy.Next(), 3, True)),
        "missing_stream": None,
    }
    try:
        await c.get_stream(99)
    except Exception as exc:  # the SDK raises for an unknown stream
        out["missing_stream"] = str(exc)
    return out


async def next_run(addr):
    c = await connect(addr)
    return {"next": rows(await c.poll_messages(1, 1, 1, PollingStrategy.Next(), 10, True))}


async def main():
    addr, scenario = sys.argv[1], sys.argv[2]
    fn = {"setup": setup, "next": next_run}[scenario]
    print(json.dumps(await asyncio.wait_for(fn(addr), 30)))


asyncio.run(main())
sys.stdout.flush()
# the SDK's runtime may abort while the interpreter tears down: leave at once
os._exit(0)
_ = iggy_py
