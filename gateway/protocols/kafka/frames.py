"""The 0.8 session's frame reader with the modern APIs beside it, sans-IO: each complete frame
is either a 0.8 :class:`~gateway.protocols.kafka08.codec.Request` (decoded by the 0.8 codec, its
fast paths untouched) or a :class:`ModernRequest` (the payload, for
:func:`gateway.protocols.kafka.dispatch.serve`), as :func:`dispatch.route` decides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.protocols.kafka.codec import peek_api
from gateway.protocols.kafka08.codec import FrameBuffer, Request, decode_request


@dataclass(slots=True)
class ModernRequest:
    api_key: int
    api_version: int
    payload: bytes


class Frames:
    def __init__(self, max_frame_bytes: int, route: Callable[[int, int], bool]) -> None:
        self._frames = FrameBuffer(max_frame_bytes)
        self._route = route

    def receive_data(self, data: bytes | bytearray) -> None:
        self._frames.feed(data)

    @property
    def buffered(self) -> int:
        return len(self._frames)

    def next_request(self) -> Request | ModernRequest | None:
        payload = self._frames.next_frame()
        if payload is None:
            return None
        key_version = peek_api(payload)
        if key_version is not None and self._route(*key_version):
            return ModernRequest(key_version[0], key_version[1], payload)
        return decode_request(payload)
