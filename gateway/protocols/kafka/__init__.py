"""The modern Kafka APIs of the Kafka listener (``[listeners.kafka08]``): today's clients.

One listener serves every version: the 0.8 session (``gateway.protocols.kafka08``) keeps the v0
APIs on its fast paths, and hands every (api key, version) this package registers to it.

Modules:

- ``context``: :class:`KafkaContext` (what a handler may use) and :class:`RequestHeader`.
- ``dispatch``: the table ``{api_key: Api}`` of every modern API with its version range and its
  handler; the ApiVersions answer is built from it.
- ``errors``: the canonical :class:`gateway.model.ErrorCode` -> Kafka error code table.

How to add an API
-----------------

1. Write ``async def handle(ctx: KafkaContext, header: RequestHeader, request) -> response`` in a
   module of this package. ``request`` is the kio request entity of ``header.api_version``
   (``kio.schema.<api>.v<N>.request``); return the kio response entity of the same version
   (``kio.index.load_response_schema(key, version)`` gives its class). Framing, request and
   response headers (flexible versions included), tagged fields, the correlation id, metrics of
   the request and its latency are the dispatcher's. Return ``None`` for no answer (acks 0);
   raise :class:`context.CloseConnection` to end the connection (after a logged protocol error).
2. Add one line ``ApiKey: Api("name", min_version, max_version, handle)`` to ``dispatch.APIS``
   (versions the installed kio knows; ApiVersions advertises exactly this range).
3. Per-request outcomes: ``ctx.count(api, outcome)``; a GatewayError becomes a Kafka error code
   with ``ctx.error(api, exc, **fields)`` (logs client errors once, counts every outcome).
"""

from __future__ import annotations
