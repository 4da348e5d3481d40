"""Training backends by strategy family."""

from __future__ import annotations

from autoshard.export.plan_json import ExportedPlan
from autoshard.runtime.backends.base import (
    Backend,
    ModelInit,
    OptimizerFactory,
    to_device,
)
from autoshard.runtime.distributed import RunContext

__all__ = ["Backend", "ModelInit", "OptimizerFactory", "create", "to_device"]


def create(plan: ExportedPlan, ctx: RunContext, *, grad_clip_norm: float | None = None) -> Backend:
    """The backend for ``plan.family`` (imports only that family's dependencies).

    Raises:
        UsageError: the family is unknown, or its backend's dependency is missing.
    """
    if plan.family == "ddp":
        from autoshard.runtime.backends.ddp import DDPBackend

        return DDPBackend(plan, ctx, grad_clip_norm=grad_clip_norm)
    if plan.family == "fsdp":
        from autoshard.runtime.backends.fsdp import FSDPBackend

        return FSDPBackend(plan, ctx, grad_clip_norm=grad_clip_norm)
    if plan.family == "deepspeed":
        from autoshard.runtime.backends.deepspeed import (
            DeepSpeedBackend,
            import_deepspeed,
        )

        import_deepspeed(ctx.device.type)  # a clear install hint before anything is built
        return DeepSpeedBackend(plan, ctx, grad_clip_norm=grad_clip_norm)
    from autoshard.errors import UsageError

    raise UsageError(f"the plan's strategy family {plan.family!r} is not one fit() can run.",
                     hint="Families: ddp, fsdp, deepspeed.")
