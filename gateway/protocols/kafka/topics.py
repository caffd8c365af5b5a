"""Topic ids (Metadata v10+, Fetch v13+): a stable UUID per topic name, the same on every gateway
and across restarts (uuid5 of the name), and the reverse lookup.

The reverse map is per core and remembers every id this gateway computed (a client learns ids
from Metadata, which computes them); an id it does not know yet costs one ListTopics. It holds
at most one entry per topic name seen, so it is bounded like the topics are (``max_topics``):
on a miss it is rebuilt from the current topics, which also drops deleted ones."""

from __future__ import annotations

import uuid
from functools import lru_cache
from typing import Any

from gateway.model import ListTopics
from gateway.protocols.base import PerCore

NAMESPACE = uuid.UUID("6f1b7f32-52d4-4c0a-9a45-8a3c1c2b7e10")
ZERO = uuid.UUID(int=0)

_BY_ID: PerCore[dict[uuid.UUID, str]] = PerCore()


@lru_cache(maxsize=65536)
def _uuid(name: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, name)


def topic_id(name: str, core: Any = None) -> uuid.UUID:
    """The id of ``name`` (remembered for the reverse lookup when ``core`` is given)."""
    tid = _uuid(name)
    if core is not None:
        known = _BY_ID.get(core, dict)
        if tid not in known:
            known[tid] = name
    return tid


async def names_by_id(core: Any, wanted: set[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The names of the topic ids in ``wanted`` that exist."""
    known = _BY_ID.get(core, dict)
    if all(tid in known for tid in wanted):
        return {tid: known[tid] for tid in wanted}
    known.clear()
    for info in await core.execute(ListTopics()):
        known[_uuid(info.name)] = info.name
    return {tid: known[tid] for tid in wanted if tid in known}
