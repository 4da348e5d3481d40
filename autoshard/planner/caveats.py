"""The lines a plan's explanation adds after its headline: the global batch it trains with, a step on several
nodes that waits mostly on the network, and what it assumed or could not check of the hardware (a host without
RAM or cores, a GPU without measurements or bandwidths, offload on several nodes where other parallelism is
usual)."""

from __future__ import annotations

import math

from autoshard.hardware.specs import HardwareSpec
from autoshard.planner.plan import Evaluation
from autoshard.profiler.embeddings import some_tables
from autoshard.strategies.workload import Workload, first_trainable


def global_batch(best: Evaluation, hardware: HardwareSpec) -> tuple[str, ...]:
    """A line with the samples per optimizer step, when more than one device or micro-batch makes it up: the
    batch size is a training choice, and over several nodes it can be far larger than on one (a probe's 16-node
    plan over 25 GbE trained 4,352 sequences a step where InfiniBand's trained 256, and said neither)."""
    micro, accumulation, world = best.candidate.micro_batch_size, best.gradient_accumulation, hardware.world_size
    if world * accumulation == 1:
        return ()
    ranks = f"{world} data-parallel ranks" if world > 1 else "1 device"
    steps = f"{accumulation} accumulation steps" if accumulation > 1 else "no accumulation"
    return (f"Global batch: {micro * accumulation * world:,} samples per optimizer step (micro-batch {micro}, "
            f"{steps}, {ranks}); --global-batch-size sets it.",)


COMMUNICATION_BOUND = 0.5
"""The share of a multi-node step spent waiting on communication not hidden behind compute above which the plan
says that adding nodes on this network may not pay (a probe's llama-2-70b over one 25 GbE port: 6,094 tokens/s on
one DGX H100, 3,756 on two, and nothing said why)."""


def communication_bound(best: Evaluation, hardware: HardwareSpec) -> tuple[str, ...]:
    """A line when a plan on several nodes spends most of its step waiting on exposed communication."""
    cost = best.cost
    if hardware.nodes < 2 or cost is None or cost.step_time_s <= 0:
        return ()
    share = cost.exposed_communication_s / cost.step_time_s
    if share < COMMUNICATION_BOUND:
        return ()
    return (f"Communication-bound: {100 * share:.0f} % of each step ({cost.exposed_communication_s:.3g} of "
            f"{cost.step_time_s:.3g} s) waits on communication not hidden behind compute across "
            f"{hardware.nodes} nodes: on this network more nodes may add less throughput than they cost, and fewer "
            "may train as fast (`autoshard compare MODEL --hardware NAME:GxN` for several N says).",)


def unknown_host(best: Evaluation, hardware: HardwareSpec) -> tuple[str, ...]:
    """Lines for what ``best`` asks of a host this hardware does not describe (a GPU profile, a node file without
    ``cpu_memory`` or ``cpu_cores``): RAM for its offloaded states, which the plan could not check; cores for
    the optimizer step on the host (DeepSpeed's CPU Adam, FSDP's CPU offload), which it priced with an assumed
    count; and the host's memory bandwidth, which bounds that step, when only the cores are known."""
    from autoshard.strategies.costs import (
        UNKNOWN_HOST_CORES,
        host_memory_bytes_per_s,
    )

    cpu, lines = hardware.node.cpu, []
    need = best.memory.cpu_bytes_per_node if best.memory is not None else 0
    if need and cpu.memory_available_bytes is None:
        lines.append(f"Unchecked: this plan keeps {_gib(need)} of offloaded states in CPU RAM per node, and this "
                     "hardware's RAM is not known; a host with less cannot run it (--cpu-memory SIZE has the plan "
                     "check it).")
    stepper = "DeepSpeed's CPU Adam" if best.traits.family == "deepspeed" else "torch's optimizer"
    cores = cpu.usable_cores or cpu.physical_cores
    if best.traits.offloads and not cores:
        lines.append(f"Assumed: the optimizer steps on the host ({stepper}), whose cores are not known: "
                     f"{UNKNOWN_HOST_CORES} per node were priced, shared by its {hardware.processes_per_node} ranks, "
                     f"with a workstation's memory bandwidth ({host_memory_bytes_per_s(hardware)[0] / 1e9:.3g} GB/s) "
                     "(--cpu-cores N prices the real host's cores).")
    elif best.traits.offloads and cpu.memory_bandwidth_bytes_per_s is None:
        lines.append(f"Assumed: the optimizer steps on the host ({stepper}), whose memory bandwidth is not known: "
                     f"{host_memory_bytes_per_s(hardware)[0] / 1e9:.4g} GB/s per node were priced "
                     f"(two channels of DDR5-4800 for every 8 of its {cores} cores, at least two; a node file with "
                     "cpu_memory_bandwidth gives the host's).")
    disks = hardware.node.nvme
    if best.traits.offload == "nvme" and not any(d.read_bytes_per_s and d.write_bytes_per_s for d in disks):
        from autoshard.strategies.deepspeed.offload_cost import NVME_DEFAULT_BYTES_PER_S

        step = f" (of its {best.cost.step_time_s:,.0f} s step)" if best.cost is not None else ""
        lines.append(f"Assumed: the NVMe the states swap to{step} has no measured bandwidth: "
                     f"{NVME_DEFAULT_BYTES_PER_S / 1e9:g} GB/s read and write per node were priced, one PCIe 4.0 "
                     "SSD's low end; a node striping several drives is faster (`autoshard hardware --benchmark-disk "
                     "PATH` on the machine measures its disk; a hardware file's nvme: entry gives the figures).")
    return tuple(lines)


