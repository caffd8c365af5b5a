"""The Iggy listener: Iggy's binary TCP protocol, the pre-authentication generation (apache/iggy
56bee28ca) and the 0.6 dialect spoken by iggy-py 0.4.0 (chosen per connection on LOGIN_USER).
Reference: shared/protocols/iggy.md."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.protocols.base import ListenerConfig, MiB, ProtocolSpec
from gateway.protocols.iggy.auth import user_problems
from gateway.protocols.iggy.session import handle_connection


@dataclass(frozen=True, slots=True)
class IggyListenerConfig(ListenerConfig):
    """``users``: ``{ username, password }`` or ``{ username, password_hash }`` tables for
    LOGIN_USER (``gateway hash-password`` makes a hash). ``allow_anonymous``: a connection that
    never logs in (the old dialect has no login) may use every command. Stream
    ``default_stream`` holds the undotted canonical topics; stream ``s`` topic ``t`` is the
    canonical topic ``s<stream_separator>t``."""

    port: int = 8090
    max_frame_bytes: int = 16 * MiB
    users: tuple[dict[str, str], ...] = ()
    allow_anonymous: bool = True
    default_stream: str = "default"
    stream_separator: str = "."
    max_poll_bytes: int = 64 * MiB

    def validate(self) -> list[str]:
        problems = user_problems(self.users)
        if len(self.stream_separator) != 1:
            problems.append(
                f"stream_separator: got {self.stream_separator!r}, expected one character"
            )
        if not self.default_stream or self.stream_separator in self.default_stream:
            problems.append(
                f"default_stream: got {self.default_stream!r}, expected a name without "
                "the separator"
            )
        return problems


PROTOCOL = ProtocolSpec(
    "iggy",
    IggyListenerConfig,
    handle_connection,
    "Apache Iggy binary TCP (pre-authentication generation and the iggy-py 0.4.0 dialect)",
)
