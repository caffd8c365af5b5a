"""The topic commands: CREATE, DELETE, LIST, DESCRIBE, and METADATA and FIND_COORDINATOR,
which say where topics and groups are served (this gateway, standalone)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.core.view import CoreView
from gateway.model import (
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    DescribeTopic,
    ErrorCode,
    GatewayError,
    ListTopics,
    TopicDescription,
    TopicInfo,
)
from gateway.protocols.base import ConnectionContext
from gateway.protocols.cursus import CursusListenerConfig, codec
from gateway.protocols.cursus.gotext import go_atoi
from gateway.protocols.cursus.state import DEFAULT_GROUP, CursusState, GroupBinding

# topic config keys that CREATE sets (PUBLISH and batches read H_IDEMPOTENT)
H_IDEMPOTENT = "cursus.idempotent"
H_EVENT_SOURCING = "cursus.event_sourcing"

NO_SUCH_TOPIC = (ErrorCode.UNKNOWN_TOPIC, ErrorCode.INVALID_TOPIC)
"""The codes a DELETE or DESCRIBE of a missing topic (or of a name no topic can have) fails with."""


class TopicCommands:
    """The topic commands of :class:`~gateway.protocols.cursus.session.CursusSession`, which
    mixes this class in and provides the attributes below."""

    ctx: ConnectionContext
    core: CoreView
    cfg: CursusListenerConfig
    state: CursusState
    _topic: Callable[[str], Awaitable[TopicInfo | None]]

    async def _create(self, args_text: str) -> str:
        args = codec.parse_params(args_text)
        topic = args.get("topic", "")
        if not topic:
            return "missing topic parameter. Expected: CREATE topic=<name> [partitions=<N>]"
        partitions = self.cfg.default_partitions
        if "partitions" in args:
            n = go_atoi(args["partitions"])
            if n is None or n <= 0:
                return "partitions must be a positive integer"
            partitions = n
        if "replication_factor" in args:
            rf = go_atoi(args["replication_factor"])
            if rf is None or rf <= 0:
                return "replication_factor must be a positive integer"
        config: list[tuple[str, str]] = []
        if args.get("idempotent", "").lower() == "true":
            config.append((H_IDEMPOTENT, "true"))
        if args.get("event_sourcing", "").lower() == "true":
            config.append((H_EVENT_SOURCING, "true"))
        try:
            info = await self.core.execute(CreateTopic(topic, partitions, tuple(config)))
        except GatewayError as exc:
            if exc.code is not ErrorCode.TOPIC_EXISTS:
                return f"ERROR: failed to create topic '{topic}': {exc.message}"
            info = await self.core.topic(topic)
            if info.partitions < partitions:
                try:
                    info = await self.core.execute(
                        CreatePartitions(topic, partitions - info.partitions)
                    )
                except GatewayError as exc2:
                    return f"ERROR: failed to create topic '{topic}': {exc2.message}"
        self.state.groups.setdefault(DEFAULT_GROUP, GroupBinding(topic, info.partitions))
        return f"Topic '{topic}' now has {info.partitions} partitions"

    async def _delete(self, args_text: str) -> str:
        topic = codec.parse_params(args_text).get("topic", "")
        if not topic:
            return "missing topic parameter. Expected: DELETE topic=<name>"
        try:
            await self.core.execute(DeleteTopic(topic))
        except GatewayError as exc:
            if exc.code in NO_SUCH_TOPIC:
                return f"topic '{topic}' not found"
            raise
        return f"\U0001f5d1\ufe0f Topic '{topic}' deleted"

    async def _list(self) -> str:
        topics = await self.core.execute(ListTopics())
        if not topics:
            return "(no topics)"
        return ", ".join(t.name for t in topics)

    async def _describe(self, args_text: str) -> str:
        topic = codec.parse_params(args_text).get("topic", "")
        if not topic:
            return "missing topic parameter. Expected: DESCRIBE topic=<name>"
        desc = await self._topic_description(topic)
        if desc is None:
            return f"topic '{topic}' not found"
        meta = {"topic": topic, "partitions": partition_rows(desc)}
        return json.dumps(meta, indent=2, ensure_ascii=False)

    async def _topic_description(self, topic: str) -> TopicDescription | None:
        """DESCRIBE's look-up: None when there is no such topic (or no topic can have the name)."""
        try:
            return await self.core.execute(DescribeTopic(topic))
        except GatewayError as exc:
            if exc.code in NO_SUCH_TOPIC:
                return None
            raise

    async def _metadata(self, args_text: str) -> str:
        reply, _ = await self._metadata_head(args_text)
        return reply

    async def _metadata_head(self, args_text: str) -> tuple[str, TopicInfo | None]:
        """METADATA's reply as both dialects begin it (every partition led here, epoch 0) and
        the topic; or the error reply and None."""
        topic = codec.parse_params(args_text).get("topic", "")
        if not topic:
            return "ERROR: missing_topic command=METADATA", None
        info = await self._topic(topic)
        if info is None:
            return f"ERROR: topic_not_found topic={topic}", None
        addr = f"{self.ctx.advertised_host}:{self.ctx.advertised_port}"
        n = info.partitions
        leaders, epochs = ",".join([addr] * n), ",".join(["0"] * n)
        return f"OK topic={topic} partitions={n} leaders={leaders} epochs={epochs}", info

    async def _find_coordinator(self, args_text: str) -> str:
        if not codec.parse_params(args_text).get("group"):
            return "ERROR: missing_group command=FIND_COORDINATOR"
        return (
            f"OK coordinator_id=standalone host={self.ctx.advertised_host} "
            f"port={self.ctx.advertised_port}"
        )


def partition_rows(desc: TopicDescription) -> list[dict[str, Any]]:
    """DESCRIBE's partitions, as the standalone broker shows them (no leader, no replicas)."""
    return [
        {
            "id": p.partition,
            "leader": "",
            "replicas": None,
            "isr": None,
            "leo": p.high_watermark,
            "hwm": p.high_watermark,
        }
        for p in desc.partitions
    ]
