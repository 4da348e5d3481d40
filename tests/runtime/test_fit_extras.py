"""fit()'s learning-rate scheduler, checkpoint pruning, ``autoshard.is_worker()``, and a lost peer that is not
blamed on the user's code.

Most tests run fit() in this process (one rank). The others run this file as a user's training script
(``python test_fit_extras.py '<json options>'``, see :func:`_script`) on 2 gloo ranks: started by fit() itself
(the scheduler factory must exist on every rank; ``is_worker()`` as each process sees it), or started here with
the variables torchrun sets, so that the surviving rank's own exception can be looked at.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import autoshard
from autoshard.errors import UsageError, UserCodeError
from autoshard.planner import plan_file
from autoshard.runtime import Checkpointing, checkpoint, fit, supervisor
from autoshard.runtime.loop import lost_peer
from tests.runtime.regression import batches as _batches
from tests.runtime.regression import mse as _mse

REPO = Path(__file__).resolve().parents[2]
BASE_LR = 0.1


def _lambda(factors: list[float]) -> Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]:
    """A schedule: ``BASE_LR * factors[s]`` for optimizer step ``s`` (0-based), the last factor after that."""
    return lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: factors[min(s, len(factors) - 1)])


FACTORS = [1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125]


class _Regressor(nn.Module):
    """Takes (x, y), returns the prediction: the batch convention passes both to forward."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(x)




def _sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=BASE_LR)


def _plan(model: nn.Module, *, strategy: str = "ddp", world_size: int = 1, accumulation: int = 1
          ) -> plan_file.ExportedPlan:
    """The planner's plan for ``strategy`` on ``world_size`` CPU ranks, micro-batch 4, with ``accumulation``."""
    from autoshard.runtime.planning import module_source

    planned = autoshard.recommend(module_source(model, _batches(1)[0], loss_fn=_mse),
                                  hardware=autoshard.detect_hardware(gpus=world_size), batch_size=4,
                                  precision="32-true", strategies=[strategy])  # planned for adamw: see the report on sgd
    return replace(plan_file.from_plan(planned), gradient_accumulation=accumulation)


# -- the learning-rate scheduler ----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed_stage_2"])
def test_the_scheduler_steps_once_per_optimizer_step_and_drives_the_optimizer_that_steps(strategy: str) -> None:
    # 8 micro-batches, 2 per optimizer step: 4 steps. Stepped per micro-batch, step 2 would already be at 0.25.
    model = _Regressor()
    plan = _plan(model, strategy=strategy, accumulation=2)
    schedule = _lambda([1.0, 0.5, 0.0])
    four = fit(model, _batches(8), loss_fn=_mse, optimizer=_sgd, plan=plan, lr_scheduler=schedule, epochs=1)
    assert [s.step for s in four.steps] == [1, 2, 3, 4]
    assert [s.lr for s in four.steps] == pytest.approx([BASE_LR, BASE_LR / 2, 0.0, 0.0])
    # Steps 3-4 ran at lr 0: the weights are those after step 2. A scheduler over a copy of the optimizer (or
    # DeepSpeed's wrapper rather than the torch optimizer inside its engine) would leave the real lr at 0.1.
    model = _Regressor()
    two = fit(model, _batches(8), loss_fn=_mse, optimizer=_sgd, plan=plan, lr_scheduler=schedule, max_steps=2)
    assert four.state_dict is not None and two.state_dict is not None
    for name, tensor in two.state_dict.items():
        torch.testing.assert_close(four.state_dict[name], tensor, rtol=0, atol=1e-7)
    assert any(not torch.equal(two.state_dict[k], v) for k, v in _Regressor().state_dict().items())


def test_without_a_scheduler_each_step_records_the_optimizer_lr() -> None:
    model = _Regressor()
    result = fit(model, _batches(3), loss_fn=_mse, optimizer=_sgd, plan=_plan(model), epochs=1)
    assert [s.lr for s in result.steps] == [BASE_LR] * 3
    assert json.loads(json.dumps(result.to_dict()))["steps"][0]["lr"] == BASE_LR


