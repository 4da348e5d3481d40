"""Fit the step-time model's per-GPU-model constants on published runs, and report the error on held-out ones.

The step-time model (``autoshard/strategies/step_time.py``) prices matmuls at ``matmul`` and attention at
``attention`` of a GPU's dense peak, and memory-bound ops at ``memory`` of its bandwidth, each a constant of the GPU
model in ``profiles/gpus/*.yaml`` with its source. This script holds them against the published throughput points of
``benchmarks/published_points.yaml`` (``benchmarks/published.py`` predicts each point through the public planning
path): per GPU model it fits one factor ``s`` on the points of the ``fit`` half only (``matmul`` and ``attention``
both scaled by ``s``, ``memory`` kept: the datasheet bandwidth is the better-known rate) — one factor for its 16-bit
points, another on ``matmul_fp32`` for its fp32 ones (CUDA cores) and another on ``matmul_tf32`` for fp32 runs on
TF32 tensor cores (other units, with their own efficiency) — choosing the ``s`` of a grid with the smallest median
|error| in log space, then prints the fitted constants with their error on the fit half and on the ``held_out`` half
(computed with the fitted constants, the held-out points never used to choose them). GPU models (or precisions)
without ``fit`` points are left as they are. A point whose ``variant`` names a power limit runs on the power-capped
profile (:func:`gpu_profile`).

Nothing is written: the constants go into the profiles by hand, with this fit named as their source.

Run from the repository root::

    python benchmarks/step_time_fit.py                      # the points beside published.py
    python benchmarks/step_time_fit.py --points FILE.yaml   # another points file

Without ``benchmarks/published.py`` or its points file the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
THROUGHPUT_METRICS = ("tokens_per_s_per_gpu", "samples_per_s", "tflops_per_gpu")
GRID = tuple(round(0.40 + 0.02 * i, 2) for i in range(56))
"""Factors tried on the profile's ``matmul`` and ``attention`` (0.40 to 1.50)."""


KINDS = ("16-bit", "fp32", "tf32")
"""The matmul units a factor is fitted for: 16-bit tensor cores (``matmul`` and ``attention``), fp32 on CUDA cores
(``matmul_fp32``), fp32 on TF32 tensor cores (``matmul_tf32``)."""


def matmul_kind(point: dict[str, Any]) -> str:
    """Which factor a point's throughput fits: ``tf32`` for a ``32-true`` run with TF32 matmuls
    (``float32_matmul_precision`` not ``highest``), ``fp32`` for another ``32-true`` run, else ``16-bit``.

    Example:
        >>> matmul_kind({"precision": "32-true"}), matmul_kind({"precision": "bf16-mixed"})
        ('fp32', '16-bit')
        >>> matmul_kind({"precision": "32-true", "float32_matmul_precision": "high"})
        'tf32'
    """
    if point["precision"] != "32-true":
        return "16-bit"
    return "tf32" if point.get("float32_matmul_precision", "highest") != "highest" else "fp32"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fit:
    """The fitted factor of one GPU model and precision kind, and the errors it gives."""

    gpu: str
    kind: str
    """One of :data:`KINDS`."""
    scale: float
    """1 when the GPU model has no ``fit`` points (its sourced constants are kept)."""
    fit_errors_pct: tuple[float, ...]
    held_out_errors_pct: tuple[float, ...]
    sourced_fit_errors_pct: tuple[float, ...]
    """The errors with the profile's sourced constants (factor 1), for comparison."""
    sourced_held_out_errors_pct: tuple[float, ...]


def log_error(predicted: float, published: float) -> float:
    """``ln(predicted / published)``: symmetric in over- and under-prediction.

    Example:
        >>> round(log_error(200.0, 100.0) + log_error(50.0, 100.0), 12)
        0.0
    """
    return math.log(predicted / published)


def best_scale(errors_at: Callable[[float], Sequence[float]], grid: Sequence[float] = GRID) -> float:
    """The factor of ``grid`` whose log errors (``errors_at(scale)``) have the smallest median absolute value;
    the one nearest 1 among equals.

    Example:
        >>> best_scale(lambda s: [log_error(100 * s / 0.8, 100)], grid=(0.6, 0.8, 1.0))  # predicted ∝ s
        0.8
    """
    return min(grid, key=lambda s: (statistics.median(abs(e) for e in errors_at(s)), abs(s - 1)))


