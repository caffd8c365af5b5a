"""The Kafka backend's configuration (``[backends.<name>]`` with ``type = "kafka"``) and the
API versions it speaks."""

from __future__ import annotations

import os
from dataclasses import dataclass

from gateway.backends.kafka.sasl import SaslLogin

ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")  # their index is Kafka's codec id

# The one version of each API we speak: inside both Kafka 2.1's and Kafka 4.x's ranges.
API_VERSIONS = {
    0: 7,  # Produce (record batches v2)
    1: 10,  # Fetch
    2: 4,  # ListOffsets
    3: 7,  # Metadata
    8: 6,  # OffsetCommit
    9: 5,  # OffsetFetch
    10: 2,  # FindCoordinator
    19: 3,  # CreateTopics
    20: 3,  # DeleteTopics
    37: 1,  # CreatePartitions
}
API_NAMES = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    19: "CreateTopics",
    20: "DeleteTopics",
    37: "CreatePartitions",
}
REQUIRED_APIS = (0, 1, 2, 3)
TOPIC_CONFIG_KEYS = {"retention_ms": "retention.ms", "retention_bytes": "retention.bytes"}


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    bootstrap: str = "127.0.0.1:9092"  # host:port[,host:port...]
    client_id: str = "gateway"
    kv_topic: str = "__gateway_kv"
    replication_factor: int = -1  # -1: the broker's default
    request_timeout_ms: int = 10_000
    connect_timeout_ms: int = 3_000
    metadata_max_age_ms: int = 5_000
    max_response_bytes: int = 128 << 20
    read_ahead: bool = True  # see RecordStore.read (data.py)
    isolation: str = "read_committed"  # or "read_uncommitted": see gateway.backends.kafka
    compression: str = "none"  # of the batches the gateway writes: none|gzip|snappy|lz4|zstd
    # this gateway's membership in the cluster's consumer groups (gateway/backends/kafka/groups.py)
    group_session_timeout_ms: int = 6_000  # Kafka's smallest by default
    group_heartbeat_ms: int = 1_000
    group_rebalance_timeout_ms: int = 3_000  # how long a round waits for the other gateways
    max_cluster_groups: int = 1_000  # groups joined at once (each holds one connection)
    idempotence: bool = True  # producer id + sequences: a retried produce is stored once
    delivery_timeout_ms: int = 20_000  # an idempotent produce is retried until this long
    # TLS to the brokers (tls = true, or implied by any of the files)
    tls: bool = False
    tls_ca_file: str = ""  # PEM bundle to trust; "" = the system's
    tls_cert_file: str = ""  # client certificate (mutual TLS), with tls_key_file
    tls_key_file: str = ""
    tls_server_name: str = ""  # the name to verify; "" = the host of each broker address
    # SASL (SaslHandshake v1 + SaslAuthenticate); "" = none
    sasl_mechanism: str = ""  # "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512"
    sasl_username: str = ""
    sasl_password: str = ""
    sasl_password_file: str = ""  # read at start; preferred over sasl_password

    def validate(self) -> list[str]:
        problems = []
        if self.isolation not in ISOLATION_LEVELS:
            problems.append(
                f"isolation: got {self.isolation!r}, expected one of {tuple(ISOLATION_LEVELS)}"
            )
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            problems.append(
                f"tls_cert_file/tls_key_file: got cert={self.tls_cert_file!r} "
                f"key={self.tls_key_file!r}, expected both or neither"
            )
        for key in ("tls_ca_file", "tls_cert_file", "tls_key_file", "sasl_password_file"):
            path = getattr(self, key)
            if path and not os.path.isfile(path):
                problems.append(f"{key}: got {path!r}, expected a readable file")
        if not 0 < self.group_heartbeat_ms < self.group_session_timeout_ms:
            problems.append(
                f"group_heartbeat_ms: got {self.group_heartbeat_ms}, expected more than 0 and "
                f"less than group_session_timeout_ms ({self.group_session_timeout_ms})"
            )
        if self.group_rebalance_timeout_ms <= self.group_heartbeat_ms:
            problems.append(
                f"group_rebalance_timeout_ms: got {self.group_rebalance_timeout_ms}, expected "
                f"more than group_heartbeat_ms ({self.group_heartbeat_ms})"
            )
        if self.max_cluster_groups < 1:
            problems.append(f"max_cluster_groups: got {self.max_cluster_groups}, expected >= 1")
        if self.delivery_timeout_ms <= 0:
            problems.append(
                f"delivery_timeout_ms: got {self.delivery_timeout_ms!r}, expected a positive "
                "number of milliseconds"
            )
        if self.compression not in CODECS:
            problems.append(f"compression: got {self.compression!r}, expected one of {CODECS}")
        if self.sasl_mechanism and self.sasl_mechanism not in SASL_MECHANISMS:
            problems.append(
                f"sasl_mechanism: got {self.sasl_mechanism!r}, expected one of {SASL_MECHANISMS}"
            )
        if self.sasl_mechanism and not self.sasl_username:
            problems.append("sasl_username: got '', expected a user name with sasl_mechanism")
        if self.sasl_mechanism and not (self.sasl_password or self.sasl_password_file):
            problems.append(
                "sasl_password: got nothing, expected sasl_password or sasl_password_file"
            )
        return problems

    @property
    def uses_tls(self) -> bool:
        return self.tls or bool(self.tls_ca_file or self.tls_cert_file)


def sasl_login(config: KafkaConfig) -> SaslLogin | None:
    if not config.sasl_mechanism:
        return None
    password = config.sasl_password
    if config.sasl_password_file:
        with open(config.sasl_password_file) as f:
            password = f.read().rstrip("\n")
    return SaslLogin(config.sasl_mechanism, config.sasl_username, password)
