"""The command model: the one vocabulary every protocol session and every backend speaks.

A session turns its protocol's requests into the commands below and hands them to the core
(``gateway.core.engine.Core.execute``); a backend stores and returns :class:`RecordBatch` objects.
Nothing here knows a protocol or a backend.

How each protocol's concepts map onto the model
-----------------------------------------------
- **Topic** (canonical name) and **partition** (dense, 0-based int).
  Kafka 0.8 and Cursus topics are topics; TANK topics are topics; a Liftbridge stream's name is the
  topic (its subject is stored with the topic, defaulting to the name); an Iggy stream ``s`` topic
  ``t`` is the topic ``s.t``, except stream ``default`` which holds the undotted names. Iggy
  partition ids are 1-based: the Iggy edge subtracts one.
- **Offset**: 0-based, per partition, increasing but not necessarily dense: a backend may hold
  offsets with no record behind them (a Kafka cluster's transaction markers, aborted or
  compacted records; ``Capabilities.dense_offsets`` says whether it can). A record keeps its
  backend offset on every listener; a :class:`RecordBatch` is always a dense window, so a read
  across a gap returns one batch per run. TANK sequence numbers are ``offset + 1`` (0 means
  "earliest" on the wire). Kafka, Cursus, Liftbridge and Iggy offsets are offsets.
- **Timestamps** are microseconds (``timestamp_us``). Kafka, TANK and Cursus milliseconds scale
  exactly (x1000); Liftbridge nanoseconds round to the microsecond; Iggy already uses microseconds.
  A protocol without a timestamp (Kafka magic 0) stamps the append time at its edge.
- **Committed offset**: the next offset to read (Kafka's convention). Iggy stores the last offset
  consumed, so its edge adds/subtracts one. Keyed by (group, topic, partition), independent of
  membership: every protocol sees the same value for the same group name. An Iggy consumer group
  with numeric id N is the group named ``"N"`` unless it has a name; a Liftbridge cursor id is the
  group name.
- **Headers**: ``tuple[tuple[str, bytes], ...]``, order kept, duplicates allowed. Fields that
  exist in one protocol only travel as reserved headers whose names start with
  ``RESERVED_HEADER_PREFIX``
  (Cursus eventType/schemaVersion/aggregateVersion/producerId, Iggy message id and typed headers,
  Liftbridge correlation id), so another protocol of the same family gets them back. Kafka 0.8 has
  no headers and drops them (docs/interop.md).
- **Errors**: :class:`GatewayError` carries one canonical :class:`ErrorCode`; each protocol maps
  it to its own codes in one table.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

RESERVED_HEADER_PREFIX = "_gw."
"""Header names starting with this carry protocol-only fields (e.g. ``_gw.iggy.id``)."""

Headers = tuple[tuple[str, bytes], ...]


def now_us() -> int:
    """The current wall-clock time in microseconds (the model's timestamp unit)."""
    return time.time_ns() // 1000


class Record(NamedTuple):
    """One message. A NamedTuple, not a frozen dataclass: it is built per record on decode paths
    and a tuple costs a third of a frozen dataclass. ``offset`` is -1 until the record is stored."""

    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_us: int = -1
    offset: int = -1


class BatchCodec(Protocol):
    """Turns a block of encoded records into records and back. A codec object is a singleton per
    format, so ``batch.codec is CODEC`` tells whether a batch can pass through without
    re-encoding."""

    name: str

    def encode(self, records: Sequence[Record]) -> bytes: ...

    def decode(self, data: bytes | memoryview, base_offset: int) -> list[Record]: ...


class RecordBatch:
    """What sessions hand to the core and what backends append and return.

    A batch holds its records decoded, or as an encoded block plus the codec that can decode it
    (decoded lazily, in bulk, only when somebody needs records). A window ``[start, stop)`` lets a
    backend hand out part of a stored block without copying; ``encoded_as(codec)`` gives the block
    back untouched only when the whole block is in the window, so same-format paths build no
    per-record objects.
    """

    __slots__ = (
        "_records",
        "_encoded",
        "codec",
        "base_offset",
        "_start",
        "_stop",
        "max_timestamp_us",
        "_size",
        "_full",
    )

    def __init__(
        self,
        records: Sequence[Record] | None = None,
        *,
        encoded: bytes | memoryview | None = None,
        codec: BatchCodec | None = None,
        count: int | None = None,
        base_offset: int = -1,
        max_timestamp_us: int = -1,
    ) -> None:
        if records is None and (encoded is None or codec is None or count is None):
            raise ValueError("a RecordBatch needs records, or encoded bytes with codec and count")
        self._records: Sequence[Record] | None = records
        self._encoded = encoded
        self.codec = codec
        self.base_offset = base_offset
        total = len(records) if records is not None else count
        assert total is not None
        self._start = 0
        self._stop = total
        self._full = total
        self.max_timestamp_us = max_timestamp_us
        self._size = len(encoded) if encoded is not None else -1

    def __len__(self) -> int:
        return self._stop - self._start

    @property
    def count(self) -> int:
        return self._stop - self._start

    @property
    def first_offset(self) -> int:
        return -1 if self.base_offset < 0 else self.base_offset + self._start

    @property
    def last_offset(self) -> int:
        return -1 if self.base_offset < 0 else self.base_offset + self._stop - 1

    @property
    def is_whole(self) -> bool:
        return self._start == 0 and self._stop == self._full

    @property
    def size_bytes(self) -> int:
        """Approximate encoded size: exact for an encoded whole batch, estimated otherwise."""
        if self._encoded is not None and self.is_whole:
            return self._size
        if self._encoded is not None:
            return max(1, self._size * (self._stop - self._start) // max(1, self._full))
        return sum(
            (len(r.key) if r.key else 0)
            + (len(r.value) if r.value else 0)
            + sum(len(k) + len(v) for k, v in r.headers)
            + 24
            for r in self.records
        )

    def _all_records(self) -> Sequence[Record]:
        if self._records is None:
            assert self._encoded is not None and self.codec is not None
            self._records = self.codec.decode(self._encoded, self.base_offset)
        elif (
            self.base_offset >= 0 and self._records and self._records[0].offset != self.base_offset
        ):
            base = self.base_offset
            self._records = [r._replace(offset=base + i) for i, r in enumerate(self._records)]
        return self._records

    @property
    def records(self) -> Sequence[Record]:
        """The records in the window, with offsets when the batch is stored."""
        recs = self._all_records()
        if self._start == 0 and self._stop == len(recs):
            return recs
        return recs[self._start : self._stop]

    def encoded_window(self, codec: BatchCodec) -> tuple[bytes | memoryview, int, int] | None:
        """``(block, start, stop)``: the whole encoded block and this batch's window in it
        (record indexes), when the batch is in ``codec``'s format; else None. Lets a same-format
        reader serve part of a block without decoding it."""
        if self.codec is codec and self._encoded is not None:
            return self._encoded, self._start, self._stop
        return None

    def encoded_as(self, codec: BatchCodec) -> bytes | memoryview | None:
        """The encoded block if it is already in ``codec``'s format and whole, else None."""
        if self.codec is codec and self._encoded is not None and self.is_whole:
            return self._encoded
        return None

    def encode(self, codec: BatchCodec) -> bytes | memoryview:
        """The window's records in ``codec``'s format, re-encoding only when needed."""
        block = self.encoded_as(codec)
        if block is not None:
            return block
        return codec.encode(self.records)

    def stored_at(self, base_offset: int) -> RecordBatch:
        """This batch's window as a whole new batch whose first record has ``base_offset``
        (what a backend keeps after an append). Shares the data; copies nothing."""
        if self.is_whole:
            new = RecordBatch.__new__(RecordBatch)
            new._records = self._records
            new._encoded = self._encoded
            new.codec = self.codec
            new._size = self._size
            new._start, new._stop, new._full = 0, self._full, self._full
        else:
            new = RecordBatch(list(self.records))
        new.base_offset = base_offset
        new.max_timestamp_us = self.max_timestamp_us
        return new

    def whole(self) -> RecordBatch:
        """The whole stored batch this window is part of (shares the data; copies nothing).
        Protocols whose consumers accept a block that starts before the offset they asked for
        (TANK) use it to pass a stored block through untouched."""
        if self.is_whole:
            return self
        new = RecordBatch.__new__(RecordBatch)
        new._records = self._records
        new._encoded = self._encoded
        new.codec = self.codec
        new.base_offset = self.base_offset
        new.max_timestamp_us = self.max_timestamp_us
        new._size = self._size
        new._full = self._full
        new._start, new._stop = 0, self._full
        return new

    def slice(self, start_offset: int, max_records: int | None = None) -> RecordBatch:
        """A view from ``start_offset`` (absolute) holding at most ``max_records`` records."""
        if self.base_offset < 0:
            raise ValueError("only stored batches (with offsets) can be sliced by offset")
        new = RecordBatch.__new__(RecordBatch)
        new._records = self._records
        new._encoded = self._encoded
        new.codec = self.codec
        new.base_offset = self.base_offset
        new.max_timestamp_us = self.max_timestamp_us
        new._size = self._size
        new._full = self._full
        new._start = max(self._start, start_offset - self.base_offset)
        new._stop = self._stop
        if max_records is not None:
            new._stop = min(new._stop, new._start + max_records)
        new._start = min(new._start, new._stop)
        return new

    def __repr__(self) -> str:
        return (
            f"RecordBatch(count={self.count}, base_offset={self.base_offset}, "
            f"codec={getattr(self.codec, 'name', None)})"
        )


class ErrorCode(enum.Enum):
    """The canonical errors. ``retriable`` says whether a client may simply try again."""

    UNKNOWN_TOPIC = "unknown_topic"
    UNKNOWN_PARTITION = "unknown_partition"
    OFFSET_OUT_OF_RANGE = "offset_out_of_range"
    TOPIC_EXISTS = "topic_exists"
    INVALID_REQUEST = "invalid_request"
    INVALID_TOPIC = "invalid_topic"
    INVALID_PARTITIONS = "invalid_partitions"
    RECORD_TOO_LARGE = "record_too_large"
    CORRUPT_MESSAGE = "corrupt_message"
    NOT_COORDINATOR = "not_coordinator"
    REBALANCE_IN_PROGRESS = "rebalance_in_progress"
    ILLEGAL_GENERATION = "illegal_generation"
    UNKNOWN_MEMBER = "unknown_member"
    UNKNOWN_GROUP = "unknown_group"
    GROUP_EXISTS = "group_exists"
    GROUP_NOT_EMPTY = "group_not_empty"
    INCONSISTENT_GROUP_PROTOCOL = "inconsistent_group_protocol"
    """A member's protocols share none with the group's (or the group is used by members of
    the other kind: client-side versus server-side assignment)."""
    MEMBER_ID_REQUIRED = "member_id_required"
    """A new member must join again with the member id the error carries
    (:class:`MemberIdRequired`)."""
    FENCED_INSTANCE_ID = "fenced_instance_id"
    """A static member (group instance id) whose id was taken over by a newer member."""
    UNAUTHORIZED = "unauthorized"
    UNAUTHENTICATED = "unauthenticated"
    BACKEND_UNAVAILABLE = "backend_unavailable"
    TIMEOUT = "timeout"
    DUPLICATE_SEQUENCE = "duplicate_sequence"
    OUT_OF_ORDER_SEQUENCE = "out_of_order_sequence"
    OFFSET_MISMATCH = "offset_mismatch"
    """A conditional append (``Produce.expected_offset``) found the partition's next offset
    elsewhere; nothing was appended."""
    UNSUPPORTED = "unsupported"
    READ_ONLY = "read_only"
    INTERNAL = "internal"

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.BACKEND_UNAVAILABLE,
        ErrorCode.TIMEOUT,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.REBALANCE_IN_PROGRESS,
    }
)


