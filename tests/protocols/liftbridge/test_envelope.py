"""The NATS envelope: its byte-exact vectors in both directions, and bad input."""

from __future__ import annotations

import crcmod.predefined
import pytest

from gateway.protocols.liftbridge import envelope
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb

PLAIN = bytes.fromhex("b90e43b4 00 08 00 00 1a0568656c6c6f")
WITH_CRC = bytes.fromhex("b90e43b4 00 0c 01 00 3b88a51f 1a0568656c6c6f")
WITH_ACK = bytes.fromhex("b90e43b4 00 08 00 00 1a0568656c6c6f 520461636b73 5a0131 6001")


def test_crc32c_check_value_against_the_reference_implementation() -> None:
    import crc32c

    ref = crcmod.predefined.mkCrcFun("crc-32c")
    assert crc32c.crc32c(b"123456789") == ref(b"123456789") == 0xE3069283
    assert crc32c.crc32c(bytes.fromhex("1a0568656c6c6f")) == 0x3B88A51F


@pytest.mark.parametrize(
    ("data", "message", "with_crc"),
    [
        (PLAIN, pb.Message(value=b"hello"), False),
        (WITH_CRC, pb.Message(value=b"hello"), True),
        (
            WITH_ACK,
            pb.Message(value=b"hello", ackInbox="acks", correlationId="1", ackPolicy=pb.ALL),
            False,
        ),
    ],
)
def test_vectors_both_directions(data: bytes, message: pb.Message, with_crc: bool) -> None:
    assert envelope.decode_publish(data) == message
    assert envelope.encode_publish(message, with_crc=with_crc) == data


def test_ack_round_trip() -> None:
    ack = pb.Ack(stream="s", offset=3, correlationId="1", ackInbox="acks")
    data = envelope.encode_ack(ack)
    assert data[:8] == bytes.fromhex("b90e43b4 00 08 00 01")
    assert envelope.decode_ack(data) == ack
    assert envelope.decode_ack(envelope.encode_ack(ack, with_crc=True)) == ack


@pytest.mark.parametrize("data", [b"", b"hello", b"\xb9\x0e\x43", b"plain nats message body"])
def test_plain_messages_are_not_envelopes(data: bytes) -> None:
    assert envelope.decode_publish(data) is None


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (WITH_CRC[:8] + b"\x00\x00\x00\x00" + WITH_CRC[12:], "envelope_crc"),
        (PLAIN[:4] + b"\x01" + PLAIN[5:], "envelope_version"),
        (PLAIN[:7] + b"\x01" + PLAIN[8:], "envelope_type"),
        (PLAIN[:8] + b"\xff\xff", "envelope_protobuf"),
        (PLAIN[:8], "envelope_empty"),
    ],
)
def test_broken_envelopes_are_rejected(data: bytes, kind: str) -> None:
    with pytest.raises(envelope.EnvelopeError) as info:
        envelope.decode_publish(data)
    assert info.value.kind == kind
