"""The words of a Cursus text command, read and written as the Go broker does.

``positional`` rewrites the Java SDK's positional syntax to the broker's key=value form;
``go_atoi`` and ``go_uint`` parse numbers as Go's strconv does (``go_parse_error``: its error
text); ``go_list``, ``go_time`` and ``go_quote`` format lists, times and quoted strings as Go's
fmt, time and strconv do, for the replies; ``fnv1a64`` is the broker's key hash.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_INT = re.compile(r"[+-]?[0-9]+\Z")
_UINT = re.compile(r"[0-9]+\Z")
ZERO_TIME = "0001-01-01T00:00:00Z"


# The positional syntax of the Java SDK's docs/protocol.md (the broker itself takes key=value only).
# A command whose arguments contain no "=" and fit one of these is rewritten to key=value form.
POSITIONAL: dict[str, tuple[str, tuple[str, ...]]] = {
    "CREATE": ("CREATE", ("topic", "partitions")),
    "DELETE": ("DELETE", ("topic",)),
    "DESCRIBE": ("DESCRIBE", ("topic",)),
    "CONSUME": ("CONSUME", ("topic", "partition", "offset", "member")),
    "STREAM": ("STREAM", ("topic", "partition", "offset")),
    "JOIN_GROUP": ("JOIN_GROUP", ("topic", "group", "member")),
    "LEAVE_GROUP": ("LEAVE_GROUP", ("topic", "group", "member")),
    "SYNC_GROUP": ("SYNC_GROUP", ("topic", "group", "member", "generation")),
    "COMMIT": ("COMMIT_OFFSET", ("topic", "group", "partition", "offset")),
    "FETCH_OFFSET": ("FETCH_OFFSET", ("topic", "partition", "group")),
    "REGISTER_GROUP": ("REGISTER_GROUP", ("topic", "group")),
    "GROUP_STATUS": ("GROUP_STATUS", ("group",)),
}


def positional(text: str) -> str | None:
    """``text`` in key=value form when it is an unambiguous positional command, else None."""
    words = text.split()
    if len(words) < 2 or any("=" in w for w in words[1:]):
        return None
    keyword, args = words[0].upper(), words[1:]
    if keyword == "HEARTBEAT" and len(args) in (
        3,
        5,
    ):  # <topic> <group> [<consumerId>] <memberId> [<generation>]
        names: tuple[str, ...] = ("topic", "group", "member") if len(args) == 3 else (
            "topic", "group", "consumer", "member", "generation")  # fmt: skip
        return "HEARTBEAT " + " ".join(f"{k}={v}" for k, v in zip(names, args, strict=True))
    if keyword == "BATCH_COMMIT" and len(args) == 5:  # ... <memberId> <generation> <offsets>
        names = ("topic", "group", "member", "generation")
        pairs = " ".join(f"{k}={v}" for k, v in zip(names, args[:4], strict=True))
        return f"BATCH_COMMIT {pairs} {args[4]}"
    rule = POSITIONAL.get(keyword)
    if rule is None or len(args) > len(rule[1]):
        return None
    name, names = rule
    return name + " " + " ".join(f"{k}={v}" for k, v in zip(names, args, strict=False))


def go_atoi(text: str | None) -> int | None:
    """strconv.Atoi: an optionally signed decimal, nothing else (None when invalid)."""
    if text is None or not _INT.match(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def go_uint(text: str | None) -> int | None:
    """strconv.ParseUint(s, 10, 64): decimal digits only, no sign (None when invalid)."""
    if text is None or not _UINT.match(text):
        return None
    value = int(text)
    return value if value < 2**64 else None


_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote`` (``%q``) of a string: printable characters as they are, the usual
    backslash escapes, other control bytes as ``\\xNN`` and other non-printable characters as
    ``\\uNNNN`` / ``\\UNNNNNNNN``."""
    out = ['"']
    for ch in text:
        esc = _ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def go_parse_error(func: str, text: str) -> str:
    """The error text of a failed strconv parse (``func``: ``Atoi``, ``ParseInt`` or
    ``ParseUint``): a well-formed number that does not fit is out of range, anything else is
    invalid syntax."""
    fits_syntax = (_UINT if func == "ParseUint" else _INT).match(text)
    why = "value out of range" if fits_syntax else "invalid syntax"
    return f"strconv.{func}: parsing {go_quote(text)}: {why}"


def fnv1a64(data: bytes) -> int:
    """FNV-1a, 64 bits (Go's hash/fnv New64a): the broker's key hash for partitions."""
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def go_list(values: list[int] | tuple[int, ...]) -> str:
    """Go's ``%v`` of an []int."""
    return "[" + " ".join(str(v) for v in values) + "]"


def go_time(wall: float | None) -> str:
    """A time.Time in UTC as encoding/json writes it (RFC 3339 with the fraction's trailing
    zeros dropped, none when whole); Go's zero time for no time."""
    if not wall:
        return ZERO_TIME
    t = datetime.fromtimestamp(wall, UTC)
    fraction = f".{t.microsecond:06d}".rstrip("0") if t.microsecond else ""
    return t.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"
