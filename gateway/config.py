"""Configuration: a TOML file plus ``GATEWAY_<SECTION>__<KEY>`` environment overrides, turned into
frozen dataclasses. Every problem is reported with its key, the value found and what was expected,
and all problems are reported at once (``gateway check-config``).

Shape (names are a contract)::

    [server]                 data_dir, log_format, log_level, auto_create_topics, default_partitions
    [admin]                  enabled, host, port, token_file, tls_*, ACLs, limits
    [listeners.<protocol>]   keys of the protocol's ListenerConfig subclass
    [backends.NAME]          type = "embedded" | "memory" | ..., plus the type's keys
    [[routes]]               topic = "glob", backend = "NAME"   (first match wins)

Protocol and backend keys are declared by their own modules (the registries), not here.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.protocols.base import ListenerConfig
from gateway.tls import check_tls

ENV_PREFIX = "GATEWAY_"
PORT_OFFSET_ENV = "GATEWAY_PORT_OFFSET"
"""Added to every non-zero port (admin and listeners) so a whole gateway moves at once
(``make run PORT_OFFSET=10000``); port 0 (pick a free one) stays 0."""
LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(Exception):
    """One or more configuration problems; ``problems`` lists each as one line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class ServerConfig:
    data_dir: str = "data"
    log_format: str = "auto"
    log_level: str = "info"
    auto_create_topics: bool = True
    default_partitions: int = 1
    shutdown_grace_s: float = 10.0
    max_topics: int = 10_000
    max_partitions_per_topic: int = 10_000
    max_partitions_total: int = 0
    """Partitions the whole gateway may hold; 0 derives it from the open-file limit (each
    embedded-log partition keeps about three files open), so a create is refused with a clear
    error instead of exhausting the descriptors."""
    max_topics_created_per_s: float = 100.0
    max_topics_created_per_request: int = 100  # auto-creation by one request (Kafka Metadata)
    """Topic and partition creations per second, explicit or automatic, for the whole process
    (burst: one second's worth); 0 means unlimited."""
    group_assignment: str = "range"
    """How consumer groups spread partitions: "range" (Kafka's range assignor) or "sticky"
    (members keep their partitions across rebalances, still balanced to within one)."""
    group_lease_ms: int = 10_000
    """On a backend that shares consumer groups between gateways (NATS): how long a member
    outlives the gateway holding its connection (a killed replica's members leave after it)."""
    max_group_members: int = 1000
    """Members one consumer group may have; a join beyond it is refused (the whole group is one
    entry that every heartbeat reads on a shared backend)."""
    max_kafka_groups: int = 10_000
    """Kafka consumer groups (client-side assignment) with members on this gateway at once; a
    join that would form one more is refused."""

    max_producer_states: int = 100_000
    """(Idempotent producer, partition) entries kept for de-duplicating retries (about 200 bytes
    each); beyond it the least recently used is forgotten."""

    max_answer_memory: int = 512 * 1024 * 1024
    """Record bytes all fetch/consume/poll answers of the process may hold together, being
    built or waiting to be sent; an answer gets less (at worst none) when the pool is short."""

    def validate(self) -> list[str]:
        problems = []
        if self.max_producer_states < 1:
            problems.append(
                f"server.max_producer_states: got {self.max_producer_states!r}, expected 1 or more"
            )
        if self.group_assignment not in ("range", "sticky"):
            problems.append(
                f"server.group_assignment: got {self.group_assignment!r}, "
                "expected 'range' or 'sticky'"
            )
        if self.max_group_members < 1:
            problems.append(
                f"server.max_group_members: got {self.max_group_members!r}, expected 1 or more"
            )
        if self.max_kafka_groups < 1:
            problems.append(
                f"server.max_kafka_groups: got {self.max_kafka_groups!r}, expected 1 or more"
            )
        if not 300 <= self.group_lease_ms <= 3_600_000:
            problems.append(
                f"server.group_lease_ms: got {self.group_lease_ms!r}, "
                "expected milliseconds from 300 to 3600000"
            )
        if self.log_format not in LOG_FORMATS:
            problems.append(
                f"server.log_format: got {self.log_format!r}, expected one of {LOG_FORMATS}"
            )
        if self.log_level not in LOG_LEVELS:
            problems.append(
                f"server.log_level: got {self.log_level!r}, expected one of {LOG_LEVELS}"
            )
        if self.max_partitions_total < 0:
            problems.append(
                f"server.max_partitions_total: got {self.max_partitions_total}, "
                "expected 0 (derived from the open-file limit) or a positive count"
            )
        if self.max_topics_created_per_request < 1:
            problems.append(
                "server.max_topics_created_per_request: got "
                f"{self.max_topics_created_per_request}, expected >= 1"
            )
        if self.max_topics_created_per_s < 0:
            problems.append(
                f"server.max_topics_created_per_s: got {self.max_topics_created_per_s}, "
                "expected 0 (unlimited) or a positive rate"
            )
        if self.max_answer_memory < 1024 * 1024:
            problems.append(
                f"server.max_answer_memory: got {self.max_answer_memory!r}, "
                "expected bytes >= 1048576 (1 MiB)"
            )
        if not 1 <= self.default_partitions <= 100_000:
            problems.append(
                f"server.default_partitions: got {self.default_partitions}, expected 1..100000"
            )
        return problems


