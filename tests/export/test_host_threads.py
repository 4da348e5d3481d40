"""The launches autoshard writes for a plan whose optimizer steps on the host (FSDP's CPU offload, DeepSpeed's CPU
Adam) set ``OMP_NUM_THREADS`` to each node's cores shared by its ranks, as the plan's step time was priced: without
it torchrun gives each of several processes one thread and the host step ran 4x slower on 2 GPUs than on 1 (probe).
Plans whose ranks do little on the host keep the launchers' own defaults. The scripts run for real in bash, with
torchrun starting the ranks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autoshard.export import launch, notes, render
from autoshard.forked import usable_cores
from autoshard.strategies import get, names
from autoshard.strategies.costs import host_threads_per_rank
from autoshard.strategies.deepspeed import export as deepspeed_export

from .conftest import cpu_plan, on_gpus

LAUNCH_FILES = ("launch.sh", "slurm.sbatch", "hf_trainer_args.txt")
TRAIN = ("import json, os, torch\n"
         "print('RESULT ' + json.dumps({'rank': int(os.environ['RANK']), 'omp': os.environ.get('OMP_NUM_THREADS'), "
         "'torch': torch.get_num_threads()}), flush=True)\n")


def _gpu_plan(plan, strategy: str, ranks: int = 2, nodes: int = 1):
    return on_gpus(cpu_plan(plan, strategy, ranks=ranks, nodes=nodes))


def _run(command: list[str], cwd: Path, environ: dict[str, str] | None = None) -> list[dict]:
    """Run ``command`` from an environment without OMP_NUM_THREADS (plus ``environ``); every rank's record."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "RANK", "WORLD_SIZE")}
    env.update(environ or {})
    out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    # The ranks share one stdout: two records can land on one line, so each is found by its marker.
    records = [json.loads(m) for m in re.findall(r"RESULT (\{[^{}]*\})", out.stdout)]
    return sorted(records, key=lambda r: r["rank"])


@pytest.mark.parametrize("strategy", names())
def test_every_launch_file_sets_host_threads_exactly_when_the_optimizer_steps_on_the_host(plan, strategy):
    files = render(_gpu_plan(plan, strategy, nodes=2 if get(strategy).traits.hybrid else 1), validate=False)
    offloads = get(strategy).traits.offloads
    for name in LAUNCH_FILES:
        if name in files:  # the HF Trainer cannot run a hybrid plan: no file
            assert ("OMP_NUM_THREADS=" in files[name]) is offloads, (name, files[name])
    assert any("OMP_NUM_THREADS" in n for n in notes(_gpu_plan(plan, strategy))) is offloads


@pytest.mark.parametrize(("ranks", "environ", "cpus"), [
    (2, {}, None),  # the node's cores // its 2 ranks
    (1, {}, None),  # one rank: every core (accelerate launch would otherwise give it one thread)
    (2, {}, "0"),  # one core for two ranks: one each, never 0
    (2, {"OMP_NUM_THREADS": "2"}, None),  # the user's value is kept
])
@pytest.mark.parametrize("strategy", ["fsdp_cpu_offload", "deepspeed_stage_2_offload"])
def test_launch_sh_starts_each_rank_with_its_share_of_the_nodes_cores(plan, tmp_path, strategy, ranks, environ, cpus):
    if cpus is not None and shutil.which("taskset") is None:
        pytest.skip("taskset is not installed")
    files = render(_gpu_plan(plan, strategy, ranks=ranks), validate=False)
    (tmp_path / "launch.sh").write_text(files["launch.sh"])
    (tmp_path / "train.py").write_text(TRAIN)
    prefix = [] if cpus is None else ["taskset", "-c", cpus]
    got = _run([*prefix, "bash", "launch.sh"], tmp_path,
               {**environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])})
    if environ:  # torch caps its threads at the machine's cores: only the variable is the launch's to keep
        assert [r["omp"] for r in got] == [environ["OMP_NUM_THREADS"]] * ranks
        return
    threads = host_threads_per_rank(1 if cpus is not None else usable_cores(), ranks)
    assert got == [{"rank": r, "omp": str(threads), "torch": threads} for r in range(ranks)]


