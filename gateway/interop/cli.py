"""``gateway matrix``: the interoperability matrix against a running gateway.

    gateway matrix --config config/gateway.toml          # listeners from the config file
    gateway matrix --listener tank=127.0.0.1:11011 --listener cursus=127.0.0.1:9000
    gateway matrix --config gw.toml --markdown --output matrix.md
    gateway matrix --listener kafka=127.0.0.1:9092 --kafka-python /opt/kafka-venv/bin/python

The clients are one per protocol (kafka08, iggy, tank, liftbridge, cursus: in-repo clients on the
gateway's codecs) plus ``kafka``, today's Kafka client (confluent-kafka with its defaults) on the
same Kafka listener as kafka08. Every ordered pair of the clients found produces records through
one and consumes them through the other (a topic per pair,
``matrix-<n>-<producer>-to-<consumer>``). The table says pass/fail and records/s per pair. Exit
status 0 when every pair passed, 1 otherwise.

A config file's Kafka listener gives both kafka08 and kafka; kafka only when confluent-kafka is
found (in this Python, or the one ``--kafka-python`` names), else it says it left kafka out.

Afterwards the topics and consumer groups the run made are deleted through the gateway's admin
endpoint (``--admin HOST:PORT``, or the config's); ``--keep`` leaves them for a look.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import trio

# not .drivers: `gateway --help` and serve stay lean
from gateway.interop import CLIENTS, PROTOCOLS

DEFAULT_CONFIG = "config/gateway.toml"  # as gateway.cli


def _address(text: str) -> tuple[str, tuple[str, int]]:
    name, sep, addr = text.partition("=")
    host, _, port = addr.rpartition(":")
    if not sep or name not in CLIENTS or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(
            f"expected CLIENT=HOST:PORT with CLIENT one of {', '.join(CLIENTS)}: {text!r}"
        )
    return name, (host.strip("[]"), int(port))


def _admin_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def admin_from_config(path: str | None) -> tuple[str, int] | None:
    """The admin endpoint of a config file (a wildcard host reached on loopback), if any."""
    from gateway.config import load_config

    config = load_config(path)
    if not config.admin.enabled or not config.admin.port:
        return None
    host = config.admin.host if config.admin.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return host, config.admin.port


def clean_up(
    admin: tuple[str, int], prefix: str, config_path: str | None = None
) -> tuple[int, int, list[str]]:
    """Delete the topics named ``prefix...`` and the groups made for them (their names hold the
    prefix) through the admin endpoint: (topics deleted, groups deleted, problems)."""
    from urllib.parse import quote

    from gateway.cli_admin import admin_client
    from gateway.cli_errors import CliError
    from gateway.config import load_config

    client = admin_client(*admin, load_config(config_path) if config_path else None)
    problems: list[str] = []
    topics = groups = 0
    try:
        names = [t["name"] for t in client.request("GET", "/v1/topics")]
        group_names = [g["name"] for g in client.request("GET", "/v1/groups")]
    except (CliError, OSError) as exc:
        return 0, 0, [f"cannot list them through {admin[0]}:{admin[1]}: {exc}"]
    for group in (g for g in group_names if prefix in g):
        try:
            client.request("DELETE", f"/v1/groups/{quote(group, safe='')}")
            groups += 1
        except (CliError, OSError) as exc:
            problems.append(f"group {group}: {exc}")
    for topic in (t for t in names if t.startswith(prefix)):
        try:
            client.request("DELETE", f"/v1/topics/{quote(topic, safe='')}")
            topics += 1
        except (CliError, OSError) as exc:
            problems.append(f"topic {topic}: {exc}")
    return topics, groups, problems


def addresses_from_config(path: str | None) -> tuple[dict[str, tuple[str, int]], str | None]:
    """(listener addresses, the protocol of an upstream default backend or None) of a config
    file; a wildcard host is reached on loopback."""
    from gateway.config import load_config

    config = load_config(path)
    found = {}
    for name, listener in config.listeners.items():
        if name in PROTOCOLS and listener.enabled and listener.port:
            host = listener.advertised_host or listener.host
            if host in ("0.0.0.0", "::", ""):
                host = "127.0.0.1"
            found[name] = (host, listener.advertised_port or listener.port)
    through = None
    catch_all = next((r.backend for r in config.routes if r.topic == "*"), None)
    backend = config.backends.get(catch_all or "") if catch_all else None
    if backend is not None and backend.type == "upstream":
        through = backend.options.protocol
    return found, through


def cmd_matrix(args: Any) -> int:
    from gateway.interop.drivers import confluent_python
    from gateway.interop.matrix import client_addresses, format_table, run_matrix

    addresses: dict[str, tuple[str, int]] = {}
    through = args.through
    config = args.matrix_config
    if config is None and not args.listener and os.path.exists(DEFAULT_CONFIG):
        config = DEFAULT_CONFIG
    kafka_python = confluent_python(args.kafka_python)
    if config is not None:
        found, configured_through = addresses_from_config(config)
        addresses.update(client_addresses(found))
        through = through or configured_through
        if "kafka" in addresses and kafka_python is None:
            del addresses["kafka"]
            print(
                "matrix: left out kafka (today's Kafka client): confluent-kafka is not "
                "installed in this Python; pip install confluent-kafka, or --kafka-python PATH",
                file=sys.stderr,
            )
    addresses.update(dict(args.listener or []))
    if args.protocols:
        addresses = {k: v for k, v in addresses.items() if k in args.protocols.split(",")}
    if len(addresses) < 1:
        print("no listeners: give --config or --listener CLIENT=HOST:PORT", file=sys.stderr)
        return 2
    options: dict[str, dict[str, str]] = {}
    if args.iggy_username:
        options["iggy"] = {"username": args.iggy_username, "password": args.iggy_password}
    if args.kafka_python:
        options["kafka"] = {"python": args.kafka_python}
    create_at = dict(args.create_at) if args.create_at else None
    chain = f", through an upstream {through}" if through else ""
    print(
        f"matrix: {len(addresses) ** 2} pairs of {', '.join(addresses)}, {args.records} records "
        f"each (keys, 2 headers, timestamps){chain}",
        file=sys.stderr,
    )
    admin = args.admin
    if admin is None and config is not None:
        admin = admin_from_config(config)
    prefix = f"matrix-{int(time.time() * 1000) % 10**9}-"
    results = trio.run(
        lambda: run_matrix(
            addresses,
            count=args.records,
            options=options,
            prefix=prefix,
            through=through,
            create_at=create_at,
        )
    )
    if args.keep:
        print(f"matrix: kept the topics {prefix}* and their groups (--keep)", file=sys.stderr)
    elif admin is None:
        print(
            f"matrix: left the topics {prefix}* and their groups: no admin endpoint to delete "
            "them (give --admin HOST:PORT or --config)",
            file=sys.stderr,
        )
    else:
        topics, groups, problems = clean_up(admin, prefix, config)
        print(f"matrix: deleted {topics} topic(s) and {groups} group(s) it made", file=sys.stderr)
        for problem in problems:
            print(f"matrix: could not delete {problem}", file=sys.stderr)
    table = format_table(results, markdown=args.markdown)
    print(table)
    if args.output:
        with open(args.output, "w") as f:
            f.write(format_table(results, markdown=True) + "\n")
    return 0 if all(r.ok for r in results) else 1


def add_matrix_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "matrix", help="run the interoperability matrix against a running gateway"
    )
    p.add_argument(
        "--config",
        dest="matrix_config",
        default=None,
        help=f"config file naming the listeners (default without --listener: {DEFAULT_CONFIG})",
    )
    p.add_argument(
        "--listener",
        action="append",
        type=_address,
        metavar="CLIENT=HOST:PORT",
        help=f"a client and the listener it uses (repeat; overrides the config's); CLIENT one "
        f"of {', '.join(CLIENTS)} (kafka: today's Kafka client, on the kafka08 listener)",
    )
    p.add_argument(
        "--protocols", help=f"comma-separated subset of the clients to pair ({','.join(CLIENTS)})"
    )
    p.add_argument("--records", type=int, default=100, help="records per pair (default 100)")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--output", help="also write the Markdown table to this file")
    p.add_argument(
        "--through",
        choices=PROTOCOLS,
        help="the gateway stores through an upstream backend of this protocol (default: from "
        "the config): compare only the fields it keeps",
    )
    p.add_argument(
        "--create-at",
        action="append",
        type=_address,
        metavar="CLIENT=HOST:PORT",
        help="make the topics through this listener instead (e.g. the upstream server's)",
    )
    p.add_argument(
        "--admin",
        type=_admin_address,
        metavar="HOST:PORT",
        help="the gateway's admin endpoint, to delete the topics and groups made (default: the "
        "config's)",
    )
    p.add_argument("--keep", action="store_true", help="keep the topics and groups made")
    p.add_argument("--iggy-username", default="", help="log the Iggy driver in (0.6 dialect)")
    p.add_argument("--iggy-password", default="")
    p.add_argument(
        "--kafka-python",
        metavar="PATH",
        help="a Python that has confluent-kafka, to run the kafka client (default: this one)",
    )
    p.set_defaults(func=cmd_matrix)
    return p
