"""Microbenchmark: the produce-side writers of canonical blocks, in-process (no sockets).

    .venv/bin/python bench/canonical_encoders.py [--records 5000] [--repeats 7]

What each write path of a canonical block costs per record, so a change to the block format
(canonical version 3 with a record start table, 2026-11-25) can be measured before and after on
the same machine: run it with ``PYTHONPATH`` set to each tree. Every case encodes one block of
``--records`` records of 16-byte keys and 100-byte values, every other record with one 8-byte
header where the path has headers; the figure is the best of ``--repeats`` (shared machine).

- ``CanonicalCodec.encode``: Record objects -> block (the embedded log's write of decoded
  batches, ``GatewayClient.produce_batch``);
- ``kafka08 parse_produce``: a magic-0 MessageSet (keyless and keyed) -> block;
- ``iggy send_batch``: decoded SEND_MESSAGES -> block (with and without message headers);
- ``kafka batches_to_canonical``: a Kafka v2 record batch -> block (uniform records take the
  run path, records with headers the per-record path);
- ``admin produce_binary check``: what ``POST ...?format=binary`` runs on the body before
  appending it (``CANONICAL.decode`` before, the validating walk after).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.backends.kafka.records import encode_batch  # noqa: E402
from gateway.backends.kafka.to_canonical import batches_to_canonical  # noqa: E402
from gateway.canonical import CANONICAL  # noqa: E402
from gateway.model import Record  # noqa: E402
from gateway.protocols.iggy.messages import send_batch  # noqa: E402
from gateway.protocols.kafka08.messageset import encode_records, parse_produce  # noqa: E402

TS = 1_700_000_000_000_000


def best_us(fn: Callable[[], object], n: int, repeats: int) -> float:
    """Best time per record of ``fn`` (which handles ``n`` records), in microseconds."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    n, reps = args.records, args.repeats
    value = b"v" * 100
    recs = [
        Record(b"key-%012d" % i, value, (("trace", b"abcdefgh"),) if i % 2 else (), TS)
        for i in range(n)
    ]
    plain = [Record(None, value, (), TS) for _ in range(n)]
    keyed = [Record(b"key-%012d" % i, value, (), TS) for i in range(n)]
    set_plain = encode_records(plain, 0, 1 << 40)[0]
    set_keyed = encode_records(keyed, 0, 1 << 40)[0]
    iggy_plain = [(bytes(16), b"", value) for _ in range(n)]
    iggy_ids = [(i.to_bytes(16, "little"), b"", value) for i in range(1, n + 1)]
    kafka_uniform = encode_batch(keyed, TS // 1000)
    kafka_headers = encode_batch(recs, TS // 1000)
    body = CANONICAL.encode(recs)
    try:
        from gateway.canonical import check_block  # the branch's validating walk
    except ImportError:  # before the change: produce_binary decoded the body

        def check_block(block: bytes) -> object:
            return CANONICAL.decode(block, -1)

    cases: list[tuple[str, Callable[[], object]]] = [
        ("CanonicalCodec.encode (headers on 1/2)", lambda: CANONICAL.encode(recs)),
        ("kafka08 parse_produce (keyless)", lambda: parse_produce(set_plain, TS)),
        ("kafka08 parse_produce (keyed)", lambda: parse_produce(set_keyed, TS)),
        ("iggy send_batch (zero ids)", lambda: send_batch(iggy_plain, None, TS)),
        ("iggy send_batch (ids: 1 header)", lambda: send_batch(iggy_ids, None, TS)),
        ("kafka batches_to_canonical (uniform)", lambda: batches_to_canonical(kafka_uniform, 0, n)),
        ("kafka batches_to_canonical (headers)", lambda: batches_to_canonical(kafka_headers, 0, n)),
        ("admin produce_binary check", lambda: check_block(body)),
    ]
    print(f"{n} records per block, best of {reps}; us/record")
    for name, fn in cases:
        fn()  # warm
        print(f"  {name:<42} {best_us(fn, n, reps):7.3f}")


if __name__ == "__main__":
    main()
