"""``python -m autoshard.tuner.worker``: one rank of a tuning trial.

Started by :func:`autoshard.tuner.runner.run_trial` (one process per rank, each in its own process group),
with ``AUTOSHARD_RUN_DIR`` naming the trial's directory, which holds ``plan.json`` (the configuration) and
``trial.json`` (the model source, the plan's optimizer, steps, seed and the user's step functions). It trains on
the source's own example batches with the plan's backend, exactly as ``fit()`` would, and rank 0 writes:

* ``progress.jsonl`` — one line per optimizer step (step number and seconds), as it goes, so the tuner can
  report intermediate throughput to Optuna's pruner and prune a trial that is clearly slower;
* ``measurement.json`` — every step's metrics and the measured peak memory per rank (the highest rank).

A failure is written as ``error-rank<N>.json`` (:func:`autoshard.runtime.supervisor.write_error`) for the
tuner to classify.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path
from typing import Any

from autoshard.tuner.trial_files import MEASUREMENT_FILE, PROGRESS_FILE, TRIAL_FILE


def main() -> None:
    """Run the trial described in ``$AUTOSHARD_RUN_DIR``; exits 0 on success, 1 after recording an error."""
    from autoshard.runtime.distributed import LaunchInfo
    from autoshard.runtime.supervisor import RUN_DIR_VAR, dump_stacks_when_stopped, leave_with_launcher, write_error

    environ = os.environ  # the edge: the supervisor's variables are read here only
    leave_with_launcher(environ)  # a trial must never outlive its study
    dump_stacks_when_stopped(environ)  # a trial stopped at its time limit says where it was
    run_dir = Path(environ[RUN_DIR_VAR])
    launch = LaunchInfo.from_environ(environ)
    if launch is None:
        raise SystemExit("autoshard.tuner.worker is started by the tuner (RANK and WORLD_SIZE are not set).")
    code = 0
    try:
        _run(run_dir, launch)
    except BaseException as e:  # noqa: BLE001  # reported to the tuner, which classifies it
        write_error(run_dir, launch.rank, e)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # DeepSpeed's CPU communication threads can abort a normal interpreter exit


def _run(run_dir: Path, launch: Any) -> None:
    import psutil
    import torch
    import torch.distributed as dist

    from autoshard.models import load_source
    from autoshard.models.source import default_loss
    from autoshard.planner import plan_file
    from autoshard.runtime.distributed import join
    from autoshard.runtime.train import TrainJob, train
    from autoshard.tuner.failures import user_error
    from autoshard.tuner.usercode import load_function

    spec = json.loads((run_dir / TRIAL_FILE).read_text(encoding="utf-8"))
    exported = plan_file.read(run_dir / "plan.json")
    source = load_source(spec["model"])
    step, loss = (None if spec.get(k) is None else load_function(spec[k]) for k in ("training_step", "loss_fn"))
    ctx = join(launch, device_type=exported.hardware.device_type)
    cuda = ctx.device.type == "cuda"
    baseline_rss = psutil.Process().memory_info().rss  # before the model, the optimizer and the backend exist
    progress = open(run_dir / PROGRESS_FILE, "a", encoding="utf-8") if ctx.is_main else None  # noqa: SIM115
    # The user's files: an error raised from them at any step is the user's (failures.user_error)
    user_files = [f for f in (source.user_file, *((spec.get(k) or {}).get("file") for k in ("training_step",
                                                                                           "loss_fn"))) if f]
    done = [0]

    def on_step(step: int, seconds: float) -> None:
        done[0] = step
        if progress is not None:
            progress.write(json.dumps({"step": step, "seconds": seconds}) + "\n")
            progress.flush()

    try:
        # optimizer=None: the model file's optimizer(), else the plan's by name, as fit(plan=...) trains (the
        # planner priced the file's; trial.json's name is the plan's, for the record)
        # A trial measures speed: a model file with no loss() is timed with profiling's stand-in (the same work),
        # which fit() refuses to train on
        stand_in = None if loss is not None or step is not None or source.loss_fn is not None else default_loss
        job = TrainJob(module=None, source=source, data=None, loss_fn=loss or stand_in, training_step=step,
                       optimizer=None,
                       max_steps=int(spec["steps"]), epochs=None, seed=int(spec["seed"]), checkpoint_dir=None,
                       checkpoint_every=None, resume=False, consolidate=False, log_every=int(spec["steps"]),
                       on_step=on_step)
        result = train(job, exported, ctx, [])
    except Exception as e:
        blamed = user_error(e, user_files, done[0] + 1)
        if blamed is None:
            raise
        raise blamed from e
    finally:
        if progress is not None:
            progress.close()
    if cuda:
        peak = max((s.peak_memory_bytes or 0) for s in result.steps)  # already the highest over the ranks
        kind = "cuda_allocated"
    else:
        # ru_maxrss is in KiB on Linux: the resident high-water mark of this process, so far.
        grown = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - baseline_rss)
        t = torch.tensor([grown], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        peak, kind = int(t.item()), "host_rss"
    if ctx.is_main:
        record = {"steps": [s.to_dict() for s in result.steps], "peak_memory_bytes": peak, "peak_memory_kind": kind,
                  "world_size": ctx.world_size}
        tmp = run_dir / (MEASUREMENT_FILE + ".partial")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        tmp.replace(run_dir / MEASUREMENT_FILE)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
