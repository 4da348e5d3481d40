"""autoshard: plan and run distributed training of a PyTorch model.

Public API::

    import autoshard
    prof = autoshard.profile("llama-2-7b", batch_size=1, seq_len=4096)
    print(prof.peak_bytes, prof.peak_breakdown)
    result = autoshard.fit(model, data, max_steps=100)   # train with the recommended strategy
    if not autoshard.is_worker(): ...                      # skip in the worker processes fit() starts
    tuned = autoshard.tune("model.py", trials=12)          # or measure first: short real trials under Optuna
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0.dev0"

from autoshard.api import profile, recommend
from autoshard.errors import (
    AutoshardError,
    HardwareError,
    ModelSourceError,
    NoFeasiblePlan,
    ProfileError,
    UsageError,
    UserCodeError,
    WorkerError,
    WorkerTimeout,
)
from autoshard.hardware import HardwareSpec, detect_hardware, load_hardware
from autoshard.models import ModelSource, load_source
from autoshard.profiler import MemoryBreakdown, ModelProfile, Precision, ProfileOptions

if TYPE_CHECKING:  # loaded lazily at runtime (see __getattr__), typed here for the caller's type checker
    from autoshard.export import ExportedPlan, export_plan
    from autoshard.fitting import fit
    from autoshard.planner.plan import Plan
    from autoshard.runtime import FitResult, is_worker
    from autoshard.tuner import TuneResult, tune

__all__ = [
    "AutoshardError",
    "ExportedPlan",
    "FitResult",
    "HardwareError",
    "HardwareSpec",
    "MemoryBreakdown",
    "ModelProfile",
    "ModelSource",
    "ModelSourceError",
    "NoFeasiblePlan",
    "Plan",
    "Precision",
    "ProfileError",
    "ProfileOptions",
    "TuneResult",
    "UsageError",
    "UserCodeError",
    "WorkerError",
    "WorkerTimeout",
    "__version__",
    "detect_hardware",
    "export_plan",
    "fit",
    "is_worker",
    "load_hardware",
    "load_source",
    "profile",
    "recommend",
    "tune",
]


def __getattr__(name: str) -> object:
    # fit(), its result and is_worker() (through autoshard.runtime) import torch.distributed and the backends:
    # only when asked for.
    if name == "fit":  # training composed with tuning (autoshard/fitting.py)
        from autoshard.fitting import fit

        return fit
    if name in ("FitResult", "is_worker"):
        from autoshard import runtime

        return getattr(runtime, name)
    if name in ("tune", "TuneResult"):
        from autoshard import tuner

        return getattr(tuner, name)
    # The planner and the exporters load the strategy registry: only when asked for.
    if name == "Plan":
        from autoshard.planner.plan import Plan

        return Plan
    if name in ("ExportedPlan", "export_plan"):
        from autoshard import export

        return getattr(export, name)
    raise AttributeError(f"module 'autoshard' has no attribute {name!r}")
