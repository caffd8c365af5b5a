"""The gRPC layer of the Liftbridge API, without HTTP/2: the methods, the status codes, the
events :class:`~gateway.protocols.liftbridge.codec.GrpcConnection` hands out, its errors, and
the small encodings gRPC puts in headers (``grpc-timeout``, ``grpc-message``) and around each
message (the 5-byte length prefix). Sans-IO."""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb

SERVICE = "proto.API"
GRPC_PREFIX = struct.Struct(">BI")


class Status(enum.IntEnum):
    """gRPC status codes."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class MethodSpec(NamedTuple):
    name: str
    request: type[Any]
    response: type[Any]
    client_streaming: bool = False
    server_streaming: bool = False

    @property
    def path(self) -> str:
        return f"/{SERVICE}/{self.name}"


def _methods() -> dict[str, MethodSpec]:
    specs = [
        MethodSpec("CreateStream", pb.CreateStreamRequest, pb.CreateStreamResponse),
        MethodSpec("DeleteStream", pb.DeleteStreamRequest, pb.DeleteStreamResponse),
        MethodSpec("PauseStream", pb.PauseStreamRequest, pb.PauseStreamResponse),
        MethodSpec("SetStreamReadonly", pb.SetStreamReadonlyRequest, pb.SetStreamReadonlyResponse),
        MethodSpec("Subscribe", pb.SubscribeRequest, pb.Message, server_streaming=True),
        MethodSpec("FetchMetadata", pb.FetchMetadataRequest, pb.FetchMetadataResponse),
        MethodSpec(
            "FetchPartitionMetadata",
            pb.FetchPartitionMetadataRequest,
            pb.FetchPartitionMetadataResponse,
        ),
        MethodSpec("Publish", pb.PublishRequest, pb.PublishResponse),
        MethodSpec(
            "PublishAsync",
            pb.PublishRequest,
            pb.PublishResponse,
            client_streaming=True,
            server_streaming=True,
        ),
        MethodSpec("PublishToSubject", pb.PublishToSubjectRequest, pb.PublishToSubjectResponse),
        MethodSpec("SetCursor", pb.SetCursorRequest, pb.SetCursorResponse),
        MethodSpec("FetchCursor", pb.FetchCursorRequest, pb.FetchCursorResponse),
        MethodSpec("JoinConsumerGroup", pb.JoinConsumerGroupRequest, pb.JoinConsumerGroupResponse),
        MethodSpec(
            "LeaveConsumerGroup", pb.LeaveConsumerGroupRequest, pb.LeaveConsumerGroupResponse
        ),
        MethodSpec(
            "FetchConsumerGroupAssignments",
            pb.FetchConsumerGroupAssignmentsRequest,
            pb.FetchConsumerGroupAssignmentsResponse,
        ),
        MethodSpec(
            "ReportConsumerGroupCoordinator",
            pb.ReportConsumerGroupCoordinatorRequest,
            pb.ReportConsumerGroupCoordinatorResponse,
        ),
    ]
    return {s.path: s for s in specs}


METHODS: dict[str, MethodSpec] = _methods()
METHODS_BY_NAME: dict[str, MethodSpec] = {s.name: s for s in METHODS.values()}


# ------------------------------------------------------------------------------------- events


@dataclass(slots=True)
class CallStarted:
    """Server role: a new call. ``timeout_s`` is the peer's grpc-timeout (None: no deadline)."""

    stream_id: int
    method: MethodSpec
    timeout_s: float | None
    metadata: tuple[tuple[bytes, bytes], ...]


@dataclass(slots=True)
class ResponseStarted:
    """Client role: the server's response headers."""

    stream_id: int
    headers: tuple[tuple[bytes, bytes], ...]


@dataclass(slots=True)
class MessageReceived:
    """Decoded messages (requests in the server role, responses in the client role), in order:
    consecutive messages of one stream in one ``receive_data`` arrive as one event."""

    stream_id: int
    messages: list[Any]
    nbytes: int = 0  # their framed size on the wire, for the session's accounting

    @property
    def message(self) -> Any:
        """The first message (for calls that carry exactly one)."""
        return self.messages[0]


@dataclass(slots=True)
class HalfClosed:
    """Server role: the client ended its side of the call (no more request messages)."""

    stream_id: int


@dataclass(slots=True)
class CallEnded:
    """Client role: the server's trailers (status and message)."""

    stream_id: int
    status: int
    message: str


@dataclass(slots=True)
class CallReset:
    """The peer reset the stream (a cancelled call)."""

    stream_id: int
    error_code: int


@dataclass(slots=True)
class CallError:
    """A bad call or message on one stream (unknown method, bad framing, malformed protobuf,
    message too large). Server role: answer it with ``send_trailers(status, message)``.
    ``kind`` names it for the error counter."""

    stream_id: int
    status: Status
    message: str
    kind: str


@dataclass(slots=True)
class ConnectionClosed:
    """The peer sent GOAWAY."""

    error_code: int
    last_stream_id: int


Event = (
    CallStarted
    | ResponseStarted
    | MessageReceived
    | HalfClosed
    | CallEnded
    | CallReset
    | CallError
    | ConnectionClosed
)

# ------------------------------------------------------------------------------------- helpers

_TIMEOUT_UNITS = {
    ord("H"): 3600.0,
    ord("M"): 60.0,
    ord("S"): 1.0,
    ord("m"): 1e-3,
    ord("u"): 1e-6,
    ord("n"): 1e-9,
}


def parse_timeout(value: bytes) -> float:
    """``grpc-timeout`` (1-8 ASCII digits and a unit) in seconds. Raises ValueError."""
    if not 2 <= len(value) <= 9 or not value[:-1].isdigit():
        raise ValueError(f"bad grpc-timeout {value!r}")
    unit = _TIMEOUT_UNITS.get(value[-1])
    if unit is None:
        raise ValueError(f"bad grpc-timeout unit in {value!r}")
    return int(value[:-1]) * unit


def encode_timeout(seconds: float) -> bytes:
    """A grpc-timeout value for ``seconds`` (millisecond or coarser resolution)."""
    ms = max(1, int(seconds * 1000))
    if ms < 100_000_000:
        return b"%dm" % ms
    return b"%dS" % min(99_999_999, ms // 1000)


_UNRESERVED = frozenset(range(0x20, 0x7F)) - {ord("%")}


def encode_grpc_message(text: str) -> bytes:
    """Percent-encode a status message as gRPC requires (UTF-8, then %XX outside 0x20-0x7E)."""
    raw = text.encode("utf-8")
    if all(b in _UNRESERVED for b in raw):
        return raw
    return b"".join(bytes((b,)) if b in _UNRESERVED else b"%%%02X" % b for b in raw)


def decode_grpc_message(raw: bytes) -> str:
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] == 0x25 and i + 2 < len(raw) and _is_hex(raw[i + 1 : i + 3]):
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "replace")


def _is_hex(b: bytes) -> bool:
    return len(b) == 2 and all(c in b"0123456789abcdefABCDEF" for c in b)


def frame_message(payload: bytes) -> bytes:
    """One gRPC length-prefixed message (uncompressed)."""
    return GRPC_PREFIX.pack(0, len(payload)) + payload


def _status_of(headers: tuple[tuple[bytes, bytes], ...]) -> tuple[int, str]:
    status = int(Status.UNKNOWN)
    message = ""
    for k, v in headers:
        if k == b"grpc-status":
            try:
                status = int(v)
            except ValueError:
                status = int(Status.UNKNOWN)
        elif k == b"grpc-message":
            message = decode_grpc_message(v)
    return status, message
