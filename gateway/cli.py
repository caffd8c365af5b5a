"""The ``gateway`` command line: serve, check-config, topics, produce, consume, groups, pipeline,
matrix, hash-password (``gateway --help`` lists them).

The data commands (topics, produce, consume, groups) go through the admin endpoint of a running
gateway with the same config when it answers, and otherwise open the backend directly (the
embedded log's directory lock keeps two writers apart). Every expected failure prints one line
and exits 2 (usage, configuration) or 1 (run time); ``--debug`` shows the traceback instead.
Each command is added by one ``add_*`` function below.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import trio

import gateway
from gateway.cli_admin import (
    AdminClient,
    admin_for,
    check_data_dirs,
    direct,
    no_gateway,
    serve_hint,
)
from gateway.cli_errors import RUNTIME, CliError, UsageError, explain
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.model import (
    CreateTopic,
    DeleteTopic,
    Fetch,
    ListOffsets,
    ListTopics,
    OffsetSpec,
    Partitioning,
    Produce,
    RecordBatch,
    now_us,
)
from gateway.repair import add_parser as add_repair_parser

DEFAULT_CONFIG = "config/gateway.toml"
MAX_BATCH_BYTES = 32 << 20  # produce batches: half the admin endpoint's body limit

__all__ = ["AdminClient", "CliError", "build_parser", "main"]


def _load(args: argparse.Namespace) -> GatewayConfig:
    return load_config(args.config)


# ----------------------------------------------------------------------------- serve


def cmd_serve(args: argparse.Namespace) -> int:
    from gateway.observability import setup_logging
    from gateway.server import run_forever

    if args.config is None:
        # without a file the gateway would serve nothing but the admin port and make ./data
        raise UsageError(
            f"no config file: looked for {DEFAULT_CONFIG} in {os.getcwd()}; pass --config FILE "
            "(the repository's config/gateway.toml serves every protocol on loopback)"
        )
    config = _load(args)
    setup_logging(config.server.log_format, config.server.log_level)
    check_data_dirs(config)
    if getattr(args, "workers", 1) > 1:
        from gateway.workers import WorkersError, run_workers

        try:
            return run_workers(config, args.workers)
        except WorkersError as exc:
            raise UsageError(f"gateway serve: {exc}") from None
    return run_forever(config)


def add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the gateway")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing every port with SO_REUSEPORT (shared backends only)",
    )
    p.set_defaults(func=cmd_serve)


# ----------------------------------------------------------------------------- check-config


def cmd_check_config(args: argparse.Namespace) -> int:
    from gateway.cli_checks import environment_problems

    path = args.file or args.config
    if path is None:
        raise UsageError("check-config needs a file: gateway check-config FILE (or --config FILE)")
    try:
        config = load_config(path)
        problems = [] if args.file_only else environment_problems(config)
    except ConfigError as exc:
        problems = exc.problems
    if problems:
        print(f"{path}: {len(problems)} problem(s)", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 2
    listeners = ", ".join(
        f"{n}={c.host}:{c.port}" for n, c in config.listeners.items() if c.enabled
    )
    print(
        f"{path}: ok (listeners: {listeners or 'none'}; "
        f"backends: {', '.join(f'{n}={b.type}' for n, b in config.backends.items())}"
        f"{'' if args.file_only else '; data directories writable, ports free'})"
    )
    return 0


def add_check_config(sub: Any) -> None:
    p = sub.add_parser(
        "check-config",
        help="validate a config, its data directories and ports; exit 2 listing every problem",
    )
    p.add_argument("file", nargs="?", default=None, help="the config file (or --config)")
    p.add_argument(
        "--file-only",
        action="store_true",
        help="check the file alone, not this machine's directories and ports (a config for "
        "another machine, e.g. a container's)",
    )
    p.set_defaults(func=cmd_check_config)


# ----------------------------------------------------------------------------- topics


def cmd_topics(args: argparse.Namespace) -> int:
    config = _load(args)
    admin = admin_for(config)
    if args.topics_cmd == "create":
        if admin:
            info = admin.request(
                "POST", "/v1/topics", {"name": args.name, "partitions": args.partitions}
            )
            name, partitions = info["name"], info["partitions"]
        else:
            t = direct(config, lambda core: core.execute(CreateTopic(args.name, args.partitions)))
            name, partitions = t.name, t.partitions
        print(f"created {name} with {partitions} partition(s)")
        return 0
    if args.topics_cmd == "delete":
        if admin:
            admin.request("DELETE", f"/v1/topics/{quote(args.name, safe='')}")
        else:
            direct(config, lambda core: core.execute(DeleteTopic(args.name)))
        print(f"deleted {args.name}")
        return 0
    if admin:
        topics = [(t["name"], t["partitions"]) for t in admin.request("GET", "/v1/topics")]
    else:
        topics = [
            (t.name, t.partitions) for t in direct(config, lambda core: core.execute(ListTopics()))
        ]
    for name, partitions in topics:
        print(f"{name}\t{partitions}")
    return 0


def add_topics(sub: Any) -> None:
    p = sub.add_parser("topics", help="create, list or delete topics")
    tsub = p.add_subparsers(dest="topics_cmd", required=True, metavar="{create,list,delete}")
    c = tsub.add_parser("create", help="create a topic")
    c.add_argument("name")
    c.add_argument("--partitions", type=int, default=None, help="default: the server's")
    c.set_defaults(func=cmd_topics)
    c = tsub.add_parser("list", help="print NAME<TAB>PARTITIONS per topic")
    c.set_defaults(func=cmd_topics)
    c = tsub.add_parser("delete", help="delete a topic and its records")
    c.add_argument("name")
    c.set_defaults(func=cmd_topics)


# ----------------------------------------------------------------------------- produce


def _input_lines(stream: Any) -> Iterator[bytes]:
    """Lines of a binary stream as they arrive (one buffered read at a time)."""
    while True:
        line = stream.readline()
        if not line:
            return
        yield line


def cmd_produce(args: argparse.Namespace) -> int:
    from gateway.cli_progress import ProgressLine
    from gateway.cli_records import batches

    config = _load(args)
    if not 1 <= args.batch_bytes <= MAX_BATCH_BYTES:
        raise UsageError(
            f"--batch-bytes: got {args.batch_bytes}, expected 1..{MAX_BATCH_BYTES} "
            "(a request to the gateway is at most 64 MiB)"
        )
    if args.batch_records < 1:
        raise UsageError(f"--batch-records: got {args.batch_records}, expected at least 1")
    source = batches(
        _input_lines(sys.stdin.buffer),
        args.format,
        args.keyed,
        args.partition,
        args.batch_records,
        args.batch_bytes,
    )
    progress = ProgressLine(sys.stderr) if sys.stderr.isatty() else None
    total = 0

    def tick(n: int) -> None:
        nonlocal total
        total += n
        if progress is not None:
            rate = total / progress.elapsed() if progress.elapsed() > 0 else 0.0
            progress.show(f"produce {args.topic}: {total:,} records, {rate:,.0f} records/s")

    admin = admin_for(config)
    if admin:
        with admin.data_client() as client:
            for partition, records in source:
                tick(client.produce_batch(args.topic, records, partition))
    else:

        async def run(core: Any) -> None:
            await core.topic(args.topic, create=True)
            for partition, records in source:
                ts = now_us()
                stamped = [
                    r if r.timestamp_us >= 0 else r._replace(timestamp_us=ts) for r in records
                ]
                res = await core.execute(
                    Produce(
                        args.topic,
                        RecordBatch(stamped),
                        partition=partition,
                        partitioning=Partitioning.KEY_HASH,
                    )
                )
                tick(sum(a.last_offset - a.base_offset + 1 for a in res.appends))

        direct(config, run)
    if progress is not None:
        progress.end()
    if total == 0:
        print("nothing to produce (stdin was empty)", file=sys.stderr)
    else:
        print(f"produced {total} record(s) to {args.topic}", file=sys.stderr)
    return 0


def add_produce(sub: Any) -> None:
    p = sub.add_parser("produce", help="append the lines of stdin to a topic, in bounded batches")
    p.add_argument("topic")
    p.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text: a line is a value (or key<TAB>value with --keyed); json: a line is a "
        "record object as `consume --format json` prints it",
    )
    p.add_argument("--keyed", action="store_true", help="text lines are key<TAB>value")
    p.add_argument("--partition", type=int, default=None, help="default: by key (round-robin)")
    p.add_argument(
        "--batch-bytes", type=int, default=1 << 20, help="bytes per request (default 1 MiB)"
    )
    p.add_argument(
        "--batch-records", type=int, default=10_000, help="records per request (default 10000)"
    )
    p.set_defaults(func=cmd_produce)


# ----------------------------------------------------------------------------- consume


class _Source:
    """Offsets and records of a topic, through the admin API or a backend opened here."""

    async def partitions(self, topic: str) -> list[tuple[int, int, int]]:
        """``(partition, log start offset, high watermark)`` per partition."""
        raise NotImplementedError

    async def fetch(
        self, topic: str, partition: int, offset: int, max_records: int, max_wait_ms: int
    ) -> list[Any]:
        """Records with ``offset, timestamp_us, key, value, headers``."""
        raise NotImplementedError


class _AdminSource(_Source):
    def __init__(self, client: Any) -> None:
        self.client = client

    async def partitions(self, topic: str) -> list[tuple[int, int, int]]:
        return [
            (p.partition, p.log_start_offset, p.high_watermark) for p in self.client.offsets(topic)
        ]

    async def fetch(
        self, topic: str, partition: int, offset: int, max_records: int, max_wait_ms: int
    ) -> list[Any]:
        return self.client.fetch(
            topic, partition, offset, max_records, max_wait_ms=max_wait_ms
        ).records


class _CoreSource(_Source):
    def __init__(self, core: Any) -> None:
        self.core = core

    async def partitions(self, topic: str) -> list[tuple[int, int, int]]:
        info = await self.core.topic(topic)
        out = []
        for p in range(info.partitions):
            r = await self.core.execute(ListOffsets(topic, p, OffsetSpec.LATEST))
            out.append((p, r.log_start_offset, r.high_watermark))
        return out

    async def fetch(
        self, topic: str, partition: int, offset: int, max_records: int, max_wait_ms: int
    ) -> list[Any]:
        res = await self.core.execute(Fetch(topic, partition, offset, max_records=max_records))
        return list(res.records)


async def _consume(source: _Source, args: argparse.Namespace) -> None:
    from gateway.cli_records import record_to_json, record_to_text

    out = sys.stdout.buffer
    limit = args.max if args.max is not None else 1 << 62
    parts = await source.partitions(args.topic)
    if args.partition is not None:
        if args.partition not in [p for p, _, _ in parts]:
            raise CliError(f"topic {args.topic} has no partition {args.partition}")
        parts = [x for x in parts if x[0] == args.partition]
    offsets = {p: (start if args.from_beginning else hw) for p, start, hw in parts}
    ends = {p: hw for p, _, hw in parts}
    got = 0
    idle = False
    while got < limit and offsets:
        fetched_any = False
        for p in list(offsets):
            if got >= limit:
                break
            if not args.follow and offsets[p] >= ends[p]:
                del offsets[p]
                continue
            wait = max(50, 1000 // len(offsets)) if args.follow and idle else 0
            recs = await source.fetch(args.topic, p, offsets[p], min(1000, limit - got), wait)
            if not recs:
                if not args.follow:
                    del offsets[p]
                continue
            fetched_any = True
            recs = recs[: limit - got]
            if args.format == "json":
                lines = [
                    record_to_json(
                        args.topic, p, r.offset, r.timestamp_us, r.key, r.value, r.headers
                    ).encode()
                    + b"\n"
                    for r in recs
                ]
            else:
                lines = [record_to_text(r.key, r.value, args.keyed) for r in recs]
            out.write(b"".join(lines))
            out.flush()
            got += len(recs)
            offsets[p] = recs[-1].offset + 1
        idle = not fetched_any


def cmd_consume(args: argparse.Namespace) -> int:
    config = _load(args)
    admin = admin_for(config)
    try:
        if admin:
            with admin.data_client() as client:
                trio.run(_consume, _AdminSource(client), args)
        elif args.follow:
            raise CliError(
                f"{no_gateway(config)}: --follow needs a running gateway ({serve_hint(config)})"
            )
        else:

            async def run(core: Any) -> None:
                await _consume(_CoreSource(core), args)

            direct(config, run)
    except KeyboardInterrupt:
        if args.follow:
            return 0  # the way to stop following
        raise
    return 0


def add_consume(sub: Any) -> None:
    p = sub.add_parser("consume", help="print a topic's records (values, or JSON per record)")
    p.add_argument("topic")
    p.add_argument(
        "--from-beginning", action="store_true", help="start at the oldest record (default: new)"
    )
    p.add_argument("--follow", "-f", action="store_true", help="keep waiting for new records")
    p.add_argument("--max", type=int, default=None, help="stop after this many records")
    p.add_argument("--partition", type=int, default=None, help="only this partition")
    p.add_argument("--keyed", action="store_true", help="text: print key<TAB>value")
    p.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="json: one object per record (topic, partition, offset, timestamp_us, key, value, "
        'headers; bytes as UTF-8, else {"base64": ...})',
    )
    p.set_defaults(func=cmd_consume)


# ----------------------------------------------------------------------------- parser


def _leaf_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
        return
    for action in subs:
        for child in dict.fromkeys(action.choices.values()):
            yield from _leaf_parsers(child)


class _Formatter(argparse.HelpFormatter):
    """One line per command in ``gateway --help`` (argparse measures the command names without
    the extra indent it prints them with, and wraps the longest)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=100)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction):
            names = [len(c.metavar or c.dest) for c in action._get_subactions()]
            if names:
                longest = max(names) + self._current_indent + 2 * self._indent_increment
                self._action_max_length = max(self._action_max_length, longest)


