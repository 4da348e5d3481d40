"""Shared display helpers for the CLI (sizes, counts, JSON) and the names its help lists."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TextIO

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "bf16-true")
"""``autoshard.profiler.options.Precision``'s values, written out so that ``--help`` imports no torch (a test keeps
the two equal)."""

OPTIMIZERS = ("adamw", "adam", "sgd", "adafactor", "adamw8bit")
"""``autoshard.profiler.options.OPTIMIZERS``, for the same reason."""

OPTIMIZER_IMPLS = ("foreach", "for-loop", "fused")
"""``autoshard.profiler.options.OPTIMIZER_IMPLS``, for the same reason."""


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


_JSON_OUT: ContextVar[TextIO | None] = ContextVar("_JSON_OUT", default=None)


def print_json(payload: Any) -> None:
    """Write ``payload`` as indented JSON on stdout (the real one, inside :func:`json_only_stdout`)."""
    out = _JSON_OUT.get() or sys.stdout
    json.dump(payload, out, indent=2)
    out.write("\n")
    out.flush()


@contextlib.contextmanager
def json_only_stdout() -> Iterator[None]:
    """Keep stdout for the JSON document alone: inside, whatever else is written to stdout goes to stderr.

    Libraries write to stdout: DeepSpeed's logger, bound to ``sys.stdout`` when ``deepspeed`` is first imported,
    prints "Setting accelerator to CPU" (deepspeed 0.19.8 ``utils/logging.py``). Inside, ``sys.stdout`` is
    stderr, and so is descriptor 1 (for C code and child processes); :func:`print_json` still writes to the
    real stdout.
    """
    real = sys.stdout
    real.flush()
    try:
        os.fstat(1)
        os.fstat(2)
    except OSError:  # no descriptors 1 and 2 to move (a daemon, an embedding application)
        saved = None
    else:
        saved = os.dup(1)
        os.dup2(2, 1)
    try:
        writes_fd_1 = real.fileno() == 1
    except (AttributeError, OSError, ValueError):  # io.StringIO, pytest's capsys
        writes_fd_1 = False
    out = open(saved, "w", encoding="utf-8", closefd=False) if saved is not None and writes_fd_1 else real  # noqa: SIM115
    token = _JSON_OUT.set(out)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _JSON_OUT.reset(token)
        out.flush()
        real.flush()  # what a logger bound to the real stdout object wrote goes to stderr too
        if saved is not None:
            if out is not real:
                out.close()
            os.dup2(saved, 1)
            os.close(saved)
