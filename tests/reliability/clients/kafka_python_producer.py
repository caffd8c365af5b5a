"""kafka-python (0.8.2 protocol) producer for tests/reliability/test_replicas.py, run with the
.test-venvs/kafka-python-3 interpreter. argv[1]: JSON {port, topic, count, progress}. Sends
``count`` records one at a time (each waits for its acknowledgement, retried by the client),
writes how many were sent to the ``progress`` file, and prints the acknowledged values as JSON."""

import json
import sys
import time

from kafka import KafkaProducer

args = json.loads(sys.argv[1])
producer = KafkaProducer(
    bootstrap_servers=f"127.0.0.1:{args['port']}",
    api_version=(0, 8, 2),
    acks=1,
    retries=20,
    retry_backoff_ms=200,
    reconnect_backoff_ms=100,
    request_timeout_ms=5000,
    max_block_ms=20000,
    metadata_max_age_ms=1000,
)
acked, failed = [], 0
for i in range(args["count"]):
    value = b"%s-%d" % (args["tag"].encode(), i)
    try:
        producer.send(args["topic"], value=value).get(timeout=30)
        acked.append(value.decode())
    except Exception:  # counted: the test checks only acknowledged records
        failed += 1
    with open(args["progress"], "w") as f:
        f.write(str(i + 1))
    time.sleep(0.01)
producer.close(10)
print(json.dumps({"acked": acked, "failed": failed}))
