"""A model the user already built, as the :class:`~autoshard.models.source.ModelSource` ``fit()`` plans it by:
built as a fake or meta copy (never its weights), fed its first batch's first sample repeated, and told what its
transformers config says about positions and windows."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from autoshard.errors import UsageError
from autoshard.models.source import ModelSource, first_dimensions
from autoshard.models.step import describe, step_functions
from autoshard.runtime.data import repeated_first_sample

__all__ = ["module_source"]


def _copied(module: nn.Module, memo: dict[int, Any]) -> nn.Module:
    """``copy.deepcopy(module, memo)``, its failure said in the user's terms: an attribute that cannot be copied
    (a custom op's ``CustomOpDef`` kept on the module failed as "model() raised TypeError: cannot pickle
    '_DispatchModule'", with a hint about config.json files)."""
    try:
        return copy.deepcopy(module, memo)
    except Exception as exc:  # whatever the user's attributes raise when copied
        raise UsageError(
            f"fit() plans on a copy of your module (copy.deepcopy, its weights fake), and copying "
            f"{type(module).__name__} raised {type(exc).__name__}: {exc}",
            hint="An attribute that cannot be copied is the usual cause (a custom op's object, a lock, an open file, "
                 "a process group): keep it off the module (call a custom op as torch.ops.mylib.op inside "
                 "forward), or pass a model file or ModelSource(build_fn=...), which autoshard builds rather than "
                 "copies.") from exc


def module_source(module: nn.Module, example_batch: Any, *, loss_fn: Any = None, training_step: Any = None
                  ) -> ModelSource:
    """A :class:`ModelSource` over a module the user already built, for profiling and planning.

    ``build_fn`` never copies the weights: under ``FakeTensorMode`` it returns a fake copy, on the ``meta``
    device a meta copy; ``batch_fn(n)`` repeats the example batch's first sample ``n`` times. Under a 16-bit
    default dtype (the profiler builds ``bf16-true`` models that way, as Lightning does) the fake / meta copy's
    floating tensors are made in that dtype: the profiler cannot cast them afterwards, because
    ``Module.to`` swaps fake tensors and the fake-tensor converter keeps weak references to the ones it made.
    """

    def build() -> nn.Module:
        from torch._guards import detect_fake_mode

        fake = detect_fake_mode()
        default = torch.get_default_dtype()
        half = default if default in (torch.float16, torch.bfloat16) else None

        def dtype_of(t: torch.Tensor) -> torch.dtype:
            return half if half is not None and t.is_floating_point() else t.dtype

        if fake is not None:
            def convert(t: torch.Tensor) -> torch.Tensor:
                copied = fake.from_tensor(t)
                return copied if copied.dtype == dtype_of(t) else copied.to(dtype_of(t))
        elif torch.get_default_device().type == "meta":
            def convert(t: torch.Tensor) -> torch.Tensor:
                return torch.empty_like(t, device="meta", dtype=dtype_of(t))
        else:
            return _copied(module, {})
        memo: dict[int, Any] = {}
        for t in (*module.parameters(), *module.buffers()):
            if id(t) not in memo:
                copied = convert(t.detach())
                memo[id(t)] = nn.Parameter(copied, requires_grad=t.requires_grad) if isinstance(
                    t, nn.Parameter) else copied
        return _copied(module, memo)

    def batch(batch_size: int) -> Any:
        return repeated_first_sample(example_batch, batch_size)

    steps = step_functions(module, loss_fn=loss_fn, training_step=training_step)
    feeding = describe(module, example_batch, loss_fn=loss_fn, training_step=training_step)
    metadata: dict[str, Any] = {"feeding": feeding, "uncut": first_dimensions(example_batch)}
    config = getattr(module, "config", None)
    if config is not None and hasattr(config, "model_type"):  # a transformers model: its positions and window
        from autoshard.models.hf_spec import sequence_metadata

        metadata.update(sequence_metadata(config))
        metadata["attn_implementation"] = getattr(config, "_attn_implementation", None)
    return ModelSource(name=type(module).__name__, kind="module", origin=f"module:{type(module).__qualname__}",
                       build_fn=build, batch_fn=batch, loss_fn=steps.loss, call_fn=steps.call, metadata=metadata)
