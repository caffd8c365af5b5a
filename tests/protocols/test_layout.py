"""The shared layout engine: one declaration gives decode and encode, in either byte order."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

from gateway.protocols import layout as L


class Bad(Exception):
    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class Bug(Exception):
    pass


LE = L.Wire("<", Bad, Bug)
BE = L.Wire(">", Bad, Bug)
U8, U16, U32 = LE.int("B", "u8"), LE.int("H", "u16"), LE.int("I", "u32")
STR8 = L.Text(U8)


def test_the_byte_order_is_the_wire_s():
    msg_le = L.layout("M", ("a", U32), ("b", U16))
    msg_be = L.layout("M", ("a", BE.int("I", "u32")), ("b", BE.int("H", "u16")))
    assert msg_le.encode((1, 2)) == b"\x01\x00\x00\x00\x02\x00"
    assert msg_be.encode((1, 2)) == b"\x00\x00\x00\x01\x00\x02"
    assert msg_be.decode(b"\x00\x00\x00\x01\x00\x02") == (1, 2)


def test_nested_layouts_round_trip_and_name_their_fields():
    part = L.layout("Part", ("id", U16), ("name", STR8))
    msg = L.layout("Msg", ("request_id", U32), ("parts", L.Array(part, U8)))
    value = msg(7, [part(1, "a"), part(2, "bé")])
    data = msg.encode(value)
    assert data == b"\x07\x00\x00\x00\x02" + b"\x01\x00\x01a" + b"\x02\x00\x03b\xc3\xa9"
    back = msg.decode(data)
    assert back == value
    assert back.parts[1].name == "bé"


def test_short_input_is_a_remote_error_of_kind_truncated():
    msg = L.layout("Msg", ("a", U32), ("name", STR8))
    for cut in range(len(msg.encode((1, "abc")))):
        with pytest.raises(Bad) as info:
            msg.decode(msg.encode((1, "abc"))[:cut])
        assert info.value.kind == "truncated"


def test_bad_utf8_and_trailing_bytes_are_named():
    msg = L.layout("Msg", ("name", STR8))
    with pytest.raises(Bad) as info:
        msg.decode(b"\x01\xff")
    assert info.value.kind == "bad_utf8"
    assert msg.decode(b"\x01a!") == ("a",)  # extra bytes ignored unless exact
    with pytest.raises(Bad) as info:
        msg.decode(b"\x01a!", exact=True)
    assert info.value.kind == "trailing_bytes"


def test_values_that_do_not_fit_are_local_errors():
    msg = L.layout("Msg", ("a", U8), ("name", STR8))
    with pytest.raises(Bug):
        msg.encode((256, "x"))
    with pytest.raises(Bug):
        msg.encode((1, "x" * 256))
    with pytest.raises(Bug):
        msg.encode((1,))
    i16 = LE.int("h", "i16")
    blob = L.layout("B", ("data", L.Blob(i16)), ("maybe", L.Blob(i16, nullable=True)))
    assert blob.decode(blob.encode((b"ab", None))) == (b"ab", None)
    with pytest.raises(Bug, match="None where bytes are required"):
        blob.encode((None, b""))


def test_when_and_optional_fields():
    msg = L.layout(
        "Msg",
        ("version", U16),
        ("flags", L.When(lambda v: v["version"] >= 3, U8, default=0)),
        ("extra", L.Optional(U8, default=9)),
    )
    assert msg.encode((2, 5, 1)) == b"\x02\x00\x01"  # flags left out below v3
    assert msg.decode(b"\x02\x00\x01") == (2, 0, 1)
    assert msg.encode((3, 5, 1)) == b"\x03\x00\x05\x01"
    assert msg.decode(b"\x03\x00\x05\x01") == (3, 5, 1)
    assert msg.decode(b"\x03\x00\x05") == (3, 5, 9)  # an older peer leaves the tail out


@dataclass
class Topic:
    name: str
    partitions: int
    enabled: bool = True


def test_a_layout_can_decode_into_an_existing_class_by_field_name():
    # wire order differs from the class's own field order
    topic = L.Layout("Topic", [("partitions", U16), ("enabled", L.Bool(U8)), ("name", STR8)], Topic)
    data = topic.encode(Topic("t", 3, False))
    assert data == b"\x03\x00\x00\x01t"
    assert topic.decode(data) == Topic("t", 3, False)
    records = L.Repeat(topic)
    assert records.read(data * 2, 0) == ([Topic("t", 3, False)] * 2, 10)


def test_table_exact_ranges_and_open_ended_rows():
    table = L.Table([(1, 0, 0, "v0"), (1, 1, None, "v1+"), (2, -(1 << 15), None, "any")])
    assert table.get(1, 0) == "v0"
    assert table.get(1, 5) == "v1+"
    assert table.get(1, 30000) == "v1+"
    assert table.get(1, -1) is None
    assert table.get(2, -7) == "any"
    assert table.get(2, 200) == "any"
    assert table.get(3, 0) is None
    with pytest.raises(ValueError):
        L.Table([(1, 0, 3, "a"), (1, 2, None, "b")])


def test_kafka_tables_keep_the_0_8_2_version_rules():
    from gateway.protocols.kafka08 import codec as c

    assert c.request_layout(c.ApiKey.PRODUCE, -3) is c.PRODUCE_REQUEST
    assert c.request_layout(c.ApiKey.OFFSET_COMMIT, 1) is c.COMMIT_REQUEST_V1
    assert c.request_layout(c.ApiKey.OFFSET_COMMIT, 2) is None
    assert c.request_layout(c.ApiKey.API_VERSIONS, -1) is None
    assert c.request_layout(c.ApiKey.API_VERSIONS, 2) is c.API_VERSIONS_REQUEST_V0
    assert c.request_layout(c.ApiKey.API_VERSIONS, 700) is c.API_VERSIONS_REQUEST_V3
    assert c.request_layout(4, 0) is None
    assert c.response_layout(c.ApiKey.FETCH, 0) is c.FETCH_RESPONSE
    assert c.response_layout(c.ApiKey.FETCH, 9) is c.FETCH_RESPONSE_V1
    assert c.response_layout(c.ApiKey.API_VERSIONS, 3) is c.API_VERSIONS_RESPONSE_V3
    assert c.response_layout(c.ApiKey.API_VERSIONS, 4) is c.API_VERSIONS_RESPONSE_V0
    assert c.response_layout(c.ApiKey.API_VERSIONS, -2) is c.API_VERSIONS_RESPONSE_V0


def test_the_engine_is_sans_io():
    assert "trio" not in L.__dict__ and "socket" not in L.__dict__
    source = open(L.__file__).read()
    for name in ("import trio", "import socket", "prometheus"):
        assert name not in source
    assert L.__name__ in sys.modules


def _declared_layouts() -> list[L.Layout]:
    """Every layout the three protocols declare, nested ones included."""
    from gateway.protocols.iggy import requests as iggy_requests
    from gateway.protocols.iggy import responses as iggy_responses
    from gateway.protocols.kafka08 import codec as kafka
    from gateway.protocols.tank import codec as tank

    found: dict[int, L.Layout] = {}

    def visit(t: object) -> None:
        if isinstance(t, L.Layout):
            if id(t) in found:
                return
            found[id(t)] = t
            for f in t.types:
                visit(f.item if isinstance(f, L.When) else f)
        for attr in ("item", "layout", "HEAD", "ENTRY", "ENTRY_RF"):
            inner = getattr(t, attr, None)
            if inner is not None and not isinstance(inner, type):
                visit(inner)

    for module in (kafka, iggy_requests, iggy_responses, tank):
        for value in vars(module).values():
            if isinstance(value, L.Table):
                for key in value.keys():
                    for version in range(3):
                        visit(value.get(key, version))
            elif isinstance(value, dict):
                for inner in value.values():
                    visit(inner)
            else:
                visit(value)
    return list(found.values())


def _outcome(read, buf: bytes):  # noqa: ANN001, ANN202
    try:
        return "ok", read(buf, 0)
    except (Bad, Bug, Exception) as exc:
        return "error", type(exc).__name__, getattr(exc, "kind", None)


def test_generated_code_agrees_with_the_interpreted_layout():
    """Each layout's generated read/write against the plain loop over its fields, on random
    bytes and every cut of them: same values, same error kinds, same bytes back."""
    import random

    layouts = _declared_layouts()
    assert len(layouts) > 60  # Kafka, Iggy and TANK all found
    rng = random.Random(7)
    decoded = 0
    for lay in layouts:
        for _ in range(40):
            buf = bytes(rng.choice((0, 1, 2, 3, 255, rng.randrange(256))) for _ in range(40))
            for cut in (len(buf), rng.randrange(len(buf)), 3):
                got = _outcome(lay.read, buf[:cut])
                assert got == _outcome(lambda b, p, lay=lay: L.Layout.read(lay, b, p), buf[:cut])
                if got[0] == "ok":
                    decoded += 1
                    value = got[1][0]
                    out_generated: list = []
                    out_interpreted: list = []
                    lay.write(value, out_generated)
                    L.Layout.write(lay, value, out_interpreted)
                    assert b"".join(out_generated) == b"".join(out_interpreted)
    assert decoded > 1000  # the comparison saw real values, not only errors
