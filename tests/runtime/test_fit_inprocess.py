"""fit() in one process, and what it says about bad input (no worker processes involved)."""

from __future__ import annotations

import inspect
import io
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

import autoshard
from autoshard.errors import UsageError, UserCodeError
from autoshard.planner import plan_file
from autoshard.runtime import fit
from tests.runtime.regression import batches as _regression_batches
from tests.runtime.regression import mse as _mse


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))




class _Regressor(nn.Module):
    """Takes (x, y), returns the prediction: the batch convention passes both to forward."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _mlp()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_one_process_trains_a_module_in_place_and_cleans_up() -> None:
    model = _Regressor()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = fit(model, _regression_batches() * 5, loss_fn=_mse, epochs=1,
                 optimizer=lambda p: torch.optim.SGD(p, lr=0.05))
    assert result.world_size == 1 and result.plan.strategy == "ddp"
    assert len(result.steps) == 20
    assert result.losses[-1] < result.losses[0] / 4
    assert result.model is model
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert result.state_dict is not None and torch.equal(result.state_dict["net.0.weight"], model.net[0].weight)
    step = result.steps[0]
    assert step.step == 1 and step.samples_per_s > 0 and step.peak_memory_bytes is None
    # Nothing of the run is left behind for the next one.
    assert not torch.distributed.is_initialized()
    assert "RANK" not in os.environ and "WORLD_SIZE" not in os.environ
    json.dumps(result.to_dict())


def test_a_catalog_source_trains_on_its_own_batches() -> None:
    result = fit("tiny-gpt2", max_steps=2, seq_len=16, batch_size=2)
    assert [s.step for s in result.steps] == [1, 2]
    assert result.steps[0].tokens_per_s == pytest.approx(result.steps[0].samples_per_s * 16)
    assert result.model is not None and result.state_dict is not None


def test_a_catalog_source_on_a_cpu_without_batch_size_trains_at_a_small_micro_batch() -> None:
    """The planner's choice, the largest that fits host memory, was 1,024 samples of tiny-gpt2 (12 s a step)."""
    from autoshard.runtime.planning import CPU_EXAMPLE_BATCH

    result = fit("tiny-gpt2", max_steps=1, seq_len=16)
    assert result.plan.micro_batch_size == CPU_EXAMPLE_BATCH
    assert any(f"planned at {CPU_EXAMPLE_BATCH} samples at most" in n for n in result.notes), result.notes


def test_gradient_accumulation_follows_the_plan() -> None:
    model = _Regressor()
    result = fit(model, _regression_batches(8), loss_fn=_mse, epochs=1,
                 plan=_exported(model, gradient_accumulation=2), optimizer="sgd")
    assert len(result.steps) == 4  # 8 micro-batches, 2 per step


def _exported(model: nn.Module, **changes: object) -> plan_file.ExportedPlan:
    from dataclasses import replace

    from autoshard.runtime.planning import model_fingerprint

    base = plan_file.ExportedPlan(
        strategy="ddp", family="ddp", micro_batch_size=4, gradient_accumulation=1, activation_checkpointing=False,
        settings={"bucket_cap_mb": 25.0, "comm_hook": "none", "gradient_as_bucket_view": False,
                  "static_graph": False, "find_unused_parameters": False},
        precision="32-true", optimizer="sgd", seq_len=None, model=model_fingerprint(model, "_Regressor"),
        hardware=plan_file.HardwareFingerprint(gpu=None, gpu_memory_bytes=None, gpus_per_node=1, nodes=1,
                                               device_type="cpu", backend="gloo", nvme_path=None))
    return replace(base, traits=None, **changes)  # type: ignore[arg-type]  # the new strategy's traits


def test_a_plan_for_another_model_is_refused_then_forced(tmp_path: Path) -> None:
    other = _exported(nn.Linear(3, 3))
    path = plan_file.write(other, tmp_path / "plan.json")
    with pytest.raises(UsageError, match="made for something else: it is for model _Regressor") as info:
        fit(_Regressor(), _regression_batches(), loss_fn=_mse, plan=path, max_steps=1)
    assert "force=True" in str(info.value)
    result = fit(_Regressor(), _regression_batches(), loss_fn=_mse, plan=tmp_path, max_steps=1, force=True)
    assert any("force=True" in n for n in result.notes)


