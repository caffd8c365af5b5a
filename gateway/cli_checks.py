"""What ``gateway check-config`` checks beyond the file itself: that every data directory can be
written and every port the gateway would bind is free. Each problem is one line naming the key,
the value and what was expected, like the config's own problems."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

from gateway.config import GatewayConfig


def data_dirs(config: GatewayConfig) -> list[tuple[str, str]]:
    """``(config key, directory)`` of every embedded backend's log."""
    out = []
    for name, backend in config.backends.items():
        if backend.type != "embedded":
            continue
        own = getattr(backend.options, "data_dir", "")
        if own:
            out.append((f"backends.{name}.data_dir", own))
        else:
            out.append(("server.data_dir", os.path.join(config.server.data_dir, name)))
    return out


def data_dir_problem(key: str, path: str) -> str | None:
    """Why ``path`` cannot hold a log (None: it can). Tries a real file, so it holds for root
    too (a read-only mount, a regular file in the way); creates nothing that stays."""
    p = Path(path)
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{key}: {path!r} cannot be created: {str(probe)!r} is not a directory"
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        return f"{key}: {path!r} is not writable ({str(probe)!r}: {exc.strerror})"
    return None


def port_problem(key: str, host: str, port: int) -> str | None:
    """Why the gateway could not bind ``host:port`` now (None: it could)."""
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as exc:
        return f"{key}: host {host!r} does not resolve ({exc})"
    for family, kind, proto, _, addr in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(addr)
            except OSError as exc:
                return (
                    f"{key}: cannot bind {host or '*'}:{port}: {exc.strerror} "
                    "(is a gateway already running? expected a free port)"
                )
    return None


def environment_problems(config: GatewayConfig) -> list[str]:
    problems = []
    for key, path in data_dirs(config):
        problem = data_dir_problem(key, path)
        if problem:
            problems.append(problem)
    binds = [
        (f"listeners.{name}.port", c.host, c.port)
        for name, c in config.listeners.items()
        if c.enabled
    ]
    if config.admin.enabled:
        binds.append(("admin.port", config.admin.host, config.admin.port))
    for key, host, port in binds:
        problem = port_problem(key, host, port)
        if problem:
            problems.append(problem)
    problem = admin_client_tls_problem(config)
    if problem:
        problems.append(problem)
    return problems


def admin_client_tls_problem(config: GatewayConfig) -> str | None:
    """Why the CLI could not speak TLS to the admin with this file's keys (the certificates it
    trusts, its client certificate and key) (None: it could, or the admin is plain HTTP)."""
    from gateway.admin_tls import AdminTLSError, client_context, from_config

    if not config.admin.enabled or not config.admin.tls_cert:
        return None
    try:
        tls = from_config(config.admin, config.admin.host, environ={})
        if tls is not None:
            client_context(tls)
    except AdminTLSError as exc:
        return f"admin (the CLI's TLS): {exc}"
    return None
