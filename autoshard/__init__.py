"""autoshard: plan and run distributed training of a PyTorch model.

Public API::

    import autoshard
    prof = autoshard.profile("llama-2-7b", batch_size=1, seq_len=4096)
    print(prof.peak_bytes, prof.peak_breakdown)
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
)
from autoshard.hardware import HardwareSpec, detect_hardware, load_hardware
from autoshard.models import ModelSource, load_source
from autoshard.profiler import MemoryBreakdown, ModelProfile, Precision, ProfileOptions

__all__ = [
    "AutoshardError",
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
    "UsageError",
    "UserCodeError",
    "__version__",
    "detect_hardware",
    "load_hardware",
    "load_source",
    "profile",
    "recommend",
]
