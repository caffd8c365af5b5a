"""The protocol registry: one line per protocol, name -> module defining ``PROTOCOL``.

A protocol package holds ``codec.py`` (sans-IO), ``session.py`` and, in ``__init__.py``, a
:class:`gateway.protocols.base.ProtocolSpec` named ``PROTOCOL``. Adding a protocol is adding its
folder and its line here; config, server and admin read everything else from the spec.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.protocols.base import ProtocolSpec

REGISTRY: dict[str, str] = {
    "cursus": "gateway.protocols.cursus",
    "kafka08": "gateway.protocols.kafka08",
    "tank": "gateway.protocols.tank",
    "iggy": "gateway.protocols.iggy",
    "liftbridge": "gateway.protocols.liftbridge",
}


@cache
def get_protocol(name: str) -> ProtocolSpec:
    """The spec of a registered protocol. Raises KeyError for an unknown name."""
    module = importlib.import_module(REGISTRY[name])
    return module.PROTOCOL
