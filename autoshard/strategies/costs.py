"""Shared cost formulas: compute time from FLOPs, collective time over the right link, overlap.

Collective times follow the ring formulas nccl-tests uses to turn time into bus bandwidth
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): for a payload of S bytes over n ranks,
all-reduce moves 2(n-1)/n·S per rank, reduce-scatter and all-gather (n-1)/n·S, broadcast S. The time is that
traffic over the bus bandwidth of the slowest link the ring crosses, plus a latency term per step of the ring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autoshard.hardware.specs import UNKNOWN_LINK_BYTES_PER_S, HardwareSpec
from autoshard.profiler.checkpointing import parse_checkpointing
from autoshard.profiler.options import Precision, steps_tensor_by_tensor
from autoshard.strategies import step_time
from autoshard.strategies.base import Collective

if TYPE_CHECKING:
    from autoshard.strategies.workload import StepTrace, Workload

MFU = 0.40
"""Fallback only, for a profile without an op census (:mod:`autoshard.strategies.step_time` prices the traced
ops otherwise): an assumed fraction of the GPU's dense peak (model FLOPs utilisation). Large transformer
training reports 40–55 % (PaLM, Chowdhery et al. 2022, Table 3: 46.2 %; Megatron-LM, Narayanan et al. 2021:
52 % of peak on A100)."""

LINK_EFFICIENCY = 0.80
"""Assumed fraction of a link's nominal bandwidth NCCL reaches as bus bandwidth on large messages (an
assumption to calibrate on hardware; nccl-tests on NVLink/InfiniBand typically reach 75–95 %)."""

DEFAULT_LATENCY_S = {"intra": 5e-6, "inter": 20e-6}
"""Per-hop latency when the hardware profile gives none (order of magnitude; an assumption)."""


CPU_ADAMW_PARAMETERS_PER_S_PER_THREAD = 3.0e8
"""``torch.optim.AdamW(foreach=False)`` on fp32 CPU tensors: 3.0e8 parameters/s on one thread, measured with
torch 2.13.0 on this project's 2-core AMD EPYC build machine (16M parameters in 8 tensors, 5 steps: 53.5 ms per
step; ``docs/strategies/fsdp.md``, "CPU optimizer"). The step is memory-bound, so faster cores change it little."""

ADAMW_TRACED_BYTES_PER_PARAMETER = 84.0
"""Bytes per parameter that the traced step of that measured optimizer (torch's AdamW on fp32) reads and writes
(:func:`autoshard.strategies.step_time.optimizer_seconds`). Other optimizers and dtypes are priced at the same
traced bytes per second (:func:`cpu_optimizer_seconds`)."""

CPU_OPTIMIZER_THREADS = 1
"""Threads :func:`cpu_optimizer_seconds` prices when its caller names none: the one thread its measured rate
(:data:`CPU_ADAMW_PARAMETERS_PER_S_PER_THREAD`) is per. A plan's host step runs on
:func:`host_threads_per_rank` threads: the launches autoshard writes and runs set ``OMP_NUM_THREADS`` to that, where
torchrun alone would give each of several processes per node one thread (``torch/distributed/run.py``, torch 2.13.0)
and ``accelerate launch`` one to every process (``--num_cpu_threads_per_process``, accelerate 1.15.0)."""

UNKNOWN_HOST_CORES = 8
"""Cores assumed for a host the hardware does not describe (a GPU profile alone, a node file without ``cpu``): the
low end of a GPU workstation's CPU (8-16 cores on a desktop; a GPU server has 32-112). Shared by the node's ranks,
so the node's host optimizer step (DeepSpeed's CPU Adam, FSDP's CPU offload) does not grow with its GPUs: one
thread per rank instead would price two GPUs' offloaded step at more than twice one GPU's throughput. An
assumption, said in the step's notes."""

UNKNOWN_HOST_MEMORY_BYTES_PER_S_PER_CORE = 76.8e9 / UNKNOWN_HOST_CORES
"""Peak DRAM bandwidth assumed per host core where the hardware does not give the host's (a GPU profile alone, a
node file or ``--cpu-cores`` without ``cpu_memory_bandwidth``): a GPU workstation's two channels of DDR5-4800
(2 x 8 bytes x 4,800 MT/s = 76.8 GB/s; JEDEC JESD79-5) over the :data:`UNKNOWN_HOST_CORES` cores assumed for it,
9.6 GB/s a core (a 16-core workstation's four channels: 153.6 GB/s). A server gives each core less (a DGX H100's
614.4 GB/s over 112 cores is 5.5), so for a large host this bound is loose, not tight. Without it an undescribed
host's optimizer step was priced as if bandwidth were unlimited: DeepSpeed's CPU Adam on 8 threads at 8e9
parameters/s is 224 GB/s of DRAM traffic. An assumption, said in the step's notes and in the plan's "Assumed:"
line."""

HOST_MEMORY_EFFICIENCY = 0.8
"""Fraction of the host's peak DRAM bandwidth a streaming loop reaches on a two-socket server (STREAM triad
typically reaches 75-85 %; J. McCalpin, STREAM benchmark, https://www.cs.virginia.edu/stream/). An assumption
that ``benchmarks/step_time_fit.py`` can refit."""


CLIP_PASSES = 3
"""Gradient clipping (``torch.nn.utils.clip_grad_norm_``) reads every gradient for the norm, then reads and writes
it to scale it: three passes over the gradient bytes."""

FOREACH_ELEMENTS_PER_LAUNCH = 320 * 65536
"""Elements one ``foreach`` kernel launch covers at most (``multi_tensor_apply``: chunks of 65,536 elements, 320
blocks per launch; ``ATen/native/cuda/MultiTensorApply.cuh``); it also takes at most 110 tensors."""

CPU_PLACEHOLDER_FLOPS_PER_S = 1e11
"""Stand-in throughput (100 GFLOP/s achieved) when the hardware has no GPU peak (CPU processes): an assumption so
that a CPU-only plan still ranks its candidates; absolute times mean nothing then, and the notes say so."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Link:
    """The link a collective's ring is limited by."""

    bandwidth_bytes_per_s: float
    latency_s: float
    known: bool


def bus_bandwidth_bytes_per_s(hardware: HardwareSpec, scope: str) -> float | None:
    """The nominal bus bandwidth bound of a collective of ``scope`` (``None`` when the hardware does not say):
    ``intra`` (within a node), ``world`` (one ring over every rank of several nodes) or ``inter`` (one group per
    local rank, each of one rank per node, all at once). On one node every scope is the intra-node link.

    A ``world`` ring crosses each node boundary once per NCCL channel, and the channels spread over the node's
    NICs, so its bus bandwidth is the node's whole network bandwidth, capped by the intra-node link: NCCL's
    maintainers measure 192 GB/s all-reduce bus bandwidth across DGX A100 nodes with 8 × 200 Gb/s HDR NICs
    (NVIDIA/nccl#812, quoted in #1576), and ~24 GB/s inter-node with one such NIC per node (NVIDIA/nccl#412).
    The ``inter`` groups (hybrid sharding's replica all-reduce) run side by side and share the node's NICs: each
    gets ``1 / processes_per_node`` of them.
    """
    intra_bw = hardware.node.intra_node_bandwidth_bytes_per_s
    if scope == "intra" or hardware.nodes == 1:
        return intra_bw
    if hardware.inter_node_bandwidth_bytes_per_s is None:  # across nodes the network bounds it, and is not known
        return None
    return _across_nodes(hardware, scope, hardware.inter_node_bandwidth_bytes_per_s)


def _across_nodes(hardware: HardwareSpec, scope: str, network_bytes_per_s: float) -> float:
    """A collective's bus bandwidth across nodes whose network gives ``network_bytes_per_s`` per node: shared by
    the ``inter`` groups, capped by the intra-node link."""
    intra_bw = hardware.node.intra_node_bandwidth_bytes_per_s
    inter_bw = network_bytes_per_s / (max(1, hardware.processes_per_node) if scope == "inter" else 1)
    return inter_bw if intra_bw is None else min(intra_bw, inter_bw)


def link(hardware: HardwareSpec, scope: str) -> Link:
    """The link a collective of ``scope`` is limited by: :func:`bus_bandwidth_bytes_per_s` at
    :data:`LINK_EFFICIENCY`, :data:`UNKNOWN_LINK_BYTES_PER_S` where the hardware does not say. Across nodes the
    link counts as known only when the node's network bandwidth is; without it, :data:`UNKNOWN_LINK_BYTES_PER_S`
    (until 2026-11-30 the intra-node link's: three DGX H100 nodes without a network entry were priced as if NVLink
    joined them, while the note said 10 GB/s)."""
    bw = bus_bandwidth_bytes_per_s(hardware, scope)
    if scope == "intra" or hardware.nodes == 1:
        latency, known = DEFAULT_LATENCY_S["intra"], bw is not None
    else:
        latency = hardware.inter_node_latency_s or DEFAULT_LATENCY_S["inter"]
        known = bw is not None and hardware.inter_node_bandwidth_bytes_per_s is not None
        if hardware.inter_node_bandwidth_bytes_per_s is None:  # the assumed network is the node's, as the notes say
            bw = _across_nodes(hardware, scope, UNKNOWN_LINK_BYTES_PER_S)  # (hybrid's groups each got all of it)
    return Link(bandwidth_bytes_per_s=(bw or UNKNOWN_LINK_BYTES_PER_S) * LINK_EFFICIENCY, latency_s=latency,
                known=known)


_TRAFFIC = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
            "all_gather": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}
