"""Run by the python of .test-venvs/confluent-kafka (confluent-kafka / librdkafka 2.x): writes
into a Kafka cluster what modern applications write, straight, not through the gateway.

    confluent_writer.py BOOTSTRAP TOPIC codec CODEC N      N records of ~300 bytes, one codec
    confluent_writer.py BOOTSTRAP TOPIC transactions PLAN   PLAN: e.g. "c3,a2,c3" (commit 3,
                                                            abort 2, commit 3), one txn each
    confluent_writer.py BOOTSTRAP TOPIC read N               print N records as JSON lines

Prints one JSON line per record written (value, offset as the cluster acknowledged it).
"""

from __future__ import annotations

import json
import sys
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition


def _value(tag: str, i: int) -> bytes:
    # a few hundred bytes of compressible text, so librdkafka really compresses the batch
    return (f"{tag}-{i:05d} " + "the quick brown fox jumps over the lazy dog " * 7).encode()


def _report(acked: list[dict]) -> None:
    for rec in acked:
        print(json.dumps(rec), flush=True)


def _producer(bootstrap: str, **extra: object) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": "all", **extra}
    return Producer(conf)


def write_codec(bootstrap: str, topic: str, codec: str, n: int) -> None:
    acked: list[dict] = []
    p = _producer(bootstrap, **{"compression.type": codec, "batch.num.messages": 1000})

    def done(err, msg) -> None:
        if err is not None:
            raise SystemExit(f"delivery failed: {err}")
        acked.append({"value": msg.value().decode(), "offset": msg.offset()})

    for i in range(n):
        p.produce(topic, _value(codec, i), key=f"k{i}".encode(), partition=0, on_delivery=done)
    p.flush(30)
    assert len(acked) == n, (len(acked), n)
    _report(acked)


def write_transactions(bootstrap: str, topic: str, plan: str) -> None:
    p = _producer(
        bootstrap,
        **{"transactional.id": f"gw-test-{uuid.uuid4().hex[:8]}", "enable.idempotence": True},
    )
    p.init_transactions(30)
    acked: list[dict] = []
    for t, step in enumerate(plan.split(",")):
        kind, count = step[0], int(step[1:])
        p.begin_transaction()
        these: list[dict] = []

        def done(err, msg, these=these, committed=kind == "c") -> None:
            if err is not None:
                raise SystemExit(f"delivery failed: {err}")
            these.append(
                {"value": msg.value().decode(), "offset": msg.offset(), "committed": committed}
            )

        for i in range(count):
            p.produce(topic, _value(f"t{t}{kind}", i), partition=0, on_delivery=done)
        p.flush(30)
        if kind == "c":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        acked.extend(these)
    _report(acked)


def read(bootstrap: str, topic: str, n: int) -> None:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"gw-read-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])  # no group coordination: read from offset 0
    got = 0
    for _ in range(300):
        msg = c.poll(0.2)
        if msg is None or msg.error():
            continue
        hdrs = [[k, v.decode()] for k, v in (msg.headers() or [])]
        print(
            json.dumps(
                {
                    "value": msg.value().decode(),
                    "key": msg.key().decode() if msg.key() else None,
                    "offset": msg.offset(),
                    "headers": hdrs,
                }
            ),
            flush=True,
        )
        got += 1
        if got >= n:
            break
    c.close()


def main() -> None:
    bootstrap, topic, what, arg = sys.argv[1:5]
    if what == "codec":
        write_codec(bootstrap, topic, arg, int(sys.argv[5]))
    elif what == "transactions":
        write_transactions(bootstrap, topic, arg)
    elif what == "read":
        read(bootstrap, topic, int(arg))
    else:
        raise SystemExit(f"unknown command {what!r}")


if __name__ == "__main__":
    main()
