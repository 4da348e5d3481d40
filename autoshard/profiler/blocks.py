"""Finding the repeated block of a model (e.g. ``LlamaDecoderLayer``) for wrapping and checkpointing."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from torch import nn

# Containers that group modules but are never "the block" themselves.
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


@dataclass(frozen=True, kw_only=True, slots=True)
class RepeatedBlocks:
    """The repeated block class and its instances, in module order."""

    class_name: str
    names: tuple[str, ...]
    """Fully-qualified module names of the instances."""
    parameter_fraction: float
    """Fraction of the model's parameters held by all instances together."""


def find_repeated_blocks(model: nn.Module) -> RepeatedBlocks | None:
    """The module class repeated most that holds the most parameters.

    Candidates are non-leaf, non-container classes with at least two instances, none of which is nested in
    another instance of the same class. The winner maximises the parameters its instances hold together; on a
    tie the outer class wins (a decoder layer over its attention sub-module when the MLP holds no parameters).

    Args:
        model: the model (meta, fake or real tensors).

    Returns:
        The repeated blocks, or ``None`` when no class repeats (e.g. a plain MLP).
    """
    total = sum(p.numel() for p in model.parameters()) or 1
    by_class: dict[type, list[tuple[str, nn.Module]]] = defaultdict(list)
    depth: dict[type, int] = {}
    for name, module in model.named_modules():
        if not name or isinstance(module, _CONTAINERS) or not any(True for _ in module.children()):
            continue
        by_class[type(module)].append((name, module))
        depth.setdefault(type(module), name.count("."))
    best: tuple[int, int, type] | None = None
    for cls, instances in by_class.items():
        if len(instances) < 2 or _nested(instances):
            continue
        params = sum(p.numel() for _, m in instances for p in m.parameters())
        key = (params, -depth[cls], cls)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None or best[0] == 0:
        return None
    cls = best[2]
    return RepeatedBlocks(
        class_name=cls.__name__,
        names=tuple(name for name, _ in by_class[cls]),
        parameter_fraction=best[0] / total,
    )


def _nested(instances: list[tuple[str, nn.Module]]) -> bool:
    names = [n for n, _ in instances]
    return any(b.startswith(a + ".") for a in names for b in names if a != b)
