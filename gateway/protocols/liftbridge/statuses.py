"""The gRPC statuses and messages of the Liftbridge API: the reference server's texts, the
error an RPC raises (:class:`RpcError`) and how the model's error codes map onto gRPC statuses
and PublishAsync error codes."""

from __future__ import annotations

from gateway.model import ErrorCode, GatewayError
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.codec import Status

# The reference server's (Liftbridge v1.9.0) status messages, declared once: clients and
# operators see the same texts from the gateway. ``{}`` fields are filled with str.format.
TEXT = {
    # CreateStream, DeleteStream
    "name_empty": "Name cannot be empty",
    "subject_invalid": "Subject is invalid",
    "stream_reserved": "Stream is reserved",
    "stream_exists": "stream already exists",
    "replication_factor": "Invalid replicationFactor {rf}",
    "replication_factor_cluster": "Invalid replicationFactor {rf}, cluster size {size}",
    "stream_does_not_exist": "stream does not exist",
    # PauseStream, SetStreamReadonly
    "stream_not_found": "stream not found",  # no partitions listed
    "partition_does_not_exist": "partition does not exist",
    # Subscribe
    "no_consumer_id": "Consumer id cannot be empty when group id is provided",
    "no_such_partition": "No such partition",
    "unknown_start": "Unknown StartPosition {pos}",
    "unknown_stop": "Unknown StopPosition {pos}",
    "stop_before_start": "Stop offset is before start offset: {stop} < {start}",
    "stream_empty": "Stream is empty",
    "stop_reached": "Stop offset reached",
    "readonly_end": "End of readonly partition",
    "log_deleted": "commit log was deleted",  # the subscription's stream was deleted
    "log_closed": "commit log was closed",  # the subscription's partition was paused
    # FetchPartitionMetadata
    "partition_not_found": "partition not found",
    # Publish, PublishAsync
    "publish_no_stream": "no stream provided",
    "publish_no_such_stream": "no such stream: {stream}",
    "publish_no_such_partition": "no such partition: {partition}",
    "publish_readonly": "readonly partition: {partition}",
    "publish_occ_no_ack": "stream with concurrency control must have AckPolicy set",
    "incorrect_offset": "incorrect expected offset",
    "too_large": "message exceeds max replication size",
    # cursors, consumer groups
    "no_stream": "No stream provided",
    "no_cursor_id": "No cursorId provided",
    "no_group_id": "No groupId provided",
    "no_consumer": "No consumerId provided",
    "no_streams": "No streams provided",
    "no_coordinator": "No coordinator provided",
    "group_not_found": "consumer group does not exist",
    "not_member": "consumer is not a member of the consumer group",
    "group_epoch": "client-provided group epoch differs from broker group epoch",
    "report_no_group": "No such consumer group {group}",
    "report_coordinator": (
        "Coordinator generation mismatch, current coordinator: {coordinator} epoch: {epoch}, "
        "got coordinator: {got} epoch: {got_epoch}"
    ),
    "report_not_member": "Consumer {consumer} is not a member of consumer group {group}",
}


def text(key: str, **fields: object) -> str:
    """The reference server's message ``key`` of :data:`TEXT`, its fields filled."""
    return TEXT[key].format(**fields) if fields else TEXT[key]


class RpcError(Exception):
    def __init__(self, status: Status, message: str) -> None:
        super().__init__(f"{status.name}: {message}")
        self.status = status
        self.message = message


_STATUS_FOR: dict[ErrorCode, Status] = {
    ErrorCode.UNKNOWN_TOPIC: Status.NOT_FOUND,
    ErrorCode.UNKNOWN_PARTITION: Status.NOT_FOUND,
    ErrorCode.UNKNOWN_GROUP: Status.NOT_FOUND,
    ErrorCode.TOPIC_EXISTS: Status.ALREADY_EXISTS,
    ErrorCode.GROUP_EXISTS: Status.ALREADY_EXISTS,
    ErrorCode.INVALID_REQUEST: Status.INVALID_ARGUMENT,
    ErrorCode.INVALID_TOPIC: Status.INVALID_ARGUMENT,
    ErrorCode.INVALID_PARTITIONS: Status.INVALID_ARGUMENT,
    ErrorCode.RECORD_TOO_LARGE: Status.INVALID_ARGUMENT,
    ErrorCode.OFFSET_OUT_OF_RANGE: Status.INVALID_ARGUMENT,
    ErrorCode.CORRUPT_MESSAGE: Status.INVALID_ARGUMENT,
    ErrorCode.READ_ONLY: Status.FAILED_PRECONDITION,
    ErrorCode.NOT_COORDINATOR: Status.FAILED_PRECONDITION,
    ErrorCode.UNKNOWN_MEMBER: Status.FAILED_PRECONDITION,
    ErrorCode.ILLEGAL_GENERATION: Status.FAILED_PRECONDITION,
    ErrorCode.REBALANCE_IN_PROGRESS: Status.FAILED_PRECONDITION,
    ErrorCode.UNAUTHORIZED: Status.PERMISSION_DENIED,
    ErrorCode.UNAUTHENTICATED: Status.UNAUTHENTICATED,
    ErrorCode.BACKEND_UNAVAILABLE: Status.UNAVAILABLE,
    ErrorCode.TIMEOUT: Status.DEADLINE_EXCEEDED,
    ErrorCode.UNSUPPORTED: Status.UNIMPLEMENTED,
    ErrorCode.DUPLICATE_SEQUENCE: Status.ALREADY_EXISTS,
    # a unary Publish whose expectedOffset missed: the reference server turns the
    # INCORRECT_OFFSET ack into Unknown
    ErrorCode.OFFSET_MISMATCH: Status.UNKNOWN,
    ErrorCode.OUT_OF_ORDER_SEQUENCE: Status.FAILED_PRECONDITION,
    ErrorCode.INTERNAL: Status.INTERNAL,
}

_ASYNC_CODE_FOR: dict[Status, pb.PublishAsyncError.Code] = {
    Status.NOT_FOUND: pb.PublishAsyncError.NOT_FOUND,
    Status.INVALID_ARGUMENT: pb.PublishAsyncError.BAD_REQUEST,
    Status.FAILED_PRECONDITION: pb.PublishAsyncError.READONLY,
    Status.PERMISSION_DENIED: pb.PublishAsyncError.PERMISSION_DENIED,
    Status.UNKNOWN: pb.PublishAsyncError.INCORRECT_OFFSET,  # only OFFSET_MISMATCH is Unknown
}


def status_for(code: ErrorCode) -> Status:
    return _STATUS_FOR.get(code, Status.INTERNAL)


# the reference server's texts for model errors it has its own words for
_TEXT_FOR: dict[ErrorCode, str] = {
    ErrorCode.TOPIC_EXISTS: "stream_exists",
    ErrorCode.OFFSET_MISMATCH: "incorrect_offset",
    ErrorCode.RECORD_TOO_LARGE: "too_large",
}


def rpc_error(exc: GatewayError) -> RpcError:
    key = _TEXT_FOR.get(exc.code)
    return RpcError(status_for(exc.code), text(key) if key else exc.message)


def async_error(req: pb.PublishRequest, exc: RpcError) -> pb.PublishResponse:
    code = _ASYNC_CODE_FOR.get(exc.status, pb.PublishAsyncError.INTERNAL)
    return pb.PublishResponse(
        correlationId=req.correlationId,
        asyncError=pb.PublishAsyncError(code=code, message=exc.message),
        ack=pb.Ack(),
    )
