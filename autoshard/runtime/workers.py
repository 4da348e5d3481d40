"""The workers ``fit()`` starts itself: one process per rank on this machine, each running the user's script
again (or ``python -m autoshard.runtime.worker`` for a model source, from a notebook or a test).

The launching side (:func:`spawn`) writes the run directory — the plan, the notes, which ``fit()`` call the
workers are for (:mod:`.calls`), the module's weights as they are — starts the workers, and reads rank 0's
result and weights back; the worker side (:func:`run`) trains with what the directory says and leaves.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from autoshard.errors import UsageError, WorkerError, WorkerTimeout
from autoshard.forked import usable_cores
from autoshard.models.source import ModelSource
from autoshard.planner import plan_file
from autoshard.planner.plan_file import ExportedPlan
from autoshard.runtime import calls, supervisor
from autoshard.runtime.data import SampleList, as_samples
from autoshard.runtime.distributed import LaunchInfo, destroy_group, join
from autoshard.runtime.result import FitResult
from autoshard.runtime.train import TrainJob, train
from autoshard.strategies.costs import host_threads_per_rank

RESULT_FILE = "result.json"
WEIGHTS_FILE = "model.pt"
JOB_FILE = "job.json"


def run(job: TrainJob, launch: LaunchInfo, run_dir: Path) -> None:
    """A worker ``fit()`` started: train with the plan in ``run_dir``, rank 0 writes the result, then exit."""
    import torch.distributed as dist

    code = 0
    try:
        exported = plan_file.read(run_dir / "plan.json")
        notes = json.loads((run_dir / "notes.json").read_text(encoding="utf-8"))
        job = as_rank_0_read_it(job, samples=(run_dir / SAMPLES_FILE).is_file())
        _load_start_weights(job.module, run_dir / START_WEIGHTS_FILE)
        ctx = join(launch, device_type=exported.hardware.device_type)
        result = train(job, exported, ctx, notes)
        if ctx.is_main:
            if result.state_dict is not None:
                torch.save(result.state_dict, run_dir / WEIGHTS_FILE)
            tmp = run_dir / (RESULT_FILE + ".partial")
            tmp.write_text(json.dumps(result.to_dict()), encoding="utf-8")
            tmp.replace(run_dir / RESULT_FILE)
        dist.barrier()
        destroy_group()
    except BaseException as e:  # noqa: BLE001  # reported to the launching process, which raises it
        supervisor.write_error(run_dir, launch.rank, e)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # The rest of the user's script is the launching process's to run; leave without interpreter teardown
    # (DeepSpeed's CPU communication threads can abort a normal exit after the work is done).
    os._exit(code)


START_WEIGHTS_FILE = "start.pt"
"""In a run directory: the module's weights in the launching process when it started the workers."""


def _hand_over_weights(module: nn.Module | None, path: Path) -> list[str]:
    """Save ``module``'s weights for the workers to start from; a note when they cannot be (its state holds
    objects other than tensors, which the workers would have to unpickle, or tensors without data)."""
    if module is None:
        return []
    state = module.state_dict()
    if all(isinstance(v, torch.Tensor) and v.device.type != "meta" for v in state.values()):
        torch.save(state, path)
        return []
    return [f"{type(module).__name__}'s state holds objects other than tensors with data: the workers trained it "
            "from the weights your script gives it there, not from this process's."]


def _load_start_weights(module: nn.Module | None, path: Path) -> None:
    """Give a worker's module the launching process's weights: the script built it afresh (an unseeded
    initialisation, and nothing of what earlier ``fit()`` calls trained).

    Raises:
        UsageError: the script built another model in the worker.
    """
    if module is None or not path.is_file():
        return
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    try:
        module.load_state_dict(state)
    except RuntimeError as e:
        raise UsageError(f"the model your script builds in this worker is not the one the launching process "
                         f"passed to fit(): {e}",
                         hint="Build the same model in every process (the workers run your script again).") from e


SAMPLES_FILE = "data-is-samples"
"""Present in a run directory when the launching process read a list given as data as single samples."""


def as_rank_0_read_it(job: TrainJob, *, samples: bool) -> TrainJob:
    """The job with its data read as the planning process read it: a list of single samples as a dataset."""
    if samples and not isinstance(job.data, SampleList):
        wrapped = as_samples(job.data)
        if wrapped is not None:
            return dataclasses.replace(job, data=wrapped)
    return job