def assumed_gpu(best: Evaluation, hardware: HardwareSpec) -> tuple[str, ...]:
    """Lines for what the step time assumed of GPUs the hardware does not describe in full (a user's file, a
    profile without measurements): said in the explanation, not only in the candidates' cost notes, since the
    predicted throughput is the less certain for it (a GPU file without ``memory_bandwidth`` came out 26 % faster
    than the same GPU with it)."""
    from autoshard.strategies.costs import host_link_bytes_per_s, link
    from autoshard.strategies.step_time import UNMEASURED_UNALIGNED

    gpu, lines = hardware.gpu, []
    if gpu is None or best.cost is None:
        return ()
    if gpu.memory_bandwidth_bytes_per_s is None:
        lines.append(f"Assumed: {gpu.display_name}'s memory bandwidth is not known: memory-bound kernels were priced "
                     "at their launch time only, so the predicted step is too fast (give the GPU a "
                     "memory_bandwidth).")
    if gpu.achievable is None:
        lines.append(f"Assumed: {gpu.display_name} has no measured kernel efficiencies: its kernels were priced at "
                     "generic fractions of its peaks (docs/strategies/step-time.md), less certain than for the "
                     "A100, H100 and V100 profiles, which are fitted to published measurements.")
    intra = link(hardware, "intra")
    if any(UNMEASURED_UNALIGNED in note for note in best.cost.notes):
        lines.append(f"Assumed: some of its 16-bit matmuls have dimensions that are not multiples of 8 (GPT-2's "
                     f"50,257-token vocabulary is one), whose slowdown on {gpu.display_name} is not measured: they "
                     "were priced at the aligned rate, so the step is predicted too fast (on Hopper such GEMMs run "
                     "3 to 5.5x slower: docs/benchmarks/gpu_kernels.md; padding the vocabulary to a multiple of 64 "
                     "avoids it).")
    if hardware.processes_per_node > 1 and not intra.known:
        gpu_spec = hardware.gpu
        unused_nvlink = gpu_spec is not None and gpu_spec.nvlink is not None and gpu_spec.form_factor != "sxm"
        fix = ("its nvlink joins a node's GPUs on an SXM board only: give the GPU form_factor: sxm, or the node an "
               "intra_node_link" if unused_nvlink else
               "give the GPU a host_link, or nvlink with form_factor: sxm, or the node an intra_node_link")
        lines.append("Assumed: the link between a node's GPUs is not known: its collectives were priced at "
                     f"{intra.bandwidth_bytes_per_s / 1e9:.3g} GB/s ({fix}).")
    host_assumed = host_link_bytes_per_s(hardware)[1] if best.traits.offloads else ()
    if host_assumed:
        lines.append(f"Assumed: {host_assumed[0]} between GPU and host, for the offloaded traffic (give the GPU a "
                     "host_link).")
    return tuple(lines)


