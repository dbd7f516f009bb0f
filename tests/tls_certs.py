"""Certificates made at test time (never a committed private key): a CA, a server
certificate for 127.0.0.1/localhost, and client certificates, as PEM files."""

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
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_pem: Path  # key + chain in one file, as ssl.keystore.location takes it
    other_ca: Path  # a CA that signed nothing here


def _name(cn: str, org: str = "kraftsman-tests") -> x509.Name:
    # most general first, as CAs issue them; RFC 2253 (Kafka's principal) prints it reversed
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False,
          server: bool = False, org: str = "kraftsman-tests") -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    b = (x509.CertificateBuilder().subject_name(_name(subject, org)).issuer_name(_name(issuer))
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
    elif not ca:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)
    return b.sign(issuer_key, hashes.SHA256())


def make_pki(d: Path, client_cn: str = "admin", client_org: str = "kraftsman-tests") -> Pki:
    """``client_org`` is the client certificate's O (a Kubernetes API server takes it as the
    user's group: ``system:masters`` is cluster-admin)."""
    d.mkdir(parents=True, exist_ok=True)
    ca_key, other_key, server_key, client_key = _key(), _key(), _key(), _key()
    ca = _cert("test-ca", ca_key, "test-ca", ca_key, ca=True)
    other = _cert("other-ca", other_key, "other-ca", other_key, ca=True)
    server = _cert("localhost", server_key, "test-ca", ca_key, server=True)
    client = _cert(client_cn, client_key, "test-ca", ca_key, org=client_org)

    def write(name: str, data: bytes) -> Path:
        path = d / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    pem = serialization.Encoding.PEM
    return Pki(
        ca=write("ca.pem", ca.public_bytes(pem)),
        server_cert=write("server.pem", server.public_bytes(pem)),
        server_key=write("server.key", _pem_key(server_key)),
        client_cert=write("client.pem", client.public_bytes(pem)),
        client_key=write("client.key", _pem_key(client_key)),
        client_pem=write("client-keystore.pem", _pem_key(client_key) + client.public_bytes(pem)),
        other_ca=write("other-ca.pem", other.public_bytes(pem)),
    )


def write_private_key(path: Path) -> Path:
    """A new EC P-256 private key as SEC1 PEM ("EC PRIVATE KEY": kube-apiserver reads its
    service-account key in that form, not as PKCS#8)."""
    path.write_bytes(_key().private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.TraditionalOpenSSL,
                                          serialization.NoEncryption()))
    path.chmod(0o600)
    return path
