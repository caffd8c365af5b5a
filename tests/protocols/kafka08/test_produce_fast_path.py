"""The Produce fast path of the codec (``_decode_produce``, ``_encode_produce_response``) gives
exactly what the generic layouts give: the same objects, the same bytes, the same errors, on
well-formed, truncated, corrupted and invalid input."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.protocols.kafka08 import codec as c

i16 = st.integers(-(2**15), 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=12)  # any unicode, empty included
maybe_text = st.one_of(st.none(), text)


def shape(value: Any) -> Any:
    """A comparable picture of a decoded value: types included, memoryviews as bytes."""
    if isinstance(value, c.Request):
        return ("Request", *(shape(getattr(value, f)) for f in c.Request.__slots__))
    if isinstance(value, memoryview):
        return ("memoryview", value.tobytes())
    if isinstance(value, tuple):
        return (type(value).__name__, *(shape(v) for v in value))
    if isinstance(value, list):
        return [shape(v) for v in value]
    return (type(value).__name__, value)


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", shape(fn(*args)))
    except Exception as exc:  # the error's type, message and kind must match too
        return ("error", type(exc).__name__, str(exc), getattr(exc, "kind", None))


def same_decode(payload: bytes) -> None:
    assert outcome(c.decode_request, payload) == outcome(c.decode_request_generic, payload)


produce_bodies = st.builds(
    c.PRODUCE_REQUEST,
    i16,
    i32,
    st.lists(
        st.builds(
            c.PRODUCE_TOPIC,
            maybe_text,
            st.lists(st.builds(c.PRODUCE_PARTITION, i32, st.binary(max_size=40)), max_size=3),
        ),
        max_size=3,
    ),
)


def produce_payload(version: int, corr: int, client: str | None, body: Any) -> bytes:
    payload = c.encode_request(0, 0, corr, client, body)[4:]
    return payload[:2] + struct.pack(">h", version) + payload[4:]


@settings(max_examples=300, deadline=None)
@given(version=i16, corr=i32, client=maybe_text, body=produce_bodies, tail=st.binary(max_size=4))
def test_well_formed_and_trailing_bytes(version, corr, client, body, tail) -> None:
    payload = produce_payload(version, corr, client, body) + tail
    same_decode(payload)
    assert c.decode_request(payload).api_version == version
    if client is not None and all(t.topic is not None for t in body.topics):
        assert c._decode_produce(payload, version, corr, len(client.encode())) is not None


@settings(max_examples=200, deadline=None)
@given(client=maybe_text, body=produce_bodies, data=st.data())
def test_every_truncation(client, body, data) -> None:
    payload = produce_payload(0, 7, client, body)
    for cut in range(len(payload)):
        same_decode(payload[:cut])


@settings(max_examples=500, deadline=None)
@given(
    client=maybe_text,
    body=produce_bodies,
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_corrupted_bytes(client, body, edits) -> None:
    """Lengths and counts overwritten (negative, too long, bad UTF-8 ...)."""
    payload = bytearray(produce_payload(0, 7, client, body))
    for at, byte in edits:
        payload[at % len(payload)] = byte
    payload[0:2] = b"\x00\x00"  # still a Produce
    same_decode(bytes(payload))


@settings(max_examples=300, deadline=None)
@given(junk=st.binary(max_size=60))
def test_random_produce_payloads(junk) -> None:
    same_decode(b"\x00\x00" + junk)


def test_other_apis_and_edge_lengths() -> None:
    for payload in (
        c.encode_request(3, 0, 1, "x", c.METADATA_REQUEST(["t"]))[4:],
        c.encode_request(18, 3, 1, "x", c.API_VERSIONS_REQUEST_V3("a", "b"))[4:],
        b"\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff",  # null client id, no body
        b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01\xff",  # client id not UTF-8
        b"\x00\x00\x00\x00",
    ):
        same_decode(payload)


# ----------------------------------------------------------------------------- responses


def same_encode(version: int, corr: Any, body: Any) -> None:
    assert outcome(c.encode_response, 0, version, corr, body) == outcome(
        c.encode_response_generic, 0, version, corr, body
    )


results = st.lists(
    st.builds(
        c.PRODUCE_TOPIC_RESULT,
        maybe_text,
        st.lists(st.builds(c.PRODUCE_RESULT, i32, i16, i64), max_size=3),
    ),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(version=i16, corr=i32, topics=results, throttle=i32)
def test_responses(version, corr, topics, throttle) -> None:
    for body in (c.PRODUCE_RESPONSE(topics), c.PRODUCE_RESPONSE_V1(topics, throttle)):
        same_encode(version, corr, body)
    body = c.PRODUCE_RESPONSE_V1(topics, throttle) if version >= 1 else c.PRODUCE_RESPONSE(topics)
    assert c._encode_produce_response(version, corr, body) is not None  # the fast path took it


bad_ints = st.one_of(st.integers(-(2**70), 2**70), st.none(), st.just("1"), st.just(1.5))


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from([0, 1]),
    corr=st.one_of(i32, bad_ints),
    topic=st.one_of(maybe_text, st.just("x" * 40_000), st.just("\ud800"), st.just(b"t")),
    result=st.one_of(
        st.tuples(bad_ints, bad_ints, bad_ints),
        st.tuples(i32, i16),
        st.just("abc"),
    ),
    throttle=bad_ints,
)
def test_invalid_responses(version, corr, topic, result, throttle) -> None:
    for body in (
        c.PRODUCE_RESPONSE([c.PRODUCE_TOPIC_RESULT(topic, [result])]),
        c.PRODUCE_RESPONSE_V1([(topic, [result])], throttle),
        c.PRODUCE_RESPONSE_V1([(topic, [result], 1)], 0),
        c.PRODUCE_RESPONSE([topic]),
        c.PRODUCE_RESPONSE(None),
        ([c.PRODUCE_TOPIC_RESULT("t", [])],),
    ):
        same_encode(version, corr, body)
