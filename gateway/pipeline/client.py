"""A small synchronous client for a running gateway's admin data API.

It is what the Spark executors (and the plain single-process baseline of ``bench/pipeline.py``)
use: plain ``http.client`` with one keep-alive connection, no trio, nothing that cannot be opened
inside a Spark Python worker. A client object is cheap; make one inside ``read()``/``write()``,
never keep it on a pickled reader or writer. An ``https://host:port`` bootstrap speaks TLS with
the settings of the ``GATEWAY_ADMIN_TLS_*`` variables (``gateway/admin_tls.py``), which
``gateway pipeline`` sets for the workers it starts, as it sets ``GATEWAY_ADMIN_TOKEN``.

Two wire formats for records:
- ``json``: the documented JSON API (keys, values and header values base64).
- ``binary`` (the default): ``GET .../records?format=binary`` answers with the canonical batch
  encoding of ``gateway/canonical.py`` plus a small header, so the gateway does no per-record work
  for stored canonical batches and the reader decodes with ``struct``. See docs/decisions.md.
  The client asks for the blocks as stored (``&starts=1``): canonical version 3 carries a table
  of record start positions that the Spark reader uses to decode with numpy alone
  (``gateway/pipeline/columnar.py``); version 1 (blocks stored before the tables, or a gateway
  that predates them) is decoded the same way after a walk.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import struct
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, NoReturn
from urllib.parse import quote

from gateway.admin_auth import client_token
from gateway.admin_tls import (
    AdminTLSError,
    ClientTLS,
    connect,
    connection,
    describe,
    dropped,
    from_env,
    plain_to_tls,
    speaks_tls,
)
from gateway.canonical import CANONICAL, FIELD, RECORD, CanonicalCodecError, records_at
from gateway.model import Record, now_us

Headers = tuple[tuple[str, bytes], ...]

# Binary fetch answer: high_watermark i64 | log_start_offset i64 | block_count u32, then per block
# base_offset i64 | length u32 | canonical block bytes.
FETCH_HEAD = struct.Struct("<qqI")
BLOCK_HEAD = struct.Struct("<qI")


class GatewayClientError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"gateway answered {status}: {message}")
        self.status = status
        self.message = message


class FetchedRecord(NamedTuple):
    offset: int
    timestamp_us: int
    key: bytes | None
    value: bytes | None
    headers: Headers


class FetchAnswer(NamedTuple):
    records: list[FetchedRecord]
    high_watermark: int
    log_start_offset: int


class PartitionOffsets(NamedTuple):
    partition: int
    log_start_offset: int
    high_watermark: int


def parse_endpoint(bootstrap: str) -> tuple[bool, str, int]:
    """``(https, host, port)`` of an admin endpoint written ``host:port``, ``http://host:port``
    or ``https://host:port`` (TLS)."""
    text = bootstrap.strip()
    https = text.startswith("https://")
    for prefix in ("https://", "http://", "gateway://"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    text = text.rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bootstrap must be host:port (the admin endpoint), got {bootstrap!r}")
    return https, host.strip("[]") or "127.0.0.1", int(port)


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    _, host, port = parse_endpoint(bootstrap)
    return host, port


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class GatewayClient:
    """One keep-alive HTTP(S) connection to the admin endpoint at ``bootstrap`` (host:port,
    or https://host:port for an admin port that speaks TLS)."""

    def __init__(
        self,
        bootstrap: str,
        timeout: float = 60.0,
        wire_format: str = "binary",
        token: str | None = None,
        tls: ClientTLS | None = None,
    ) -> None:
        """``token``: the admin data API's bearer token; by default ``GATEWAY_ADMIN_TOKEN``
        (which ``gateway pipeline`` sets from the config's ``[admin] token_file``). ``tls``:
        speak HTTPS with these settings; by default HTTPS for an ``https://`` bootstrap, with
        the ``GATEWAY_ADMIN_TLS_*`` variables (gateway/admin_tls.py)."""
        if wire_format not in ("binary", "json"):
            raise ValueError(f"wire_format must be 'binary' or 'json', not {wire_format!r}")
        https, self.host, self.port = parse_endpoint(bootstrap)
        self.tls = tls if tls is not None or not https else from_env()
        self.timeout = timeout
        self.wire_format = wire_format
        self.token = token if token is not None else client_token()
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transport

    def _raw(
        self, method: str, path: str, body: bytes | None = None, ctype: str = "application/json"
    ) -> tuple[int, str, bytes]:
        headers = {"content-type": ctype} if body is not None else {}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        for attempt in (0, 1):
            fresh = self._conn is None
            if self._conn is None:
                self._conn = connection(self.host, self.port, self.tls, self.timeout)
                try:
                    connect(self._conn, self.host, self.port, self.tls)
                except BaseException:
                    self.close()
                    raise
            try:
                self._conn.request(method, path, body=body, headers=headers)
                resp = self._conn.getresponse()
                data = resp.read()
                return resp.status, resp.getheader("content-type") or "", data
            except (
                http.client.RemoteDisconnected,
                BrokenPipeError,
                ConnectionResetError,
                ssl.SSLEOFError,
                ssl.SSLZeroReturnError,
            ) as exc:
                # A kept-alive connection the server closed (idle timeout): retry once on a new
                # one. Only idempotent-safe here because the request never reached the server.
                self.close()
                if fresh:
                    self._not_plain_to_tls()
                if attempt:
                    if self.tls is not None:
                        raise dropped(exc, self.host, self.port) from None
                    raise
            except ssl.SSLError as exc:  # e.g. the gateway refused the client certificate
                self.close()
                raise describe(exc, self.host, self.port, self.tls or ClientTLS()) from None
            except http.client.HTTPException:
                self.close()
                if fresh:
                    self._not_plain_to_tls()
                raise
            except Exception:
                self.close()
                raise
        raise AssertionError("unreachable")

    def _not_plain_to_tls(self) -> None:
        """Raise :class:`AdminTLSError` when this plain client reached a port speaking TLS."""
        if self.tls is None and speaks_tls(self.host, self.port):
            fix = f"give the address as https://{self.host}:{self.port}"
            raise plain_to_tls(self.host, self.port, fix)

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        payload = None if body is None else json.dumps(body).encode()
        status, _, data = self._raw(method, path, payload)
        obj = json.loads(data) if data else None
        if status >= 400:
            message = obj.get("error") if isinstance(obj, dict) else data.decode(errors="replace")
            raise GatewayClientError(status, str(message))
        return obj

    @staticmethod
    def _topic_path(topic: str) -> str:
        return "/v1/topics/" + quote(topic, safe="")

    # ------------------------------------------------------------------ topics

    def healthy(self) -> bool:
        """Whether a gateway answers; :class:`AdminTLSError` when TLS stands between."""
        try:
            status, _, _ = self._raw("GET", "/healthz")
            return status == 200
        except AdminTLSError:
            raise
        except (OSError, http.client.HTTPException):
            return False

    def topics(self) -> dict[str, int]:
        return {t["name"]: t["partitions"] for t in self._json("GET", "/v1/topics")}

    def create_topic(self, name: str, partitions: int | None = None) -> int:
        """Create ``name``; returns its partition count. An existing topic is not an error."""
        try:
            info = self._json("POST", "/v1/topics", {"name": name, "partitions": partitions})
            return int(info["partitions"])
        except GatewayClientError as exc:
            if exc.status != 409:
                raise
            return self.topics()[name]

    def offsets(self, topic: str) -> list[PartitionOffsets]:
        return [
            PartitionOffsets(p["partition"], p["log_start_offset"], p["high_watermark"])
            for p in self._json("GET", self._topic_path(topic) + "/offsets")
        ]

    def offsets_for_time(self, topic: str, timestamp_us: int) -> dict[int, int]:
        """Per partition, the first offset whose timestamp is >= ``timestamp_us`` (the high
        watermark where none is): ``GET .../offsets?timestamp_us=`` (ListOffsets by time)."""
        rows = self._json("GET", f"{self._topic_path(topic)}/offsets?timestamp_us={timestamp_us}")
        return {int(row["partition"]): int(row["offset"]) for row in rows}

    # ------------------------------------------------------------------ records

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int = 10_000,
        max_bytes: int = 4 << 20,
        max_wait_ms: int = 0,
    ) -> FetchAnswer:
        if self.wire_format == "binary":
            data = self.fetch_binary(topic, partition, offset, max_records, max_bytes, max_wait_ms)
            cols, hw, lso = decode_binary_fetch(data)
            return FetchAnswer(columns_to_records(cols), hw, lso)
        obj = self._json(
            "GET", self._records_path(topic, partition, offset, max_records, max_bytes, max_wait_ms)
        )
        return FetchAnswer(
            [
                FetchedRecord(
                    r["offset"],
                    r["timestamp_us"],
                    _unb64(r["key"]),
                    _unb64(r["value"]),
                    tuple((k, base64.b64decode(v)) for k, v in r["headers"]),
                )
                for r in obj["records"]
            ],
            obj["high_watermark"],
            obj["log_start_offset"],
        )

    def fetch_columns(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int = 10_000,
        max_bytes: int = 4 << 20,
        max_wait_ms: int = 0,
        into: Columns | None = None,
    ) -> tuple[Columns, int, int]:
        """Like :meth:`fetch` over the binary format, decoded into (appended to) columns."""
        data = self.fetch_binary(topic, partition, offset, max_records, max_bytes, max_wait_ms)
        return decode_binary_fetch(data, into)

    def fetch_binary(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int = 10_000,
        max_bytes: int = 4 << 20,
        max_wait_ms: int = 0,
        starts: bool = True,
    ) -> bytes:
        """The raw ``format=binary`` answer (see :func:`decode_binary_fetch` for its layout).
        ``starts``: blocks as stored, canonical version 3 (with record start tables) or 1;
        without it all version 1 (what readers that predate the tables get)."""
        path = self._records_path(topic, partition, offset, max_records, max_bytes, max_wait_ms)
        query = "&format=binary&starts=1" if starts else "&format=binary"
        status, ctype, data = self._raw("GET", path + query)
        if status >= 400 or not ctype.startswith("application/octet-stream"):
            self._raise_for(status, data)
        return data

    def _records_path(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_records: int,
        max_bytes: int,
        max_wait_ms: int,
    ) -> str:
        return (
            f"{self._topic_path(topic)}/records?partition={partition}&offset={offset}"
            f"&max={max_records}&max_bytes={max_bytes}&max_wait_ms={max_wait_ms}"
        )

    def produce_batch(
        self, topic: str, records: Sequence[Record], partition: int | None = None
    ) -> int:
        """Append records as one canonical batch (``format=binary``). Records whose timestamp
        is negative get the current time. Without a partition: key hash, keyless round-robin."""
        if not records:
            return 0
        if any(r.timestamp_us < 0 for r in records):
            now = now_us()
            records = [r if r.timestamp_us >= 0 else r._replace(timestamp_us=now) for r in records]
        path = self._topic_path(topic) + "/records?format=binary"
        if partition is not None:
            path += f"&partition={partition}"
        # version 1: gateways of every age take it, and the gateway's check of the body (one
        # walk, which it does anyway) makes the start table it stores
        status, _, data = self._raw(
            "POST", path, CANONICAL.encode(records, starts=False), "application/octet-stream"
        )
        if status >= 400:
            self._raise_for(status, data)
        obj = json.loads(data)
        return sum(a["last_offset"] - a["base_offset"] + 1 for a in obj["appends"])

    def _raise_for(self, status: int, data: bytes) -> NoReturn:
        try:
            obj = json.loads(data)
            message = obj.get("error") if isinstance(obj, dict) else str(obj)
        except ValueError:
            message = data[:200].decode(errors="replace")
        raise GatewayClientError(status, str(message))

    def produce(
        self,
        topic: str,
        records: Iterable[
            tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes]], int | None, int | None]
        ],
    ) -> int:
        """Append ``(key, value, headers, timestamp_us or None, partition or None)`` tuples.
        Records without a partition go by key hash (keyless: round-robin). Returns the count."""
        body = {
            "records": [
                {
                    "key": _b64(k),
                    "value": _b64(v),
                    "headers": [[name, _b64(hv) or ""] for name, hv in (h or ())],
                    "timestamp_us": ts,
                    "partition": p,
                }
                for k, v, h, ts, p in records
            ]
        }
        if not body["records"]:
            return 0
        res = self._json("POST", self._topic_path(topic) + "/records", body)
        return sum(a["last_offset"] - a["base_offset"] + 1 for a in res["appends"])


