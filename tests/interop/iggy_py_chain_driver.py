"""iggy-py 0.4.0 (run with the .test-venvs/iggy-py interpreter) side of the chain test: creates
stream ``chain`` topic ``i2l`` (one partition), sends COUNT messages and polls them back by
offset (no commit); prints one JSON object. Usage: iggy_py_chain_driver.py HOST:PORT COUNT"""

import asyncio
import json
import os
import sys

from iggy_py import IggyClient, PollingStrategy, SendMessage


async def main() -> dict:
    addr, count = sys.argv[1], int(sys.argv[2])
    c = IggyClient(addr)
    await c.connect()
    await c.login_user("iggy", "iggy")
    await c.create_stream("chain", 7)
    await c.create_topic(7, "i2l", 1, None, 1, None)
    await c.send_messages(7, 1, 1, [SendMessage(f"m{i}") for i in range(count)])
    polled = await c.poll_messages(7, 1, 1, PollingStrategy.Offset(value=0), count, False)
    return {"polled": [[m.offset(), bytes(m.payload()).decode(), m.timestamp()] for m in polled]}


print(json.dumps(asyncio.run(asyncio.wait_for(main(), 30))))
sys.stdout.flush()
os._exit(0)  # the SDK's runtime may abort while the interpreter tears down
