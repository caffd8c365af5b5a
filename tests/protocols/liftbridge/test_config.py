"""The Liftbridge listener's budget keys: defaults, and bad values named with what was expected."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_config
from gateway.protocols.liftbridge import LiftbridgeListenerConfig


def test_budget_defaults_fit_the_largest_message() -> None:
    cfg = LiftbridgeListenerConfig()
    assert cfg.max_buffered_request_bytes == 64 << 20
    assert cfg.max_resets_per_s == 100
    assert cfg.validate() == []


def test_bad_budgets_are_named_with_value_and_expectation() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "backends": {"m": {"type": "memory"}},
                "listeners": {
                    "liftbridge": {
                        "max_frame_bytes": 1000,
                        "max_buffered_request_bytes": 1004,
                        "max_resets_per_s": 0,
                    }
                },
            }
        )
    text = "\n".join(info.value.problems)
    assert (
        "listeners.liftbridge.max_buffered_request_bytes: got 1004, expected >= "
        "max_frame_bytes + 5 (1005)" in text
    )
    assert "listeners.liftbridge.max_resets_per_s: got 0, expected >= 1" in text
