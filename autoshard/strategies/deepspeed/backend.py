"""DeepSpeed ZeRO from a plan: ``deepspeed.initialize`` with the exported ``ds_config.json``, CPU / NVMe
offload with ``DeepSpeedCPUAdam``, ``deepspeed.zero.Init`` at stage 3 when given a build function (``fit()``
passes one for catalog models, whose ``init_weights()`` gathers each module's partitions while it initialises
them), DeepSpeed's own checkpoints, and fp32 consolidation with ``safe_get_full_fp32_param``.

On a machine without CUDA DeepSpeed runs on its CPU accelerator: ``DS_ACCELERATOR=cpu`` must be set before
``deepspeed`` is first imported (``deepspeed/accelerator/real_accelerator.py``, 0.19.8); :func:`import_deepspeed`
does that at the edge and nowhere else.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import OrderedDict
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from autoshard.errors import UsageError
from autoshard.models.source import CallFn, call_model, cast_floats
from autoshard.runtime.activation_checkpointing import checkpoint_blocks
from autoshard.runtime.backends.base import Backend, ModelInit, OptimizerFactory
from autoshard.runtime.extension_locks import check_extension_locks
from autoshard.strategies.deepspeed import config as ds_config_mod

TAG = "deepspeed"
"""The checkpoint tag: DeepSpeed writes ``<directory>/deepspeed/``."""


def import_deepspeed(device_type: str) -> ModuleType:
    """``import deepspeed``, on its CPU accelerator when the run is on CPU.

    Raises:
        UsageError: DeepSpeed is not installed.
    """
    if device_type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import deepspeed
    except ImportError as e:
        raise UsageError(f"the plan uses DeepSpeed, which cannot be imported ({e}).",
                         hint="pip install deepspeed, or choose a DDP / FSDP strategy.") from e
    return deepspeed


class DeepSpeedBackend(Backend):
    """ZeRO stages 1-3 with optional CPU / NVMe offload."""

    family = "deepspeed"
    _linear: Any = None
    """``torch.nn.functional.linear`` as it was before ``zero.Init`` replaced it (``None``: not replaced)."""
    _given_dtypes: dict[str, torch.dtype] | None = None
    _given_attributes: dict[int, set[str]] | None = None
    """The attributes each parameter and buffer of the user's module had before the engine added its own."""
    """The dtypes of the user's module's parameters and buffers before the engine cast them (``None``: the
    backend built the module)."""
    _frozen: dict[str, torch.Tensor] | None = None
    """On the first rank, the user's frozen parameters as they came, before the engine cast them to its 16-bit
    dtype or partitioned them: training leaves them as they were, and these are their values (no copy when they
    came on the CPU: the tensors the module held)."""

    @classmethod
    def check_dependencies(cls, device_type: str) -> None:
        """DeepSpeed must import (on its CPU accelerator for a CPU run), and no interrupted build of its JIT ops
        may have left a lock that would make loading them wait for ever (:mod:`autoshard.runtime.extension_locks`)."""
        import_deepspeed(device_type)
        check_extension_locks()

    def setup(self, model: ModelInit, make_optimizer: OptimizerFactory) -> None:
        """Build (inside ``zero.Init`` at stage 3 when given a build function), then ``deepspeed.initialize``."""
        deepspeed = import_deepspeed(self.ctx.device.type)
        # deepspeed.comm joins the process group fit() made; zero.Init reads the world size from it. It prints
        # "DeepSpeed deepspeed_shm_comm_op built successfully" on a CPU run (comm/torch.py, 0.19.8), and the user's
        # stdout may be data: its prints go to stderr, as the engine's op loads below.
        with contextlib.redirect_stdout(sys.stderr):
            deepspeed.init_distributed(dist_backend=self.ctx.backend)
        self.config = self._config()
        zero = self.config["zero_optimization"]
        if zero["stage"] == 3:
            # zero.Init — here, or the engine's own over a module built without it — replaces
            # torch.nn.functional.linear process-wide with its memory-efficient version and leaves it there ("This
            # will persist unless manually reset", partition_parameters.py, 0.19.8): close() puts the original
            # back, so code the process runs after fit() (a second fit, a trace) does not run DeepSpeed's linear.
            self._linear = torch.nn.functional.linear
        if zero["stage"] == 3 and model.module is None:
            with deepspeed.zero.Init(config_dict_or_path=self.config):
                module = model.materialise()
        else:
            module = model.materialise()
        if model.module is not None:
            self._given_dtypes = {name: t.dtype for name, t in (*module.named_parameters(),
                                                                 *module.named_buffers())}
            self._given_attributes = {id(t): set(vars(t)) for t in (*module.parameters(), *module.buffers(),
                                                                     *module.modules())}
            if self.ctx.is_main:
                self._frozen = {name: p.data if p.device.type == "cpu" else p.detach().to("cpu", copy=True)
                                for name, p in module.named_parameters() if not p.requires_grad}
        if self.plan.activation_checkpointing and model.block_names:
            checkpoint_blocks(module, model.block_names, self.plan.checkpointing_choice)
        optimizer = make_optimizer(p for p in module.parameters() if p.requires_grad)
        if "offload_optimizer" in zero:
            optimizer = _cpu_adam_like(optimizer)
        with contextlib.redirect_stdout(sys.stderr):  # "Time to load cpu_adam op: ..." and the like
            self.engine, self.optimizer, _, _ = deepspeed.initialize(model=module, optimizer=optimizer,
                                                                      config=self.config)
        self._module = self.engine.module

    def _config(self) -> dict[str, Any]:
        config = ds_config_mod.ds_config(self.plan)
        zero = config["zero_optimization"]
        for key in ("offload_optimizer", "offload_param"):
            block = zero.get(key, {})
            if block.get("device") == "nvme":
                _check_nvme(block.get("nvme_path"))
                _check_async_io()
            if block and self.ctx.device.type == "cpu":
                block["pin_memory"] = False  # nothing to pin for: the "device" is the host
        config["train_batch_size"] = (self.plan.micro_batch_size * self.plan.gradient_accumulation
                                      * self.ctx.world_size)
        # A client optimizer other than DeepSpeed's own is refused with ZeRO unless allowed (runtime/engine.py).
        config["zero_allow_untested_optimizer"] = True
        config["steps_per_print"] = 2**31 - 1  # fit() reports its own metrics
        config["gradient_clipping"] = self.grad_clip_norm or 0.0
        return config

    def evaluated(self) -> None:
        """ZeRO-3 records the order its forward fetches parameters in, and prefetches by it: a forward-only trace
        recorded while scoring ``eval_data`` then made the next training step fetch inside checkpointed blocks in
        another order than their recompute did, which op-selective checkpointing (replaying ops by index) refused
        ("aten.empty.memory_format encountered during backward but not found in storage"), and parameters the scoring
        left gathered were not fetched by the next forward but were by its recompute. The trace is dropped, to be
        recorded again by a training step (``PartitionedParameterCoordinator``, DeepSpeed 0.19.8, which keeps no
        separate trace for evaluation), and every parameter released."""
        offload = getattr(self.engine.optimizer, "parameter_offload", None)
        coordinator = None if offload is None else offload.get_param_coordinator()
        if coordinator is not None and not coordinator.is_invalid_trace():
            coordinator._invalidate_trace()
        if offload is not None:
            offload.empty_partition_cache()  # parameters the scoring left gathered: released, as after a step

    @property
    def module(self) -> nn.Module:
        """The user's module as the engine holds it (its parameters are partitioned at stage 3)."""
        return self._module

    def forward(self, batch: Any, *, sync: bool, call: CallFn = call_model) -> Any:
        """Forward through the engine; floating inputs in the engine's 16-bit dtype (DeepSpeed does not cast)."""
        half = self.precision.half_dtype
        return call(self.engine, batch if half is None else cast_floats(batch, half))

    def backward(self, loss: torch.Tensor, *, sync: bool) -> None:
        """``engine.backward`` then ``engine.step``: DeepSpeed steps only at its accumulation boundary."""
        self.engine.backward(loss)
        self.engine.step()

    def loss_scale_for(self, accumulation: int) -> float:
        """1: ``engine.backward`` divides by ``gradient_accumulation_steps`` itself."""
        return 1.0

    def step(self) -> None:
        """Nothing: :meth:`backward` already called ``engine.step()``."""

    def save(self, directory: Path) -> None:
        """DeepSpeed's checkpoint (sharded optimizer state per rank) under ``directory/deepspeed``."""
        self.engine.save_checkpoint(str(directory), tag=TAG)

    def load(self, directory: Path) -> None:
        """Restore a DeepSpeed checkpoint written by :meth:`save`."""
        path, _ = self.engine.load_checkpoint(str(directory), tag=TAG)
        if path is None:
            raise UsageError(f"DeepSpeed found no checkpoint in {directory / TAG}.")

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """fp32 master weights gathered to rank 0 (``safe_get_full_fp32_param``; a collective at stage 3), and the
        frozen parameters, which have no master, as :meth:`_frozen_value` finds them."""
        from deepspeed.utils import safe_get_full_fp32_param

        full: dict[int, torch.Tensor] = {}
        for name, p in self._module.named_parameters():
            if id(p) not in full:
                value = safe_get_full_fp32_param(p)
                if value is None and not p.requires_grad:  # frozen: DeepSpeed keeps no fp32 master of it
                    value = self._frozen_value(name, p)
                full[id(p)] = (p if value is None else value).detach().to("cpu", copy=True)
        if not self.ctx.is_main:
            return None
        out = {}
        for key, tensor in self._module.state_dict(keep_vars=True).items():
            out[key] = full[id(tensor)] if id(tensor) in full else tensor.detach().to("cpu", copy=True)
        return out

    def _frozen_value(self, name: str, p: nn.Parameter) -> torch.Tensor | None:
        """A frozen parameter's whole value: the user's own as it came (the engine's copy is rounded to its 16-bit
        dtype, and at stage 3 partitioned), or, in a module the backend built partitioned, gathered from the ranks
        (a collective: every rank calls it for the same parameters) in the engine's dtype. ``None`` on the other
        ranks, and where the engine's tensor is whole already."""
        if self._given_dtypes is not None:  # the same on every rank: no rank gathers alone
            return None if self._frozen is None else self._frozen[name]
        if hasattr(p, "ds_id"):
            from deepspeed.zero import GatheredParameters

            with GatheredParameters([p]):
                return p.data.detach().to("cpu", copy=True)
        return None

    def close(self) -> None:
        """Remove the engine's hooks from the module (``engine.destroy()``: ZeRO's gradient hooks, stage 3's
        gathering hooks) and drop it; undo zero.Init's replacement of ``torch.nn.functional.linear``."""
        failing = sys.exc_info()[1] is not None  # closing after an error: that error is the one to report
        engine, self.engine = getattr(self, "engine", None), None  # None: setup failed before deepspeed.initialize
        try:
            if engine is not None:
                engine.destroy()
                # destroy() leaves the engine's own forward hooks on the module (_create_module_forward_pre_hook,
                # engine.py, 0.19.8): they would keep the engine alive, and at stage 3 its prologue would mark the
                # module's parameters for gathering in the user's next forward, with no process group left
                for name in ("module_forward_pre_hook", "module_forward_post_hook"):
                    handle = getattr(engine, name, None)
                    if handle is not None:
                        handle.remove()
                        setattr(engine, name, None)
        except Exception:
            if not failing:
                raise
        finally:
            if self._linear is not None:
                torch.nn.functional.linear = self._linear
                self._linear = None

    def hand_back(self, state: dict[str, torch.Tensor]) -> None:
        """The user's module holding the trained fp32 master weights in the dtypes it came in: the engine cast it to
        the run's 16-bit dtype in place, and stage 3 left its parameters partitioned, empty outside its hooks."""
        if self._given_dtypes is None:
            return
        module = self._module
        for name, tensor in (*module.named_parameters(), *module.named_buffers()):
            if name in state and name in self._given_dtypes:
                tensor.data = state[name].to(device=tensor.device, dtype=self._given_dtypes[name])
        # Stage 3 replaced each module's parameter dict with one that gathers a partitioned parameter when it is
        # read in a forward (ZeROOrderedDict, runtime/zero/parameter_offload.py, 0.19.8): with the engine gone its
        # gather has no process group to use, and the parameters are whole again.
        for sub in module.modules():
            if isinstance(sub._parameters, OrderedDict):
                sub._parameters = dict(OrderedDict.items(sub._parameters))
                sub.__dict__.pop("_original_parameters", None)
        # Stage 3 also set its own attributes on every parameter (ds_tensor, ds_process_group, all_gather,
        # partition, ...: _convert_to_deepspeed_param, runtime/zero/partition_parameters.py, 0.19.8) and module
        # (ds_id, pre_bwd_fn, a class local to a function, ...: parameter_offload.py): the process group and that
        # class cannot be pickled (torch.save(model) failed), and a second engine took the parameters for its own,
        # already partitioned. Whatever was added since the engine was built goes, but torch's own module fields.
        given = self._given_attributes or {}
        torch_fields = set(vars(torch.nn.Module()))
        for obj in (*module.parameters(), *module.buffers(), *module.modules()):
            for name in set(vars(obj)) - given.get(id(obj), set(vars(obj))) - torch_fields:
                delattr(obj, name)


