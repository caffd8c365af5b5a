"""Options of the ``gateway`` Spark data source, parsed once into plain picklable values.

Reader options (batch and streaming):

- ``bootstrap`` (required): the gateway's admin endpoint, ``host:port`` (``https://host:port``
  when it speaks TLS: ``gateway/admin_tls.py`` reads the ``GATEWAY_ADMIN_TLS_*`` variables).
- ``topic`` (required).
- ``startingOffsets``: ``earliest`` (batch default), ``latest`` (streaming default), or JSON
  ``{"0": 42, "1": -2}`` per partition (-2 earliest, -1 latest; partitions left out: the default).
- ``endingOffsets`` (batch only): ``latest`` (default) or JSON per partition (-1 latest).
- ``startingTimestamp`` / ``endingTimestamp``: milliseconds since the epoch or an ISO-8601 time:
  start at (end before) the first record whose timestamp is >= it, per partition. They win over
  the offset options.
- ``partitions``: a comma-separated subset, e.g. ``0,2``.
- ``maxRecordsPerSplit`` (default 250000): a partition's range larger than this is read by
  several Spark tasks, each an offset range of at most this many records.
- ``minPartitions``: split ranges further until there are at least this many tasks.
- ``fetchMaxRecords`` (default 10000) and ``fetchMaxBytes`` (default 8 MiB): per request.
- ``failOnDataLoss`` (default true): fail when records in the range were already deleted
  (retention); false skips to the log start.
- ``maxOffsetsPerTrigger`` (streaming): at most this many records per micro-batch.

Writer options: ``bootstrap``, ``topic``, ``partitions`` (create the topic with this many when it
does not exist), ``batchRecords`` (default 5000 per request), ``reportPath`` (the driver writes
the commit/abort totals there as JSON).

TLS options (reader and writer; any of them means HTTPS, and they replace the workers'
``GATEWAY_ADMIN_TLS_*`` variables): ``tlsCaFile`` (PEM CA files trusted besides the system's,
comma-separated), ``tlsCertFile`` and ``tlsKeyFile`` (a client certificate), ``tlsServerName``
(the name checked in the gateway's certificate; default the bootstrap's host). The files must be
readable where the Spark tasks run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gateway.admin_tls import ClientTLS

if TYPE_CHECKING:
    from gateway.pipeline.client import GatewayClient

EARLIEST = -2
LATEST = -1


class OptionError(ValueError):
    pass


def _int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = options.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise OptionError(f"option {name}={raw!r} is not an integer") from None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}={raw!r} is not a boolean")


def parse_timestamp_us(raw: str, name: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 time (naive means UTC), as microseconds."""
    text = raw.strip()
    try:
        return int(text) * 1000
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise OptionError(
            f"option {name}={raw!r} is neither milliseconds nor an ISO-8601 time"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1_000_000)


def parse_offsets(raw: str | None, name: str, default: int) -> tuple[int, dict[int, int]]:
    """(default spec, per-partition specs) from ``earliest``/``latest``/JSON."""
    if raw is None or raw.strip() == "":
        return default, {}
    text = raw.strip()
    if text.lower() == "earliest":
        return EARLIEST, {}
    if text.lower() == "latest":
        return LATEST, {}
    try:
        obj = json.loads(text)
    except ValueError:
        raise OptionError(
            f'option {name}={raw!r}: expected earliest, latest or JSON like {{"0": 42}}'
        ) from None
    if not isinstance(obj, dict):
        raise OptionError(f"option {name}: the JSON must be an object of partition -> offset")
    per: dict[int, int] = {}
    for k, v in obj.items():
        try:
            per[int(k)] = int(v)
        except (TypeError, ValueError):
            raise OptionError(f"option {name}: {k!r}: {v!r} is not partition -> offset") from None
    return default, per


def parse_tls(options: Mapping[str, str]) -> ClientTLS | None:
    """The TLS options as client settings; None when none is given."""
    ca, cert, key, name = (
        (options.get(k) or "").strip()
        for k in ("tlsCaFile", "tlsCertFile", "tlsKeyFile", "tlsServerName")
    )
    if not (ca or cert or key or name):
        return None
    if bool(cert) != bool(key):
        raise OptionError(
            f"options tlsCertFile={cert!r} tlsKeyFile={key!r}: expected both or neither"
        )
    cas = tuple(p.strip() for p in ca.split(",") if p.strip())
    return ClientTLS(ca_files=cas, cert_file=cert, key_file=key, server_name=name)


