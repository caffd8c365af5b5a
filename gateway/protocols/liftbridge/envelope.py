"""The Liftbridge NATS envelope (docs/protocols/liftbridge.md), sans-IO.

``magic(4) version(1) header_len(1) flags(1) msg_type(1) [crc32c(4)] payload``; the payload is
a protobuf ``Message`` (publish, type 0) or ``Ack`` (type 1). Plain NATS messages are not
envelopes: :func:`decode_publish` returns None for them and the caller stores the whole payload.
A message that claims to be an envelope but is broken (bad version, bad CRC, bad protobuf)
raises :class:`EnvelopeError`, which the caller counts; the reference server then also stores
the whole payload as the value.
"""

from __future__ import annotations

import struct

import crc32c

from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb

MAGIC = b"\xb9\x0e\x43\xb4"
VERSION = 0
FLAG_CRC = 0x01
MSG_PUBLISH = 0
MSG_ACK = 1
_HEADER = struct.Struct(">4sBBBB")
_CRC = struct.Struct(">I")


class EnvelopeError(ValueError):
    """Looks like an envelope (magic matches) but is not a valid one. ``kind`` for counting."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def encode(msg_type: int, payload: bytes, *, with_crc: bool = False) -> bytes:
    if with_crc:
        return (
            _HEADER.pack(MAGIC, VERSION, 12, FLAG_CRC, msg_type)
            + _CRC.pack(crc32c.crc32c(payload))
            + payload
        )
    return _HEADER.pack(MAGIC, VERSION, 8, 0, msg_type) + payload


def encode_publish(message: pb.Message, *, with_crc: bool = False) -> bytes:
    return encode(MSG_PUBLISH, message.SerializeToString(), with_crc=with_crc)


def encode_ack(ack: pb.Ack, *, with_crc: bool = False) -> bytes:
    return encode(MSG_ACK, ack.SerializeToString(), with_crc=with_crc)


def unwrap(data: bytes, expected_type: int) -> bytes | None:
    """The payload of an envelope of ``expected_type``; None when ``data`` is no envelope at all
    (too short, no magic, or a header length other than 8/12). Raises EnvelopeError for a
    broken envelope (version, type, CRC)."""
    if len(data) < 8 or data[:4] != MAGIC:
        return None
    _, version, header_len, flags, msg_type = _HEADER.unpack_from(data)
    if header_len not in (8, 12):
        return None
    if version != VERSION:
        raise EnvelopeError(f"unsupported envelope version {version}", "envelope_version")
    if msg_type != expected_type:
        raise EnvelopeError(f"envelope type {msg_type}, expected {expected_type}", "envelope_type")
    if flags & FLAG_CRC:
        if header_len != 12:
            raise EnvelopeError("CRC flag set but header length is not 12", "envelope_header")
        (want,) = _CRC.unpack_from(data, 8)
        got = crc32c.crc32c(data[12:])
        if got != want:
            raise EnvelopeError(
                f"envelope CRC-32C mismatch: got {got:#010x}, header says {want:#010x}",
                "envelope_crc",
            )
    if len(data) <= header_len:
        raise EnvelopeError("envelope without payload", "envelope_empty")
    return data[header_len:]


def decode_publish(data: bytes) -> pb.Message | None:
    """A publish envelope's Message; None for a plain NATS message. Raises EnvelopeError."""
    payload = unwrap(data, MSG_PUBLISH)
    if payload is None:
        return None
    try:
        return pb.Message.FromString(payload)
    except Exception as exc:
        raise EnvelopeError(
            f"bad Message protobuf in envelope: {exc}", "envelope_protobuf"
        ) from exc


def decode_ack(data: bytes) -> pb.Ack | None:
    payload = unwrap(data, MSG_ACK)
    if payload is None:
        return None
    try:
        return pb.Ack.FromString(payload)
    except Exception as exc:
        raise EnvelopeError(f"bad Ack protobuf in envelope: {exc}", "envelope_protobuf") from exc
