"""The backend registry: one line per backend type, type -> module defining ``BACKEND``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from gateway.backends.base import Backend

REGISTRY: dict[str, str] = {
    "memory": "gateway.backends.memory",
    "embedded": "gateway.backends.embedded",
    "nats": "gateway.backends.nats",
    "kafka": "gateway.backends.kafka",
    "upstream": "gateway.backends.upstream",
}


@dataclass(frozen=True, slots=True)
class BackendSpec:
    type_name: str
    config_class: type  # a frozen dataclass of the type-specific keys (all with defaults)
    factory: Callable[[str, Any, Any], Backend]  # (name, backend config, GatewayConfig)


@cache
def get_backend_spec(type_name: str) -> BackendSpec:
    """Raises KeyError for an unknown type."""
    return importlib.import_module(REGISTRY[type_name]).BACKEND