_HOPS = {"all_reduce": lambda n: 2 * (n - 1), "reduce_scatter": lambda n: n - 1, "all_gather": lambda n: n - 1,
         "broadcast": lambda n: n - 1}


def collective_seconds(collective: Collective, hardware: HardwareSpec) -> float:
    """Time of ``collective`` (all its calls) on ``hardware`` with the ring model above."""
    n = collective.group_size
    if n <= 1 or collective.bytes == 0:
        return 0.0
    ln = link(hardware, collective.scope)
    traffic = _TRAFFIC[collective.kind](n) * collective.bytes
    return traffic / ln.bandwidth_bytes_per_s + collective.calls * _HOPS[collective.kind](n) * ln.latency_s


def compute_seconds(flops: float, hardware: HardwareSpec, dtype: str, *, mfu: float = MFU) -> float | None:
    """Time to run ``flops`` on one GPU at ``mfu`` of its dense ``dtype`` peak; ``None`` if the peak is unknown."""
    gpu = hardware.gpu
    if gpu is None:
        return None
    peak = gpu.peak_tflops.for_dtype(dtype)
    if peak is None:
        return None
    return flops / (peak * 1e12 * mfu)


def exposed(communication_s: float, overlappable_compute_s: float) -> float:
    """Communication left after hiding it behind ``overlappable_compute_s`` of concurrent compute."""
    return max(0.0, communication_s - overlappable_compute_s)


