"""Finding a model's repeated blocks (its layer stacks) for wrapping and checkpointing.

The blocks are the units FSDP wrap policies take as a set of layer classes (Lightning's
``auto_wrap_policy={Block}``, accelerate's ``fsdp_transformer_layer_cls_to_wrap``, torchtitan's ``fully_shard``
on each layer): ``LlamaDecoderLayer`` for a decoder, ``T5Block`` in both stacks of T5, ``BartEncoderLayer`` and
``BartDecoderLayer`` for BART, the vision tower's and the language model's layers for LLaVA.

The rule is structural. A *layer* is a module held as an element of an ``nn.ModuleList`` or ``nn.Sequential``
that is neither a container nor a leaf, of a class with at least two such elements in the model. The blocks
are the layers not nested in another layer: this covers the most parameters that any choice of non-nested
layers can (a nested layer's parameters are part of its ancestor's), and it takes one class for a decoder and
several for an encoder-decoder or a multimodal model, from as many stacks as the model has.

Hugging Face's ``PreTrainedModel._no_split_modules`` (what accelerate wraps by default) is not used to choose:
it tells ``device_map`` what must not be split across devices, so it lists modules that are not repeated
(``CLIPTextEmbeddings``, ``BertEmbeddings``) or hold a whole stack (``DetrConvEncoder``), a composite model
merges its sub-models' lists (classes it may not contain: accelerate raises on those), and it gives no order.
``tests/profiler/test_blocks.py`` cross-checks that the classes found are among a model's ``_no_split_modules``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from torch import nn

# Containers whose elements are a model's layers; they are never a block themselves.
_STACKS = (nn.Sequential, nn.ModuleList)
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


@dataclass(frozen=True, kw_only=True, slots=True)
class RepeatedBlocks:
    """The repeated blocks of a model: their classes and instances, stack by stack."""

    class_names: tuple[str, ...]
    """The block classes, in the order of their first instance, e.g. ``("BartEncoderLayer", "BartDecoderLayer")``."""
    stacks: tuple[tuple[str, ...], ...]
    """Fully-qualified module names of the instances, grouped by stack (see :func:`block_stacks`), each stack in
    module order (its execution order), the stacks in module order."""
    parameter_fraction: float
    """Fraction of the model's (unique) parameters held by all instances together."""

    @property
    def names(self) -> tuple[str, ...]:
        """Every instance, stack after stack."""
        return tuple(name for stack in self.stacks for name in stack)


def find_repeated_blocks(model: nn.Module) -> RepeatedBlocks | None:
    """The model's layer stacks: the outermost repeated elements of its ``ModuleList`` / ``Sequential`` s.

    Args:
        model: the model (meta, fake or real tensors).

    Returns:
        The repeated blocks, or ``None`` when no layer repeats (e.g. a plain MLP of ``nn.Linear`` s).

    Example:
        >>> from torch import nn
        >>> class Layer(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = nn.Linear(4, 4)
        >>> class EncoderDecoder(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.encoder = nn.ModuleList(Layer() for _ in range(2))
        ...         self.norm = nn.LayerNorm(4)
        ...         self.decoder = nn.ModuleList(Layer() for _ in range(3))
        >>> found = find_repeated_blocks(EncoderDecoder())
        >>> found.class_names, found.stacks
        (('Layer',), (('encoder.0', 'encoder.1'), ('decoder.0', 'decoder.1', 'decoder.2')))
    """
    layers = _stack_elements(model)
    repeated = Counter(type(module) for _, module in layers)
    chosen: dict[str, nn.Module] = {}
    for name, module in layers:  # module order: an ancestor comes before what it holds
        if repeated[type(module)] < 2 or _inside(name, chosen) or not _holds_parameters(module):
            continue
        chosen[name] = module
    if not chosen:
        return None
    total = sum(p.numel() for p in _unique(model.parameters()))
    held = sum(p.numel() for p in _unique(p for m in chosen.values() for p in m.parameters()))
    classes = tuple(dict.fromkeys(type(m).__name__ for m in chosen.values()))
    return RepeatedBlocks(
        class_names=classes,
        stacks=block_stacks(model, tuple(chosen)),
        parameter_fraction=held / (total or 1),
    )


def block_stacks(model: nn.Module, names: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Group blocks into stacks: runs of blocks that follow one another in module order with no parameter
    outside the blocks between them.

    An encoder's layers and a decoder's are two stacks (norms and embeddings lie between them); a ResNet's
    stages, each its own ``Sequential`` but back to back, are one. FSDP units of several blocks are formed
    within a stack, so that one unit never spans modules that run apart.

    Args:
        model: the model holding the blocks.
        names: the blocks' fully-qualified module names.

    Returns:
        The names grouped by stack, in module order.
    """
    wanted = set(names)
    stacks: list[list[str]] = []
    current: list[str] = []
    inside: str | None = None
    for name, module in model.named_modules():
        if inside is not None and name.startswith(inside + "."):
            continue
        inside = None
        if name in wanted:
            current.append(name)
            inside = name
        elif current and any(True for _ in module.parameters(recurse=False)):
            stacks.append(current)
            current = []
    if current:
        stacks.append(current)
    return tuple(tuple(s) for s in stacks)


def _stack_elements(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Modules held directly by a ``ModuleList`` / ``Sequential``, not containers nor leaves, in module order."""
    modules = dict(model.named_modules())
    return [
        (name, module) for name, module in modules.items()
        if name and not isinstance(module, _CONTAINERS) and any(True for _ in module.children())
        and isinstance(modules.get(name.rpartition(".")[0]), _STACKS)
    ]


def _inside(name: str, chosen: dict[str, nn.Module]) -> bool:
    """Whether ``name`` lies within one of the ``chosen`` modules."""
    parts = name.split(".")
    return any(".".join(parts[:i]) in chosen for i in range(1, len(parts)))


def _holds_parameters(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def _unique(params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
    return list({id(p): p for p in params}.values())