def test_a_plan_for_another_world_size_is_refused_even_with_force(tmp_path: Path) -> None:
    from dataclasses import replace

    model = _Regressor()
    plan = _exported(model)
    plan = replace(plan, hardware=replace(plan.hardware, gpus_per_node=4))
    with pytest.raises(UsageError, match="it is for 4 ranks and this run has 1"):
        fit(model, _regression_batches(), loss_fn=_mse, plan=plan, processes=1, max_steps=1, force=True)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"model": 42}, "model must be a torch.nn.Module or a model source"),
    ({"model": "no-such-model"}, "no-such-model"),
    ({"max_steps": 0}, "max_steps must be a positive whole number"),
    ({"epochs": True}, "epochs must be a positive whole number"),
    ({"grad_clip_norm": -1.0}, "grad_clip_norm must be a positive number"),
    ({"grad_clip_norm": "1.0"}, "grad_clip_norm must be a positive number"),
    ({"plan": 3.5}, "plan must be 'auto', a Plan, or a plan.json path"),
    ({"plan": "/nonexistent/plan.json"}, "cannot read /nonexistent/plan.json"),
    ({"data": 7}, "neither a Dataset nor an iterable of batches"),
    ({"data": []}, "data yielded no batch"),
])
def test_bad_arguments_get_one_clear_error(kwargs: dict[str, object], message: str) -> None:
    args = {"model": _Regressor(), "data": _regression_batches(), "loss_fn": _mse, "max_steps": 1, **kwargs}
    with pytest.raises(autoshard.errors.AutoshardError, match=message):
        fit(args.pop("model"), args.pop("data"), **args)  # type: ignore[arg-type]


def test_data_the_model_cannot_take_says_what_arrived() -> None:
    data = [{"pixels": torch.randn(4, 8)}]
    with pytest.raises(UserCodeError, match=r"the model failed on the first batch \(\{'pixels': tensor\(4, 8\) "
                                            r"float32\}\)"):
        fit(_mlp(), data, max_steps=1, plan=_exported(_mlp()))


def test_a_loss_that_cannot_take_the_output_says_what_arrived() -> None:
    def bad_loss(output: torch.Tensor, batch: object) -> torch.Tensor:
        return nn.functional.cross_entropy(output, torch.zeros(3, dtype=torch.long))

    with pytest.raises(UserCodeError, match=r"your loss_fn failed on the first batch: .*The model returned "
                                            r"tensor\(4, 1\) float32") as info:
        fit(_Regressor(), _regression_batches(), loss_fn=bad_loss, max_steps=1, plan=_exported(_Regressor()))
    # the user gave loss_fn: the hint points at its targets, not at passing one (a probe found "Pass loss_fn")
    assert "Pass loss_fn" not in str(info.value.hint) and "targets" in str(info.value.hint)
    assert ".." not in str(info.value)


def test_an_optimizer_factory_that_raises_is_said_to_be_the_users() -> None:
    """It came out as a bare ValueError (with processes, a WorkerError); a factory returning the wrong type was a
    UserCodeError already (the bad-input probe)."""
    def factory(params: object) -> torch.optim.Optimizer:
        raise ValueError("my optimizer factory is broken")

    with pytest.raises(UserCodeError, match=r"the optimizer factory \(optimizer=\) raised ValueError at "
                                            r".*test_fit_inprocess\.py:\d+: my optimizer factory is broken"):
        fit(_Regressor(), _regression_batches(), loss_fn=_mse, optimizer=factory, max_steps=1,
            plan=_exported(_Regressor()))


def test_a_factory_of_two_optimizers_is_said_to_need_a_loop_of_ones_own() -> None:
    """A multi-model probe's GAN: a factory returning [Adam(G), Adam(D)] got "returned list" and no word on why."""
    def two(params: object) -> list[torch.optim.Optimizer]:
        ps = list(params)  # type: ignore[call-overload]
        return [torch.optim.SGD(ps[:1], lr=0.1), torch.optim.SGD(ps[1:], lr=0.1)]

    with pytest.raises(UserCodeError, match="the optimizer factory returned 2 optimizers: fit.. steps one optimizer "
                                            "on one loss") as info:
        fit(_Regressor(), _regression_batches(), loss_fn=_mse, optimizer=two, max_steps=1,
            plan=_exported(_Regressor()))
    assert "GAN" in (info.value.hint or "") and "parameter groups" in (info.value.hint or "")


