"""State the Cursus listener keeps beside the core, shared by all its connections.

Group state lives in the core's GroupCoordinator (members, generations, range assignment, session
timeouts). What is Cursus-only (a group is bound to one topic; the time of the last heartbeat and
rebalance for GROUP_STATUS) is kept per core in :class:`CursusState`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gateway.core.view import CoreView
from gateway.model import GroupDescription
from gateway.protocols.base import PerCore
from gateway.protocols.cursus.producers import DurableProducers

DEFAULT_GROUP = "default-group"  # CONSUME and STREAM without group=; CREATE binds it


@dataclass
class GroupBinding:
    topic: str
    partitions: int


@dataclass
class CursusState:
    """Cursus-only group facts shared by the connections of one core."""

    groups: dict[str, GroupBinding] = field(default_factory=dict)
    heartbeats: dict[tuple[str, str], float] = field(default_factory=dict)
    rebalances: dict[str, tuple[int, float]] = field(default_factory=dict)
    producers: DurableProducers = field(default_factory=DurableProducers)

    def saw(self, desc: GroupDescription) -> None:
        known = self.rebalances.get(desc.group)
        if known is None or known[0] != desc.generation:
            self.rebalances[desc.group] = (desc.generation, time.time())


_STATES: PerCore[CursusState] = PerCore()


def state_for(core: CoreView) -> CursusState:
    return _STATES.get(core, CursusState)
