"""The canonical errors as Kafka error codes (today's numbering; the 0.8 session keeps its own
table of the codes a 0.8 client knows)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as K

from gateway.model import ErrorCode

ERROR_CODES: dict[ErrorCode, int] = {
    ErrorCode.UNKNOWN_TOPIC: K.unknown_topic_or_partition,
    ErrorCode.UNKNOWN_PARTITION: K.unknown_topic_or_partition,
    ErrorCode.OFFSET_OUT_OF_RANGE: K.offset_out_of_range,
    ErrorCode.TOPIC_EXISTS: K.topic_already_exists,
    ErrorCode.INVALID_REQUEST: K.invalid_request,
    ErrorCode.INVALID_TOPIC: K.invalid_topic_exception,
    ErrorCode.INVALID_PARTITIONS: K.invalid_partitions,
    ErrorCode.RECORD_TOO_LARGE: K.message_too_large,
    ErrorCode.CORRUPT_MESSAGE: K.corrupt_message,
    ErrorCode.NOT_COORDINATOR: K.not_coordinator,
    ErrorCode.REBALANCE_IN_PROGRESS: K.rebalance_in_progress,
    ErrorCode.ILLEGAL_GENERATION: K.illegal_generation,
    ErrorCode.UNKNOWN_MEMBER: K.unknown_member_id,
    ErrorCode.UNKNOWN_GROUP: K.group_id_not_found,
    ErrorCode.GROUP_EXISTS: K.invalid_group_id,
    ErrorCode.UNAUTHORIZED: K.topic_authorization_failed,
    ErrorCode.UNAUTHENTICATED: K.sasl_authentication_failed,
    ErrorCode.BACKEND_UNAVAILABLE: K.leader_not_available,
    ErrorCode.TIMEOUT: K.request_timed_out,
    ErrorCode.DUPLICATE_SEQUENCE: K.duplicate_sequence_number,
    ErrorCode.OUT_OF_ORDER_SEQUENCE: K.out_of_order_sequence_number,
    ErrorCode.OFFSET_MISMATCH: K.invalid_request,
    ErrorCode.UNSUPPORTED: K.unsupported_version,
    ErrorCode.READ_ONLY: K.policy_violation,
    ErrorCode.INTERNAL: K.unknown_server_error,
}

CLIENT_ERRORS = frozenset(
    {
        ErrorCode.OFFSET_OUT_OF_RANGE,
        ErrorCode.UNKNOWN_TOPIC,
        ErrorCode.UNKNOWN_PARTITION,
        ErrorCode.INVALID_TOPIC,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.RECORD_TOO_LARGE,
        ErrorCode.OUT_OF_ORDER_SEQUENCE,
    }
)
"""Errors caused by what the client asked for: counted in gateway_protocol_errors_total."""


def kafka_error(code: ErrorCode) -> int:
    """The Kafka error code of a canonical error (-1 UNKNOWN_SERVER_ERROR when none fits)."""
    return int(ERROR_CODES.get(code, K.unknown_server_error))
