"""A confluent-kafka (librdkafka) group member, driven by tests/protocols/kafka/test_groups.py
and run by the python of the confluent-kafka venv.

argv[1] is a JSON object: bootstrap, topic, group, consume (extra consumer settings). The member
subscribes and polls; it prints one JSON line per assignment it gets ({"assigned": [[t, p],
...]}) and per record ({"got": [[partition, offset]]}). A line "commit" on stdin commits what
it consumed (synchronously) and prints {"commit_done": {partition: committed offset}}; a line
"stop" commits, closes (leaving the group) and prints {"done": ..., "records": {partition:
[offsets]}, "committed": {partition: offset}}.
"""

import json
import select
import sys

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

args = json.loads(sys.argv[1])
records: dict[int, list[int]] = {}
owned: set[tuple[str, int]] = set()


def say(obj):
    print(json.dumps(obj), flush=True)


def on_assign(consumer, partitions):
    owned.clear()
    owned.update((p.topic, p.partition) for p in partitions)
    say({"assigned": sorted(owned)})


def on_revoke(consumer, partitions):
    owned.clear()


consumer = Consumer(
    {
        "bootstrap.servers": args["bootstrap"],
        "group.id": args["group"],
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 500,
        **args.get("consume", {}),
    }
)
consumer.subscribe([args["topic"]], on_assign=on_assign, on_revoke=on_revoke)


def commit():
    """Commit the positions of the partitions owned (synchronously); what is committed now."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:  # nothing consumed since the last commit: nothing to commit
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise
    assigned = [TopicPartition(t, p) for t, p in sorted(owned)]
    return {tp.partition: tp.offset for tp in consumer.committed(assigned, timeout=10)}


stop = False
while not stop:
    msg = consumer.poll(0.1)
    if msg is not None and msg.error() is None:
        records.setdefault(msg.partition(), []).append(msg.offset())
        say({"got": [[msg.partition(), msg.offset()]]})
    elif msg is not None and msg.error().fatal():
        say({"error": str(msg.error())})
        sys.exit(1)
    if select.select([sys.stdin], [], [], 0)[0]:
        line = sys.stdin.readline().strip()
        if line == "commit":
            say({"commit_done": commit()})
        stop = line in ("stop", "")
final = sorted(owned)
committed = commit()
consumer.close()
say({"done": True, "records": records, "committed": committed, "owned": final})
