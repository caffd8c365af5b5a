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

from gateway.protocols.buffer import ReceiveBuffer

CRLF = b"\r\n"


class NatsProtocolError(Exception):
    """The server sent something that is not the NATS protocol."""


class Msg:
    """A message. Its header block is kept raw and parsed only when asked (``headers``), so a
    reader that needs two headers of a message (``raw_header``) builds no dict per message."""

    __slots__ = ("subject", "sid", "reply", "payload", "raw", "status", "description", "_h")

    def __init__(
        self,
        subject: str,
        sid: int,
        reply: str,
        payload: bytes,
        raw: bytes = b"",
        status: int = 0,
        description: str = "",
    ) -> None:
        self.subject = subject
        self.sid = sid
        self.reply = reply
        self.payload = payload
        self.raw = raw
        self.status = status
        self.description = description
        self._h: dict[str, str] | None = None

    @property
    def headers(self) -> dict[str, str]:
        if self._h is None:
            self._h = parse_headers(self.raw)[2] if self.raw else {}
        return self._h

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)

    def raw_header(self, marker: bytes) -> bytes | None:
        """The value of the header whose ``b"\\r\\nName: "`` is ``marker`` (written by us, so
        exactly one space), or None."""
        raw = self.raw
        i = raw.find(marker)
        if i < 0:
            return None
        i += len(marker)
        return raw[i : raw.find(b"\r\n", i)]

    def __repr__(self) -> str:
        return f"Msg({self.subject!r}, status={self.status}, {len(self.payload)} bytes)"


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


def parse_status(block: bytes) -> tuple[int, str, int]:
    """(status, description, end of the first line) of a header block."""
    if not block.startswith(b"NATS/1.0"):
        raise NatsProtocolError(f"bad header block start {block[:40]!r}")
    eol = block.find(b"\r\n")
    if eol < 0:
        raise NatsProtocolError("header block without a line end")
    rest = block[8:eol].strip()
    if not rest:
        return 0, "", eol
    code, _, desc = rest.partition(b" ")
    try:
        return int(code), desc.decode("utf-8", "replace"), eol
    except ValueError as exc:
        raise NatsProtocolError(f"bad status {code!r}") from exc


def parse_headers(block: bytes) -> tuple[int, str, dict[str, str]]:
    """(status, description, headers) of a header block (which ends with an empty line)."""
    status, description, eol = parse_status(block)
    headers: dict[str, str] = {}
    for line in block[eol + 2 :].decode("utf-8", "replace").split("\r\n"):
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise NatsProtocolError(f"bad header line {line[:40]!r}")
            headers[name.strip()] = value.strip()
    return status, description, headers


class ClientParser:
    """Feed bytes with :meth:`receive_data`, take events with :meth:`events`."""

    def __init__(self, max_payload: int = 64 << 20) -> None:
        self._rb = ReceiveBuffer()  # events() moves its read offset (pos) as it cuts them
        self._max = max_payload

    def receive_data(self, data: bytes) -> None:
        self._rb.feed(data)

    def events(self) -> list[Event]:
        """Every complete event in the buffer."""
        out: list[Event] = []
        rb = self._rb
        buf = rb.data
        while True:
            pos = rb.pos
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
                rb.pos = start + n + 2
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
                raw = bytes(buf[start : start + hn])
                status = 0
                description = ""
                if raw[8:10] != b"\r\n":  # a status line: "NATS/1.0 503[ text]"
                    status, description, _ = parse_status(raw)
                payload = bytes(buf[start + hn : start + n])
                rb.pos = start + n + 2
                out.append(
                    Msg(
                        subject.decode(),
                        int(sid),
                        reply.decode(),
                        payload,
                        raw,
                        status,
                        description,
                    )
                )
            else:
                line = bytes(buf[pos:end])
                rb.pos = end + 2
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
