"""The NATS client protocol, sans-IO (bytes in, events out; no sockets, no trio).

The protocol is line based text: the server sends ``INFO {json}``, ``MSG``/``HMSG`` (a message with
a byte-counted payload), ``PING``, ``PONG``, ``+OK`` and ``-ERR '...'``; the client sends
``CONNECT {json}``, ``PUB``/``HPUB``, ``SUB``, ``UNSUB``, ``PING`` and ``PONG``. Headers
(``HPUB``, ``HMSG``) are a block ``NATS/1.0[ status[ description]]\\r\\n(Name: value\\r\\n)*\\r\\n``
in front of the payload; a status line without a payload is how JetStream says "no responders"
(503), "no messages" (404) or "end of batch" (204).

:class:`ClientParser` cuts frames out of the byte stream without copying more than once;
the ``encode_*`` functions build client frames.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

CRLF = b"\r\n"


class NatsProtocolError(Exception):
    """The server sent something that is not the NATS protocol."""


@dataclass(slots=True)
class Msg:
    subject: str
    sid: int
    reply: str
    payload: bytes
    headers: dict[str, str] | None = None
    status: int = 0  # from the header block's status line (0: none)
    description: str = ""

    def header(self, name: str, default: str | None = None) -> str | None:
        if self.headers is None:
            return default
        return self.headers.get(name, default)


@dataclass(slots=True)
class Info:
    data: dict[str, Any]


@dataclass(slots=True)
class Ping:
    pass


@dataclass(slots=True)
class Pong:
    pass


@dataclass(slots=True)
class Ok:
    pass


@dataclass(slots=True)
class Err:
    message: str


Event = Msg | Info | Ping | Pong | Ok | Err

_PING = Ping()
_PONG = Pong()
_OK = Ok()


def parse_headers(block: bytes) -> tuple[int, str, dict[str, str]]:
    """(status, description, headers) of a header block (which ends with an empty line)."""
    lines = block.decode("utf-8", "replace").split("\r\n")
    first = lines[0]
    if not first.startswith("NATS/1.0"):
        raise NatsProtocolError(f"bad header block start {first[:40]!r}")
    status = 0
    description = ""
    rest = first[8:].strip()
    if rest:
        code, _, description = rest.partition(" ")
        try:
            status = int(code)
        except ValueError as exc:
            raise NatsProtocolError(f"bad status {code!r}") from exc
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise NatsProtocolError(f"bad header line {line[:40]!r}")
        headers[name.strip()] = value.strip()
    return status, description, headers


class ClientParser:
    """Feed bytes with :meth:`receive_data`, take events with :meth:`events`."""

    def __init__(self, max_payload: int = 64 << 20) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._max = max_payload

    def receive_data(self, data: bytes) -> None:
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        elif self._pos > 1 << 20:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def events(self) -> list[Event]:
        """Every complete event in the buffer."""
        out: list[Event] = []
        buf = self._buf
        while True:
            pos = self._pos
            end = buf.find(CRLF, pos)
            if end < 0:
                if len(buf) - pos > 65536:
                    raise NatsProtocolError("control line too long")
                return out
            op = bytes(buf[pos : pos + 4]).upper()
            if op == b"MSG ":
                args = bytes(buf[pos + 4 : end]).split()
                if len(args) == 3:
                    subject, sid, size = args
                    reply = b""
                elif len(args) == 4:
                    subject, sid, reply, size = args
                else:
                    raise NatsProtocolError(f"bad MSG line {bytes(buf[pos:end])[:80]!r}")
                n = int(size)
                start = end + 2
                if len(buf) < start + n + 2:
                    return out
                payload = bytes(buf[start : start + n])
                self._pos = start + n + 2
                out.append(Msg(subject.decode(), int(sid), reply.decode(), payload))
            elif op == b"HMSG":
                args = bytes(buf[pos + 5 : end]).split()
                if len(args) == 4:
                    subject, sid, hsize, size = args
                    reply = b""
                elif len(args) == 5:
                    subject, sid, reply, hsize, size = args
                else:
                    raise NatsProtocolError(f"bad HMSG line {bytes(buf[pos:end])[:80]!r}")
                hn, n = int(hsize), int(size)
                if n > self._max or hn > n:
                    raise NatsProtocolError(f"bad HMSG sizes {hn}/{n}")
                start = end + 2
                if len(buf) < start + n + 2:
                    return out
                status, description, headers = parse_headers(bytes(buf[start : start + hn]))
                payload = bytes(buf[start + hn : start + n])
                self._pos = start + n + 2
                out.append(
                    Msg(
                        subject.decode(),
                        int(sid),
                        reply.decode(),
                        payload,
                        headers,
                        status,
                        description,
                    )
                )
            else:
                line = bytes(buf[pos:end])
                self._pos = end + 2
                word = line[:4].upper()
                if word == b"PING":
                    out.append(_PING)
                elif word == b"PONG":
                    out.append(_PONG)
                elif word == b"+OK":
                    out.append(_OK)
                elif word == b"-ERR":
                    out.append(Err(line[4:].strip().strip(b"'").decode("utf-8", "replace")))
                elif word == b"INFO":
                    try:
                        out.append(Info(json.loads(line[5:])))
                    except ValueError as exc:
                        raise NatsProtocolError("bad INFO json") from exc
                else:
                    raise NatsProtocolError(f"unknown operation {line[:40]!r}")


def encode_connect(options: dict[str, Any]) -> bytes:
    return b"CONNECT " + json.dumps(options, separators=(",", ":")).encode() + CRLF


def encode_headers(headers: dict[str, str] | list[tuple[str, str]]) -> bytes:
    items = headers.items() if isinstance(headers, dict) else headers
    return b"NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in items).encode() + CRLF


def encode_pub(subject: str, payload: bytes, reply: str = "", headers: bytes = b"") -> bytes:
    """A PUB, or an HPUB when ``headers`` (an encoded header block) is given."""
    r = f" {reply}" if reply else ""
    if headers:
        hn = len(headers)
        return b"".join(
            (
                f"HPUB {subject}{r} {hn} {hn + len(payload)}\r\n".encode(),
                headers,
                payload,
                CRLF,
            )
        )
    return b"".join((f"PUB {subject}{r} {len(payload)}\r\n".encode(), payload, CRLF))


def encode_sub(subject: str, sid: int, queue: str = "") -> bytes:
    q = f" {queue}" if queue else ""
    return f"SUB {subject}{q} {sid}\r\n".encode()


def encode_unsub(sid: int) -> bytes:
    return f"UNSUB {sid}\r\n".encode()


PING = b"PING\r\n"
PONG = b"PONG\r\n"