@pytest.mark.parametrize("strategy", ["ddp", "deepspeed_stage_2"])
def test_resume_continues_the_schedule_of_the_uninterrupted_run(strategy: str, tmp_path: Path) -> None:
    model = _Regressor()
    plan = _plan(model, strategy=strategy, accumulation=2)
    kwargs: dict[str, Any] = {"loss_fn": _mse, "optimizer": _sgd, "plan": plan, "lr_scheduler": _lambda(FACTORS),
                              "max_steps": 6}
    full = fit(model, _batches(12), checkpointing=Checkpointing(dir=tmp_path, every=2), **kwargs)
    assert [s.lr for s in full.steps] == pytest.approx([BASE_LR * f for f in FACTORS])
    resumed = fit(_Regressor(), _batches(12), **kwargs,
                  checkpointing=Checkpointing(dir=tmp_path, every=2, resume=tmp_path / "step-00000002"))
    assert [s.step for s in resumed.steps] == [3, 4, 5, 6]
    # Restarted, the schedule would begin again at 0.1; the lr restored without the scheduler's state would stay.
    assert [s.lr for s in resumed.steps] == pytest.approx([s.lr for s in full.steps[2:]], rel=1e-12)
    assert resumed.losses == pytest.approx(full.losses[2:], rel=1e-6)


