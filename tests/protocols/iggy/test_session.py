"""The old (pre-authentication) dialect through every command, driven by the in-repo client on a
running in-process gateway; bad input answered like the real server, counted, and harmless to
other connections."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from gateway.config import parse_config
from gateway.observability import PROTOCOL_ERRORS
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyClient
from tests.support import make_config, serving

S1, T1 = c.Identifier(1), c.Identifier(1)
USERS = [{"username": "iggy", "password": "iggy"}]


@asynccontextmanager
async def gateway(tmp_path: Path, backend: str = "memory", **extra) -> AsyncIterator[tuple]:
    cfg = parse_config(make_config(tmp_path, {"iggy": {"users": USERS, **extra}}, backend=backend))
    async with serving(cfg) as server:
        yield server.addresses()["iggy"]


def errors(kind: str) -> float:
    return PROTOCOL_ERRORS.labels(protocol="iggy", kind=kind)._value.get()


async def status_of(client: IggyClient, req: c.Request) -> int:
    return (await client.request(req)).status


def consumer(n: int = 1) -> c.Consumer:
    return c.Consumer(c.ConsumerKind.CONSUMER, c.Identifier(n))


def group(n: int) -> c.Consumer:
    return c.Consumer(c.ConsumerKind.CONSUMER_GROUP, c.Identifier(n))


@pytest.mark.parametrize("backend", ["memory", "embedded"])
async def test_every_command_in_the_old_dialect(tmp_path: Path, backend: str) -> None:
    async with gateway(tmp_path, backend) as addr, await IggyClient.connect(*addr) as cl:
        assert await cl.call(c.Ping()) is None
        assert await cl.call(c.CreateStream(1, "s1")) is None  # old dialect: empty reply
        assert await cl.call(c.CreateTopic(S1, 1, 2, 60_000, "t1")) is None
        assert await status_of(cl, c.CreateStream(1, "other")) == c.Status.STREAM_ID_ALREADY_EXISTS
        assert await status_of(cl, c.CreateStream(2, "s1")) == c.Status.STREAM_NAME_ALREADY_EXISTS
        assert await status_of(cl, c.CreateTopic(S1, 1, 1, 0, "x")) == (
            c.Status.TOPIC_ID_ALREADY_EXISTS
        )
        assert await status_of(cl, c.CreateTopic(S1, 2, 1, 0, "t1")) == (
            c.Status.TOPIC_NAME_ALREADY_EXISTS
        )

        # headers of every kind, an explicit id and a server-assigned one
        entries = [("raw", 1, b"\x00\xff"), ("str", 2, b"text"), ("flag", 3, b"\x01")]
        for kind in range(4, 16):
            size = c.HEADER_VALUE_SIZES[c.HeaderKind(kind)]
            entries.append((f"k{kind}", kind, bytes(range(1, size + 1))))
        block = c.encode_headers(entries)
        await cl.send_messages(
            1, 1, [c.Message(42, b"a", block), c.Message(0, b"b")], c.Partitioning.partition_id(1)
        )

        polled = await cl.poll(1, 1, 1, c.PollingKind.FIRST, count=10)
        assert polled.partition_id == 1 and polled.current_offset == 1
        a, b = polled.messages
        assert (a.offset, a.id, a.payload, a.state) == (0, 42, b"a", 1)
        assert c.decode_headers(a.headers) == entries  # typed headers intact
        assert a.checksum == c.zlib.crc32(b"a")
        assert b.id != 0 and b.headers == b"" and b.timestamp >= a.timestamp > 10**15

        # by string identifiers; offsets, timestamps, last
        again = await cl.poll("s1", "t1", 1, c.PollingKind.OFFSET, 1, count=10)
        assert [m.payload for m in again.messages] == [b"b"]
        assert (await cl.poll(1, 1, 1, c.PollingKind.OFFSET, 5, count=10)).messages == ()
        ts = await cl.poll(1, 1, 1, c.PollingKind.TIMESTAMP, b.timestamp, count=10)
        assert [m.offset for m in ts.messages][-1] == 1
        last = await cl.poll(1, 1, 1, c.PollingKind.LAST, count=1)
        assert [m.payload for m in last.messages] == [b"b"]

        # stored consumer offsets: Iggy stores the last consumed offset
        off = await cl.call(c.GetConsumerOffset(consumer(7), S1, T1, 1))
        assert off == c.ConsumerOffsetRecord(1, 1, 0)
        nxt = await cl.poll(
            1, 1, 1, c.PollingKind.NEXT, count=1, auto_commit=True, consumer=consumer(7)
        )
        assert [m.offset for m in nxt.messages] == [0]
        assert (await cl.call(c.GetConsumerOffset(consumer(7), S1, T1, 1))).stored_offset == 0
        nxt = await cl.poll(
            1, 1, 1, c.PollingKind.NEXT, count=5, auto_commit=True, consumer=consumer(7)
        )
        assert [m.offset for m in nxt.messages] == [1]
        assert (await cl.call(c.GetConsumerOffset(consumer(7), S1, T1, 1))).stored_offset == 1
        await cl.call(c.StoreConsumerOffset(consumer(8), S1, T1, 1, 0))
        nxt = await cl.poll(1, 1, 1, c.PollingKind.NEXT, count=5, consumer=consumer(8))
        assert [m.offset for m in nxt.messages] == [1]
        assert await status_of(cl, c.StoreConsumerOffset(consumer(8), S1, T1, 1, 9)) == (
            c.Status.INVALID_OFFSET
        )
        assert await status_of(cl, c.GetConsumerOffset(consumer(8), S1, T1, 3)) == (
            c.Status.PARTITION_NOT_FOUND
        )

        await cl.send_messages("s1", "t1", [c.Message(0, b"k1")], c.Partitioning.messages_key(b"k"))
        await cl.send_messages(1, 1, [c.Message(0, b"bal")])
        both = [
            m.payload
            for p in (1, 2)
            for m in (await cl.poll(1, 1, p, c.PollingKind.FIRST, count=10)).messages
        ]
        assert sorted(both) == [b"a", b"b", b"bal", b"k1"]

        # streams and topics
        details = await cl.call(c.GetStream(S1))
        assert details.stream.name == "s1" and details.stream.topics_count == 1
        assert details.stream.messages_count == 4
        (topic,) = details.topics
        assert (topic.id, topic.name, topic.partitions_count) == (1, "t1", 2)
        assert topic.message_expiry == 60_000
        tdet = await cl.call(c.GetTopic(c.Identifier("s1"), c.Identifier("t1")))
        assert [p.id for p in tdet.partitions] == [1, 2]
        assert sum(p.messages_count for p in tdet.partitions) == 4
        assert tdet.partitions[0].current_offset == tdet.partitions[0].messages_count - 1
        await cl.call(c.CreatePartitions(S1, T1, 2))
        assert (await cl.call(c.GetTopic(S1, T1))).topic.partitions_count == 4
        await cl.call(c.DeletePartitions(S1, T1, 1))
        assert (await cl.call(c.GetTopic(S1, T1))).topic.partitions_count == 3
        assert [t.name for t in await cl.call(c.GetTopics(S1))] == ["t1"]
        streams = await cl.call(c.GetStreams())
        assert [(s.id, s.name) for s in streams] == [(1, "s1")]

        stats = await cl.call(c.GetStats())
        assert stats.streams_count == 1 and stats.topics_count == 1
        assert stats.messages_count == 4 and stats.clients_count == 1
        me = await cl.call(c.GetMe())
        assert me.transport == 1 and me.address.startswith("127.0.0.1:")
        assert await cl.call(c.GetClient(me.client_id)) == me
        assert [x.client_id for x in await cl.call(c.GetClients())] == [me.client_id]
        assert await status_of(cl, c.GetClient(999)) == c.Status.CLIENT_NOT_FOUND

        await cl.call(c.DeleteTopic(S1, T1))
        assert await status_of(cl, c.GetTopic(S1, T1)) == c.Status.TOPIC_ID_NOT_FOUND
        await cl.call(c.DeleteStream(S1))
        assert await status_of(cl, c.GetStream(S1)) == c.Status.STREAM_ID_NOT_FOUND
        assert await status_of(cl, c.GetStream(c.Identifier("s1"))) == (
            c.Status.STREAM_NAME_NOT_FOUND
        )


async def test_consumer_groups_with_two_members(tmp_path: Path) -> None:
    async with gateway(tmp_path) as addr:
        a = await IggyClient.connect(*addr)
        b = await IggyClient.connect(*addr)
        await a.call(c.CreateStream(1, "s1"))
        await a.call(c.CreateTopic(S1, 1, 2, 0, "t1"))
        for p in (1, 2):
            await a.send_messages(
                1,
                1,
                [c.Message(0, b"p%d-%d" % (p, i)) for i in range(3)],
                c.Partitioning.partition_id(p),
            )
        assert await status_of(a, c.JoinConsumerGroup(S1, T1, 5)) == (
            c.Status.CONSUMER_GROUP_NOT_FOUND
        )
        await a.call(c.CreateConsumerGroup(S1, T1, 5))
        assert await status_of(a, c.CreateConsumerGroup(S1, T1, 5)) == (
            c.Status.CONSUMER_GROUP_ALREADY_EXISTS
        )
        assert await status_of(a, c.PollMessages(group(5), S1, T1, 0, 5, 0, 10, True)) == (
            c.Status.CONSUMER_GROUP_MEMBER_NOT_FOUND
        )
        await a.call(c.JoinConsumerGroup(S1, T1, 5))
        await b.call(c.JoinConsumerGroup(S1, T1, 5))
        det = await a.call(c.GetConsumerGroup(S1, T1, 5))
        assert det.group == c.GroupRecord(5, 2, 2)
        me_a = (await a.call(c.GetMe())).client_id
        me_b = (await b.call(c.GetMe())).client_id
        members = dict(det.members)
        assert sorted(members) == sorted([me_a, me_b])
        assert sorted(members.values()) == [(1,), (2,)]
        pa, pb = members[me_a][0], members[me_b][0]
        assert (await a.call(c.GetMe())).groups == ((5, 1, 1),)
        assert await a.call(c.GetConsumerGroups(S1, T1)) == [c.GroupRecord(5, 2, 2)]

        got_a = await a.poll(1, 1, 0, count=2, auto_commit=True, consumer=group(5))
        got_b = await b.poll(1, 1, 0, count=10, auto_commit=True, consumer=group(5))
        assert got_a.partition_id == pa
        assert [m.payload for m in got_a.messages] == [b"p%d-0" % pa, b"p%d-1" % pa]
        assert got_b.partition_id == pb and len(got_b.messages) == 3
        # the group's offset is stored per partition
        off = await a.call(c.GetConsumerOffset(group(5), S1, T1, pa))
        assert off.stored_offset == 1

        # partitions added to the topic are assigned on the next poll
        await a.call(c.CreatePartitions(S1, T1, 1))
        await a.poll(1, 1, 0, count=1, consumer=group(5))
        det = await a.call(c.GetConsumerGroup(S1, T1, 5))
        assert det.group.partitions_count == 3
        assert sorted(p for _, parts in det.members for p in parts) == [1, 2, 3]
        await a.call(c.DeletePartitions(S1, T1, 1))
        await a.poll(1, 1, 0, count=1, consumer=group(5))
        det = await a.call(c.GetConsumerGroup(S1, T1, 5))
        assert sorted(p for _, parts in det.members for p in parts) == [1, 2]
        members = dict(det.members)
        pa, pb = members[me_a][0], members[me_b][0]

        # b leaves: a gets both partitions and resumes from the group's offsets
        await b.call(c.LeaveConsumerGroup(S1, T1, 5))
        assert await status_of(b, c.LeaveConsumerGroup(S1, T1, 5)) == (
            c.Status.CONSUMER_GROUP_MEMBER_NOT_FOUND
        )
        det = await a.call(c.GetConsumerGroup(S1, T1, 5))
        assert dict(det.members) == {me_a: (1, 2)}
        rest = []
        for _ in range(2):
            polled = await a.poll(1, 1, 0, count=10, auto_commit=True, consumer=group(5))
            rest.extend(m.payload for m in polled.messages)
        assert rest == [b"p%d-2" % pa]
        # a's connection closes: it leaves the group
        await a.aclose()
        await trio.sleep(0.05)
        det = await b.call(c.GetConsumerGroup(S1, T1, 5))
        assert det.members == ()
        await b.call(c.DeleteConsumerGroup(S1, T1, 5))
        assert await b.call(c.GetConsumerGroups(S1, T1)) is None  # empty list: empty payload
        await b.aclose()


async def test_topics_of_other_protocols_get_durable_ids(tmp_path: Path) -> None:
    from gateway.model import CreateTopic

    cfg = parse_config(make_config(tmp_path, {"iggy": {}}, backend="embedded"))
    async with serving(cfg) as server:
        await server.core.execute(CreateTopic("plain", 1))
        await server.core.execute(CreateTopic("orders.eu", 2))
        async with await IggyClient.connect(*server.addresses()["iggy"]) as cl:
            streams = {s.name: s.id for s in await cl.call(c.GetStreams())}
            assert set(streams) == {"default", "orders"}
            t = await cl.call(c.GetTopic(c.Identifier("orders"), c.Identifier("eu")))
            assert t.topic.partitions_count == 2
            ids = (streams, t.topic.id)
            assert await status_of(cl, c.CreateStream(9, "a.b")) == c.Status.INVALID_STREAM_NAME
            assert (
                await status_of(cl, c.CreateTopic(c.Identifier("default"), 5, 1, 0, "x.y"))
                == c.Status.INVALID_TOPIC_NAME
            )
    async with serving(cfg) as server:  # a restart keeps the ids
        async with await IggyClient.connect(*server.addresses()["iggy"]) as cl:
            streams = {s.name: s.id for s in await cl.call(c.GetStreams())}
            t = await cl.call(c.GetTopic(c.Identifier("orders"), c.Identifier("eu")))
            assert (streams, t.topic.id) == ids


async def test_login_and_anonymous_access(tmp_path: Path) -> None:
    async with gateway(tmp_path, allow_anonymous=False) as addr:
        async with await IggyClient.connect(*addr) as cl:
            assert await cl.call(c.Ping()) is None
            assert await status_of(cl, c.GetStreams()) == c.Status.UNAUTHENTICATED
            assert await status_of(cl, c.LoginUser("iggy", "nope")) == (
                c.Status.INVALID_CREDENTIALS
            )
            assert await cl.login("iggy", "iggy") == 1
            assert cl.conn.dialect is c.Dialect.V06
            details = await cl.call(c.CreateStream(0, "s"))  # 0.6: server assigns, record back
            assert details.stream.id == 1 and details.stream.name == "s"
            topic = await cl.call(c.CreateTopic(c.Identifier(1), 0, 2, 0, "t", 1, 0, 0))
            assert topic.topic.id == 1 and [p.id for p in topic.partitions] == [1, 2]
            # consumer offsets by name; nothing stored: an empty answer, as Iggy 0.6 gives
            named = c.Consumer(c.ConsumerKind.CONSUMER, c.Identifier("reader"))
            where = (c.Identifier(1), c.Identifier(1), 1)
            assert await cl.call(c.GetConsumerOffset(named, *where)) is None
            messages = [c.Message(0, b"a"), c.Message(0, b"b")]
            await cl.send_messages(1, 1, messages, c.Partitioning.partition_id(1))
            await cl.call(c.StoreConsumerOffset(named, *where, 1))
            assert await cl.call(c.GetConsumerOffset(named, *where)) == (
                c.ConsumerOffsetRecord(1, 1, 1)
            )


async def test_hashed_passwords(tmp_path: Path) -> None:
    from gateway.protocols.iggy.auth import hash_password

    users = [{"username": "u", "password_hash": hash_password("secret")}]
    cfg = parse_config(make_config(tmp_path, {"iggy": {"users": users}}, backend="memory"))
    async with serving(cfg) as server, await IggyClient.connect(*server.addresses()["iggy"]) as cl:
        assert await status_of(cl, c.LoginUser("u", "wrong")) == c.Status.INVALID_CREDENTIALS
        assert await cl.login("u", "secret") == 1


async def _closed(cl: IggyClient) -> bool:
    with trio.fail_after(5):
        return await cl.stream.receive_some(100) == b""


async def test_bad_input_is_answered_like_the_real_server(tmp_path: Path) -> None:
    async with gateway(tmp_path, max_frame_bytes=1 << 20) as addr:
        bystander = await IggyClient.connect(*addr)
        await bystander.call(c.CreateStream(1, "s1"))
        await bystander.call(c.CreateTopic(S1, 1, 1, 0, "t1"))

        # validation failures and unknown streams/topics get an error frame, the connection stays
        cl = await IggyClient.connect(*addr)
        before = errors("status_4024")
        assert (
            await status_of(
                cl, c.SendMessages(S1, T1, c.Partitioning.balanced(), [c.Message(0, b"")])
            )
            == c.Status.EMPTY_MESSAGE_PAYLOAD
        )
        assert errors("status_4024") == before + 1
        big = c.Message(0, b"x", b"h" * (c.MAX_HEADERS_SIZE + 1))
        assert await status_of(cl, c.SendMessages(S1, T1, c.Partitioning.balanced(), [big])) == (
            c.Status.TOO_BIG_HEADERS_PAYLOAD
        )
        bad_header = struct.pack("<I", 1) + b"k" + bytes((6,)) + struct.pack("<I", 2) + b"xx"
        assert (
            await status_of(
                cl,
                c.SendMessages(S1, T1, c.Partitioning.balanced(), [c.Message(0, b"x", bad_header)]),
            )
            == c.Status.INVALID_HEADER_VALUE
        )
        assert (
            await status_of(cl, c.SendMessages(S1, T1, c.Partitioning.balanced(), []))
            == c.Status.INVALID_MESSAGES_COUNT
        )
        assert (
            await status_of(
                cl,
                c.SendMessages(
                    c.Identifier(9), T1, c.Partitioning.balanced(), [c.Message(0, b"x")]
                ),
            )
            == c.Status.STREAM_ID_NOT_FOUND
        )
        assert (
            await status_of(
                cl,
                c.SendMessages(
                    S1, c.Identifier("nope"), c.Partitioning.balanced(), [c.Message(0, b"x")]
                ),
            )
            == c.Status.TOPIC_NAME_NOT_FOUND
        )
        assert (
            await status_of(
                cl, c.SendMessages(S1, T1, c.Partitioning.partition_id(7), [c.Message(0, b"x")])
            )
            == c.Status.PARTITION_NOT_FOUND
        )
        assert await status_of(cl, c.PollMessages(consumer(), S1, T1, 1, 5, 0, 0, False)) == (
            c.Status.INVALID_MESSAGES_COUNT
        )
        assert await cl.call(c.Ping()) is None
        await cl.aclose()

        # undecodable frames: the connection is dropped without an error frame, and counted
        cases = [
            ("unknown_code", struct.pack("<II", 4, 99)),
            ("bad_length", struct.pack("<II", 2, 1)),
            ("oversized", struct.pack("<II", 1 << 24, 101)),
            ("truncated", struct.pack("<II", 5, 200) + b"\x01"),
            ("bad_identifier", struct.pack("<II", 10, 200) + b"\x01\x03\x01\x00\x00\x00"),
            ("trailing_bytes", struct.pack("<II", 5, 1) + b"\x00"),
            (
                "truncated",  # a send whose first message header is cut short
                struct.pack("<II", 4 + 26, 101)
                + b"\x01\x04\x01\x00\x00\x00" * 2
                + b"\x01\x00"
                + bytes(12),
            ),
        ]
        for kind, frame in cases:
            before = errors(kind)
            cl = await IggyClient.connect(*addr)
            await cl.send_raw(frame)
            assert await _closed(cl), kind
            await cl.aclose()
            assert errors(kind) == before + 1, kind

        # the other connection never noticed
        await bystander.send_messages(1, 1, [c.Message(0, b"still here")])
        polled = await bystander.poll(1, 1, 1, c.PollingKind.FIRST, count=10)
        assert [m.payload for m in polled.messages] == [b"still here"]
        await bystander.aclose()
