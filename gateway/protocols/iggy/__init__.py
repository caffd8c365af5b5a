"""The Iggy listener: Iggy's binary TCP protocol, the pre-authentication generation (apache/iggy
56bee28ca) and the 0.6 dialect spoken by iggy-py 0.4.0 (chosen per connection on LOGIN_USER).
Reference: docs/protocols/iggy.md."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.protocols.base import ListenerConfig, MiB, ProtocolSpec, lazy


@dataclass(frozen=True, slots=True)
class IggyListenerConfig(ListenerConfig):
    """``users``: ``{ username, password }`` or ``{ username, password_hash }`` tables for
    LOGIN_USER (``gateway hash-password`` makes a hash). ``allow_anonymous``: a connection that
    never logs in (the old dialect has no login) may use every command.
    ``max_concurrent_logins``, ``login_backoff_s``, ``max_login_peers``: see
    :class:`gateway.protocols.iggy.auth.LoginGuard`. Stream
    ``default_stream`` holds the undotted canonical topics; stream ``s`` topic ``t`` is the
    canonical topic ``s<stream_separator>t``."""

    port: int = 8090
    max_frame_bytes: int = 16 * MiB
    users: tuple[dict[str, str], ...] = ()
    allow_anonymous: bool = True
    default_stream: str = "default"
    stream_separator: str = "."
    max_poll_bytes: int = 64 * MiB
    max_concurrent_logins: int = 4  # password checks at once (a hashed one: 16 MiB scrypt)
    login_backoff_s: float = 1.0  # first wait after repeated failed logins from one address
    max_login_peers: int = 10_000  # addresses whose failed logins are remembered

    def validate(self) -> list[str]:
        from gateway.protocols.iggy.auth import user_problems  # needs trio: imported on use

        problems = user_problems(self.users)
        for key in ("max_concurrent_logins", "max_login_peers"):
            if getattr(self, key) < 1:
                problems.append(f"{key}: got {getattr(self, key)}, expected >= 1")
        if self.login_backoff_s < 0:
            problems.append(f"login_backoff_s: got {self.login_backoff_s}, expected >= 0 seconds")
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
    lazy("gateway.protocols.iggy.session", "handle_connection"),
    "Apache Iggy binary TCP (pre-authentication generation and the iggy-py 0.4.0 dialect)",
)
