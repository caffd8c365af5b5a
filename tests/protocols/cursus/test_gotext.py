"""Command words read and written as the Go broker does (strconv, fmt, encoding/json)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.protocols.cursus.gotext import (
    ZERO_TIME,
    go_atoi,
    go_list,
    go_time,
    go_uint,
    positional,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("42", 42), ("007", 7), ("18446744073709551615", 2**64 - 1)],
)
def test_go_uint_takes_decimal_digits(text: str, value: int) -> None:
    assert go_uint(text) == value


@pytest.mark.parametrize(
    "text", [None, "", "+5", "-1", " 5", "5 ", "0x10", "1_000", "18446744073709551616", "1.0"]
)
def test_go_uint_refuses_what_parseuint_refuses(text: str | None) -> None:
    # ParseUint: "A sign prefix is not permitted"; base 10 has no prefixes or underscores.
    assert go_uint(text) is None


@pytest.mark.parametrize(
    ("text", "value"),
    [("+5", 5), ("-5", -5), ("0", 0), ("-9223372036854775808", -(2**63))],
)
def test_go_atoi_takes_a_signed_decimal(text: str, value: int) -> None:
    assert go_atoi(text) == value


@pytest.mark.parametrize("text", [None, "", "++5", "5-", "9223372036854775808", "0x1", "1e3"])
def test_go_atoi_refuses_what_atoi_refuses(text: str | None) -> None:
    assert go_atoi(text) is None


def test_go_list_is_fmt_v_of_a_slice() -> None:
    assert go_list([]) == "[]"
    assert go_list((0, 2, 3)) == "[0 2 3]"


def test_go_time_is_encoding_json_rfc3339nano() -> None:
    whole = datetime(2026, 11, 26, 2, 45, 39, tzinfo=UTC).timestamp()
    assert go_time(None) == go_time(0.0) == ZERO_TIME == "0001-01-01T00:00:00Z"
    assert go_time(whole) == "2026-11-26T02:45:39Z"
    assert go_time(whole + 0.5) == "2026-11-26T02:45:39.5Z"
    assert go_time(whole + 0.123456) == "2026-11-26T02:45:39.123456Z"
    assert datetime.fromisoformat(go_time(whole + 0.25)) == datetime.fromtimestamp(
        whole + 0.25, UTC
    )


def test_positional_rewrites_the_java_sdk_form() -> None:
    assert positional("CREATE orders 3") == "CREATE topic=orders partitions=3"
    assert positional("COMMIT t g 1 42") == "COMMIT_OFFSET topic=t group=g partition=1 offset=42"
    assert (
        positional("HEARTBEAT t g c m 7")
        == "HEARTBEAT topic=t group=g consumer=c member=m generation=7"
    )
    assert positional("CREATE topic=orders") is None  # already key=value
    assert positional("CREATE a b c") is None  # more words than the command takes
    assert positional("LIST") is None
