"""How the command line and the pipeline reach an admin endpoint that speaks TLS.

When the config's ``[admin]`` has ``tls_cert``, the admin port speaks HTTPS only, and every client
of it here (``gateway topics/produce/consume/groups/matrix``, ``gateway pipeline``, the Spark data
source) speaks HTTPS to it:

- **trust**: the system's CA store, plus the certificate chain of ``[admin] tls_cert`` itself (a
  self-signed admin certificate then verifies from the same config file; any certificate of the
  chain is a trust anchor), plus ``[admin] cli_tls_ca`` or ``GATEWAY_ADMIN_TLS_CA`` (a PEM CA
  file; the variable may list several, separated by ``:``).
- **client certificate**, for an admin that asks for one (``tls_client_ca``):
  ``[admin] cli_tls_cert`` + ``cli_tls_key``, or ``GATEWAY_ADMIN_TLS_CERT`` + ``_KEY``.
- **the name checked** in the server's certificate: ``[admin] tls_server_name`` /
  ``GATEWAY_ADMIN_TLS_SERVER_NAME`` when set; otherwise the host the client connects to when the
  ``tls_cert`` certificate names it, else the first name that certificate holds (an admin bound
  to ``0.0.0.0`` is reached over 127.0.0.1, which a certificate for ``gw.example.com`` does not
  name). A client given only ``https://host:port`` checks ``host``.

The environment variables win over the config keys; ``gateway pipeline`` passes what it resolved
to the Spark workers it starts through them. Every problem is an :class:`AdminTLSError`: one line
naming the endpoint, what is wrong and what to set. Nothing here imports the rest of the package.
"""

from __future__ import annotations

import dataclasses
import functools
import http.client
import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENV_CA = "GATEWAY_ADMIN_TLS_CA"
ENV_CERT = "GATEWAY_ADMIN_TLS_CERT"
ENV_KEY = "GATEWAY_ADMIN_TLS_KEY"
ENV_SERVER_NAME = "GATEWAY_ADMIN_TLS_SERVER_NAME"
ENV_VARS = (ENV_CA, ENV_CERT, ENV_KEY, ENV_SERVER_NAME)

TRUST_HINT = (
    f"set [admin] cli_tls_ca (or {ENV_CA}) to the CA file that signed it (for a self-signed "
    "certificate, the certificate itself)"
)
CERT_HINT = (
    f"set [admin] cli_tls_cert and cli_tls_key (or {ENV_CERT} and {ENV_KEY}) to a certificate "
    "signed by the gateway's [admin] tls_client_ca"
)
NAME_HINT = f"set [admin] tls_server_name (or {ENV_SERVER_NAME}) to a name the certificate holds"

# OpenSSL's verify codes the messages tell apart
_EXPIRED = {10}  # X509_V_ERR_CERT_HAS_EXPIRED
_NOT_YET = {9}  # X509_V_ERR_CERT_NOT_YET_VALID
_NAME = {62, 64}  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH


class AdminTLSError(Exception):
    """A TLS problem between a client and the admin endpoint: ``str(exc)`` is one line saying
    what is wrong and what to set (the CLI exits 2 with it)."""


@dataclass(frozen=True, slots=True)
class ClientTLS:
    """What a client needs to speak HTTPS to the admin endpoint (plain, picklable values)."""

    ca_files: tuple[str, ...] = ()  # trusted besides the system store
    cert_file: str = ""  # a client certificate (with key_file) for tls_client_ca
    key_file: str = ""
    server_name: str = ""  # "" = the host connected to

    def env(self) -> dict[str, str]:
        """The environment variables that give a worker process the same settings."""
        return {
            ENV_CA: os.pathsep.join(self.ca_files),
            ENV_CERT: self.cert_file,
            ENV_KEY: self.key_file,
            ENV_SERVER_NAME: self.server_name,
        }


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ca = environ.get(ENV_CA, "").strip()
    if ca:
        out["ca_files"] = tuple(p for p in ca.split(os.pathsep) if p)
    for var, key in ((ENV_CERT, "cert_file"), (ENV_KEY, "key_file")):
        value = environ.get(var, "").strip()
        if value:
            out[key] = value
    name = environ.get(ENV_SERVER_NAME, "").strip()
    if name:
        out["server_name"] = name
    return out