def offload_scope(best: Evaluation, hardware: HardwareSpec, weighed: list[Evaluation], workload: Workload,
                  goal: str) -> tuple[str, ...]:
    """A line when the plan offloads because nothing without offload fits (strategies without it were weighed, and
    none fits): on several nodes, that what was planned is data parallelism, with sharding and offload, only (runs
    that size add tensor or pipeline parallelism, which the planner does not weigh); fine-tuning every parameter,
    that parameter-efficient fine-tuning trains far fewer (the planner probe: a 7B fine-tune on one 24 GB card was
    planned with 125 GiB of host RAM, and LoRA, what most would run there, went unsaid). (Offload asked for with
    ``--strategies`` alone, or while the GPUs hold the states, says nothing of the kind.)"""
    on_gpus = [e for e in weighed if not e.traits.offloads and e.memory is not None]
    if not best.traits.offloads or hardware.gpu is None or not on_gpus or any(e.fits for e in on_gpus):
        return ()
    lines = []
    if hardware.nodes > 1:
        lines.append("Scope: on several nodes this plan offloads to the host, because data parallelism with sharding "
                     "(all autoshard plans) leaves each GPU too little room; runs of this size usually add tensor or "
                     "pipeline parallelism (Megatron-LM, torchtitan, DeepSpeed's pipeline engine), which can keep "
                     "the states on the GPUs and be faster, and which autoshard does not plan.")
    else:
        lines.append(f"Scope: on one node this plan offloads to the host, because no plan keeping the states on its "
                     f"{_count_gpus(hardware.processes_per_node)} fits. More nodes shard them further"
                     f"{_nodes_to_hold(workload, hardware)} (--nodes N; `autoshard compare MODEL --hardware NAME:GxN` "
                     "for several N), and runs of this size usually add tensor or pipeline parallelism too, which "
                     "autoshard does not plan.")
    if goal == "finetune" and workload.trainable_parameter_count == workload.parameter_count:
        lines.append(f"Scope: this fine-tunes all {workload.parameter_count / 1e9:.3g}B parameters, and only "
                     "offloading makes that fit. A parameter-efficient method trains far fewer: a LoRA adapter "
                     "(peft's get_peft_model) leaves the base frozen, with no gradients or optimizer state for it, "
                     "and fit() given that module plans its trainable parameters only.")
    return tuple(lines)


def _nodes_to_hold(workload: Workload, hardware: HardwareSpec) -> str:
    """": the model states alone ... need at least N such nodes" when N > 1: the trainable parameters' weights,
    gradients and optimizer state (and the frozen weights) sharded over every GPU, before any activation — a lower
    bound."""
    from autoshard.profiler.options import Precision

    memory = hardware.device_memory_bytes or 0  # all of it, margin and context too: the bound stays a bound
    if memory <= 0:
        return ""
    element = 2 if workload.precision is Precision.BF16_TRUE else 4
    states = (workload.trainable_parameter_count * (2 * element + workload.optimizer_state_bytes_per_parameter)
              + workload.frozen_parameter_bytes)
    nodes = math.ceil(states / (memory * hardware.processes_per_node))
    return "" if nodes < 2 else (f": the model states alone ({_gib(states)}), sharded over every GPU, need at least "
                                 f"{nodes} such nodes before any activation")


SLOW_STEP_S = 600.0
"""An optimizer step predicted longer than this (ten minutes) is said in days per thousand steps: a plan can fit
and still be of no use (a probe's Llama-3.1-405B on one DGX H100: 6,573 s a step, said nowhere)."""


def slow_step(best: Evaluation) -> tuple[str, ...]:
    """A line when the recommended step is predicted to take longer than :data:`SLOW_STEP_S`."""
    if best.cost is None or best.cost.step_time_s <= SLOW_STEP_S:
        return ()
    step = best.cost.step_time_s
    return (f"Slow: {step:,.0f} s ({step / 3600:.2g} h) per optimizer step predicted, so 1,000 steps take "
            f"{1000 * step / 86400:,.0f} days: it fits, but more or larger GPUs are what would make it trainable.",)


