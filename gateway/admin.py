"""The admin endpoint: HTTP/1.1 on h11 inside trio.

- ``GET /healthz``: the process is alive.
- ``GET /readyz``: every listener bound and every backend reachable (503 + JSON reason otherwise,
  and while draining).
- ``GET /metrics``: Prometheus text format.
- ``GET /v1/status``: JSON status; ``GET /``: the same as a small self-refreshing HTML page.
- The data API the CLI uses (and anything that wants every field of a record over HTTP; keys,
  values and header values are base64):
  ``GET /v1/topics``, ``POST /v1/topics`` ``{"name", "partitions"}``, ``DELETE /v1/topics/{topic}``,
  ``POST /v1/topics/{topic}/records`` ``{"records": [{"key", "value", "headers", "timestamp_us",
  "partition"}]}``, ``GET /v1/topics/{topic}/records?partition=&offset=&max=&max_wait_ms=``
  (``&format=binary``: canonical batches, ``&starts=1`` as stored, with record start tables,
  see :func:`binary_fetch`; ``POST`` with
  ``?format=binary[&partition=]`` takes one canonical batch, see :func:`produce_binary`),
  ``GET /v1/topics/{topic}/offsets`` (``?timestamp_us=``: also the offset for that time).
- Groups: ``GET /v1/groups``, ``GET /v1/groups/{group}`` (members, assignment, committed offsets,
  lag), ``POST /v1/groups/{group}/reset-offsets`` ``{"topic", "to", "partitions", "force"}``,
  ``DELETE /v1/groups/{group}`` (an empty group: its snapshot and committed offsets);
  ``DELETE /v1/topics/{topic}``.

Every ``GET`` route answers ``HEAD`` too (the same headers, no body); a method a route does not
take gets 405 with ``Allow``. Health, readiness and metrics are open; everything else is the data
and control API, which :mod:`gateway.admin_auth` guards (``/v1/status`` and ``/`` answer without
it too, with what names no client, topic or group). The connections themselves (limits, timeouts,
TLS) are :mod:`gateway.admin_http`'s.
"""

from __future__ import annotations

