"""SASL users and cluster ACLs for ``cluster serve --auth FILE``.

The file is small YAML::

    mechanisms: [PLAIN, SCRAM-SHA-256, SCRAM-SHA-512]   # optional; these three by default
    scramIterations: 4096        # optional; PBKDF2 iterations of the SCRAM credentials
    users:                       # SASL credentials, for every enabled mechanism
      - {name: admin, password: admin-secret}
      - {name: viewer, password: viewer-secret}
    acls:                        # allow rules on the CLUSTER resource (deny by default)
      - {principal: "User:admin", operations: [ALTER]}
      - {principal: "User:viewer", operations: [DESCRIBE]}
      - {principal: "User:*", operations: [DESCRIBE]}    # any authenticated user
      - {principal: "User:CN=ops,O=example", operations: [ALL]}  # a TLS client certificate

Operations imply others as in Kafka: ALL implies every one, ALTER, READ and WRITE imply
DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS. A grant stands for the operation on every
resource (READ and WRITE are those on kraftsman's throttle-marker topic, the only topic with
data here). For SCRAM the server derives and keeps only the
salted credentials (salt, StoredKey, ServerKey) at start, as Kafka's credential store does.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from controller_core.wire.scram import MIN_ITERATIONS, ScramCredential, make_credential

ANONYMOUS = "User:ANONYMOUS"
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
ALL_MECHANISMS: tuple[Mechanism, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class AuthFileError(ValueError):
    """The --auth file is unreadable or invalid; the message names the field and the fix."""


class Operation(StrEnum):
    ALL = "ALL"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"
    CREATE = "CREATE"
    ALTER_CONFIGS = "ALTER_CONFIGS"
    DESCRIBE_CONFIGS = "DESCRIBE_CONFIGS"
    READ = "READ"
    WRITE = "WRITE"


_IMPLIES: dict[Operation, frozenset[Operation]] = {
    Operation.ALL: frozenset(Operation),
    Operation.ALTER: frozenset({Operation.ALTER, Operation.DESCRIBE}),
    Operation.READ: frozenset({Operation.READ, Operation.DESCRIBE}),
    Operation.WRITE: frozenset({Operation.WRITE, Operation.DESCRIBE}),
    Operation.ALTER_CONFIGS: frozenset({Operation.ALTER_CONFIGS, Operation.DESCRIBE_CONFIGS}),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UserEntry(_Strict):
    name: str = Field(min_length=1, pattern=r"^[^\x00]+$")
    password: str = Field(min_length=1, pattern=r"^[^\x00]+$")


class AclEntry(_Strict):
    principal: str = Field(pattern=r"^User:[^\x00]+$",
                           description='"User:NAME", or "User:*" for every authenticated user')
    operations: list[Operation] = Field(min_length=1)
    resource: Literal["CLUSTER"] = "CLUSTER"


class AuthFile(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    mechanisms: list[Mechanism] = Field(default_factory=lambda: list(ALL_MECHANISMS),
                                        min_length=1)
    scram_iterations: int = Field(MIN_ITERATIONS, alias="scramIterations",
                                  ge=MIN_ITERATIONS, le=1_000_000)
    users: list[UserEntry] = Field(min_length=1)
    acls: list[AclEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> AuthFile:
        names = [u.name for u in self.users]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"users: {', '.join(dupes)} listed more than once; list each once")
        known = set(names)
        for i, acl in enumerate(self.acls):
            who = acl.principal.removeprefix("User:")
            if who != "*" and who not in known and "=" not in who:  # "=": a TLS DN
                raise ValueError(f"acls[{i}].principal: {acl.principal} is not one of the users "
                                 f"({', '.join(sorted(known))}); add the user or fix the name")
        return self


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def load_auth_file(path: Path) -> Authorizer:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise AuthFileError(f"--auth {path}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise AuthFileError(f"--auth {path}: not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise AuthFileError(f"--auth {path}: expected a mapping with `users:` and `acls:`")
    try:
        parsed = AuthFile.model_validate(doc)
    except ValidationError as e:
        first = e.errors()[0]
        raise AuthFileError(f"--auth {path}: {_where(tuple(first['loc']))}: "
                            f"{first['msg']}") from None
    return Authorizer.from_file(parsed)


@dataclass(frozen=True, slots=True)
class Authorizer:
    """``users is None``: the open mode — no authentication, every operation allowed."""

    users: dict[str, str] | None
    grants: dict[str, frozenset[Operation]]
    mechanisms: tuple[str, ...] = ALL_MECHANISMS
    scram: dict[str, dict[str, ScramCredential]] = field(default_factory=dict)

    @classmethod
    def open(cls) -> Authorizer:
        return cls(None, {})

    @classmethod
    def from_file(cls, f: AuthFile) -> Authorizer:
        grants: dict[str, set[Operation]] = {}
        for acl in f.acls:
            ops = grants.setdefault(acl.principal, set())
            for op in acl.operations:
                ops.update(_IMPLIES.get(op, {op}))
        scram: dict[str, dict[str, ScramCredential]] = {
            m: {u.name: make_credential(m, u.password, iterations=f.scram_iterations)
                for u in f.users}
            for m in dict.fromkeys(f.mechanisms) if m.startswith("SCRAM-")}
        return cls({u.name: u.password for u in f.users},
                   {p: frozenset(ops) for p, ops in grants.items()},
                   tuple(dict.fromkeys(f.mechanisms)), scram)

    @property
    def requires_authentication(self) -> bool:
        return self.users is not None

    def authenticate_plain(self, token: bytes) -> str | None:
        """RFC 4616 PLAIN: ``[authzid] NUL authcid NUL passwd``; the principal, or None."""
        if self.users is None:
            return ANONYMOUS
        if "PLAIN" not in self.mechanisms:
            return None
        parts = token.split(b"\x00")
        if len(parts) != 3:
            return None
        authzid, user_b, password_b = parts
        try:
            user, password = user_b.decode(), password_b.decode()
        except UnicodeDecodeError:
            return None
        if authzid and authzid != user_b:
            return None  # Kafka refuses to act on behalf of another user
        expected = self.users.get(user)
        # compare_digest even for unknown users keeps timing alike
        ok = hmac.compare_digest((expected or "\x00").encode(), password.encode())
        return f"User:{user}" if ok and expected is not None else None

    def allowed(self, principal: str, operation: Operation) -> bool:
        if self.users is None:
            return True
        return any(operation in self.grants.get(who, frozenset())
                   for who in (principal, "User:*"))
