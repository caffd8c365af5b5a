"""InitProducerId v0-v4, for idempotent producers only: a fresh producer id (or, v3+, the same
id with the next epoch when the producer asks again with its own), no transactions: a
``transactional.id`` gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the answer of a broker that will
not let this client use transactions."""

from __future__ import annotations

import itertools
import time
from typing import Any

from kio.schema.errors import ErrorCode as K

from gateway.observability import protocol_error
from gateway.protocols.base import PerCore
from gateway.protocols.kafka.codec import NO_THROTTLE, build, response_class
from gateway.protocols.kafka.context import PROTOCOL, KafkaContext, RequestHeader

API = "init_producer_id"
MAX_EPOCH = 32767

_IDS: PerCore[Any] = PerCore()


def _next_id(core: Any) -> int:
    """Ids start at the gateway's start time in ms << 12: a restarted gateway (which forgot its
    producers' sequences) never hands out an id it gave before."""
    counter = _IDS.get(core, lambda: itertools.count(int(time.time() * 1000) << 12))
    return next(counter)


async def handle(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(22, header.api_version)
    if request.transactional_id is not None:
        protocol_error(
            ctx.log,
            PROTOCOL,
            "transactions",
            transactional_id=request.transactional_id,
            error="transactions are not supported",
        )
        ctx.count(API, str(int(K.transactional_id_authorization_failed)))
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=K.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH:
        new_pid, new_epoch = pid, epoch + 1  # the producer bumps its epoch (KIP-360)
    else:
        new_pid, new_epoch = _next_id(ctx.core), 0
    ctx.count(API, "ok")
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=K.none,
        producer_id=new_pid,
        producer_epoch=new_epoch,
    )
