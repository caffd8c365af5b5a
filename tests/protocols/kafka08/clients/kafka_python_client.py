"""Driven by the kafka08 tests, run by the python of a kafka-python venv (3.0.12 or 2.3.3).

argv[1] is a JSON object: port, api_version (a list or null), topic, count, group, compression,
acks (default 1), partitions (default 1: everything on partition 0; more: the client's own key
partitioner spreads the messages). Produces ``count`` keyed messages, consumes the partitions
from the beginning (unless ``expect`` is 0), commits the position (when ``group``) and reads the
committed offset back (and the one found before consuming). Prints one JSON object: the records
consumed (hex), the committed offsets.
"""

import json
import sys

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

args = json.loads(sys.argv[1])
bootstrap = f"127.0.0.1:{args['port']}"
api = tuple(args["api_version"]) if args.get("api_version") else None
topic = args["topic"]
out = {}

if args.get("count"):
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        api_version=api,
        acks=args.get("acks", 1),
        request_timeout_ms=10000,
        max_block_ms=15000,
        compression_type=args.get("compression"),
        linger_ms=5,
    )
    partition = 0 if args.get("partitions", 1) == 1 else None
    futures = [
        producer.send(topic, key=b"key-%d" % i, value=b"value-%d" % i, partition=partition)
        for i in range(args["count"])
    ]
    producer.flush(30)
    out["produced"] = [f.get(timeout=30).offset for f in futures]
    out["partitions_used"] = sorted({f.get(timeout=30).partition for f in futures})
    producer.close()

group = args.get("group")
consumer = KafkaConsumer(
    bootstrap_servers=bootstrap,
    api_version=api,
    group_id=group,
    auto_offset_reset="earliest",
    consumer_timeout_ms=args.get("consumer_timeout_ms", 15000),  # ends early at ``expect``
    enable_auto_commit=False,
)
tps = [TopicPartition(topic, p) for p in range(args.get("partitions", 1))]
tp = tps[0]
consumer.assign(tps)
if group:
    out["committed_before"] = consumer.committed(tp)
want = args.get("expect")
records = []
if want != 0:
    consumer.seek_to_beginning(*tps)
    for msg in consumer:
        row = [msg.offset, None if msg.key is None else msg.key.hex(), msg.value.hex()]
        records.append(row if len(tps) == 1 else [msg.partition, *row])
        if want is not None and len(records) >= want:
            break
    if group:
        consumer.commit()
        out["committed"] = consumer.committed(tp)
out["records"] = records
consumer.close()
print(json.dumps(out))
