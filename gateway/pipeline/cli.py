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


class PipelineCliError(Exception):
    pass


def _bootstrap(args: argparse.Namespace) -> str:
    from gateway.pipeline.client import parse_bootstrap

    if getattr(args, "bootstrap", None):
        parse_bootstrap(args.bootstrap)  # a clear error before Spark starts
        return args.bootstrap
    from gateway.config import load_config

    path = args.config
    if path is None and os.path.exists("config/gateway.toml"):
        path = "config/gateway.toml"
    config = load_config(path)
    if not config.admin.enabled or config.admin.port == 0:
        raise PipelineCliError("no admin endpoint in the config: pass --bootstrap host:port")
    host = config.admin.host if config.admin.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    from gateway.admin_auth import TOKEN_ENV, client_token

    token = client_token(config)
    if token:  # the Spark workers this process starts inherit it (GatewayClient reads it)
        os.environ[TOKEN_ENV] = token
    return f"{host}:{config.admin.port}"


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


def cmd_export(args: argparse.Namespace) -> int:
    from gateway.pipeline.jobs import export_topic, progress

    bootstrap = _bootstrap(args)
    spark = _spark(args)
    t0 = time.perf_counter()
    with progress(spark, f"export {args.topic}"):
        n = export_topic(
            spark,
            bootstrap,
            args.topic,
            args.path,
            args.to,
            args.overwrite,
            **_read_options(args),
        )
    dt = time.perf_counter() - t0
    print(
        f"exported {n} record(s) of {args.topic} to {args.to} {args.path} in {dt:.1f} s "
        f"({n / dt if dt else 0:.0f} records/s)",
        file=sys.stderr,
    )
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from gateway.pipeline.jobs import import_path, progress

    bootstrap = _bootstrap(args)
    spark = _spark(args)
    with progress(spark, f"import {args.path}"):
        report = import_path(
            spark,
            args.path,
            bootstrap,
            args.topic,
            args.format,
            keep_partitions=not args.repartition,
            partitions=args.partitions,
        )
    print(
        f"imported {report.records} record(s) into {args.topic} in {report.seconds:.1f} s "
        f"({report.tasks} task(s), {report.status})",
        file=sys.stderr,
    )
    return 0


def cmd_copy(args: argparse.Namespace) -> int:
    from gateway.pipeline.client import parse_bootstrap
    from gateway.pipeline.jobs import copy_topic, progress

    parse_bootstrap(args.source)
    parse_bootstrap(args.target)
    spark = _spark(args)
    with progress(spark, f"copy {args.topic}"):
        report = copy_topic(
            spark,
            args.topic,
            args.source,
            args.target,
            args.to_topic,
            keep_partitions=not args.repartition,
            **_read_options(args),
        )
    print(
        f"copied {report.records} record(s) of {args.topic} from {args.source} to "
        f"{args.target}/{args.to_topic or args.topic} in {report.seconds:.1f} s ({report.status})",
        file=sys.stderr,
    )
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from gateway.pipeline.jobs import format_stats, progress, stats_chart, topic_stats

    bootstrap = _bootstrap(args)
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
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except PipelineCliError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except Exception as exc:
            from gateway.pipeline.client import GatewayClientError
            from gateway.pipeline.options import OptionError

            if isinstance(exc, GatewayClientError | OptionError | ValueError | OSError):
                print(f"error: {exc}", file=sys.stderr)
                return 1
            raise

    return run


def add_pipeline_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``pipeline`` and its subcommands to the ``gateway`` CLI's subparsers."""
    p = subparsers.add_parser("pipeline", help="Spark jobs: export, import, copy, stats")
    psub = p.add_subparsers(dest="pipeline_cmd", required=True)

    def common(q: argparse.ArgumentParser, gateway: bool = True) -> argparse.ArgumentParser:
        if gateway:
            q.add_argument(
                "--bootstrap", help="the gateway's admin endpoint host:port (default: --config)"
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
    q.add_argument("--to", dest="target", required=True, help="target admin host:port")
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
