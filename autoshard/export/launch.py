"""Launch commands: ``torchrun`` (one node and many, plus each family's own launcher), and a SLURM ``sbatch`` script.

Options from ``torch.distributed.run`` (torch 2.13: ``--standalone``, ``--nnodes``, ``--nproc_per_node``,
``--rdzv_id``, ``--rdzv_backend``, ``--rdzv_endpoint``) and ``deepspeed.launcher.runner`` (deepspeed 0.19.8:
``--num_nodes``, ``--num_gpus``, ``--hostfile``, ``--master_addr``, ``--master_port``). Placeholders the user
fills are shell variables: ``$MASTER_ADDR`` (the first node's address) and ``$JOB_ID`` (any id shared by the
nodes).
"""

from __future__ import annotations

from autoshard.planner.plan_file import ExportedPlan, HardwareFingerprint
from autoshard.strategies import exporter

MASTER_PORT = 29500
"""torchrun's and DeepSpeed's default rendezvous / master port."""


CPU_ACCELERATE = ["# CPU processes: an Accelerator joins torchrun's processes only when told it runs on the CPU "
                  "(accelerate 1.15, state.py", "# _prepare_backend): without this, each trains alone, unsynchronised.",
                  "export ACCELERATE_USE_CPU=1"]
"""The lines a CPU plan's launch scripts carry: the environment an ``Accelerator()`` reads for ``cpu=True``."""


def host_threads(ranks: int) -> str:
    """A shell word for ``OMP_NUM_THREADS`` on the node it runs on: ``$OMP_NUM_THREADS`` when set, else
    :func:`~autoshard.strategies.costs.host_threads_per_rank` of the node's usable cores (``nproc``: its CPU
    affinity, as ``fit()``'s workers count them) and its ``ranks`` (a test holds the two equal).

    Example:
        >>> host_threads(4)
        '"${OMP_NUM_THREADS:-$(( $(nproc) > 4 ? $(nproc) / 4 : 1 ))}"'
    """
    share = "$(nproc)" if ranks <= 1 else f"$(( $(nproc) > {ranks} ? $(nproc) / {ranks} : 1 ))"
    return f'"${{OMP_NUM_THREADS:-{share}}}"'


def host_thread_lines(exported: ExportedPlan) -> list[str]:
    """The lines a launch script of a plan whose optimizer steps on the host (its traits offload: FSDP's
    ``CPUOffloadPolicy``, DeepSpeed's CPU Adam) carries before its launchers: ``OMP_NUM_THREADS`` exported as the
    node's cores shared by its ranks (:func:`host_threads`), what the plan's step time was priced with; none for
    other plans, whose ranks do little on the host.

    Without it the host step runs on one thread per rank: torchrun sets ``OMP_NUM_THREADS=1`` for every process
    when it starts several per node and the variable is unset (``torch/distributed/run.py``, torch 2.13), and
    ``accelerate launch`` for every process (``--num_cpu_threads_per_process`` defaults to ``$OMP_NUM_THREADS`` or
    1, accelerate 1.15); the ``deepspeed`` launcher leaves it unset, so each rank's OpenMP loop would start a thread
    per core (deepspeed 0.19.8 ``launcher/launch.py``).
    """
    if not exported.strategy_traits.offloads:
        return []
    ranks = exported.hardware.gpus_per_node
    return [f"# The optimizer steps on the host: each of the node's {ranks} rank(s) gets its share of the node's cores "
            "(torchrun would give", "# each one thread, accelerate launch every process one). A value you set is "
            "kept.", f"export OMP_NUM_THREADS={host_threads(ranks)}"]


def network_rate(hw: HardwareFingerprint) -> str | None:
    """The network bandwidth a multi-node plan was priced with, in words (``None``: one node, or an older file)."""
    if hw.nodes == 1 or hw.network_bytes_per_s is None:
        return None
    return f"{hw.network_bytes_per_s / 1e9:g} GB/s per node per direction"


def network_lines(hw: HardwareFingerprint) -> list[str]:
    """Comment lines the launch scripts of a multi-node plan (its hardware ``hw``) carry: the network between the
    nodes that its step time was priced with (the plan file's, or the default where the hardware did not describe
    it) and how to check it before a long run; none for one node, or a plan file written before the field.

    Example:
        >>> from autoshard.planner.plan_file import HardwareFingerprint
        >>> hw = HardwareFingerprint(gpu="h100", gpu_memory_bytes=None, gpus_per_node=8, nodes=2, device_type="cuda",
        ...                          backend="nccl", nvme_path=None, network="8 × InfiniBand NDR (400 Gb/s)",
        ...                          network_bytes_per_s=400e9)
        >>> network_lines(hw)[0]
        '# Network: the plan priced 8 × InfiniBand NDR (400 Gb/s) per node, 400 GB/s per node per direction.'
    """
    rate = network_rate(hw)
    if rate is None:
        return []
    said = [f"# Network: the plan priced {hw.network} per node, {rate}."] if hw.network is not None else [
        f"# Network: the hardware did not describe it, so the plan priced {rate}; a node or cluster profile with a",
        "# 'network:' entry (docs/hardware.md) prices yours."]
    if hw.backend != "nccl":  # gloo ranks: NCCL's tools and variables say nothing of them (a multi-node probe)
        return [*said, "# A slower network slows each step, not its memory."]
    return [*said,
            "# A slower network slows each step, not its memory. Check yours before a long run (nccl-tests' "
            "all_reduce_perf", "# across the nodes; NCCL_DEBUG=INFO prints the transport NCCL picked: NET/IB, "
            "NET/Socket, NET/OFI)."]