class GatewayError(Exception):
    """A failed command. Sessions map ``code`` to their protocol's error; the message is for logs
    and for protocols that carry text (Cursus, Liftbridge)."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(f"{code.value}: {message}" if message else code.value)
        self.code = code
        self.message = message or code.value


class MemberIdRequired(GatewayError):
    """A new member of a client-assigned group was given ``member_id``: it joins again with it
    (Kafka JoinGroup v4+), so that a member whose first answer is lost is not counted twice."""

    def __init__(self, member_id: str) -> None:
        super().__init__(ErrorCode.MEMBER_ID_REQUIRED, f"join again as member {member_id!r}")
        self.member_id = member_id


# --------------------------------------------------------------------------------- topics


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the backends know it. ``config`` holds per-topic settings as strings
    (e.g. ``subject`` for Liftbridge, ``retention_ms``)."""

    name: str
    partitions: int
    config: tuple[tuple[str, str], ...] = ()

    def get(self, key: str, default: str | None = None) -> str | None:
        return dict(self.config).get(key, default)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int


# ------------------------------------------------------------------------------- commands


R = TypeVar("R")
"""A command's result type."""
_C = TypeVar("_C", bound="Command[Any]")


class Command(Generic[R]):
    """A request to the core, generic in what it answers: ``Core.execute(Produce(...))`` is a
    :class:`ProduceResult` to the type checker. Every command is a frozen, slotted dataclass;
    this base adds no fields and no per-instance cost (empty ``__slots__``, no ``__init__``).
    Results defined below the commands are named in quotes."""

    __slots__ = ()

    @classmethod
    def handled_by(
        cls: type[_C], handler: Callable[[_C], Awaitable[R]]
    ) -> tuple[type[_C], Callable[[_C], Awaitable[R]]]:
        """A row of a dispatch table (the core's): the type checker holds ``handler`` to this
        command type and to its result type ``R``."""
        return cls, handler


