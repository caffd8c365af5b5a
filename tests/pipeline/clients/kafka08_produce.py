"""Run by the python of .test-venvs/kafka-python-3 (kafka-python 3.0.12, Kafka 0.8 protocol).

argv[1]: JSON {port, topic, count, partitions, prefix}. Sends ``count`` records, key
``{prefix}-k{i}``, value ``{prefix}-v{i}``, record i to partition i % partitions (acks 1), and
prints {"produced": count, "offsets": [[partition, offset], ...]}.
"""

import json
import sys

from kafka import KafkaProducer

args = json.loads(sys.argv[1])
producer = KafkaProducer(
    bootstrap_servers=f"127.0.0.1:{args['port']}",
    api_version=(0, 8, 2),
    acks=1,
    linger_ms=20,
    batch_size=256 * 1024,
    request_timeout_ms=30000,
    max_block_ms=30000,
)
prefix, parts = args["prefix"], args["partitions"]
futures = [
    producer.send(
        args["topic"],
        key=f"{prefix}-k{i}".encode(),
        value=f"{prefix}-v{i}".encode(),
        partition=i % parts,
    )
    for i in range(args["count"])
]
producer.flush(120)
offsets = [[m.partition, m.offset] for m in (f.get(timeout=60) for f in futures)]
producer.close()
print(json.dumps({"produced": len(offsets), "offsets": offsets}))
