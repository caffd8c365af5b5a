"""PROXY protocol parsing (sans-IO), including the spec's examples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.proxy_protocol import (
    V2_SIGNATURE,
    ProxyHeader,
    ProxyProtocolError,
    encode_v1,
    encode_v2,
    parse,
)


def test_v1_spec_example_and_trailing_bytes() -> None:
    data = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\n"
    header, used = parse(data)
    assert header == ProxyHeader(1, ("192.168.0.1", 56324), ("192.168.0.11", 443))
    assert data[used:] == b"GET / HTTP/1.1\r\n"


def test_v1_unknown_and_incomplete() -> None:
    assert parse(b"PROXY UNKNOWN\r\n") == (ProxyHeader(1, None, None), 15)
    assert parse(b"PROXY TCP4 1.2.3.4") == (None, 0)
    assert parse(b"PRO") == (None, 0)


@pytest.mark.parametrize(
    "bad",
    [
        b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 1\r\n",
        b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY TCP4 nothost 5.6.7.8 1 2\r\n",
        b"PROXY " + b"x" * 120,
        b"GET / HTTP/1.1\r\n",
        b"\r\n\r\n\x00\r\nQUIX\n" + b"\x00" * 8,
    ],
)
def test_malformed_headers_raise(bad: bytes) -> None:
    with pytest.raises(ProxyProtocolError):
        parse(bad)


def test_v2_local_command_and_partial() -> None:
    local = V2_SIGNATURE + bytes([0x20, 0x00, 0x00, 0x00])
    assert parse(local) == (ProxyHeader(2, None, None), 16)
    full = encode_v2(("10.1.2.3", 1111), ("10.0.0.1", 9092))
    for cut in range(1, len(full)):
        assert parse(full[:cut]) == (None, 0)
    assert parse(full)[0] == ProxyHeader(2, ("10.1.2.3", 1111), ("10.0.0.1", 9092))


@given(st.ip_addresses(), st.integers(0, 65535), st.integers(0, 65535))
def test_round_trip_both_versions(ip, sport, dport) -> None:
    dst = "10.0.0.1" if ip.version == 4 else "::1"
    for encode, version in ((encode_v1, 1), (encode_v2, 2)):
        header, used = parse(encode((str(ip), sport), (dst, dport)) + b"rest")
        assert header == ProxyHeader(version, (str(ip), sport), (dst, dport))


@given(st.binary(max_size=64))
def test_random_input_never_raises_anything_else(data: bytes) -> None:
    try:
        parse(data)
    except ProxyProtocolError:
        pass
