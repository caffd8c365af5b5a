"""Every Iggy request declared in requests.py goes through its (code, dialect) layout and back."""

from __future__ import annotations

import pytest

from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy import requests as rq
from gateway.protocols.iggy import wire as w

SAMPLES = {
    id(w.U8): 2,
    id(w.U32): 7,
    id(w.U64): 1 << 40,
    id(w.STR8): "name",
    id(w.STR32): "text",
    id(w.BOOL8): True,
    id(w.IDENT): c.Identifier("s"),
    id(w.CONSUMER_OLD): c.Consumer(1, c.Identifier(3)),
    id(w.CONSUMER_V06): c.Consumer(2, c.Identifier("g")),
    id(w.PARTITIONING): c.Partitioning.partition_id(1),
    id(w.POLLING_KIND): c.PollingKind.NEXT,
}


def _sample(cls: type, dialect: c.Dialect) -> c.Request:
    fields = rq.LAYOUTS.get(cls.CODE, rq.DIALECT_VERSION[dialect]).fields
    values = {}
    for name, t in fields:
        t = getattr(t, "item", t)  # Optional
        values[name] = SAMPLES[id(t)]
    if cls is c.SendMessages:
        values["messages"] = [c.Message(5, b"payload", b"")]
    return cls(**values)


@pytest.mark.parametrize("dialect", list(c.Dialect))
@pytest.mark.parametrize("cls", sorted(rq.REQUESTS.values(), key=lambda k: k.CODE), ids=str)
def test_each_request_round_trips_in_each_dialect(cls: type, dialect: c.Dialect) -> None:
    req = _sample(cls, dialect)
    frame = c.encode_request(req, dialect)
    length, code = c._FRAME_HEAD.unpack_from(frame, 0)
    assert code == cls.CODE and length == len(frame) - 4
    if code == c.Code.LOGIN_USER:
        dialect = c.Dialect.V06  # the one command that always speaks 0.6
    back = c.decode_request(code, frame[8:], dialect)
    if cls is c.SendMessages:
        assert (back.stream, back.topic, back.partitioning) == (
            req.stream,
            req.topic,
            req.partitioning,
        )
        assert [bytes(m[2]) for m in back.messages] == [b"payload"]
    else:
        assert back == req
    with pytest.raises(c.RemoteProtocolError) as info:
        c.decode_request(code, frame[8:] + b"\x00", dialect)  # one byte too many
    assert info.value.kind in ("trailing_bytes", "truncated")


def test_the_two_dialects_differ_where_iggy_0_6_changed_the_layout() -> None:
    create = c.CreateTopic(c.Identifier(1), 1, 1, 5, "t")
    old = c.encode_request(create, c.Dialect.OLD)
    new = c.encode_request(create, c.Dialect.V06)
    assert len(new) - len(old) == 1 + 4 + 8 + 1  # compression, u64 expiry, max size, rf
    assert c.decode_request(302, old[8:], c.Dialect.OLD) == create
    assert c.decode_request(302, new[8:], c.Dialect.V06) == create
    poll = c.PollMessages(
        c.Consumer(1, c.Identifier(3)), c.Identifier(1), c.Identifier(1), 1, 5, 0, 10, True
    )
    old = c.encode_request(poll, c.Dialect.OLD)
    new = c.encode_request(poll, c.Dialect.V06)
    assert old[8:13] == b"\x01\x03\x00\x00\x00"  # kind, u32 id
    assert new[8:15] == b"\x01\x01\x04\x03\x00\x00\x00"  # kind, numeric identifier
