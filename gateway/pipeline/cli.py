"""``gateway pipeline export | import | copy | stats``: Spark jobs against running gateways.

Hooked into ``gateway/cli.py`` by :func:`add_pipeline_parser`. PySpark is imported only when a
pipeline command runs (it is the optional ``spark`` extra). A gateway is addressed by its admin
endpoint: ``--bootstrap host:port``, or the admin section of ``--config``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from gateway.cli_errors import CliError, UsageError


class PipelineCliError(CliError):
    pass


def _bootstrap(args: argparse.Namespace) -> str:
    from gateway.pipeline.client import parse_bootstrap

    if getattr(args, "bootstrap", None):
        try:
            parse_bootstrap(args.bootstrap)  # a clear error before Spark starts
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return args.bootstrap
    from gateway.config import load_config

    path = args.config
    if path is None and os.path.exists("config/gateway.toml"):
        path = "config/gateway.toml"
    config = load_config(path)
    if not config.admin.enabled or config.admin.port == 0:
        raise UsageError("no admin endpoint in the config: pass --bootstrap host:port")
    host = config.admin.host if config.admin.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    from gateway.admin_auth import TOKEN_ENV, client_token
    from gateway.admin_tls import from_config

    token = client_token(config)
    if token:  # the Spark workers this process starts inherit it (GatewayClient reads it)
        os.environ[TOKEN_ENV] = token
    tls = from_config(config.admin, host)
    if tls is None:
        return f"{host}:{config.admin.port}"
    os.environ.update(tls.env())  # likewise the TLS settings, for the https:// bootstrap
    return f"https://{host}:{config.admin.port}"


def _reachable(bootstrap: str, flag: str = "--bootstrap") -> str:
    """``bootstrap`` when a gateway answers there; a clear error before Spark starts if not."""
    from gateway.pipeline.client import GatewayClient, parse_bootstrap

    try:
        parse_bootstrap(bootstrap)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    with GatewayClient(bootstrap, timeout=5.0) as client:
        if not client.healthy():
            raise PipelineCliError(
                f"no gateway answers at {bootstrap}: start it, or give {flag} host:port of a "
                "running gateway's admin endpoint"
            )
    return bootstrap


def _total(bootstrap: str, topic: str, args: argparse.Namespace) -> int | None:
    """The records a read of the whole topic covers (None for a narrower range: unknown)."""
    from gateway.pipeline.client import GatewayClient, GatewayClientError

    if any(v is not None for v in _read_options(args).values()):
        return None
    with GatewayClient(bootstrap, timeout=10.0) as client:
        try:
            return sum(p.high_watermark - p.log_start_offset for p in client.offsets(topic))
        except GatewayClientError as exc:
            raise PipelineCliError(f"{bootstrap}: {exc.message}") from None


def _local_target(path: str) -> str | None:
    """The local file system path of an export target (None for s3://, hdfs://, ...)."""
    if path.startswith("file://"):
        return path[len("file://") :]
    return None if "://" in path else path


def _spark(args: argparse.Namespace) -> Any:
    try:
        from gateway.pipeline.spark import spark_session
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise PipelineCliError(
            f"the pipeline needs the spark extra (pip install 'gateway[spark]'): {exc}"
        ) from None
    print(f"starting Spark ({args.master}) ...", file=sys.stderr)
    return spark_session(args.master)


def _read_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "startingOffsets": args.starting_offsets,
        "endingOffsets": args.ending_offsets,
        "startingTimestamp": args.starting_timestamp,
        "endingTimestamp": args.ending_timestamp,
    }


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds if seconds > 0 else 0:,.0f} records/s"


def cmd_export(args: argparse.Namespace) -> int:
    from gateway.pipeline.jobs import export_topic, progress

    started = time.monotonic()
    bootstrap = _reachable(_bootstrap(args))
    local = _local_target(args.path)
    if local is not None and os.path.exists(local) and not args.overwrite:
        raise PipelineCliError(
            f"{args.path} already exists: pass --overwrite to replace it, or choose another path"
        )
    total = _total(bootstrap, args.topic, args)
    spark = _spark(args)
    with progress(spark, f"export {args.topic}", total=total, started=started):
        n = export_topic(
            spark,
            bootstrap,
            args.topic,
            args.path,
            args.to,
            args.overwrite,
            **_read_options(args),
        )
    dt = time.monotonic() - started
    print(
        f"exported {n} record(s) of {args.topic} to {args.to} {args.path} in {dt:.1f} s "
        f"with Spark's start ({_rate(n, dt)})",
        file=sys.stderr,
    )
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from gateway.pipeline.jobs import import_path, progress

    started = time.monotonic()
    bootstrap = _reachable(_bootstrap(args))
    local = _local_target(args.path)
    if local is not None and not os.path.exists(local):
        raise PipelineCliError(f"{args.path} does not exist: nothing to import")
    spark = _spark(args)
    with progress(spark, f"import {args.path}", started=started):
        report = import_path(
            spark,
            args.path,
            bootstrap,
            args.topic,
            args.format,
            keep_partitions=not args.repartition,
            partitions=args.partitions,
        )
    dt = time.monotonic() - started
    print(
        f"imported {report.records} record(s) into {args.topic} in {dt:.1f} s with Spark's "
        f"start ({_rate(report.records, dt)}; {report.tasks} task(s), {report.status})",
        file=sys.stderr,
    )
    return 0