def load_published(points: Path | None) -> tuple[ModuleType, dict[str, Any]] | str:
    """``benchmarks/published.py`` and the points, or why they cannot be had."""
    script = HERE / "published.py"
    if not script.is_file():
        return f"{script.relative_to(HERE.parent)} is not here yet: nothing to fit; the constants keep their sources"
    spec = importlib.util.spec_from_file_location("published", script)
    if spec is None or spec.loader is None:
        return f"cannot load {script}"
    module = importlib.util.module_from_spec(spec)
    sys.modules["published"] = module
    spec.loader.exec_module(module)
    path = points or module.POINTS_FILE
    if not Path(path).is_file():
        return f"{path} is not here yet: nothing to fit; the constants keep their sources"
    try:
        return module, module.load_points(Path(path))
    except module.PointsError as exc:
        return str(exc)


def gpu_profile(point: dict[str, Any]) -> str:
    """The GPU profile a point runs on: its ``hardware.gpu``, or that profile's power-capped variant
    (``<gpu>-<N>w``, e.g. ``h100-sxm-80gb-500w``) when the point's ``variant`` names an ``N W`` power limit and
    such a profile is shipped.

    Example:
        >>> gpu_profile({"hardware": {"gpu": "h100-sxm-80gb", "variant": "96GB HBM2e, 500 W power limit"}})
        'h100-sxm-80gb-500w'
    """
    import re

    from autoshard.hardware.profiles import list_profiles

    hw = point["hardware"]
    match = re.search(r"(\d+)\s*W power limit", hw.get("variant") or "")
    if match:
        capped = f"{hw['gpu']}-{match.group(1)}w"
        if any(e.name == capped for e in list_profiles()):
            return capped
    return str(hw["gpu"])


def _scaled_predictor(module: ModuleType, data: dict[str, Any], folder: Path) -> Any:
    """A ``published.Predictor`` whose hardware has each GPU model's fractions scaled: ``matmul`` and ``attention``
    by ``scale[(gpu, "16-bit")]``, ``matmul_fp32`` by ``scale[(gpu, "fp32")]``, ``matmul_tf32`` by
    ``scale[(gpu, "tf32")]`` (the last two from ``matmul`` where the profile has none)."""
    from autoshard.strategies.step_time import KERNEL_RATES

    class Scaled(module.Predictor):  # type: ignore[misc, name-defined]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.scale: dict[tuple[str, str], float] = {}

        def hardware(self, point: dict[str, Any]) -> Any:
            gpu_name = gpu_profile(point)
            hw = super().hardware({**point, "hardware": {**point["hardware"], "gpu": gpu_name}})
            half, fp32, tf32 = (self.scale.get((gpu_name, kind), 1.0) for kind in KINDS)
            gpu = hw.node.gpu
            base = gpu.achievable or KERNEL_RATES  # a factor on what kernels reach, as the profiles' are
            achievable = dataclasses.replace(base, matmul=min(1.0, base.matmul * half),
                                             attention=min(1.0, base.attention * half),
                                             matmul_fp32=min(1.0, _own(base, "fp32") * fp32),
                                             matmul_tf32=min(1.0, _own(base, "tf32") * tf32))
            node = dataclasses.replace(hw.node, gpu=dataclasses.replace(gpu, achievable=achievable))
            return dataclasses.replace(hw, node=node)

    return Scaled(data, folder)


def _own(base: Any, kind: str) -> float:
    """The profile's fraction for fp32 inputs on ``kind`` units (``fp32`` or ``tf32``), else its ``matmul``."""
    from autoshard.strategies.step_time import matmul_fraction

    return matmul_fraction(kind, base)


