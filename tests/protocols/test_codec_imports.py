"""A protocol package and its codec import without trio or prometheus_client: codecs are sans-IO
and a session (which needs trio) is imported when the first connection needs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gateway.protocols import REGISTRY

CHECK = """
import importlib, sys
importlib.import_module({package!r})
importlib.import_module({package!r} + ".codec")
spec = sys.modules[{package!r}].PROTOCOL
assert spec.name == {name!r}, spec.name
print(sorted(m for m in ("trio", "prometheus_client") if m in sys.modules))
"""


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_codec_imports_neither_trio_nor_prometheus(name: str) -> None:
    package = REGISTRY[name]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", CHECK.format(package=package, name=name)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"{package} imported {done.stdout.strip()}"
