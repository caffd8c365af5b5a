"""PROXY protocol v1 and v2 (HAProxy's spec), sans-IO: feed the first bytes of a connection, get
the client address the load balancer saw and the bytes that follow the header.

Hand-written: the two header formats are ~60 lines and the PyPI parsers are asyncio-bound or
unmaintained.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V1_PREFIX = b"PROXY "
V1_MAX = 107
_V2_HEADER = struct.Struct("!12sBBH")


class ProxyProtocolError(ValueError):
    """The peer sent a malformed PROXY header (or none where one is required)."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    version: int
    source: tuple[str, int] | None  # None: LOCAL / UNKNOWN (health checks of the balancer)
    destination: tuple[str, int] | None


def parse(data: bytes) -> tuple[ProxyHeader | None, int]:
    """Parse a header at the start of ``data``.

    Returns (header, consumed bytes) once complete; (None, 0) when more bytes are needed.
    Raises ProxyProtocolError when ``data`` cannot start a PROXY header.
    """
    if data[:1] == b"\r":
        need = min(len(data), 12)
        if data[:need] != V2_SIGNATURE[:need]:
            raise ProxyProtocolError("bad PROXY v2 signature")
        if len(data) < 16:
            return None, 0
        _, ver_cmd, family, length = _V2_HEADER.unpack_from(data)
        if ver_cmd >> 4 != 2:
            raise ProxyProtocolError(f"PROXY v2 version {ver_cmd >> 4} unsupported")
        if len(data) < 16 + length:
            return None, 0
        body = data[16 : 16 + length]
        command = ver_cmd & 0x0F
        if command == 0:  # LOCAL
            return ProxyHeader(2, None, None), 16 + length
        if command != 1:
            raise ProxyProtocolError(f"PROXY v2 command {command} unsupported")
        fam = family >> 4
        if fam == 1 and len(body) >= 12:
            src, dst, sport, dport = struct.unpack_from("!4s4sHH", body)
            v4 = ipaddress.IPv4Address
            return ProxyHeader(2, (str(v4(src)), sport), (str(v4(dst)), dport)), 16 + length
        if fam == 2 and len(body) >= 36:
            src, dst, sport, dport = struct.unpack_from("!16s16sHH", body)
            v6 = ipaddress.IPv6Address
            return ProxyHeader(2, (str(v6(src)), sport), (str(v6(dst)), dport)), 16 + length
        if fam == 0:
            return ProxyHeader(2, None, None), 16 + length
        raise ProxyProtocolError(f"PROXY v2 address family {fam} unsupported or body too short")
    if data[:1] == b"P":
        need = min(len(data), len(V1_PREFIX))
        if data[:need] != V1_PREFIX[:need]:
            raise ProxyProtocolError("bad PROXY v1 prefix")
        end = data.find(b"\r\n", 0, V1_MAX)
        if end < 0:
            if len(data) >= V1_MAX:
                raise ProxyProtocolError("PROXY v1 header longer than 107 bytes")
            return None, 0
        parts = data[:end].decode("ascii", "replace").split(" ")
        if len(parts) >= 2 and parts[1] == "UNKNOWN":
            return ProxyHeader(1, None, None), end + 2
        if len(parts) != 6 or parts[1] not in ("TCP4", "TCP6"):
            raise ProxyProtocolError(f"malformed PROXY v1 header {data[:end]!r}")
        try:
            src = str(ipaddress.ip_address(parts[2]))
            dst = str(ipaddress.ip_address(parts[3]))
            sport, dport = int(parts[4]), int(parts[5])
        except ValueError as exc:
            raise ProxyProtocolError(f"malformed PROXY v1 address: {exc}") from None
        if not (0 <= sport <= 65535 and 0 <= dport <= 65535):
            raise ProxyProtocolError("PROXY v1 port out of range")
        return ProxyHeader(1, (src, sport), (dst, dport)), end + 2
    raise ProxyProtocolError("connection does not start with a PROXY header")


def could_be_header(data: bytes) -> bool:
    """Whether ``data`` (at least one byte) may start a PROXY header (for mode "optional")."""
    n2, n1 = min(len(data), 12), min(len(data), 6)
    return data[:n2] == V2_SIGNATURE[:n2] or data[:n1] == V1_PREFIX[:n1]


def encode_v1(source: tuple[str, int], destination: tuple[str, int]) -> bytes:
    fam = "TCP6" if ":" in source[0] else "TCP4"
    return f"PROXY {fam} {source[0]} {destination[0]} {source[1]} {destination[1]}\r\n".encode()


def encode_v2(source: tuple[str, int], destination: tuple[str, int]) -> bytes:
    src, dst = ipaddress.ip_address(source[0]), ipaddress.ip_address(destination[0])
    if src.version == 4:
        body = struct.pack("!4s4sHH", src.packed, dst.packed, source[1], destination[1])
        family = 0x11
    else:
        body = struct.pack("!16s16sHH", src.packed, dst.packed, source[1], destination[1])
        family = 0x21
    return _V2_HEADER.pack(V2_SIGNATURE, 0x21, family, len(body)) + body
