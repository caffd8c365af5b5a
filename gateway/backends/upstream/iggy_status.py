"""Iggy status codes as the gateway's error codes, for the Iggy upstream and its groups."""

from __future__ import annotations

from gateway.model import ErrorCode, GatewayError
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyStatusError

S = c.Status
_STATUS: dict[int, ErrorCode] = {
    S.STREAM_ID_NOT_FOUND: ErrorCode.UNKNOWN_TOPIC,
    S.STREAM_NAME_NOT_FOUND: ErrorCode.UNKNOWN_TOPIC,
    S.TOPIC_ID_NOT_FOUND: ErrorCode.UNKNOWN_TOPIC,
    S.TOPIC_NAME_NOT_FOUND: ErrorCode.UNKNOWN_TOPIC,
    S.TOPIC_ID_ALREADY_EXISTS: ErrorCode.TOPIC_EXISTS,
    S.TOPIC_NAME_ALREADY_EXISTS: ErrorCode.TOPIC_EXISTS,
    S.INVALID_TOPIC_NAME: ErrorCode.INVALID_TOPIC,
    S.INVALID_STREAM_NAME: ErrorCode.INVALID_TOPIC,
    S.TOO_MANY_PARTITIONS: ErrorCode.INVALID_PARTITIONS,
    S.PARTITION_NOT_FOUND: ErrorCode.UNKNOWN_PARTITION,
    S.NO_PARTITIONS: ErrorCode.INVALID_PARTITIONS,
    S.INVALID_OFFSET: ErrorCode.OFFSET_OUT_OF_RANGE,
    S.TOO_BIG_HEADERS_PAYLOAD: ErrorCode.RECORD_TOO_LARGE,
    S.TOO_BIG_MESSAGE_PAYLOAD: ErrorCode.RECORD_TOO_LARGE,
    S.INVALID_HEADER_KEY: ErrorCode.INVALID_REQUEST,
    S.INVALID_HEADER_VALUE: ErrorCode.INVALID_REQUEST,
    S.EMPTY_MESSAGE_PAYLOAD: ErrorCode.INVALID_REQUEST,
    S.INVALID_MESSAGES_COUNT: ErrorCode.INVALID_REQUEST,
    S.UNAUTHENTICATED: ErrorCode.UNAUTHENTICATED,
    S.UNAUTHORIZED: ErrorCode.UNAUTHORIZED,
    S.INVALID_CREDENTIALS: ErrorCode.UNAUTHENTICATED,
    S.FEATURE_UNAVAILABLE: ErrorCode.UNSUPPORTED,
}


def status_error(exc: IggyStatusError, what: str) -> GatewayError:
    return GatewayError(_STATUS.get(exc.status, ErrorCode.INTERNAL), f"{what}: {exc}")
