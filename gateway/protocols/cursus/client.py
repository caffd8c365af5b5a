"""A small trio Cursus client on the codec's client role (tests, benchmarks, an upstream backend).

One connection, one request at a time; every reply is one frame (a STREAM then pushes frames).
The topic and group helpers send each command as the Go SDK of the chosen dialect does
(``dialect="2026-04"``: the older SDK; ``"2026-08"``: the current one) and read both dialects'
replies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import trio

from gateway.protocols.cursus import codec
from gateway.protocols.cursus.codec import Ack, Batch, FrameBuffer, Keepalive, Message
from gateway.protocols.errors import RemoteProtocolError

_ERROR = re.compile(r"ERROR:?\s*([A-Za-z_]+)(?:$|\s+\w+=)")
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


@dataclass
class CursusError(Exception):
    """A command's error reply. ``code`` is the current dialect's token (``GEN_MISMATCH``,
    ``member_not_found`` ...; empty for the older dialect's sentences), ``fields`` its
    ``key=value`` pairs."""

    reply: str
    code: str = ""
    fields: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.reply)
        m = _ERROR.match(self.reply)
        if m:  # a token, alone or before key=value fields (not the older dialect's sentences)
            self.code = m.group(1)
        self.fields = {k: v.strip('"') for k, v in _FIELD.findall(self.reply)}


@dataclass(frozen=True)
class Joined:
    generation: int
    member: str
    assignments: list[int]


def ok_fields(reply: str) -> dict[str, str]:
    """The ``key=value`` words of an ``OK ...`` reply (the SDK's parseOKFields)."""
    return dict(w.split("=", 1) for w in reply.split() if w != "OK" and "=" in w)


def assignments(reply: str) -> list[int]:
    """The numbers between the first ``[`` and ``]`` (the SDK's parseGroupAssignments)."""
    start, end = reply.find("["), reply.find("]")
    if start < 0 or end <= start:
        return []
    words = reply[start + 1 : end].replace(",", " ").split()
    return [int(w) for w in words if w.lstrip("-").isdigit()]


class CursusClient:
    def __init__(
        self, stream: trio.abc.Stream, compression: str = "none", dialect: str = "2026-08"
    ) -> None:
        self.stream = stream
        self.compression = compression
        self.dialect = dialect
        self._buf = FrameBuffer(codec.MAX_FRAME_BYTES)

    @classmethod
    async def connect(
        cls, host: str, port: int, compression: str = "none", dialect: str = "2026-08"
    ) -> CursusClient:
        return cls(await trio.open_tcp_stream(host, port), compression, dialect)

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self) -> CursusClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ frames
    async def send_body(self, body: bytes) -> None:
        await self.stream.send_all(codec.frame(codec.compress(body, self.compression)))

    async def read_frame(self) -> bytes | None:
        """The next frame body, or None when the server closed the connection."""
        while True:
            body = self._buf.next_frame()
            if body is not None:
                return body
            data = await self.stream.receive_some(1 << 18)
            if not data:
                return None
            self._buf.feed(data)

    async def read_reply(self) -> Keepalive | Batch | str | None:
        body = await self.read_frame()
        return None if body is None else codec.decode_reply(body)

    # ------------------------------------------------------------------ requests
    async def command(self, text: str, envelope: str = "") -> str | Batch | Keepalive | None:
        """Send one text command (in the envelope) and read its reply."""
        await self.send_body(codec.encode_text(text, envelope))
        return await self.read_reply()

    async def text(self, text: str, envelope: str = "") -> str:
        reply = await self.command(text, envelope)
        if not isinstance(reply, str):
            raise RemoteProtocolError(f"expected a text reply to {text!r}, got {reply!r}")
        return reply

    async def consume(self, topic: str, partition: int, offset: int, member: str, **extra: object
                      ) -> Batch | str:  # fmt: skip
        args = " ".join(f"{k}={v}" for k, v in extra.items())
        cmd = f"CONSUME topic={topic} partition={partition} offset={offset} member={member}"
        reply = await self.command(f"{cmd} {args}".strip())
        if reply is None or isinstance(reply, Keepalive):
            raise RemoteProtocolError(f"unexpected reply to CONSUME: {reply!r}")
        return reply

    async def produce(
        self,
        topic: str,
        partition: int,
        messages: Sequence[Message],
        acks: str = "1",
        idempotent: bool = False,
    ) -> Ack | str:
        """Send a batch; the JSON ack, or the text of an error reply."""
        batch = codec.make_batch(topic, partition, messages, acks, idempotent)
        return await self.produce_body(codec.encode_batch(batch))

    async def produce_body(self, body: bytes) -> Ack | str:
        await self.send_body(body)
        reply = await self.read_frame()
        if reply is None:
            raise trio.BrokenResourceError("connection closed by the server")
        if reply.startswith(b"{"):
            return codec.decode_ack(reply)
        return reply.decode("utf-8", "replace")

    # ------------------------------------------------------------------ topics and groups
    async def _ok(self, text: str, envelope: str = "") -> str:
        """Send a command; its reply when it starts with ``OK`` (2026-08) / has no ``ERROR``
        (2026-04), else raise CursusError."""
        reply = (await self.text(text, envelope)).strip()
        if self.dialect == "2026-08":
            if reply.split(" ", 1)[0] != "OK":
                raise CursusError(reply)
        elif reply.startswith("ERROR") or "ERROR:" in reply:
            raise CursusError(reply)
        return reply

    async def create_topic(self, topic: str, partitions: int, idempotent: bool = False) -> str:
        cmd = f"CREATE topic={topic} partitions={partitions}"
        if self.dialect == "2026-08":
            cmd += f" idempotent={'true' if idempotent else 'false'}"
        return await self._ok(cmd, "admin")

    async def join_group(
        self, topic: str, group: str, member: str, generation: int | None = None
    ) -> Joined:
        """JOIN_GROUP; with ``generation`` (current dialect) a resume of ``member``."""
        cmd = f"JOIN_GROUP topic={topic} group={group} member={member}"
        if generation is not None and generation > 0:
            cmd += f" generation={generation}"
        reply = await self._ok(cmd)
        if not reply.startswith("OK"):
            raise CursusError(reply)
        f = ok_fields(reply)
        return Joined(int(f.get("generation", "0")), f.get("member", ""), assignments(reply))

    async def sync_group(self, topic: str, group: str, member: str, generation: int) -> list[int]:
        cmd = f"SYNC_GROUP topic={topic} group={group} member={member} generation={generation}"
        reply = await self._ok(cmd)
        if not reply.startswith("OK"):
            raise CursusError(reply)
        return assignments(reply)

    async def heartbeat(self, topic: str, group: str, member: str, generation: int) -> str:
        cmd = f"HEARTBEAT topic={topic} group={group} member={member} generation={generation}"
        return await self._ok(cmd)

    async def leave_group(self, topic: str, group: str, member: str, generation: int) -> str:
        cmd = f"LEAVE_GROUP topic={topic} group={group} member={member}"
        if self.dialect == "2026-08":
            cmd += f" generation={generation}"
        return await self._ok(cmd)

    async def fetch_offset(self, topic: str, partition: int, group: str) -> int:
        """The committed offset (``OK offset=N``, or a plain ``N`` from an older broker)."""
        reply = await self._ok(f"FETCH_OFFSET topic={topic} partition={partition} group={group}")
        if reply.isdigit():
            return int(reply)
        offset = ok_fields(reply).get("offset")
        if not reply.startswith("OK") or offset is None or not offset.isdigit():
            raise CursusError(reply)
        return int(offset)

    async def commit_offset(
        self, topic: str, partition: int, group: str, offset: int, generation: int, member: str
    ) -> str:
        return await self._ok(
            f"COMMIT_OFFSET topic={topic} partition={partition} group={group} offset={offset} "
            f"generation={generation} member={member}"
        )

    async def batch_commit(
        self, topic: str, group: str, generation: int, member: str, offsets: Mapping[int, int]
    ) -> str:
        entries = ",".join(f"P{p}:{offsets[p]}" for p in sorted(offsets))
        return await self._ok(
            f"BATCH_COMMIT topic={topic} group={group} generation={generation} member={member} "
            + entries
        )
