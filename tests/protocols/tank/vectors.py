"""The wire captures of tank-cli talking to the real tank 4.0 broker.

No TANK client or broker installs from PyPI or apt, so these captures and
our own codec in its client role are the proof that the listener speaks TANK. ``TS`` stands in
for the captures' ``<ts>`` placeholder (the produce capture spells its timestamp out, used here).
"""

from __future__ import annotations


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


ORDERS = h("06 6f 72 64 65 72 73")  # str8 "orders"
TS = h("58 85 8d 00 a2 01 00 00")  # 1795305604440 ms, from the produce capture
TS_MS = int.from_bytes(TS, "little")

GREETING = h("03 00 00 00 00")

CREATE_ORDERS = h("07 0e 00 00 00 01 00 00 00 06 6f 72 64 65 72 73 02 00 00")
CREATE_ORDERS_OK = h("07 0c 00 00 00 01 00 00 00 06 6f 72 64 65 72 73 00")

BUNDLE_ABC = h("04 00 58 85 8d 00 a2 01 00 00 03 61 62 63")
PRODUCE_ABC = (
    h("01 29 00 00 00 02 00 01 00 00 00 03 63 2b 2b 00 00 00 00 00")
    + h("01 06 6f 72 64 65 72 73 01 00 00")
    + h("0e")
    + BUNDLE_ABC
)
PRODUCE_OK = h("01 05 00 00 00 01 00 00 00 00")

BUNDLE_THREE = h("0c") + h("00") + TS + h("02 6d 31") + h("02 02 6d 32") + h("02 02 6d 33")
BUNDLE_KEYED = h("04") + h("01") + TS + h("03 6b 65 79 03 76 61 6c")
BUNDLE_SPARSE_100 = h("44 64 00 00 00 00 00 00 00") + h("00") + TS + h("07 73 70 61 72 73 65 31")
PWS_PARTITION_ENTRY = h("00 00 1a 64 00 00 00 00 00 00 00")  # partition 0, len 26, base 100
# `tank-cli ... produce -S 1 s1`: a SPARSE bundle whose first sequence number is 1
BUNDLE_SPARSE_S1 = h("44 01 00 00 00 00 00 00 00") + h("00") + TS + h("02 73 31")
# the real broker frames its answer to a ProduceWithSeqnum (0x05) request as a Produce answer
# (0x01): OK, or 0x0a ("invalid request") for a sequence number at or below the high watermark
PWS_ANSWER_OK = h("01 05 00 00 00 01 00 00 00 00")
PWS_ANSWER_INVALID = h("01 05 00 00 00 01 00 00 00 0a")

CONSUME_ORDERS_0 = h(
    "02 2a 00 00 00 02 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 06 6f 72 64 65 72"
    "73 01 00 00 00 00 00 00 00 00 00 00 00 00 00 08"
)
CONSUME_ORDERS_0_HEADER = h(
    "02 60 00 00 00"
    "24 00 00 00"
    "01 00 00 00 01 06 6f 72 64 65 72 73 01"
    "00 00 00"
    "01 00 00 00 00 00 00 00"
    "05 00 00 00 00 00 00 00"
    "38 00 00 00"
)
CONSUME_ORDERS_0_CHUNK = (
    h("0e") + BUNDLE_ABC + h("15") + BUNDLE_THREE + h("12") + BUNDLE_KEYED
)  # the three bundles as produced, back to back

CONSUME_UNKNOWN_TOPIC_PART = h("06 6e 6f 73 75 63 68 01 ff ff")
PRODUCE_UNKNOWN_TOPIC = h("01 05 00 00 00 01 00 00 00 ff")
BOUNDARY_FAULT_PART = h(
    "00 00 01 00 00 00 00 00 00 00 00 64 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00"
)
UNKNOWN_PARTITION_7_PART = h("07 00 ff")

DISCOVER_PARTITIONS_ORDERS = h("06 0b 00 00 00 01 00 00 00 06 6f 72 64 65 72 73")  # computed
DISCOVER_PARTITIONS_ORDERS_RESP = h(
    "06 2d 00 00 00 01 00 00 00 06 6f 72 64 65 72 73 02 00"
    "01 00 00 00 00 00 00 00 05 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
)
DISCOVER_TOPICS_RESP = h(
    "0b 1d 00 00 00 01 00 00 00 02 00 00 00 00 06 6f 72 64 65 72 73 01 02 00 06 65 76 65 6e 74 73"
    "01 01 00"
)
STATUS_RESP_PREFIX = h(
    "0a 1e 00 00 00 01 00 00 00 00 00 02 00 00 00 03 00 00 00 03 00 00 00 00 00 00 00"
)  # then <ts32>
STATUS_RESP_SUFFIX = h("90 01 00 00")
DISCOVER_TOPOLOGY_RESP = h("0c 06 00 00 00 01 00 00 00 ff ff")


def produce_frame(
    topic: bytes, partition: int, bundle: bytes, request_id: int = 1, base: int | None = None
) -> bytes:
    """A tank-cli produce frame (client_version 2, client "c++", acks 0, timeout 0) with one
    partition; ``base`` makes it ProduceWithSeqnum (0x05)."""
    from gateway.protocols.tank.bundle import varint

    entry = partition.to_bytes(2, "little") + varint(len(bundle))
    if base is not None:
        entry += base.to_bytes(8, "little")
    payload = (
        h("02 00")
        + request_id.to_bytes(4, "little")
        + h("03 63 2b 2b 00 00 00 00 00 01")
        + bytes([len(topic)])
        + topic
        + h("01")
        + entry
        + bundle
    )
    return bytes([5 if base is not None else 1]) + len(payload).to_bytes(4, "little") + payload


def consume_frame(
    topic: bytes, partition: int, seq: int, request_id: int = 1, fetch_size: int = 0x08000000
) -> bytes:
    """A consume frame like tank-cli's in its capture (version 2, max_wait 0, min_bytes 0)."""
    payload = (
        h("02 00")
        + request_id.to_bytes(4, "little")
        + h("00")
        + bytes(8)
        + bytes(4)
        + h("01")
        + bytes([len(topic)])
        + topic
        + h("01")
        + partition.to_bytes(2, "little")
        + seq.to_bytes(8, "little")
        + fetch_size.to_bytes(4, "little")
    )
    return b"\x02" + len(payload).to_bytes(4, "little") + payload