def test_a_deepspeed_plan_without_deepspeed_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed now raises ImportError
    model = _Regressor()
    plan = _exported(model, strategy="deepspeed_stage_2", family="deepspeed", settings={})
    with pytest.raises(UsageError, match="the plan uses DeepSpeed, which cannot be imported") as info:
        fit(model, _regression_batches(), loss_fn=_mse, plan=plan, max_steps=1)
    assert "pip install deepspeed" in str(info.value)
    assert not torch.distributed.is_initialized()


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: None, "not a directory here"),
    (lambda tmp: str(tmp / "missing"), "not a directory here"),
])
def test_a_missing_nvme_directory_is_refused(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    from autoshard.strategies.deepspeed.backend import _check_nvme

    with pytest.raises(UsageError, match=message):
        _check_nvme(make(tmp_path))


def test_an_unwritable_nvme_directory_is_refused(tmp_path: Path) -> None:
    from autoshard.strategies.deepspeed.backend import _check_nvme

    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # running as root: permissions do not bind
        pytest.skip("the test user can write anywhere (root)")
    with pytest.raises(UsageError, match="not writable"):
        _check_nvme(str(locked))


def test_spawning_from_pytest_is_refused_with_a_way_out(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match="cannot be started again as a worker") as info:
        fit(_Regressor(), _regression_batches(), loss_fn=_mse, processes=2, max_steps=1)
    assert "torchrun" in str(info.value)
    assert "planning" not in capsys.readouterr().err  # refused before planning (a notebook saw it after)


class _WhoCalls(_Regressor):
    """Records whether DistributedDataParallel's forward is on the stack when the module runs."""

    def __init__(self) -> None:
        super().__init__()
        self.wrapped: list[bool] = []

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ddp_file = os.path.join("parallel", "distributed.py")
        self.wrapped.append(any(f.function == "forward" and f.filename.endswith(ddp_file) for f in inspect.stack(0)))
        return super().forward(x, y)


def test_one_device_trains_the_module_without_a_ddp_wrapper() -> None:
    """One rank: no DistributedDataParallel (its buckets would be a second copy of the gradients), as the plan's
    memory says and as accelerate, the HF Trainer and Lightning train one device."""
    model = _WhoCalls()
    result = fit(model, _regression_batches(), loss_fn=_mse, epochs=1, plan=_exported(model), optimizer="sgd")
    assert result.plan.strategy == "ddp" and result.world_size == 1
    assert model.wrapped and not any(model.wrapped)


@pytest.mark.parametrize("hook", ["fp16_compress", "powersgd"])
def test_ddp_comm_hooks_from_the_plan_train(hook: str) -> None:
    """On one device the hook takes no part (nothing to reduce) and the plan still trains; the hooks themselves
    run in the 2-process tests (tests/strategies/test_ddp.py)."""
    model = _Regressor()
    settings = {**_exported(model).settings, "comm_hook": hook, "matrix_approximation_rank": 1,
                "start_powerSGD_iter": 2}
    result = fit(model, _regression_batches() * 3, loss_fn=_mse, epochs=1, optimizer=lambda p: torch.optim.SGD(
        p, lr=0.05), plan=_exported(model, settings=settings))
    assert len(result.steps) == 12 and result.losses[-1] < result.losses[0]


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed", "bf16-true"])
def test_a_module_you_built_plans_and_trains_in_every_precision(precision: str) -> None:
    # Planning traces a bf16-true build of the module; a fake copy could not be cast afterwards (it raised
    # "Couldn't swap Embedding.weight"), so the copy is made in the 16-bit dtype directly.
    from autoshard.models import load_source

    source = load_source("tiny-gpt2")
    torch.manual_seed(0)
    model = source.build()
    batches = [source.batch(2, seq_len=16) for _ in range(2)]
    result = fit(model, batches, loss_fn=source.loss_fn, max_steps=2, batch_size=2, precision=precision,
                 strategy="ddp")
    assert result.plan.precision == precision and len(result.losses) == 2


def test_a_module_source_profiles_like_the_catalog_entry_in_bf16_true() -> None:
    from autoshard.models import load_source
    from autoshard.runtime.planning import module_source

    source = load_source("tiny-gpt2")
    wrapped = module_source(source.build(), source.batch(2, seq_len=16), loss_fn=source.loss_fn)
    mine = autoshard.profile(wrapped, batch_size=2, precision="bf16-true")  # the example batch is 16 tokens long
    catalog = autoshard.profile("tiny-gpt2", batch_size=2, seq_len=16, precision="bf16-true")
    assert mine.parameter_bytes == catalog.parameter_bytes == 2 * catalog.parameter_count
    assert mine.peak_bytes == catalog.peak_bytes


def test_a_zero3_run_leaves_torch_linear_as_it_found_it() -> None:
    """deepspeed.zero.Init replaces torch.nn.functional.linear process-wide and leaves it so; a later trace in the
    same process then counted DeepSpeed's linear (124 more kernels for tiny-llama) and recommended another
    strategy. fit() puts torch's back when the run ends."""
    import torch.nn.functional as F

    pytest.importorskip("deepspeed")
    linear = F.linear
    planned = autoshard.recommend("tiny-gpt2", hardware=autoshard.detect_hardware(gpus=1), batch_size=2, seq_len=16,
                                  precision="32-true", strategies=["deepspeed_stage_3"])
    result = autoshard.fit("tiny-gpt2", plan=planned, max_steps=1)
    assert result.plan.strategy == "deepspeed_stage_3"
    assert F.linear is linear


_FIT_AS_A_WORKER = """
import torch
import autoshard
autoshard.fit(torch.nn.Linear(2, 1), [(torch.zeros(4, 2), torch.zeros(4, 1))],
              loss_fn=torch.nn.functional.mse_loss, max_steps=1)
"""


@pytest.mark.parametrize("launcher_is_parent", [True, False], ids=["launcher-alive", "launcher-gone"])
def test_a_fit_worker_whose_launcher_is_gone_leaves_without_training(tmp_path, launcher_is_parent) -> None:
    """fit()'s workers leave when the process that started them is gone (killed, out of memory): here one that
    finds, at its start, that its parent is not the launcher the environment names."""
    import subprocess

    from autoshard.runtime.supervisor import LAUNCHER_PID_VAR, RUN_DIR_VAR

    launcher = os.getpid() if launcher_is_parent else os.getpid() + 1  # the worker's parent is this process
    env = {**os.environ, RUN_DIR_VAR: str(tmp_path), LAUNCHER_PID_VAR: str(launcher), "RANK": "0",
           "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    done = subprocess.run([sys.executable, "-c", _FIT_AS_A_WORKER], env=env, capture_output=True, timeout=120,
                          check=False)
    assert done.returncode == 1
    # Alive, the worker goes on to read the plan its launcher should have written, and reports it missing.
    assert (tmp_path / "error-rank0.json").exists() is launcher_is_parent, done.stderr.decode()[-2000:]


_STDOUT_IS_DATA = """
import json, torch
import autoshard
result = autoshard.fit(torch.nn.Linear(2, 1), [(torch.zeros(4, 2), torch.zeros(4, 1))], strategy="deepspeed_stage_1",
                       loss_fn=torch.nn.functional.mse_loss, max_steps=1, progress=False)
print(json.dumps({"steps": len(result.losses)}))
"""


def test_deepspeed_prints_nothing_on_the_users_stdout() -> None:
    # "DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully" led stdout, even with progress=False
    import subprocess

    pytest.importorskip("deepspeed")
    done = subprocess.run([sys.executable, "-c", _STDOUT_IS_DATA], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"steps": 1}, done.stdout


def _loader(batch_size: int) -> torch.utils.data.DataLoader:
    data = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
    return torch.utils.data.DataLoader(data, batch_size=batch_size)


def test_a_batch_size_other_than_the_loaders_is_refused_before_planning() -> None:
    """The DataLoader's batches are trained as they come: a plan for batch_size=16 would have priced a step the
    run never takes (it planned 16 and trained 8)."""
    model = _Regressor()
    with pytest.raises(UsageError, match="batch_size=16, and the DataLoader batches 8 samples"):
        fit(model, _loader(8), loss_fn=_mse, batch_size=16, max_steps=1)
    result = fit(model, _loader(8), loss_fn=_mse, batch_size=8, max_steps=1)
    assert result.plan.micro_batch_size == 8


def test_a_plan_for_another_micro_batch_than_the_loaders_is_refused_then_forced() -> None:
    model = _Regressor()
    with pytest.raises(UsageError, match="batches 8 samples, and the plan .* micro-batch 4") as info:
        fit(model, _loader(8), loss_fn=_mse, plan=_exported(model), max_steps=1)
    assert "force=True" in str(info.value.hint)
    result = fit(model, _loader(8), loss_fn=_mse, plan=_exported(model), max_steps=1, force=True)
    assert any("the DataLoader's 8 samples per batch" in n for n in result.notes), result.notes


def test_a_dataset_smaller_than_the_largest_micro_batch_trains_at_its_size() -> None:
    """The planner chose the largest micro-batch that fits (1,024 here), the sampler dropped the incomplete batch,
    and fit() returned after 0 steps without a word. The micro-batch is now at most each rank's samples."""
    data = torch.utils.data.TensorDataset(torch.randn(24, 8), torch.randn(24, 1))
    result = fit(_Regressor(), data, loss_fn=_mse, max_steps=2)
    assert result.plan.micro_batch_size == 24 and len(result.steps) == 2
    # Chosen for memory and speed, it also decides what training learns: the run says so.
    assert any(n.startswith("Micro-batch 24 is the planner's choice (each rank's whole share of the data)")
               for n in result.notes), result.notes
    assert not any("planner's choice" in n for n in fit(_Regressor(), data, loss_fn=_mse, max_steps=1,
                                                          batch_size=8).notes)
    with pytest.raises(UsageError, match="batch_size=32, and each rank's share of the data is 24 samples"):
        fit(_Regressor(), data, loss_fn=_mse, max_steps=2, batch_size=32)


def test_a_plan_whose_micro_batch_exceeds_the_data_is_refused_not_trained_for_zero_steps() -> None:
    model = _Regressor()
    data = torch.utils.data.TensorDataset(torch.randn(3, 8), torch.randn(3, 1))
    with pytest.raises(UsageError, match=r"the plan \(the given plan\) trains micro-batches of 4, and each rank's "
                                         "share of the data is 3 samples: no whole micro-batch"):
        fit(model, data, loss_fn=_mse, plan=_exported(model), max_steps=1)


# -- global_batch_size: gradient accumulation asked for in fit() ------------------------------------------------


def _fixed_loader(batch_size: int, samples: int = 32) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(samples, 8, generator=g)
    data = torch.utils.data.TensorDataset(x, x @ torch.randn(8, 1, generator=g))
    return torch.utils.data.DataLoader(data, batch_size=batch_size)


def test_global_batch_size_accumulates_micro_batches_into_the_step_of_one_large_batch() -> None:
    """fit() had no way to ask for gradient accumulation but a plan made elsewhere: global_batch_size=16 over
    micro-batches of 4 steps once per 4 micro-batches, with the weights one batch of 16 gives."""
    sgd = lambda p: torch.optim.SGD(p, lr=0.05)  # noqa: E731
    accumulated = fit(_Regressor(), _fixed_loader(4), loss_fn=_mse, global_batch_size=16, optimizer=sgd)
    whole = fit(_Regressor(), _fixed_loader(16), loss_fn=_mse, optimizer=sgd)
    assert (accumulated.plan.micro_batch_size, accumulated.plan.gradient_accumulation) == (4, 4)
    assert (whole.plan.micro_batch_size, whole.plan.gradient_accumulation) == (16, 1)
    assert len(accumulated.steps) == len(whole.steps) == 2
    assert accumulated.losses == pytest.approx(whole.losses, rel=1e-5)
    assert accumulated.state_dict is not None and whole.state_dict is not None
    for name, tensor in whole.state_dict.items():
        torch.testing.assert_close(accumulated.state_dict[name], tensor, rtol=1e-5, atol=1e-6)
    assert any("micro-batch 4 × 4 accumulated (global batch 16)" in n for n in accumulated.notes)
    assert accumulated.steps[0].samples_per_s == pytest.approx(16 / accumulated.steps[0].step_time_s)


def test_global_batch_size_over_a_dataset_plans_the_micro_batch_and_the_accumulation() -> None:
    data = _fixed_loader(1, samples=64).dataset
    result = fit(_Regressor(), data, loss_fn=_mse, global_batch_size=64, batch_size=16)
    assert (result.plan.micro_batch_size, result.plan.gradient_accumulation, len(result.steps)) == (16, 4, 1)
    planned = fit(_Regressor(), data, loss_fn=_mse, global_batch_size=48, max_steps=1)
    assert planned.plan.micro_batch_size * planned.plan.gradient_accumulation == 48
    # More than the data holds is fine with max_steps: the steps run on over the epochs.
    longer = fit(_Regressor(), data, loss_fn=_mse, global_batch_size=128, batch_size=32, max_steps=2)
    assert [s.step for s in longer.steps] == [1, 2] and longer.steps[-1].epoch == 3


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"global_batch_size": 20}, r"global_batch_size=20 is 20 samples per rank per optimizer step, not a whole "
                                r"number of micro-batches of 8"),
    ({"global_batch_size": 64}, r"global_batch_size=64 is 64 samples per rank .* share of the data is 32 samples"),
    ({"global_batch_size": 96, "epochs": 2}, r"share of the data is 32 samples × 2 epochs"),
    ({"global_batch_size": 9, "processes": 2}, r"global_batch_size=9 does not divide among the 2 ranks"),
    ({"global_batch_size": 0}, r"global_batch_size must be a positive whole number"),
])
def test_a_global_batch_size_that_cannot_train_is_refused_before_planning(kwargs: dict, message: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from autoshard.planner import machine

    def never(*args: object, **kw: object) -> None:
        raise AssertionError("planned before refusing")

    monkeypatch.setattr(machine, "plan_for", never)
    with pytest.raises(UsageError, match=message):
        fit(_Regressor(), _fixed_loader(8), loss_fn=_mse, **kwargs)


def test_a_list_of_batches_against_the_global_batch_is_refused_not_read_as_samples() -> None:
    """A list's elements may be batches or single samples: a global batch that clashes with the first one's rows
    sends the list to be read as samples, unless the first one runs as a batch; here each would also run as a
    sample of a 3-D batch (the MLP broadcasts), which must not be how it is read."""
    with pytest.raises(UsageError, match=r"global_batch_size=20 is 20 samples per rank per optimizer step, not a "
                                         r"whole number of micro-batches of 8"):
        fit(_Regressor(), list(_fixed_loader(8)), loss_fn=_mse, global_batch_size=20)


def _samples() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    yield from _fixed_loader(4)


@pytest.mark.parametrize(("kwargs", "message"), [  # met in a worker, after planning, or never, before
    ({"seed": None}, r"seed must be a whole number from 0 to 2\*\*32 - 1, but got None"),
    ({"seed": -1}, r"seed must be a whole number from 0 to 2\*\*32 - 1, but got -1"),  # as tune() refuses it
    ({"timeout_s": 0}, r"timeout_s must be a positive number of seconds"),
    ({"progress": "no"}, r"progress must be True or False, but got 'no'"),
    ({"consolidate": "no"}, r"consolidate must be True or False"),
    ({"loss_fn": "mse"}, r"loss_fn must be a function"),
    ({"checkpointing": autoshard.Checkpointing(dir=123)}, r"checkpointing.dir must be a path, but got 123"),
    ({"optimizer": 3}, r"optimizer must be a name .* but got 3"),
    ({"data": "generator", "epochs": 2}, r"one-pass iterator \(a generator\), and epochs=2"),
])
def test_other_bad_arguments_are_refused_before_planning(kwargs: dict, message: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from autoshard.planner import machine

    def never(*args: object, **kw: object) -> None:
        raise AssertionError("planned before refusing")

    monkeypatch.setattr(machine, "plan_for", never)
    given = {"loss_fn": _mse, "data": _fixed_loader(8), **kwargs}
    if isinstance(given["data"], str):
        given["data"] = _samples()
    with pytest.raises(UsageError, match=message):
        fit(_Regressor(), **given)


def test_a_global_batch_size_other_than_the_plans_is_refused() -> None:
    model = _Regressor()
    with pytest.raises(UsageError, match=r"global_batch_size=16, and the plan \(the given plan\) trains 8 samples "
                                         r"per optimizer step \(micro-batch 4 × 2 accumulated × 1 rank"):
        fit(model, _fixed_loader(4), loss_fn=_mse, plan=_exported(model, gradient_accumulation=2),
            global_batch_size=16)
    result = fit(model, _fixed_loader(4), loss_fn=_mse, plan=_exported(model, gradient_accumulation=2),
                 global_batch_size=8, optimizer="sgd")
    assert len(result.steps) == 4


def test_a_plan_accumulating_more_micro_batches_than_the_epochs_hold_is_refused() -> None:
    model = _Regressor()
    with pytest.raises(UsageError, match=r"holds 2 micro-batch\(es\) of 4 in 1 epoch\(s\), and an optimizer step "
                                         "accumulates 4: nothing would train"):
        fit(model, _fixed_loader(4, samples=8), loss_fn=_mse, plan=_exported(model, gradient_accumulation=4))
    result = fit(model, _fixed_loader(4, samples=8), loss_fn=_mse, plan=_exported(model, gradient_accumulation=4),
                 epochs=2, optimizer="sgd")
    assert len(result.steps) == 1


def test_a_model_with_batch_norm_plans_and_trains() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    result = fit(model, _fixed_loader(8), loss_fn=nn.functional.mse_loss, max_steps=2)
    assert len(result.steps) == 2 and result.plan.micro_batch_size == 8
    assert model[1].num_batches_tracked.item() == 2


@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD])
def test_an_optimizer_instance_is_rebuilt_with_its_hyper_parameters(cls: type) -> None:
    """torch's AdamW keeps decoupled_weight_decay in its defaults and refuses it as an argument: an AdamW instance
    failed with a TypeError where it was rebuilt over the parameters."""
    kwargs = {"lr": 0.02, "weight_decay": 0.1} | ({"momentum": 0.9} if cls is torch.optim.SGD else {})
    given = _Regressor()
    instance = fit(given, _fixed_loader(4), loss_fn=_mse, max_steps=3, optimizer=cls(given.parameters(), **kwargs))
    factory = fit(_Regressor(), _fixed_loader(4), loss_fn=_mse, max_steps=3,
                  optimizer=lambda params: cls(params, **kwargs))
    assert [s.lr for s in instance.steps] == [0.02] * 3
    assert instance.losses == pytest.approx(factory.losses, rel=1e-6)
    assert instance.state_dict is not None and factory.state_dict is not None
    for name, tensor in factory.state_dict.items():
        torch.testing.assert_close(instance.state_dict[name], tensor)


