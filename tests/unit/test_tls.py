"""TLS settings to contexts, and ``verify`` on every HTTP client (no servers)."""

from __future__ import annotations

import inspect
import ssl
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from mongomem.adapters.tls import certificate_problem, client_verify, server_context
from mongomem.errors import ConfigError
from mongomem.sdk import AsyncMemory, HttpTransport, Memory
from mongomem.sdk.spaces import HttpSpaces, Spaces
from mongomem.testing import Certificates, make_certificates

PREFIX = "MONGOMEM_SERVICE_"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


def test_no_files_is_plain_http() -> None:
    assert server_context(None, None, PREFIX) is None


def test_the_pair_loads_into_a_server_context_of_tls_1_2_at_least(certs: Certificates) -> None:
    context = server_context(certs.cert_file, certs.key_file, PREFIX)
    assert context is not None
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE  # clients are not asked for certificates


def _encrypted(certs: Certificates, path: Path) -> Path:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(certs.key_file.read_bytes(), password=None)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    return path


@pytest.mark.parametrize(
    ("problem", "says"),
    [
        ("no cert", "cannot read MONGOMEM_SERVICE_TLS_CERT_FILE ({cert}): No such file"),
        ("no key", "cannot read MONGOMEM_SERVICE_TLS_KEY_FILE ({key}): No such file"),
        ("cert not PEM", "MONGOMEM_SERVICE_TLS_CERT_FILE ({cert}) holds no PEM certificate"),
        ("key not PEM", "MONGOMEM_SERVICE_TLS_KEY_FILE ({key}) holds no PEM private key"),
        ("swapped", "MONGOMEM_SERVICE_TLS_CERT_FILE ({cert}) holds no PEM certificate"),
        ("wrong key", "MONGOMEM_SERVICE_TLS_KEY_FILE ({key}) is not the key of the certificate"),
        ("encrypted", "MONGOMEM_SERVICE_TLS_KEY_FILE ({key}) is encrypted"),
    ],
)
def test_a_pair_that_cannot_be_loaded_is_a_config_error_naming_the_setting(
    certs: Certificates, tmp_path: Path, problem: str, says: str
) -> None:
    cert, key = certs.cert_file, certs.key_file
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN NOTHING-----\n")
    match problem:
        case "no cert":
            cert = tmp_path / "missing.pem"
        case "no key":
            key = tmp_path / "missing.pem"
        case "cert not PEM":
            cert = junk
        case "key not PEM":
            key = junk
        case "swapped":
            cert, key = key, cert
        case "wrong key":
            key = make_certificates(tmp_path, name="other").key_file
        case "encrypted":
            key = _encrypted(certs, tmp_path / "encrypted.pem")
    with pytest.raises(ConfigError) as caught:
        server_context(cert, key, PREFIX)
    message = str(caught.value)
    assert message.startswith(says.format(cert=cert, key=key))
    assert "\n" not in message
    assert "PRIVATE KEY" not in message


def test_verify_a_path_trusts_that_bundle_and_the_rest_passes_through(
    certs: Certificates, tmp_path: Path
) -> None:
    for path in (certs.ca_file, str(certs.ca_file)):
        context = client_verify(path)
        assert isinstance(context, ssl.SSLContext)
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert [c["subject"] for c in context.get_ca_certs()] == [
            ((("commonName", "mongomem-test CA"),),)
        ]
    mine = ssl.create_default_context()
    assert client_verify(mine) is mine
    assert client_verify(True) is True
    assert client_verify(False) is False
    with pytest.raises(ConfigError, match="cannot load the CA bundle"):
        client_verify(tmp_path / "missing.pem")


def test_only_a_certificate_that_fails_verification_is_a_certificate_problem() -> None:
    cause = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cause.verify_message = "unable to get local issuer certificate"
    wrapped = httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] …")
    wrapped.__cause__ = cause
    assert certificate_problem(wrapped) == (
        "certificate verify failed: unable to get local issuer certificate"
    )
    assert certificate_problem(httpx.ConnectError("connection refused")) is None


CLIENTS = [HttpTransport.__init__, AsyncMemory.__init__, Memory.__init__, HttpSpaces.__init__]


@pytest.mark.parametrize("init", [*CLIENTS, Spaces.__init__])
def test_every_http_client_takes_verify_defaulting_to_the_system_cas(
    init: Callable[..., object],
) -> None:
    verify = inspect.signature(init).parameters["verify"]
    assert (verify.kind, verify.default) == (inspect.Parameter.KEYWORD_ONLY, True)


def test_verify_goes_with_base_url_and_not_with_a_client_of_ones_own(
    certs: Certificates,
) -> None:
    with pytest.raises(ConfigError, match="verify goes with base_url"):
        AsyncMemory(project_id="p", verify=certs.ca_file)
    with pytest.raises(ConfigError, match="verify goes with base_url"):
        Spaces(project_id="p", verify=False)
    with pytest.raises(ConfigError, match="pass client or verify"):
        HttpTransport("https://m", client=httpx.AsyncClient(), verify=certs.ca_file)
    with pytest.raises(ConfigError, match="pass client or verify"):
        HttpSpaces("https://m", "key", client=httpx.AsyncClient(), verify=False)
    with pytest.raises(ConfigError, match="cannot load the CA bundle"):
        HttpTransport("https://m", verify="/no/such/ca.pem")
