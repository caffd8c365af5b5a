"""``gateway repair``: open each embedded log of a config with repair allowed, and report.

A normal start refuses a partition with a missing segment or a damaged older segment (carrying
on would mean dropping intact data without anyone deciding to). This command is that decision:
it cuts each such partition at the damage, drops the segments after it, and prints one line for
each file it cut or dropped. Run it with the gateway stopped (the data directory lock enforces
that).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import structlog
import trio

from gateway.config import load_config
from gateway.fdlimit import raise_file_limit
from gateway.model import GatewayError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "repair",
        help="cut damaged embedded-log partitions at the damage (the gateway must be stopped)",
    )
    p.add_argument("--config", default=None, help="config file (default: config/gateway.toml)")
    p.add_argument("--backend", default=None, help="only this embedded backend")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gateway.backends.embedded import BACKEND, EmbeddedBackend

    config = load_config(args.config)
    raise_file_limit(structlog.get_logger("gateway.repair"))  # every partition is opened
    names = [
        name
        for name, bc in config.backends.items()
        if bc.type == "embedded" and args.backend in (None, name)
    ]
    if not names:
        which = f"named {args.backend!r} " if args.backend else ""
        print(f"error: no embedded backend {which}in {config.source}", file=sys.stderr)
        return 1

    async def repair(name: str) -> list[str]:
        backend = BACKEND.factory(name, config.backends[name].options, config)
        assert isinstance(backend, EmbeddedBackend)
        backend.repair = True
        failure: GatewayError | None = None
        async with trio.open_nursery() as nursery:
            try:
                await backend.open(nursery)
            except GatewayError as exc:  # e.g. locked by a running gateway: said in one line
                failure = exc
            else:
                await backend.close()
            nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return backend.repairs

    for name in names:
        done = trio.run(repair, name)
        if not done:
            print(f"{name}: nothing to repair")
            continue
        print(f"{name}: {len(done)} change(s):")
        for line in done:
            print(f"  {line}")
    return 0
