"""How long a client on another listener waits while one Kafka 0.8 Metadata request names 1,000
unknown topics (auto-create on, embedded backend).

Workload: a gateway process (embedded backend, default fsync) with a Kafka 0.8 and a Cursus
listener. A Cursus client sends ``HELP`` (answered on the event loop, no backend) every 10 ms:
first for 2 s with nothing else going on (the baseline, this run), then while one Metadata request
names 1,000 unknown topics, until its answer arrives. Reported per run: the request's own time,
how many topics it created or had refused, and the Cursus client's wait (max and p99) during it
against the baseline. Two runs: topic creation unlimited (``max_topics_created_per_s = 0`` and
``max_topics_created_per_request`` = the topic count: all 1,000 are created, the most disk work)
and the default budgets (100 a second, 100 a request).

Writes ``bench/results/metadata_freeze.json``.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import gateway_config, gateway_process  # noqa: E402
from gateway.protocols.cursus.client import CursusClient  # noqa: E402
from gateway.protocols.kafka08 import codec as k  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "metadata_freeze.json"
BASELINE_S = 2.0


def metadata(port: int, names: list[str]) -> list[int]:
    """The error code of each topic in the answer to one Metadata request naming ``names``."""
    conn = k.ClientConnection("bench")
    with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
        sock.sendall(conn.send_request(k.ApiKey.METADATA, 0, k.METADATA_REQUEST(names)))
        while True:
            got = conn.next_response()
            if got is not None:
                return [t.error for t in got[1].topics]
            data = sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the gateway closed the connection")
            conn.receive_data(data)


def summary(waits: list[float]) -> dict[str, float]:
    ordered = sorted(waits)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "probes": len(waits),
        "max_ms": round(ordered[-1] * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
    }


async def measure(ports: dict[str, int], names: list[str], interval: float) -> dict[str, Any]:
    async with await CursusClient.connect("127.0.0.1", ports["cursus"]) as client:

        async def probe() -> float:
            started = time.perf_counter()
            await client.text("HELP")
            return time.perf_counter() - started

        baseline: list[float] = []
        end = time.perf_counter() + BASELINE_S
        while time.perf_counter() < end:
            baseline.append(await probe())
            await trio.sleep(interval)

        during: list[float] = []
        codes: list[int] = []
        attack_s = 0.0
        async with trio.open_nursery() as nursery:

            async def attack() -> None:
                nonlocal attack_s
                started = time.perf_counter()
                codes.extend(await trio.to_thread.run_sync(metadata, ports["kafka08"], names))
                attack_s = time.perf_counter() - started
                nursery.cancel_scope.cancel()

            nursery.start_soon(attack)
            await trio.sleep(0)
            while True:
                during.append(await probe())
                await trio.sleep(interval)
    return {
        "attack_s": round(attack_s, 2),
        "topics_created": codes.count(0),
        "topics_refused": len(codes) - codes.count(0),
        "baseline": summary(baseline),
        "during": summary(during),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    args = parser.parse_args()
    names = [f"storm-{i:05d}" for i in range(args.topics)]
    runs: dict[str, Any] = {}
    for label, server in (
        (
            "creation unlimited",
            {"max_topics_created_per_s": 0, "max_topics_created_per_request": args.topics},
        ),
        ("default budgets (100/s, 100 a request)", {}),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            config = gateway_config("kafka08", {"type": "embedded"}, Path(tmp))
            config["listeners"]["cursus"] = {"host": "127.0.0.1", "port": 0}
            config["server"].update(server)
            with gateway_process(config, Path(tmp)) as (_, ports):
                runs[label] = trio.run(measure, ports, names, args.interval_ms / 1000)
        print(f"{label}: {json.dumps(runs[label])}", flush=True)
    out = {
        "workload": {
            "request": f"one Kafka 0.8 Metadata v0 request naming {args.topics} unknown topics",
            "bystander": f"Cursus HELP every {args.interval_ms:g} ms on another listener",
            "baseline": f"the same probes for {BASELINE_S:g} s before the request, same process",
            "backend": "embedded, fsync every 50 ms",
        },
        "runs": runs,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