def _client(bootstrap: str, tls: ClientTLS | None) -> GatewayClient:
    from gateway.pipeline.client import GatewayClient

    return GatewayClient(bootstrap, tls=tls)


@dataclass(frozen=True)
class ReaderOptions:
    bootstrap: str
    topic: str
    starting: int
    starting_per: dict[int, int]
    ending: int
    ending_per: dict[int, int]
    starting_timestamp_us: int | None
    ending_timestamp_us: int | None
    partitions: tuple[int, ...] | None
    max_records_per_split: int
    min_partitions: int
    fetch_max_records: int
    fetch_max_bytes: int
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    tls: ClientTLS | None = None

    def client(self) -> GatewayClient:
        """A client of the gateway these options name (HTTPS with the TLS options)."""
        return _client(self.bootstrap, self.tls)

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReaderOptions:
        bootstrap = options.get("bootstrap")
        topic = options.get("topic")
        if not bootstrap:
            raise OptionError("option bootstrap (the gateway admin endpoint host:port) is required")
        if not topic:
            raise OptionError("option topic is required")
        starting, starting_per = parse_offsets(
            options.get("startingOffsets"), "startingOffsets", LATEST if streaming else EARLIEST
        )
        ending, ending_per = parse_offsets(options.get("endingOffsets"), "endingOffsets", LATEST)
        if streaming and options.get("endingOffsets"):
            raise OptionError("endingOffsets is for batch reads only")
        if ending == EARLIEST or any(v == EARLIEST for v in ending_per.values()):
            raise OptionError("endingOffsets cannot be earliest")
        parts = options.get("partitions")
        partitions = None
        if parts:
            try:
                partitions = tuple(sorted({int(p) for p in parts.split(",") if p.strip()}))
            except ValueError:
                raise OptionError(f"option partitions={parts!r} is not a list of ints") from None
        st = options.get("startingTimestamp")
        et = options.get("endingTimestamp")
        if streaming and et:
            raise OptionError("endingTimestamp is for batch reads only")
        max_split = _int(options, "maxRecordsPerSplit", 250_000)
        if max_split is None or max_split < 1:
            raise OptionError("maxRecordsPerSplit must be >= 1")
        mopt = _int(options, "maxOffsetsPerTrigger", None)
        if mopt is not None and mopt < 1:
            raise OptionError("maxOffsetsPerTrigger must be >= 1")
        return cls(
            bootstrap=bootstrap,
            topic=topic,
            starting=starting,
            starting_per=starting_per,
            ending=ending,
            ending_per=ending_per,
            starting_timestamp_us=None if not st else parse_timestamp_us(st, "startingTimestamp"),
            ending_timestamp_us=None if not et else parse_timestamp_us(et, "endingTimestamp"),
            partitions=partitions,
            max_records_per_split=max_split,
            min_partitions=_int(options, "minPartitions", 0) or 0,
            fetch_max_records=_int(options, "fetchMaxRecords", 10_000) or 10_000,
            fetch_max_bytes=_int(options, "fetchMaxBytes", 8 << 20) or (8 << 20),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            max_offsets_per_trigger=mopt,
            tls=parse_tls(options),
        )


@dataclass(frozen=True)
class WriterOptions:
    bootstrap: str
    topic: str
    partitions: int | None
    batch_records: int
    report_path: str | None
    tls: ClientTLS | None = None

    def client(self) -> GatewayClient:
        """A client of the gateway these options name (HTTPS with the TLS options)."""
        return _client(self.bootstrap, self.tls)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriterOptions:
        bootstrap = options.get("bootstrap")
        topic = options.get("topic")
        if not bootstrap:
            raise OptionError("option bootstrap (the gateway admin endpoint host:port) is required")
        if not topic:
            raise OptionError("option topic is required")
        return cls(
            bootstrap=bootstrap,
            topic=topic,
            partitions=_int(options, "partitions", None),
            batch_records=max(1, _int(options, "batchRecords", 5000) or 5000),
            report_path=options.get("reportPath") or None,
            tls=parse_tls(options),
        )
