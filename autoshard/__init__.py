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

if TYPE_CHECKING:  # loaded lazily at runtime (see __getattr__), typed here for the caller's type checker
    from autoshard.api import profile, recommend
    from autoshard.export import ExportedPlan, export_plan
    from autoshard.fitting import fit
    from autoshard.hardware import HardwareSpec, detect_hardware, load_hardware
    from autoshard.models import ModelSource, load_source
    from autoshard.planner.plan import Plan
    from autoshard.profiler import MemoryBreakdown, ModelProfile, Precision, ProfileOptions
    from autoshard.runtime import Checkpointing, EvalMetrics, FitResult, StepMetrics, is_worker
    from autoshard.tuner import TuneResult
    from autoshard.tuning import tune

__all__ = [
    "AutoshardError",
    "Checkpointing",
    "EvalMetrics",
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
    "StepMetrics",
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


_LAZY = {
    # Everything but the errors imports torch (or the planner, the runtime, the tuner): only when asked for, so
    # that `import autoshard` and `autoshard --version` stay cheap.
    "profile": "autoshard.api",
    "recommend": "autoshard.api",
    "HardwareSpec": "autoshard.hardware",
    "detect_hardware": "autoshard.hardware",
    "load_hardware": "autoshard.hardware",
    "ModelSource": "autoshard.models",
    "load_source": "autoshard.models",
    "MemoryBreakdown": "autoshard.profiler",
    "ModelProfile": "autoshard.profiler",
    "Precision": "autoshard.profiler",
    "ProfileOptions": "autoshard.profiler",
    "Plan": "autoshard.planner.plan",
    "ExportedPlan": "autoshard.export",
    "export_plan": "autoshard.export",
    "fit": "autoshard.fitting",  # training composed with tuning
    "FitResult": "autoshard.runtime",
    "Checkpointing": "autoshard.runtime",
    "StepMetrics": "autoshard.runtime",
    "EvalMetrics": "autoshard.runtime",
    "is_worker": "autoshard.runtime",
    "tune": "autoshard.tuning",  # the tuner composed with its report
    "TuneResult": "autoshard.tuner",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'autoshard' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
