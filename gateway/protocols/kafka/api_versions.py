"""ApiVersions v0-v3: the table of :data:`gateway.protocols.kafka.dispatch.APIS` (with the 0.8
versions the 0.8 session serves where they join the modern range)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as K
from kio.static.primitive import i16

from gateway.protocols.kafka.codec import NO_THROTTLE, response_class
from gateway.protocols.kafka.context import KafkaContext, RequestHeader

API_VERSIONS = 18
MAX_VERSION = 3


def advertised(
    apis: dict[int, Any], legacy: tuple[tuple[int, int, int], ...]
) -> list[tuple[int, int, int]]:
    """(key, min, max) rows: each modern range, extended down to the 0.8 session's versions of
    the same key when they meet it (ranges cannot have holes); 0.8-only keys as they are."""
    rows: dict[int, tuple[int, int]] = {
        key: (api.min_version, api.max_version) for key, api in apis.items()
    }
    for key, low, high in legacy:
        if key not in rows:
            rows[key] = (low, high)
        else:
            modern_low, modern_high = rows[key]
            if high >= modern_low - 1 and low < modern_low:
                rows[key] = (low, modern_high)
    return [(key, low, high) for key, (low, high) in sorted(rows.items())]


def response(version: int, table: list[tuple[int, int, int]]) -> Any:
    """The answer to ApiVersions ``version``: above :data:`MAX_VERSION`, v0 with
    UNSUPPORTED_VERSION and the ApiVersions row only, as a broker answers (the client then
    retries with a version it finds there)."""
    if version > MAX_VERSION or version < 0:
        cls = response_class(API_VERSIONS, 0)
        row = next(r for r in table if r[0] == API_VERSIONS)
        return cls(
            error_code=K.unsupported_version,
            api_keys=(_row(cls, row),),
        )
    cls = response_class(API_VERSIONS, version)
    fields: dict[str, Any] = {
        "error_code": K.none,
        "api_keys": tuple(_row(cls, row) for row in table),
    }
    if version >= 1:
        fields["throttle_time"] = NO_THROTTLE
    return cls(**fields)


def _row(cls: Any, row: tuple[int, int, int]) -> Any:
    module = __import__(cls.__module__, fromlist=["ApiVersion"])
    return module.ApiVersion(api_key=i16(row[0]), min_version=i16(row[1]), max_version=i16(row[2]))


def answer(ctx: KafkaContext, header: RequestHeader, table: list[tuple[int, int, int]]) -> Any:
    """The ApiVersions answer with ``table``, the rows the listener advertises (the dispatch
    table builds them, and registers this answer)."""
    ctx.count("api_versions", "ok" if header.api_version <= MAX_VERSION else "35")
    return response(header.api_version, table)
