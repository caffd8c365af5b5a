"""Iggy answers declared in responses.py: each OK payload type through the server's encoder and
the client's decoder."""

from __future__ import annotations

import pytest

from gateway.protocols.iggy import codec as c

TS = 1_700_000_000_000_000
CASES = [
    (c.Code.LOGIN_USER, c.LoginResult(9)),
    (c.Code.GET_STATS, c.StatsRecord(1, 0.5, 2, hostname="h", os_name="linux")),
    (c.Code.GET_ME, c.ClientRecord(3, 1, "127.0.0.1:5", 2, ((1, 2, 3), (4, 5, 6)))),
    (c.Code.GET_CLIENTS, [c.ClientRecord(3, 1, "a", 2), c.ClientRecord(4, 1, "b", 0)]),
    (c.Code.GET_CONSUMER_OFFSET, c.ConsumerOffsetRecord(1, 10, 7)),
    (
        c.Code.GET_STREAMS,
        [c.StreamRecord(1, TS, 0, 0, 0, "s1"), c.StreamRecord(2, TS, 1, 5, 6, "s2")],
    ),
    (c.Code.GET_CONSUMER_GROUP, c.GroupDetails(c.GroupRecord(1, 2, 2), ((7, (1,)), (8, (2, 3))))),
    (c.Code.GET_CONSUMER_GROUPS, [c.GroupRecord(1, 2, 0), c.GroupRecord(2, 1, 1)]),
]


@pytest.mark.parametrize("dialect", list(c.Dialect))
@pytest.mark.parametrize(("code", "result"), CASES, ids=lambda v: str(v)[:20])
def test_answers_round_trip(code: int, result: object, dialect: c.Dialect) -> None:
    payload = c.encode_response_payload(code, result, dialect)
    assert c.decode_response_payload(code, payload, dialect) == result
    if code != c.Code.LOGIN_USER:
        with pytest.raises(c.RemoteProtocolError):
            c.decode_response_payload(code, payload + b"\x01\x02", dialect)


def test_a_login_answer_may_carry_more_than_the_user_id() -> None:
    # newer servers append tokens after the id; the SDK reads the id and ignores the rest
    got = c.decode_response_payload(c.Code.LOGIN_USER, b"\x05\x00\x00\x00tokens", c.Dialect.V06)
    assert got == c.LoginResult(5)


def test_a_command_without_an_answer_payload_is_refused_both_ways() -> None:
    with pytest.raises(c.LocalProtocolError):
        c.encode_response_payload(c.Code.PING, c.LoginResult(1), c.Dialect.OLD)
    with pytest.raises(c.RemoteProtocolError) as info:
        c.decode_response_payload(c.Code.PING, b"\x00\x00", c.Dialect.OLD)
    assert info.value.kind == "unexpected_payload"