OVERLAP_COMPUTE_SLOWDOWN = 0.189
"""How much longer compute kernels run while collectives run beside them on the same GPU (NCCL's kernels hold SMs
and draw on the same memory bandwidth): 18.9 % on average (at most 40 %) against the same kernels with nothing
beside them, measured training GPT and Llama models on A100, H100, MI250 and MI210 (Lee et al. 2025,
"Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning: Performance and Power
Implications", arXiv 2507.03114, abstract). A sourced average, not fitted to autoshard's points; one value for
every GPU, since the source gives one."""


def contention_seconds(hidden_s: float, window_s: float, hardware: HardwareSpec) -> tuple[float, str | None]:
    """Compute time lost to the collectives hidden behind it, and the note saying so: during the ``hidden_s`` a
    collective runs beside compute (at most the ``window_s`` of compute it can hide behind), the compute kernels
    run :data:`OVERLAP_COMPUTE_SLOWDOWN` slower, so the compute that fell in that time, ``hidden / (1 + s)`` alone,
    takes ``s / (1 + s) · hidden`` longer. 0 off CUDA (gloo's collectives run on the host's threads).

    Example:
        >>> from autoshard.hardware import load_hardware
        >>> round(contention_seconds(1.0, 5.0, load_hardware("dgx-h100"))[0], 4)
        0.159
    """
    if hardware.device_type != "cuda" or hidden_s <= 0 or window_s <= 0:
        return 0.0, None
    slowdown = OVERLAP_COMPUTE_SLOWDOWN
    hidden = min(hidden_s, window_s)
    lost = hidden * slowdown / (1 + slowdown)
    return lost, (f"contention: {_ms(hidden)} of compute ran beside hidden collectives, {100 * slowdown:.1f} % "
                  f"slower (NCCL's kernels share the SMs and memory bandwidth; Lee et al. 2025, arXiv 2507.03114): "
                  f"+{_ms(lost)}, counted as exposed communication")


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.1f} ms"


