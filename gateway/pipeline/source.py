"""The ``gateway`` PySpark data source: batch read, batch write, Structured Streaming read.

    spark.dataSource.register(GatewayDataSource)
    df = (spark.read.format("gateway")
          .option("bootstrap", "127.0.0.1:9644").option("topic", "t").load())

Executors talk to the gateway's admin endpoint over the network (``gateway/pipeline/client.py``,
binary record format), so the same code runs on a cluster. Options: ``gateway/pipeline/options.py``.

Schema: topic string, partition int, offset bigint, timestamp timestamp (microseconds, the model's
unit), key binary, value binary, headers array<struct<key string, value binary>> (order kept,
duplicates allowed, as in the model).

Pickling: these classes are pickled by reference and their ``read``/``write`` run in Spark's
Python workers, so they hold only options and plain values; clients are opened inside the calls.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from gateway.pipeline.options import EARLIEST, LATEST, OptionError, ReaderOptions, WriterOptions

SCHEMA = (
    "topic string, partition int, offset bigint, timestamp timestamp, key binary, value binary, "
    "headers array<struct<key: string, value: binary>>"
)


class OffsetRange(InputPartition):
    """One Spark task: records [start, end) of one topic partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}/{self.partition} [{self.start}, {self.end}))"


class DataLossError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- planning


def split_ranges(
    ranges: Sequence[tuple[int, int, int]], max_records: int, min_splits: int = 0
) -> list[tuple[int, int, int]]:
    """Cut (partition, start, end) ranges into pieces of at most ``max_records``, then halve the
    largest pieces until there are at least ``min_splits`` (pieces of one record are not cut).
    Empty ranges are dropped; the order is by partition, then offset."""
    out: list[tuple[int, int, int]] = []
    for p, start, end in ranges:
        pos = start
        while pos < end:
            stop = min(end, pos + max_records)
            out.append((p, pos, stop))
            pos = stop
    while 0 < len(out) < min_splits:
        i = max(range(len(out)), key=lambda j: out[j][2] - out[j][1])
        p, start, end = out[i]
        if end - start < 2:
            break
        mid = start + (end - start) // 2
        out[i : i + 1] = [(p, start, mid), (p, mid, end)]
    return sorted(out)


def _resolve(spec: int, log_start: int, high: int) -> int:
    if spec == EARLIEST:
        return log_start
    if spec == LATEST:
        return high
    if spec < 0:
        raise OptionError(f"offset {spec} is neither -2 (earliest), -1 (latest) nor an offset")
    return spec


def plan_batch(opts: ReaderOptions) -> list[tuple[int, int, int]]:
    """The (partition, start, end) ranges a batch read covers, before splitting."""

    with opts.client() as client:
        parts = client.offsets(opts.topic)
        by_start = by_end = None
        if opts.starting_timestamp_us is not None:
            by_start = client.offsets_for_time(opts.topic, opts.starting_timestamp_us)
        if opts.ending_timestamp_us is not None:
            by_end = client.offsets_for_time(opts.topic, opts.ending_timestamp_us)
    ranges = []
    for po in parts:
        p = po.partition
        if opts.partitions is not None and p not in opts.partitions:
            continue
        if by_start is not None:
            start = by_start[p]
        else:
            start = _resolve(
                opts.starting_per.get(p, opts.starting), po.log_start_offset, po.high_watermark
            )
        if by_end is not None:
            end = by_end[p]
        else:
            end = _resolve(
                opts.ending_per.get(p, opts.ending), po.log_start_offset, po.high_watermark
            )
        end = min(end, po.high_watermark)
        ranges.append((p, start, max(start, end)))
    if opts.partitions is not None:
        known = {po.partition for po in parts}
        missing = [p for p in opts.partitions if p not in known]
        if missing:
            raise OptionError(f"topic {opts.topic} has no partition(s) {missing}")
    return ranges


# ----------------------------------------------------------------------------- reading


def arrow_schema() -> Any:
    import pyarrow as pa

    header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    return pa.schema(
        [
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("us", tz="UTC")),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("headers", pa.list_(header)),
        ]
    )


