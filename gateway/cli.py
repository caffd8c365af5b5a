"""The command line: ``gateway serve | check-config | topics | produce | consume``.

The data commands (topics, produce, consume) go through the admin endpoint of a running gateway
with the same config when it answers, and otherwise open the backend directly (the embedded log's
directory lock keeps two writers apart).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.model import (
    CreateTopic,
    Fetch,
    GatewayError,
    ListOffsets,
    ListTopics,
    OffsetSpec,
    Partitioning,
    Produce,
    Record,
    RecordBatch,
    now_us,
)
from gateway.pipeline.cli import add_pipeline_parser

DEFAULT_CONFIG = "config/gateway.toml"


# ----------------------------------------------------------------------------- clients


class AdminClient:
    """Talks to a running gateway's admin endpoint."""

    def __init__(
        self, host: str, port: int, timeout: float = 30.0, token: str | None = None
    ) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.token = token  # the data API's bearer token (gateway/admin_auth.py client_token)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"content-type": "application/json"} if payload is not None else {}
            if self.token:
                headers["authorization"] = f"Bearer {self.token}"
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        obj = json.loads(data) if data else None
        if resp.status >= 400:
            message = obj.get("error") if isinstance(obj, dict) else data.decode(errors="replace")
            raise CliError(f"gateway answered {resp.status}: {message}")
        return obj

    def alive(self) -> bool:
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=1.0)
            conn.request("GET", "/healthz")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
        except OSError:
            return False


class CliError(Exception):
    pass


def _admin_for(config: GatewayConfig) -> AdminClient | None:
    if not config.admin.enabled or config.admin.port == 0:
        return None
    host = config.admin.host if config.admin.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    from gateway.admin_auth import client_token

    client = AdminClient(host, config.admin.port, token=client_token(config))
    return client if client.alive() else None


