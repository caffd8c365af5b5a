"""TANK's messages as Python objects (the events of ``codec.TankConnection``), its status
codes and its two error types, sans-IO. How each message is laid out on the wire is declared in
``codec.py``. Reference: ``docs/protocols/tank.md``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from gateway.protocols.errors import LocalProtocolError, RemoteProtocolError  # noqa: F401
from gateway.protocols.tank.bundle import (
    BundleError,
    BundleInfo,
    TankMessage,
    decode_bundle,
    read_varint,
)

U64_MAX = 0xFFFFFFFFFFFFFFFF
DEFAULT_MAX_FRAME = 100 << 20


class MsgId(enum.IntEnum):
    PRODUCE = 0x01
    CONSUME = 0x02
    PING = 0x03
    PRODUCE_WITH_SEQNUM = 0x05
    DISCOVER_PARTITIONS = 0x06
    CREATE_TOPIC = 0x07
    RELOAD_CONF = 0x08
    STATUS = 0x0A
    DISCOVER_TOPICS = 0x0B
    DISCOVER_TOPOLOGY = 0x0C


# Produce status bytes (docs/protocols/tank.md)
P_OK = 0x00
P_UNKNOWN_PARTITION = 0x01
P_IO_FAULT = 0x02
P_PENDING = 0x03
P_INSUFFICIENT_REPLICAS = 0x04
P_INVALID_SEQNUMS = 0x0A
P_OTHER_LEADER = 0xFC
P_NO_LEADER = 0xFD
P_READ_ONLY = 0xFE
P_UNKNOWN_TOPIC = 0xFF

# Consume partition err_or_flags (docs/protocols/tank.md)
C_OK = 0x00
C_BOUNDARY = 0x01
C_OTHER_LEADER = 0xFC
C_NO_LEADER = 0xFD
C_SPARSE = 0xFE
C_SYSTEM_ERROR = 0xFB
C_UNKNOWN_PARTITION = 0xFF

# CreateTopic err (docs/protocols/tank.md)
CT_OK = 0
CT_EXISTS = 1
CT_SYSTEM_ERROR = 2
CT_BAD_CONFIG = 4
CT_READ_ONLY = 5
CT_INVALID = 10
CT_UNSUPPORTED = 11

# ReloadConf err
RC_OK = 0
RC_NO_CONFIG = 2
RC_PARSE_ERROR = 3
RC_BAD_PARTITION = 10
RC_UNKNOWN_TOPIC = 11
RC_CLUSTER_MODE = 12

# DiscoverPartitions per-partition failure codes
DP_SYSTEM_ERROR = 0xFB
DP_NO_LEADER = 0xFD
DP_OTHER_LEADER = 0xFC

MAX_FETCH_SIZE = 64 << 20  # the broker caps a partition's fetch_size here
TANK_VERSION = 400


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Any = _NeedData()


class Role(enum.Enum):
    SERVER = "server"
    CLIENT = "client"


# ----------------------------------------------------------------------------- events


@dataclass(slots=True)
class Ping:
    pass


@dataclass(slots=True)
class ProducePartition:
    partition: int
    bundle: bytes
    base_seqnum: int = 0  # ProduceWithSeqnum only
    info: BundleInfo | None = None  # filled in by the server-role decoder (validated bundle)


@dataclass(slots=True)
class ProduceTopic:
    name: str
    partitions: list[ProducePartition]


@dataclass(slots=True)
class ProduceRequest:
    request_id: int
    topics: list[ProduceTopic]
    with_seqnum: bool = False
    client_version: int = 2
    client_id: bytes = b""
    required_acks: int = 0
    ack_timeout_ms: int = 0

    @property
    def msg_id(self) -> int:
        return MsgId.PRODUCE_WITH_SEQNUM if self.with_seqnum else MsgId.PRODUCE


@dataclass(slots=True)
class ProduceTopicResult:
    name: str
    statuses: list[int] | None  # None: unknown topic (one 0xff on the wire)


@dataclass(slots=True)
class ProduceResponse:
    """The answer to a Produce or a ProduceWithSeqnum request: both go out with message id 0x01,
    as the real broker frames them (tank-cli takes any other id for a network fault);
    ``with_seqnum`` only says which request it answers."""

    request_id: int
    topics: list[ProduceTopicResult]
    with_seqnum: bool = False


@dataclass(slots=True)
class ConsumePartitionRequest:
    partition: int
    seq: int  # 0: earliest; U64_MAX: tail
    fetch_size: int


@dataclass(slots=True)
class ConsumeTopic:
    name: str
    partitions: list[ConsumePartitionRequest]


@dataclass(slots=True)
class ConsumeRequest:
    request_id: int
    topics: list[ConsumeTopic]
    max_wait_ms: int = 0
    min_bytes: int = 0
    client_version: int = 2
    client_id: bytes = b""
    flags: int = 0  # only on the wire for client_version >= 3


@dataclass(slots=True)
class ConsumePartitionResult:
    partition: int
    err: int = C_OK
    base_seq: int = 0
    hwmark: int = 0
    chunk: bytes | memoryview | list[bytes | memoryview] = b""
    first_available: int = 0  # boundary fault only
    leader: tuple[int, int] | None = None  # (addr4, port) for C_OTHER_LEADER

    def messages(self) -> list[TankMessage]:
        """The complete messages of the chunk (client role)."""
        chunk = self.chunk if not isinstance(self.chunk, list) else b"".join(self.chunk)
        return decode_chunk(chunk, self.base_seq)


@dataclass(slots=True)
class ConsumeTopicResult:
    name: str
    partitions: list[ConsumePartitionResult] | None  # None: unknown topic
    requested: int = 0  # partition count echoed for an unknown topic


@dataclass(slots=True)
class ConsumeResponse:
    request_id: int
    topics: list[ConsumeTopicResult]


@dataclass(slots=True)
class DiscoverPartitionsRequest:
    request_id: int
    topic: str
    partitions: list[int] | None = None


@dataclass(slots=True)
class PartitionWatermarks:
    first_available: int
    hwmark: int
    err: int = 0  # nonzero: both u64 are U64_MAX on the wire, then this code
    leader: tuple[int, int] | None = None


@dataclass(slots=True)
class DiscoverPartitionsResponse:
    request_id: int
    topic: str
    partitions: list[PartitionWatermarks]  # empty: unknown topic


@dataclass(slots=True)
class CreateTopicRequest:
    request_id: int
    topic: str
    partitions: int
    config: bytes = b""


@dataclass(slots=True)
class CreateTopicResponse:
    request_id: int
    topic: str
    err: int = CT_OK


@dataclass(slots=True)
class ReloadConfRequest:
    request_id: int
    topic: str
    partition: int


@dataclass(slots=True)
class ReloadConfResponse:
    request_id: int
    topic: str
    partition: int
    err: int = RC_OK


@dataclass(slots=True)
class StatusRequest:
    request_id: int


@dataclass(slots=True)
class StatusResponse:
    request_id: int
    topics: int
    partitions: int
    open_partitions: int
    open_time: int = 0
    startup_ts: int = 0
    version: int = TANK_VERSION
    flags: int = 0
    cluster: tuple[int, str, int] | None = None  # (flags, name, nodes) in cluster mode


@dataclass(slots=True)
class DiscoverTopicsRequest:
    request_id: int
    flags: int = 0


@dataclass(slots=True)
class TopicEntry:
    name: str
    enabled: bool
    partitions: int
    rf: int | None = None  # cluster mode only


@dataclass(slots=True)
class DiscoverTopicsResponse:
    request_id: int
    topics: list[TopicEntry]
    cluster_aware: bool = False


@dataclass(slots=True)
class DiscoverTopologyRequest:
    request_id: int
    flags: int = 0


@dataclass(slots=True)
class DiscoverTopologyResponse:
    request_id: int
    cluster: bytes | None = None  # None: standalone (`ff ff`); else the raw cluster description


Request = (
    ProduceRequest
    | ConsumeRequest
    | DiscoverPartitionsRequest
    | CreateTopicRequest
    | ReloadConfRequest
    | StatusRequest
    | DiscoverTopicsRequest
    | DiscoverTopologyRequest
)
Response = (
    ProduceResponse
    | ConsumeResponse
    | DiscoverPartitionsResponse
    | CreateTopicResponse
    | ReloadConfResponse
    | StatusResponse
    | DiscoverTopicsResponse
    | DiscoverTopologyResponse
)


def decode_chunk(chunk: bytes | memoryview, base_seq: int) -> list[TankMessage]:
    """The complete messages of a consume chunk (``bundle_len varint · bundle`` repeated); a
    partial last bundle, which the broker may send, is dropped (TankClient::process_consume)."""
    out: list[TankMessage] = []
    pos = 0
    end = len(chunk)
    seq = base_seq
    while pos < end:
        try:
            blen, body = read_varint(chunk, pos, end)
        except BundleError:
            break  # cut inside the length
        if body + blen > end:
            break
        try:
            header, msgs = decode_bundle(chunk, body, body + blen, seq)
        except BundleError as exc:
            raise RemoteProtocolError(f"consume chunk: {exc}", "bad_bundle") from None
        out.extend(msgs)
        seq = (header.last_seq if header.sparse else seq + header.message_count - 1) + 1
        pos = body + blen
    return out
