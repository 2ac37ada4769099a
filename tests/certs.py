"""Certificates for TLS tests, made on the spot with `cryptography`: a CA, a server
certificate for 127.0.0.1 and localhost, and client certificates naming a principal and
tenant (CN and O)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pem:
    """A certificate and its key, PEM encoded, and where they were written."""

    cert: bytes
    key: bytes
    cert_file: Path
    key_file: Path


def _name(cn: str, org: str = "") -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


def _write(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Pem:
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    cert_file, key_file = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_file.write_bytes(cert_pem)
    key_file.write_bytes(key_pem)
    return Pem(cert_pem, key_pem, cert_file, key_file)


class CertificateAuthority:
    """A throwaway CA that signs server and client certificates into `directory`."""

    def __init__(self, directory: Path, name: str = "behest test CA") -> None:
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = _name(name)
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.pem = _write(directory, name.replace(" ", "_"), self._cert, self._key)

    def server(self, stem: str = "server") -> Pem:
        sans = [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]
        return self._issue(stem, _name("localhost"), sans, server=True)

    def client(self, stem: str, *, principal: str, tenant: str) -> Pem:
        return self._issue(stem, _name(principal, tenant), [], server=False)

    def _issue(
        self, stem: str, subject: x509.Name, sans: list[x509.GeneralName], *, server: bool
    ) -> Pem:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = (
            x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
            if server
            else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return _write(self.directory, stem, builder.sign(self._key, hashes.SHA256()), key)
