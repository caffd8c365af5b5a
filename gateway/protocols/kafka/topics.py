"""Topic ids (Metadata v10+, Fetch v13+): a stable UUID per topic name, the same on every
gateway and across restarts (uuid5 of the name), and the reverse lookup over the core's topics."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.model import ListTopics

NAMESPACE = uuid.UUID("6f1b7f32-52d4-4c0a-9a45-8a3c1c2b7e10")
ZERO = uuid.UUID(int=0)


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, name)


async def names_by_id(core: Any, wanted: set[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The names of the topic ids in ``wanted`` that exist (one ListTopics)."""
    found = {}
    for info in await core.execute(ListTopics()):
        tid = topic_id(info.name)
        if tid in wanted:
            found[tid] = info.name
    return found