class Acks(enum.IntEnum):
    NONE = 0
    LEADER = 1
    ALL = -1


@dataclass(frozen=True, slots=True)
class CreateTopic(Command[TopicInfo]):
    topic: str
    partitions: int | None = None  # None: the server's default_partitions
    config: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteTopic(Command[None]):
    topic: str


@dataclass(frozen=True, slots=True)
class ListTopics(Command[list[TopicInfo]]):
    pass


@dataclass(frozen=True, slots=True)
class DescribeTopic(Command["TopicDescription"]):
    """Result: :class:`TopicDescription`. With ``create=True`` an unknown topic is created when
    the server's ``auto_create_topics`` is on (Kafka 0.8 Metadata semantics)."""

    topic: str
    create: bool = False


@dataclass(frozen=True, slots=True)
class CreatePartitions(Command[TopicInfo]):
    """Add ``count`` partitions at the end."""

    topic: str
    count: int


@dataclass(frozen=True, slots=True)
class DeletePartitions(Command[TopicInfo]):
    """Remove the last ``count`` partitions."""

    topic: str
    count: int


class Partitioning(enum.Enum):
    EXPLICIT = "explicit"
    KEY_HASH = "key_hash"
    ROUND_ROBIN = "round_robin"


@dataclass(frozen=True, slots=True)
class Produce(Command["ProduceResult"]):
    """Append ``batch`` to ``topic``. With ``partition=None`` the records are spread by key hash
    (records without a key round-robin) or round-robin, per ``partitioning``. ``producer_id`` and
    ``sequence`` (the first record's sequence) enable idempotent de-duplication.

    ``expected_offset`` makes the append conditional: it happens only if the partition's next
    offset is exactly this, so the first record gets it; otherwise it fails with
    ``ErrorCode.OFFSET_MISMATCH`` and appends nothing. The check and the append are one step
    (mirroring tools name the offsets their records must get: TANK ProduceWithSeqnum); it needs
    an explicit ``partition``. Where a backend's storage has no conditional append (Kafka,
    upstream servers) the gateway serializes its own writers to the partition around the check,
    but writers outside this gateway can still slip in between (docs/decisions.md 2026-11-25)."""

    topic: str
    batch: RecordBatch
    partition: int | None = None
    partitioning: Partitioning = Partitioning.EXPLICIT
    acks: Acks = Acks.ALL
    producer_id: int | str | None = None  # str: protocols with textual ids (Cursus)
    producer_epoch: int = 0
    sequence: int | None = None
    timeout_ms: int = 30_000
    expected_offset: int | None = None


