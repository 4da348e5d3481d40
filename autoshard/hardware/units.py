"""Sizes and rates written by people (``"80GB"``, ``"80 GiB"``, ``"200 Gb/s"``) turned into bytes.

Decimal prefixes are powers of 10 and binary prefixes powers of 2, exactly as IEC 80000-13 defines them:
``GB`` = 10**9 bytes, ``GiB`` = 2**30 bytes. Inside autoshard every size is an ``int`` of bytes and every
rate a ``float`` of bytes per second; these functions are the only place text becomes a number.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_BINARY = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}

_SIZE_RE = re.compile(r"^\s*(?P<num>[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$")
_RATE_RE = re.compile(
    r"^\s*(?P<num>[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?)\s*(?P<prefix>[kKMGTP]i?)?(?P<unit>B|b|bit)\s*/\s*s\s*$"
)

SIZE_EXAMPLES = "e.g. '80GB' (10^9 bytes each), '80 GiB' (2^30 bytes each) or '81920MiB'"
RATE_EXAMPLES = "e.g. '2039 GB/s' (bytes) or '200 Gb/s' (bits)"


def _size_multiplier(unit: str) -> int | None:
    u = unit.lower()
    if u.endswith("b") and u != "b":
        u = u[:-1]  # "GB" and "G" mean the same, "GiB" and "Gi" too
    elif u == "b":
        u = ""
    if u in _BINARY:
        return _BINARY[u]
    return _DECIMAL.get(u)


def parse_bytes(text: str | int, *, what: str = "size") -> int:
    """Parse a memory or disk size into a positive number of bytes.

    Units are case-insensitive (bits never make sense for a size): ``B``, ``KB``/``K``, ``MB``, ``GB``, ``TB``,
    ``PB`` are powers of 1000; ``KiB``/``Ki``, ``MiB``, ``GiB``, ``TiB``, ``PiB`` are powers of 1024. A string must
    carry a unit; a bare ``int`` is a number of bytes. Fractions are allowed and rounded down to whole bytes.

    Args:
        text: the size, e.g. ``"80GB"``, ``"80 GiB"``, ``"81920MiB"``, ``"1.5TB"``, or an ``int`` of bytes.
        what: what the size is, named in the error message (e.g. ``"--gpu-memory"``).

    Returns:
        The size in bytes (at least 1).

    Raises:
        ValueError: the text is not a size, has no or an unknown unit, or is zero or negative.

    Example:
        >>> parse_bytes("80GB"), parse_bytes("80 GiB"), parse_bytes("81920MiB")
        (80000000000, 85899345920, 85899345920)
    """
    if isinstance(text, bool):
        raise ValueError(f"{what}: expected a size ({SIZE_EXAMPLES}), got {text!r}.")
    if isinstance(text, int):
        if text <= 0:
            raise ValueError(f"{what}: expected a positive size, got {text} bytes.")
        if text > _LARGEST_SIZE:
            raise ValueError(f"{what}: {text} bytes is larger than any machine's.")
        return text
    if not isinstance(text, str):
        raise ValueError(f"{what}: expected a size ({SIZE_EXAMPLES}), got {text!r}.")
    match = _SIZE_RE.match(text)
    if match is None:
        raise ValueError(f"{what}: expected a size ({SIZE_EXAMPLES}), got {text!r}.")
    unit = match["unit"]
    if not unit:
        raise ValueError(f"{what}: {text!r} has no unit; write {SIZE_EXAMPLES}.")
    multiplier = _size_multiplier(unit)
    if multiplier is None:
        raise ValueError(f"{what}: unknown unit {unit!r} in {text!r}; write {SIZE_EXAMPLES}.")
    try:
        value = Decimal(match["num"]) * multiplier
    except InvalidOperation:  # pragma: no cover — the regex only lets numbers through
        raise ValueError(f"{what}: expected a size ({SIZE_EXAMPLES}), got {text!r}.") from None
    if value <= 0:
        raise ValueError(f"{what}: expected a positive size, got {text!r}.")
    nbytes = int(value)
    if nbytes < 1:
        raise ValueError(f"{what}: {text!r} is less than one byte.")
    if nbytes > _LARGEST_SIZE:
        raise ValueError(f"{what}: {text!r} is larger than any machine's; write {SIZE_EXAMPLES}.")
    return nbytes


def parse_rate(text: str | int | float, *, what: str = "bandwidth") -> float:
    """Parse a bandwidth into bytes per second.

    The unit is case-sensitive where it matters: ``B`` is a byte and ``b`` or ``bit`` a bit, so ``"25 GB/s"``
    and ``"200 Gb/s"`` are the same rate. Prefixes are ``k``/``K``, ``M``, ``G``, ``T``, ``P`` (powers of 1000)
    or ``Ki``, ``Mi``, ``Gi``, ``Ti``, ``Pi`` (powers of 1024). A bare number is bytes per second.

    Args:
        text: the rate, e.g. ``"2039 GB/s"``, ``"3.35 TB/s"`` or ``"400 Gb/s"``.
        what: what the rate is, named in the error message.

    Returns:
        Bytes per second (positive).

    Raises:
        ValueError: the text is not a rate, or is zero or negative.

    Example:
        >>> parse_rate("200 Gb/s") == parse_rate("25 GB/s") == 25e9
        True
    """
    if isinstance(text, bool):
        raise ValueError(f"{what}: expected a rate ({RATE_EXAMPLES}), got {text!r}.")
    if isinstance(text, (int, float)):
        value = float(text)
    elif isinstance(text, str) and (match := _RATE_RE.match(text)) is not None:
        prefix = (match["prefix"] or "").lower()
        multiplier = _BINARY[prefix] if prefix in _BINARY else _DECIMAL[prefix]
        bits = match["unit"] in ("b", "bit")
        value = float(Decimal(match["num"]) * multiplier) / (8 if bits else 1)
    else:
        raise ValueError(f"{what}: expected a rate ({RATE_EXAMPLES}), got {text!r}.")
    if not math.isfinite(value) or value <= 0 or value > _LARGEST_SIZE:
        raise ValueError(f"{what}: expected a positive rate, got {text!r}.")
    return value


def written_size(value: object, *, what: str = "size") -> int:
    """:func:`parse_bytes` for a value written in a file: a bare number is refused, not read as bytes (a hardware
    file's ``memory: 80`` was 80 bytes, and the plan said nothing fits).

    Example:
        >>> written_size("80 GiB") == 80 * 2**30
        True
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"{what}: {value!r} has no unit; write {SIZE_EXAMPLES}.")
    return parse_bytes(value, what=what)  # type: ignore[arg-type]  # anything else is refused there


