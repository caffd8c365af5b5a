"""Benchmark: Cursus batch produce and CONSUME messages/s through a running gateway, beside the
in-process baseline (the core and the same backend, no network and no Cursus codec), both
measured in this run.

Workload (printed too): 100-byte payloads, producer id "bench", sequence numbers, no key, no
event-sourcing fields; binary batches (magic 0xBA7C) of 1000 messages with acks "1" to partition 0
of a 1-partition topic; 200 batches (200,000 messages), one batch in flight (send, wait for the
JSON ack, send the next). Then CONSUME topic=t partition=0 offset=O member=M group=g batch=1000
from offset 0 to the end, one request in flight, by a member that joined the group first. The
client is one blocking socket, as the Cursus SDKs' batch senders use; its frames are encoded before
the clock starts and it checks each reply's message count without decoding the messages. The
gateway is ``python -m gateway serve`` in a subprocess (memory backend, then the embedded log with
its default fsync policy). The baseline runs ``Core.execute(Produce)`` with batches of 1000 Record
objects and ``Core.execute(Fetch)`` of 1000 records (materialised), in this process, on a fresh
backend of the same type.

Each figure is the best of 3 alternating runs (the machine is shared).

Run: ``python bench/cursus.py``; results go to ``bench/results/cursus.json``. Target:
what the Go Cursus broker does on this machine with this load, >= 170k messages/s produced and
>= 280k consumed.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import cpu_seconds  # noqa: E402
from gateway.config import parse_config  # noqa: E402
from gateway.model import CreateTopic, Fetch, Produce, Record, RecordBatch, now_us  # noqa: E402
from gateway.protocols.cursus import codec  # noqa: E402
from gateway.server import build_backends, build_core  # noqa: E402
from tests.support import GatewayProcess, make_config  # noqa: E402

PAYLOAD = 100
BATCH = 1000
BATCHES = 200
TOTAL = BATCH * BATCHES
RESULTS = ROOT / "bench" / "results" / "cursus.json"
U32 = struct.Struct(">I")
# best of each is reported: the machine is shared, rates are noisy (bench/run.py sets fewer)
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
TARGET_PRODUCE = 170_000
TARGET_CONSUME = 280_000


class Wire:
    """A blocking Cursus client: one frame out, one frame back."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)

    def _read(self, n: int) -> bytearray:
        """Exactly ``n`` bytes, received straight into one buffer (the client's own cost is kept
        small: it shares the machine with the gateway)."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            r = self.sock.recv_into(view[got:], n - got)
            if not r:
                raise EOFError("gateway closed the connection")
            got += r
        return buf

    def call(self, frame: bytes) -> bytearray:
        self.sock.sendall(frame)
        (length,) = U32.unpack(self._read(4))
        return self._read(length)

    def text(self, command: str) -> str:
        return bytes(self.call(codec.frame(codec.encode_text(command)))).decode()


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per figure, the best run (highest rate, lowest CPU per message)."""
    return {k: (min if "cpu" in k else max)(r[k] for r in runs) for k in runs[0]}


def reply_count(body: bytes | bytearray) -> int:
    """The message count of a reply batch, from its header."""
    if body[:2] != codec.MAGIC_BYTES:
        raise RuntimeError(f"not a batch: {body[:120]!r}")
    tlen = struct.unpack_from(">H", body, 2)[0]
    alen = body[2 + 2 + tlen + 4]
    return struct.unpack_from(">i", body, 2 + 2 + tlen + 4 + 1 + alen + 1 + 16)[0]


def bench_gateway(backend: str, tmp: Path) -> dict[str, float]:
    cursus = {"session_timeout_ms": 3_600_000}  # the member stays through the produce phase
    with GatewayProcess(tmp / backend, listeners={"cursus": cursus}, backend=backend) as gw:
        w = Wire(*gw.address("cursus"))
        assert w.text("CREATE topic=t partitions=1") == "Topic 't' now has 1 partitions"
        member = w.text("JOIN_GROUP topic=t group=g member=bench").split()[2].split("=")[1]
        batches = [
            codec.frame(
                codec.encode_batch(
                    codec.make_batch(
                        "t",
                        0,
                        [
                            codec.Message(seq=i + 1, producer_id=b"bench", payload=b"x" * PAYLOAD)
                            for i in range(b * BATCH, (b + 1) * BATCH)
                        ],
                    )
                )
            )
            for b in range(BATCHES)
        ]
        consumes = [
            codec.frame(
                codec.encode_text(
                    f"CONSUME topic=t partition=0 offset={off} member={member} group=g "
                    f"batch={BATCH}"
                )
            )
            for off in range(0, TOTAL, BATCH)
        ]
        pid = gw.proc.pid
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        for frame in batches:
            ack = w.call(frame)
            if not ack.startswith(b'{"status":"OK"'):
                raise RuntimeError(ack)
        produced = TOTAL / (time.perf_counter() - t0)
        produce_cpu = (cpu_seconds(pid) - c0) / TOTAL * 1e6
        got = 0
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        for frame in consumes:
            got += reply_count(w.call(frame))
        consumed = got / (time.perf_counter() - t0)
        consume_cpu = (cpu_seconds(pid) - c0) / TOTAL * 1e6
        assert got == TOTAL, got
        w.sock.close()
    return {
        "produce_msgs_per_s": produced,
        "consume_msgs_per_s": consumed,
        "produce_cpu_us_per_msg": produce_cpu,
        "consume_cpu_us_per_msg": consume_cpu,
    }


