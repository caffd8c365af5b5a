"""How the ``gateway`` command fails: one line on stderr naming the cause (and the fix where there
is one), exit status 2 for usage and configuration mistakes, 1 for everything that goes wrong at
run time, and a traceback only with ``--debug``.

The server and the backends raise their own exceptions, often from inside trio nurseries (so they
arrive wrapped in exception groups, next to secondary failures of the shutdown); this module
finds the one that explains the failure and turns it into that line. Nothing here does I/O.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from gateway.admin_tls import AdminTLSError
from gateway.config import ConfigError
from gateway.model import ErrorCode, GatewayError

USAGE = 2  # a command line or configuration mistake
RUNTIME = 1  # the command was right, the world was not
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it


class CliError(Exception):
    """An expected failure of a command: ``str(exc)`` is the whole message for the user."""

    def __init__(self, message: str, code: int = RUNTIME) -> None:
        super().__init__(message)
        self.code = code


class UsageError(CliError):
    def __init__(self, message: str) -> None:
        super().__init__(message, USAGE)


@dataclass(frozen=True)
class Failure:
    message: str  # "" when the command ends quietly (closed stdout, Ctrl-C)
    code: int


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, in order; ``[exc]`` for a plain one."""
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out.extend(leaves(inner))
        return out
    return [exc]


def _secondary(exc: BaseException) -> bool:
    """Failures that only follow another one (a backend used after it failed to open)."""
    if isinstance(exc, GatewayError) and exc.code is ErrorCode.BACKEND_UNAVAILABLE:
        return "is not open" in exc.message
    return type(exc).__name__ == "Cancelled"


_GATEWAY_HINTS = {
    ErrorCode.UNKNOWN_TOPIC: "see `gateway topics list`",
    ErrorCode.TOPIC_EXISTS: "pick another name or delete it first (`gateway topics delete`)",
}

_FILE_ERRNOS = {
    errno.ENOTDIR,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOSPC,
    errno.EEXIST,
    errno.ENOENT,
    errno.EISDIR,
    errno.EDQUOT,
}


def explain(exc: BaseException) -> Failure:
    """The line to print and the exit status for an exception that ended a command."""
    found = leaves(exc)
    primary = [e for e in found if not _secondary(e)] or found
    # an explained failure wins over an unexplained one from the same group
    for leaf in primary:
        failure = _explain_one(leaf)
        if failure is not None:
            return failure
    leaf = primary[0]
    text = str(leaf).strip().splitlines()[0] if str(leaf).strip() else ""
    return Failure(
        f"internal error: {type(leaf).__name__}{': ' + text if text else ''} "
        "(run again with --debug for the traceback, and please report it)",
        RUNTIME,
    )


def _explain_one(exc: BaseException) -> Failure | None:  # noqa: PLR0911 - one branch per kind
    if isinstance(exc, KeyboardInterrupt):
        return Failure("", INTERRUPTED)
    if isinstance(exc, BrokenPipeError):
        return Failure("", 0)  # the reader went away (`| head`): not an error
    if isinstance(exc, CliError):
        return Failure(str(exc), exc.code)
    if isinstance(exc, AdminTLSError):
        return Failure(str(exc), USAGE)  # a TLS setting to fix, on either side
    if isinstance(exc, ConfigError):
        return Failure(f"invalid configuration: {'; '.join(exc.problems)}", USAGE)
    if isinstance(exc, GatewayError):
        hint = _GATEWAY_HINTS.get(exc.code)
        return Failure(exc.message + (f" ({hint})" if hint else ""), RUNTIME)
    if isinstance(exc, SystemExit):
        if isinstance(exc.code, str):
            message = exc.code
            if "cannot bind" in message:
                message += (
                    " (stop the process using that port; move every port at once with"
                    " GATEWAY_PORT_OFFSET=N, e.g. make run PORT_OFFSET=10000;"
                    " or configure another port)"
                )
            return Failure(message, RUNTIME)
        return Failure("", exc.code if isinstance(exc.code, int) else RUNTIME)
    if isinstance(exc, ConnectionRefusedError):
        return Failure(f"connection refused: {exc.strerror or exc}", RUNTIME)
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return Failure(f"address in use: {exc.strerror} (free the port or pick another)", RUNTIME)
    if isinstance(exc, OSError) and exc.errno in _FILE_ERRNOS and exc.filename:
        return Failure(f"cannot use {exc.filename}: {exc.strerror}", RUNTIME)
    if isinstance(exc, (OSError, TimeoutError)):
        return Failure(f"{type(exc).__name__}: {exc}", RUNTIME)
    module = type(exc).__module__ or ""
    if module.startswith(("pyspark", "py4j")):
        # Spark's errors carry a Java stack after the message: its first line is the cause
        text = str(exc).strip().splitlines()
        return Failure(f"Spark: {text[0] if text else type(exc).__name__}", RUNTIME)
    if type(exc).__name__ == "GatewayClientError":
        message = str(getattr(exc, "message", exc))
        hint = " (see `gateway topics list`)" if message.startswith("unknown topic") else ""
        return Failure(message + hint, RUNTIME)
    if type(exc).__name__ == "PipelineCliError":
        return Failure(str(exc), RUNTIME)
    if type(exc).__name__ == "OptionError":
        return Failure(str(exc), USAGE)
    return None