def columns_to_arrow(cols: Any, topic: str, partition: int, schema: Any) -> Any:
    """A pyarrow RecordBatch from :class:`gateway.pipeline.client.Columns` (built value by value:
    the reference that tests hold ``gateway.pipeline.columnar``'s decoder to)."""
    from itertools import accumulate

    import pyarrow as pa

    n = len(cols)
    header_type = schema.field("headers").type
    names = pa.array(cols.header_names, pa.binary()).cast(pa.string())
    structs = pa.StructArray.from_arrays(
        [names, pa.array(cols.header_values, pa.binary())],
        fields=list(header_type.value_type),
    )
    headers = pa.ListArray.from_arrays(
        pa.array(list(accumulate(cols.header_counts, initial=0)), pa.int32()),
        structs,
        type=header_type,
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(cols.offsets, pa.int64()),
            pa.array(cols.timestamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array(cols.keys, pa.binary()),
            pa.array(cols.values, pa.binary()),
            headers,
        ],
        schema=schema,
    )


_gc_frozen = False


def freeze_worker_gc() -> None:
    """Move the objects a Spark Python worker holds now (the modules of pyspark, pyarrow, numpy
    and ours: ~50,000) into the collector's permanent generation, once per process (``read()``
    calls it; it runs in the workers only). Spark's reused workers call ``gc.collect()`` after
    every task, which walked all of them each time (25-40 ms), as did the automatic full
    collections while a task ran: 0.18 s of collections per 1M exported records, 0.01 s with
    them frozen (bench/README.md). Frozen objects are never scanned or freed; what later tasks
    make is collected as before."""
    global _gc_frozen
    if not _gc_frozen:
        import gc

        gc.freeze()
        _gc_frozen = True


def read_range(opts: ReaderOptions, part: OffsetRange) -> Iterator[Any]:
    """Yield pyarrow RecordBatches holding exactly the records [start, end) of the partition
    (fewer only when records were deleted and failOnDataLoss is false), one per page, decoded
    column-wise from the binary format, blocks as stored: with record start tables (canonical
    version 3) or, stored before them, without (``gateway/pipeline/columnar.py``)."""
    from gateway.pipeline.client import GatewayClientError
    from gateway.pipeline.columnar import decode_fetch_arrow

    schema = arrow_schema()
    offset, end = part.start, part.end
    with opts.client() as client:
        while offset < end:
            want = min(opts.fetch_max_records, end - offset)
            try:
                data = client.fetch_binary(
                    part.topic, part.partition, offset, want, opts.fetch_max_bytes
                )
            except GatewayClientError as exc:
                if exc.status != 416:
                    raise
                lso = next(
                    o.log_start_offset
                    for o in client.offsets(part.topic)
                    if o.partition == part.partition
                )
                if opts.fail_on_data_loss or lso <= offset:
                    raise DataLossError(
                        f"{part.topic}/{part.partition}: offset {offset} is out of range "
                        f"({exc.message}); records were deleted before they were read "
                        f"(set failOnDataLoss=false to skip them)"
                    ) from exc
                offset = lso
                continue
            page = decode_fetch_arrow(data, part.topic, part.partition, end, schema)
            if page.first_offset < 0:
                if page.high_watermark <= offset:
                    # The log is shorter than planned (truncated or recreated).
                    if opts.fail_on_data_loss:
                        raise DataLossError(
                            f"{part.topic}/{part.partition}: expected records up to {end}, "
                            f"the log ends at {page.high_watermark}"
                        )
                    return
                continue
            if page.first_offset != offset and opts.fail_on_data_loss:
                raise DataLossError(
                    f"{part.topic}/{part.partition}: asked for {offset}, got {page.first_offset}"
                )
            if page.batch is None:  # the next record is past the range
                return
            yield page.batch
            offset = page.last_offset + 1


