"""TLS for mongomem's own HTTP servers and for its HTTP clients.

Servers (the memory service, the MCP server's streamable HTTP): with a
certificate and its key configured (``MONGOMEM_SERVICE_TLS_CERT_FILE`` and
``…_KEY_FILE``; ``MONGOMEM_MCP_TLS_…``), :func:`server_context` loads them
into the :class:`ssl.SSLContext` the server listens with, TLS 1.2 at least.
A pair that cannot be loaded (a missing file, no PEM in it, a key that is not
the certificate's, an encrypted key) is a :class:`~mongomem.errors.ConfigError`
that names the setting, raised before anything listens. Keys are never
prompted for, read into messages or logged.

Clients (:class:`~mongomem.sdk.HttpTransport`, :class:`~mongomem.sdk.spaces.HttpSpaces`
and what wraps them) take ``verify`` (:data:`Verify`) as httpx does: ``True``
(default) trusts the system's certificate authorities, a path trusts only the
CA bundle (PEM) there — for a service whose certificate a private CA signed —,
an :class:`ssl.SSLContext` is used as it is, and ``False`` turns verification
off. A certificate that does not verify is a
:class:`~mongomem.errors.ConfigError`, not a retriable failure
(:func:`certificate_problem`).
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import TypeAlias

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from mongomem.errors import ConfigError

__all__ = ["Verify", "certificate_problem", "client_verify", "server_context"]

#: What a client's ``verify`` may be (see the module docstring).
Verify: TypeAlias = bool | str | os.PathLike[str] | ssl.SSLContext


class _EncryptedKey(Exception):
    """The key file asked for a password (it is never prompted for)."""


def _no_password() -> bytes:
    raise _EncryptedKey


def server_context(
    cert_file: Path | None, key_file: Path | None, prefix: str
) -> ssl.SSLContext | None:
    """The server context for the pair of settings ``<prefix>TLS_CERT_FILE`` and
    ``<prefix>TLS_KEY_FILE`` (``prefix`` like ``"MONGOMEM_SERVICE_"``), or ``None``
    (plain HTTP) when neither is set. Settings make sure it is both or neither."""
    if cert_file is None or key_file is None:
        return None
    cert, key = f"{prefix}TLS_CERT_FILE", f"{prefix}TLS_KEY_FILE"
    for name, path in ((cert, cert_file), (key, key_file)):
        try:
            path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read {name} ({path}): {exc.strerror or exc}") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file, password=_no_password)
    except _EncryptedKey:
        raise ConfigError(
            f"{key} ({key_file}) is encrypted: give the key unencrypted, "
            "in a file only the server's user can read"
        ) from None
    except ssl.SSLError as exc:
        raise ConfigError(_why_not(cert, cert_file, key, key_file, exc)) from None
    return context


def _why_not(cert: str, cert_file: Path, key: str, key_file: Path, exc: ssl.SSLError) -> str:
    """Which file OpenSSL refused, and why, in one line (it names neither)."""
    try:
        x509.load_pem_x509_certificates(cert_file.read_bytes())
    except ValueError:
        return f"{cert} ({cert_file}) holds no PEM certificate"
    try:
        serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return f"{key} ({key_file}) holds no PEM private key"
    if exc.reason == "KEY_VALUES_MISMATCH":
        return f"{key} ({key_file}) is not the key of the certificate in {cert} ({cert_file})"
    return f"cannot serve TLS with {cert} ({cert_file}) and {key} ({key_file}): {exc}"


def client_verify(verify: Verify) -> bool | ssl.SSLContext:
    """``verify`` as httpx takes it: a CA bundle's path becomes a context that trusts only
    that bundle (loaded now: one that cannot be read is a :class:`ConfigError`)."""
    if isinstance(verify, bool | ssl.SSLContext):
        return verify
    try:
        return ssl.create_default_context(cafile=os.fspath(verify))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot load the CA bundle {os.fspath(verify)!r} (verify=): {exc}"
        ) from None


def certificate_problem(exc: BaseException) -> str | None:
    """Why the server's certificate did not verify, if that is what ``exc`` (an httpx
    error) comes from; ``None`` for any other failure."""
    seen: BaseException | None = exc
    for _ in range(8):  # httpx wraps httpcore wraps ssl: a short chain, and never a loop
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {seen.verify_message or seen.reason}"
        seen = seen.__cause__ or seen.__context__
    return None
