"""The C allocator's thresholds for large buffers, set once by the process that serves.

A fetch answer is built from megabyte-sized buffers (a read from the embedded log, the encoded
message set) that live for one request. With glibc's defaults, a freed buffer of that size is
given back to the kernel (``munmap``, or a trim of the heap top) and the next request's buffer
is faulted in again page by page: on a Kafka 0.8 fetch of 1 MiB, a quarter of the gateway's CPU
time went to those page faults (system time), and consumer throughput rose by a third without
them. So the serving process keeps buffers below :data:`MMAP_THRESHOLD` in the heap and keeps
up to :data:`TRIM_THRESHOLD` of free heap for reuse instead of returning it at every free.

Only on glibc (``mallopt``); anywhere else, or when the operator set glibc's own knobs
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``GLIBC_TUNABLES``), nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Any

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 8 << 20
"""Buffers up to this size come from the heap and are reused, not mapped and unmapped."""
TRIM_THRESHOLD = 32 << 20
"""Free memory at the heap top kept for reuse (above it, the heap is trimmed as usual)."""
_OPERATOR_KNOBS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def tune_allocator(log: Any = None) -> bool:
    """Set the thresholds (glibc only, unless the operator set them); whether they were set.
    With ``log``, one ``allocator_tuned`` line says which."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        ok, why = False, "not glibc"
    elif any(os.environ.get(knob) for knob in _OPERATOR_KNOBS):
        ok, why = False, "glibc settings in the environment"
    else:
        ok, why = _mallopt(), ""
    if log is not None:
        log.info(
            "allocator_tuned",
            set=ok,
            reason=why or None,
            mmap_threshold=MMAP_THRESHOLD,
            trim_threshold=TRIM_THRESHOLD,
        )
    return ok


def _mallopt() -> bool:
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