def build_parser() -> argparse.ArgumentParser:
    from gateway.groups_cli import add_groups_parser
    from gateway.interop.cli import add_matrix_parser
    from gateway.pipeline.cli import add_pipeline_parser
    from gateway.protocols.iggy.auth import add_cli as add_iggy_cli

    parser = argparse.ArgumentParser(
        prog="gateway",
        formatter_class=_Formatter,
        description="The polyglot broker gateway: Kafka 0.8, Iggy, TANK, Liftbridge and Cursus "
        "in front of pluggable backends.",
        epilog="Every command takes --config FILE (default: config/gateway.toml if it exists) "
        "and --debug (show the traceback of a failure). Exit status: 0 ok, 1 a failure at run "
        "time, 2 a usage or configuration mistake.",
    )
    parser.add_argument("--version", action="version", version=f"gateway {gateway.__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of failures")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve(sub)
    add_check_config(sub)
    add_topics(sub)
    add_produce(sub)
    add_consume(sub)
    add_groups_parser(sub)  # gateway groups list|describe|reset-offsets (gateway/groups_cli.py)
    add_pipeline_parser(sub)  # gateway pipeline export|import|copy|stats (gateway/pipeline/cli.py)
    add_matrix_parser(sub)  # gateway matrix (gateway/interop/cli.py)
    add_iggy_cli(sub)  # gateway hash-password
    add_repair_parser(sub)  # gateway repair (gateway/repair.py)
    for leaf in _leaf_parsers(parser):
        if "--config" not in leaf._option_string_actions:
            leaf.add_argument(
                "--config",
                default=None,
                help=f"config file (default: {DEFAULT_CONFIG} if it exists)",
            )
        leaf.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        if args.command != "serve":
            from gateway.observability import setup_logging

            # data commands: keep stdout for data; backend notices go to stderr, warnings and up
            setup_logging("console", "warning")
        if getattr(args, "config", "x") is None and os.path.exists(DEFAULT_CONFIG):
            args.config = DEFAULT_CONFIG
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, where a closed stdout is caught, not at exit
        return code
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            raise  # argparse (2 with its usage line), --help, --version
        if debug:
            raise
        return _fail(exc)
    except BaseException as exc:  # noqa: BLE001 - every failure ends as one line
        if debug:
            raise
        return _fail(exc)


def _fail(exc: BaseException) -> int:
    failure = explain(exc)
    if failure.message:
        try:
            print(f"error: {failure.message}", file=sys.stderr)
        except OSError:
            pass
    if isinstance(exc, BrokenPipeError) or failure.code == 0:
        _quiet_stdout()
    return failure.code if failure.code is not None else RUNTIME


def _quiet_stdout() -> None:
    """After the reader of stdout went away: no second BrokenPipeError at exit's flush."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