class _Dropped(_Regressor):
    """With dropout: each step draws from torch's generator, so a resume is exact only where it is restored."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(self.drop(x))


def test_a_resume_with_dropout_and_eval_data_gives_the_uninterrupted_losses(tmp_path: Path) -> None:
    """Scoring eval_data drew from torch's generator (a DataLoader's iterator takes a seed from it), once before
    training and at each evaluation: a resumed run drew the first after the restored state and diverged at its
    first step (a migration probe: dropout and periodic evaluation, the usual script)."""
    from torch.utils.data import DataLoader, TensorDataset

    eval_rows = torch.cat([x for x, _ in _batches(4)]), torch.cat([y for _, y in _batches(4)])
    kwargs: dict[str, Any] = {"loss_fn": _mse, "optimizer": _sgd, "plan": _plan(_Dropped()), "max_steps": 6,
                              "eval_data": DataLoader(TensorDataset(*eval_rows), batch_size=4), "eval_every": 3,
                              "seed": 1}
    full = fit(_Dropped(), _batches(12), checkpointing=Checkpointing(dir=tmp_path, every=2), **kwargs)
    resumed = fit(_Dropped(), _batches(12), **kwargs,
                  checkpointing=Checkpointing(dir=tmp_path, every=2, resume=tmp_path / "step-00000002"))
    assert [s.step for s in resumed.steps] == [3, 4, 5, 6]
    assert resumed.losses == pytest.approx(full.losses[2:], rel=1e-6)
    assert [e.loss for e in resumed.evals] == pytest.approx([e.loss for e in full.evals], rel=1e-6)


def test_resuming_at_max_steps_says_nothing_was_left_to_train_and_scores_eval_data(tmp_path: Path) -> None:
    model = _Regressor()
    first = fit(model, _batches(4), loss_fn=_mse, optimizer=_sgd, plan=_plan(model), max_steps=2,
                checkpointing=Checkpointing(dir=tmp_path), eval_data=_batches(2))
    again = fit(_Regressor(), _batches(4), loss_fn=_mse, optimizer=_sgd, plan=_plan(model), max_steps=2,
                checkpointing=Checkpointing(dir=tmp_path, resume=True), eval_data=_batches(2))
    assert len(again.steps) == 0
    assert any(n.startswith("The checkpoint is at step 2 and max_steps is 2: nothing left to train.")
               for n in again.notes), again.notes
    # The checkpoint's weights are scored as training's end would have (result.evals was empty).
    assert [(e.step, e.loss) for e in again.evals] == [(e.step, pytest.approx(e.loss, rel=1e-6)) for e in first.evals]


def test_resuming_with_a_scheduler_from_a_checkpoint_without_one_is_refused(tmp_path: Path) -> None:
    model = _Regressor()
    fit(model, _batches(2), loss_fn=_mse, optimizer=_sgd, plan=_plan(model), max_steps=1,
        checkpointing=Checkpointing(dir=tmp_path))
    with pytest.raises(UsageError, match="saved without a learning-rate scheduler"):
        fit(_Regressor(), _batches(2), loss_fn=_mse, optimizer=_sgd, plan=_plan(model), max_steps=2,
            checkpointing=Checkpointing(dir=tmp_path, resume=True), lr_scheduler=_lambda(FACTORS))


class _Schedule:
    """A schedule object holding something a checkpoint cannot store without a pickle."""

    def __init__(self) -> None:
        self.generator = torch.Generator()

    def __call__(self, step: int) -> float:
        return 1.0


@pytest.mark.parametrize(("scheduler", "checkpointed", "error", "message"), [
    (3, False, UsageError, "lr_scheduler must be a factory optimizer -> LRScheduler, but got int"),
    (lambda opt: opt, False, UserCodeError, "returned SGD, not a torch.optim.lr_scheduler.LRScheduler"),
    (lambda opt: None, False, UserCodeError, "returned NoneType, not a torch.optim.lr_scheduler.LRScheduler"),
    (lambda opt: 1 / 0, False, UserCodeError, "the lr_scheduler factory raised ZeroDivisionError"),
    (torch.optim.lr_scheduler.ReduceLROnPlateau, False, UsageError, "ReduceLROnPlateau needs one"),
    (lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, _Schedule()), True, UserCodeError,
     "a checkpoint does not store"),
    # a schedule shorter than the run: a bare ValueError in a rank's traceback
    (lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=1), False, UserCodeError,
     r"lr_scheduler's step\(\) after optimizer step 2 raised ValueError: Tried to step 2 times"),
])
def test_a_bad_scheduler_factory_gets_one_clear_error(scheduler: Any, checkpointed: bool, error: type[Exception],
                                                      message: str, tmp_path: Path) -> None:
    model = _Regressor()
    with pytest.raises(error, match=message):
        fit(model, _batches(2), loss_fn=_mse, optimizer=_sgd, plan=_plan(model), max_steps=2,
            lr_scheduler=scheduler, checkpointing=Checkpointing(dir=tmp_path) if checkpointed else None)
    assert not torch.distributed.is_initialized()


@pytest.mark.parametrize(("scheduler", "message"), [
    (torch.optim.lr_scheduler.CosineAnnealingLR, r"lr_scheduler is the class CosineAnnealingLR: fit\(\) takes a factory"),
    (torch.optim.lr_scheduler.ReduceLROnPlateau, "ReduceLROnPlateau needs one"),
])
def test_a_scheduler_class_is_refused_before_planning(scheduler: Any, message: str, no_tracing: None) -> None:
    """Called with the optimizer alone, the class failed in each worker after planning ("the lr_scheduler factory
    raised TypeError: ... missing 1 required positional argument: 'T_max'"; a migration probe)."""
    with pytest.raises(UsageError, match=message):
        fit(_Regressor(), _batches(2), loss_fn=_mse, optimizer=_sgd, max_steps=2, lr_scheduler=scheduler)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed_stage_3"])
def test_parameter_groups_from_a_factory_over_named_parameters_train_as_a_plain_loop(strategy: str) -> None:
    """docs/fit.md's recipe for weight-decay groups: a factory that ignores ``params`` and groups the module's
    ``named_parameters()`` when fit() calls it, after the backend has wrapped or sharded the module in place."""
    def groups(model: nn.Module) -> list[dict[str, Any]]:
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        return [{"params": [p for _, p in named if p.ndim >= 2]},
                {"params": [p for _, p in named if p.ndim < 2], "weight_decay": 0.0}]

    reference = _Regressor()
    optimizer = torch.optim.AdamW(groups(reference), lr=0.05, weight_decay=0.5)
    for x, y in _batches(4):
        optimizer.zero_grad()
        _mse(reference(x, y), (x, y)).backward()
        optimizer.step()
    model = _Regressor()
    result = fit(model, _batches(4), loss_fn=_mse, plan=_plan(model, strategy=strategy), epochs=1,
                 optimizer=lambda params: torch.optim.AdamW(groups(model), lr=0.05, weight_decay=0.5))
    assert result.state_dict is not None
    for name, tensor in reference.state_dict().items():
        torch.testing.assert_close(result.state_dict[name], tensor, rtol=1e-5, atol=1e-6)


def test_an_optimizer_instance_over_some_trainable_parameters_is_refused(no_tracing: None) -> None:
    """The plain loop's way to train only the head, AdamW(model.head.parameters()), trained every parameter: fit()
    rebuilds the optimizer over all that require grad (a fine-tuning probe)."""
    model = _Regressor()
    with pytest.raises(UsageError) as info:
        fit(model, _batches(2), loss_fn=_mse, max_steps=1, optimizer=torch.optim.AdamW(model.net[2].parameters()))
    assert info.value.message.startswith("the optimizer instance holds 2 of the model's 4 trainable parameter "
                                         "tensors") and "net.0.weight, net.0.bias" in info.value.message
    assert "requires_grad_(False)" in (info.value.hint or "")


# -- checkpoint pruning ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("keep", "left"), [
    (None, [1, 2, 3, 4, 5]),
    (1, [5]),
    (2, [4, 5]),
    (10, [1, 2, 3, 4, 5]),
])
def test_keep_last_checkpoints_leaves_the_newest(keep: int | None, left: list[int], tmp_path: Path) -> None:
    model = _Regressor()
    result = fit(model, _batches(5), loss_fn=_mse, optimizer=_sgd, plan=_plan(model), max_steps=5,
                 checkpointing=Checkpointing(dir=tmp_path, every=1, keep_last=keep), lr_scheduler=_lambda(FACTORS))
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint.step_dir(tmp_path, s).name for s in left]
    assert result.last_checkpoint == str(checkpoint.step_dir(tmp_path, 5))
    assert all((checkpoint.step_dir(tmp_path, s) / checkpoint.SCHEDULER_FILE).is_file() for s in left)


