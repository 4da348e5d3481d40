"""DistributedDataParallel from a plan: bucket size, comm hook, ``gradient_as_bucket_view``, ``static_graph``,
``find_unused_parameters`` (only when the plan says the model needs it), autocast and loss scaling.

On one device the module trains unwrapped: DDP would all-reduce with itself and keep its buckets, a second copy
of the gradients, for nothing; accelerate (``distributed_type: NO``), the HF Trainer and Lightning's
single-device strategy train one GPU so too, and the plan's memory and time say so
(:data:`autoshard.strategies.ddp.strategy.ONE_DEVICE_NOTE`)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from autoshard.models.source import CallFn, call_model
from autoshard.runtime.activation_checkpointing import checkpoint_blocks
from autoshard.runtime.backends.base import Backend, ModelInit, OptimizerFactory

STATE_FILE = "ddp_state.pt"


class DDPBackend(Backend):
    """Full replicas; gradients all-reduced in buckets during backward."""

    family = "ddp"
    reshards_checkpoints = True  # one file of the replicated state, the same whatever the number of ranks

    def setup(self, model: ModelInit, make_optimizer: OptimizerFactory) -> None:
        """Move the module to this rank's device, wrap it, register the comm hook, build the optimizer."""
        module = model.materialise()
        if self.precision.param_dtype is not None:
            module.to(self.precision.param_dtype)
        module.to(self.ctx.device)
        if self.plan.activation_checkpointing and model.block_names:
            checkpoint_blocks(module, model.block_names, self.plan.checkpointing_choice)
        s = self.settings
        self._module = module
        self.ddp: DistributedDataParallel | None = None
        if self.ctx.world_size > 1:
            self.ddp = DistributedDataParallel(
                module,
                device_ids=[self.ctx.device.index] if self.ctx.device.type == "cuda" else None,
                bucket_cap_mb=s.get("bucket_cap_mb"),
                gradient_as_bucket_view=bool(s.get("gradient_as_bucket_view", False)),
                static_graph=bool(s.get("static_graph", False)),
                find_unused_parameters=bool(s.get("find_unused_parameters", False)),
            )
            self._register_hook(self.ddp, str(s.get("comm_hook", "none")))
        self.optimizer = make_optimizer(module.parameters())
        self.scaler = self.grad_scaler()

    def _register_hook(self, ddp: DistributedDataParallel, hook: str) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import (
            default_hooks,
            powerSGD_hook,
        )

        if hook == "none":
            return
        if hook == "fp16_compress":
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif hook == "bf16_compress":
            ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
        elif hook == "powersgd":
            state = powerSGD_hook.PowerSGDState(
                process_group=None, matrix_approximation_rank=int(self.settings.get("matrix_approximation_rank", 1)),
                start_powerSGD_iter=int(self.settings.get("start_powerSGD_iter", 1_000)))
            ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        else:
            raise ValueError(f"unknown comm hook {hook!r}")

    @property
    def module(self) -> nn.Module:
        """The user's module (DDP trains it in place)."""
        return self._module

    def forward(self, batch: Any, *, sync: bool, call: CallFn = call_model) -> Any:
        """Forward through DDP; with ``sync`` false the reducer skips this micro-batch (as ``no_sync()`` does).
        On one device, through the module itself."""
        if self.ddp is None:
            return call(self._module, self.precision.cast_batch(batch))
        self.ddp.require_backward_grad_sync = sync
        return call(self.ddp, self.precision.cast_batch(batch))

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` for ``16-mixed`` / ``bf16-mixed`` (forward and loss), else nothing."""
        return self.precision.autocast(self.ctx.device)

    def backward(self, loss: torch.Tensor, *, sync: bool) -> None:
        """Backward, through the loss scaler for ``16-mixed``."""
        self.scaled_backward(loss)

    def step(self) -> None:
        """Optimizer step (skipped by the scaler on overflow), then zero the gradients."""
        self.scaled_step(self.optimizer, self._module.parameters())

    def save(self, directory: Path) -> None:
        """Rank 0 writes model, optimizer and scaler state (identical on every rank) to one file."""
        if self.ctx.is_main:
            state = {"model": self._module.state_dict(), "optimizer": self.optimizer.state_dict()}
            if self.scaler is not None:
                state["scaler"] = self.scaler.state_dict()
            torch.save(state, directory / STATE_FILE)
        dist.barrier()

    def load(self, directory: Path) -> None:
        """Every rank reads the file (tensors only: ``weights_only=True``)."""
        state = torch.load(directory / STATE_FILE, map_location=self.ctx.device, weights_only=True)
        self._module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The replica's state dict, copied to CPU, on rank 0."""
        if not self.ctx.is_main:
            return None
        return {k: v.detach().to("cpu", copy=True) for k, v in self._module.state_dict().items()}
