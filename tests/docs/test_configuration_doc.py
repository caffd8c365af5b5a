"""docs/configuration.md names every configuration key with its default, section by section,
checked against the config dataclasses (server, admin, every listener's and every backend
type's), so the page cannot drift from the code. A failure names the row to add or fix."""

from __future__ import annotations

import dataclasses
import re

from gateway.backends import REGISTRY as BACKEND_TYPES
from gateway.backends import get_backend_spec
from gateway.config import AdminConfig, RouteConfig, ServerConfig
from gateway.protocols import REGISTRY as PROTOCOLS
from gateway.protocols import get_protocol
from gateway.protocols.base import ListenerConfig
from tests.support import REPO_ROOT, toml_value

DOC = REPO_ROOT / "docs" / "configuration.md"
COMMON = "[listeners.<protocol>]"


toml_literal = toml_value  # a default as the page writes it: the TOML literal


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return toml_literal(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return toml_literal(f.default_factory())
    return "(required)"


def _fields(cls: type) -> dict[str, str]:
    return {f.name: _default(f) for f in dataclasses.fields(cls) if f.init}


def expected_sections() -> dict[str, dict[str, str]]:
    """Section heading -> {key: default}. A protocol's section holds its own keys and the
    common keys whose default it changes; the common keys are in their own section."""
    common = _fields(ListenerConfig)
    sections = {
        "[server]": _fields(ServerConfig),
        "[admin]": _fields(AdminConfig),
        COMMON: common,
    }
    for name in PROTOCOLS:
        own = _fields(get_protocol(name).config_class)
        sections[f"[listeners.{name}]"] = {
            k: v for k, v in own.items() if k not in common or common[k] != v
        }
    for name in BACKEND_TYPES:
        sections[f'type = "{name}"'] = _fields(get_backend_spec(name).config_class)
    sections["[[routes]]"] = _fields(RouteConfig)
    return sections


HEADING = re.compile(r"^#+ .*?`([^`]+)`")
ROW = re.compile(r"^\|\s*`([a-z_0-9]+)`\s*\|\s*`([^`]*)`\s*\|")


def documented_sections() -> dict[str, dict[str, str]]:
    """Heading (the first code span of a ``#`` line) -> {key: default} from its table rows
    ``| `key` | `default` | meaning |``."""
    out: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in DOC.read_text().splitlines():
        if line.startswith("#"):
            m = HEADING.match(line)
            current = out.setdefault(m.group(1), {}) if m else None
            continue
        m = ROW.match(line)
        if m and current is not None:
            current[m.group(1)] = m.group(2)
    return out


def test_every_key_is_documented_with_its_default() -> None:
    expected, documented = expected_sections(), documented_sections()
    problems = []
    for section, keys in expected.items():
        if section not in documented:
            problems.append(f"add a section headed `{section}` (e.g. '## `{section}`')")
            continue
        for key, default in keys.items():
            row = f"| `{key}` | `{default}` | what it does |"
            if key not in documented[section]:
                problems.append(f"in section `{section}` add the row: {row}")
            elif documented[section][key] != default:
                problems.append(
                    f"in section `{section}` the default of `{key}` is "
                    f"`{documented[section][key]}` but the code says `{default}`: {row}"
                )
        for key in documented[section].keys() - keys.keys():
            problems.append(f"in section `{section}` remove `{key}`: no such key in the code")
    assert not problems, "docs/configuration.md:\n" + "\n".join(problems)


def test_the_check_sees_a_missing_row() -> None:
    # the parser must find rows: a page that lost a key's row is reported
    documented = documented_sections()
    assert documented["[server]"]["data_dir"] == '"data"'
    assert documented["[listeners.kafka08]"]["port"] == "9092"
    assert toml_literal(("*",)) == '["*"]' and toml_literal(10.0) == "10.0"
