"""The Kafka backend (``type = "kafka"``, ``bootstrap = "host:port"``): a modern Kafka cluster
(2.1 through 4.x, or a Kafka-compatible broker such as Tansu) as the gateway's storage. This is
the path that keeps Kafka 0.8 clients working against a Kafka 4.x cluster.

Mapping
-------
- **Topics and partitions are Kafka topics and partitions, offsets are Kafka offsets**: no
  translation. Topic config ``retention_ms``/``retention_bytes`` become ``retention.ms``/
  ``retention.bytes``; the gateway's other per-topic settings (a Liftbridge subject, ...) are kept
  in the key-value store (namespace ``_gw.topics``).
- **Records** travel as record batches v2 (one batch per append; acks = all), compressed with
  ``compression``.
  Timestamps are Kafka's milliseconds; a non-zero sub-millisecond remainder of the model's
  microseconds travels in the reserved record header ``_gw.us`` and is folded back on read, so
  the round trip is exact and Kafka consumers see the right millisecond timestamp. Fetched
  batches of every codec are read. Control batches of transactions are skipped; under
  ``isolation = "read_committed"`` (the default) records of aborted transactions are dropped.
- **Idempotent produce** (``idempotence = true``): a producer id from InitProducerId and a
  sequence per partition in every batch; a produce whose answer was lost is sent again with the
  same sequence, so the broker stores it once; a cluster that gives no producer id gets plain
  produces (one log line). See ``idempotence.py`` and ``produce.py``.
- **Offsets are increasing, not dense**: a read returns one batch per run of consecutive
  offsets, each record at the offset the cluster gave it; a read inside a gap gets the records
  after it.
- **Conditional appends** (``expected_offset``): Kafka has none, so the partition's
  ``AppendGate`` is held exclusive across a fresh high-watermark read and the produce (plain
  appends hold it shared and still overlap). Producers outside this gateway are not held off:
  records they slip in make the append land elsewhere, reported as INTERNAL, not undone.
- **Committed offsets** (key-value namespace ``offsets``, key ``group\\x1ftopic\\x1fpartition``)
  are committed through Kafka's own group offsets (FindCoordinator + OffsetCommit v6 as a simple,
  generation -1 commit; read back with OffsetFetch v5), so Kafka consumers of the same group
  see them, and mirrored into the key-value topic. In a group this gateway is a member of, the
  commit carries that membership's member id and generation.
- **Consumer groups** (Cursus, Iggy, Liftbridge members) are the cluster's own groups, each
  gateway one Kafka member of them (``groups.py``), so every gateway on the cluster sees one
  group.
- **The key-value store** (group state, topic settings, every other namespace) is the compacted
  topic ``kv_topic`` (default ``__gateway_kv``, one partition): key ``namespace \\0 key``, a null
  value deletes. Each key-value call first reads the topic to its end, so several gateway
  instances on one cluster see each other's writes.
- **Protocol**: one pinned version of each API, inside both Kafka 2.1's and 4.x's ranges
  (Produce v7, Fetch v10, ListOffsets v4, Metadata v7, OffsetCommit v6, OffsetFetch v5,
  FindCoordinator v2, CreateTopics v3, DeleteTopics v3, CreatePartitions v1; InitProducerId at the
  highest of v4..v0 the broker has), checked against the broker's ApiVersions at connect;
  requests and responses are kio's types. A broker without
  CreatePartitions (Tansu 0.6) turns the ``topic_admin`` capability off (the conformance suite
  treats adding partitions and deleting topics as one capability). Kafka cannot delete
  partitions (UNSUPPORTED). Produce and Fetch go to the partition leader from Metadata.

Reads: one Fetch per read, converted up to the read's max bytes. A consumer catching up
gets read-ahead (``read_ahead = true``, the default): the next Fetch is sent while it handles
this answer (see ``RecordStore.read`` in ``data.py``).

Outages: while the cluster is unreachable every call raises ``ErrorCode.BACKEND_UNAVAILABLE``
(retriable); connections are re-opened on the next call, so the gateway works again as soon as
the broker is back, without a restart. ``health()`` is a Metadata round trip.
"""

from gateway.backends.kafka.backend import BACKEND, KafkaBackend, KafkaConfig

__all__ = ["BACKEND", "KafkaBackend", "KafkaConfig"]
