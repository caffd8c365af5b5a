"""Run with the .test-venvs/iggy-py interpreter (iggy-py 0.4.0): reads or writes one canonical
topic (Iggy stream "default", topic NAME, partition 1) and prints one JSON line.
Usage: iggy_driver.py '{"addr": "host:port", "op": "poll"|"send", "topic": ..., ...}'"""

import asyncio
import json
import os
import sys

from iggy_py import IggyClient, PollingStrategy, SendMessage


async def main(args):
    c = IggyClient(args["addr"])
    await c.connect()
    await c.login_user("iggy", "iggy")
    if args["op"] == "send":
        await c.send_messages(
            "default", args["topic"], 1, [SendMessage(p) for p in args["payloads"]]
        )
        return {"sent": len(args["payloads"])}
    msgs = await c.poll_messages(
        "default", args["topic"], 1, PollingStrategy.Offset(value=0), args["count"], False
    )
    return {
        "messages": [
            {"offset": m.offset(), "payload": bytes(m.payload()).hex(), "timestamp": m.timestamp()}
            for m in msgs
        ]
    }


print(json.dumps(asyncio.run(asyncio.wait_for(main(json.loads(sys.argv[1])), 30))))
sys.stdout.flush()
os._exit(0)  # the SDK's runtime may abort while the interpreter tears down
