"""Memory sizes of the config: "24GiB", "512 MiB", "1.5GB", a plain byte count, or a fraction of
the device. Sizes are parsed by pydantic's ``ByteSize``; this module adds the fraction, the
bounds and the one-line errors."""

from __future__ import annotations

import re

from pydantic import ByteSize, TypeAdapter, ValidationError

_BYTES = TypeAdapter(ByteSize)
MIN_BYTES = 2**20  # below 1 MiB no model trains: a typo, not a cap
MAX_BYTES = 2**50  # 1 PiB: above any one device
ALLOWED = ('a size such as "24GiB", "512MiB" or a byte count (1 MiB to 1 PiB), '
           'or a fraction of the device in (0, 1]')
UNITS = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"


def _bounded(n: float, shown: object) -> tuple[str, float]:
    if not MIN_BYTES <= n <= MAX_BYTES:
        raise ValueError(f"{shown!r} is not allowed: {ALLOWED}")
    return ("bytes", float(int(n)))


def parse_memory(value: str | float | int) -> tuple[str, float]:
    """``("bytes", n)`` for a size or a byte count > 1, ``("fraction", f)`` for 0 < f <= 1.

    Raises ValueError saying what is allowed.
    """
    if isinstance(value, bool):
        raise ValueError(f"allowed: {ALLOWED}")
    if isinstance(value, int | float):
        if 0 < value <= 1:
            return ("fraction", float(value))
        if value > 1:
            return _bounded(value, value)
        raise ValueError(f"{value!r} is not allowed: {ALLOWED}")
    text = value.strip()
    if re.fullmatch(r"[0-9]*\.?[0-9]+", text) and 0 < float(text) <= 1:
        return ("fraction", float(text))
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([A-Za-z]*)", text)
    if m and m.group(2) and not re.fullmatch(r"(?i)[kmgtpe]?i?b", m.group(2)):
        raise ValueError(f"unit {m.group(2)!r} is not allowed: use {UNITS}")
    try:
        return _bounded(float(_BYTES.validate_python(text)), value)
    except ValidationError as e:
        raise ValueError(f"{value!r} is not allowed: {ALLOWED}") from e


def shown(n: float, signed: bool = False) -> str:
    """A byte count in the unit that keeps its digits: "412 KiB", "7.2 MiB", "38 GiB" (a peak of
    0.4 MiB read as "0MiB" looked like nothing measured). ``signed`` gives differences a sign."""
    sign = ("+" if n >= 0 else "-") if signed else ("-" if n < 0 else "")
    size = abs(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            v = size / scale
            return f"{sign}{v:.1f} {unit}" if v < 10 else f"{sign}{v:.0f} {unit}"
    return f"{sign}{size:.0f} B"