def flat_adafactor(best: Evaluation, workload: Workload) -> tuple[str, ...]:
    """A line when ZeRO steps Adafactor: DeepSpeed hands the optimizer flat 1-D partitions, so what trains is not
    Adafactor's update (an optimizer probe: ZeRO-2 and ZeRO-3 losses left DDP's from the second step, with nothing
    said; the memory side is priced, ``deepspeed/optimizer_state.py``)."""
    from autoshard.strategies.deepspeed.optimizer_state import FLAT_SHAPED_OPTIMIZERS

    if best.traits.family != "deepspeed" or workload.optimizer not in FLAT_SHAPED_OPTIMIZERS:
        return ()
    return ("Adafactor under ZeRO: DeepSpeed hands the optimizer flat 1-D partitions, so it keeps a whole "
            "(unfactored) second moment and scales each update by a partition's RMS, not each tensor's: the "
            "training differs from Adafactor's, which DDP steps as it is.",)


def unused_under_zero(best: Evaluation, workload: Workload) -> tuple[str, ...]:
    """A line when ZeRO steps parameters the step leaves without a gradient: DeepSpeed's flat gradient partitions
    hold zeros for them, so the optimizer still moves them (a probe: a never-used head drifted by AdamW's weight
    decay under ZeRO-1 and ZeRO-3, an every-other-step one by its momentum too, where DDP and FSDP2 left them alone;
    recommend had said ZeRO needs no setting for them)."""
    if best.traits.family != "deepspeed" or workload.unused_parameter_count <= 0:
        return ()
    modules = ", ".join(workload.unused_modules[:3])
    return (f"Unused parameters under ZeRO: the step leaves {workload.unused_parameter_count:,} parameters without a "
            f"gradient ({modules}); DeepSpeed steps them with a zero gradient, so weight decay and momentum still "
            "change them, where DDP and FSDP2 (and a plain loop) leave a parameter without a gradient as it is.",)


RENORMED = "Embedding max_norm"
"""How :func:`renormed_embeddings`' line begins (``fit()`` repeats it among its notes)."""


def renormed_embeddings(best: Evaluation, hardware: HardwareSpec, workload: Workload) -> tuple[str, ...]:
    """A line when the model's embedding tables renormalise their rows in place in forward (``max_norm``) and the
    plan is not one process holding the whole model: each DDP rank writes its own replica, and FSDP2 and ZeRO write
    a copy the next step replaces (:mod:`autoshard.profiler.embeddings`)."""
    names = workload.renormed_embeddings
    family = best.traits.family
    if not names or (family == "ddp" and hardware.world_size <= 1):
        return ()
    how = {"ddp": "each rank renormalises the rows its own batch looks up in its own replica, so the replicas drift "
                  "apart",
           "fsdp": "FSDP2 renormalises the table it gathered for forward and then frees, never its stored shards"}.get(
        family, "ZeRO renormalises a copy (the table gathered for forward under ZeRO-3, the model's weights that "
                "the optimizer's own copy overwrites after each step under ZeRO-1 and -2)")
    tables = some_tables(names)
    return (f"{RENORMED} under {best.strategy}: {tables} renormalise the rows forward looks up, in place, which "
            f"only one process holding the whole model trains as written: {how}. Clip the rows looked up instead "
            "(rows * (max_norm / rows.norm(dim=-1, keepdim=True)).clamp(max=1)), which every strategy trains "
            "alike.",)


WRITTEN = "Parameters written in forward"
"""How :func:`written_in_forward`'s line begins (``fit()`` repeats it among its notes)."""


