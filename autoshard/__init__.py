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

__all__ = [
    "AutoshardError",
    "FitResult",
    "HardwareError",
    "HardwareSpec",
    "MemoryBreakdown",
    "ModelProfile",
    "ModelSource",
    "ModelSourceError",
    "NoFeasiblePlan",
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
    if name in ("fit", "FitResult", "is_worker"):
        from autoshard import runtime

        return getattr(runtime, name)
    if name in ("tune", "TuneResult"):
        from autoshard import tuner

        return getattr(tuner, name)
    raise AttributeError(f"module 'autoshard' has no attribute {name!r}")
