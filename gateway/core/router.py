"""Topic -> backend, by ordered glob rules from the config (first match wins)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping

from gateway.backends.base import Backend
from gateway.model import ErrorCode, GatewayError


class Router:
    def __init__(self, backends: Mapping[str, Backend], rules: Iterable[tuple[str, str]]) -> None:
        self.backends = dict(backends)
        self.rules: list[tuple[str, str]] = list(rules)
        for _, name in self.rules:
            if name not in self.backends:
                raise ValueError(f"route names unknown backend {name!r}")
        if not self.backends:
            raise ValueError("at least one backend is needed")
        self._cache: dict[str, Backend] = {}

    def set_rules(self, rules: Iterable[tuple[str, str]]) -> None:
        """Replace the rules (config reload); topics are routed by the new rules from now on."""
        new = list(rules)
        for _, name in new:
            if name not in self.backends:
                raise ValueError(f"route names unknown backend {name!r}")
        self.rules = new
        self._cache.clear()

    def backend_for(self, topic: str) -> Backend:
        backend = self._cache.get(topic)
        if backend is not None:
            return backend
        for pattern, name in self.rules:
            if fnmatch.fnmatchcase(topic, pattern):
                backend = self.backends[name]
                break
        else:
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"no route for topic {topic!r}")
        if len(self._cache) < 100_000:
            self._cache[topic] = backend
        return backend

    @property
    def default_backend(self) -> Backend:
        """The backend of the catch-all route (group state for topic-less groups lives there)."""
        for pattern, name in self.rules:
            if pattern == "*":
                return self.backends[name]
        return next(iter(self.backends.values()))
