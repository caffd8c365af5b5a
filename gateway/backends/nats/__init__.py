"""The NATS JetStream backend (``type = "nats"``, ``url = "nats://host:port"``).

Mapping (``stream_prefix`` ``GW`` and ``subject_prefix`` ``gw`` are the defaults)
--------------------------------------------------------------------------------
- **One JetStream stream per partition.** Topic ``T`` partition ``p`` is the stream
  ``GW_<enc(T)>_<p>_<incarnation>`` capturing the single subject ``gw.<enc(T)>.<p>``. ``enc`` keeps
  ASCII letters, digits and ``-`` and writes every other byte as ``_XX`` (hex), so ``orders.eu_1``
  becomes ``orders_2Eeu_5F1``; stream names must not contain ``.`` and a subject token must not
  be empty. The incarnation (8 random hex digits, kept in the topic registry) makes a re-created
  topic or partition a new stream: nats-server 2.15 can resurrect the messages of a stream deleted
  and re-created under the same name within milliseconds.
- **Offsets are stream sequences minus one**: the stream assigns dense sequence numbers 1, 2, 3, ...
  to its one subject, so the partition's offset ``n`` is sequence ``n + 1``; log start is
  ``first_seq - 1`` and the high watermark ``last_seq``. Retention (``retention_ms``,
  ``retention_bytes`` topic config) becomes the stream's ``max_age``/``max_bytes`` and only moves
  the log start.
- **One NATS message per record.** The payload is the record value; the key, timestamp and record
  headers travel as NATS headers: ``Gw-Ts`` (microseconds), ``Gw-Key`` (base64; absent for a
  null key), ``Gw-Null: 1`` for a null value, ``Gw-H`` (base64 of the record headers, each as
  ``name_len u16 | value_len u32 | name | value``, little endian). A message published into the
  subject by a plain NATS client reads back as a record with a null key and its JetStream
  timestamp.
- **A batch is one chain of plain publishes** acknowledged once: every message carries a ``Nats-Msg-
  Id`` and expects the previous one's as the stream's last (``Nats-Expected-Last-Msg-Id``; the first
  expects the last sequence we saw), and only the last has a reply subject. A chain that breaks
  anywhere (another gateway instance writing the same partition, a refusal) fails every later
  message, so an acknowledged last message proves the whole batch is stored, contiguous, at the
  offsets we return. A broken chain is retried once with a fresh last sequence, then the batch goes
  as JetStream atomic batches (``Nats-Batch-Id``/``-Sequence``/``-Commit``, ``max_batch`` messages
  each; ~3x slower on nats-server 2.15). A prefix of a broken chain may stay stored without having
  been acknowledged (as after any client retry: at least once). The append returns only after
  JetStream acknowledged the last message (stored by the stream).
- **Conditional appends** (``expected_offset``) skip the chain: JetStream atomic batches whose
  first message carries ``Nats-Expected-Last-Sequence: <expected offset>``: with one stream per
  partition and one subject per stream, the stream's last sequence is the partition's next offset
  (``Nats-Expected-Last-Subject-Sequence`` would say the same with a per-subject lookup on the
  server). JetStream refuses a batch
  whose expectation fails (err_code 10071, OFFSET_MISMATCH) whoever wrote in between, storing
  none of it; only a conditional append longer than ``max_batch`` can be cut between two atomic
  batches.
- **Reads** are one batch direct get (``$JS.API.DIRECT.GET.<stream>`` with ``seq`` and ``batch``).
- **Topic registry, committed offsets and group state** live in the JetStream key-value bucket
  ``kv_bucket`` (default ``gateway``; stream ``KV_gateway``), so several gateway instances share
  them: the key-value namespace ``ns`` key ``k`` is the KV key ``<hex(ns)>.k<hex(k)>``; topic ``T``
  is registered under the namespace ``_gw.topics`` as JSON ``{"partitions": n, "config": [...]}``.
  Registration is created with an expected-last-sequence of 0 (so two gateways creating the same
  topic get exactly one TOPIC_EXISTS) and changed with compare-and-set.

Outages: the client reconnects in the background; while NATS (or JetStream) is unreachable every
operation raises ``ErrorCode.BACKEND_UNAVAILABLE`` (retriable) and ``health()`` reports it.
"""

from gateway.backends.nats.backend import BACKEND, NatsBackend, NatsConfig

__all__ = ["BACKEND", "NatsBackend", "NatsConfig"]
