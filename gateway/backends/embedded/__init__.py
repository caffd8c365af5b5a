"""The embedded durable log backend (the default): segmented, CRC-checked, indexed, on local disk.

See ``backend.py`` for the data directory layout and the fsync policy, ``segment.py`` for the file
formats.
"""

from __future__ import annotations

import os
from typing import Any

from gateway.backends import BackendSpec
from gateway.backends.base import Backend
from gateway.backends.embedded.backend import EmbeddedBackend
from gateway.backends.embedded.config import EmbeddedConfig


def _factory(name: str, options: EmbeddedConfig, config: Any) -> Backend:
    """``data_dir = ""`` puts the log in ``<server.data_dir>/<backend name>``."""
    data_dir = options.data_dir
    if not data_dir:
        server_dir = config.server.data_dir if config is not None else "data"
        data_dir = os.path.join(server_dir, name)
    return EmbeddedBackend(name, options, data_dir)


BACKEND = BackendSpec("embedded", EmbeddedConfig, _factory)

__all__ = ["BACKEND", "EmbeddedBackend", "EmbeddedConfig"]
