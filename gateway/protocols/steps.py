"""Stepwise codec work, sans-IO: a codec whose work on one input can take long (a produced batch
of a million records) is written as a generator that does a bounded step between two ``yield``s
and returns its result. A session runs it with :func:`run_steps` (``gateway.protocols.
driver``), letting every other task of the event loop run between two steps; tests and
tools run it in one go with :func:`finish`. A codec never imports trio: yielding is all it
does."""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")

Steps = Generator[None, None, T]
"""Work done in steps: each ``next()`` does one; the generator's return value is the result."""


def finish(steps: Steps[T]) -> T:
    """Every step at once: the result (or the exception a step raised)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
