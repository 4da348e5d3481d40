"""FSDP2 (``fully_shard``) from a plan: one unit per ``blocks_per_unit`` repeated blocks of a stack and the
root, ``MixedPrecisionPolicy``, dynamic loss scaling for ``16-mixed``, ``CPUOffloadPolicy``, hybrid sharding on a
``(nodes, ranks per node)`` mesh, ``reshard_after_forward``, explicit prefetching, activation checkpointing,
sharded construction on the meta device, and DCP checkpoints.

The wrapping follows torchtitan's ``apply_fsdp`` (``torchtitan/models/llama3/infra/parallelize.py``): blocks
first, then the root; the root keeps ``reshard_after_forward=None``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    fully_shard,
)

from autoshard.errors import UsageError
from autoshard.models.source import CallFn, call_model
from autoshard.profiler.blocks import block_stacks
from autoshard.runtime.activation_checkpointing import checkpoint_blocks
from autoshard.runtime.backends.base import Backend, ModelInit, OptimizerFactory

DCP_DIR = "fsdp_dcp"
SCALER_FILE = "fsdp_grad_scaler.pt"
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class FSDPBackend(Backend):
    """Parameters, gradients and optimizer state sharded over the ranks (or, hybrid, over each node's ranks)."""

    family = "fsdp"
    reshards_checkpoints = True  # torch.distributed.checkpoint reshards on load

    def setup(self, model: ModelInit, make_optimizer: OptimizerFactory) -> None:
        """Build (on ``meta`` when the model can re-initialise itself), shard, materialise, build the optimizer
        (and, for ``16-mixed``, the loss scaler)."""
        self.offload = self.traits.offloads
        on_meta = model.module is None
        if on_meta:
            with torch.device("meta"):
                module = model.materialise()
        else:
            module = model.materialise()
            _broadcast_from_rank0(module, self.ctx.device)
        if self.precision.param_dtype is not None:
            module.to(self.precision.param_dtype)
        if self.plan.activation_checkpointing and model.block_names:
            checkpoint_blocks(module, model.block_names, self.plan.checkpointing_choice)
        self.mesh = self._mesh()
        units = self._shard(module, model.block_names)
        if on_meta:
            module.to_empty(device="cpu" if self.offload else self.ctx.device)
            _init_weights(module)
        self._prefetch(units)
        self._module = module
        self.optimizer = make_optimizer(module.parameters())
        # The plain GradScaler is the one FSDP2 is tested with (torch's test/distributed/_composable/fsdp/
        # test_fully_shard_grad_scaler.py): the gradients are DTensors, and DTensor runs the inf check on the local
        # shards, then all-reduces found_inf (MAX) over every Shard mesh dimension (found_inf_reduce_handler,
        # torch/distributed/tensor/_dispatch.py), so every rank skips an overflowing step together (hybrid: the
        # replicas' gradients are equal after their all-reduce). ShardedGradScaler (torch/distributed/fsdp/
        # sharded_grad_scaler.py) was written for FSDP1's plain-tensor shards; here it would all-reduce again.
        self.scaler = self.grad_scaler()

    def _mesh(self) -> DeviceMesh:
        """1-D over the world; hybrid: ``(nodes, ranks per node)``, replicas across nodes, shards within one."""
        hw = self.plan.hardware
        if self.traits.hybrid:
            if hw.nodes * hw.gpus_per_node != self.ctx.world_size:
                raise UsageError(f"the plan's hybrid mesh is {hw.nodes} node(s) × {hw.gpus_per_node} rank(s), and "
                                 f"this run has {self.ctx.world_size} ranks.", hint="Plan again for this run.")
            # Ranks r·gpus_per_node ... (r+1)·gpus_per_node − 1 form node r's shard group (row-major mesh), as
            # torchrun numbers the ranks of consecutive nodes.
            return init_device_mesh(self.ctx.device.type, (hw.nodes, hw.gpus_per_node),
                                    mesh_dim_names=("replicate", "shard"))
        return init_device_mesh(self.ctx.device.type, (self.ctx.world_size,))

    def _shard(self, module: nn.Module, block_names: tuple[str, ...]) -> list[FSDPModule]:
        s = self.settings
        kwargs: dict[str, Any] = {"mesh": self.mesh}
        half = self.precision.half_dtype
        if self.precision.autocast_dtype is not None and half is not None:
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=half,
                                                       reduce_dtype=_DTYPES[str(s.get("reduce_dtype", "fp32"))])
        if self.offload:
            # Pinning needs an accelerator (FSDPParam pins with Tensor.pin_memory(), torch/distributed/fsdp/
            # _fully_shard/_fsdp_param.py; without one it raises "Cannot access accelerator device"). On a CPU
            # run the "device" is the host, so there is nothing to pin for.
            pin = bool(s.get("pin_memory", True)) and self.ctx.device.type == "cuda"
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=pin)
        per_unit = int(s.get("blocks_per_unit", 1))
        units: list[FSDPModule] = []
        # Units group consecutive blocks of one stack (an encoder's, a decoder's), never across stacks: the
        # grouping autoshard.strategies.fsdp.memory.wrapping_units models.
        for stack in block_stacks(module, block_names):
            blocks = [module.get_submodule(n) for n in stack]
            for i in range(0, len(blocks), per_unit):
                group = blocks[i:i + per_unit]
                fully_shard(group if len(group) > 1 else group[0],
                            reshard_after_forward=s.get("reshard_after_forward", True), **kwargs)
                units.append(group[0])  # type: ignore[arg-type]  # fully_shard made it an FSDPModule
        if self.precision.loss_scaling and "mp_policy" in kwargs:
            # 16-mixed: the root's outputs in fp32, so the loss is computed and scaled in fp32, as autocast runs
            # cross_entropy in fp32. A 16-bit loss overflows under the scaler: backward seeds it with the scale
            # (GradScaler's init_scale is 2**16, torch/amp/grad_scaler.py), above fp16's largest value 65504.
            kwargs["mp_policy"] = dataclasses.replace(kwargs["mp_policy"], output_dtype=torch.float32)
        fully_shard(module, **kwargs)
        return units

    def _prefetch(self, units: list[FSDPModule]) -> None:
        """Explicit prefetching beyond FSDP2's implicit one-unit backward prefetch."""
        forward = int(self.settings.get("forward_prefetch", 0))
        backward = int(self.settings.get("backward_prefetch", 1))
        for i, unit in enumerate(units):
            if forward > 0 and units[i + 1:i + 1 + forward]:
                unit.set_modules_to_forward_prefetch(units[i + 1:i + 1 + forward])
            if backward > 1 and i > 0:
                unit.set_modules_to_backward_prefetch(units[max(0, i - backward):i][::-1])

    @property
    def module(self) -> nn.Module:
        """The user's module, sharded in place (its parameters are DTensors)."""
        return self._module

    def forward(self, batch: Any, *, sync: bool, call: CallFn = call_model) -> Any:
        """Forward; the policy casts parameters, ``bf16-true`` casts floating inputs."""
        return call(self._module, self.precision.cast_batch(batch))

    def backward(self, loss: torch.Tensor, *, sync: bool) -> None:
        """Backward, reduce-scattered every micro-batch (``sync`` is not used): the sharded gradients accumulate in
        place (``foreach_reduce``: ``sharded_param.grad += new_sharded_grad``), so accumulating costs 1/N of the
        gradients. Skipping the sync (``set_requires_gradient_sync(False)``) would save the reduce-scatters of all
        but the last micro-batch and keep every unsharded gradient between them instead, the memory FSDP exists
        to save; llm-foundry's Composer runs FSDP accumulation this way too."""
        del sync
        self.scaled_backward(loss)

    def step(self) -> None:
        """Optimizer step on the shards (after clipping the global norm; skipped on every rank by the scaler
        when a gradient overflowed), then zero the gradients."""
        self.scaled_step(self.optimizer, self._module.parameters())  # clip_grad_norm_ is DTensor-aware

    def save(self, directory: Path) -> None:
        """A sharded DCP checkpoint: each rank writes its shards."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self._module, self.optimizer)
        dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(directory / DCP_DIR))
        if self.scaler is not None and self.ctx.is_main:  # the same scale on every rank (found_inf is agreed)
            torch.save(self.scaler.state_dict(), directory / SCALER_FILE)

    def load(self, directory: Path) -> None:
        """Read a DCP checkpoint into the shards (DCP reshards when the world size changed)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            get_state_dict,
            set_state_dict,
        )

        model_sd, optim_sd = get_state_dict(self._module, self.optimizer)
        state: dict[str, Any] = {"model": model_sd, "optimizer": optim_sd}
        dcp.load(state, checkpoint_id=str(directory / DCP_DIR))
        set_state_dict(self._module, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])
        if self.scaler is not None and (directory / SCALER_FILE).is_file():
            self.scaler.load_state_dict(torch.load(directory / SCALER_FILE, weights_only=True))

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """All-gathered to rank 0's CPU, in the sharded parameters' dtype (fp32 unless ``bf16-true``)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        full = get_model_state_dict(self._module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return cast(dict[str, torch.Tensor], full) if self.ctx.is_main else None  # full_state_dict: all tensors


    def hand_back(self, state: dict[str, torch.Tensor]) -> None:
        """On the rank holding ``state`` (rank 0, or the one process): the user's module, sharded in place, plain
        again and holding ``state`` (:func:`~autoshard.strategies.fsdp.unshard.unshard_in_place`), where ``fit()``
        made the process group and so ends it: the shards cannot run a forward without it. In a group the user
        made and keeps, every rank keeps its shards (a sharded forward after ``fit()`` needs them on every rank)."""
        if self.ctx.world_size == 1 or self.ctx.owns_group:
            from autoshard.strategies.fsdp.unshard import unshard_in_place

            unshard_in_place(self._module, state)


def _broadcast_from_rank0(module: nn.Module, device: torch.device) -> None:
    """Make every rank's copy equal to rank 0's before sharding (each rank keeps its slice of its own copy)."""
    if dist.get_world_size() == 1:
        return
    for tensor in module.state_dict().values():
        if device.type == "cuda" and tensor.device.type != "cuda":
            staged = tensor.detach().to(device)
            dist.broadcast(staged, 0)
            tensor.detach().copy_(staged)
        else:
            dist.broadcast(tensor.detach(), 0)


def _init_weights(module: nn.Module) -> None:
    """Initialise a module materialised with ``to_empty``: its own ``init_weights()`` (autoshard's catalog,
    torchtitan's convention)."""
    init = getattr(module, "init_weights", None)
    if not callable(init):
        raise UsageError(f"{type(module).__name__} was built on the meta device but has no init_weights().")
    with torch.no_grad():
        init()
