"""Driven by tests/protocols/kafka, run by the python of the confluent-kafka venv.

argv[1] is a JSON object: bootstrap ("host:port"), topic, count, produce (extra producer
settings, e.g. {"enable.idempotence": true, "compression.type": "zstd"}), consume (extra
consumer settings), skip_produce (only consume), start (the offset to read
from; default the beginning), auth_probe (only connect, print the
errors). Produces ``count`` records with a key, a value,
two headers and a timestamp to partition 0, then reads the partition from the beginning with
assign() until its end; prints one JSON object.
"""

import json
import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

args = json.loads(sys.argv[1])
common = {"bootstrap.servers": args["bootstrap"], **args.get("common", {})}
topic = args["topic"]
count = args["count"]
out = {"delivery_errors": [], "offsets": []}
BASE_TS = 1_700_000_000_000


def delivered(err, msg):
    if err is not None:
        out["delivery_errors"].append(str(err))
    else:
        out["offsets"].append(msg.offset())


if args.get("auth_probe"):  # only connect: print the errors librdkafka reports
    errors = []
    probe = Producer({**common, "error_cb": lambda err: errors.append([err.name(), err.str()])})
    try:
        probe.list_topics(timeout=5)
    except Exception as exc:  # KafkaException: the metadata request never got an answer
        errors.append(["list_topics", str(exc)])
    for _ in range(20):  # error_cb runs from poll()
        if any(name == "_AUTHENTICATION" for name, _ in errors):
            break
        probe.poll(0.5)
    print(json.dumps({"errors": errors}))
    sys.exit(0)

if not args.get("skip_produce"):
    producer = Producer({**common, "linger.ms": 5, **args.get("produce", {})})
    for i in range(count):
        producer.produce(
            topic,
            key=b"key-%d" % i,
            value=b"value-%d " % i + b"x" * (i % 50),
            partition=0,
            headers=[("h1", b"one-%d" % i), ("h2", b"")],
            timestamp=BASE_TS + i,
            on_delivery=delivered,
        )
    out["unflushed"] = producer.flush(30)

consumer = Consumer(
    {
        **common,
        "group.id": "unused",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        **args.get("consume", {}),
    }
)
consumer.assign([TopicPartition(topic, 0, args.get("start", OFFSET_BEGINNING))])
records = []
errors = []
while True:
    msg = consumer.poll(20)
    if msg is None:
        errors.append("poll timed out")
        break
    if msg.error():
        if msg.error().code() == KafkaError._PARTITION_EOF:
            break
        errors.append(str(msg.error()))
        break
    records.append(
        [
            msg.offset(),
            None if msg.key() is None else msg.key().decode(),
            msg.value().decode(),
            [[k, v.decode()] for k, v in (msg.headers() or [])],
            msg.timestamp()[1],
        ]
    )
consumer.close()
out.update(records=records, errors=errors)
print(json.dumps(out))