import base64
import html
import json
import struct
import typing
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import structlog
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.admin_auth import note_refusal
from gateway.canonical import (
    CANONICAL,
    CanonicalCodecError,
    check_block,
    cut,
    peek_header,
    without_starts,
)
from gateway.core.groups import delete_group, describe_group, group_summaries, reset_offsets
from gateway.core.view import CoreView
from gateway.metrics_view import merged_status, scrape
from gateway.model import (
    CreateTopic,
    DeleteTopic,
    ErrorCode,
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
from gateway.status_view import public_status, public_view, status

if typing.TYPE_CHECKING:
    from gateway.admin_auth import AdminAuth

log = structlog.get_logger("gateway.admin")

HTTP_STATUS = {
    ErrorCode.UNKNOWN_TOPIC: 404,
    ErrorCode.UNKNOWN_PARTITION: 404,
    ErrorCode.UNKNOWN_GROUP: 404,
    ErrorCode.OFFSET_OUT_OF_RANGE: 416,
    ErrorCode.TOPIC_EXISTS: 409,
    ErrorCode.BACKEND_UNAVAILABLE: 503,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.UNSUPPORTED: 501,
    ErrorCode.UNAUTHORIZED: 403,
}

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Answer anyone: probes, balancers and Prometheus need them."""
STATUS_PATHS = frozenset({"/v1/status", "/"})
"""Answer anyone, in full only with data API access (see :func:`public_status`)."""
READ_ONLY = ("GET", "HEAD")
READ_WRITE = ("GET", "HEAD", "POST")


class HttpError(Exception):
    def __init__(
        self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


@dataclass(slots=True)
class Answer:
    status: int
    ctype: str
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class AdminAccess:
    """What the admin endpoint serves with: who may use the data API, and the core as its
    topic ACL lets the data API see it."""

    auth: AdminAuth
    core: CoreView


def request_path(target: str) -> str:
    return urlsplit(target).path.rstrip("/") or "/"


def allowed_methods(path: str) -> tuple[str, ...] | None:
    """The methods ``path`` takes, or None when no route has that path."""
    if path in OPEN_PATHS or path in STATUS_PATHS or path == "/v1/groups":
        return READ_ONLY
    if path == "/v1/topics":
        return READ_WRITE
    parts = path.split("/")
    if len(parts) in (4, 5) and parts[:3] == ["", "v1", "groups"] and parts[3]:
        if len(parts) == 4:
            return (*READ_ONLY, "DELETE")
        return ("POST",) if parts[4] == "reset-offsets" else None
    if len(parts) == 4 and parts[:3] == ["", "v1", "topics"] and parts[3]:
        return ("DELETE",)
    if len(parts) == 5 and parts[:3] == ["", "v1", "topics"] and parts[3]:
        return {"records": READ_WRITE, "offsets": READ_ONLY}.get(parts[4])
    return None


def error_answer(exc: HttpError) -> Answer:
    body = json.dumps({"error": exc.message}).encode()
    return Answer(exc.status, "application/json", body, list(exc.headers))


def precheck(
    access: AdminAccess, method: str, path: str, authorization: bytes | None, client_cert: bool
) -> tuple[Answer | None, bool]:
    """Before a request's body is read: (an answer that ends it, or None to go on; whether it
    has full data API access). 404 and 405 first, then the credential."""
    allowed = allowed_methods(path)
    if allowed is None:
        return error_answer(HttpError(404, f"no route for {method} {path}")), False
    if method not in allowed:
        allow = ", ".join(allowed)
        refused = HttpError(405, f"{method} {path}: use {allow}", (("allow", allow),))
        return error_answer(refused), False
    if path in OPEN_PATHS:
        return None, False
    refusal = access.auth.check(authorization, client_cert)
    if refusal is None:
        return None, True
    if path in STATUS_PATHS:
        return None, False  # the open part of the status
    note_refusal(refusal)
    headers: tuple[tuple[str, str], ...] = ()
    if refusal.status == 401:
        headers = (("www-authenticate", 'Bearer realm="gateway-admin"'),)
    return error_answer(HttpError(refusal.status, refusal.message, headers)), False


async def answer(
    server: Any, access: AdminAccess, method: str, target: str, body: bytes, full: bool
) -> Answer:
    """The answer to one request that passed :func:`precheck` (``HEAD`` is answered as ``GET``;
    the caller drops the body)."""
    get = "GET" if method == "HEAD" else method
    try:
        if not full and request_path(target) in STATUS_PATHS:
            data = public_view(await merged_status(server, await public_status(server)))
            if request_path(target) == "/":
                return Answer(200, "text/html; charset=utf-8", render_html(data).encode())
            return Answer(200, "application/json", json.dumps(data).encode())
        code, ctype, payload = await route(server, get, target, body, access.core)
        return Answer(code, ctype, payload)
    except HttpError as exc:
        return error_answer(exc)
    except GatewayError as exc:
        payload = json.dumps({"error": exc.message, "code": exc.code.value}).encode()
        return Answer(HTTP_STATUS.get(exc.code, 400), "application/json", payload)
    except Exception as exc:
        log.exception("admin_request_failed", method=method, target=target)
        return Answer(500, "application/json", json.dumps({"error": repr(exc)}).encode())


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None, what: str) -> bytes | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        raise HttpError(400, f"{what} is not valid base64") from None


def record_to_json(r: Record) -> dict[str, Any]:
    return {
        "offset": r.offset,
        "timestamp_us": r.timestamp_us,
        "key": b64(r.key),
        "value": b64(r.value),
        "headers": [[k, b64(v)] for k, v in r.headers],
    }


def record_from_json(obj: Any) -> Record:
    if not isinstance(obj, dict):
        raise HttpError(400, "each record must be a JSON object")
    headers = obj.get("headers") or []
    if not isinstance(headers, list) or not all(
        isinstance(h, list) and len(h) == 2 and isinstance(h[0], str) for h in headers
    ):
        raise HttpError(400, "headers must be a list of [name, base64 value] pairs")
    ts = obj.get("timestamp_us")
    if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool)):
        raise HttpError(400, "'timestamp_us' must be an integer")
    if ts is None or ts < 0:
        ts = now_us()
    return Record(
        unb64(obj.get("key"), "key"),
        unb64(obj.get("value"), "value"),
        tuple((k, unb64(v, "header value") or b"") for k, v in headers),
        int(ts),
    )


def render_html(data: dict[str, Any]) -> str:
    e = html.escape
    rows_l = "".join(
        f"<tr><td>{e(x['protocol'])}</td><td>{e(x['address'])}</td><td>{e(x['advertised'])}</td>"
        f"<td>{x['connections']}</td></tr>"
        for x in data["listeners"]
    )
    rows_t = "".join(
        f"<tr><td>{e(t['name'])}</td><td>{e(t['backend'])}</td><td>{len(t['partitions'])}</td>"
        f"<td>{sum(p.get('high_watermark', 0) for p in t['partitions'])}</td></tr>"
        for t in data.get("topics", [])
    )
    rows_b = "".join(
        f"<tr><td>{e(b['name'])}</td><td>{e(b['type'])}</td>"
        f"<td>{'healthy' if b['healthy'] else 'DOWN: ' + e(b.get('detail', ''))}</td></tr>"
        for b in data["backends"]
    )
    rows_g = "".join(
        f"<tr><td>{e(g['name'])}</td><td>{e(str(g.get('state', '?')))}</td>"
        f"<td>{g.get('generation', '?')}</td><td>{g.get('members', '?')}</td></tr>"
        for g in data.get("groups", [])
    )
    note = f'<p id="details">{e(data["details"])}</p>' if "details" in data else ""
    return f"""<!doctype html><html><head><meta charset="utf-8">
