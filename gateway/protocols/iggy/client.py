"""A small trio Iggy client on the codec's client role (tests, benchmarks, and the base of an
upstream backend). One request at a time per connection, in order."""

from __future__ import annotations

from typing import Any

import trio

from gateway.protocols.iggy import codec as c


class IggyStatusError(Exception):
    def __init__(self, code: int, status: int) -> None:
        super().__init__(f"command {code} failed with Iggy status {status}")
        self.code = code
        self.status = status


class IggyClient:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.conn = c.ClientConnection()

    @classmethod
    async def connect(cls, host: str, port: int) -> IggyClient:
        return cls(await trio.open_tcp_stream(host, port))

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self) -> IggyClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read_response(self) -> c.Response:
        while True:
            resp = self.conn.next_response()
            if resp is not None:
                return resp
            data = await self.stream.receive_some(1 << 16)
            if not data:
                raise EOFError("the server closed the connection")
            self.conn.receive_data(bytes(data))

    async def request(self, req: c.Request) -> c.Response:
        await self.stream.send_all(self.conn.send(req))
        return await self.read_response()

    async def call(self, req: c.Request) -> Any:
        """The decoded OK result, or IggyStatusError."""
        resp = await self.request(req)
        if resp.status:
            raise IggyStatusError(req.CODE, resp.status)
        return resp.result

    # conveniences
    async def ping(self) -> None:
        await self.call(c.Ping())

    async def login(self, username: str, password: str) -> int:
        return (await self.call(c.LoginUser(username, password, "0.6.202", ""))).user_id

    async def send_messages(
        self,
        stream: int | str,
        topic: int | str,
        messages: list[c.Message],
        partitioning: c.Partitioning | None = None,
    ) -> None:
        await self.call(
            c.SendMessages(
                c.Identifier(stream),
                c.Identifier(topic),
                partitioning or c.Partitioning.balanced(),
                messages,
            )
        )

    async def poll(
        self,
        stream: int | str,
        topic: int | str,
        partition_id: int,
        kind: int = c.PollingKind.NEXT,
        value: int = 0,
        count: int = 100,
        auto_commit: bool = False,
        consumer: c.Consumer | None = None,
    ) -> c.PolledMessages:
        res = await self.call(
            c.PollMessages(
                consumer or c.Consumer(c.ConsumerKind.CONSUMER, c.Identifier(1)),
                c.Identifier(stream),
                c.Identifier(topic),
                partition_id,
                kind,
                value,
                count,
                auto_commit,
            )
        )
        return res