def test_a_failed_save_prunes_nothing(tmp_path: Path) -> None:
    # Step 4's save cannot start (a file is in the way of its temporary directory): step 2 must survive.
    (tmp_path / ".step-00000004.partial").write_text("in the way")
    model = _Regressor()
    with pytest.raises(FileExistsError):
        fit(model, _batches(4), loss_fn=_mse, optimizer=_sgd, plan=_plan(model), max_steps=4,
            checkpointing=Checkpointing(dir=tmp_path, every=2, keep_last=1))
    assert checkpoint.latest(tmp_path) == checkpoint.step_dir(tmp_path, 2)


@pytest.mark.parametrize(("complete", "newest", "keep", "left"), [
    ([2, 4, 6], 6, 1, [6]),
    ([2, 4, 6], 6, 2, [4, 6]),
    ([2, 4, 6, 8], 4, 1, [4, 6, 8]),  # resumed from step 2: later checkpoints of the earlier run are not older
])
def test_prune_removes_only_complete_older_checkpoints(complete: list[int], newest: int, keep: int,
                                                       left: list[int], tmp_path: Path) -> None:
    for step in complete:
        checkpoint.step_dir(tmp_path, step).mkdir()
        (checkpoint.step_dir(tmp_path, step) / checkpoint.META_FILE).write_text("{}", encoding="utf-8")
    checkpoint.step_dir(tmp_path, 1).mkdir()  # incomplete: not a checkpoint, not ours to remove
    (tmp_path / ".step-00000003.partial").mkdir()
    checkpoint.prune(tmp_path, checkpoint.step_dir(tmp_path, newest), keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".step-00000003.partial", "step-00000001", *(checkpoint.step_dir(tmp_path, s).name for s in left)])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"keep_last": 0}, r"checkpointing\.keep_last must be a positive whole number, but got 0"),
    ({"keep_last": True}, r"checkpointing\.keep_last must be a positive whole number, but got True"),
    ({"keep_last": 2, "dir": None}, r"checkpointing\.keep_last needs checkpointing\.dir"),
    ({"every": 0}, r"checkpointing\.every must be a positive whole number, but got 0"),
    ({"resume": True, "dir": None}, r"checkpointing\.resume=True needs checkpointing\.dir"),
])
def test_bad_checkpointing_is_refused_before_anything_runs(kwargs: dict[str, Any], message: str,
                                                           tmp_path: Path) -> None:
    args = {"dir": tmp_path, **kwargs}
    with pytest.raises(UsageError, match=message):
        fit(_Regressor(), _batches(2), loss_fn=_mse, max_steps=1, checkpointing=Checkpointing(**args))
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_dir_that_cannot_be_made_is_refused_before_training(tmp_path: Path) -> None:
    """A file named as the directory trained every step and then raised FileExistsError at the save, losing the
    run (the bad-input probe: 40 steps, and with 2 processes a WorkerError)."""
    afile = tmp_path / "afile"
    afile.write_text("mine", encoding="utf-8")
    seen: list[int] = []

    def loss(output: torch.Tensor, batch: Any) -> torch.Tensor:
        seen.append(1)
        return _mse(output, batch)

    for where, message in ((afile, r"checkpointing\.dir .*afile is a file, not a directory"),
                           (afile / "runs" / "1", r"checkpointing\.dir .* cannot be made: .*afile is a file")):
        with pytest.raises(UsageError, match=message):
            fit(_Regressor(), _batches(4), loss_fn=loss, max_steps=2, checkpointing=Checkpointing(dir=where))
    assert seen == [] and afile.read_text(encoding="utf-8") == "mine"


