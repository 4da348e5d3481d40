"""Shared display helpers for the CLI (sizes, counts, JSON) and the names its help lists."""

from __future__ import annotations

import json
import sys
from typing import Any

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "bf16-true")
"""``autoshard.profiler.options.Precision``'s values, written out so that ``--help`` imports no torch (a test keeps
the two equal)."""

OPTIMIZERS = ("adamw", "adam", "sgd", "adafactor")
"""``autoshard.profiler.options.OPTIMIZERS``, for the same reason."""


def gib(nbytes: int | float) -> str:
    """``1.23 GiB``-style size (binary units; bytes below 1 KiB)."""
    from autoshard.hardware.units import format_bytes

    return format_bytes(int(nbytes))


def count(n: int) -> str:
    """``6.74B``-style count."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def flops(n: int | float) -> str:
    """``12.3 TFLOP``-style FLOP count."""
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} FLOP"


def print_json(payload: Any) -> None:
    """Write ``payload`` as indented JSON on stdout."""
    json.dump(payload, sys.stdout, indent=2)
    sys.stdout.write("\n")