@dataclass(frozen=True, slots=True)
class Fetch(Command["FetchResult"]):
    """Read from ``offset``. At the log end, wait up to ``max_wait_ms`` for ``min_bytes``.
    ``max_bytes`` is a soft limit: at least one batch is returned when data exists. Returned
    batches are windows starting exactly at ``offset``."""

    topic: str
    partition: int
    offset: int
    max_records: int = 1_000_000
    max_bytes: int = 1 << 20
    max_wait_ms: int = 0
    min_bytes: int = 1


class OffsetSpec(enum.IntEnum):
    LATEST = -1
    EARLIEST = -2


@dataclass(frozen=True, slots=True)
class ListOffsets(Command["ListOffsetsResult"]):
    """``timestamp_us`` is an :class:`OffsetSpec` value or a time: the first offset whose
    timestamp is >= it (the high watermark when none is)."""

    topic: str
    partition: int
    timestamp_us: int = OffsetSpec.LATEST


@dataclass(frozen=True, slots=True)
class CommitOffset(Command[None]):
    group: str
    topic: str
    partition: int
    offset: int  # the next offset to read
    metadata: str = ""
    generation: int = -1  # -1: a simple (non-member) commit
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class FetchOffset(Command["CommittedOffset"]):
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class JoinGroup(Command["JoinGroupResult"]):
    group: str
    topics: tuple[str, ...]
    member_id: str = ""  # empty: a new member
    session_timeout_ms: int = 30_000
    protocol: str = ""
    """The assignment the member asks for: "range", "sticky", or "" (the server's
    ``group_assignment``)."""
    create_member: bool = False
    """True: an unknown ``member_id`` joins as a new member under that id (Cursus picks member
    ids itself) instead of failing with UNKNOWN_MEMBER."""
    protocols: tuple[tuple[str, bytes], ...] = ()
    """Non-empty: client-side assignment (Kafka's classic protocol). The (name, opaque
    metadata) pairs the member supports, in order of preference; the group picks one name
    every member supports, its leader gets every member's metadata and sends the assignment
    in SyncGroup. ``topics`` are still the member's subscription (ACLs, snapshots)."""
    protocol_type: str = ""
    instance_id: str | None = None
    """A static member's ``group.instance.id``: its rejoin under a new member id replaces the
    old member without a rebalance."""
    rebalance_timeout_ms: int = 0
    """How long a rebalance waits for the members to join again (0: the session timeout)."""
    require_member_id: bool = False
    """A new member without a member id gets :class:`MemberIdRequired` first."""
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class SyncGroup(Command["SyncGroupResult"]):
    group: str
    member_id: str
    generation: int
    assignments: tuple[tuple[str, bytes, tuple[tuple[str, int], ...]], ...] = ()
    """Client-assigned groups: the leader's (member id, opaque assignment, the (topic,
    partition) pairs it holds when the protocol layer can read them) for each member."""
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat(Command[None]):
    group: str
    member_id: str
    generation: int
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroup(Command[None]):
    group: str
    member_id: str
    instance_id: str | None = None
    """A static member may leave by its instance id alone (``member_id`` empty)."""