def test_a_dataloader_giving_some_rank_no_batch_is_refused_before_any_process_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from autoshard.runtime import workers

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("workers started")

    monkeypatch.setattr(workers, "spawn", never)
    with pytest.raises(UsageError, match="the DataLoader's 32 samples give each of the 8 ranks no whole batch of 8"):
        fit(_Regressor(), _fixed_loader(8), loss_fn=_mse, processes=8, max_steps=1)


def test_progress_says_the_plan_then_every_log_every_steps_and_nothing_when_off(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A run of hours said nothing until it returned."""
    result = fit(_Regressor(), _fixed_loader(4), loss_fn=_mse, global_batch_size=8, log_every=2)
    planning, *lines = capsys.readouterr().err.splitlines()
    assert planning == "autoshard: planning _Regressor for 1 cpu rank(s) (tracing a training step on fake tensors)"
    assert lines[0] == ("autoshard: training ddp on 1 cpu rank(s), micro-batch 4 × 2 accumulated (global batch 8), "
                        "32-true, to step 4")
    assert [line.split("  ")[0] for line in lines[1:3]] == ["autoshard: step 2/4", "autoshard: step 4/4"]
    assert f"loss {(result.losses[2] + result.losses[3]) / 2:.4g}" in lines[2]
    assert "  ETA " in lines[1] and "ETA" not in lines[2]  # the steps left at the run's pace so far
    assert re.fullmatch(rf"autoshard: done: 4 step\(s\) in \d+:\d\d, last loss {result.losses[-1]:.4g}", lines[3])
    assert len(lines) == 4
    fit(_Regressor(), _fixed_loader(4), loss_fn=_mse, max_steps=2, progress=False)
    assert capsys.readouterr().err == ""


def test_an_incomplete_last_accumulation_is_said() -> None:
    # a probe: 100 samples at micro-batch 8 x 5 accumulated, epochs=1: 2 steps of 80 samples, the 20 left unsaid
    # (here a Dataset: the 4 that fill no micro-batch have their own note, and 2 whole micro-batches are left)
    data = torch.utils.data.TensorDataset(torch.randn(100, 8), torch.randn(100, 1))
    result = fit(_Regressor(), data, loss_fn=_mse, batch_size=8, global_batch_size=40, epochs=1, progress=False)
    assert len(result.losses) == 2
    [said] = [n for n in result.notes if "incomplete accumulation" in n]
    assert said.startswith("data: the last 2 micro-batch(es) (16 sample(s) on each rank) made an incomplete "
                           "accumulation of 5 when the data ended, and were not stepped")
    whole = fit(_Regressor(), data, loss_fn=_mse, batch_size=10, global_batch_size=50, epochs=1, progress=False)
    assert len(whole.losses) == 2 and not any("incomplete accumulation" in n for n in whole.notes)


def test_progress_says_each_checkpoint_and_the_last_at_the_end(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # a probe: checkpoints were written without a word, and nothing said where the run had left its last one
    result = fit(_Regressor(), _fixed_loader(4), loss_fn=_mse, max_steps=4, log_every=4,
                 checkpointing=autoshard.Checkpointing(dir=tmp_path / "ck", every=2))
    lines = [line.removeprefix("autoshard: ") for line in capsys.readouterr().err.splitlines()]
    saved = [line for line in lines if line.startswith("checkpoint at step")]
    assert saved == [f"checkpoint at step {n}: {tmp_path / 'ck' / f'step-{n:08d}'}" for n in (2, 4)]
    assert lines[-1].endswith(f"; last checkpoint {result.last_checkpoint}") and lines[-1].startswith("done: 4 ")


def test_progress_lines_keep_their_log_every_steps_past_a_scoring(capsys: pytest.CaptureFixture[str]) -> None:
    # a probe's log_every=10, eval_every=15 printed steps 10, 15, 25, 30, 40: the count restarted at each scoring
    fit(_Regressor(), _fixed_loader(4), loss_fn=_mse, max_steps=40, log_every=10, eval_data=_fixed_loader(4),
        eval_every=15)
    lines = capsys.readouterr().err.splitlines()
    said = [line.split("  ")[0].removeprefix("autoshard: step ") for line in lines if line.startswith("autoshard: step")]
    assert said == ["10/40", "15/40", "20/40", "30/40", "40/40"]


@pytest.mark.parametrize("strategy", ["deepspeed_stage_2", "deepspeed_stage_3"])
def test_a_module_trained_by_deepspeed_in_this_process_is_handed_back_plain(strategy: str) -> None:
    """After fit() in one process the user's module was DeepSpeed's: cast to bf16 (ZeRO-1/2), or partitioned with
    its parameters empty outside hooks that need the destroyed process group (ZeRO-3: "DeepSpeed backend not
    set"), its gradient hooks still on. It is handed back as it came, fp32, holding the trained master weights."""
    pytest.importorskip("deepspeed")
    linear = nn.functional.linear
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    result = fit(model, _fixed_loader(8), loss_fn=nn.functional.mse_loss, max_steps=2, strategy=strategy,
                 precision="bf16-mixed", progress=False)
    # The engine's zero.Init over a module built without it replaced torch's linear too, and left it replaced.
    assert nn.functional.linear is linear
    assert result.model is model and result.state_dict is not None
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32 and torch.equal(p.detach(), result.state_dict[name]), name
    x, y = next(iter(_fixed_loader(8)))
    nn.functional.mse_loss(model(x), y).backward()  # plain torch from here: no DeepSpeed hook runs
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert all(p.grad is not None for p in model.parameters())
    # ... with none of the engine's attributes: ZeRO-3 left ds_process_group on each parameter and a class local to a
    # function on each module, so torch.save(model) failed, and a second fit() met parameters partitioned already
    assert not [a for t in (*model.parameters(), *model.modules()) for a in vars(t) if a.startswith("ds_")]
    torch.save(model, io.BytesIO())
    again = fit(model, _fixed_loader(8), loss_fn=nn.functional.mse_loss, max_steps=1, strategy=strategy,
                precision="bf16-mixed", progress=False)
    assert again.model is model and len(again.steps) == 1


# -- eval_data: held-out loss during training -----------------------------------------------------------------


def _held_out() -> torch.utils.data.TensorDataset:
    return _fixed_loader(8, samples=24).dataset  # the same task as _fixed_loader's: a held-out draw of it


def test_eval_data_is_scored_every_eval_every_steps_and_at_the_end_as_the_model_scores_it() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 1))
    result = fit(model, _fixed_loader(4), loss_fn=nn.functional.mse_loss, eval_data=_held_out(), eval_every=3,
                 epochs=1, optimizer=lambda p: torch.optim.SGD(p, lr=0.05), batch_size=4, progress=False)
    assert [(e.step, e.batches) for e in result.evals] == [(3, 6), (6, 6), (8, 6)]  # 24 samples in batches of 4
    x, y = _held_out().tensors
    model.eval()
    with torch.no_grad():  # the last scoring is the trained model's, dropout off
        assert result.evals[-1].loss == pytest.approx(nn.functional.mse_loss(model(x), y).item(), rel=1e-6)
    assert json.loads(json.dumps(result.to_dict()))["evals"][0]["step"] == 3
    assert model.training is False  # as the test left it; fit() restored training mode after each scoring


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"eval_every": 2}, "eval_every= says how often to score eval_data, and no eval_data was given"),
    ({"eval_every": 0, "eval_data": [(torch.ones(4, 8), torch.ones(4, 1))]}, "eval_every must be a positive whole"),
    ({"eval_data": 3}, "^eval_data is an int, which is neither a Dataset nor an iterable"),
    ({"eval_data": (b for b in [(torch.ones(4, 8), torch.ones(4, 1))])}, "eval_data is a one-pass iterator"),
])
def test_eval_data_that_cannot_be_scored_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        fit(_Regressor(), _fixed_loader(4), loss_fn=_mse, max_steps=1, progress=False, **kwargs)


