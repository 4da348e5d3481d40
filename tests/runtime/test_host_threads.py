"""fit()'s workers for a plan whose optimizer steps on the host get ``OMP_NUM_THREADS``: this machine's cores
shared by its ranks (``autoshard.strategies.costs.host_threads_per_rank``), the threads the plan's step time was
priced with; a value the user set is kept, and other plans' workers start from the caller's environment as before.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoshard.forked import usable_cores
from autoshard.planner.plan_file import ExportedPlan, HardwareFingerprint, ModelFingerprint
from autoshard.runtime.workers import host_thread_environ
from autoshard.strategies import get
from autoshard.strategies.costs import host_threads_per_rank

REPO = Path(__file__).parents[2]
SCRIPT = Path(__file__).parent / "host_threads_script.py"


def _plan(strategy: str, ranks: int) -> ExportedPlan:
    return ExportedPlan(strategy=strategy, family=get(strategy).family, micro_batch_size=1, gradient_accumulation=1,
                        activation_checkpointing=False, precision="32-true", optimizer="adamw", seq_len=None,
                        model=ModelFingerprint(name="m", parameter_count=1, block_class=None, layout_hash="0" * 16),
                        hardware=HardwareFingerprint(gpu="h100", gpu_memory_bytes=80, gpus_per_node=ranks, nodes=1,
                                                     device_type="cuda", backend="nccl", nvme_path=None))


@pytest.mark.parametrize(("strategy", "ranks", "cores", "environ", "threads"), [
    ("fsdp_cpu_offload", 2, 64, {}, "32"),
    ("fsdp_cpu_offload", 8, 64, {"PATH": "/bin"}, "8"),
    ("fsdp_cpu_offload", 8, 4, {}, "1"),  # fewer cores than ranks: one each, never 0
    ("deepspeed_stage_2_offload", 4, 64, {}, "16"),  # DeepSpeedCPUAdam's OpenMP loop reads it too
    ("deepspeed_stage_3_offload_nvme", 4, 64, {}, "16"),  # the optimizer still steps on the host, swapping to NVMe
    ("fsdp_cpu_offload", 2, 64, {"OMP_NUM_THREADS": "3"}, "3"),  # the user's value is kept
    ("fsdp", 2, 64, {}, None),  # nothing steps on the host: the caller's environment as it is
    ("deepspeed_stage_2", 2, 64, {}, None),
    ("ddp", 2, 64, {}, None),
])
def test_worker_environment_sets_host_threads_only_for_a_plan_that_steps_on_the_host(
        strategy: str, ranks: int, cores: int, environ: dict[str, str], threads: str | None) -> None:
    got = host_thread_environ(environ, _plan(strategy, ranks), cores=cores)
    assert got.get("OMP_NUM_THREADS") == threads
    assert {k: v for k, v in got.items() if k != "OMP_NUM_THREADS"} == {
        k: v for k, v in environ.items() if k != "OMP_NUM_THREADS"}


@pytest.mark.parametrize(("ranks", "cores", "environ", "threads"), [
    (2, 16, {}, "8"), (4, 2, {}, "1"), (2, 16, {"OMP_NUM_THREADS": "5"}, "5"),
])
def test_cpu_ranks_get_their_share_of_the_cores_whatever_the_strategy(
        ranks: int, cores: int, environ: dict[str, str], threads: str) -> None:
    plan = _plan("ddp", ranks)
    cpu = dataclasses.replace(plan, hardware=dataclasses.replace(plan.hardware, gpu=None, gpu_memory_bytes=None,
                                                                 device_type="cpu", backend="gloo"))
    assert host_thread_environ(environ, cpu, cores=cores).get("OMP_NUM_THREADS") == threads


@pytest.mark.parametrize("strategy", ["fsdp_cpu_offload", "ddp"])
def test_fits_own_workers_start_with_the_host_threads_the_plan_was_priced_with(strategy: str, tmp_path: Path) -> None:
    """Two workers fit() starts itself, from an environment without OMP_NUM_THREADS (as ``python train.py``), on
    this machine's CPU: each gets its cores // 2, under CPU offload and DDP alike (torch would otherwise start a
    thread per core in each; DDP's were left so, and trained 5 x slower than under torchrun)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), strategy], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text(encoding="utf-8")) for r in (0, 1)]
    threads = host_threads_per_rank(usable_cores(), 2)
    assert ranks == [{"omp_num_threads": str(threads), "torch_threads": threads}] * 2