@dataclass(frozen=True, slots=True)
class DescribeGroup(Command["GroupDescription"]):
    group: str


@dataclass(frozen=True, slots=True)
class Stats(Command["StatsResult"]):
    pass


@dataclass(frozen=True, slots=True)
class Ping(Command[float]):
    pass


# -------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class TopicDescription:
    topic: TopicInfo
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where one partition's share of a Produce landed (offsets inclusive)."""

    partition: int
    base_offset: int
    last_offset: int
    timestamp_us: int = -1
    duplicate: bool = False  # an idempotent retry: already stored, not appended again


@dataclass(frozen=True, slots=True)
class ProduceResult:
    topic: str
    appends: tuple[AppendResult, ...]

    @property
    def base_offset(self) -> int:
        return self.appends[0].base_offset if self.appends else -1

    @property
    def last_offset(self) -> int:
        return self.appends[-1].last_offset if self.appends else -1


@dataclass(frozen=True, slots=True)
class FetchResult:
    topic: str
    partition: int
    batches: tuple[RecordBatch, ...]
    high_watermark: int
    log_start_offset: int

    @property
    def records(self) -> list[Record]:
        out: list[Record] = []
        for b in self.batches:
            out.extend(b.records)
        return out

    @property
    def count(self) -> int:
        return sum(b.count for b in self.batches)


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    offset: int
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int  # -1: nothing committed
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    member_id: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    group: str
    member_id: str
    generation: int
    leader_id: str
    members: tuple[str, ...]
    protocol: str = ""
    """Client-assigned groups: the protocol name the group chose."""
    member_metadata: tuple[tuple[str, str | None, bytes], ...] = ()
    """Client-assigned groups, for the leader only: (member id, instance id, metadata of the
    chosen protocol) of every member."""


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    assignment: MemberAssignment
    data: bytes = b""
    """Client-assigned groups: the opaque assignment the leader sent for this member."""
    protocol: str = ""


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group: str
    state: str  # "empty" | "rebalancing" | "stable"
    generation: int
    members: tuple[MemberAssignment, ...]
    topics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StatsResult:
    topics: int
    partitions: int
    records: int
    extra: dict[str, int] = field(default_factory=dict)


APPEND_SENT: ContextVar[Callable[[], None] | None] = ContextVar("append_sent", default=None)
"""Set by a caller of ``Produce`` that may start its next append before this one is answered
(the Kafka 0.8 listener's produce pipeline). A backend whose appends travel over one ordered
connection (the Kafka backend) calls it once the append's request is written to the broker, so
an append sent after it lands after it; backends that never call it keep the caller waiting for
the answer, as before."""