def test_a_run_ending_with_its_epochs_writes_its_last_checkpoint(tmp_path: Path) -> None:
    """The run saved at the end only when max_steps ended it: running out of data (epochs=, the usual way to
    train) returned without the checkpoint Checkpointing(dir=...) promises."""
    result = fit(_Regressor(), _fixed_loader(8), loss_fn=_mse, epochs=2, progress=False,
                 checkpointing=autoshard.Checkpointing(dir=tmp_path))
    assert len(result.steps) == 8 and result.last_checkpoint == str(tmp_path / "step-00000008")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000008"]


def test_a_second_run_into_a_checkpoint_dir_without_resume_says_what_it_does_to_the_first_runs(
        tmp_path: Path) -> None:
    """Running a training script twice replaced the first run's step-00000008 without a word, and left its other
    checkpoints for a later resume=True to pick."""
    kwargs = {"loss_fn": _mse, "max_steps": 2, "progress": False,
              "checkpointing": autoshard.Checkpointing(dir=tmp_path)}
    first = fit(_Regressor(), _fixed_loader(8), **kwargs)  # type: ignore[arg-type]
    assert not any("earlier run" in n for n in first.notes)
    second = fit(_Regressor(), _fixed_loader(8), **kwargs)  # type: ignore[arg-type]
    assert second.resumed_from is None and second.steps[0].step == 1
    assert any(n.startswith(f"{tmp_path} holds an earlier run's checkpoints (the newest step-00000002)")
               and "resume=True" in n for n in second.notes), second.notes


