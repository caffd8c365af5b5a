"""Liftbridge listener throughput: PublishAsync and Subscribe of 256-byte messages through gRPC
against a gateway subprocess, beside the same workload on the core in-process (the baseline),
measured in the same run.

Workload: N messages (default 50,000) of a 256-byte value, no key, into partition 0 of a new
stream, with PublishAsync (ackPolicy LEADER: one ack per message), then Subscribe from EARLIEST
until N messages arrived. Two clients: grpcio (the real gRPC library: a stream_stream call fed by
a generator, a unary_stream call; in a separate process) and the in-repo trio client on the
codec's client role (a lean load generator, in this process). Messages/s = N / wall time of the
phase; messages per gateway CPU-second = N / CPU time the gateway process used in the phase.
Baseline: Core.execute(Produce) of 1,000-record batches, then Core.execute(Fetch) of 1 MiB until
N records were returned, records materialised.

Usage: python bench/liftbridge.py [--messages N] [--backend embedded|memory|both]
Writes bench/results/liftbridge.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import cpu_seconds, gateway_config, gateway_process  # noqa: E402
from gateway.config import parse_config  # noqa: E402
from gateway.model import CreateTopic, Fetch, Produce, Record, RecordBatch, now_us  # noqa: E402
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb  # noqa: E402
from gateway.protocols.liftbridge.client import LiftbridgeClient  # noqa: E402
from gateway.server import build_backends, build_core  # noqa: E402

VALUE_BYTES = 256
BASELINE_BATCH = 1000
TARGET_PUBLISH = 20_000  # messages/s published through gRPC (its target)

GRPCIO_CLIENT = r"""
import sys, time, json, grpc
sys.path.insert(0, sys.argv[1])
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
port, n, stream, value = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], b"v" * int(sys.argv[5])
ch = grpc.insecure_channel(f"127.0.0.1:{port}")
grpc.channel_ready_future(ch).result(timeout=10)
pa = ch.stream_stream("/proto.API/PublishAsync",
                      request_serializer=pb.PublishRequest.SerializeToString,
                      response_deserializer=pb.PublishResponse.FromString)
sub = ch.unary_stream("/proto.API/Subscribe",
                      request_serializer=pb.SubscribeRequest.SerializeToString,
                      response_deserializer=pb.Message.FromString)
out = {}
print("ready", flush=True); sys.stdin.readline()
t0 = time.perf_counter()
acks = sum(1 for r in pa(pb.PublishRequest(stream=stream, value=value, correlationId=str(i))
                         for i in range(n)) if r.ack.offset >= 0 and not r.HasField("asyncError"))
out["publish_s"] = time.perf_counter() - t0
assert acks == n, acks
print("published", flush=True)
if sys.stdin.readline().strip() == "stop":
    print(json.dumps(out), flush=True); sys.exit()
t0 = time.perf_counter()
call = sub(pb.SubscribeRequest(stream=stream, startPosition=pb.EARLIEST))
got = -1
for m in call:
    got += 1
    if got == n:
        break
call.cancel()
out["subscribe_s"] = time.perf_counter() - t0
print(json.dumps(out), flush=True)
"""

# The ceiling of that client on this machine: a gRPC server that stores nothing (the codec on a
# blocking socket, one fixed ack per request, the acks of everything that arrived within half a
# millisecond in one write), so the client is all that limits the rate.
NOOP_SERVER = r"""
import socket, sys, time
sys.path.insert(0, sys.argv[1])
from gateway.protocols.liftbridge import codec as c
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
ack = c.frame_message(pb.PublishResponse(ack=pb.Ack(stream="noop", offset=1, correlationId="1"))
                      .SerializeToString())
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(8)
print(ls.getsockname()[1], flush=True)
while True:
    s, _ = ls.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = c.GrpcConnection(); conn.initiate(); s.sendall(conn.data_to_send())
    try:
        while d := s.recv(256 * 1024):
            time.sleep(0.0005)
            s.setblocking(False)
            try:
                while more := s.recv(256 * 1024):
                    d += more
            except BlockingIOError:
                pass
            s.setblocking(True)
            for ev in conn.receive_data(d):
                if type(ev) is c.MessageReceived:
                    conn.send_raw(ev.stream_id, ack * len(ev.messages))
                elif type(ev) is c.HalfClosed:
                    conn.send_trailers(ev.stream_id, 0, "")
            s.sendall(conn.data_to_send())
    except (OSError, c.RemoteProtocolError):
        pass
    s.close()