def test_a_resume_path_that_is_not_a_checkpoint_says_what_to_pass(tmp_path: Path) -> None:
    fit(_Regressor(), _batches(4), loss_fn=_mse, max_steps=2, checkpointing=Checkpointing(dir=tmp_path, every=1))
    newest = tmp_path / "step-00000002"
    cases = ((newest / "ddp_state.pt", r"it is a file, and a checkpoint is a directory", str(newest)),
             (tmp_path, r"is not an autoshard checkpoint", f"resume={str(newest)!r}"))
    for resume, message, hinted in cases:
        with pytest.raises(UsageError, match=message) as refused:
            fit(_Regressor(), _batches(4), loss_fn=_mse, max_steps=3, checkpointing=Checkpointing(resume=resume))
        assert hinted in str(refused.value.hint)


def test_a_damaged_checkpoint_is_named_with_the_one_before_it(tmp_path: Path) -> None:
    """A truncated ddp_state.pt gave torch's "PytorchStreamReader failed reading zip archive", naming neither the
    checkpoint resume=True had picked nor what to do (the checkpoint probe)."""
    fit(_Regressor(), _batches(4), loss_fn=_mse, max_steps=2, checkpointing=Checkpointing(dir=tmp_path, every=1))
    state = tmp_path / "step-00000002" / "ddp_state.pt"
    state.write_bytes(state.read_bytes()[:200])
    with pytest.raises(UsageError, match=r"cannot load checkpoint .*step-00000002: a file in it is damaged or "
                                         r"incomplete \(RuntimeError: PytorchStreamReader") as refused:
        fit(_Regressor(), _batches(4), loss_fn=_mse, max_steps=3,
            checkpointing=Checkpointing(dir=tmp_path, resume=True))
    assert str(tmp_path / "step-00000001") in str(refused.value.hint)


@pytest.mark.parametrize(("saved", "resumed", "message"), [
    ("deepspeed_stage_2", "deepspeed_stage_3", "ZeRO-3 partitions its checkpoint differently"),
    ("deepspeed_stage_3", "deepspeed_stage_1", "ZeRO-3 partitions its checkpoint differently"),
    ("ddp", "fsdp", "was written by ddp, and this run uses fsdp"),
])
def test_a_checkpoint_another_strategy_wrote_is_refused_before_the_workers_start(
        saved: str, resumed: str, message: str, tmp_path: Path) -> None:
    """ZeRO-2's checkpoint resumed under ZeRO-3 (and back) failed in DeepSpeed's loader with a bare AssertionError
    once both workers had started (the checkpoint probe); a family mismatch was refused only by the workers."""
    model = _Regressor()
    plan = _plan(model, strategy=resumed, world_size=2)
    step = checkpoint.step_dir(tmp_path, 2)
    step.mkdir()
    meta = checkpoint.CheckpointMeta(position=checkpoint.Position(step=2, epoch=0, batch_in_epoch=2),
                                     strategy=saved, family=saved.split("_")[0], world_size=2,
                                     layout_hash=plan.model.layout_hash, micro_batch_size=4)
    (step / checkpoint.META_FILE).write_text(json.dumps(asdict(meta)), encoding="utf-8")
    with pytest.raises(UsageError, match=message) as refused:
        fit(model, _batches(8), loss_fn=_mse, max_steps=4, plan=plan,
            checkpointing=Checkpointing(dir=tmp_path, resume=True), timeout_s=120)
    assert not refused.value.message.startswith("rank")  # this process refused it, not a worker
    if saved == "ddp":  # the way on that is left: its weights, loaded into the model (a checkpoint probe)
        assert "start afresh from its weights" in (refused.value.hint or "")


