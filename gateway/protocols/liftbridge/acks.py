"""PublishAsync acknowledgements encoded by hand (the protobuf bytes of
``PublishResponse{ack, correlationId}``, framed for gRPC): the hot path of a publish, kept apart
from the HTTP/2 codec. Sans-IO."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from gateway.protocols.liftbridge.grpc_wire import GRPC_PREFIX


def _varint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return bytes((n,))
    if n < 0:
        n &= 0xFFFFFFFFFFFFFFFF  # negative int32/enum values: ten bytes, as protobuf writes them
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string_field(tag: int, value: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(value)) + value if value else b""


@functools.lru_cache(maxsize=4096)
def _ack_head(stream: str, partition_subject: str, msg_subject: str) -> bytes:
    """Fields 1-3 of an Ack, the same for every ack of a partition: encoded once per partition
    (a one-message call made a new encoder, and encoded them again, for every publish)."""
    return (
        _string_field(0x0A, stream.encode())
        + _string_field(0x12, partition_subject.encode())
        + _string_field(0x1A, msg_subject.encode())
    )


class PublishAckEncoder:
    """Framed ``PublishResponse{ack, correlationId}`` messages for a run of PublishAsync requests
    of one partition, encoded by hand: the fields that are the same for the whole run are
    encoded once, so each ack costs a few byte concatenations instead of building two protobuf
    objects. The bytes are what protobuf itself writes (fields in number order, defaults
    omitted; the tests compare against ``SerializeToString``)."""

    __slots__ = ("_head", "_inbox", "_times")

    def __init__(
        self,
        stream: str,
        partition_subject: str,
        msg_subject: str,
        ack_inbox: str,
        reception_ns: int,
        commit_ns: int,
    ) -> None:
        self._head = _ack_head(stream, partition_subject, msg_subject)
        self._inbox = _string_field(0x2A, ack_inbox.encode())
        times = b""
        if reception_ns:
            times += b"\x40" + _varint(reception_ns)
        if commit_ns:
            times += b"\x48" + _varint(commit_ns)
        self._times = times

    def frame(self, offset: int, correlation_id: str, ack_policy: int) -> bytes:
        cid = _string_field(0x32, correlation_id.encode()) if correlation_id else b""
        ack = (
            self._head
            + (b"\x20" + _varint(offset) if offset else b"")
            + self._inbox
            + cid
            + (b"\x38" + _varint(ack_policy) if ack_policy else b"")
            + self._times
        )
        body = b"\x0a" + _varint(len(ack)) + ack
        if cid:
            body += b"\x1a" + cid[1:]
        return GRPC_PREFIX.pack(0, len(body)) + body

    def frames(self, base_offset: int, requests: Sequence[Any], skip_policy: int) -> bytes:
        """The framed acks of a run of requests stored at ``base_offset``, ``base_offset + 1``,
        ...: one per request whose ackPolicy is not ``skip_policy`` (NONE), in order, as one
        block. The same bytes as ``frame`` for each, without a function call per field (the
        varints of offsets and lengths are written inline for the common sizes)."""
        head = self._head
        inbox = self._inbox
        times = self._times
        pack = GRPC_PREFIX.pack
        parts: list[bytes] = []
        append = parts.append
        offset = base_offset - 1
        for r in requests:
            offset += 1
            policy = r.ackPolicy
            if policy == skip_policy:
                continue
            correlation_id = r.correlationId
            if correlation_id:
                raw = correlation_id.encode()
                n = len(raw)
                cid = (bytes((0x32, n)) if n < 0x80 else b"\x32" + _varint(n)) + raw
            else:
                cid = b""
            if offset < 0x80:
                off = bytes((0x20, offset)) if offset else b""
            elif offset < 0x4000:
                off = bytes((0x20, (offset & 0x7F) | 0x80, offset >> 7))
            elif offset < 0x200000:
                off = bytes(
                    (0x20, (offset & 0x7F) | 0x80, ((offset >> 7) & 0x7F) | 0x80, offset >> 14)
                )
            else:
                off = b"\x20" + _varint(offset)
            ack = head + off + inbox + cid + (_policy_field(policy) if policy else b"") + times
            n = len(ack)
            body = (bytes((0x0A, n)) if n < 0x80 else b"\x0a" + _varint(n)) + ack
            if cid:
                body += b"\x1a" + cid[1:]
            append(pack(0, len(body)))
            append(body)
        return b"".join(parts)


_POLICY_FIELDS = {p: b"\x38" + _varint(p) for p in range(1, 3)}


def _policy_field(policy: int) -> bytes:
    field = _POLICY_FIELDS.get(policy)
    return field if field is not None else b"\x38" + _varint(policy)