def written_rate(value: object, *, what: str = "bandwidth") -> float:
    """:func:`parse_rate` for a value written in a file: a bare number is refused, not read as bytes per second
    (an interconnect's ``bandwidth: 400`` was 400 B/s, and a step took 122 days)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"{what}: {value!r} has no unit; write {RATE_EXAMPLES}.")
    return parse_rate(value, what=what)  # type: ignore[arg-type]


_LARGEST_SIZE = 2**70
"""A size beyond any machine (1 ZiB): refused, as a typo (``1e400 GB`` overflowed the formatting of the figure)."""


def format_bytes(nbytes: int | float | None) -> str:
    """Display a size in binary units (``"80.00 GiB"``), or ``"unknown"`` for ``None``.

    Example:
        >>> format_bytes(85899345920), format_bytes(512), format_bytes(None)
        ('80.00 GiB', '512 B', 'unknown')
    """
    if nbytes is None:
        return "unknown"
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_rate(bytes_per_s: float | None) -> str:
    """Display a rate in decimal units, as datasheets do (``"3350.0 GB/s"``), or ``"unknown"``.

    Example:
        >>> format_rate(25e9), format_rate(None)
        ('25.0 GB/s', 'unknown')
    """
    if bytes_per_s is None:
        return "unknown"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.1f} {unit}"
    return f"{bytes_per_s:.0f} B/s"


def format_throughput(per_s: float) -> str:
    """A rate of samples or tokens per second with at least three significant digits when small.

    Example:
        >>> format_throughput(1234.5), format_throughput(12.34), format_throughput(0.00123)
        ('1,234', '12.3', '0.00123')
    """
    if per_s >= 100:
        return f"{per_s:,.0f}"
    if per_s >= 1:
        return f"{per_s:.1f}"
    return f"{per_s:.3g}"