def _check_nvme(path: str | None) -> None:
    if path is None or path == ds_config_mod.NVME_PATH_PLACEHOLDER or not os.path.isdir(path):
        raise UsageError(f"the plan offloads to NVMe at {path!r}, which is not a directory here.",
                         hint="Pass hardware with --nvme PATH (a directory on a local NVMe drive), or re-plan.")
    if not os.access(path, os.W_OK):
        raise UsageError(f"the NVMe offload directory {path} is not writable.",
                         hint="Choose a directory you can write to on a local NVMe drive.")


def async_io_available() -> bool:
    """Whether DeepSpeed's ``async_io`` op, through which NVMe offload reads and writes
    (``runtime/swap_tensor/``, 0.19.8), can be built here: it needs libaio. Imports DeepSpeed."""
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("AsyncIOBuilder")
    return builder is not None and bool(builder.is_compatible(verbose=False))


def _check_async_io() -> None:
    """Without ``async_io`` DeepSpeed fails deep inside the first swap, so say so before starting."""
    if not async_io_available():
        raise UsageError("the plan offloads to NVMe, and DeepSpeed's async_io op cannot be built here (it needs "
                         "libaio).",
                         hint="Install libaio (apt install libaio-dev; check with `ds_report`), or choose CPU "
                              "offload (deepspeed_stage_3_offload with offload to cpu) instead.")


def _cpu_adam_like(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """``DeepSpeedCPUAdam`` with ``optimizer``'s groups and hyper-parameters (DeepSpeed wants it with optimizer
    offload: ``zero_force_ds_cpu_optimizer``, runtime/zero/config.py)."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    if isinstance(optimizer, DeepSpeedCPUAdam):
        return optimizer
    if not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        raise UsageError(f"optimizer offload runs Adam on the CPU, and the optimizer is {type(optimizer).__name__}.",
                         hint="Use Adam/AdamW (or deepspeed.ops.adam.DeepSpeedCPUAdam), or a strategy without "
                              "optimizer offload.")
    groups = [{k: v for k, v in g.items() if k in ("params", "lr", "betas", "eps", "weight_decay")}
              for g in optimizer.param_groups]
    return DeepSpeedCPUAdam(groups, adamw_mode=isinstance(optimizer, torch.optim.AdamW))