async def bench_baseline(backend: str, tmp: Path) -> dict[str, float]:
    cfg = parse_config(make_config(tmp / f"baseline-{backend}", backend=backend))
    backends = build_backends(cfg)
    core = build_core(cfg, backends)
    async with trio.open_nursery() as nursery:
        for b in backends.values():
            await b.open(nursery)
        await core.execute(CreateTopic("t", 1))
        payload = b"x" * PAYLOAD
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(BATCHES):
            ts = now_us()
            records = [Record(None, payload, (), ts) for _ in range(BATCH)]
            await core.execute(Produce("t", RecordBatch(records, max_timestamp_us=ts), 0))
        produced = TOTAL / (time.perf_counter() - t0)
        produce_cpu = (time.process_time() - c0) / TOTAL * 1e6
        got = 0
        c0, t0 = time.process_time(), time.perf_counter()
        for off in range(0, TOTAL, BATCH):
            res = await core.execute(Fetch("t", 0, off, BATCH, 64 << 20, 0))
            got += sum(len(b.records) for b in res.batches)
        consumed = got / (time.perf_counter() - t0)
        consume_cpu = (time.process_time() - c0) / TOTAL * 1e6
        assert got == TOTAL, got
        for b in backends.values():
            await b.close()
        nursery.cancel_scope.cancel()
    return {
        "produce_msgs_per_s": produced,
        "consume_msgs_per_s": consumed,
        "produce_cpu_us_per_msg": produce_cpu,
        "consume_cpu_us_per_msg": consume_cpu,
    }


def main() -> None:
    print(
        f"workload: {TOTAL} messages of {PAYLOAD} bytes (producer id, seq, no key), binary "
        f"batches of {BATCH} with acks 1 to one partition, one batch in flight; CONSUME batch="
        f"{BATCH} from offset 0 to the end, one request in flight; one connection; gateway in a "
        f"subprocess; baseline = Core.execute(Produce/Fetch) in process, same backend type"
    )
    results: dict[str, Any] = {
        "workload": {"messages": TOTAL, "payload_bytes": PAYLOAD, "batch": BATCH},
        "machine": {"python": platform.python_version(), "cpu": platform.processor()},
    }
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for backend in ("memory", "embedded"):
            bases, gws = [], []
            for run in range(REPEATS):  # alternating baseline/gateway runs; the best of each
                bases.append(trio.run(bench_baseline, backend, tmp / f"{run}"))
                gws.append(bench_gateway(backend, tmp / f"{run}"))
            base, gw = best(bases), best(gws)
            results[backend] = {"gateway": gw, "baseline": base}
            for what in ("produce", "consume"):
                key = f"{what}_msgs_per_s"
                cpu = f"{what}_cpu_us_per_msg"
                print(
                    f"{backend:9s} {what:8s}: gateway {gw[key]:>10,.0f} msg/s "
                    f"({gw[cpu]:.2f} CPU-us/msg)   in-process baseline {base[key]:>10,.0f} msg/s "
                    f"({base[cpu]:.2f} CPU-us/msg)   ({gw[key] / base[key]:.0%} of baseline)"
                )
    best_p = max(results[b]["gateway"]["produce_msgs_per_s"] for b in ("memory", "embedded"))
    best_c = max(results[b]["gateway"]["consume_msgs_per_s"] for b in ("memory", "embedded"))
    load = os.getloadavg()[0]
    print(
        f"target >= {TARGET_PRODUCE:,} msg/s produced: "
        f"{'met' if best_p >= TARGET_PRODUCE else 'NOT met'} (best {best_p:,.0f}); "
        f">= {TARGET_CONSUME:,} consumed: {'met' if best_c >= TARGET_CONSUME else 'NOT met'} "
        f"(best {best_c:,.0f}); load average {load:.1f} on {os.cpu_count()} CPUs"
    )
    results["load_average"] = load
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
