"""One rank of a distributed memory-accuracy case: train the case's plan as ``fit()`` does and measure the peak.

Started by ``benchmarks/memory_accuracy.py`` through :func:`autoshard.runtime.supervisor.run_workers` (one
process per rank, each in its own process group, under a wall-clock limit), with ``AUTOSHARD_RUN_DIR`` naming a
directory that holds ``plan.json`` (the configuration, as ``autoshard export`` writes it) and ``case.json``
(``model``, ``num_layers``, ``steps``, ``warm_steps``, ``process_group``). It runs
:func:`autoshard.runtime.train.train` — the backend, data feed and loop ``fit()`` uses — on the model source's
example batches (with ``num_layers`` blocks where the case sets it, as the plan was traced), with a
:class:`_allocator.PeakProbe` around everything from before the model is built, marked after ``warm_steps``
optimizer steps, and writes ``rank<N>.json`` (the probe's :class:`_allocator.Peak`).

``process_group``:

* ``"real"``: the ranks join over gloo (CPU) or NCCL (one GPU each), as ``fit()``'s workers do;
* ``"fake"``: a single process joins ``torch.distributed``'s fake backend as rank 0 of ``world_size`` ranks
  (``FakeStore``; its collectives return at once and move no data). Every tensor this rank allocates is real —
  shards, all-gather outputs, reduce-scatter buffers — so its peak is the one rank 0 of a real run would see,
  without the other ranks' processes. How torchtitan estimates memory for large meshes; used here for FSDP2.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the probe beside this script
from _allocator import PeakProbe, released_on_caller

CASE_FILE = "case.json"


def main() -> None:
    """Run the case in ``$AUTOSHARD_RUN_DIR``; exits 0, or 1 after recording the error for the benchmark."""
    from autoshard.runtime.supervisor import RUN_DIR_VAR, write_error

    run_dir = Path(os.environ[RUN_DIR_VAR])
    rank = int(os.environ.get("RANK", "0"))
    code = 0
    try:
        _run(run_dir)
    except BaseException as e:  # noqa: BLE001  # recorded in the case's row
        write_error(run_dir, rank, e)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # DeepSpeed's CPU communication threads can abort a normal interpreter exit


def _run(run_dir: Path) -> None:
    import torch.distributed as dist

    from autoshard.models import load_source
    from autoshard.planner import plan_file
    from autoshard.runtime.distributed import LaunchInfo, join
    from autoshard.runtime.train import TrainJob, train

    case = json.loads((run_dir / CASE_FILE).read_text(encoding="utf-8"))
    exported = plan_file.read(run_dir / "plan.json")
    device_type = exported.hardware.device_type
    if device_type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # read when deepspeed is first imported
    if case["process_group"] == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore

        world = exported.hardware.world_size
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
        launch = LaunchInfo(rank=0, world_size=world, local_rank=0, local_world_size=world, master_addr=None,
                            master_port=None)
    else:
        launch = LaunchInfo.from_environ(os.environ)
        if launch is None:
            raise SystemExit("_memory_worker.py is started by benchmarks/memory_accuracy.py (no RANK set).")
    ctx = join(launch, device_type=device_type)
    source = load_source(case["model"])
    if case.get("num_layers") is not None:  # the grid's shortened decoders (memory_accuracy.load_case)
        if source.with_num_layers is None:
            raise SystemExit(f"{case['model']} cannot change its block count.")
        source = source.with_num_layers(int(case["num_layers"]))
    warm = int(case["warm_steps"])
    probe = PeakProbe(ctx.device)

    def on_step(step: int, seconds: float) -> None:
        if step == warm:
            probe.mark()
        elif step > warm:
            probe.step_end()

    quiet_frees = released_on_caller() if device_type == "cpu" else contextlib.nullcontext({})
    with quiet_frees as counters, probe:
        job = TrainJob(module=None, source=source, data=None, loss_fn=None, optimizer=case["optimizer"],
                       max_steps=int(case["steps"]), epochs=None, seed=0, checkpoint_dir=None,
                       checkpoint_every=None, resume=False, consolidate=False, log_every=int(case["steps"]),
                       on_step=on_step)
        train(job, exported, ctx, [])
    out = run_dir / f"rank{ctx.rank}.json"
    out.with_suffix(".partial").write_text(json.dumps({**probe.result().to_dict(), **counters}), encoding="utf-8")
    out.with_suffix(".partial").replace(out)
    if case["process_group"] == "real":
        dist.barrier()  # every rank done with every collective before any tears down
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
