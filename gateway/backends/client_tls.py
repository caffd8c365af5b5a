"""TLS contexts for the gateway's own connections to backends (Kafka brokers, NATS servers)."""

from __future__ import annotations

import ssl


def client_ssl_context(
    ca_file: str = "", cert_file: str = "", key_file: str = ""
) -> ssl.SSLContext:
    """A TLS client context that verifies the server against ``ca_file`` (else the system's
    trust store), presenting a client certificate when ``cert_file`` is given. Raises OSError or
    ssl.SSLError for unusable files; the caller names the config keys."""
    ctx = ssl.create_default_context(cafile=ca_file or None)
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file or None)
    return ctx
