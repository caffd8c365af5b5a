"""Driven by the kafka08 tests, run by the python of the confluent-kafka venv (2.16.1).

argv[1] is a JSON object: port, mode ("0.8": api.version.request=false +
broker.version.fallback=0.8.2.2; "default": no settings, the ApiVersions path), topic, count,
group. Produces ``count`` keyed messages to partition 0, consumes from the beginning until the
partition end, commits and reads the committed offset back; prints one JSON object.
"""

import json
import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

args = json.loads(sys.argv[1])
conf = {"bootstrap.servers": f"127.0.0.1:{args['port']}"}
if args["mode"] == "0.8":
    conf.update({"api.version.request": False, "broker.version.fallback": "0.8.2.2"})
topic = args["topic"]
out = {}

producer = Producer({**conf, "acks": 1})
for i in range(args["count"]):
    producer.produce(topic, key=b"key-%d" % i, value=b"value-%d" % i, partition=0)
out["unflushed"] = producer.flush(30)

consumer = Consumer(
    {
        **conf,
        "group.id": args["group"],
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    }
)
consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
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
    records.append([msg.offset(), msg.key().hex(), msg.value().hex()])
consumer.commit(asynchronous=False)
[tp] = consumer.committed([TopicPartition(topic, 0)], timeout=20)
out.update(records=records, errors=errors, committed=tp.offset)
consumer.close()
print(json.dumps(out))
