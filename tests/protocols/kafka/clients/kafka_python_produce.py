"""kafka-python 3's KafkaProducer, driven by tests/protocols/kafka and run by the python of the
kafka-python-3 venv: argv[1] is a JSON object {"bootstrap": ..., "topic": ..., "keys": [key or
null, ...]}; the records (one per key, to partition 0) go in one batch; prints a JSON list of
each record's fate: {"ok": offset} or {"error": the exception's class, "text": its message}."""

import json
import sys

from kafka import KafkaProducer

args = json.loads(sys.argv[1])
producer = KafkaProducer(bootstrap_servers=args["bootstrap"], linger_ms=200, retries=0)
futures = [
    producer.send(args["topic"], value=b"v", key=None if k is None else k.encode(), partition=0)
    for k in args["keys"]
]
producer.flush(30)
fates = []
for future in futures:
    try:
        fates.append({"ok": future.get(timeout=30).offset})
    except Exception as exc:  # the broker's error for this record
        fates.append({"error": type(exc).__name__, "text": str(exc)})
producer.close(5)
print(json.dumps(fates))
