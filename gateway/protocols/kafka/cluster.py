"""DescribeCluster v0-v1: this listener as the one broker (and the controller)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as K

from gateway.protocols.kafka.codec import NO_THROTTLE, build, nested, response_class
from gateway.protocols.kafka.context import KafkaContext, RequestHeader
from gateway.protocols.kafka.metadata import CLUSTER_ID

BROKERS_ENDPOINT = 1


async def handle(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(60, header.api_version)
    endpoint = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if endpoint != BROKERS_ENDPOINT:  # controllers are not reachable through a gateway
        ctx.count("describe_cluster", str(int(K.unsupported_endpoint_type)))
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=K.unsupported_endpoint_type,
            error_message=f"endpoint type {endpoint}: only brokers (1)",
            endpoint_type=endpoint,
            cluster_id=CLUSTER_ID,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=-2147483648,
        )
    broker = nested(cls, "DescribeClusterBroker")(
        broker_id=ctx.node_id, host=ctx.host, port=ctx.port, rack=None
    )
    ctx.count("describe_cluster", "ok")
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=K.none,
        error_message=None,
        endpoint_type=BROKERS_ENDPOINT,
        cluster_id=CLUSTER_ID,
        controller_id=ctx.node_id,
        brokers=(broker,),
        cluster_authorized_operations=-2147483648,
    )