def _check(tls: ClientTLS, names: Mapping[str, str]) -> ClientTLS:
    """``tls`` when its files are there and the certificate has its key; ``names`` says where
    each value came from (``admin.cli_tls_cert`` or ``GATEWAY_ADMIN_TLS_CERT``)."""
    if bool(tls.cert_file) != bool(tls.key_file):
        raise AdminTLSError(
            f"{names['cert_file']}/{names['key_file']}: got cert={tls.cert_file!r} "
            f"key={tls.key_file!r}, expected both or neither"
        )
    files = [(names["ca_files"], p) for p in tls.ca_files]
    files += [(names[k], getattr(tls, k)) for k in ("cert_file", "key_file") if getattr(tls, k)]
    for where, path in files:
        if not os.path.isfile(path):
            raise AdminTLSError(f"{where}: got {path!r}, expected a readable PEM file")
    return tls


def from_env(environ: Mapping[str, str] | None = None) -> ClientTLS:
    """The settings of ``GATEWAY_ADMIN_TLS_*`` alone (a client given ``https://host:port``)."""
    env = os.environ if environ is None else environ
    tls = ClientTLS(**_env_overrides(env))
    names = {"ca_files": ENV_CA, "cert_file": ENV_CERT, "key_file": ENV_KEY}
    return _check(tls, names)


def from_config(
    admin: Any, connect_host: str, environ: Mapping[str, str] | None = None
) -> ClientTLS | None:
    """The settings for reaching the admin endpoint of a config's ``[admin]`` section at
    ``connect_host``; None when it speaks plain HTTP (no ``tls_cert``)."""
    if not getattr(admin, "tls_cert", ""):
        return None
    env = os.environ if environ is None else environ
    extra = (admin.cli_tls_ca,) if admin.cli_tls_ca else ()
    tls = ClientTLS(
        ca_files=(admin.tls_cert, *extra),
        cert_file=admin.cli_tls_cert,
        key_file=admin.cli_tls_key,
        server_name=admin.tls_server_name,
    )
    overrides = _env_overrides(env)
    pair_from_env = "cert_file" in overrides or "key_file" in overrides
    if pair_from_env:  # the variables replace the keys' certificate and key as a pair
        overrides = {"cert_file": "", "key_file": "", **overrides}
    names = {
        "ca_files": ENV_CA if "ca_files" in overrides else "admin.cli_tls_ca",
        "cert_file": ENV_CERT if pair_from_env else "admin.cli_tls_cert",
        "key_file": ENV_KEY if pair_from_env else "admin.cli_tls_key",
    }
    if "ca_files" in overrides:  # added to the config's certificate, which stays trusted
        overrides["ca_files"] = (admin.tls_cert, *overrides["ca_files"])
    tls = _check(dataclasses.replace(tls, **overrides), names)
    if not tls.server_name:
        tls = dataclasses.replace(tls, server_name=name_to_check(admin, connect_host))
    return tls


