"""The process's open-file limit: raised at start, and the partition budget derived from it.

Every partition of the embedded log keeps three files open (its active segment and that
segment's two indexes), older segments share an LRU of descriptors (``max_open_segments``), and
every connection holds a socket. A limit
of 1,024 (a common default soft limit) is exhausted by a few hundred partitions, so the gateway
raises its soft limit to the hard limit at start, and by default refuses to create partitions
beyond what the limit can hold (``[server] max_partitions_total``).
"""

from __future__ import annotations

import resource
from typing import Any

FILES_PER_PARTITION = 4
"""Three files of the active segment plus one slot of the older segments' LRU."""
CEILING = 1 << 20
"""Used when the hard limit is "unlimited" (the kernel refuses more than nr_open anyway)."""


def file_limits() -> tuple[int, int]:
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def raise_file_limit(log: Any) -> int:
    """Raise the soft open-file limit to the hard limit; log both. Returns the soft limit."""
    soft, hard = file_limits()
    target = CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("file_limit_not_raised", soft=soft, hard=hard, error=str(exc))
            return soft
    new_soft = file_limits()[0]
    log.info("file_limit", soft_before=soft, soft=new_soft, hard=hard)
    return new_soft


def default_partition_cap(soft: int | None = None) -> int:
    """Partitions the open-file limit can hold, after a reserve (a quarter of the limit, at least
    64) for connections, the data directory's own files and the runtime."""
    if soft is None:
        soft = file_limits()[0]
    if soft == resource.RLIM_INFINITY:
        soft = CEILING
    reserve = max(64, soft // 4)
    return max(1, (soft - reserve) // FILES_PER_PARTITION)