CLI_TLS_FILES = ("cli_tls_ca", "cli_tls_cert", "cli_tls_key")  # [admin] files of its clients


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """The admin endpoint. Health, readiness and metrics are always open; the data and control
    API (records, topics, groups, status details) needs ``token_file`` (a bearer token) or
    ``tls_client_ca`` (a client certificate), and without either is open only when ``host`` is
    a loopback address (see gateway/admin_auth.py)."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 9644
    token_file: str = ""  # a file holding the bearer token the data API asks for
    tls_cert: str = ""  # PEM certificate chain; with tls_key, the admin port speaks TLS only
    tls_key: str = ""
    tls_client_ca: str = ""  # PEM CA bundle: a client certificate it signed opens the data API
    # how the CLI and the pipeline reach a TLS admin port (gateway/admin_tls.py)
    tls_server_name: str = ""  # the name they check in its certificate ("" = see admin_tls)
    cli_tls_ca: str = ""  # a PEM CA file they trust besides the system's and tls_cert
    cli_tls_cert: str = ""  # a client certificate they present (for tls_client_ca)
    cli_tls_key: str = ""
    read_allow: tuple[str, ...] = ("*",)  # topic globs the data API may read (deny wins)
    read_deny: tuple[str, ...] = ()
    write_allow: tuple[str, ...] = ("*",)  # topic globs the data API may write or create
    write_deny: tuple[str, ...] = ()
    max_connections: int = 256
    max_header_bytes: int = 64 * 1024  # request line plus headers
    max_body_bytes: int = 64 * 1024 * 1024
    read_timeout_s: float = 30.0  # a request's line and headers must arrive within this
    idle_timeout_s: float = 60.0  # a kept-alive connection with no new request is closed

    def served(self) -> AdminConfig:
        """This config without the keys only its clients read (a reload compares these)."""
        return dataclasses.replace(
            self, tls_server_name="", cli_tls_ca="", cli_tls_cert="", cli_tls_key=""
        )

    def validate(self) -> list[str]:
        problems = []
        if bool(self.tls_cert) != bool(self.tls_key):
            problems.append(
                f"admin.tls_cert/tls_key: got cert={self.tls_cert!r} key={self.tls_key!r}, "
                "expected both or neither"
            )
        if self.tls_client_ca and not self.tls_cert:
            problems.append(
                f"admin.tls_client_ca: got {self.tls_client_ca!r} without tls_cert, "
                "expected TLS on (tls_cert and tls_key)"
            )
        for key in ("tls_server_name", *CLI_TLS_FILES):
            if getattr(self, key) and not self.tls_cert:
                problems.append(
                    f"admin.{key}: got {getattr(self, key)!r} without tls_cert, "
                    "expected TLS on (tls_cert and tls_key)"
                )
        if bool(self.cli_tls_cert) != bool(self.cli_tls_key):
            problems.append(
                f"admin.cli_tls_cert/cli_tls_key: got cert={self.cli_tls_cert!r} "
                f"key={self.cli_tls_key!r}, expected both or neither"
            )
        for key in ("tls_cert", "tls_key", "tls_client_ca", *CLI_TLS_FILES):
            path = getattr(self, key)
            if path and not os.path.isfile(path):
                problems.append(f"admin.{key}: got {path!r}, expected a readable file")
        name = self.tls_server_name
        if name and not all(c.isalnum() or c in ".-:" for c in name):
            problems.append(
                f"admin.tls_server_name: got {name!r}, expected a host name or an IP address"
            )
        if self.token_file:
            from gateway.admin_auth import TokenError, read_token

            try:
                read_token(self.token_file)
            except TokenError as exc:
                problems.append(f"admin.token_file: got {self.token_file!r}, expected {exc}")
        for key in ("max_connections", "max_header_bytes", "max_body_bytes"):
            if getattr(self, key) < 1:
                problems.append(f"admin.{key}: got {getattr(self, key)}, expected >= 1")
        for key in ("read_timeout_s", "idle_timeout_s"):
            if getattr(self, key) <= 0:
                problems.append(f"admin.{key}: got {getattr(self, key)}, expected > 0 seconds")
        return problems


@dataclass(frozen=True, slots=True)
class BackendConfig:
    name: str
    type: str
    options: Any  # the type's own frozen dataclass


@dataclass(frozen=True, slots=True)
class RouteConfig:
    topic: str
    backend: str


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    server: ServerConfig = field(default_factory=ServerConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    listeners: Mapping[str, ListenerConfig] = field(default_factory=dict)
    backends: Mapping[str, BackendConfig] = field(default_factory=dict)
    routes: tuple[RouteConfig, ...] = ()
    source: str = "<defaults>"


# ----------------------------------------------------------------------------- conversion


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _type_name(tp: Any) -> str:
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return "a list"
    if origin in (dict, Mapping) or tp is dict:
        return "a table"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any) -> Any:
    """``value`` as type ``tp``, or raise TypeError. Lenient only where TOML is ambiguous
    (an int where a float is expected)."""
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise TypeError
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise TypeError
    if tp is str:
        if isinstance(value, str):
            return value
        raise TypeError
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is type(None):
                if value is None:
                    return None
                continue
            try:
                return _convert(arg, value)
            except TypeError:
                continue
        raise TypeError
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise TypeError
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        items = [_convert(inner, v) for v in value]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, dict):
            raise TypeError
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise TypeError
        return value
    raise TypeError


def build_dataclass(cls: type, data: Mapping[str, Any], where: str, problems: list[str]) -> Any:
    """An instance of the frozen dataclass ``cls`` from ``data``; problems are appended (key,
    value, expectation) and defaults are used for the bad keys so every problem is found."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            problems.append(
                f"{where}.{key}: unknown key (value {value!r}); expected one of "
                f"{', '.join(sorted(known))}"
            )
            continue
        tp = hints[key]
        try:
            kwargs[key] = _convert(tp, value)
        except TypeError:
            problems.append(f"{where}.{key}: got {_describe(value)}, expected {_type_name(tp)}")
    try:
        obj = cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        problems.append(f"{where}: {exc}")
        return None
    for f in dataclasses.fields(cls):
        v = getattr(obj, f.name)
        if f.name.endswith("port") and isinstance(v, int) and not 0 <= v <= 65535:
            problems.append(f"{where}.{f.name}: got {v}, expected a port number 0..65535")
    # every class in the hierarchy validates its own keys, whether or not a subclass's
    # validate() remembers to call super()
    found: list[str] = []
    for klass in type(obj).__mro__:
        validate = klass.__dict__.get("validate")
        if validate is not None:
            found.extend(p for p in validate(obj) if p not in found)
    for p in found:
        problems.append(p if p.startswith(where) else f"{where}.{p}")
    return obj


