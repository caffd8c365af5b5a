"""gateway/fdlimit.py: the soft open-file limit is raised to the hard limit at start, and logged."""

from __future__ import annotations

import resource

import structlog

from gateway.fdlimit import raise_file_limit


def _drop(_logger: object, _method: str, _event: dict) -> None:
    raise structlog.DropEvent


def test_the_soft_limit_is_raised_to_the_hard_limit_and_both_are_logged() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, 256)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        # a logger of its own: the process-wide structlog configuration (another test's CLI
        # call may have set it to warnings only) must not decide what this test sees
        logs: list[dict] = []
        logger = structlog.wrap_logger(
            None,
            processors=[lambda _l, _m, event: logs.append(event) or event, _drop],
            wrapper_class=structlog.BoundLogger,
        )
        got = raise_file_limit(logger)
        expected = hard if hard != resource.RLIM_INFINITY else 1 << 20
        assert got == expected == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        [event] = logs
        assert event["event"] == "file_limit"
        assert (event["soft_before"], event["soft"], event["hard"]) == (low, expected, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
