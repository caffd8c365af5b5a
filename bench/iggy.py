"""Benchmark: Iggy SEND_MESSAGES and POLL_MESSAGES messages/s through a running gateway, beside
the in-process baseline (the core and the same backend, no network and no Iggy codec), both
measured in this run.

Workload (printed too): 100-byte payloads, no headers, id 0 (the gateway assigns ids), batches of
1000 messages per SEND_MESSAGES to partition 1 of a 1-partition topic; 200 batches (200,000
messages). Then POLL_MESSAGES with the offset strategy, count 1000, from offset 0 to the end
(consumer 1, no auto-commit). The client is one blocking socket sending one request at a time and
reading its reply, as the Iggy SDKs do; its request frames are encoded before the clock starts.
The gateway is ``python -m gateway serve`` in a subprocess (memory backend, then the embedded
log with its default fsync policy). The baseline runs ``Core.execute(Produce)`` with batches of
1000 Record objects (what the session builds) and ``Core.execute(Fetch)`` of 1000 records, in
this process, on a fresh backend of the same type.

Run: ``python bench/iggy.py``; results go to ``bench/results/iggy.json``. Target: >= 150k
messages/s sent.
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
from gateway.model import Fetch, Produce, Record, RecordBatch, now_us  # noqa: E402
from gateway.protocols.iggy import codec as c  # noqa: E402
from gateway.server import build_backends, build_core  # noqa: E402
from tests.support import GatewayProcess, make_config  # noqa: E402

PAYLOAD = 100
BATCH = 1000
BATCHES = 200
TOTAL = BATCH * BATCHES
RESULTS = ROOT / "bench" / "results" / "iggy.json"
HEAD = struct.Struct("<II")


class Wire:
    """A blocking Iggy client: one request, one reply."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("gateway closed the connection")
            self.buf += chunk
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def call(self, frame: bytes) -> bytes:
        self.sock.sendall(frame)
        status, length = HEAD.unpack(self._read(8))
        if status:
            raise RuntimeError(f"Iggy status {status}")
        return self._read(length) if length else b""


def bench_gateway(backend: str, tmp: Path) -> dict[str, float]:
    with GatewayProcess(tmp / backend, listeners={"iggy": {}}, backend=backend) as gw:
        w = Wire(*gw.address("iggy"))
        one = c.Identifier(1)
        w.call(c.encode_request(c.CreateStream(1, "bench")))
        w.call(c.encode_request(c.CreateTopic(one, 1, 1, 0, "t")))
        send = c.encode_request(
            c.SendMessages(
                one,
                one,
                c.Partitioning.partition_id(1),
                [c.Message(0, b"x" * PAYLOAD) for _ in range(BATCH)],
            )
        )
        polls = [
            c.encode_request(
                c.PollMessages(
                    c.Consumer(1, one), one, one, 1, c.PollingKind.OFFSET, off, BATCH, False
                )
            )
            for off in range(0, TOTAL, BATCH)
        ]
        pid = gw.proc.pid
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        for _ in range(BATCHES):
            w.call(send)
        sent = TOTAL / (time.perf_counter() - t0)
        send_cpu = (cpu_seconds(pid) - c0) / TOTAL * 1e6
        got = 0
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        for frame in polls:
            reply = w.call(frame)
            got += struct.unpack_from("<I", reply, 12)[0]
        polled = got / (time.perf_counter() - t0)
        poll_cpu = (cpu_seconds(pid) - c0) / TOTAL * 1e6
        assert got == TOTAL, got
        w.sock.close()
    return {
        "send_msgs_per_s": sent,
        "poll_msgs_per_s": polled,
        "send_cpu_us_per_msg": send_cpu,
        "poll_cpu_us_per_msg": poll_cpu,
    }


async def bench_baseline(backend: str, tmp: Path) -> dict[str, float]:
    cfg = parse_config(make_config(tmp / f"baseline-{backend}", backend=backend))
    backends = build_backends(cfg)
    core = build_core(cfg, backends)
    async with trio.open_nursery() as nursery:
        for b in backends.values():
            await b.open(nursery)
        await core.execute(c_create("t"))
        payload = b"x" * PAYLOAD
        c0 = time.process_time()
        t0 = time.perf_counter()
        for _ in range(BATCHES):
            ts = now_us()
            records = [Record(None, payload, (), ts) for _ in range(BATCH)]
            await core.execute(Produce("t", RecordBatch(records, max_timestamp_us=ts), 0))
        sent = TOTAL / (time.perf_counter() - t0)
        send_cpu = (time.process_time() - c0) / TOTAL * 1e6
        got = 0
        c0 = time.process_time()
        t0 = time.perf_counter()
        for off in range(0, TOTAL, BATCH):
            res = await core.execute(Fetch("t", 0, off, BATCH, 64 << 20, 0))
            got += sum(len(b.records) for b in res.batches)
        polled = got / (time.perf_counter() - t0)
        poll_cpu = (time.process_time() - c0) / TOTAL * 1e6
        assert got == TOTAL, got
        for b in backends.values():
            await b.close()
        nursery.cancel_scope.cancel()
    return {
        "send_msgs_per_s": sent,
        "poll_msgs_per_s": polled,
        "send_cpu_us_per_msg": send_cpu,
        "poll_cpu_us_per_msg": poll_cpu,
    }


def c_create(name: str) -> Any:
    from gateway.model import CreateTopic

    return CreateTopic(name, 1)


def main() -> None:
    print(
        f"workload: {TOTAL} messages of {PAYLOAD} bytes, no headers, id 0, "
        f"SEND_MESSAGES batches of {BATCH} to one partition; POLL_MESSAGES offset strategy, "
        f"count {BATCH}; one connection, one request at a time; gateway in a subprocess; "
        f"baseline = Core.execute(Produce/Fetch) in process, same backend type"
    )
    results: dict[str, Any] = {
        "workload": {"messages": TOTAL, "payload_bytes": PAYLOAD, "batch": BATCH},
        "machine": {"python": platform.python_version(), "cpu": platform.processor()},
    }
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for backend in ("memory", "embedded"):
            base = trio.run(bench_baseline, backend, tmp)
            gw = bench_gateway(backend, tmp)
            results[backend] = {"gateway": gw, "baseline": base}
            for what in ("send", "poll"):
                key = f"{what}_msgs_per_s"
                cpu = f"{what}_cpu_us_per_msg"
                print(
                    f"{backend:9s} {what}: gateway {gw[key]:>10,.0f} msg/s "
                    f"({gw[cpu]:.2f} CPU-us/msg)   in-process baseline {base[key]:>10,.0f} msg/s "
                    f"({base[cpu]:.2f} CPU-us/msg)   ({gw[key] / base[key]:.0%} of baseline)"
                )
    best = max(results[b]["gateway"]["send_msgs_per_s"] for b in ("memory", "embedded"))
    load = os.getloadavg()[0]
    print(
        f"target >= 150,000 msg/s sent: {'met' if best >= 150_000 else 'NOT met'} "
        f"(best {best:,.0f} msg/s; load average {load:.1f} on {os.cpu_count()} CPUs; "
        f"CPU-us/msg is the load-independent figure)"
    )
    results["load_average"] = load
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
