"""The bytes a gateway puts into the Kafka cluster's group (sans-IO).

Each gateway is one member of the cluster's group, of protocol type ``consumer`` with the one
assignor ``gateway``, so Kafka's tools read its metadata and assignment like a consumer's:

- **Subscription** (JoinGroup metadata, ConsumerProtocolSubscription v0): the topics of the
  gateway's local members; the user data is JSON ``{"members": {member_id: [topic, ...]}}``.
- **Assignment** (SyncGroup, ConsumerProtocolAssignment v0): the partitions of the gateway's
  local members; the user data is JSON ``{"generation": g, "members": {member_id:
  {"topics": [...], "partitions": [[topic, partition], ...]}}}`` for *every* member of the
  group, so each gateway (and a gateway with no member, through DescribeGroups) knows the
  whole group.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

PROTOCOL_TYPE = "consumer"
ASSIGNOR = "gateway"

Partitions = tuple[tuple[str, int], ...]


class GroupCodecError(ValueError):
    """Bytes that are not a gateway's subscription or assignment."""


@dataclass(frozen=True, slots=True)
class GroupView:
    """The whole group as the leader assigned it."""

    generation: int
    topics: dict[str, tuple[str, ...]]  # member id -> topics
    partitions: dict[str, Partitions]  # member id -> assigned partitions


def _string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise GroupCodecError("truncated")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise GroupCodecError("truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def string(self) -> str:
        return self.raw(self.take(">h")).decode()

    def bytes_(self) -> bytes:
        n = self.take(">i")
        return b"" if n < 0 else self.raw(n)

    def count(self) -> int:
        n = self.take(">i")
        if n < 0 or n > len(self.data):
            raise GroupCodecError(f"bad array length {n}")
        return int(n)


def encode_subscription(members: dict[str, tuple[str, ...]]) -> bytes:
    topics = sorted({t for ts in members.values() for t in ts})
    user = json.dumps({"members": {m: list(ts) for m, ts in sorted(members.items())}}).encode()
    out = struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics)
    return out + _bytes(user)


def decode_subscription(data: bytes) -> dict[str, tuple[str, ...]]:
    """The local members (id -> topics) a gateway announced. Raises GroupCodecError."""
    try:
        r = _Reader(data)
        r.take(">h")
        for _ in range(r.count()):
            r.string()
        user = json.loads(r.bytes_())
        return {str(m): tuple(str(t) for t in ts) for m, ts in user["members"].items()}
    except (GroupCodecError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise GroupCodecError(f"not a gateway subscription: {exc}") from None


def encode_assignment(mine: list[str], view: GroupView) -> bytes:
    """The assignment of the gateway whose local members are ``mine``."""
    by_topic: dict[str, list[int]] = {}
    for m in mine:
        for t, p in view.partitions.get(m, ()):
            by_topic.setdefault(t, []).append(p)
    out = struct.pack(">hi", 0, len(by_topic))
    for t in sorted(by_topic):
        parts = sorted(by_topic[t])
        out += _string(t) + struct.pack(f">i{len(parts)}i", len(parts), *parts)
    user = {
        "generation": view.generation,
        "members": {
            m: {
                "topics": list(view.topics.get(m, ())),
                "partitions": [list(tp) for tp in view.partitions.get(m, ())],
            }
            for m in sorted(view.topics)
        },
    }
    return out + _bytes(json.dumps(user).encode())


def decode_assignment(data: bytes) -> GroupView:
    """The whole group from any gateway's assignment. Raises GroupCodecError."""
    try:
        r = _Reader(data)
        r.take(">h")
        for _ in range(r.count()):
            r.string()
            for _ in range(r.count()):
                r.take(">i")
        user = json.loads(r.bytes_())
        members = user["members"]
        return GroupView(
            int(user["generation"]),
            {str(m): tuple(str(t) for t in v["topics"]) for m, v in members.items()},
            {
                str(m): tuple((str(t), int(p)) for t, p in v["partitions"])
                for m, v in members.items()
            },
        )
    except (GroupCodecError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise GroupCodecError(f"not a gateway assignment: {exc}") from None


def range_assign(
    topics_of: dict[str, tuple[str, ...]], counts: dict[str, int]
) -> dict[str, Partitions]:
    """Kafka's range assignor over every gateway's members: per topic, consecutive ranges to
    the sorted members subscribed to it, the first ones getting one extra."""
    out: dict[str, list[tuple[str, int]]] = {m: [] for m in topics_of}
    for topic in sorted(counts):
        subscribed = sorted(m for m, ts in topics_of.items() if topic in ts)
        if not subscribed:
            continue
        per, extra = divmod(counts[topic], len(subscribed))
        start = 0
        for i, m in enumerate(subscribed):
            n = per + (1 if i < extra else 0)
            out[m].extend((topic, p) for p in range(start, start + n))
            start += n
    return {m: tuple(v) for m, v in out.items()}
