"""A throw-away PKI for the TLS tests: a CA, a server certificate for 127.0.0.1/localhost
and a client certificate, written as PEM files (``cryptography``)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate
    server: Path  # server key + certificate (ssl.keystore.location)
    client_cert: Path
    client_key: Path
    client_cn: str


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: x509.Name,
    issuer: x509.Name,
    public_key,
    signer,
    *,
    ca: bool = False,
    sans: list[x509.GeneralName] | None = None,
    usage=None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(signer, hashes.SHA256())


def make_pki(directory: Path, client_cn: str = "alice", *, broker_client_auth: bool = False) -> Pki:
    """``broker_client_auth``: the server certificate may also authenticate its holder as
    a TLS client, as a broker's certificate must when brokers require client certificates
    of each other."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tierlog test CA")])
    ca_cert = _cert(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)

    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _cert(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]),
        ca_name,
        server_key.public_key(),
        ca_key,
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        usage=[ExtendedKeyUsageOID.SERVER_AUTH]
        + ([ExtendedKeyUsageOID.CLIENT_AUTH] if broker_client_auth else []),
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = _cert(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tierlog"),
                x509.NameAttribute(NameOID.COMMON_NAME, client_cn),
            ]
        ),
        ca_name,
        client_key.public_key(),
        ca_key,
        usage=[ExtendedKeyUsageOID.CLIENT_AUTH],
    )
    pem = serialization.Encoding.PEM
    pki = Pki(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "client.pem",
        directory / "client.key",
        client_cn,
    )
    pki.ca.write_bytes(ca_cert.public_bytes(pem))
    pki.server.write_bytes(_key_pem(server_key) + server_cert.public_bytes(pem))
    pki.client_cert.write_bytes(client_cert.public_bytes(pem))
    pki.client_key.write_bytes(_key_pem(client_key))
    return pki
