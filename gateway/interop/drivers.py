"""One driver per protocol for the interoperability matrix: create a topic, produce records,
consume them back, each through that protocol's own in-repo client (built on the protocol's
codec in its client role). ``produces`` and ``consumes`` name the record fields the protocol
carries in each direction; the matrix checks what both ends of a pair carry.

Fields: ``key``, ``value``, ``headers``, ``timestamp``. What each protocol carries (and why):

- kafka08: produces key, value, timestamp (magic 1, ms); consumes key, value (Fetch v0 answers
  are magic 0: no timestamp). No headers at all.
- iggy: produces value, headers and a key (the messages-key partitioning key, one per send);
  consumes value, headers, timestamp (µs). The server stamps the time: an Iggy producer cannot
  set it. Polled messages have no key.
- tank: key, value, timestamp (ms) both ways; no headers.
- liftbridge: produces key, value, headers (the server stamps the time); consumes key, value,
  headers (a map: names are unique, plus ``subject`` and ``reply`` added by the server),
  timestamp (ns).
- cursus: key and value both ways (its other fields are Cursus-only; no headers, no time).
- kafka: today's Kafka client (confluent-kafka with its defaults, on the Kafka listener): key,
  value, headers (a list: order and repeats kept), timestamp (ms) both ways. Not in-repo: a
  worker process (``confluent_worker.py``) run by an interpreter that has confluent-kafka.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import trio

from gateway.interop import CLIENTS as CLIENTS  # re-exported
from gateway.interop import LISTENER as LISTENER  # re-exported
from gateway.interop import PROTOCOLS as PROTOCOLS  # re-exported
from gateway.model import Record
from gateway.protocols.cursus import codec as cursus_codec
from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.iggy import codec as iggy_codec
from gateway.protocols.iggy.client import IggyClient
from gateway.protocols.iggy.messages import headers_from_model, headers_to_model
from gateway.protocols.kafka08.client import Kafka08Client
from gateway.protocols.liftbridge.client import LiftbridgeClient
from gateway.protocols.tank.client import TankClient

ALL_FIELDS = frozenset({"key", "value", "headers", "timestamp"})
LIFTBRIDGE_SERVER_HEADERS = frozenset({"subject", "reply"})


class Driver:
    name: ClassVar[str] = ""
    produces: ClassVar[frozenset[str]] = ALL_FIELDS
    consumes: ClassVar[frozenset[str]] = ALL_FIELDS
    creates_topics: ClassVar[bool] = True

    def __init__(self, host: str, port: int, **options: Any) -> None:
        self.host = host
        self.port = port
        self.options = options

    async def open(self) -> None: ...

    async def aclose(self) -> None: ...

    async def create_topic(self, topic: str, partitions: int = 1) -> None:
        raise NotImplementedError

    async def produce(self, topic: str, records: Sequence[Record]) -> None:
        raise NotImplementedError

    async def consume(self, topic: str, count: int) -> list[Record]:
        """At least ``count`` records from offset 0 of partition 0 (waits for them)."""
        raise NotImplementedError


class Kafka08Driver(Driver):
    name = "kafka08"
    produces = frozenset({"key", "value", "timestamp"})
    consumes = frozenset({"key", "value"})

    async def open(self) -> None:
        self.client = await Kafka08Client.connect(self.host, self.port)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def create_topic(self, topic: str, partitions: int = 1) -> None:
        await self.client.metadata([topic])  # 0.8 creates topics on Metadata (auto-create)

    async def produce(self, topic: str, records: Sequence[Record]) -> None:
        await self.client.produce(topic, 0, records, magic=1)

    async def consume(self, topic: str, count: int) -> list[Record]:
        out: list[Record] = []
        while len(out) < count:
            records, _ = await self.client.fetch(topic, 0, len(out), max_wait_ms=200)
            out.extend(records)
        return out


class IggyDriver(Driver):
    name = "iggy"
    produces = frozenset({"key", "value", "headers"})
    consumes = frozenset({"value", "headers", "timestamp"})
    creates_topics = False  # needs the stream and numeric ids: topics come from another protocol

    async def open(self) -> None:
        self.client = await IggyClient.connect(self.host, self.port)
        user = self.options.get("username")
        if user:
            await self.client.login(user, self.options.get("password", ""))
        self.stream = self.options.get("stream", "default")

    async def aclose(self) -> None:
        await self.client.aclose()

    async def produce(self, topic: str, records: Sequence[Record]) -> None:
        # one send per run of records with the same key: the key is the partitioning key
        i = 0
        while i < len(records):
            j = i
            while j < len(records) and records[j].key == records[i].key:
                j += 1
            messages = []
            for r in records[i:j]:
                _, block = headers_from_model(r.headers)
                messages.append(iggy_codec.Message(0, r.value or b"", block))
            key = records[i].key
            part = (
                iggy_codec.Partitioning.messages_key(key)
                if key
                else iggy_codec.Partitioning.partition_id(1)
            )
            await self.client.send_messages(self.stream, topic, messages, part)
            i = j

    async def consume(self, topic: str, count: int) -> list[Record]:
        out: list[Record] = []
        while len(out) < count:
            polled = await self.client.poll(
                self.stream, topic, 1, iggy_codec.PollingKind.OFFSET, len(out), count - len(out)
            )
            if not polled.messages:
                await trio.sleep(0.05)
            for m in polled.messages:
                headers = tuple(
                    (k, v)
                    for k, v in headers_to_model(m.headers, bytes(16))
                    if not k.startswith("_gw.")
                )
                out.append(Record(None, m.payload, headers, m.timestamp, m.offset))
        return out


class TankDriver(Driver):
    name = "tank"
    produces = frozenset({"key", "value", "timestamp"})
    consumes = frozenset({"key", "value", "timestamp"})

    async def open(self) -> None:
        self.client = await TankClient.connect(self.host, self.port)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def create_topic(self, topic: str, partitions: int = 1) -> None:
        err = await self.client.create_topic(topic, partitions)
        if err not in (0, 1):
            raise RuntimeError(f"TANK CreateTopic {topic}: error {err}")

    async def produce(self, topic: str, records: Sequence[Record]) -> None:
        messages = [(r.key, r.value or b"", r.timestamp_us // 1000) for r in records]
        status = await self.client.produce(topic, 0, messages)
        if status:
            raise RuntimeError(f"TANK produce {topic}: status {status}")

    async def consume(self, topic: str, count: int) -> list[Record]:
        out: list[Record] = []
        while len(out) < count:
            msgs, _ = await self.client.consume(topic, 0, len(out) + 1, max_wait_ms=200)
            for m in msgs:
                out.append(Record(m.key, m.content, (), m.timestamp_ms * 1000, m.seq - 1))
        return out


class LiftbridgeDriver(Driver):
    name = "liftbridge"
    produces = frozenset({"key", "value", "headers"})
    consumes = ALL_FIELDS

    async def open(self) -> None:
        self.client = await LiftbridgeClient.connect(self.host, self.port)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def create_topic(self, topic: str, partitions: int = 1) -> None:
        await self.client.create_stream(topic, partitions)

    async def produce(self, topic: str, records: Sequence[Record]) -> None:
        await self.client.publish_many(
            topic, 0, [(r.key, r.value, dict(r.headers)) for r in records]
        )

    async def consume(self, topic: str, count: int) -> list[Record]:
        out = []
        for m in await self.client.fetch(topic, 0, 0, count - 1):
            headers = tuple(
                (k, v) for k, v in m.headers.items() if k not in LIFTBRIDGE_SERVER_HEADERS
            )
            out.append(Record(m.key or None, m.value, headers, m.timestamp // 1000, m.offset))
        return out


class CursusDriver(Driver):
    name = "cursus"
    produces = frozenset({"key", "value"})
    consumes = frozenset({"key", "value"})

    async def open(self) -> None:
        self.client = await CursusClient.connect(self.host, self.port)
        self.members: dict[str, str] = {}

    async def aclose(self) -> None:
        # leave the groups joined to consume (the matrix then deletes them); a failed leave
        # leaves a member that times out, nothing worse
        for topic, member in self.members.items():
            try:
                with trio.move_on_after(5):
                    await self.client.text(
                        f"LEAVE_GROUP topic={topic} group=matrix-{topic} member={member}"
                    )
            except Exception:  # noqa: BLE001, S110 - a broken connection: nothing to leave
                pass
        await self.client.aclose()

    async def create_topic(self, topic: str, partitions: int = 1) -> None:
        reply = await self.client.text(f"CREATE topic={topic} partitions={partitions}", "admin")
        if "now has" not in reply:
            raise RuntimeError(f"Cursus CREATE {topic}: {reply}")

    async def produce(self, topic: str, records: Sequence[Record]) -> None:
        messages = [cursus_codec.Message(key=r.key or b"", payload=r.value or b"") for r in records]
        ack = await self.client.produce(topic, 0, messages)
        if isinstance(ack, str) or ack.status != "OK":
            raise RuntimeError(f"Cursus produce {topic}: {ack}")

    async def _member(self, topic: str) -> str:
        member = self.members.get(topic)
        if member is None:
            group = f"matrix-{topic}"
            reply = await self.client.text(f"JOIN_GROUP topic={topic} group={group} member=mx")
            found = re.search(r"member=(\S+)", reply)
            if not reply.startswith("OK") or not found:
                raise RuntimeError(f"Cursus JOIN_GROUP {topic}: {reply}")
            member = self.members[topic] = found.group(1)
        return member

    async def consume(self, topic: str, count: int) -> list[Record]:
        member = await self._member(topic)
        out: list[Record] = []
        while len(out) < count:
            batch = await self.client.consume(
                topic, 0, len(out), member, group=f"matrix-{topic}", wait_ms=200
            )
            if isinstance(batch, str):
                raise RuntimeError(f"Cursus CONSUME {topic}: {batch}")
            for m in batch.messages():
                out.append(Record(m.key or None, m.payload, (), -1, m.offset))
        return out


CONFLUENT_WORKER = Path(__file__).with_name("confluent_worker.py")


def confluent_python(given: str | None = None) -> str | None:
    """The interpreter to run the confluent-kafka worker: ``given``, else this one when it has
    confluent-kafka, else None."""
    if given:
        return given
    return sys.executable if importlib.util.find_spec("confluent_kafka") else None


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class KafkaDriver(Driver):
    """confluent-kafka (librdkafka) with its defaults in a worker process: the option
    ``python`` names an interpreter that has it (default: this one)."""

    name = "kafka"
    produces = ALL_FIELDS
    consumes = ALL_FIELDS

    # the worker's own deadlines, inside the matrix's (10 s to open, 30 s a pair)
    HELLO_S = 8
    CALL_S = 20

    async def open(self) -> None:
        python = confluent_python(self.options.get("python"))
        if python is None:
            raise RuntimeError(
                "confluent-kafka is not installed here: pip install confluent-kafka, or name "
                "a Python that has it (gateway matrix --kafka-python PATH)"
            )
        self.stderr = tempfile.TemporaryFile()
        self.buffer = b""
        try:
            self.process: trio.Process | None = await trio.lowlevel.open_process(
                [python, str(CONFLUENT_WORKER), f"{self.host}:{self.port}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
            )
        except OSError as exc:  # no such interpreter
            self.stderr.close()
            raise RuntimeError(
                f"cannot run {python} for the confluent-kafka worker: {exc}"
            ) from exc
        try:
            hello = await self._call({"op": "hello", "timeout_s": self.HELLO_S})
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.aclose()  # a driver that failed to open is never closed by the matrix
            raise
        self.version = f"confluent-kafka {hello['version']}, librdkafka {hello['librdkafka']}"

    async def aclose(self) -> None:
        process, self.process = getattr(self, "process", None), None
        if process is None:
            return
        if process.stdin is not None:
            await process.stdin.aclose()  # the worker ends at the end of its input
        with trio.move_on_after(5):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        self.stderr.close()

    async def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        process = self.process
        if process is None:
            raise RuntimeError("the confluent-kafka worker was stopped (an earlier call timed out)")
        assert process.stdin is not None and process.stdout is not None
        try:
            await process.stdin.send_all(json.dumps(request).encode() + b"\n")
            while b"\n" not in self.buffer:
                chunk = await process.stdout.receive_some(1 << 20)
                if not chunk:
                    self.stderr.seek(0)
                    tail = self.stderr.read().decode(errors="replace").strip().splitlines()[-3:]
                    raise RuntimeError(f"the confluent-kafka worker exited: {' | '.join(tail)}")
                self.buffer += chunk
        except BaseException:
            # cancelled or broken mid-call: a late answer would be taken for the next call's
            with trio.CancelScope(shield=True):
                await self.aclose()
            raise
        line, _, self.buffer = self.buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"confluent-kafka {request['op']}: {answer['error']}")
        return answer

    async def create_topic(self, topic: str, partitions: int = 1) -> None:
        await self._call({"op": "create_topic", "topic": topic, "partitions": partitions})

    async def produce(self, topic: str, records: Sequence[Record]) -> None:
        wire = [
            [
                _b64(r.key),
                _b64(r.value),
                [[k, _b64(v)] for k, v in r.headers],
                r.timestamp_us // 1000 if r.timestamp_us >= 0 else 0,  # 0: librdkafka's now
            ]
            for r in records
        ]
        request = {"op": "produce", "topic": topic, "records": wire, "timeout_s": self.CALL_S}
        await self._call(request)

    async def consume(self, topic: str, count: int) -> list[Record]:
        request = {"op": "consume", "topic": topic, "count": count, "timeout_s": self.CALL_S}
        answer = await self._call(request)
        return [
            Record(
                _unb64(key),
                _unb64(value),
                tuple((k, _unb64(v) or b"") for k, v in headers),
                ts_ms * 1000 if ts_ms >= 0 else -1,
                offset,
            )
            for offset, key, value, headers, ts_ms in answer["records"]
        ]


DRIVERS: dict[str, type[Driver]] = {
    d.name: d
    for d in (Kafka08Driver, IggyDriver, TankDriver, LiftbridgeDriver, CursusDriver, KafkaDriver)
}
