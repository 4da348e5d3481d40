"""Training backends by strategy family."""

from __future__ import annotations

from autoshard.planner.plan_file import ExportedPlan
from autoshard.runtime.backends.base import (
    Backend,
    ModelInit,
    OptimizerFactory,
    to_device,
)
from autoshard.runtime.distributed import RunContext

__all__ = ["Backend", "ModelInit", "OptimizerFactory", "create", "to_device"]


def create(plan: ExportedPlan, ctx: RunContext, *, grad_clip_norm: float | None = None) -> Backend:
    """The backend of the plan's strategy family (imports only that family's dependencies).

    Raises:
        UsageError: the family is unknown, or its backend's dependency is missing.
    """
    from autoshard.strategies import backend_class

    cls: type[Backend] = backend_class(plan.family)
    cls.check_dependencies(ctx.device.type)  # a clear install hint before anything is built
    return cls(plan, ctx, grad_clip_norm=grad_clip_norm)
