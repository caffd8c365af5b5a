"""The Cursus session through the connection driver over in-memory streams: a command answered;
a frame over ``max_frame_bytes`` closes the connection and is counted."""

from __future__ import annotations

import struct

from gateway.protocols.cursus import codec
from tests.protocols.driving import driven, protocol_errors


def whole(got: bytes) -> bool:
    return len(got) >= 4 and len(got) >= 4 + struct.unpack_from(">I", got)[0]


async def test_create_is_answered_then_an_oversized_frame_closes() -> None:
    async with driven("cursus", max_frame_bytes=1024) as conn:
        await conn.client.send_all(codec.frame("CREATE topic=orders partitions=2"))
        reply = await conn.receive(whole)
        assert reply[4:] == b"Topic 'orders' now has 2 partitions"
        before = protocol_errors("cursus", "frame_too_large")
        await conn.client.send_all(struct.pack(">I", 4096) + b"x" * 16)
        await conn.closed()
        assert protocol_errors("cursus", "frame_too_large") == before + 1
