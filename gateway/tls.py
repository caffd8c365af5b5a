"""Server-side TLS contexts for the listeners, and the check that every configured certificate
and key load and belong together.

The check runs wherever a config is loaded (start-up, SIGHUP, ``gateway check-config``): a
certificate that does not match its key, an unreadable or malformed PEM file is a config
problem naming the keys, never an ``ssl.SSLError`` escaping a running gateway.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

from gateway.protocols.base import ListenerConfig


def make_ssl_context(cfg: ListenerConfig) -> ssl.SSLContext | None:
    """The listener's server-side TLS context, or None for plain TCP. Raises ``ssl.SSLError``
    or ``OSError`` when the files do not load (see :func:`tls_problems`)."""
    if not cfg.tls_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cfg.tls_cert, cfg.tls_key)
    if cfg.alpn_protocols:
        context.set_alpn_protocols(list(cfg.alpn_protocols))
    if cfg.tls_client_ca:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cfg.tls_client_ca)
    return context


def describe_tls_error(cfg: ListenerConfig, exc: Exception) -> str:
    """One line (without the listener prefix) for a context that failed to build."""
    reason = getattr(exc, "reason", None) or str(exc)
    if isinstance(exc, ssl.SSLError) and exc.reason == "KEY_VALUES_MISMATCH":
        return (
            f"tls_cert/tls_key: got cert={cfg.tls_cert!r} key={cfg.tls_key!r}, "
            "expected a key that belongs to the certificate (KEY_VALUES_MISMATCH)"
        )
    return (
        f"tls_cert/tls_key/tls_client_ca: got cert={cfg.tls_cert!r} key={cfg.tls_key!r} "
        f"ca={cfg.tls_client_ca!r}, expected PEM files that load ({reason})"
    )


def tls_problems(cfg: ListenerConfig) -> list[str]:
    """Why this listener's TLS context cannot be built (empty: it can, or TLS is off). Files
    that are missing are left to :meth:`ListenerConfig.validate`."""
    if not cfg.tls_cert or not cfg.tls_key:
        return []
    paths = (cfg.tls_cert, cfg.tls_key, *((cfg.tls_client_ca,) if cfg.tls_client_ca else ()))
    if not all(os.path.isfile(p) for p in paths):
        return []
    try:
        make_ssl_context(cfg)
    except (ssl.SSLError, OSError, ValueError) as exc:
        return [describe_tls_error(cfg, exc)]
    return []


def check_tls(listeners: Mapping[str, ListenerConfig]) -> list[str]:
    """Problems of every enabled TLS listener, as ``listeners.<name>.<key>: ...`` lines."""
    return [
        f"listeners.{name}.{problem}"
        for name, cfg in listeners.items()
        if cfg.enabled
        for problem in tls_problems(cfg)
    ]


def build_contexts(
    listeners: Mapping[str, ListenerConfig],
) -> tuple[dict[str, ssl.SSLContext | None], list[str]]:
    """Every listener's context, built before any is applied: (contexts, problems); with any
    problem the caller keeps what it runs with."""
    contexts: dict[str, ssl.SSLContext | None] = {}
    problems: list[str] = []
    for name, cfg in listeners.items():
        try:
            contexts[name] = make_ssl_context(cfg)
        except (ssl.SSLError, OSError, ValueError) as exc:
            problems.append(f"listeners.{name}.{describe_tls_error(cfg, exc)}")
    return contexts, problems
