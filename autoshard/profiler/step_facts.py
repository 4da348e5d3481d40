"""What a traced training step measured besides the memory tracker's peak, and the parts of a profile made from it.

:mod:`autoshard.profiler.trace` fills a :class:`StepFacts` while its steps run (gradient and optimizer-state bytes,
FLOPs in total, per block and per module, the op census, the parameters left without a gradient); the helpers here
turn the facts and the traced model into a profile's block list and its names for unused parameters.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from autoshard.profiler.blocks import RepeatedBlocks
from autoshard.profiler.op_census import OpCensus
from autoshard.profiler.result import BlockProfile


@dataclass(slots=True)
class StepFacts:
    """What the step loop measures besides the tracker's peak."""

    gradient_bytes: int = 0
    optimizer_state_bytes: int = 0
    forward_flops: int = 0
    total_flops: int = 0
    block_activation_bytes: dict[str, int] = field(default_factory=dict)
    block_forward_flops: dict[str, int] = field(default_factory=dict)
    block_total_flops: dict[str, int] = field(default_factory=dict)
    census: OpCensus | None = None
    optimizer_census: OpCensus | None = None
    uncounted_ops: tuple[str, ...] = ()
    """Custom ops the step ran without a FLOP formula (:attr:`CensusCounter.uncounted`)."""
    written: set[str] = field(default_factory=set)
    """Parameters, by name, that forward or backward wrote in place (:attr:`MemoryTracker.written`)."""
    unused: dict[str, nn.Parameter] = field(default_factory=dict)
    """Trainable parameters, by name, still without a gradient after the last step's backward."""
    loss_in_output: bool = False
    """Forward's output holds a one-element tensor that requires grad (a Hugging Face ``.loss``, a model returning
    its loss): its gradient is the first backward computes (:attr:`ModelProfile.loss_in_output`)."""


def flops_by_module(counter: FlopCounterMode, model: nn.Module) -> dict[str, int]:
    """FLOPs per module FQN (FlopCounterMode keys are ``RootClass.fqn``)."""
    prefix = type(model).__name__ + "."
    out = {}
    for key, by_op in counter.get_flop_counts().items():
        if key.startswith(prefix):
            out[key[len(prefix) :]] = sum(by_op.values())
    return out


def block_profiles(model: nn.Module, blocks: RepeatedBlocks | None, facts: StepFacts) -> tuple[BlockProfile, ...]:
    """Each repeated block's parameters, saved activations and FLOPs, in block order (none without blocks)."""
    if blocks is None:
        return ()
    out = []
    for name in blocks.names:
        module = model.get_submodule(name)
        params = list(unique_params(module.parameters()).values())
        fwd = facts.block_forward_flops.get(name, 0)
        out.append(
            BlockProfile(
                name=name,
                parameters=sum(p.numel() for p in params),
                parameter_bytes=sum(p.numel() * p.element_size() for p in params),
                activation_bytes=facts.block_activation_bytes.get(name, 0),
                forward_flops=fwd,
                backward_flops=facts.block_total_flops.get(name, 0) - fwd,
            )
        )
    return tuple(out)


def unique_params(params: Iterator[nn.Parameter] | Any) -> dict[int, nn.Parameter]:
    """``params`` by identity, each once (a tied weight is one parameter)."""
    return {id(p): p for p in params}


def unique_storages(tensors: Iterator[torch.Tensor] | Any) -> dict[int, torch.UntypedStorage]:
    """The storages under ``tensors``, each once (views and tied tensors share one)."""
    out: dict[int, torch.UntypedStorage] = {}
    for t in tensors:
        s = t.untyped_storage()
        out[id(s)] = s
    return out


def unused_modules(model: nn.Module, unused: set[str], *, trainable: bool = True) -> tuple[str, ...]:
    """Name the unused trainable parameters briefly: the outermost module whose trainable parameters are all
    in ``unused``, else the parameter itself, in module order. With ``trainable=False``, of all the parameters
    (those the step writes in place, :attr:`StepFacts.written`).

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)))
        >>> unused_modules(net, {"0.bias", "1.0.weight", "1.0.bias", "1.1.weight", "1.1.bias"})
        ('0.bias', '1')
    """
    if not unused:
        return ()
    total: dict[str, int] = {}
    idle: dict[str, int] = {}
    names = [n for n, p in model.named_parameters() if p.requires_grad or not trainable]
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            total[prefix] = total.get(prefix, 0) + 1
            idle[prefix] = idle.get(prefix, 0) + (name in unused)
    out: dict[str, None] = {}
    for name in names:
        if name in unused:
            parts = name.split(".")
            whole = (".".join(parts[:i]) for i in range(1, len(parts)))
            out[next((m for m in whole if idle[m] == total[m]), name)] = None
    return tuple(out)
