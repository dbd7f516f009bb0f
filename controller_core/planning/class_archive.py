"""A class-data-sharing archive of Spark's classes for the planner's local driver JVM.

A short plan spends half its CPU starting the JVM: loading, verifying and linking the
~17,000 classes Spark touches. Java's AppCDS maps them from an archive instead (JDK 17:
``-XX:ArchiveClassesAtExit`` records one, ``-XX:SharedArchiveFile`` maps it), which halves
the JVM's start and first queries. Recording costs a plan's worth of time once, so it is an
explicit step — ``kraftsman spark-archive``, run once per machine or at image build — and
every later local plan maps the archive when it is there.

The archive is only valid for the JVM build and the exact jars it was recorded with, so its
default name carries a digest of both (``java -version``, pyspark's version and each jar's
name, size and mtime): an upgrade simply finds no archive instead of a stale one.
``KRAFTSMAN_SPARK_CLASS_ARCHIVE`` names an archive explicitly (the image does) or, set to
``off``, turns both use and the hint off.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

ENV = "KRAFTSMAN_SPARK_CLASS_ARCHIVE"
CACHE_ENV = "KRAFTSMAN_CACHE_DIR"


class ArchiveError(Exception):
    """The archive could not be recorded; the message says why and what to do."""


def cache_dir(env: Mapping[str, str]) -> Path:
    """``$KRAFTSMAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/kraftsman``, else ``~/.cache/kraftsman``."""
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "kraftsman"


@functools.cache
def java_version(java: str) -> str:
    """What ``java -version`` prints (it names the JVM build)."""
    proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    return proc.stderr + proc.stdout


def spark_jars() -> Path:
    """The jars directory of the installed pyspark (its JVM's class path)."""
    pyspark = importlib.import_module("pyspark")
    return Path(str(pyspark.__file__)).parent / "jars"


def digest(java: str, jars: Path) -> str:
    """16 hex digits naming this JVM build and this exact set of Spark jars."""
    h = hashlib.sha256(java_version(java).encode())
    h.update(str(Path(java).resolve()).encode())
    for jar in sorted(jars.glob("*.jar")):
        st = jar.stat()
        h.update(f"\0{jar.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def archive_path(java: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Where this install's archive is (or would be recorded); None when turned off."""
    env = os.environ if env is None else env
    named = env.get(ENV, "").strip()
    if named.lower() == "off":
        return None
    if named:
        return Path(named)
    return cache_dir(env) / f"spark-{digest(java, spark_jars())}.jsa"


def use_options(java: str, env: Mapping[str, str] | None = None) -> list[str]:
    """JVM options that map the archive, if there is one (none otherwise)."""
    path = archive_path(java, env)
    if path is None or not path.is_file():
        return []
    return [f"-XX:SharedArchiveFile={path}"]


def hint(java: str, env: Mapping[str, str] | None = None) -> str | None:
    """A one-line hint for a local plan that runs without an archive (None: nothing to say)."""
    path = archive_path(java, env)
    if path is None or path.is_file():
        return None
    return ("hint: `kraftsman spark-archive` (once per machine) records Spark's classes for "
            "its JVM; later plans start in about half the time "
            f"({ENV}=off silences this)")