def test_checkpointing_that_is_not_a_checkpointing_is_refused_naming_the_argument(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"checkpointing must be an autoshard\.Checkpointing, but got dict"):
        fit(_Regressor(), _batches(2), loss_fn=_mse, max_steps=1,
            checkpointing={"dir": tmp_path})  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


# -- is_worker() ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, False),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
      "TORCHELASTIC_RUN_ID": "x"}, False),  # a torchrun rank: the launcher's process, not one fit() started
    ({supervisor.RUN_DIR_VAR: "/tmp/autoshard-fit-x", "RANK": "1", "WORLD_SIZE": "2"}, True),
])
def test_is_worker_reads_the_variable_fit_sets_in_its_workers(environ: dict[str, str], expected: bool) -> None:
    assert supervisor.is_worker(environ) is expected


def test_is_worker_is_public_and_false_in_one_process() -> None:
    assert "is_worker" in autoshard.__all__ and autoshard.is_worker is supervisor.is_worker
    seen = []

    def loss(output: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        seen.append(autoshard.is_worker())
        return _mse(output, batch)

    model = _Regressor()
    fit(model, _batches(2), loss_fn=loss, optimizer=_sgd, plan=_plan(model), max_steps=1)
    assert seen == [False]


# -- two ranks ------------------------------------------------------------------------------------------------


def _run(options: dict[str, Any], env: dict[str, str] | None = None, timeout: float = 120
         ) -> subprocess.Popen[str]:
    environ = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", supervisor.RUN_DIR_VAR):
        environ.pop(name, None)
    environ.update(env or {})
    return subprocess.Popen([sys.executable, __file__, json.dumps(options)], cwd=REPO, env=environ, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _lines(out: str, tag: str) -> list[dict[str, Any]]:
    return [json.loads(line.removeprefix(tag + " ")) for line in out.splitlines() if line.startswith(tag + " ")]


def test_two_spawned_workers_run_the_schedule_and_know_they_are_workers(tmp_path: Path) -> None:
    proc = _run({"mode": "spawn", "record_dir": str(tmp_path)})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-4000:]
    (result,) = _lines(out, "RESULT")
    assert result["world_size"] == 2
    assert result["lrs"] == pytest.approx([BASE_LR * f for f in FACTORS[:4]])  # 16 batches, 2 ranks, 2 per step
    seen = sorted((r["rank"] or "launcher", r["is_worker"]) for r in
                  (json.loads(p.read_text(encoding="utf-8")) for p in tmp_path.glob("is_worker-*.json")))
    assert seen == [("0", True), ("1", True), ("launcher", False)]


def test_a_script_failing_outside_fit_in_a_worker_is_said_so_not_blamed_on_memory(tmp_path: Path) -> None:
    """Exit code 1 and a traceback is Python's exit on an error, not a kill: fit() said "Running out of host memory
    is a common cause of a kill" (a migration probe whose script deleted a file at its top, in every worker)."""
    proc = _run({"mode": "outside", "record_dir": str(tmp_path)})
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "FileNotFoundError: no such file" in err  # a rank's traceback, on the terminal as the user ran it
    # Both ranks fail the same way; whichever exits first is named (rank 1 in one CI run of four).
    assert re.search(r"autoshard\.errors\.WorkerError: rank [01] exited with code 1 before fit\(\) reported from "
                     r"it: an error in your script outside fit\(\) \(its traceback, if any, is in (the|its) output "
                     r"(above|below)\)", err), err[-3000:]
    assert "if not autoshard.is_worker():" in err and "host memory" not in err


@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_rank_losing_its_peer_in_the_first_loss_is_not_blamed_for_it(how: str, tmp_path: Path) -> None:
    # The loss all-reduces (a global normaliser): when rank 1 dies there, rank 0's all-reduce fails inside the
    # region whose errors fit() reports as the user's. Started as torchrun starts ranks, so rank 0's own
    # exception can be seen (under fit()'s own workers the supervisor may stop rank 0 before it reports).
    port = str(supervisor.free_port())
    procs = [_run({"mode": "launched", "fail": how, "record_dir": str(tmp_path)},
                  {"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}) for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    (survivor,) = _lines(outs[0][0], "ERROR")
    assert survivor["type"] != "UserCodeError" and not survivor["autoshard"], survivor
    assert lost_peer(RuntimeError(survivor["message"])), survivor
    if how == "kill":
        assert procs[1].returncode == -signal.SIGKILL
    else:  # rank 1's own loss raised: that one is the user's code, and it reported first
        (dying,) = _lines(outs[1][0], "ERROR")
        assert dying["type"] == "UserCodeError" and "injected failure on rank 1" in dying["message"]
        records = supervisor.error_records(tmp_path, 2)
        assert supervisor.first_error(records) == 1
    # What fit()'s supervisor reports, from the same records (a rank that wrote none is named first).
    error = supervisor._error({0: 1, 1: procs[1].returncode}, tmp_path, 2)
    assert error.message.startswith("rank 1"), error.message


# -- the user script the two-rank tests run -------------------------------------------------------------------


def _script(options: dict[str, Any]) -> None:
    """``python test_fit_extras.py '<json>'``: a training script as a user writes it.

    ``mode``: ``spawn`` (fit() starts 2 workers; prints ``RESULT {...}`` in the launching process) or
    ``launched`` (this process is a rank started with torchrun's variables; ``fail``: ``raise`` / ``kill`` makes
    rank 1 die in its first loss, and each rank prints ``ERROR {...}`` and writes its error record).
    ``record_dir``: each process writes ``is_worker-<pid>.json`` there before calling fit().
    """
    import torch.distributed as dist

    record_dir = Path(options["record_dir"])
    rank = os.environ.get("RANK")
    (record_dir / f"is_worker-{os.getpid()}.json").write_text(
        json.dumps({"rank": rank, "is_worker": autoshard.is_worker()}), encoding="utf-8")
    model = _Regressor()
    data = _batches(16)
    if options["mode"] == "outside" and autoshard.is_worker():  # a script's own code failing in the workers only
        raise FileNotFoundError(f"no such file: {record_dir / 'deleted-by-the-launcher'}")
    if options["mode"] in ("spawn", "outside"):
        plan = _plan(model, world_size=2, accumulation=2)
        result = fit(model, data, loss_fn=_mse, optimizer=_sgd, plan=plan, lr_scheduler=_lambda(FACTORS),
                     log_every=1)
        sys.stdout.write("RESULT " + json.dumps({"world_size": result.world_size,
                                                 "lrs": [s.lr for s in result.steps]}) + "\n")
        return

    def global_mean_loss(output: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        if rank == "1":
            if options["fail"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("injected failure on rank 1")
        count = torch.tensor([float(batch[1].numel())])
        dist.all_reduce(count)  # the mean over every rank's elements: a collective inside the user's loss
        return ((output - batch[1]) ** 2).sum() * dist.get_world_size() / count

    plan = _plan(model, world_size=2)
    try:
        fit(model, data, loss_fn=global_mean_loss, optimizer=_sgd, plan=plan, max_steps=2)
    except Exception as e:  # noqa: BLE001  # what this rank would report, printed for the test
        supervisor.write_error(record_dir, int(rank or 0), e)
        sys.stdout.write("ERROR " + json.dumps({"type": type(e).__name__, "message": getattr(e, "message", str(e)),
                                                "autoshard": isinstance(e, autoshard.AutoshardError)}) + "\n")
    sys.stdout.flush()
    os._exit(1)  # the group is left up under a launcher: no interpreter teardown with a peer gone


if __name__ == "__main__":
    _script(json.loads(sys.argv[1]))