<meta http-equiv="refresh" content="5"><title>gateway status</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin-bottom:1.5em}}
td,th{{border:1px solid #ccc;padding:.3em .8em;text-align:left}}</style></head><body>
<h1>Polyglot broker gateway {e(data["version"])}</h1>
<p id="summary">uptime {data["uptime_s"]:.0f} s, {"ready" if data["ready"] else "NOT READY"}</p>
<h2>Listeners</h2><table id="listeners"><tr><th>protocol</th><th>address</th><th>advertised</th>
<th>connections</th></tr>{rows_l}</table>
<h2>Topics</h2><table id="topics"><tr><th>topic</th><th>backend</th><th>partitions</th>
<th>records</th></tr>{rows_t}</table>
<h2>Backends</h2><table id="backends"><tr><th>name</th><th>type</th><th>health</th></tr>{rows_b}
</table>
<h2>Groups</h2><table id="groups"><tr><th>group</th><th>state</th><th>generation</th>
<th>members</th></tr>{rows_g}</table>{note}</body></html>"""


def _int_param(query: dict[str, list[str]], name: str, default: int) -> int:
    raw = query.get(name, [None])[0]
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise HttpError(400, f"query parameter {name}={raw!r} is not an integer") from None


async def route(
    server: Any, method: str, target: str, body: bytes, core: CoreView | None = None
) -> tuple[int, str, bytes]:
    """(status, content type, body) for one request; the data routes use ``core`` (the core
    as the admin's topic ACL lets it be seen), by default the server's."""
    url = urlsplit(target)
    path = url.path.rstrip("/") or "/"
    query = parse_qs(url.query)
    core = server.core if core is None else core

    def js(obj: Any, code: int = 200) -> tuple[int, str, bytes]:
        return code, "application/json", json.dumps(obj).encode()

    if method == "GET" and path == "/healthz":
        return 200, "text/plain", b"ok\n"
    if method == "GET" and path == "/readyz":
        ready, reason = await server.readiness()
        return js(reason, 200 if ready else 503)
    if method == "GET" and path == "/metrics":
        return 200, CONTENT_TYPE_LATEST, await scrape(server)
    if method == "GET" and path == "/v1/status":
        return js(await merged_status(server, await status(server)))
    if method == "GET" and path == "/":
        page = render_html(await merged_status(server, await status(server)))
        return 200, "text/html; charset=utf-8", page.encode()
    if path == "/v1/topics":
        if method == "GET":
            return js(
                [
                    {"name": t.name, "partitions": t.partitions}
                    for t in await core.execute(ListTopics())
                ]
            )
        if method == "POST":
            req = _json_body(body)
            name = req.get("name")
            if not isinstance(name, str):
                raise HttpError(400, "body needs a string 'name'")
            partitions = req.get("partitions")
            if partitions is not None and not isinstance(partitions, int):
                raise HttpError(400, "'partitions' must be an integer")
            info = await core.execute(CreateTopic(name, partitions))
            return js({"name": info.name, "partitions": info.partitions}, 201)
    if path == "/v1/groups" and method == "GET":
        return js(await group_summaries(core))
    parts = path.split("/")
    if len(parts) == 4 and parts[:3] == ["", "v1", "groups"] and method == "GET":
        return js(await describe_group(core, group_name(parts[3])))
    if len(parts) == 4 and parts[:3] == ["", "v1", "groups"] and method == "DELETE":
        return js(await delete_group(core, group_name(parts[3])))
    if parts[:3] == ["", "v1", "groups"] and parts[4:] == ["reset-offsets"] and method == "POST":
        return js(await _reset_offsets(core, group_name(parts[3]), _json_body(body)))
    if len(parts) == 4 and parts[:3] == ["", "v1", "topics"] and method == "DELETE":
        await core.execute(DeleteTopic(unquote(parts[3])))
        return js({"deleted": unquote(parts[3])})
    if len(parts) == 5 and parts[:3] == ["", "v1", "topics"]:
        topic, what = unquote(parts[3]), parts[4]
        if what == "records" and method == "POST" and query.get("format") == ["binary"]:
            return js(await produce_binary(core, topic, query.get("partition", [None])[0], body))
        if what == "records" and method == "POST":
            return js(await _produce(core, topic, _json_body(body)))
        if what == "records" and method == "GET":
            result = await core.execute(
                Fetch(
                    topic,
                    _int_param(query, "partition", 0),
                    _int_param(query, "offset", 0),
                    max_records=max(1, _int_param(query, "max", 1000)),
                    max_bytes=_int_param(query, "max_bytes", 4 << 20),
                    max_wait_ms=min(30_000, _int_param(query, "max_wait_ms", 0)),
                )
            )
            if query.get("format", ["json"])[0] == "binary":
                starts = query.get("starts") == ["1"]
                return 200, "application/octet-stream", binary_fetch(result, starts)
            return js(
                {
                    "topic": topic,
                    "partition": result.partition,
                    "high_watermark": result.high_watermark,
                    "log_start_offset": result.log_start_offset,
                    "records": [record_to_json(r) for r in result.records],
                }
            )
        if what == "offsets" and method == "GET":
            info = await core.topic(topic)
            out = []
            spec = _int_param(query, "timestamp_us", OffsetSpec.LATEST)
            for p in range(info.partitions):
                r = await core.execute(ListOffsets(topic, p, spec))
                out.append(
                    {
                        "partition": p,
                        "log_start_offset": r.log_start_offset,
                        "high_watermark": r.high_watermark,
                        "offset": r.offset,
                    }
                )
            return js(out)
    raise HttpError(404 if method in ("GET", "POST") else 405, f"no route for {method} {path}")


def group_name(raw: str) -> str:
    """A group name from a path segment: percent-decoded, non-empty, no control characters."""
    name = unquote(raw, errors="strict") if _valid_utf8_escapes(raw) else None
    if not name or not name.isprintable():
        raise HttpError(
            400, f"group name {raw!r} is not valid: expected printable UTF-8, not empty"
        )
    return name


def _valid_utf8_escapes(raw: str) -> bool:
    try:
        unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return False
    return True


async def _reset_offsets(core: CoreView, group: str, req: dict[str, Any]) -> list[dict[str, Any]]:
    """POST /v1/groups/{group}/reset-offsets ``{"topic", "to", "partitions"?, "force"?}``."""
    topic, to = req.get("topic"), req.get("to")
    if not isinstance(topic, str):
        raise HttpError(400, "body needs a string 'topic'")
    if (
        isinstance(to, bool)
        or not isinstance(to, str | int)
        or (
            isinstance(to, str)
            and to not in ("earliest", "latest")
            and not (to.startswith("timestamp:") and to[10:].isdigit())
        )
    ):
        raise HttpError(400, "'to' is earliest, latest, an offset or timestamp:<us>")
    partitions = req.get("partitions")
    if partitions is not None and not (
        isinstance(partitions, list) and all(isinstance(p, int) for p in partitions)
    ):
        raise HttpError(400, "'partitions' must be a list of integers")
    return await reset_offsets(core, group, topic, to, partitions, bool(req.get("force")))


def binary_fetch(result: Any, starts: bool = False) -> bytes:
    """A fetch answer for ``?format=binary`` (the Spark pipeline's reader): high_watermark i64 |
    log_start_offset i64 | block count u32, then per block base_offset i64 | length u32 | a
    canonical batch (gateway/canonical.py).

    With ``starts`` (``&starts=1``: the reader knows canonical version 3) stored canonical
    blocks pass through untouched, with the record start tables their writers made (version 3;
    blocks stored before them are version 1), and other batches are encoded as version 3.
    Without it every block is version 1, as readers that predate the tables expect: a stored
    version-3 block loses its table (one copy, no per-record work). Either way a window of a
    stored version-3 block is cut out by its table as version 1, not re-encoded record by
    record; the gateway never walks a block to make a table."""
    parts = [b""]
    for batch in result.batches:
        block = _fetch_block(batch, starts)
        parts.append(_BLOCK_HEAD.pack(batch.first_offset, len(block)))
        parts.append(bytes(block))
    parts[0] = _FETCH_HEAD.pack(result.high_watermark, result.log_start_offset, len(parts) // 2)
    return b"".join(parts)


def _fetch_block(batch: Any, starts: bool) -> bytes | memoryview:
    """One block of a binary fetch answer (see :func:`binary_fetch`)."""
    whole = batch.encoded_as(CANONICAL)
    if whole is not None:
        return whole if starts else without_starts(whole)
    window = batch.encoded_window(CANONICAL)
    if window is not None:
        block = cut(*window)
        if block is not None:
            return block
    return CANONICAL.encode(batch.records, starts=starts)


async def produce_binary(
    core: CoreView, topic: str, partition: str | None, body: bytes
) -> dict[str, Any]:
    """``POST .../records?format=binary[&partition=N]``: the body is one canonical batch
    (gateway/canonical.py, version 1 or 3), checked by one walk over its records (which also
    makes a version-1 body's start table, and checks a version-3 body's), then appended as
    the encoded block (version 3). Without a partition, keyed records go by key hash and
    keyless ones round-robin."""
    try:
        block, count = check_block(body)
    except CanonicalCodecError as exc:
        raise HttpError(400, f"body is not a canonical batch: {exc}") from None
    if count == 0:
        raise HttpError(400, "the batch holds no records")
    if partition is not None and not partition.lstrip("-").isdigit():
        raise HttpError(400, f"query parameter partition={partition!r} is not an integer")
    _, _, max_ts = peek_header(block)
    batch = RecordBatch(encoded=block, codec=CANONICAL, count=count, max_timestamp_us=max_ts)
    await core.topic(topic, create=True)
    res = await core.execute(
        Produce(
            topic,
            batch,
            partition=None if partition is None else int(partition),
            partitioning=Partitioning.KEY_HASH,
        )
    )
    return {
        "topic": topic,
        "appends": [
            {"partition": a.partition, "base_offset": a.base_offset, "last_offset": a.last_offset}
            for a in res.appends
        ],
    }


_FETCH_HEAD = struct.Struct("<qqI")
_BLOCK_HEAD = struct.Struct("<qI")


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body or b"{}")
    except ValueError as exc:
        raise HttpError(400, f"body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise HttpError(400, "body must be a JSON object")
    return obj


async def _produce(core: CoreView, topic: str, req: dict[str, Any]) -> dict[str, Any]:
    records = req.get("records")
    if not isinstance(records, list) or not records:
        raise HttpError(400, "body needs a non-empty list 'records'")
    by_partition: dict[int | None, list[Record]] = {}
    for obj in records:
        p = obj.get("partition") if isinstance(obj, dict) else None
        if p is not None and not isinstance(p, int):
            raise HttpError(400, "'partition' must be an integer")
        by_partition.setdefault(p, []).append(record_from_json(obj))
    await core.topic(topic, create=True)
    appends: list[dict[str, int]] = []
    for p, recs in by_partition.items():
        res = await core.execute(
            Produce(topic, RecordBatch(recs), partition=p, partitioning=Partitioning.KEY_HASH)
        )
        appends.extend(
            {"partition": a.partition, "base_offset": a.base_offset, "last_offset": a.last_offset}
            for a in res.appends
        )
    return {"topic": topic, "appends": appends}
