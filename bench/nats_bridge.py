"""How should a trio program talk to NATS JetStream? Measures, in one run, the same JetStream
operations issued from trio code through:

- ``native``: the gateway's own trio client (``gateway.backends.nats.client``);
- ``trio-asyncio``: nats-py 2.16 inside trio through trio-asyncio's bridge;
- ``loop-thread``: nats-py on an asyncio loop in a second thread, each call handed over with
  ``run_coroutine_threadsafe`` and its result handed back with ``TrioToken.run_sync_soon``.

Workloads (the wire traffic is the same for all three):
  rtt      N sequential request/replies ($JS.API.DIRECT.GET of one message): the latency-bound path
           (partition_info, key-value calls, small produces);
  publish  M records as JetStream atomic batches of 1000 (999 PUBs + one commit request);
  fetch    the same M records back with batch direct gets of 1000 (replies until "204 EOB").

Needs nats-py and trio-asyncio (``pip install nats-py==2.16.0 trio-asyncio==0.16.0``) and the
nats-server of the test extra (both in the ``bench`` extra). ``python bench/nats_bridge.py [N]
[M]``; results go to ``bench/results/nats_bridge.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.backends.nats.client import NatsClient  # noqa: E402
from gateway.backends.nats.protocol import encode_headers  # noqa: E402
from tests.backends.servers import NatsServer  # noqa: E402

N_RTT = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
M_RECORDS = int(sys.argv[2]) if len(sys.argv) > 2 else 50_000
BATCH = 1000
PAYLOAD = b"x" * 100
RESULTS = Path(__file__).resolve().parent / "results" / "nats_bridge.json"


def batch_headers(batch_id: str, i: int, last: bool) -> dict[str, str]:
    h = {"Gw-Ts": "1", "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i)}
    if last:
        h["Nats-Batch-Commit"] = "1"
    return h


async def create_stream(request, name: str) -> None:  # request(subject, payload) -> bytes
    cfg = {
        "name": name,
        "subjects": [name.lower()],
        "storage": "file",
        "allow_direct": True,
        "allow_atomic": True,
    }
    reply = await request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(cfg).encode())
    assert b'"error"' not in reply, reply


# ------------------------------------------------------------------------------ native


async def run_native(url: str, stream: str) -> dict[str, float]:
    client = NatsClient(url)
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        await client.wait_connected(5)

        async def request(subject: str, payload: bytes) -> bytes:
            return (await client.request(subject, payload)).payload

        await create_stream(request, stream)
        subject = stream.lower()
        out: dict[str, float] = {}

        t = time.perf_counter()
        for _ in range(0, M_RECORDS, BATCH):
            bid = os.urandom(6).hex()
            frames = [
                (subject, PAYLOAD, encode_headers(batch_headers(bid, i, i == BATCH)))
                for i in range(1, BATCH + 1)
            ]
            need = [i == BATCH - 1 for i in range(BATCH)]
            (ack,) = await client.request_many(frames, need_reply=need)
            assert b'"error"' not in ack.payload, ack.payload
        out["publish"] = M_RECORDS / (time.perf_counter() - t)

        t = time.perf_counter()
        got = 0
        while got < M_RECORDS:
            msgs = await client.request_stream(
                f"$JS.API.DIRECT.GET.{stream}",
                json.dumps({"seq": got + 1, "batch": BATCH}).encode(),
            )
            got += sum(1 for m in msgs if not m.status)
        out["fetch"] = got / (time.perf_counter() - t)

        body = json.dumps({"seq": 1}).encode()
        t = time.perf_counter()
        for _ in range(N_RTT):
            await client.request(f"$JS.API.DIRECT.GET.{stream}", body)
        out["rtt"] = N_RTT / (time.perf_counter() - t)
        await client.aclose()
    return out


# ------------------------------------------------------------------------------ nats-py


class NatsPy:
    """The three workloads written for nats-py (asyncio)."""

    def __init__(self, url: str, stream: str) -> None:
        self.url = url
        self.stream = stream
        self.subject = stream.lower()

    async def connect(self) -> None:
        import nats

        self.nc = await nats.connect(self.url)

    async def request(self, subject: str, payload: bytes) -> bytes:
        return (await self.nc.request(subject, payload, timeout=5)).data

    async def publish_batch(self) -> None:
        bid = os.urandom(6).hex()
        for i in range(1, BATCH):
            await self.nc.publish(self.subject, PAYLOAD, headers=batch_headers(bid, i, False))
        ack = await self.nc.request(
            self.subject, PAYLOAD, timeout=5, headers=batch_headers(bid, BATCH, True)
        )
        assert b'"error"' not in ack.data, ack.data

    async def fetch_batch(self, seq: int) -> int:
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        await self.nc.publish(
            f"$JS.API.DIRECT.GET.{self.stream}",
            json.dumps({"seq": seq, "batch": BATCH}).encode(),
            reply=inbox,
        )
        n = 0
        while True:
            msg = await sub.next_msg(timeout=5)
            if msg.headers and msg.headers.get("Status"):
                break
            n += 1
        await sub.unsubscribe()
        return n

    async def rtt(self) -> None:
        await self.nc.request(
            f"$JS.API.DIRECT.GET.{self.stream}", json.dumps({"seq": 1}).encode(), timeout=5
        )

    async def close(self) -> None:
        await self.nc.close()


async def run_bridged(call, py: NatsPy) -> dict[str, float]:
    """``call(coroutine_function, *args)`` runs one nats-py coroutine from trio."""
    await call(py.connect)
    await create_stream(lambda s, p: call(py.request, s, p), py.stream)
    out: dict[str, float] = {}
    t = time.perf_counter()
    for _ in range(0, M_RECORDS, BATCH):
        await call(py.publish_batch)
    out["publish"] = M_RECORDS / (time.perf_counter() - t)
    t = time.perf_counter()
    got = 0
    while got < M_RECORDS:
        got += await call(py.fetch_batch, got + 1)
    out["fetch"] = got / (time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(N_RTT):
        await call(py.rtt)
    out["rtt"] = N_RTT / (time.perf_counter() - t)
    await call(py.close)
    return out


async def run_trio_asyncio(url: str, stream: str) -> dict[str, float]:
    import trio_asyncio

    async with trio_asyncio.open_loop():

        async def call(fn, *args):
            return await trio_asyncio.aio_as_trio(fn)(*args)

        return await run_bridged(call, NatsPy(url, stream))


async def run_loop_thread(url: str, stream: str) -> dict[str, float]:
    ready = threading.Event()
    holder: list[asyncio.AbstractEventLoop] = []

    def serve() -> None:  # a plain asyncio loop, made in its own thread (no trio there)
        loop = asyncio.SelectorEventLoop()
        holder.append(loop)
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait()
    loop = holder[0]
    token = trio.lowlevel.current_trio_token()

    async def call(fn, *args):
        done = trio.Event()
        fut = asyncio.run_coroutine_threadsafe(fn(*args), loop)
        fut.add_done_callback(lambda _: token.run_sync_soon(done.set))
        await done.wait()
        return fut.result()

    try:
        return await run_bridged(call, NatsPy(url, stream))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp)) as server:
        print(
            f"workload: rtt = {N_RTT} sequential JetStream direct gets; publish/fetch = "
            f"{M_RECORDS} records of {len(PAYLOAD)} B in atomic batches / batch gets of {BATCH}; "
            f"nats-server {server.url}"
        )
        print(f"{'client':<14}{'rtt/s':>10}{'publish rec/s':>16}{'fetch rec/s':>14}")
        results = {}
        for name, fn in (
            ("native", run_native),
            ("trio-asyncio", run_trio_asyncio),
            ("loop-thread", run_loop_thread),
        ):
            r = results[name] = await fn(server.url, f"B_{name.replace('-', '_').upper()}")
            print(f"{name:<14}{r['rtt']:>10,.0f}{r['publish']:>16,.0f}{r['fetch']:>14,.0f}")
        base = results["native"]
        for name in ("trio-asyncio", "loop-thread"):
            r = results[name]
            print(
                f"native / {name}: rtt {base['rtt'] / r['rtt']:.2f}x, "
                f"publish {base['publish'] / r['publish']:.2f}x, "
                f"fetch {base['fetch'] / r['fetch']:.2f}x"
            )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "workload": {"rtt_requests": N_RTT, "records": M_RECORDS, "batch": BATCH},
                "per_s": {name: {k: round(v) for k, v in r.items()} for name, r in results.items()},
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written {RESULTS}")


if __name__ == "__main__":
    trio.run(main)
