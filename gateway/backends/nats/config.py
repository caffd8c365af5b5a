"""The NATS backend's configuration (``[backends.<name>]`` with ``type = "nats"``)."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass

from gateway.backends.client_tls import client_ssl_context


@dataclass(frozen=True, slots=True)
class NatsConfig:
    url: str = "nats://127.0.0.1:4222"
    urls: tuple[str, ...] = ()  # several servers of one cluster (then ``url`` is not used)
    # TLS (tls = true, or implied by any of the files); the server may also require it
    tls: bool = False
    tls_ca_file: str = ""  # PEM bundle to trust; "" = the system's
    tls_cert_file: str = ""  # client certificate (mutual TLS), with tls_key_file
    tls_key_file: str = ""
    tls_server_name: str = ""  # the name to verify; "" = each server's host
    # credentials: at most one of user/password, token, nkey_seed_file, creds_file
    user: str = ""
    password: str = ""
    token: str = ""
    nkey_seed_file: str = ""  # an NKey user seed (SU...)
    creds_file: str = ""  # a user JWT and its NKey seed (nsc's .creds)
    stream_prefix: str = "GW"
    subject_prefix: str = "gw"
    kv_bucket: str = "gateway"
    storage: str = "file"  # "file" or "memory"
    replicas: int = 1
    max_batch: int = 1000  # messages per JetStream atomic batch (the server's default limit)
    request_timeout_ms: int = 5000
    connect_timeout_ms: int = 2000
    topic_cache_ms: int = 1000

    def validate(self) -> list[str]:
        problems = []
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            problems.append(
                f"tls_cert_file/tls_key_file: got cert={self.tls_cert_file!r} "
                f"key={self.tls_key_file!r}, expected both or neither"
            )
        for key in ("tls_ca_file", "tls_cert_file", "tls_key_file", "nkey_seed_file", "creds_file"):
            path = getattr(self, key)
            if path and not os.path.isfile(path):
                problems.append(f"{key}: got {path!r}, expected a readable file")
        given = [k for k in ("user", "token", "nkey_seed_file", "creds_file") if getattr(self, k)]
        if len(given) > 1:
            problems.append(
                f"{'/'.join(given)}: got {len(given)} kinds of credentials, expected one"
            )
        if self.password and not self.user:
            problems.append("password: got a password without user, expected user too")
        if self.storage not in ("file", "memory"):
            problems.append(f"storage: got {self.storage!r}, expected 'file' or 'memory'")
        if not 1 <= self.max_batch <= 1000:
            problems.append(f"max_batch: got {self.max_batch}, expected 1..1000")
        return problems


def ssl_context(config: NatsConfig) -> ssl.SSLContext | None:
    if not (config.tls or config.tls_ca_file or config.tls_cert_file):
        return None
    return client_ssl_context(config.tls_ca_file, config.tls_cert_file, config.tls_key_file)