def _direct(config: GatewayConfig, fn: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run ``fn(core)`` against the configured backends opened in this process."""
    from gateway.server import build_backends, build_core

    async def main() -> Any:
        backends = build_backends(config)
        async with trio.open_nursery() as nursery:
            try:
                for backend in backends.values():
                    await backend.open(nursery)
                return await fn(build_core(config, backends))
            finally:
                with trio.CancelScope(shield=True):
                    for backend in backends.values():
                        await backend.flush()
                        await backend.close()
                nursery.cancel_scope.cancel()

    return trio.run(main)


# ----------------------------------------------------------------------------- commands


def cmd_serve(args: argparse.Namespace) -> int:
    from gateway.observability import setup_logging
    from gateway.server import run_forever

    config = load_config(args.config)
    setup_logging(config.server.log_format, config.server.log_level)
    if getattr(args, "workers", 1) > 1:
        from gateway.workers import WorkersError, run_workers

        try:
            return run_workers(config, args.workers)
        except WorkersError as exc:
            print(f"gateway serve: {exc}", file=sys.stderr)
            return 2
    return run_forever(config)


def cmd_check_config(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file)
    except ConfigError as exc:
        print(f"{args.file}: {len(exc.problems)} problem(s)", file=sys.stderr)
        for p in exc.problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    listeners = ", ".join(
        f"{n}={c.host}:{c.port}" for n, c in config.listeners.items() if c.enabled
    )
    print(
        f"{args.file}: ok (listeners: {listeners or 'none'}; "
        f"backends: {', '.join(f'{n}={b.type}' for n, b in config.backends.items())})"
    )
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    admin = _admin_for(config)
    if args.topics_cmd == "create":
        if admin:
            info = admin.request(
                "POST", "/v1/topics", {"name": args.name, "partitions": args.partitions}
            )
            name, partitions = info["name"], info["partitions"]
        else:
            t = _direct(config, lambda core: core.execute(CreateTopic(args.name, args.partitions)))
            name, partitions = t.name, t.partitions
        print(f"created {name} with {partitions} partition(s)")
        return 0
    if admin:
        topics = [(t["name"], t["partitions"]) for t in admin.request("GET", "/v1/topics")]
    else:
        topics = [
            (t.name, t.partitions) for t in _direct(config, lambda core: core.execute(ListTopics()))
        ]
    for name, partitions in topics:
        print(f"{name}\t{partitions}")
    return 0


def _parse_line(line: str, keyed: bool) -> tuple[bytes | None, bytes]:
    if keyed:
        if "\t" not in line:
            raise CliError(f"--keyed expects key<TAB>value, got {line!r}")
        key, value = line.split("\t", 1)
        return key.encode(), value.encode()
    return None, line.encode()


def cmd_produce(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    pairs = [_parse_line(line.rstrip("\n"), args.keyed) for line in sys.stdin if line != "\n"]
    if not pairs:
        print("nothing to produce (stdin was empty)", file=sys.stderr)
        return 0
    admin = _admin_for(config)
    if admin:
        body = {
            "records": [
                {
                    "key": None if k is None else base64.b64encode(k).decode(),
                    "value": base64.b64encode(v).decode(),
                    "partition": args.partition,
                }
                for k, v in pairs
            ]
        }
        res = admin.request("POST", f"/v1/topics/{args.topic}/records", body)
        appends = [(a["partition"], a["base_offset"], a["last_offset"]) for a in res["appends"]]
    else:
        ts = now_us()
        batch = RecordBatch([Record(k, v, (), ts) for k, v in pairs])

        async def run(core: Any) -> Any:
            await core.topic(args.topic, create=True)
            return await core.execute(
                Produce(
                    args.topic, batch, partition=args.partition, partitioning=Partitioning.KEY_HASH
                )
            )

        res = _direct(config, run)
        appends = [(a.partition, a.base_offset, a.last_offset) for a in res.appends]
    for p, base, last in appends:
        print(
            f"produced {last - base + 1} record(s) to {args.topic}/{p} at offsets {base}..{last}",
            file=sys.stderr,
        )
    return 0


def _emit(records: list[tuple[bytes | None, bytes | None]], keyed: bool) -> None:
    out = sys.stdout.buffer
    for key, value in records:
        if keyed:
            out.write((key or b"") + b"\t")
        out.write((value or b"") + b"\n")
    out.flush()


def cmd_consume(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    admin = _admin_for(config)
    limit = args.max if args.max is not None else 1 << 62
    got = 0
    if admin:
        parts = admin.request("GET", f"/v1/topics/{args.topic}/offsets")
        for part in parts:
            if args.partition is not None and part["partition"] != args.partition:
                continue
            offset = part["log_start_offset"] if args.from_beginning else part["high_watermark"]
            while got < limit and offset < part["high_watermark"]:
                res = admin.request(
                    "GET",
                    f"/v1/topics/{args.topic}/records?partition={part['partition']}"
                    f"&offset={offset}&max={min(1000, limit - got)}",
                )
                recs = res["records"]
                if not recs:
                    break
                _emit(
                    [
                        (
                            None if r["key"] is None else base64.b64decode(r["key"]),
                            None if r["value"] is None else base64.b64decode(r["value"]),
                        )
                        for r in recs
                    ],
                    args.keyed,
                )
                got += len(recs)
                offset = recs[-1]["offset"] + 1
        return 0

    async def run(core: Any) -> None:
        nonlocal got
        info = await core.topic(args.topic)
        for p in range(info.partitions):
            if args.partition is not None and p != args.partition:
                continue
            spec = OffsetSpec.EARLIEST if args.from_beginning else OffsetSpec.LATEST
            offset = (await core.execute(ListOffsets(args.topic, p, spec))).offset
            while got < limit:
                res = await core.execute(
                    Fetch(args.topic, p, offset, max_records=min(1000, limit - got))
                )
                recs = res.records
                if not recs:
                    break
                _emit([(r.key, r.value) for r in recs], args.keyed)
                got += len(recs)
                offset = recs[-1].offset + 1

    _direct(config, run)
    return 0


# ----------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--config", default=None, help=f"config file (default: {DEFAULT_CONFIG} if it exists)"
        )
        return p

    p = with_config(sub.add_parser("serve", help="run the gateway"))
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing every port with SO_REUSEPORT (shared backends only)",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("check-config", help="validate a config file; exit 1 listing every problem")
    p.add_argument("file")
    p.set_defaults(func=cmd_check_config)

    p = sub.add_parser("topics", help="create or list topics")
    tsub = p.add_subparsers(dest="topics_cmd", required=True)
    c = with_config(tsub.add_parser("create"))
    c.add_argument("name")
    c.add_argument("--partitions", type=int, default=None)
    c.set_defaults(func=cmd_topics)
    c = with_config(tsub.add_parser("list"))
    c.set_defaults(func=cmd_topics)

    p = with_config(sub.add_parser("produce", help="produce lines from stdin"))
    p.add_argument("topic")
    p.add_argument("--keyed", action="store_true", help="lines are key<TAB>value")
    p.add_argument("--partition", type=int, default=None)
    p.set_defaults(func=cmd_produce)

    p = with_config(sub.add_parser("consume", help="print records, one value per line"))
    p.add_argument("topic")
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--max", type=int, default=None)
    p.add_argument("--partition", type=int, default=None)
    p.add_argument("--keyed", action="store_true", help="print key<TAB>value")
    p.set_defaults(func=cmd_consume)

    from gateway.groups_cli import add_groups_parser
    from gateway.interop.cli import add_matrix_parser
    from gateway.protocols.iggy.auth import add_cli as add_iggy_cli

    add_iggy_cli(sub)  # gateway hash-password
    add_pipeline_parser(sub)  # gateway pipeline export|import|copy|stats (gateway/pipeline/cli.py)
    add_matrix_parser(sub)  # gateway matrix (gateway/interop/cli.py)
    add_groups_parser(sub)  # gateway groups list|describe|reset-offsets (gateway/groups_cli.py)
    from gateway.repair import add_parser as add_repair_parser

    add_repair_parser(sub)  # gateway repair (gateway/repair.py)
    return parser


def main(argv: list[str] | None = None) -> int:
    import os

    args = build_parser().parse_args(argv)
    if args.command != "serve":
        from gateway.observability import setup_logging

        # data commands: keep stdout for data; backend notices go to stderr, warnings and up
        setup_logging("console", "warning")
    if getattr(args, "config", "x") is None and os.path.exists(DEFAULT_CONFIG):
        args.config = DEFAULT_CONFIG
    try:
        return args.func(args)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except GatewayError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