class GatewayReader(DataSourceReader):
    def __init__(self, opts: ReaderOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        ranges = split_ranges(
            plan_batch(self.opts), self.opts.max_records_per_split, self.opts.min_partitions
        )
        parts = [OffsetRange(self.opts.topic, p, s, e) for p, s, e in ranges]
        # Spark needs at least one partition to plan a read; an empty range reads nothing.
        return parts or [OffsetRange(self.opts.topic, 0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, OffsetRange)
        freeze_worker_gc()
        yield from read_range(self.opts, partition)


# ----------------------------------------------------------------------------- streaming


class GatewayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"<partition>": next offset to read}``. A partition added to the topic
    later starts at its log start. Spark's checkpoint is the source of truth on restart."""

    def __init__(self, opts: ReaderOptions) -> None:
        self.opts = opts
        self._target: dict[str, int] | None = None

    def _highs(self) -> dict[str, tuple[int, int]]:

        with self.opts.client() as client:
            parts = client.offsets(self.opts.topic)
        return {
            str(po.partition): (po.log_start_offset, po.high_watermark)
            for po in parts
            if self.opts.partitions is None or po.partition in self.opts.partitions
        }

    def initialOffset(self) -> dict[str, Any]:
        highs = self._highs()
        by_time = None
        if self.opts.starting_timestamp_us is not None:
            with self.opts.client() as client:
                by_time = client.offsets_for_time(self.opts.topic, self.opts.starting_timestamp_us)
        out = {}
        for p, (lso, hw) in highs.items():
            if by_time is not None:
                out[p] = by_time[int(p)]
            else:
                out[p] = _resolve(self.opts.starting_per.get(int(p), self.opts.starting), lso, hw)
        return out

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {p: hw for p, (_, hw) in self._highs().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if self._target is not None:
            highs = {p: hw for p, hw in self._target.items()}
        else:
            highs = {p: hw for p, (_, hw) in self._highs().items()}
        end = dict(start)
        for p, hw in highs.items():
            end[p] = max(int(start.get(p, 0)), hw)
        if isinstance(limit, ReadMaxRows):
            end = cap_offsets(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return {p: hw for p, (_, hw) in self._highs().items()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = [(int(p), int(start.get(p, 0)), int(e)) for p, e in end.items() if int(e) > 0]
        pieces = split_ranges(ranges, self.opts.max_records_per_split, self.opts.min_partitions)
        return [OffsetRange(self.opts.topic, p, s, e) for p, s, e in pieces]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, OffsetRange)
        freeze_worker_gc()
        yield from read_range(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, which makes restarts exact."""

    def stop(self) -> None:
        pass


def cap_offsets(start: dict[str, Any], end: dict[str, Any], max_rows: int) -> dict[str, Any]:
    """Limit the records between ``start`` and ``end`` to ``max_rows``, shared fairly between
    partitions (each gets an equal share; what one cannot use goes to the others)."""
    avail = {p: int(e) - int(start.get(p, 0)) for p, e in end.items()}
    budget = max_rows
    take = dict.fromkeys(avail, 0)
    pending = [p for p, n in avail.items() if n > 0]
    while budget > 0 and pending:
        share = max(1, budget // len(pending))
        nxt = []
        for p in sorted(pending, key=lambda q: avail[q] - take[q]):
            give = min(share, avail[p] - take[p], budget)
            take[p] += give
            budget -= give
            if take[p] < avail[p]:
                nxt.append(p)
            if budget == 0:
                break
        pending = nxt
    return {p: int(start.get(p, 0)) + take[p] for p in end}


# ----------------------------------------------------------------------------- writing


@dataclass
class GatewayCommitMessage(WriterCommitMessage):
    records: int = 0
    bytes: int = 0
    per_partition: dict[int, int] = field(default_factory=dict)


def _as_bytes(values: list[Any]) -> list[bytes | None]:
    return [v.encode() if isinstance(v, str) else (None if v is None else bytes(v)) for v in values]


def _headers(values: list[Any]) -> list[tuple[tuple[str, bytes], ...]]:
    out: list[tuple[tuple[str, bytes], ...]] = []
    for h in values:
        if not h:
            out.append(())
            continue
        pairs: list[tuple[str, bytes]] = []
        for item in h:
            if isinstance(item, dict):
                k, v = item.get("key"), item.get("value")
            else:
                k, v = item
            if k is None:
                raise ValueError("a header needs a non-null key")
            pairs.append((str(k), b"" if v is None else v.encode() if isinstance(v, str) else v))
        out.append(tuple(pairs))
    return out


def batch_to_records(batch: Any) -> tuple[list[Any], list[int | None]]:
    """(records, partitions) from an Arrow batch with a ``value`` column and optional ``key``,
    ``headers``, ``partition`` and ``timestamp`` columns."""
    import pyarrow as pa

    from gateway.model import Record

    names = batch.schema.names
    n = batch.num_rows
    values = _as_bytes(batch.column(names.index("value")).to_pylist())
    keys = _as_bytes(batch.column(names.index("key")).to_pylist()) if "key" in names else [None] * n
    headers = (
        _headers(batch.column(names.index("headers")).to_pylist())
        if "headers" in names
        else [()] * n
    )
    if "timestamp" in names:
        col = batch.column(names.index("timestamp"))
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
        stamps = [-1 if t is None else int(t) for t in col.to_pylist()]
    else:
        stamps = [-1] * n
    parts: list[int | None] = (
        batch.column(names.index("partition")).to_pylist() if "partition" in names else [None] * n
    )
    records = [Record(keys[i], values[i], headers[i], stamps[i]) for i in range(n)]
    return records, parts


class GatewayWriter(DataSourceArrowWriter):
    """Each task appends its rows (grouped per partition, ``batchRecords`` per request); the
    driver's ``commit`` reports the totals. Appends cannot be taken back from a log: on failure
    ``abort`` reports what the successful tasks already wrote, and a retried task writes its rows
    again (at-least-once)."""

    def __init__(self, opts: WriterOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> GatewayCommitMessage:

        msg = GatewayCommitMessage()
        pending: dict[int | None, list[Any]] = {}
        size = 0
        with self.opts.client() as client:

            def flush() -> None:
                for p, recs in pending.items():
                    n = client.produce_batch(self.opts.topic, recs, p)
                    msg.records += n
                    if p is not None:
                        msg.per_partition[p] = msg.per_partition.get(p, 0) + n
                pending.clear()

            for batch in iterator:
                records, parts = batch_to_records(batch)
                for r, p in zip(records, parts, strict=True):
                    pending.setdefault(p, []).append(r)
                    msg.bytes += len(r.value or b"") + len(r.key or b"")
                size += len(records)
                if size >= self.opts.batch_records:
                    flush()
                    size = 0
            flush()
        return msg

    def _report(self, status: str, messages: list[Any]) -> None:
        done = [m for m in messages if isinstance(m, GatewayCommitMessage)]
        per: dict[int, int] = {}
        for m in done:
            for p, n in m.per_partition.items():
                per[p] = per.get(p, 0) + n
        report = {
            "status": status,
            "topic": self.opts.topic,
            "records": sum(m.records for m in done),
            "bytes": sum(m.bytes for m in done),
            "tasks": len(done),
            "tasks_failed": len(messages) - len(done),
            "per_partition": {str(p): n for p, n in sorted(per.items())},
        }
        print(f"gateway sink: {json.dumps(report)}", file=sys.stderr)
        if self.opts.report_path:
            with open(self.opts.report_path, "w") as f:
                json.dump(report, f)

    def commit(self, messages: list[Any]) -> None:
        self._report("committed", messages)

    def abort(self, messages: list[Any]) -> None:
        self._report("aborted", messages)


# ----------------------------------------------------------------------------- the source


class GatewayDataSource(DataSource):
    """``format("gateway")``: topics of a running gateway, through its admin endpoint."""

    @classmethod
    def name(cls) -> str:
        return "gateway"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return GatewayReader(ReaderOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return GatewayStreamReader(ReaderOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> GatewayWriter:
        if overwrite:
            raise OptionError("a topic is an append-only log: use mode('append')")
        if "value" not in schema.fieldNames():
            raise OptionError("the DataFrame to write needs a 'value' column")
        opts = WriterOptions.parse(self.options)
        if opts.partitions is not None:
            with opts.client() as client:
                client.create_topic(opts.topic, opts.partitions)
        return GatewayWriter(opts)