def certificate_names(path: str) -> list[str]:
    """The DNS names and IP addresses of the first certificate in the PEM file ``path`` (its
    subject alternative names, else its common name); [] when it cannot be read."""
    try:
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        with open(path, "rb") as fh:
            cert = x509.load_pem_x509_certificate(fh.read())
    except (ImportError, OSError, ValueError):
        return []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n) for n in san.get_values_for_type(x509.DNSName)]
        return names + [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        return [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


def name_to_check(admin: Any, connect_host: str) -> str:
    """The name checked when ``tls_server_name`` is unset: ``connect_host`` when the
    ``tls_cert`` certificate names it, else that certificate's first name (a wildcard name
    made concrete); ``connect_host`` when the certificate holds no name."""
    names = certificate_names(admin.tls_cert)
    if not names or connect_host in names:
        return connect_host
    first = names[0]
    return "admin" + first[1:] if first.startswith("*.") else first


@functools.lru_cache(maxsize=16)
def client_context(tls: ClientTLS) -> ssl.SSLContext:
    """The verifying client context of ``tls`` (made once per process and settings: a Spark
    worker opens many clients)."""
    context = ssl.create_default_context()
    # a certificate of the configured chain is a trust anchor by itself (a self-signed admin
    # certificate, or a leaf whose CA is not on this machine)
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    for path in tls.ca_files:
        try:
            context.load_verify_locations(cafile=path)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise AdminTLSError(
                f"the admin TLS trust file {path!r} does not load: expected PEM certificates "
                f"({getattr(exc, 'reason', None) or exc})"
            ) from None
    if tls.cert_file:
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise AdminTLSError(
                f"the admin client certificate cert={tls.cert_file!r} key={tls.key_file!r} "
                f"does not load: expected a PEM certificate and its key "
                f"({getattr(exc, 'reason', None) or exc})"
            ) from None
    return context


class _HTTPSConnection(http.client.HTTPSConnection):
    """HTTPS that checks ``server_name`` rather than the host it connects to."""

    def __init__(
        self, host: str, port: int, context: ssl.SSLContext, server_name: str, timeout: float
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls_context = context
        self._server_name = server_name or host

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls_context.wrap_socket(self.sock, server_hostname=self._server_name)


def connection(
    host: str, port: int, tls: ClientTLS | None, timeout: float
) -> http.client.HTTPConnection:
    """A (not yet connected) HTTP or, with ``tls``, HTTPS connection to the admin endpoint."""
    if tls is None:
        return http.client.HTTPConnection(host, port, timeout=timeout)
    return _HTTPSConnection(host, port, client_context(tls), tls.server_name, timeout)


def connect(conn: http.client.HTTPConnection, host: str, port: int, tls: ClientTLS | None) -> None:
    """Open ``conn`` (TCP, and the TLS handshake with ``tls``). With ``tls``, a peer that takes
    the connection but drops it in the handshake (a plain HTTP server answering a TLS hello)
    is an :class:`AdminTLSError`, not a reason to think no gateway runs."""
    try:
        conn.connect()
    except ssl.SSLError as exc:
        raise describe(exc, host, port, tls or ClientTLS()) from None
    except ConnectionError as exc:
        if tls is None or isinstance(exc, ConnectionRefusedError):
            raise
        raise describe(ssl.SSLError(str(exc)), host, port, tls) from None


def speaks_tls(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether ``host:port`` completes a TLS handshake (nothing verified: only to tell a plain
    HTTP client what it reached)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            with context.wrap_socket(sock):
                return True
    except (OSError, ValueError):
        return False


def plain_to_tls(host: str, port: int, fix: str) -> AdminTLSError:
    """A plain HTTP client reached a port that speaks TLS."""
    return AdminTLSError(f"the admin endpoint at {host}:{port} speaks TLS (HTTPS): {fix}")


def dropped(exc: BaseException, host: str, port: int) -> AdminTLSError:
    """The admin endpoint closed a verified TLS connection without an answer: in TLS 1.3 that
    is how a gateway refuses a client certificate (after the handshake, from the client's
    side)."""
    return AdminTLSError(
        f"the admin endpoint at {host}:{port} closed the TLS connection without an answer "
        f"({str(exc) or type(exc).__name__}): if it asks for a client certificate, {CERT_HINT}"
    )


def describe(exc: ssl.SSLError, host: str, port: int, tls: ClientTLS) -> AdminTLSError:
    """One line for a TLS failure talking to the admin endpoint at ``host:port``."""
    where = f"the admin endpoint at {host}:{port}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        if code in _NAME:
            return AdminTLSError(
                f"{where} speaks TLS but its certificate is not valid for the name "
                f"{tls.server_name or host!r}: {NAME_HINT}"
            )
        if code in _EXPIRED:
            return AdminTLSError(
                f"{where} speaks TLS but its certificate has expired: renew the gateway's "
                "[admin] tls_cert (and restart it)"
            )
        if code in _NOT_YET:
            return AdminTLSError(
                f"{where} speaks TLS but its certificate is not valid yet: check the clocks, "
                "or renew the gateway's [admin] tls_cert"
            )
        return AdminTLSError(
            f"{where} speaks TLS but its certificate does not verify "
            f"({exc.verify_message}): {TRUST_HINT}"
        )
    reason = str(getattr(exc, "reason", None) or "")
    if "ALERT" in reason:
        return AdminTLSError(
            f"{where} refused this client in the TLS handshake ({reason.lower()}): {CERT_HINT}"
        )
    return AdminTLSError(
        f"{where} does not complete a TLS handshake ({reason.lower() or exc}) though this "
        "client was told it speaks TLS ([admin] tls_cert, or an https:// address): if it "
        "speaks plain HTTP, start the gateway with the config that has tls_cert, or give "
        "the address without https://"
    )
