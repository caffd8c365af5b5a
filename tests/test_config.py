"""Config: TOML + environment overrides, every problem reported with key, value and expectation."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.config import ConfigError, apply_env, load_config, parse_config
from tests.support import REPO_ROOT


def test_defaults_give_an_embedded_backend_and_a_catch_all_route() -> None:
    config = parse_config({"backends": {"m": {"type": "memory"}}})
    assert config.server.auto_create_topics is True
    assert config.server.default_partitions == 1
    assert config.admin.port == 9644
    assert [(r.topic, r.backend) for r in config.routes] == [("*", "m")]


def test_every_problem_is_listed_with_key_value_and_expectation() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "server": {"log_format": "xml", "default_partitions": "two", "bogus": 1},
                "admin": {"port": 70000},
                "backends": {"b": {"type": "nosuch"}},
                "routes": [{"topic": "x.*", "backend": "missing"}],
                "extra": {},
            }
        )
    text = "\n".join(info.value.problems)
    assert "server.log_format: got 'xml', expected one of" in text
    assert "server.default_partitions: got 'two' (str), expected an integer" in text
    assert "server.bogus: unknown key" in text
    assert "admin.port: got 70000, expected a port number 0..65535" in text
    assert "backends.b.type: got 'nosuch', expected one of" in text
    assert "routes[0].backend: got 'missing'" in text
    assert "extra: unknown section" in text
    assert len(info.value.problems) == 7


def test_environment_overrides_nested_keys_with_toml_values() -> None:
    data = apply_env(
        {"server": {"log_level": "info"}},
        {
            "GATEWAY_SERVER__LOG_LEVEL": "debug",
            "GATEWAY_SERVER__AUTO_CREATE_TOPICS": "false",
            "GATEWAY_ADMIN__PORT": "19644",
            "OTHER": "ignored",
        },
    )
    assert data == {
        "server": {"log_level": "debug", "auto_create_topics": False},
        "admin": {"port": 19644},
    }


def test_load_config_reports_missing_file_and_bad_toml(tmp_path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, environ={})


def test_environment_applies_over_the_file(tmp_path) -> None:
    path = tmp_path / "g.toml"
    path.write_text('[admin]\nport = 1\n[backends.m]\ntype = "memory"\n')
    config = load_config(path, environ={"GATEWAY_ADMIN__PORT": "2"})
    assert config.admin.port == 2


def test_check_config_cli_exits_2_listing_problems(tmp_path) -> None:
    path = tmp_path / "g.toml"
    path.write_text(
        '[server]\nlog_level = "loud"\n[admin]\nport = "x"\n[backends.m]\ntype = "memory"\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "check-config", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 2
    assert "2 problem(s)" in proc.stderr
    assert "server.log_level: got 'loud'" in proc.stderr
    assert "admin.port: got 'x' (str), expected an integer" in proc.stderr


def test_listener_base_keys_are_validated_for_every_protocol() -> None:
    from gateway.protocols import REGISTRY

    for name in REGISTRY:
        with pytest.raises(ConfigError) as info:
            parse_config(
                {
                    "backends": {"m": {"type": "memory"}},
                    "listeners": {name: {"proxy_protocol": "sometimes", "tls_cert": "/nope"}},
                }
            )
        text = "\n".join(info.value.problems)
        assert f"listeners.{name}.proxy_protocol: got 'sometimes'" in text
        assert f"listeners.{name}.tls_cert/tls_key" in text


def test_answer_memory_and_send_timeout_are_checked_with_key_value_and_expectation() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "server": {"max_answer_memory": 4096},
                "backends": {"m": {"type": "memory"}},
                "listeners": {"tank": {"send_timeout_s": 0}},
            }
        )
    text = "\n".join(info.value.problems)
    assert "server.max_answer_memory: got 4096, expected bytes >= 1048576 (1 MiB)" in text
    assert "listeners.tank.send_timeout_s: got 0.0, expected > 0 seconds" in text
    config = parse_config({"backends": {"m": {"type": "memory"}}})
    assert config.server.max_answer_memory == 512 * 1024 * 1024
