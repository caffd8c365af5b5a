"""The names a client may give a topic or a group, checked on every command that names one,
whatever the protocol: not empty and no control characters (C0, DEL, C1). A name that fails is
the command's ``GatewayError``, which each protocol answers with its own error and the admin
API with 400 (404 for a topic lookup); such a name never reaches a backend or a group table:

- a group name, or a topic a group member subscribes to: ``INVALID_REQUEST``;
- a topic to create (CreateTopic, a Produce or lookup that may auto-create it):
  ``INVALID_TOPIC``, as the backends answer a name they refuse;
- a topic looked up (fetch, offsets, describe, delete...): ``UNKNOWN_TOPIC``, since no topic
  can have that name, which every protocol already answers as it does a missing topic.

Backends apply their own, stricter rules to the topics they create; this check is the floor
that also covers lookups, offsets and groups.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.model import Command, CreateTopic, ErrorCode, GatewayError, Produce

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a topic or group, or None when it can."""
    if not isinstance(name, str):
        return f"expected a string, got {type(name).__name__}"
    if not name:
        return "empty"
    if name.isprintable():  # the fast path: no control character (nor other unprintables)
        return None
    found = _CONTROL.search(name)
    if found is not None:
        return f"control character {found.group()!r} at position {found.start()}"
    return None


def check_topic(name: object, code: ErrorCode = ErrorCode.INVALID_TOPIC) -> None:
    """Raise ``code`` for a name no topic can have (see the module docstring for which)."""
    problem = name_problem(name)
    if problem is not None:
        raise GatewayError(code, f"invalid topic name {name!r}: {problem}")


def check_group(name: object) -> None:
    problem = name_problem(name)
    if problem is not None:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"invalid group name {name!r}: {problem}")


def check_command(command: Command[Any]) -> None:
    """Every topic and group ``command`` names (its ``topic``, ``topics`` and ``group``)."""
    group = getattr(command, "group", None)
    if group is not None:
        check_group(group)
    for t in getattr(command, "topics", None) or ():
        check_topic(t, ErrorCode.INVALID_REQUEST)
    topic = getattr(command, "topic", None)
    if topic is not None:
        creates = isinstance(command, (CreateTopic, Produce)) or getattr(command, "create", False)
        check_topic(topic, ErrorCode.INVALID_TOPIC if creates else ErrorCode.UNKNOWN_TOPIC)