def step_compute_seconds(trace: StepTrace, micro_batch: int, hardware: HardwareSpec,
                         dtype: str, *, host_extra_s: float = 0.0, tf32_matmuls: bool = False) -> tuple[float, str]:
    """Compute time of ``micro_batch`` samples' forward + backward on one device, and the note explaining it.

    On a GPU, the traced step's op census priced by :func:`autoshard.strategies.step_time.estimate` (matmuls at
    the GPU model's achievable tensor-core rate, memory-bound ops at its achievable bandwidth, a launch floor
    per kernel; the host's time per kernel and per checkpointed block bounds it from below; ``host_extra_s``, a
    strategy's own host time per step, joins the launches on the host's side; ``tf32_matmuls``: fp32 matmuls on
    TF32 tensor cores).
    Without a census, MFU × the GPU's dense ``dtype`` peak; without a GPU peak,
    :data:`CPU_PLACEHOLDER_FLOPS_PER_S`.
    """
    census = trace.at_1.census
    if hardware.gpu is not None and census is not None:
        op_selective = parse_checkpointing(trace.at_1.options.checkpointing).mode == "op"
        estimate = step_time.estimate(census, micro_batch, hardware.gpu, host_extra_s=host_extra_s,
                                      checkpointed_blocks=trace.at_1.checkpointed_blocks,
                                      checkpoint_block_s=step_time.OP_CHECKPOINT_BLOCK_S if op_selective
                                      else step_time.CHECKPOINT_BLOCK_S, tf32_matmuls=tf32_matmuls,
                                      census_2=trace.at_2.census)
        if estimate is not None:
            return estimate.seconds, estimate.note
    flops = trace.flops_per_sample() * micro_batch
    seconds = compute_seconds(flops, hardware, dtype)
    if seconds is None:
        return flops / CPU_PLACEHOLDER_FLOPS_PER_S, (
            "compute speed unknown (no GPU peak for this hardware): a placeholder of "
            f"{CPU_PLACEHOLDER_FLOPS_PER_S / 1e9:g} GFLOP/s is assumed, for ranking only"
        )
    return seconds, f"compute at MFU {MFU:g} of the GPU's dense {dtype} peak (the profile has no op census)"


def host_link_bytes_per_s(hardware: HardwareSpec) -> tuple[float, list[str]]:
    """Achievable bandwidth of the GPU's host link (offload traffic), with a note when it is unknown."""
    link_spec = hardware.gpu.host_link if hardware.gpu is not None else None
    if link_spec is None:
        return UNKNOWN_LINK_BYTES_PER_S * LINK_EFFICIENCY, [
            f"host link unknown: {UNKNOWN_LINK_BYTES_PER_S / 1e9:g} GB/s assumed per direction"
        ]
    return link_spec.bandwidth_bytes_per_s * LINK_EFFICIENCY, []


def optimizer_step_bytes_per_parameter(workload: Workload, checkpointing: bool) -> float | None:
    """Bytes the traced optimizer step (mode ``amp``, the precision the optimizer steps in) reads and writes per
    trainable parameter; ``None`` without a traced step."""
    census = workload.trace("amp", checkpointing).at_1.optimizer_census
    if census is None:
        return None
    return (census.memory_bytes + sum(c.bytes for c in census.matmuls)) / max(1, workload.trainable_parameter_count)