"""


async def create_stream(port: int, name: str) -> None:
    async with await LiftbridgeClient.connect("127.0.0.1", port) as lb:
        await lb.call("CreateStream", pb.CreateStreamRequest(name=name, subject=name))


def start_grpcio_client(port: int, n: int, stream: str) -> subprocess.Popen[str]:
    """The grpcio client process, connected and waiting for its go."""
    proc = subprocess.Popen(
        [sys.executable, "-c", GRPCIO_CLIENT, str(ROOT), str(port), str(n), stream,
         str(VALUE_BYTES)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        sys.exit("grpcio client failed")
    return proc


def grpcio_phases(gw_pid: int, port: int, n: int) -> dict:
    trio.run(create_stream, port, "grpcio")
    proc = start_grpcio_client(port, n, "grpcio")
    assert proc.stdin is not None and proc.stdout is not None
    cpu0, client0 = cpu_seconds(gw_pid), cpu_seconds(proc.pid)
    proc.stdin.write("\n")
    proc.stdin.flush()
    if proc.stdout.readline().strip() != "published":
        sys.exit("grpcio client failed")
    publish_cpu = cpu_seconds(gw_pid) - cpu0
    publish_client = cpu_seconds(proc.pid) - client0
    cpu0, client0 = cpu_seconds(gw_pid), cpu_seconds(proc.pid)
    proc.stdin.write("\n")
    proc.stdin.flush()
    times = json.loads(proc.stdout.readline())
    subscribe_cpu = cpu_seconds(gw_pid) - cpu0
    subscribe_client = cpu_seconds(proc.pid) - client0
    proc.wait(60)
    return {
        "publish": (n / times["publish_s"], n / publish_cpu, publish_client / n),
        "subscribe": (n / times["subscribe_s"], n / subscribe_cpu, subscribe_client / n),
    }


def grpcio_ceiling(n: int) -> tuple[float, float]:
    """The grpcio client's publish phase against NOOP_SERVER: (messages/s, client CPU-s per
    message)."""
    server = subprocess.Popen(
        [sys.executable, "-c", NOOP_SERVER, str(ROOT)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        proc = start_grpcio_client(port, n, "noop")
        assert proc.stdin is not None and proc.stdout is not None
        client0 = cpu_seconds(proc.pid)
        proc.stdin.write("\n")
        proc.stdin.flush()
        if proc.stdout.readline().strip() != "published":
            sys.exit("grpcio client failed against the no-op server")
        client = cpu_seconds(proc.pid) - client0
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        times = json.loads(proc.stdout.readline())
        proc.wait(60)
        return n / times["publish_s"], client / n
    finally:
        server.kill()
        server.wait()


async def codec_phases(gw_pid: int, port: int, n: int) -> dict:
    await create_stream(port, "codec")
    value = b"v" * VALUE_BYTES
    reqs = [pb.PublishRequest(stream="codec", value=value, correlationId=str(i)) for i in range(n)]
    out = {}
    async with await LiftbridgeClient.connect("127.0.0.1", port) as lb:
        cpu0 = cpu_seconds(gw_pid)
        t0 = time.perf_counter()
        acks = await lb.publish_async(reqs)
        seconds = time.perf_counter() - t0
        assert len(acks) == n and acks[-1].ack.offset == n - 1
        out["publish"] = (n / seconds, n / (cpu_seconds(gw_pid) - cpu0), None)
        cpu0 = cpu_seconds(gw_pid)
        t0 = time.perf_counter()
        got = 0
        async for _ in lb.subscribe(pb.SubscribeRequest(stream="codec", startPosition=pb.EARLIEST)):
            got += 1
            if got == n:
                break
        seconds = time.perf_counter() - t0
        out["subscribe"] = (n / seconds, n / (cpu_seconds(gw_pid) - cpu0), None)
    return out


def run_listener(backend: str, n: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        config = gateway_config("liftbridge", {"type": backend}, tmp)
        with gateway_process(config, tmp) as (proc, ports):
            return {
                "grpcio": grpcio_phases(proc.pid, ports["liftbridge"], n),
                "codec": trio.run(codec_phases, proc.pid, ports["liftbridge"], n),
            }


async def _baseline(backend: str, n: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        config = parse_config(gateway_config("liftbridge", {"type": backend}, Path(d)))
        backends = build_backends(config)
        async with trio.open_nursery() as nursery:
            for b in backends.values():
                await b.open(nursery)
            core = build_core(config, backends)
            await core.execute(CreateTopic("bench", 1))
            value = b"v" * VALUE_BYTES
            c0, t0 = time.process_time(), time.perf_counter()
            for start in range(0, n, BASELINE_BATCH):
                ts = now_us()
                batch = RecordBatch(
                    [Record(None, value, (), ts) for _ in range(min(BASELINE_BATCH, n - start))]
                )
                await core.execute(Produce("bench", batch, 0))
            publish = (n / (time.perf_counter() - t0), n / (time.process_time() - c0))
            c0, t0 = time.process_time(), time.perf_counter()
            offset = got = 0
            while got < n:
                res = await core.execute(Fetch("bench", 0, offset, max_bytes=1 << 20))
                for b in res.batches:
                    got += len(b.records)
                    offset = b.last_offset + 1
            subscribe = (n / (time.perf_counter() - t0), n / (time.process_time() - c0))
            for b in backends.values():
                await b.close()
            nursery.cancel_scope.cancel()
    return {"publish": publish, "subscribe": subscribe}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--backend", choices=["embedded", "memory", "both"], default="both")
    args = parser.parse_args()
    n = args.messages
    backends = ["embedded", "memory"] if args.backend == "both" else [args.backend]
    print(__doc__.split("\n\n")[1].replace("\n", " "))
    load = os.getloadavg()
    print(
        f"N={n} messages, value {VALUE_BYTES} bytes, 1 partition; {os.cpu_count()} CPUs, "
        f"load average {load[0]:.1f} (messages/s suffer when other work shares the CPUs; "
        f"messages per gateway CPU-second much less)"
    )
    results: dict = {
        "workload": {
            "messages": n,
            "value_bytes": VALUE_BYTES,
            "publish": "PublishAsync, ackPolicy LEADER, one ack per message",
            "subscribe": "Subscribe from EARLIEST until N messages",
            "clients": {
                "grpcio": "grpcio stream_stream fed by a generator / unary_stream (subprocess)",
                "codec": "in-repo trio client on the codec's client role (4096 unanswered)",
            },
            "baseline": f"in-process Core, {BASELINE_BATCH}-record batches, 1 MiB fetches",
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m_at_start": round(load[0], 2),
        },
        "target_publish_messages_per_s": TARGET_PUBLISH,
        "runs": {},
    }
    for backend in backends:
        listener = run_listener(backend, n)
        baseline = trio.run(_baseline, backend, n)
        run: dict = {}
        for phase in ("publish", "subscribe"):
            base_rate, base_cpu = baseline[phase]
            entry: dict = {
                "baseline_messages_per_s": round(base_rate),
                "baseline_messages_per_cpu_s": round(base_cpu),
            }
            for client, phases in listener.items():
                rate, per_cpu, client_cpu = phases[phase]
                entry[client] = {
                    "messages_per_s": round(rate),
                    "ratio_to_baseline": round(rate / base_rate, 3),
                    "gateway_messages_per_cpu_s": round(per_cpu),
                }
                if client_cpu is not None:
                    entry[client]["client_cpu_us_per_message"] = round(client_cpu * 1e6, 1)
                verdict = "met" if rate >= TARGET_PUBLISH else "MISSED"
                if phase == "publish":
                    entry[client]["meets_target"] = rate >= TARGET_PUBLISH
                print(
                    f"{backend:9} {phase:9} {client:6} {rate:>9,.0f} msg/s   "
                    f"baseline {base_rate:>9,.0f} msg/s   ratio {rate / base_rate:.2f}   "
                    f"| per gateway CPU-s {per_cpu:>9,.0f} (baseline {base_cpu:,.0f})"
                    + (f"   target {TARGET_PUBLISH:,} {verdict}" if phase == "publish" else "")
                    + (f"   client CPU {client_cpu * 1e6:.0f} us/msg" if client_cpu else "")
                )
            run[phase] = entry
        results["runs"][backend] = run
    rate, client_cpu = max(grpcio_ceiling(n) for _ in range(2))  # the better of two runs
    results["grpcio_client_ceiling"] = {
        "what": "the grpcio client's publish phase against a gRPC server that stores nothing "
        "(codec on a blocking socket, fixed acks): the most that client reaches here",
        "messages_per_s": round(rate),
        "client_cpu_us_per_message": round(client_cpu * 1e6, 1),
    }
    print(
        f"grpcio client against a no-op server (its ceiling here): {rate:>9,.0f} msg/s published"
        f"   client CPU {client_cpu * 1e6:.0f} us/msg"
    )
    out = ROOT / "bench" / "results" / "liftbridge.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