def test_a_module_fsdp2_sharded_in_this_process_is_refused_with_how_to_train_it_again() -> None:
    """The second fit() met FSDP2's refusal to deepcopy, reported as an error in the user's model(). A one-process
    run hands the module back plain (tests/runtime/test_fit_gives_blocks_back.py) unless consolidate=False."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    result = fit(model, _fixed_loader(8), loss_fn=nn.functional.mse_loss, max_steps=1, strategy="fsdp",
                 progress=False, consolidate=False)
    with pytest.raises(UsageError, match="model is an FSDP2-sharded FSDPSequential: a fit\\(\\) in this process"):
        fit(model, _fixed_loader(8), loss_fn=nn.functional.mse_loss, max_steps=1, strategy="fsdp", progress=False)
    fresh = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    assert result.state_dict is None
    fresh.load_state_dict({k: v.full_tensor() for k, v in model.state_dict().items()})  # the hint's way back
    again = fit(fresh, _fixed_loader(8), loss_fn=nn.functional.mse_loss, max_steps=1, strategy="fsdp",
                progress=False)
    assert len(again.steps) == 1


def test_a_loader_without_automatic_batching_over_single_samples_is_refused_before_tracing() -> None:
    """DataLoader(batch_size=None) yields each item as a batch (torch's meaning, which fit() now keeps: its dataset
    was batched at the planned micro-batch instead). Items that are single samples ([8] and [1]) are refused before
    the trace, which failed blamed on the user's code."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x @ torch.randn(8, 1, generator=g)),
                                         batch_size=None)
    with pytest.raises(UsageError, match=r"^batch_size=4, and the first item of the DataLoader \(batch_size=None: "
                                         r"each item a batch\) is no batch"):
        fit(nn.Linear(8, 1), loader, loss_fn=nn.functional.mse_loss, batch_size=4, max_steps=3, progress=False)
    with pytest.raises(UsageError, match=r"^the first item of the DataLoader \(batch_size=None: each item a batch\) "
                                         r"is no batch") as info:
        fit(nn.Linear(8, 1), loader, loss_fn=nn.functional.mse_loss, max_steps=3, progress=False)
    assert "DataLoader(data, batch_size=...)" in (info.value.hint or "")