def test_the_hf_trainer_command_runs_its_ranks_with_the_host_threads(plan, tmp_path):
    line = render(_gpu_plan(plan, "fsdp_cpu_offload"), validate=False)["hf_trainer_args.txt"]
    assert line.startswith("OMP_NUM_THREADS=") and " torchrun " in line
    (tmp_path / "train.py").write_text(TRAIN)
    got = _run(["bash", "-c", line], tmp_path,
               {"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])})
    threads = host_threads_per_rank(usable_cores(), 2)
    assert got == [{"rank": r, "omp": str(threads), "torch": threads} for r in range(2)]


@pytest.mark.parametrize("ranks", [1, 2, 3, 8])
@pytest.mark.parametrize("cpus", [None, "0"])
def test_the_shell_word_is_host_threads_per_rank_of_nproc(ranks, cpus):
    """The launch scripts compute the share on the node; fit()'s workers and the cost model call the function."""
    if cpus is not None and shutil.which("taskset") is None:
        pytest.skip("taskset is not installed")
    prefix = [] if cpus is None else ["taskset", "-c", cpus]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([*prefix, "bash", "-c", f"echo {launch.host_threads(ranks)}"], env=env,
                         capture_output=True, text=True, check=True)
    assert int(out.stdout) == host_threads_per_rank(1 if cpus is not None else usable_cores(), ranks)


def test_sbatch_exports_the_host_threads_before_srun_starts_every_nodes_torchrun(plan):
    files = render(_gpu_plan(plan, "fsdp_cpu_offload", ranks=8, nodes=4), validate=False)
    lines = files["slurm.sbatch"].splitlines()
    export = next(i for i, x in enumerate(lines) if x.startswith("export OMP_NUM_THREADS="))
    assert export < next(i for i, x in enumerate(lines) if x.startswith("srun torchrun"))
    assert lines[export] == f"export OMP_NUM_THREADS={launch.host_threads(8)}"
    assert lines[export] in files["launch.sh"].splitlines()
    # the whole node, else SLURM may bind the one task per node to one CPU and $(nproc) gives each rank 1 thread
    assert any(x.startswith("#SBATCH --exclusive") for x in lines)
    plain = render(_gpu_plan(plan, "fsdp", ranks=8, nodes=4), validate=False)["slurm.sbatch"]
    assert "--exclusive" not in plain


def test_deepspeeds_multi_node_launcher_line_says_ssh_does_not_carry_the_threads(plan):
    e = _gpu_plan(plan, "deepspeed_stage_3_offload", ranks=8, nodes=2)
    text = "\n".join(deepspeed_export.EXPORTER.launchers(e, script="train.py"))
    assert ".deepspeed_env" in text and "OMP_NUM_THREADS=<cores per node / 8>" in text
    plain = "\n".join(deepspeed_export.EXPORTER.launchers(_gpu_plan(plan, "deepspeed_stage_3", ranks=8, nodes=2),
                                                          script="train.py"))
    assert "OMP_NUM_THREADS" not in plain


def test_a_cpu_plans_sbatch_asks_for_whole_nodes(plan):
    """A plan for gloo CPU processes got an sbatch with one task per node and no CPU count or --exclusive: SLURM may
    bind the task, and every rank torchrun starts under it, to one CPU of a node the plan counted whole (a
    container probe)."""
    from tests.export.conftest import cpu_plan

    lines = render(cpu_plan(plan, "ddp", ranks=2, nodes=2), validate=False)["slurm.sbatch"].splitlines()
    assert "#SBATCH --exclusive" in lines and any("CPU processes" in x for x in lines)