def cmd_copy(args: argparse.Namespace) -> int:
    from gateway.pipeline.jobs import copy_topic, progress

    started = time.monotonic()
    source = _reachable(args.source, "--from")
    if args.target is None:
        target = _reachable(_bootstrap(args), "--to")
    else:
        target = _reachable(args.target, "--to")
    total = _total(source, args.topic, args)
    spark = _spark(args)
    with progress(spark, f"copy {args.topic}", total=total, started=started):
        report = copy_topic(
            spark,
            args.topic,
            source,
            target,
            args.to_topic,
            keep_partitions=not args.repartition,
            **_read_options(args),
        )
    dt = time.monotonic() - started
    print(
        f"copied {report.records} record(s) of {args.topic} from {source} to "
        f"{target}/{args.to_topic or args.topic} in {dt:.1f} s with Spark's start "
        f"({_rate(report.records, dt)}; {report.status})",
        file=sys.stderr,
    )
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from gateway.pipeline.jobs import format_stats, progress, stats_chart, topic_stats

    bootstrap = _reachable(_bootstrap(args))
    spark = _spark(args)
    with progress(spark, f"stats {args.topic}"):
        stats = topic_stats(spark, bootstrap, args.topic, **_read_options(args))
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        print(format_stats(stats))
    if args.png:
        stats_chart(stats, args.png)
        print(f"wrote chart {args.png}", file=sys.stderr)
    return 0


def _run(func: Any) -> Any:
    """Failures of the pipeline's own checks as one line (``gateway.cli`` prints them)."""

    def run(args: argparse.Namespace) -> int:
        from gateway.pipeline.options import OptionError

        try:
            return func(args)
        except OptionError as exc:
            raise UsageError(str(exc)) from None
        except ValueError as exc:
            raise PipelineCliError(str(exc)) from None

    return run


def add_pipeline_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``pipeline`` and its subcommands to the ``gateway`` CLI's subparsers."""
    p = subparsers.add_parser("pipeline", help="Spark jobs: export, import, copy, stats")
    psub = p.add_subparsers(dest="pipeline_cmd", required=True)

    def common(q: argparse.ArgumentParser, gateway: bool = True) -> argparse.ArgumentParser:
        if gateway:
            q.add_argument(
                "--bootstrap",
                help="the gateway's admin endpoint host:port, https://host:port when it speaks "
                "TLS (default: --config)",
            )
            q.add_argument("--config", default=None, help="config file naming the admin endpoint")
        q.add_argument(
            "--master", default="local[2]", help="Spark master (default local[2]; a cluster URL)"
        )
        return q

    def ranges(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--starting-offsets", help="earliest (default), latest or JSON per partition"
        )
        q.add_argument("--ending-offsets", help="latest (default) or JSON per partition")
        q.add_argument("--starting-timestamp", help="ms since the epoch or ISO-8601")
        q.add_argument("--ending-timestamp", help="ms since the epoch or ISO-8601")

    q = common(psub.add_parser("export", help="write a topic to Parquet (or JSON lines)"))
    q.add_argument("topic")
    q.add_argument("--to", choices=["parquet", "json"], default="parquet")
    q.add_argument("path")
    q.add_argument("--overwrite", action="store_true")
    ranges(q)
    q.set_defaults(func=_run(cmd_export))

    q = common(psub.add_parser("import", help="append Parquet (or JSON) records to a topic"))
    q.add_argument("path")
    q.add_argument("--topic", required=True)
    q.add_argument("--format", choices=["parquet", "json"], default="parquet")
    q.add_argument(
        "--partitions", type=int, default=None, help="create the topic with this many partitions"
    )
    q.add_argument(
        "--repartition",
        action="store_true",
        help="ignore the data's partition column (spread by key hash)",
    )
    q.set_defaults(func=_run(cmd_import))

    q = common(psub.add_parser("copy", help="copy a topic between two gateways"), gateway=False)
    q.add_argument("topic")
    q.add_argument("--from", dest="source", required=True, help="source admin host:port")
    q.add_argument(
        "--to",
        dest="target",
        default=None,
        help="target admin host:port (default: the admin endpoint of --config)",
    )
    q.add_argument("--config", default=None, help="config file naming the target (without --to)")
    q.add_argument("--to-topic", default=None, help="the target topic (default: the same name)")
    q.add_argument("--repartition", action="store_true", help="spread by key hash on the target")
    ranges(q)
    q.set_defaults(func=_run(cmd_copy))

    q = common(psub.add_parser("stats", help="records per hour, key cardinality, sizes"))
    q.add_argument("topic")
    q.add_argument("--png", default=None, help="also write a chart to this PNG file")
    q.add_argument("--json", action="store_true", help="print JSON")
    ranges(q)
    q.set_defaults(func=_run(cmd_stats))
    return p