def optimizer_step_seconds(workload: Workload, hardware: HardwareSpec, checkpointing: bool, *, shard: int = 1,
                           flat: bool = False) -> tuple[float, str | None]:
    """GPU time of the optimizer step on one rank (not hidden: it runs after backward), with the gradient clipping
    before it when the run clips (:func:`grad_clip_seconds`), and its note.

    The optimizer step traced in the user's precision (mode ``amp``: the fp32 master weights of mixed
    precision, which DDP, FSDP's sharded parameters and DeepSpeed's ZeRO partitions all step), priced by
    :func:`autoshard.strategies.step_time.optimizer_seconds` on ``1 / shard`` of the parameters. ``flat``:
    DeepSpeed steps one flat fp32 partition, so an optimizer that steps tensor by tensor (torch's for-loop,
    bitsandbytes) launches its per-tensor kernels once.
    Zero without a GPU or without a traced optimizer step.
    """
    census = workload.trace("amp", checkpointing).at_1.optimizer_census
    if hardware.gpu is None or census is None:
        return 0.0, None
    kernels = None
    if flat and steps_tensor_by_tensor(workload.optimizer, workload.optimizer_impl):
        kernels = max(1, census.kernels // max(1, len(workload.parameter_numels)))
    seconds = step_time.optimizer_seconds(census, hardware.gpu, shard=1 / max(1, shard), kernels=kernels)
    per = optimizer_step_bytes_per_parameter(workload, checkpointing) or 0.0
    where = "all parameters" if shard <= 1 else f"1/{shard} of the parameters"
    note = (f"optimizer step on the GPU: {seconds * 1e3:.3g} ms ({where}; the traced step reads and "
            f"writes {per:.0f} bytes per parameter, priced at the memory-bound rate)")
    clip_s, clip_note = grad_clip_seconds(workload, hardware, shard=shard, tensors=1 if flat else None)
    return seconds + clip_s, note if clip_note is None else f"{note}; {clip_note}"


def host_threads_per_rank(cores: int, processes_per_node: int) -> int:
    """Threads each of a node's ``processes_per_node`` ranks gets for its work on the host (the optimizer step of a
    plan that offloads it): its share of the node's ``cores``, at least one.

    The one rule for that number: the cost model prices it (:func:`cpu_optimizer_threads`), ``fit()``'s workers
    get it as ``OMP_NUM_THREADS`` (:func:`autoshard.runtime.workers.host_thread_environ`), and the exported launch
    scripts compute it on each node from ``nproc`` (:func:`autoshard.export.launch.omp_threads_line`, which a
    test holds to this function), in each case unless ``OMP_NUM_THREADS`` is already set.

    Example:
        >>> host_threads_per_rank(48, 8), host_threads_per_rank(8, 1), host_threads_per_rank(4, 8)
        (6, 8, 1)
    """
    return max(1, cores // max(1, processes_per_node))


def host_memory_bytes_per_s(hardware: HardwareSpec) -> tuple[float, str]:
    """The node's peak DRAM bandwidth its host optimizer steps are bounded by, and how it is known: the hardware's
    own, else :data:`UNKNOWN_HOST_MEMORY_BYTES_PER_S_PER_CORE` times its cores (known, or
    :data:`UNKNOWN_HOST_CORES`; at least that many: a desktop of fewer cores still has its two channels), with a
    note saying so.

    Example:
        >>> from autoshard.hardware import load_hardware
        >>> host_memory_bytes_per_s(load_hardware("rtx-4090"))[0] / 1e9  # a GPU profile: a workstation assumed
        76.8
        >>> host_memory_bytes_per_s(load_hardware("dgx-h100"))  # the profile's own
        (614400000000.0, '')
    """
    cpu = hardware.node.cpu
    if cpu.memory_bandwidth_bytes_per_s is not None:
        return cpu.memory_bandwidth_bytes_per_s, ""
    cores = max(cpu.usable_cores or cpu.physical_cores or UNKNOWN_HOST_CORES, UNKNOWN_HOST_CORES)
    bandwidth = cores * UNKNOWN_HOST_MEMORY_BYTES_PER_S_PER_CORE
    return bandwidth, (f" (the host's memory bandwidth unknown: {bandwidth / 1e9:.4g} GB/s assumed, two channels "
                       "of DDR5-4800 for every 8 cores, at least two; a node file with cpu_memory_bandwidth gives "
                       "the host's)")


def cpu_optimizer_threads(hardware: HardwareSpec) -> tuple[int, str]:
    """Threads one rank's CPU optimizer step runs on, and how that was decided: the node's cores shared by its
    ranks (:func:`host_threads_per_rank`; :data:`UNKNOWN_HOST_CORES` when the cores are unknown), as the launches
    autoshard writes and runs set ``OMP_NUM_THREADS``.

    Example:
        >>> from autoshard.hardware import load_hardware
        >>> cpu_optimizer_threads(load_hardware("dgx-h100"))[0]  # a DGX H100's 112 cores shared by its 8 ranks
        14
    """
    ranks = max(1, hardware.processes_per_node)
    known = hardware.node.cpu.usable_cores or hardware.node.cpu.physical_cores
    cores = known or UNKNOWN_HOST_CORES
    threads = host_threads_per_rank(cores, ranks)
    how = (f"{threads} thread(s) per rank ({cores} cores / {ranks} rank(s) per node; autoshard's exported "
           f"launches, fit() and tune's trials set OMP_NUM_THREADS={threads}, the node's cores // its ranks, "
           "unless it is set)")
    if not known:
        how += (f"; the host's cores unknown: {UNKNOWN_HOST_CORES} assumed (--cpu-cores, or a node file with "
                "cpu_cores, prices the host)")
    return threads, how


def cpu_optimizer_seconds(elements: int, step_bytes_per_parameter: float, threads: int = CPU_OPTIMIZER_THREADS,
                          host_bandwidth: float | None = None, *, ranks: int = 1) -> float:
    """One rank's CPU optimizer step over ``elements`` parameters whose traced step reads and writes
    ``step_bytes_per_parameter`` bytes each on ``threads`` threads: the step is memory-bound, so it is priced at
    the traced bytes per second of the measured one (AdamW on fp32, :data:`CPU_ADAMW_PARAMETERS_PER_S_PER_THREAD`)
    per thread, at most the host's memory bandwidth (``host_bandwidth``, when known) at
    :data:`HOST_MEMORY_EFFICIENCY`, shared by the node's ``ranks``, which step at once after backward (as
    :func:`autoshard.strategies.deepspeed.offload_cost.cpu_adam_parameters_per_s` shares it).

    Checked by ``benchmarks/cpu_optimizer.py`` (``docs/benchmarks/cpu_optimizer.md``): it errs slow for SGD (the
    traced bytes price it 2.6 x faster than AdamW; it measured 3.1-6.6 x) and is within about 25 % for the others.

    Example:
        >>> round(cpu_optimizer_seconds(3 * 10**8, 84.0), 3), round(cpu_optimizer_seconds(3 * 10**8, 32.0), 3)
        (1.0, 0.381)
        >>> shared = [cpu_optimizer_seconds(10**9, 84.0, 64, 100e9, ranks=r) for r in (1, 2)]  # DRAM-bound
        >>> [round(s, 2) for s in shared]
        [1.05, 2.1]
    """
    rate = CPU_ADAMW_PARAMETERS_PER_S_PER_THREAD * ADAMW_TRACED_BYTES_PER_PARAMETER * max(1, threads)
    if host_bandwidth is not None:
        rate = min(rate, host_bandwidth * HOST_MEMORY_EFFICIENCY / max(1, ranks))
    return elements * step_bytes_per_parameter / rate


def grad_clip_seconds(workload: Workload, hardware: HardwareSpec, *, shard: int = 1, tensors: int | None = None,
                      on_host: bool = False) -> tuple[float, str | None]:
    """Time of clipping the gradients on one rank when the run clips (:attr:`Workload.grad_clip_norm`), and its
    note; ``(0.0, None)`` when it does not.

    Three passes over the rank's gradients (:data:`CLIP_PASSES`: the norm, then the scaling), in the dtype the
    optimizer steps (fp32 but for ``bf16-true``): on the GPU at the memory-bound rate with ``foreach`` launches
    (torch's default on CUDA), each at least the host time of an optimizer step's kernel
    (:data:`~autoshard.strategies.step_time.OPTIMIZER_LAUNCH_S`: one function looping over tensors, no modules or
    autograd); on the host (``on_host``: CPU offload) at the CPU optimizer's measured rate.
    ``shard``: the ranks the gradients are split over (FSDP, ZeRO); ``tensors``: gradient tensors per rank (1 for
    DeepSpeed's flat partition; default: the model's). The all-reduce of the shards' norms (one scalar) is not
    priced.
    """
    if workload.grad_clip_norm is None:
        return 0.0, None
    elements = workload.trainable_parameter_count / max(1, shard)
    grad_bytes = 2 if workload.precision is Precision.BF16_TRUE else 4
    where = "all gradients" if shard <= 1 else f"1/{shard} of the gradients"
    if on_host:
        threads, _ = cpu_optimizer_threads(hardware)
        seconds = cpu_optimizer_seconds(int(elements), CLIP_PASSES * grad_bytes, threads,
                                        host_memory_bytes_per_s(hardware)[0], ranks=hardware.processes_per_node)
        return seconds, (f"gradient clipping at norm {workload.grad_clip_norm:g} on the host: {seconds * 1e3:.3g} ms "
                         f"(a norm and a scaling pass over {where}, at the CPU optimizer's rate)")
    if hardware.gpu is None:
        return 0.0, None
    count = len(workload.parameter_numels) if tensors is None else tensors
    launches = max(math.ceil(count / 110), math.ceil(elements / FOREACH_ELEMENTS_PER_LAUNCH), 1)
    kernels = 2 * launches + 3  # foreach norm and scale, plus the norms' stack, total norm and clamp
    seconds = max(step_time.memory_bound_seconds(CLIP_PASSES * grad_bytes * elements, hardware.gpu, kernels=kernels),
                  kernels * step_time.OPTIMIZER_LAUNCH_S)
    return seconds, (f"gradient clipping at norm {workload.grad_clip_norm:g}: {seconds * 1e3:.3g} ms "
                     f"(clip_grad_norm_: a norm and a scaling pass over {where}, "
                     f"{CLIP_PASSES * grad_bytes} bytes per parameter at the memory-bound rate)")
