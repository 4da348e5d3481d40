"""A mixture-of-experts model's routed experts: how many parameters they hold, and how many a token uses.

A token runs through ``k`` of a layer's ``E`` routed experts, so of the experts' parameters only ``k / E`` take
part in one token's step; every other parameter (attention, the router, shared experts, embeddings) does. That
count, the model's *active* parameters, is how MoE models are published (Mixtral 8x7B: 46.7B parameters, 12.9B
active; DeepSeek-V3: 671B, 37B active) and how a user checks that autoshard built the model they meant.

The routed experts are found by name: transformers 5 keeps a layer's experts in one module named ``experts``
(``MixtralExperts``, ``DeepseekV3Experts``, ``GptOssExperts``: 3-D parameters of ``E`` slices), and older or
hand-written MoE code in a ``ModuleList`` / ``ModuleDict`` named ``experts`` (Switch Transformers, NLLB-MoE).
Shared experts (``shared_expert``, ``shared_experts``), which every token runs, are not named so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

EXPERTS_MODULE_NAME = "experts"
"""The last component of the qualified name of a module holding a layer's routed experts."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ExpertRouting:
    """How a mixture-of-experts model routes a token."""

    experts: int
    """Routed experts per MoE layer."""
    per_token: int
    """Experts each token is routed to (top-k)."""

    def to_dict(self) -> dict[str, int]:
        return {"experts": self.experts, "experts_per_token": self.per_token}


def routed_expert_parameters(model: nn.Module) -> int:
    """Elements of the (unique) parameters inside modules named :data:`EXPERTS_MODULE_NAME`, 0 without any.

    Example:
        >>> class Moe(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.experts = nn.ModuleList(nn.Linear(4, 4, bias=False) for _ in range(8))
        ...         self.shared_experts = nn.Linear(4, 4, bias=False)
        >>> routed_expert_parameters(Moe())
        128
    """
    seen: set[int] = set()
    total = 0
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] != EXPERTS_MODULE_NAME:
            continue
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
    return total


def routing_of(metadata: Any, model: nn.Module) -> ExpertRouting | None:
    """The routing a model source states (``metadata["experts"]``, ``["experts_per_token"]``, read from a Hugging
    Face config by :func:`autoshard.models.hf_classes.moe_layout`), else the one its module's ``config`` states (a
    ``model.py`` returning a transformers model); ``None`` for a dense model or where either count is unknown."""
    experts, per_token = metadata.get("experts"), metadata.get("experts_per_token")
    config = getattr(model, "config", None)
    if experts is None and config is not None:
        from autoshard.models.hf_classes import moe_layout

        try:
            experts, per_token, _ = moe_layout(config)
        except (AttributeError, TypeError, ValueError):  # not a transformers config
            return None
    if not isinstance(experts, int) or not isinstance(per_token, int) or not 1 <= per_token <= experts:
        return None
    return ExpertRouting(experts=experts, per_token=per_token)


def active_parameters(total: int, routed: int, routing: ExpertRouting | None) -> int | None:
    """Parameters one token's step uses: all but the ``(E - k) / E`` of the routed experts' it skips; ``None``
    for a dense model (no routing, or no parameters found in routed experts).

    Example:
        >>> active_parameters(46_702_792_704, 45_097_156_608, ExpertRouting(experts=8, per_token=2))
        12879925248
    """
    if routing is None or routed <= 0:
        return None
    return total - routed * (routing.experts - routing.per_token) // routing.experts