def spawn(job: TrainJob, exported: ExportedPlan, notes: list[str], model: Any,
          timeout_s: float | None) -> FitResult:
    """Start one worker per rank on this machine, wait, and return rank 0's result."""
    command = supervisor.script_command()
    if command is None:
        command = _module_worker_command(job, model)
    with supervisor.sigterm_unwinds(job.checkpoint_dir):  # a scheduler's SIGTERM stops the workers, removes the run
        # directory and says where the latest checkpoint is
        return _spawned(job, exported, notes, model, timeout_s, command)


def _spawned(job: TrainJob, exported: ExportedPlan, notes: list[str], model: Any, timeout_s: float | None,
             command: list[str]) -> FitResult:
    run_dir = Path(tempfile.mkdtemp(prefix="autoshard-fit-"))
    try:
        _check_room(run_dir, job, exported, hands_over=command[1:3] != ["-m", "autoshard.runtime.worker"])
        plan_file.write(exported, run_dir / "plan.json")
        if isinstance(job.data, SampleList):
            (run_dir / SAMPLES_FILE).touch()  # the workers read the list as samples too
        if command[1:3] == ["-m", "autoshard.runtime.worker"]:
            (run_dir / JOB_FILE).write_text(json.dumps(_job_spec(job, model)), encoding="utf-8")
        else:  # the workers run the script again: which call they are for, and the module's weights as they are
            calls.write(run_dir)
            notes = [*notes, *_hand_over_weights(job.module, run_dir / START_WEIGHTS_FILE)]
        (run_dir / "notes.json").write_text(json.dumps(notes), encoding="utf-8")
        try:
            supervisor.run_workers(command, world_size=exported.hardware.world_size, run_dir=run_dir,
                                   environ=host_thread_environ(os.environ, exported), timeout_s=timeout_s)
        except WorkerTimeout as exc:  # its stacks go with the run directory: the message keeps where ranks were
            raise WorkerTimeout(exc.message, hint=f"fit(timeout_s={timeout_s or 0:g}) stopped it; give it longer, or "
                                "look at where the ranks were if it should have finished.") from None
        return _collect(run_dir, exported, job.module)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _check_room(run_dir: Path, job: TrainJob, exported: ExportedPlan, *, hands_over: bool) -> None:
    """Refuse a run whose weights the run directory cannot hold: the module's weights handed to the workers
    (``hands_over``: they run the user's script again), and the trained ones handed back (fp32 unless the plan
    trains bf16 throughout). A small ``$TMPDIR`` (a container's, an HPC node's) lost a finished run: rank 0's
    save of the trained weights failed after training, and so did its report of the error, which the user then
    read as a kill for host memory (a container probe).

    Raises:
        UsageError: the file system of ``run_dir`` has less room than that.
    """
    module = job.module
    weights = 0 if module is None else sum(t.numel() * t.element_size() for t in module.state_dict().values()
                                           if isinstance(t, torch.Tensor))
    width = 2 if exported.precision == "bf16-true" else 4
    trained = (weights or exported.model.parameter_count * width) if job.consolidate else 0
    need = (weights if hands_over else 0) + trained + 2**20  # and the run's small files
    free = shutil.disk_usage(run_dir).free
    if free < need:
        from autoshard.hardware.units import format_bytes

        raise UsageError(f"fit() hands the weights between its workers and this process in {run_dir.parent}, which "
                         f"has {format_bytes(free)} free, and they need about {format_bytes(need)}.",
                         hint="Set TMPDIR to a directory with room before fit() runs (a local disk, not a small "
                              "tmpfs).")


def host_thread_environ(environ: Mapping[str, str], exported: ExportedPlan,
                        cores: int | None = None) -> dict[str, str]:
    """The environment the workers start from: ``environ``, with ``OMP_NUM_THREADS`` set to each rank's share of
    this machine's cores (:func:`~autoshard.strategies.costs.host_threads_per_rank`; ``cores``: default
    :func:`autoshard.forked.usable_cores`) for a plan whose optimizer steps on the host (its traits offload), as
    the plan's step time was priced and the exported launch scripts set it, and for ranks that compute on the CPU
    (gloo processes), as torchrun sets it (to 1) and the tuner's trials have it. Left as it is when ``environ``
    sets it, and for GPU ranks of other plans.

    Without it each rank's torch would start a thread per core (its default), and the ranks, which step at once,
    would oversubscribe the cores: two CPU workers of the README's example trained at 2 samples/s, against 11-14
    under torchrun (a new user's report, 2026-12-02).
    """
    out = dict(environ)
    on_host = exported.strategy_traits.offloads or exported.hardware.device_type == "cpu"
    if on_host and "OMP_NUM_THREADS" not in out:
        threads = host_threads_per_rank(usable_cores() if cores is None else cores, exported.hardware.world_size)
        out["OMP_NUM_THREADS"] = str(threads)
    return out