# ----------------------------------------------------------------------------- environment


def _parse_env_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def apply_env(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Overlay ``GATEWAY_SECTION__SUB__KEY=value`` onto ``data`` (keys lowercased; the value is
    read as a TOML value when it parses as one, else as a string)."""
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
        node = data
        for part in path[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = {}
                node[part] = nxt
            node = nxt
        node[path[-1]] = _parse_env_value(raw)
    return data


# ----------------------------------------------------------------------------- loading


def _listener_specs() -> dict[str, type[ListenerConfig]]:
    from gateway.protocols import REGISTRY, get_protocol

    return {name: get_protocol(name).config_class for name in REGISTRY}


def parse_config(data: Mapping[str, Any], source: str = "<dict>") -> GatewayConfig:
    """A validated GatewayConfig, or ConfigError listing every problem."""
    from gateway.backends import REGISTRY as BACKEND_TYPES
    from gateway.backends import get_backend_spec

    problems: list[str] = []
    top_known = {"server", "admin", "listeners", "backends", "routes"}
    for key in data:
        if key not in top_known:
            expected = ", ".join(sorted(top_known))
            problems.append(f"{key}: unknown section; expected one of {expected}")

    def table(key: str) -> Mapping[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            problems.append(f"{key}: got {_describe(value)}, expected a table")
            return {}
        return value

    server = build_dataclass(ServerConfig, table("server"), "server", problems) or ServerConfig()
    admin = build_dataclass(AdminConfig, table("admin"), "admin", problems) or AdminConfig()

    specs = _listener_specs()
    listeners: dict[str, ListenerConfig] = {}
    for name, section in table("listeners").items():
        where = f"listeners.{name}"
        if name not in specs:
            problems.append(
                f"{where}: unknown protocol {name!r}; expected one of {', '.join(sorted(specs))}"
            )
            continue
        if not isinstance(section, dict):
            problems.append(f"{where}: got {_describe(section)}, expected a table")
            continue
        cfg = build_dataclass(specs[name], section, where, problems)
        if cfg is not None:
            listeners[name] = cfg

    backends: dict[str, BackendConfig] = {}
    for name, section in table("backends").items():
        where = f"backends.{name}"
        if not isinstance(section, dict):
            problems.append(f"{where}: got {_describe(section)}, expected a table")
            continue
        section = dict(section)
        type_name = section.pop("type", None)
        if type_name not in BACKEND_TYPES:
            problems.append(
                f"{where}.type: got {type_name!r}, expected one of "
                f"{', '.join(sorted(BACKEND_TYPES))}"
            )
            continue
        spec = get_backend_spec(type_name)
        options = build_dataclass(spec.config_class, section, where, problems)
        if options is not None:
            backends[name] = BackendConfig(name, type_name, options)
    if not backends and not any(p.startswith("backends.") for p in problems):
        backends["default"] = BackendConfig(
            "default", "embedded", get_backend_spec("embedded").config_class()
        )

    routes: list[RouteConfig] = []
    raw_routes = data.get("routes", [])
    if not isinstance(raw_routes, list):
        problems.append(f"routes: got {_describe(raw_routes)}, expected an array of tables")
        raw_routes = []
    for i, r in enumerate(raw_routes):
        where = f"routes[{i}]"
        if not isinstance(r, dict):
            problems.append(f"{where}: got {_describe(r)}, expected a table")
            continue
        route = build_dataclass(RouteConfig, r, where, problems)
        if route is None:
            continue
        if route.backend not in backends:
            problems.append(
                f"{where}.backend: got {route.backend!r}, expected one of the configured "
                f"backends ({', '.join(sorted(backends)) or 'none'})"
            )
        routes.append(route)
    if backends and not any(r.topic == "*" for r in routes):
        routes.append(RouteConfig("*", next(iter(backends))))

    problems.extend(check_tls(listeners))  # certificate and key load and belong together

    if problems:
        raise ConfigError(problems)
    return GatewayConfig(server, admin, listeners, backends, tuple(routes), source)


def load_config(
    path: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Read ``path`` (or only defaults when None), apply the environment, validate."""
    data: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError([f"{path}: file not found"]) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError([f"{path}: not valid TOML: {exc}"]) from None
    env = os.environ if environ is None else environ
    data = apply_env(data, env)
    config = parse_config(data, source)
    return apply_port_offset(config, env.get(PORT_OFFSET_ENV, ""))


def apply_port_offset(config: GatewayConfig, raw: str) -> GatewayConfig:
    """``config`` with ``raw`` (the value of GATEWAY_PORT_OFFSET, "" = none) added to the admin
    port and every listener's port that is not 0. Advertised ports stay as configured: they name
    an address outside the gateway (a balancer, a NAT)."""
    raw = raw.strip()
    if not raw:
        return config
    try:
        offset = int(raw)
    except ValueError:
        raise ConfigError(
            [f"{PORT_OFFSET_ENV}: got {raw!r}, expected an integer added to every port"]
        ) from None
    problems: list[str] = []

    def moved(key: str, port: int) -> int:
        if port == 0:
            return 0
        if not 1 <= port + offset <= 65535:
            problems.append(
                f"{key}: got {port} + {PORT_OFFSET_ENV} {offset} = {port + offset}, "
                "expected a port number 1..65535"
            )
            return port
        return port + offset

    admin = dataclasses.replace(config.admin, port=moved("admin.port", config.admin.port))
    listeners = {
        name: dataclasses.replace(
            cfg,
            port=moved(f"listeners.{name}.port", cfg.port),
        )
        for name, cfg in config.listeners.items()
    }
    if problems:
        raise ConfigError(problems)
    return dataclasses.replace(config, admin=admin, listeners=listeners)
