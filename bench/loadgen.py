"""The C load generator of bench/latency.py's gateway path (bench/loadgen.c): built with the
machine's C compiler, fed with one produce request per protocol that the protocol's in-repo
client encoded (so the bytes are the same as the Python generator's), and checked against the
topic: every answered request must have stored its record.

Why a C generator: on a 2-CPU machine the Python one (trio plus the client's codec) used 200-300
us of CPU per request, more than the gateway, and the two processes taking turns on the CPUs
was most of the gateway path's tail. The C one uses a few us per request and releases requests
at their due time (timerfd) instead of in the 1 ms ticks of Python's epoll."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from gateway.interop.drivers import DRIVERS
from gateway.model import Record
from gateway.protocols.kafka08.client import Kafka08Client
from gateway.protocols.liftbridge.codec import GrpcConnection

SOURCE = Path(__file__).resolve().parent / "loadgen.c"
H2_CALL_FRAMES = frozenset({0, 1, 9})  # DATA, HEADERS, CONTINUATION
H2_WINDOW = 1 << 30  # more receive window for the connection, opened up front


class LoadgenError(RuntimeError):
    pass


def build(directory: Path) -> Path:
    """Compile bench/loadgen.c into ``directory``; returns the executable."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise LoadgenError("no C compiler (cc/gcc) to build bench/loadgen.c")
    exe = directory / "loadgen"
    subprocess.run([cc, "-O2", "-Wall", "-Werror", "-o", str(exe), str(SOURCE)], check=True)
    return exe


class _Recorder:
    """A stream that keeps a copy of what the client sends."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.sent = bytearray()

    async def send_all(self, data: bytes) -> None:
        self.sent += data
        await self.stream.send_all(data)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return await self.stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.stream.aclose()


def _h2_call_frames(data: bytes) -> bytes:
    """The frames of the call in ``data``: HEADERS, CONTINUATION and DATA, without the
    connection's SETTINGS acks and WINDOW_UPDATEs the client sent beside them."""
    out, at = bytearray(), 0
    while at + 9 <= len(data):
        length = int.from_bytes(data[at : at + 3], "big")
        if data[at + 3] in H2_CALL_FRAMES:
            out += data[at : at + 9 + length]
        at += 9 + length
    return bytes(out)


@dataclass
class Frames:
    preamble: bytes  # sent once per connection
    first: bytes  # the first request on a connection
    later: bytes  # every later one

    def write(self, path: Path) -> None:
        path.write_bytes(
            b"".join(struct.pack("<I", len(b)) + b for b in (self.preamble, self.first, self.later))
        )


async def capture(name: str, address: tuple[str, int], topic: str, record: Record) -> Frames:
    """Two produces of ``record`` through the protocol's in-repo client, recorded on the wire.
    They store two records in ``topic``."""
    driver = DRIVERS[name](*address)
    with trio.fail_after(20):
        await driver.open()
    client = driver.client  # type: ignore[attr-defined]
    recorder = client.stream = _Recorder(client.stream)
    sent = []
    try:
        for _ in range(2):
            start = len(recorder.sent)
            await driver.produce(topic, [record])
            sent.append(bytes(recorder.sent[start:]))
    finally:
        await driver.aclose()
    if name != "liftbridge":
        return Frames(b"", sent[0], sent[1])
    conn = GrpcConnection(client=True)
    conn.initiate()
    # WINDOW_UPDATE of the connection: the generator never sends one for the answers it reads
    window = struct.pack(">I", 4)[1:] + bytes((8, 0)) + struct.pack(">II", 0, H2_WINDOW)
    preamble = conn.data_to_send() + window
    return Frames(preamble, _h2_call_frames(sent[0]), _h2_call_frames(sent[1]))


async def end_offset(address: tuple[str, int], topic: str) -> int:
    """The next offset of partition 0 of ``topic``, asked over the Kafka 0.8 listener."""
    client = await Kafka08Client.connect(*address)
    try:
        return (await client.offsets(topic, 0, -1, 1))[0]
    finally:
        await client.aclose()


@dataclass
class OpenLoop:
    latencies: array  # seconds, answer minus release
    lags: array  # seconds, release minus due time
    seconds: float  # first timed due time to last answer
    gateway_cpu_s: float
    generator_cpu_s: float
    busy_jiffies: int
    steal_jiffies: int
    total_jiffies: int


class Loadgen:
    """The built generator and one protocol's recorded request, against one gateway."""

    def __init__(
        self,
        exe: Path,
        name: str,
        address: tuple[str, int],
        kafka08: tuple[str, int],
        topic: str,
        frames: Frames,
        gateway_pid: int,
    ) -> None:
        self.exe, self.name, self.address, self.kafka08 = exe, name, address, kafka08
        self.topic, self.gateway_pid = topic, gateway_pid
        self.dir = exe.parent
        self.frames_path = self.dir / f"{name}.frames"
        frames.write(self.frames_path)

    async def _run(self, *args: str) -> dict[str, Any]:
        before = await end_offset(self.kafka08, self.topic)
        host, port = self.address
        cmd = [
            str(self.exe),
            self.name,
            host,
            str(port),
            str(self.frames_path),
            str(self.dir / f"{self.name}.out"),
            *args,
        ]
        proc = await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False)
        if proc.returncode:
            raise LoadgenError(
                f"{' '.join(cmd)}: exit {proc.returncode}: "
                f"{proc.stderr.decode(errors='replace').strip()}"
            )
        result = json.loads(proc.stdout)
        stored = await end_offset(self.kafka08, self.topic) - before
        if stored != result["expected_records"]:
            raise LoadgenError(
                f"{self.name}: {result['expected_records']} produces answered, {stored} records "
                f"stored in {self.topic}"
            )
        return result

    async def closed(self, connections: int, seconds: float) -> dict[str, float]:
        """Every connection sends again as soon as its answer is in, for ``seconds``."""
        r = await self._run(str(connections), "closed", str(seconds), str(self.gateway_pid))
        wall = r["seconds"]
        return {
            "requests": r["answered"],
            "requests_per_s": round(r["answered"] / wall),
            "gateway_cpu_cores": round(r["gateway_cpu_s"] / wall, 2),
            "generator_cpu_cores": round(r["generator_cpu_s"] / wall, 2),
        }

    async def open(self, connections: int, rate: float, warmup: int, count: int) -> OpenLoop:
        """``warmup`` then ``count`` timed requests released at ``rate`` per second."""
        r = await self._run(
            str(connections), "open", repr(rate), str(warmup), str(count), str(self.gateway_pid)
        )
        samples = array("d")
        with open(self.dir / f"{self.name}.out", "rb") as f:
            samples.fromfile(f, 2 * count)
        return OpenLoop(
            latencies=samples[:count],
            lags=samples[count:],
            seconds=r["seconds"],
            gateway_cpu_s=r["gateway_cpu_s"],
            generator_cpu_s=r["generator_cpu_s"],
            busy_jiffies=r["busy_jiffies"],
            steal_jiffies=r["steal_jiffies"],
            total_jiffies=r["total_jiffies"],
        )
