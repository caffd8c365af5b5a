"""Listening sockets with SO_REUSEPORT: several processes (``gateway serve --workers N``) bind
the same port and the kernel spreads new connections over them."""

from __future__ import annotations

import socket

import trio


def reuseport_socket(host: str, port: int, family: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind((host, port))
    return sock


def addresses(host: str | None, port: int) -> list[tuple[int, str]]:
    infos = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE | socket.AI_ADDRCONFIG
    )
    seen: list[tuple[int, str]] = []
    for family, _, _, _, addr in infos:
        ip = str(addr[0])  # a str for the two families kept (typed str | int for all)
        if (family, ip) not in seen and family in (socket.AF_INET, socket.AF_INET6):
            seen.append((family, ip))
    return seen


async def open_reuseport_listeners(
    port: int, host: str | None = None, backlog: int = 1024
) -> list[trio.SocketListener]:
    """Like ``trio.open_tcp_listeners`` but every socket has SO_REUSEPORT set."""
    listeners = []
    try:
        for family, addr in addresses(host, port):
            raw = reuseport_socket(addr, port, family)
            raw.listen(backlog)
            listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(raw)))
    except BaseException:
        for lst in listeners:
            await lst.aclose()
        raise
    return listeners
