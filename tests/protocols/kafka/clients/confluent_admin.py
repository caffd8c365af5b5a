"""confluent-kafka's AdminClient (and a Producer) against the gateway, driven by
tests/protocols/kafka: argv[1] is a JSON object {"bootstrap": ..., "ops": [[op, args], ...]};
each op's outcome (its result, or the error's name and text) is one element of the printed
JSON list. Ops: create_topics [[name, partitions, config]], create_partitions [[name, total]],
delete_topics [names], describe_configs [[kind, name, [keys]]], list_groups, describe_groups
[names], delete_groups [names], topics [names] (their partition counts), produce [topic,
per_partition, partitions], produce_keys [topic, [key or null, ...]] (one record each to
partition 0: {"ok": offset} or the delivery error), commit [group, [[topic, partition,
offset], ...]] (a consumer that assigns itself partitions commits, as after ``assign()``: its
outcome per "topic/partition", or the request's error), committed [group, [[topic,
partition], ...]] (the offsets read back)."""

import json
import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

args = json.loads(sys.argv[1])
admin = AdminClient({"bootstrap.servers": args["bootstrap"]})


def settle(futures):
    out = {}
    for key, future in futures.items():
        try:
            out[str(key)] = {"ok": future.result()}
        except KafkaException as exc:
            err = exc.args[0]
            out[str(key)] = {"error": err.name(), "text": err.str()}
    return out


def run(op, a):
    if op == "create_topics":
        topics = [NewTopic(n, p, 1, config=c) for n, p, c in a]
        return settle(admin.create_topics(topics, operation_timeout=10))
    if op == "create_partitions":
        return settle(admin.create_partitions([NewPartitions(n, c) for n, c in a]))
    if op == "delete_topics":
        return settle(admin.delete_topics(a, operation_timeout=10))
    if op == "describe_configs":
        kinds = {"topic": ConfigResource.Type.TOPIC, "broker": ConfigResource.Type.BROKER}
        resources = [ConfigResource(kinds[k], n) for k, n in a]
        out = {}
        for res, future in admin.describe_configs(resources).items():
            try:
                out[res.name] = {k: [v.value, v.source] for k, v in future.result().items()}
            except KafkaException as exc:
                out[res.name] = {"error": exc.args[0].name()}
        return out
    if op == "list_groups":
        result = admin.list_consumer_groups().result()
        return sorted([g.group_id, str(g.state).split(".")[-1]] for g in result.valid)
    if op == "describe_groups":
        out = {}
        for name, future in admin.describe_consumer_groups(a).items():
            try:
                d = future.result()
            except KafkaException as exc:
                out[name] = {"error": exc.args[0].name()}
                continue
            out[name] = {
                "state": str(d.state).split(".")[-1],
                "protocol": d.partition_assignor,
                "members": sorted(
                    sorted([tp.topic, tp.partition] for tp in m.assignment.topic_partitions)
                    for m in d.members
                ),
            }
        return out
    if op == "delete_groups":
        return {k: v for k, v in settle(admin.delete_consumer_groups(a)).items()}
    if op == "topics":
        md = admin.list_topics(timeout=10)
        return {name: len(t.partitions) for name, t in md.topics.items() if name in a}
    if op == "produce":
        topic, per_partition, partitions = a
        producer = Producer({"bootstrap.servers": args["bootstrap"]})
        for p in range(partitions):
            for i in range(per_partition):
                producer.produce(topic, value=b"v-%d-%d" % (p, i), partition=p)
        return producer.flush(30)
    if op == "produce_keys":  # one record per key (null: None) to partition 0, each one's fate
        topic, keys = a
        producer = Producer({"bootstrap.servers": args["bootstrap"], "linger.ms": 50})
        fates = {}

        def delivered(err, msg, i):
            fates[i] = (
                {"ok": msg.offset()} if err is None else {"error": err.name(), "text": err.str()}
            )

        for i, key in enumerate(keys):
            producer.produce(
                topic,
                value=b"v",
                key=None if key is None else key.encode(),
                partition=0,
                on_delivery=lambda err, msg, i=i: delivered(err, msg, i),
            )
        producer.flush(30)
        return [fates.get(i) for i in range(len(keys))]
    if op in ("commit", "committed"):
        group, wanted = a
        consumer = Consumer(
            {"bootstrap.servers": args["bootstrap"], "group.id": group, "enable.auto.commit": False}
        )
        try:
            if op == "committed":
                tps = consumer.committed([TopicPartition(t, p) for t, p in wanted], timeout=10)
                return {f"{tp.topic}/{tp.partition}": tp.offset for tp in tps}
            tps = [TopicPartition(t, p, o) for t, p, o in wanted]
            try:
                done = consumer.commit(offsets=tps, asynchronous=False)
            except KafkaException as exc:
                return {"error": exc.args[0].name()}
            return {
                f"{tp.topic}/{tp.partition}": tp.error.name() if tp.error else "ok" for tp in done
            }
        finally:
            consumer.close()
    raise ValueError(op)


results = []
for op, a in args["ops"]:
    results.append(run(op, a))
print(json.dumps(results, default=str))
