"""Which line and exit status an exception that ends a command becomes."""

from __future__ import annotations

import errno

from gateway.cli_errors import USAGE, CliError, explain
from gateway.config import ConfigError
from gateway.model import ErrorCode, GatewayError


def test_the_cause_inside_exception_groups_wins_over_what_followed_it() -> None:
    lock = GatewayError(ErrorCode.BACKEND_UNAVAILABLE, "data directory d is locked by pid 7")
    after = GatewayError(ErrorCode.BACKEND_UNAVAILABLE, "embedded backend 'x' is not open")
    group = BaseExceptionGroup("nursery", [ExceptionGroup("inner", [after, lock])])
    assert explain(group).message == "data directory d is locked by pid 7"
    assert explain(group).code == 1


def test_kinds() -> None:
    assert explain(ConfigError(["a: got 1", "b: got 2"])).message == (
        "invalid configuration: a: got 1; b: got 2"
    )
    assert explain(ConfigError(["a"])).code == USAGE
    assert explain(CliError("x", 2)).code == 2
    bind = explain(SystemExit("listeners.tank: cannot bind 1.2.3.4:5: in use"))
    assert bind.code == 1 and bind.message.endswith("or configure another port)")
    denied = explain(PermissionError(errno.EACCES, "Permission denied", "/d/LOCK"))
    assert denied.message == "cannot use /d/LOCK: Permission denied"
    assert explain(BrokenPipeError()).code == 0 and explain(BrokenPipeError()).message == ""
    assert explain(KeyboardInterrupt()).code == 130
    unknown = GatewayError(ErrorCode.UNKNOWN_TOPIC, "unknown topic 't'")
    assert explain(unknown).message == "unknown topic 't' (see `gateway topics list`)"


def test_an_unexpected_exception_is_one_line_pointing_at_debug() -> None:
    failure = explain(ExceptionGroup("g", [KeyError("k")]))
    assert failure.code == 1
    assert failure.message == (
        "internal error: KeyError: 'k' (run again with --debug for the traceback, and please "
        "report it)"
    )
