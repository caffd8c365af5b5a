"""Open descriptors of sealed segments: opened when a read needs them, closed least recently used
first beyond ``max_open_segments``.

A partition's active segment keeps its log and two index files open (it is written); an older,
sealed segment is only read, so its descriptor can come and go. Without this bound a partition
with thousands of segments held thousands of descriptors, and a data directory that opened
under one file limit failed to start under a lower one. Closing a segment that still waits for
its fsync is harmless: the sync round opens it again by path (an fsync through any descriptor
flushes the file). Used from the event loop only.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from prometheus_client import Gauge

from gateway.backends.embedded.segment import Segment
from gateway.model import ErrorCode, GatewayError
from gateway.observability import REGISTRY

OPEN_SEGMENTS = Gauge(
    "gateway_embedded_open_segment_files",
    "Descriptors of sealed embedded-log segments held open (bound: max_open_segments)",
    ["backend"],
    registry=REGISTRY,
)


class SegmentFiles:
    def __init__(self, backend: str, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._open: OrderedDict[int, Segment] = OrderedDict()
        self._gauge = OPEN_SEGMENTS.labels(backend)

    def __len__(self) -> int:
        return len(self._open)

    def fd(self, seg: Segment) -> int:
        """``seg``'s descriptor, opening it (read-only) when it is closed."""
        key = id(seg)
        if seg.fd >= 0:
            if key in self._open:
                self._open.move_to_end(key)
            return seg.fd
        try:
            seg.fd = os.open(seg.path, os.O_RDONLY)
        except OSError as exc:
            raise GatewayError(
                ErrorCode.BACKEND_UNAVAILABLE, f"cannot open {seg.path}: {exc.strerror}"
            ) from None
        self._open[key] = seg
        self._evict()
        return seg.fd

    def release(self, seg: Segment) -> None:
        """``seg`` is sealed: from now on its descriptor may be closed when others are needed."""
        self._open[id(seg)] = seg
        self._open.move_to_end(id(seg))
        self._evict()

    def forget(self, seg: Segment) -> None:
        """``seg`` is being closed or deleted by its owner."""
        if self._open.pop(id(seg), None) is not None:
            self._gauge.set(len(self._open))

    def _evict(self) -> None:
        while len(self._open) > self.capacity:
            self._open.popitem(last=False)[1].close()  # the least recently used
        self._gauge.set(len(self._open))
