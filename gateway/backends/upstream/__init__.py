"""Upstream backends (``type = "upstream"``): a real server of one of the five protocols as the
gateway's storage, spoken to through that protocol's codec in its client role."""

from __future__ import annotations

import importlib
from typing import Any

from gateway.backends import BackendSpec
from gateway.backends.upstream.base import PROTOCOLS, UpstreamBackend, UpstreamConfig


def make_upstream(name: str, config: UpstreamConfig) -> UpstreamBackend:
    """The upstream backend of ``config.protocol``: ``gateway.backends.upstream.<protocol>``."""
    if config.protocol not in PROTOCOLS:
        raise ValueError(f"unknown upstream protocol {config.protocol!r}")
    module = importlib.import_module(f"gateway.backends.upstream.{config.protocol}")
    return module.make(name, config)


def _factory(name: str, options: Any, config: Any) -> UpstreamBackend:
    return make_upstream(name, options)


BACKEND = BackendSpec("upstream", UpstreamConfig, _factory)

__all__ = ["BACKEND", "UpstreamBackend", "UpstreamConfig", "make_upstream"]