def _collect(run_dir: Path, exported: ExportedPlan, module: nn.Module | None) -> FitResult:
    """Rank 0's result, and the trained weights loaded into ``module``.

    Raises:
        WorkerError: the workers ran the script to its end without training (they never reached this call).
    """
    if not (run_dir / RESULT_FILE).is_file():
        raise WorkerError("the workers ran your script to its end without reaching this fit() call: nothing was "
                          "trained.",
                          hint="The workers run your script again from the top: this call must not depend on "
                               "`autoshard.is_worker()` or anything else that differs there.")
    data = json.loads((run_dir / RESULT_FILE).read_text(encoding="utf-8"))
    state = None
    if (run_dir / WEIGHTS_FILE).is_file():
        state = torch.load(run_dir / WEIGHTS_FILE, map_location="cpu", weights_only=True)
        if module is not None:
            module.load_state_dict(state)
            if not module.training:  # as a one-process run leaves it: the workers trained it in train mode
                module.train()
    elif module is not None:  # consolidate=False: the module here holds the weights it was given, not the trained
        data = {**data, "notes": [*data["notes"], UNTRAINED_NOTE]}
        module = None
    if module is None and state is not None:  # a model source: only the workers built a model
        data = {**data, "notes": [*data["notes"], SOURCE_NOTE]}
    return dataclasses.replace(FitResult.from_dict(data, model=module, state_dict=state), plan=exported, rank=0)


UNTRAINED_NOTE = ("consolidate=False: the trained weights stayed in the worker processes, which are gone, so "
                  "result.model is None (your module still holds the weights it was given); train with "
                  "consolidate=True, or keep them with checkpointing=Checkpointing(dir=...).")


SOURCE_NOTE = ("fit() was given a model source, which only the worker processes built, so result.model is None here: "
               "the trained weights are result.state_dict (for a model file: m = model(); "
               "m.load_state_dict(result.state_dict)).")


def check_startable(job: TrainJob, model: Any) -> None:
    """Before planning, when ``processes=`` asked for several: workers can be started from this session (a
    notebook's fit(processes=2) was refused after planning, with a ``planning ...`` line said first).

    Raises:
        UsageError: this session cannot be run again as a worker, and the job cannot be handed to one.
    """
    if supervisor.script_command() is None:
        _module_worker_command(job, model)


def _module_worker_command(job: TrainJob, model: Any) -> list[str]:
    spec_ok = isinstance(model, (str, os.PathLike)) or (isinstance(model, ModelSource) and model.kind in (
        "catalog", "file", "hf-config"))
    own_code = (job.data, job.eval_data, job.loss_fn, job.training_step, job.lr_scheduler)
    if not spec_ok or any(x is not None for x in own_code) or job.callbacks or not (
            job.optimizer is None or isinstance(job.optimizer, str)):
        raise UsageError("fit() needs to start one worker process per device, and this session cannot be started "
                         "again as a worker (an interactive session, a notebook or pytest).",
                         hint="Run your training script with python (fit() starts the workers) or torchrun, or "
                              "pass processes=1.")
    return [sys.executable, "-m", "autoshard.runtime.worker"]


def _job_spec(job: TrainJob, model: Any) -> dict[str, Any]:
    origin = model.origin if isinstance(model, ModelSource) else os.fspath(model)
    return {"model": origin.removeprefix("catalog:"), "optimizer": job.optimizer, "max_steps": job.max_steps,
            "epochs": job.epochs, "seed": job.seed,
            "checkpointing": {"dir": None if job.checkpoint_dir is None else str(job.checkpoint_dir),
                              "every": job.checkpoint_every, "keep_last": job.keep_last_checkpoints,
                              "resume": job.resume if isinstance(job.resume, bool) else str(job.resume)},
            "consolidate": job.consolidate, "log_every": job.log_every, "progress": job.progress,
            "grad_clip_norm": job.grad_clip_norm}