def written_in_forward(best: Evaluation, workload: Workload) -> tuple[str, ...]:
    """A line when the step writes parameters in place in forward or backward (an EMA updated in forward, a weight
    set by hand) and the plan shards them as FSDP2 or ZeRO-3 do: forward runs on copies gathered and then freed,
    so a write made while they are gathered is lost, and one made while they are sharded reaches this rank's shard
    alone (a multi-model probe: an EMA kept in forward moved under DDP, only in its blocks under FSDP2, not at all
    under ZeRO-3). Embedding tables with ``max_norm`` have their own line (:func:`renormed_embeddings`)."""
    sharded = best.traits.family == "fsdp" or best.traits.zero_stage == 3
    tables = set(workload.renormed_embeddings)
    modules = [m for m in workload.written_modules if m not in tables and m.rsplit(".", 1)[0] not in tables]
    if not sharded or not modules:
        return ()
    return (f"{WRITTEN} under {best.strategy}: the step writes the parameters of {', '.join(modules[:3])} in place "
            "(an EMA updated in forward, a weight set by hand), which FSDP2 and ZeRO-3 hold as shards and gather "
            "for a module's own forward alone: a write to gathered weights is lost when they are freed, and one to "
            "sharded weights reaches this rank's shard alone. Update them after the optimizer step, outside "
            "forward, or train with ddp or ZeRO-1/2.",)


def frozen_behind(best: Evaluation, workload: Workload) -> tuple[str, ...]:
    """A line when ZeRO-3 trains parameters that sit behind frozen ones (LoRA adapters, norm-only tuning): its own
    linear keeps every frozen linear's input for backward, which the plan does not count."""
    numels = workload.module_parameter_numels  # frozen ones negated; empty when everything trains
    first = first_trainable(numels)
    if best.traits.family != "deepspeed" or best.traits.zero_stage != 3 or not any(n < 0 for n in numels[first:]):
        return ()
    return ("Unchecked: under ZeRO-3, DeepSpeed's own linear (runtime/zero/linear.py) keeps the input of every "
            "frozen linear layer for backward, which this plan does not count: with trainable parameters behind "
            "frozen ones, as here, real peaks ran 8-17 % above the prediction on CPU processes (LoRA, norm-only "
            "tuning; docs/strategies/deepspeed.md). Keep that headroom, or plan ZeRO-2 or FSDP "
            "(--strategies), whose predictions matched.",)


def whole_build(best: Evaluation, hardware: HardwareSpec, workload: Workload) -> tuple[str, ...]:
    """A line when building the model whole in every rank of a node, as a training script that constructs or
    loads it on each rank does (and ``fit()`` for all but catalog models sharded at rest), needs more host RAM
    than the node has: the plan's per-GPU memory can fit and the processes still be killed while they build (a
    probe's Llama-2-7B on eight GPUs of a 64 GiB host: 8 × 25.1 GiB). Said, not refused: a script can build on
    its GPU or the meta device, or load rank by rank."""
    from autoshard.planner.search import HOST_MEMORY_FRACTION
    from autoshard.profiler.options import Precision

    ram, ranks = hardware.node.cpu.memory_available_bytes, hardware.processes_per_node
    if ram is None or ranks < 2 or hardware.gpu is None:  # CPU processes: their memory, checked, is the host's
        return ()
    frozen = -sum(n for n in workload.module_parameter_numels if n < 0)
    element = 2 if workload.precision is Precision.BF16_TRUE else 4  # the default dtype the model is built in
    model = (workload.trainable_parameter_count * element + (workload.frozen_parameter_bytes or frozen * element)
             + workload.buffer_bytes)
    usable = ram * HOST_MEMORY_FRACTION
    if ranks * model <= usable:
        return ()
    how = ("on the meta device and let FSDP2 / ZeRO-3 materialise each rank's shard (fit() does for catalog models; "
           "deepspeed.zero.Init for ZeRO-3)" if best.traits.sharded_at_rest else
           "straight onto its GPU (with torch.device('cuda'): ...)")
    return (f"Host RAM: building the model whole in each of a node's {ranks} ranks, as a script that constructs or "
            f"loads it per rank does, takes {ranks} × {_gib(model)} = {_gib(ranks * model)}, above the "
            f"{_gib(usable)} usable of this node's {_gib(ram)}: build it {how}, or load it one rank at a time.",)


def _gib(x: float) -> str:
    return f"{x / 2**30:.1f} GiB"


def _count_gpus(n: int) -> str:
    return "GPU" if n == 1 else f"{n} GPUs"
