"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), server side, sans-IO.

Follows Kafka's ``ScramSaslServer`` and ``ScramFormatter``: the server keeps per user only
``salt``, ``iterations``, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")`` (never the password); an unknown user, an
authorization id other than the user name, a nonce that does not continue the server's, or a
wrong proof fail the exchange with the same message for all, so a client learns nothing
about which user names exist. No channel binding (gs2 header ``n,,``), as in Kafka.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from enum import Enum

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations for both
INVALID = "Authentication failed: Invalid user credentials"


class ScramError(Exception):
    """The exchange failed; the message is safe to send to the client."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def make_credential(mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """ScramFormatter.generateCredential: what the server stores for ``password``."""
    h = MECHANISMS[mechanism]
    salt = salt if salt is not None else secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac(h, password.encode("utf-8"), salt, iterations)
    client_key = _hmac(h, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(h, client_key).digest(),
                           _hmac(h, salted, b"Server Key"), iterations)


def _attributes(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError("Authentication failed: Invalid SCRAM message")
        out.setdefault(key, value)
    return out


def _username(sasl_name: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=`` (ScramFormatter.username)."""
    return sasl_name.replace("=2C", ",").replace("=3D", "=")


class _State(Enum):
    CLIENT_FIRST = 1
    CLIENT_FINAL = 2
    COMPLETE = 3
    FAILED = 4


class ScramServer:
    """One SCRAM exchange: feed each client message to :meth:`evaluate`, send back what it
    returns; :attr:`username` is set once :attr:`complete`."""

    def __init__(self, mechanism: str, credentials: dict[str, ScramCredential],
                 nonce: str | None = None) -> None:
        self.hash_name = MECHANISMS[mechanism]
        self.credentials = credentials
        self._server_nonce = nonce or secrets.token_urlsafe(24)
        self._state = _State.CLIENT_FIRST
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._pending_user = ""
        self.username: str | None = None

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def evaluate(self, message: bytes) -> bytes:
        try:
            if self._state is _State.CLIENT_FIRST:
                return self._client_first(message)
            if self._state is _State.CLIENT_FINAL:
                return self._client_final(message)
            raise ScramError(f"Unexpected SCRAM message in state {self._state.name}")
        except ScramError:
            self._state = _State.FAILED
            self._credential = None
            raise
        except (UnicodeDecodeError, binascii.Error, ValueError):
            self._state = _State.FAILED
            self._credential = None
            raise ScramError("Authentication failed: Invalid SCRAM message") from None

    def _client_first(self, message: bytes) -> bytes:
        text = message.decode("utf-8")
        gs2, sep, bare = text.partition(",")
        authzid, sep2, bare = bare.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y"):
            raise ScramError("Authentication failed: Invalid SCRAM client-first message "
                             "(channel binding is not supported)")
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise ScramError("Authentication failed: Invalid SCRAM client-first message")
        user = _username(attrs["n"])
        credential = self.credentials.get(user)
        if credential is None:
            raise ScramError(INVALID)
        if authzid and _username(authzid.removeprefix("a=")) != user:
            raise ScramError("Authentication failed: Client requested an authorization id "
                             "that is different from username")
        if credential.iterations < MIN_ITERATIONS:
            raise ScramError(INVALID)
        self._credential = credential
        self._client_first_bare = bare
        self._nonce = attrs["r"] + self._server_nonce
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._pending_user = user
        self._state = _State.CLIENT_FINAL
        return self._server_first.encode()

    def _client_final(self, message: bytes) -> bytes:
        text = message.decode("utf-8")
        without_proof, sep, proof_text = text.rpartition(",p=")
        attrs = _attributes(without_proof)
        if not sep or attrs.get("r") != self._nonce:
            raise ScramError("Authentication failed: Invalid client nonce in the final client "
                             "message.")
        credential = self._credential
        assert credential is not None
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 without_proof)).encode()
        h = self.hash_name
        client_signature = _hmac(h, credential.stored_key, auth_message)
        proof = base64.b64decode(proof_text, validate=True)
        if len(proof) != len(client_signature):
            raise ScramError(INVALID)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(h, client_key).digest(), credential.stored_key):
            raise ScramError(INVALID)
        server_signature = _hmac(h, credential.server_key, auth_message)
        self._credential = None
        self.username = self._pending_user
        self._state = _State.COMPLETE
        return b"v=" + base64.b64encode(server_signature)
