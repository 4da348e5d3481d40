"""What the benchmarks share: how busy the machine was while they measured (CPU seconds other processes used,
from /proc/stat — on a small machine another process on the same cores moves a figure by more than the effect
being measured), their command-line number parsing, the CPU's model and installed
packages' versions, and for the host-time benchmarks a worker run as one rank of a world of one in a fresh
interpreter and the least-squares slope of its times.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autoshard.cli._checks import positive_int


def cpu_seconds() -> tuple[float, float] | None:
    """``(CPU seconds every process on the machine has used, CPU seconds this process and its reaped children
    have used)``; ``None`` without ``/proc/stat`` (not Linux)."""
    import resource

    try:
        fields = Path("/proc/stat").read_text(encoding="ascii").split("\n", 1)[0].split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ... (proc(5)); steal is time the hypervisor ran others.
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    machine_s = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    own_s = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                for f in ("ru_utime", "ru_stime"))
    return machine_s, own_s


def foreign_cores(before: tuple[float, float] | None, after: tuple[float, float] | None,
                  wall_s: float) -> float | None:
    """Cores other processes kept busy on average between two :func:`cpu_seconds` readings.

    Example:
        >>> foreign_cores((100.0, 10.0), (120.0, 28.0), 10.0)
        0.2
    """
    if before is None or after is None or wall_s <= 0:
        return None
    other_s = (after[0] - before[0]) - (after[1] - before[1])
    return round(max(other_s, 0.0) / wall_s, 3)


positive = positive_int
"""``argparse`` type: a positive whole number (the CLI's own, :func:`autoshard.cli._checks.positive_int`)."""


def package_version(dist: str) -> str | None:
    """The installed version of the distribution ``dist``, or ``None`` when it is not installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what ``platform`` knows elsewhere."""
    import contextlib
    import platform

    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def run_meta(script: str, argv: list[str], **extra: Any) -> dict[str, Any]:
    """A report's ``meta``: the UTC time, the CPU, Python's and torch's versions, the command that made it
    (``python benchmarks/<script> ...``) and ``extra``."""
    import datetime
    import platform
    import shlex

    import torch

    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": cpu_model(), "python": platform.python_version(), "torch": torch.__version__, **extra,
            "command": shlex.join(["python", f"benchmarks/{script}", *argv])}


def write_report(out: Path, stem: str, report: dict[str, Any], text: str, *, echo: bool = True) -> None:
    """``<stem>.json`` (the report) and ``<stem>.md`` (``text``) under ``out``, made if missing; ``text`` printed
    unless ``echo`` is false (a report written again as a run goes)."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out / f"{stem}.md").write_text(text, encoding="utf-8")
    if echo:
        print(text)


def one_rank_worker(script: Path, args: Sequence[str], port: int, what: str,
                    env: dict[str, str] | None = None) -> dict[str, Any]:
    """``python script --worker ARGS...`` in a fresh interpreter as rank 0 of a world of one (``torch.distributed``'s
    env:// variables, ``OMP_NUM_THREADS=1``, ``env`` on top); the JSON of its last ``RESULT `` line.

    Raises:
        RuntimeError: the worker failed or printed no result (``what`` names it, with its stderr's end).
    """
    full = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "LOCAL_RANK": "0",
            "WORLD_SIZE": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    done = subprocess.run([sys.executable, str(script), "--worker", *args], env=full, capture_output=True, text=True,
                          check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {done.stderr.strip()[-400:]}")
    return dict(json.loads(lines[-1][len("RESULT "):]))


def accelerator_device(accelerator: str) -> str | None:
    """The device a host-time benchmark's report names: ``"CPU only"``, or the GPU's name for ``"cuda"``; ``None``
    after an error line on stderr when CUDA is asked for and torch sees no GPU."""
    if accelerator != "cuda":
        return "CPU only"
    import torch

    if not torch.cuda.is_available():
        print("error: --accelerator cuda, but torch sees no CUDA GPU here.", file=sys.stderr)
        return None
    return torch.cuda.get_device_name(0)


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of ``y`` over ``x``.

    Example:
        >>> slope([(1, 3.0), (2, 5.0), (4, 9.0)])
        2.0
    """
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)


def line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope and intercept of ``y`` over ``x``.

    Example:
        >>> line([(1, 3.0), (2, 5.0), (4, 9.0)])
        (2.0, 1.0)
    """
    s = slope(points)
    return s, statistics.fmean(p[1] for p in points) - s * statistics.fmean(p[0] for p in points)