def _whole_node(exported: ExportedPlan) -> list[str]:
    """``--exclusive`` for a plan whose optimizer steps on the host: its step time was priced on all the node's
    cores and its states counted against all its RAM. With one task per node and no CPU count, SLURM's cgroup or
    affinity plugins may bind the task, and every rank torchrun starts under it, to one CPU: ``$(nproc)`` is then
    1, and so is each rank's ``OMP_NUM_THREADS``. A plan for CPU processes likewise: all of its training runs on
    the node's cores, and the plan shared its RAM among the ranks."""
    if exported.hardware.device_type == "cpu":
        return ["#SBATCH --exclusive",
                "# --exclusive: the plan's ranks are CPU processes, planned on every core and all the RAM of each "
                "node."]
    if not exported.strategy_traits.offloads:
        return []
    return ["#SBATCH --exclusive",
            "# --exclusive: the optimizer steps on the host, priced on every core and all the RAM of each node."]


def torchrun(exported: ExportedPlan, *, script: str = "train.py", multi_node: bool | None = None) -> str:
    """A ``torchrun`` command; ``multi_node`` defaults to the plan having more than one node."""
    hw = exported.hardware
    many = hw.nodes > 1 if multi_node is None else multi_node
    if not many:
        return f"torchrun --standalone --nnodes=1 --nproc_per_node={hw.gpus_per_node} {script}"
    return (f"torchrun --nnodes={hw.nodes} --nproc_per_node={hw.gpus_per_node} --rdzv_id=\"$JOB_ID\" "
            f"--rdzv_backend=c10d --rdzv_endpoint=\"$MASTER_ADDR:{MASTER_PORT}\" {script}")


def launch_script(exported: ExportedPlan, *, script: str = "train.py") -> str:
    """``launch.sh``: the commands that apply, one node and many; the plan's own case is uncommented."""
    many = exported.hardware.nodes > 1
    nodes = exported.hardware.nodes
    if exported.family == "deepspeed":  # its config fixes the batch: on fewer ranks DeepSpeed refuses to start
        one = ("# one node (this plan is for several: ds_config.json's train_batch_size counts every node's ranks and "
               "DeepSpeed refuses another world size, so on one node multiply gradient_accumulation_steps by "
               f"{nodes} there, or divide train_batch_size by {nodes}):")
    else:
        one = (f"# one node (this plan is for several: on one, each step trains 1/{nodes} of the planned global "
               "batch unless you raise the gradient accumulation):")
    out = ["#!/usr/bin/env bash", ("# Generated by autoshard from plan.json. Run on every node; set MASTER_ADDR "
           "(first node's address) and JOB_ID (any id shared by all nodes) for multi-node runs."),
           "set -euo pipefail", "",
           one if many else "# one node:", ("# " if many else "") + torchrun(exported, script=script,
                                                                                       multi_node=False),
           "# many nodes (run the same line on each node):",
           ("" if many else "# ") + torchrun(exported, script=script, multi_node=True)]
    out[3:3] = [*network_lines(exported.hardware), *host_thread_lines(exported)]
    if exported.hardware.device_type == "cpu":
        out[3:3] = CPU_ACCELERATE
    out += exporter(exported.family).launchers(exported, script=script)
    return "\n".join(out) + "\n"


def sbatch(exported: ExportedPlan, *, script: str = "train.py", job_name: str = "autoshard") -> str:
    """A SLURM batch script: one task per node, each running ``torchrun`` with a c10d rendezvous on the first node."""
    hw = exported.hardware
    gpus = f"#SBATCH --gpus-per-node={hw.gpus_per_node}" if hw.device_type == "cuda" else \
        "# (planned for CPU processes: no GPUs requested)"
    return "\n".join([
        "#!/usr/bin/env bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={hw.nodes}",
        "#SBATCH --ntasks-per-node=1",
        gpus,
        *_whole_node(exported),
        "# Generated by autoshard from plan.json. Add your partition, time limit and CPU count.",
        *network_lines(hw),
        "set -euo pipefail",
        *(CPU_ACCELERATE if hw.device_type == "cpu" else []),
        *host_thread_lines(exported),  # srun hands the batch step's environment to every node's torchrun
        "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)",
        "export MASTER_ADDR",
        (f"srun torchrun --nnodes=\"$SLURM_NNODES\" --nproc_per_node={hw.gpus_per_node} --rdzv_id=\"$SLURM_JOB_ID\" "
        f"--rdzv_backend=c10d --rdzv_endpoint=\"$MASTER_ADDR:{MASTER_PORT}\" {script}"),
    ]) + "\n"
