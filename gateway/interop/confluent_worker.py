"""The modern Kafka client of the interoperability matrix: confluent-kafka (librdkafka) with its
defaults, so it negotiates today's versions with the gateway's Kafka listener (record batches
v2 with headers, Fetch v4+).

Run as a script by an interpreter that has confluent-kafka (``gateway matrix --kafka-python``),
not imported by the gateway: it uses only the standard library and confluent_kafka.
``python confluent_worker.py HOST:PORT`` reads one JSON request per line on stdin and writes one
JSON answer per line on stdout (bytes in base64, timestamps in milliseconds):

- ``{"op": "hello"}`` -> ``{"version": ..., "librdkafka": ...}`` once the broker answered
  Metadata
- ``{"op": "create_topic", "topic": T, "partitions": N}`` -> ``{}`` (CreateTopics; an existing
  topic is fine)
- ``{"op": "produce", "topic": T, "records": [[key, value, [[name, value]...], ts_ms]...]}``
  -> ``{"offsets": [...]}`` (partition 0, flushed)
- ``{"op": "consume", "topic": T, "count": N, "timeout_s": S}`` -> ``{"records": [[offset,
  key, value, [[name, value]...], ts_ms]...]}``: at least N records of partition 0 from its
  beginning

A failure answers ``{"error": "..."}``; the worker goes on with the next request.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
    libversion,
    version,
)
from confluent_kafka.admin import AdminClient, NewTopic


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class Worker:
    def __init__(self, bootstrap: str) -> None:
        common = {"bootstrap.servers": bootstrap, "client.id": "gateway-matrix"}
        self.producer = Producer(common)
        self.admin = AdminClient(common)
        self.common = common

    def hello(self, request: dict[str, Any]) -> dict[str, Any]:
        self.producer.list_topics(timeout=request.get("timeout_s", 10))
        return {"version": version()[0], "librdkafka": libversion()[0]}

    def create_topic(self, request: dict[str, Any]) -> dict[str, Any]:
        topic = request["topic"]
        futures = self.admin.create_topics(
            [NewTopic(topic, request.get("partitions", 1), 1)], request_timeout=10
        )
        try:
            futures[topic].result(15)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        return {}

    def produce(self, request: dict[str, Any]) -> dict[str, Any]:
        offsets: list[int] = []
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                offsets.append(msg.offset())

        for key, value, headers, ts_ms in request["records"]:
            self.producer.produce(
                request["topic"],
                key=unb64(key),
                value=unb64(value),
                partition=0,
                headers=[(name, unb64(v)) for name, v in headers],
                timestamp=ts_ms,
                on_delivery=delivered,
            )
            self.producer.poll(0)
        left = self.producer.flush(request.get("timeout_s", 30))
        if errors:
            return {"error": f"delivery failed: {errors[0]} ({len(errors)} record(s))"}
        if left:
            return {"error": f"{left} record(s) not delivered in time"}
        return {"offsets": offsets}

    def consume(self, request: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + request.get("timeout_s", 30)
        # a consumer per read: one that moved on from another topic would wait out its fetch
        # still parked at the broker (fetch.wait.max.ms) before fetching the new one. assign()
        # only, no commits: the group id is never used as a group.
        consumer = Consumer(
            {**self.common, "group.id": "gateway-matrix", "enable.auto.commit": False}
        )
        # metadata first: an assign() before the broker connection is up queries the start
        # offset only on librdkafka's next retry, half a second later
        consumer.list_topics(request["topic"], timeout=10)
        consumer.assign([TopicPartition(request["topic"], 0, OFFSET_BEGINNING)])
        records: list[list[Any]] = []
        try:
            while len(records) < request["count"]:
                if time.monotonic() > deadline:
                    return {"error": f"consumed {len(records)} of {request['count']} in time"}
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error():
                    return {"error": str(msg.error())}
                records.append(
                    [
                        msg.offset(),
                        b64(msg.key()),
                        b64(msg.value()),
                        [[name, b64(v or b"")] for name, v in (msg.headers() or [])],
                        msg.timestamp()[1],
                    ]
                )
        finally:
            consumer.close()
        return {"records": records}


OPS = ("hello", "create_topic", "produce", "consume")


def main() -> None:
    worker = Worker(sys.argv[1])
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request.get("op") not in OPS:
                raise ValueError(f"unknown op {request.get('op')!r}")
            answer = getattr(worker, request["op"])(request)
        except Exception as exc:  # noqa: BLE001 - answered, the next request goes on
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