class Columns:
    """Fetched records as column lists (what the Spark reader turns into Arrow arrays without
    building a Python object per record). Header k of record i: ``header_counts`` says how many
    each record has, ``header_names``/``header_values`` hold them all in order."""

    __slots__ = (
        "offsets",
        "timestamps",
        "keys",
        "values",
        "header_counts",
        "header_names",
        "header_values",
    )

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.header_counts: list[int] = []
        self.header_names: list[bytes] = []
        self.header_values: list[bytes] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` records."""
        if n >= len(self.offsets):
            return
        nh = sum(self.header_counts[:n])
        del self.offsets[n:], self.timestamps[n:], self.keys[n:], self.values[n:]
        del self.header_counts[n:], self.header_names[nh:], self.header_values[nh:]


def decode_binary_fetch(data: bytes, into: Columns | None = None) -> tuple[Columns, int, int]:
    """Decode a ``format=binary`` fetch answer into columns; returns (columns, hw, lso)."""
    cols = into if into is not None else Columns()
    hw, lso, nblocks = FETCH_HEAD.unpack_from(data, 0)
    pos = FETCH_HEAD.size
    unpack = RECORD.unpack_from
    funpack = FIELD.unpack_from
    rsize, fsize = RECORD.size, FIELD.size
    t_append, k_append, v_append = cols.timestamps.append, cols.keys.append, cols.values.append
    hc_append, hn_append, hv_append = (
        cols.header_counts.append,
        cols.header_names.append,
        cols.header_values.append,
    )
    for _ in range(nblocks):
        base, length = BLOCK_HEAD.unpack_from(data, pos)
        pos += BLOCK_HEAD.size
        end = pos + length
        try:
            _, count, pos = records_at(data, pos)  # version 1 or 3 (its table not needed here)
        except CanonicalCodecError as exc:
            raise ValueError(f"canonical block at offset {base}: {exc}") from None
        if pos > end:
            raise ValueError(f"canonical block at offset {base} overruns its {length} bytes")
        cols.offsets.extend(range(base, base + count))
        for _ in range(count):
            ts, klen, vlen, nh = unpack(data, pos)
            pos += rsize
            t_append(ts)
            if klen < 0:
                k_append(None)
            else:
                k_append(data[pos : pos + klen])
                pos += klen
            if vlen < 0:
                v_append(None)
            else:
                v_append(data[pos : pos + vlen])
                pos += vlen
            hc_append(nh)
            for _ in range(nh):
                nlen, hvlen = funpack(data, pos)
                pos += fsize
                hn_append(data[pos : pos + nlen])
                pos += nlen
                hv_append(data[pos : pos + hvlen])
                pos += hvlen
        if pos != end:
            raise ValueError(f"canonical block at offset {base} is {length} bytes, decoded {pos}")
    return cols, hw, lso


def columns_to_records(cols: Columns) -> list[FetchedRecord]:
    out: list[FetchedRecord] = []
    h = 0
    names, hvals = cols.header_names, cols.header_values
    for i, nh in enumerate(cols.header_counts):
        headers: Headers = ()
        if nh:
            headers = tuple((names[j].decode(), hvals[j]) for j in range(h, h + nh))
            h += nh
        out.append(
            FetchedRecord(
                cols.offsets[i], cols.timestamps[i], cols.keys[i], cols.values[i], headers
            )
        )
    return out
