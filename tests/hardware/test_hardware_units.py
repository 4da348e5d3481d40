from __future__ import annotations

import doctest

import pytest

from autoshard.hardware import units
from autoshard.hardware.units import format_bytes, format_rate, parse_bytes, parse_rate

GiB = 2**30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80GB", 80 * 10**9),
        ("80 GiB", 80 * GiB),
        ("81920MiB", 80 * GiB),
        ("1.5TB", 1_500_000_000_000),
        ("512gib", 512 * GiB),
        ("80G", 80 * 10**9),
        ("80Gi", 80 * GiB),
        (" 4 KB ", 4000),
        ("2 TiB", 2 * 2**40),
        ("100B", 100),
        (1024, 1024),
    ],
)
def test_parse_bytes_distinguishes_decimal_gb_from_binary_gib(text: str | int, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "expected a size"),
        ("lots", "expected a size"),
        ("80", "has no unit"),
        ("0GB", "positive"),
        ("-5GB", "positive"),
        ("80 XB", "unknown unit"),
        ("GB", "expected a size"),
        ("0.1B", "less than one byte"),
        ("1e400 GB", "larger than any machine"),  # overflowed the formatting of the figure: an internal error
        (0, "positive"),
        (-1, "positive"),
        (True, "expected a size"),
        (None, "expected a size"),
        (80.5, "expected a size"),
    ],
)
def test_parse_bytes_rejects_garbage_zero_and_negative(text: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as info:
        parse_bytes(text, what="--gpu-memory")  # type: ignore[arg-type]
    assert str(info.value).startswith("--gpu-memory: ")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("200 Gb/s", 25e9),
        ("200 Gbit/s", 25e9),
        ("2039 GB/s", 2039e9),
        ("3.35 TB/s", 3.35e12),
        ("1 GiB/s", float(GiB)),
        (15.75e9, 15.75e9),
    ],
)
def test_parse_rate_tells_bits_from_bytes(text: str | float, expected: float) -> None:
    assert parse_rate(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["fast", "0 GB/s", "-1 GB/s", "200 gb/s", "25 GB", True, 0, "1e400 GB/s"])
def test_parse_rate_rejects_garbage(text: object) -> None:
    with pytest.raises(ValueError, match="bandwidth"):
        parse_rate(text)  # type: ignore[arg-type]


def test_formatting_uses_binary_sizes_and_decimal_rates() -> None:
    assert format_bytes(80 * GiB) == "80.00 GiB"
    assert format_rate(2039e9) == "2039.0 GB/s"
    assert format_bytes(None) == format_rate(None) == "unknown"


def test_units_docstring_examples_run() -> None:
    assert doctest.testmod(units).failed == 0
