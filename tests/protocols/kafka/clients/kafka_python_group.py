"""A kafka-python 3 group member, driven by tests/protocols/kafka/test_groups.py and run by the
python of the kafka-python-3 venv (same protocol as confluent_group.py: one JSON line per
assignment and record; "commit" on stdin commits; "stop" commits, leaves the group and prints a
summary)."""

import json
import logging
import select
import sys

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener

args = json.loads(sys.argv[1])
logging.basicConfig(level=logging.INFO, stream=sys.stderr)  # the test shows it on a failure
records: dict[int, list[int]] = {}
owned: set[tuple[str, int]] = set()


def say(obj):
    print(json.dumps(obj), flush=True)


class Listener(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked):
        owned.clear()

    def on_partitions_assigned(self, assigned):
        owned.clear()
        owned.update((p.topic, p.partition) for p in assigned)
        say({"assigned": sorted(owned)})


consumer = KafkaConsumer(
    bootstrap_servers=args["bootstrap"],
    group_id=args["group"],
    enable_auto_commit=False,
    auto_offset_reset="earliest",
    session_timeout_ms=10000,
    heartbeat_interval_ms=500,
    **args.get("consume", {}),
)
consumer.subscribe([args["topic"]], listener=Listener())


def commit():
    """Commit the positions of the partitions owned (synchronously); what is committed now."""
    consumer.commit()
    return {p: consumer.committed(TopicPartition(t, p)) for t, p in sorted(owned)}


stop = False
while not stop:
    for tp, msgs in consumer.poll(timeout_ms=100).items():
        records.setdefault(tp.partition, []).extend(m.offset for m in msgs)
        say({"got": [[tp.partition, m.offset] for m in msgs]})
    if select.select([sys.stdin], [], [], 0)[0]:
        line = sys.stdin.readline().strip()
        if line == "commit":
            say({"commit_done": commit()})
        stop = line in ("stop", "")
final = sorted(owned)
committed = commit()
consumer.close()
say({"done": True, "records": records, "committed": committed, "owned": final})