def fit_all(module: ModuleType, data: dict[str, Any], folder: Path) -> list[Fit]:
    """One :class:`Fit` per GPU model and precision kind with throughput points (see the module docstring)."""
    points = [p for p in data["points"] if p["published"]["metric"] in THROUGHPUT_METRICS
              and not module.not_expressible(p)]
    predictor = _scaled_predictor(module, data, folder)

    from autoshard.errors import AutoshardError

    refused: set[str] = set()

    def errors(group: list[dict[str, Any]], key: tuple[str, str], scale: float) -> list[float]:
        predictor.scale = {key: scale}
        out = []
        for p in group:
            if p["id"] in refused:
                continue
            try:
                predicted = predictor.predict(p)[p["published"]["metric"]]
            except AutoshardError as exc:  # autoshard refuses the point: left out of the fit, and said so
                print(f"{p['id']}: left out ({type(exc).__name__}: {str(exc).splitlines()[0]})")
                refused.add(p["id"])
                continue
            if predicted:
                out.append(log_error(predicted, p["published"]["value"]))
        return out or [math.inf]

    def pct(group: list[dict[str, Any]], key: tuple[str, str], scale: float) -> tuple[float, ...]:
        return tuple(100 * (math.exp(e) - 1) for e in errors(group, key, scale) if math.isfinite(e)) if group else ()

    fits = []
    for key in sorted({(gpu_profile(p), matmul_kind(p)) for p in points}):
        mine = [p for p in points if (gpu_profile(p), matmul_kind(p)) == key]
        fit_group = [p for p in mine if p["half"] == "fit"]
        held = [p for p in mine if p["half"] == "held_out"]
        scale = best_scale(lambda s, g=fit_group, k=key: errors(g, k, s)) if fit_group else 1.0
        fits.append(Fit(gpu=key[0], kind=key[1], scale=scale, fit_errors_pct=pct(fit_group, key, scale),
                        held_out_errors_pct=pct(held, key, scale),
                        sourced_fit_errors_pct=pct(fit_group, key, 1.0),
                        sourced_held_out_errors_pct=pct(held, key, 1.0)))
    return fits


def report(fits: Sequence[Fit]) -> str:
    """The fitted constants per GPU model, with the median and largest |error| on each half."""
    from autoshard.hardware.profiles import load_profile
    from autoshard.strategies.step_time import KERNEL_RATES

    def summary(errors: Sequence[float]) -> str:
        if not errors:
            return "no points"
        return (f"{len(errors)} point(s), median |error| {statistics.median(abs(e) for e in errors):.1f} %, "
                f"max {max(abs(e) for e in errors):.1f} %")

    lines = []
    for f in fits:
        base = load_profile(f.gpu).spec.achievable or KERNEL_RATES  # type: ignore[union-attr]
        if f.kind in ("fp32", "tf32"):
            value = min(1.0, _own(base, f.kind) * f.scale)
            lines.append(f"{f.gpu} {f.kind}: x{f.scale:g} -> matmul_{f.kind} {value:.3f}")
        else:
            lines.append(f"{f.gpu} 16-bit: x{f.scale:g} -> matmul {min(1.0, base.matmul * f.scale):.3f}, attention "
                         f"{min(1.0, base.attention * f.scale):.3f} (memory {base.memory:g} kept)")
        if not f.fit_errors_pct:
            lines[-1] += ": no fit points, the sourced constants kept"
        lines.append(f"    fit half:      {summary(f.fit_errors_pct)}")
        lines.append(f"    held-out half: {summary(f.held_out_errors_pct)}")
        lines.append(f"    sourced constants (x1): fit {summary(f.sourced_fit_errors_pct)}; held-out "
                     f"{summary(f.sourced_held_out_errors_pct)}; signed: "
                     + ", ".join(f"{e:+.0f} %" for e in (*f.sourced_fit_errors_pct, *f.sourced_held_out_errors_pct)))
    return "\n".join(lines) or "no GPU model has throughput points"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--points", type=Path, default=None, help="a points file (default: published.py's)")
    args = parser.parse_args(argv)
    loaded = load_published(args.points)
    if isinstance(loaded, str):
        print(loaded)
        return 0
    module, data = loaded
    with tempfile.TemporaryDirectory() as folder:
        fits = fit_all(module, data, Path(folder))
    print(report(fits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
