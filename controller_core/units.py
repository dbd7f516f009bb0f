"""How figures read to a person: one spelling of bytes and durations for every output."""

from __future__ import annotations


def format_bytes(n: float) -> str:
    """Decimal units, as throttles are given (50000000 bytes/s reads "50.0 MB")."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def format_duration(s: float | None) -> str:
    """``m:ss`` or ``h:mm:ss``; ``-`` when unknown."""
    if s is None:
        return "-"
    whole = round(s)
    h, rem = divmod(whole, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 partition``, ``2 partitions`` (thousands separated: ``4,500 moves``)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
