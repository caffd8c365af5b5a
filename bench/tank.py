"""Benchmark: TANK produce and consume messages/s through the gateway, beside the in-process
baseline measured in the same run.

Workload (printed too): messages of a 100-byte content, no key, one millisecond timestamp each,
in bundles of 1000 messages (one bundle per produce request, one partition), uncompressed and
Snappy-compressed. The bundles are encoded before the clock starts (that is the producer's cost).

- ``tank``: a gateway subprocess (``python -m gateway serve``, memory backend, TANK listener on
  loopback) and one client connection from this process (the in-repo client on the codec's
  client role), 8 produce requests in flight; then consumes from sequence number 1 to the end
  with ``fetch_size`` 1 MiB, counting the messages of the complete bundles received (bundle
  headers only: decoding each message is the consumer's cost, not the gateway's).
- ``baseline``: the same bundles, in this process, straight into ``Core.execute(Produce)`` of a
  memory backend (as ``tank-bundle`` blocks, what the listener hands the core), then
  ``Core.execute(Fetch)`` to the end with ``max_bytes`` 1 MiB: the work the gateway cannot avoid,
  without the network, the framing and the second process.

Target: >= 200k messages/s produced uncompressed through the gateway.
Run: ``python bench/tank.py``; results go to ``bench/results/tank.json``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.backends.memory import MemoryBackend  # noqa: E402
from gateway.core.engine import Core  # noqa: E402
from gateway.model import CreateTopic, Fetch, Produce, RecordBatch  # noqa: E402
from gateway.protocols.tank.bundle import (  # noqa: E402
    TANK_BUNDLE,
    encode_bundle,
    parse_header,
    read_varint,
    scan_bundle,
)
from gateway.protocols.tank.client import TankClient  # noqa: E402
from gateway.protocols.tank.codec import (  # noqa: E402
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
)
from tests.support import GatewayProcess  # noqa: E402

CONTENT_BYTES = 100
BUNDLE = 1000
TOTAL = 300_000
IN_FLIGHT = 8
FETCH_SIZE = 1 << 20
REPEATS = 3
RESULTS = ROOT / "bench" / "results" / "tank.json"


def make_bundles(compress: bool) -> list[bytes]:
    ts = 1_700_000_000_000
    content = b"m" * (CONTENT_BYTES - 8)
    out = []
    for b in range(TOTAL // BUNDLE):
        msgs = [(None, b"%08d" % (b * BUNDLE + i) + content, ts + b) for i in range(BUNDLE)]
        out.append(encode_bundle(msgs, compress=compress))
    return out


def count_complete(chunk: bytes) -> int:
    """Messages in the complete bundles of a consume chunk (the cut last one is dropped)."""
    pos, end, n = 0, len(chunk), 0
    while pos < end:
        try:
            blen, body = read_varint(chunk, pos, end)
        except ValueError:
            break
        if body + blen > end:
            break
        n += parse_header(chunk, body, body + blen).message_count
        pos = body + blen
    return n


# ----------------------------------------------------------------------------- baseline


async def baseline(bundles: list[bytes]) -> dict[str, float]:
    core = Core({"m": MemoryBackend("m")}, [("*", "m")])
    await core.execute(CreateTopic("bench", 1))
    started = time.perf_counter()
    for bundle in bundles:
        info = scan_bundle(bundle)  # the listener validates every bundle it is handed
        batch = RecordBatch(
            encoded=bundle,
            codec=TANK_BUNDLE,
            count=info.header.message_count,
            max_timestamp_us=info.max_ts_ms * 1000,
        )
        await core.execute(Produce("bench", batch, partition=0))
    produce_s = time.perf_counter() - started
    started = time.perf_counter()
    offset = got = 0
    while offset < TOTAL:
        res = await core.execute(Fetch("bench", 0, offset, max_bytes=FETCH_SIZE))
        for b in res.batches:
            block = b.whole().encoded_as(TANK_BUNDLE)
            assert block is not None
            got += b.count
            offset = b.last_offset + 1
    consume_s = time.perf_counter() - started
    assert got == TOTAL
    return {"produce_msgs_per_s": TOTAL / produce_s, "consume_msgs_per_s": TOTAL / consume_s}


# ----------------------------------------------------------------------------- through TANK


async def through_tank(addr: tuple[str, int], bundles: list[bytes], topic: str) -> dict[str, float]:
    async with await TankClient.connect(*addr) as c:
        assert await c.create_topic(topic, 1) == 0
        started = time.perf_counter()
        pending: list[int] = []
        for bundle in bundles:
            req = ProduceRequest(
                c._id(), [ProduceTopic(topic, [ProducePartition(0, bundle)])], client_id=b"bench"
            )
            await c.stream.send_all(c.conn.send(req))
            pending.append(req.request_id)
            if len(pending) >= IN_FLIGHT:
                resp = await c.response(pending.pop(0))
                assert resp.topics[0].statuses == [0], resp
        for rid in pending:
            resp = await c.response(rid)
            assert resp.topics[0].statuses == [0], resp
        produce_s = time.perf_counter() - started

        started = time.perf_counter()
        seq = 1
        got = 0
        while got < TOTAL:
            part = await c.consume_raw(topic, 0, seq, fetch_size=FETCH_SIZE)
            assert part is not None and part.err == 0
            chunk = part.chunk if isinstance(part.chunk, bytes) else bytes(part.chunk)
            n = count_complete(chunk)
            assert n, "fetch size too small for one bundle"
            # the chunk starts at base_seq (the bundle holding seq); count what is new
            new = part.base_seq + n - seq
            got += new
            seq += new
        consume_s = time.perf_counter() - started
        assert got == TOTAL
    return {"produce_msgs_per_s": TOTAL / produce_s, "consume_msgs_per_s": TOTAL / consume_s}


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: max(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    workload = {
        "content_bytes": CONTENT_BYTES,
        "key": None,
        "messages_per_bundle": BUNDLE,
        "messages_per_run": TOTAL,
        "partitions": 1,
        "produce_requests_in_flight": IN_FLIGHT,
        "consume_fetch_size": FETCH_SIZE,
        "gateway": "subprocess, memory backend, TANK listener on loopback, one connection",
        "baseline": "in-process Core + memory backend, same bundles, Produce/Fetch commands",
    }
    print("workload:", json.dumps(workload))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        gw = GatewayProcess(Path(tmp), listeners={"tank": {}}, backend="memory")
        gw.env["GATEWAY_SERVER__LOG_LEVEL"] = "warning"
        with gw:
            addr = gw.address("tank")
            for codec in ("none", "snappy"):
                bundles = make_bundles(codec == "snappy")
                size = sum(len(b) for b in bundles)
                base_runs, tank_runs = [], []
                for i in range(REPEATS):  # alternating, best of each (shared machine)
                    base_runs.append(trio.run(baseline, bundles))
                    tank_runs.append(trio.run(through_tank, addr, bundles, f"bench-{codec}-{i}"))
                b, t = best(base_runs), best(tank_runs)
                results[codec] = {
                    "bundle_bytes_avg": size / len(bundles),
                    "baseline": b,
                    "tank": t,
                    "tank_over_baseline": {k: t[k] / b[k] for k in b},
                }
                print(
                    f"{codec:>6}: produce {t['produce_msgs_per_s']:>10,.0f} msg/s via TANK "
                    f"(baseline {b['produce_msgs_per_s']:>12,.0f}); consume "
                    f"{t['consume_msgs_per_s']:>10,.0f} msg/s via TANK "
                    f"(baseline {b['consume_msgs_per_s']:>12,.0f}); "
                    f"bundle {size / len(bundles):,.0f} B"
                )
    out = {
        "workload": workload,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": list(os.getloadavg()),
        },
        "repeats": REPEATS,
        "target": "produce >= 200000 msg/s uncompressed through the gateway",
        "runs": results,
        "target_met": results["none"]["tank"]["produce_msgs_per_s"] >= 200_000,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"target (>= 200k msg/s produced uncompressed) met: {out['target_met']}")
    print(f"written {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
