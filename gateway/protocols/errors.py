"""The protocol error family shared by every codec and session.

Blame is kept apart as in h11: :class:`RemoteProtocolError` means the peer sent something that is
not valid for the protocol (the session answers with the protocol's error or closes, and the
connection driver counts it under ``kind``); :class:`LocalProtocolError` means we were asked to
encode something the protocol cannot carry (a bug on our side). Both take ``(message, kind)``.
Sans-IO: importing this module imports nothing else.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base of every protocol's codec errors. ``kind`` is a short label for metrics and logs."""

    def __init__(self, message: str, kind: str = "malformed") -> None:
        super().__init__(message)
        self.kind = kind


class RemoteProtocolError(ProtocolError):
    """The peer sent something malformed. ``limit`` names the config key of the budget it went
    past when that is why (for ``limit_hit``), else None."""

    def __init__(self, message: str, kind: str = "malformed", limit: str | None = None) -> None:
        super().__init__(message, kind)
        self.limit = limit


class LocalProtocolError(ProtocolError):
    """We tried to encode something the protocol cannot carry (a bug on our side)."""

    def __init__(self, message: str, kind: str = "local") -> None:
        super().__init__(message, kind)
