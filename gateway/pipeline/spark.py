"""A quiet local Spark session with the ``gateway`` data source registered.

Sets what Spark needs on a small machine before the JVM starts: ``PYSPARK_PYTHON`` (workers run
this interpreter, which has the project installed), ``SPARK_LOCAL_IP`` (loopback: no reverse DNS
lookup), a log4j2 file that silences Spark below errors, no UI, no progress bars, and a scratch
directory for ``spark.local.dir``, the warehouse and ``java.io.tmpdir``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = error
"""

# The throughput collector: the pipeline's jobs are batch work, where pause times matter less than
# the CPU the collector takes. Measured on the export (bench/pipeline.py, together with
# ``jobs.EXPORT_PARQUET_OPTIONS``): ~1 CPU-second less JVM time per 1M records than G1, which the
# JVM picks on a 2-CPU machine (docs/decisions.md). C2 only (no tiered compilation): Spark's
# driver code, compiled again by C1 and C2 in every query, took 1.6 JIT CPU-seconds per 1M-record
# export after two warm-ups, 0.3-0.4 without the tiers (bench/README.md, "Spark export").
DEFAULT_JAVA_OPTIONS = "-XX:+UseParallelGC -XX:-TieredCompilation"


def spark_session(
    master: str = "local[2]",
    scratch: str | os.PathLike[str] | None = None,
    app_name: str = "gateway-pipeline",
    driver_memory: str = "1g",
    extra_conf: dict[str, str] | None = None,
    java_options: str = DEFAULT_JAVA_OPTIONS,
) -> Any:
    """Start (or return the running) Spark session and register the ``gateway`` source.

    ``getOrCreate`` returns an existing session unchanged, so the static settings here only take
    effect for the first session of the process. ``java_options`` go to the driver's and the
    executors' JVMs after the logging and temp-dir options (default
    :data:`DEFAULT_JAVA_OPTIONS`; pass ``""`` for the JVM's own defaults)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    base = Path(scratch) if scratch is not None else Path(tempfile.mkdtemp(prefix="gw-spark-"))
    base.mkdir(parents=True, exist_ok=True)
    (base / "tmp").mkdir(exist_ok=True)
    log4j = base / "log4j2.properties"
    log4j.write_text(LOG4J2)
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Djava.io.tmpdir={base / 'tmp'}"
    if java_options:
        java_opts = f"{java_opts} {java_options}"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", str(base / "local"))
        .config("spark.sql.warehouse.dir", str(base / "warehouse"))
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
    )
    for k, v in (extra_conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def register(spark: Any) -> None:
    from gateway.pipeline.source import GatewayDataSource

    spark.dataSource.register(GatewayDataSource)
