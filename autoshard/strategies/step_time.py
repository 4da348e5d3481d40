"""Compute time of one step on one GPU from the traced step's op census, not from one MFU for every model.

The model (compute, memory bandwidth and overhead: the three regimes of H. He, "Making Deep Learning Go Brrrr
From First Principles", 2022, https://horace.io/brrr_intro.html), per class of the census
(:mod:`autoshard.profiler.op_census`), at micro-batch ``b`` (FLOPs and bytes scale with ``b``, the kernel count
does not):

* **matmul-class kernels** (GEMMs, grouped GEMMs, convolutions): a roofline per class (Williams et al. 2009):
  ``max(FLOPs / (peak[dtype] · matmul), bytes / (bandwidth · memory), kernels · floor)``. ``matmul`` is the
  fraction of the dense peak large GEMMs reach on this GPU model (``matmul_fp32`` for fp32 on CUDA cores and
  ``matmul_tf32`` on TF32 tensor cores, where the profile has them); the memory term is what makes small-``M``
  GEMMs (arithmetic intensity about their smallest dimension, below the GPU's ridge point) slower per FLOP.
  A 16-bit GEMM whose leading dimensions are not 16-byte aligned (the census's ``alignment``) runs at
  ``unaligned_matmul`` (4- or 8-byte aligned) or ``unaligned_matmul_2b`` (2-byte) of that rate, where the profile
  has them: on an H200, GPT-2's LM head at its vocabulary of 50,257 takes 5.6 × the time of the same GEMM padded
  to 50,304, and 3.0 × at 50,258 or 50,260 (``docs/benchmarks/gpu_kernels.md``);
* **attention** (the fused SDPA kernels): the same with ``attention``, the fraction flash attention reaches, over
  the FLOPs the kernels compute: a causal kernel skips the score tiles above the diagonal
  (:func:`autoshard.profiler.op_census.causal_work_fraction`: about half), while the step's FLOPs (and the TFLOP/s
  and MFU computed from them) count the full scores, as published MFU figures do;
* **memory-bound kernels** (elementwise, norms, softmax, casts, copies): ``max(bytes / (bandwidth · memory),
  kernels · floor)`` per size class;
* **fp32 convolutions** run on TF32 tensor cores where the GPU has them: cuDNN may use TF32 for them by default
  (``torch.backends.cudnn.allow_tf32 = True``, ``torch.backends.cudnn.conv.fp32_precision = "tf32"`` in torch
  2.13; PyTorch's "TensorFloat-32 (TF32) on Ampere (and later) devices" note), while fp32 matmuls stay on the fp32
  rate (``torch.backends.cuda.matmul.allow_tf32 = False``) unless the run sets
  ``torch.set_float32_matmul_precision("high")`` (``tf32_matmuls``);
* kernels run one after another on one stream, so the GPU's time is the **sum** over classes; the host must
  also launch every kernel, so the step takes ``max(GPU time, kernels · launch + checkpointed blocks · block)``:
  with small kernels, the host's overhead is the floor (``launch``: its time per kernel, :data:`LAUNCH_S`;
  ``block``: activation checkpointing's own work per block, :data:`CHECKPOINT_BLOCK_S` or
  :data:`OP_CHECKPOINT_BLOCK_S`; both measured).

``matmul`` (and ``matmul_fp32``, ``matmul_tf32``), ``attention`` and ``memory`` are per-GPU-model constants in
``profiles/gpus/*.yaml`` (:class:`autoshard.hardware.specs.Achievable`), each with its source; a GPU without them gets
:data:`GENERIC`, and the note says so. The census is taken at micro-batch 1, so its shape classes are those of
micro-batch 1: a larger batch only makes the batch-sized GEMM dimension larger, so the estimate errs slow.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoshard.hardware.specs import DTYPES, Achievable, GPUSpec
from autoshard.profiler.op_census import ALIGNED, MatmulClass, OpCensus

KERNEL_RATES = Achievable(matmul=0.80, attention=0.35, memory=0.88)
"""What kernels alone reach on a GPU without measurements: the lowest NVIDIA data-centre entry of the maximum
achievable matmul FLOPS table (H100 SXM, 80.3 %: S. Bekman, Machine Learning Engineering,
``compute/accelerator/README.md``), FlashAttention-2's 35 % on H100 (Shah et al. 2024, arXiv 2407.08608), and
88 % of the memory bandwidth (1.80 of 2.04 TB/s measured on an A100, NVIDIA developer forums, 2025)."""

WHOLE_STEP_FACTOR = 0.682
"""What whole training steps reach of their kernels' rates: the median of the per-GPU-model factors fitted on
published runs (``benchmarks/step_time_fit.py``, the ``fit`` half; ``profiles/gpus/*.yaml`` name each): V100 SXM2
0.517, H100 SXM 0.682, A100 SXM 0.803."""

GENERIC = Achievable(matmul=round(KERNEL_RATES.matmul * WHOLE_STEP_FACTOR, 3),
                     attention=round(KERNEL_RATES.attention * WHOLE_STEP_FACTOR, 3), memory=KERNEL_RATES.memory)
"""Fractions for a GPU model whose profile has none (consumer and inference cards): :data:`KERNEL_RATES` times
:data:`WHOLE_STEP_FACTOR` for the tensor cores, as the fitted profiles are (their kernel-level figure times their
own factor); the memory bandwidth's kept, as theirs is. Before 2026-11-30 the kernel-level rates alone: an RTX 4090
was predicted at a higher fraction of its peak than any GPU with measurements (a new user's report)."""

KERNEL_FLOOR_S = 3e-6
"""Shortest time a kernel occupies the GPU, launch latency included: short kernels launched back to back take
about 3-4 µs each (A. Gray, "Getting Started with CUDA Graphs", NVIDIA technical blog, 2019)."""

LAUNCH_S = 16.4e-6
"""Host time per kernel of a forward + backward in PyTorch eager mode (Python, the module calls, the dispatcher,
autograd, the launch), per kernel the op census counts: 16.4 µs, the median over narrow copies of BERT-large,
GPT-2 medium, Llama 3.2 1B and T5-base at their real depth (range 11.8-24.6 µs), measured on the CPU by
``benchmarks/host_overhead.py`` with torch 2.13.0 (``docs/benchmarks/host_overhead.md``; runs of the same morning
gave 16-20 µs, this VM's drift). It bounds the step only where kernels are short (the "overhead" regime of He
2022, above)."""

CHECKPOINT_BLOCK_S = 1.355e-3
"""Host time activation checkpointing adds per block checkpointed whole (``full``, ``every-N``) beyond its kernels
(whose recomputation the census counts): torch's non-reentrant checkpoint wrapper's saved-tensor hooks, RNG state
and the recomputation's Python. 1.36 ms, the median over the same four models (range 1.31-1.57 ms), measured by
the same benchmark with ``fit()``'s wrapper (:func:`autoshard.runtime.activation_checkpointing.checkpoint_blocks`)
as the checkpointed step's host time less its kernels at the plain step's cost per kernel of the same model, over
its blocks."""

OP_CHECKPOINT_BLOCK_S = 3.955e-3
"""Host time the op-selective policy (torchtitan's, ``checkpoint(..., context_fn=...)``) adds per block beyond its
kernels: the policy is a Python function that every op of the block passes through, in forward and again in the
recomputation. 3.96 ms, the median over the same four models (range 3.03-5.26 ms), measured as
:data:`CHECKPOINT_BLOCK_S` is, under ``checkpoint_blocks(..., "op")``."""

OPTIMIZER_LAUNCH_S = 5.1e-6
"""Host time per kernel of an optimizer step: 5.1 µs, the median of torch's for-loop AdamW step over the same
models' parameters (range 4-5.5 µs; ``docs/benchmarks/host_overhead.md``): a loop over tensors in one function,
without module calls or autograd."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepTime:
    """Compute time of one micro-batch's forward + backward on one GPU, by part."""

    seconds: float
    """The step's compute time: ``max(gpu_s, launch_s)``."""
    matmul_s: float
    attention_s: float
    memory_s: float
    gpu_s: float
    """``matmul_s + attention_s + memory_s``: the GPU's busy time."""
    launch_s: float
    """The host's time: every kernel's launch, checkpointing's work per block and a strategy's own host time."""
    flops: int
    note: str

    @property
    def achieved_tflops(self) -> float:
        """FLOPs over the step's compute time, in TFLOP/s."""
        return self.flops / self.seconds / 1e12 if self.seconds > 0 else 0.0


def _priced_dtype(kind: str, dtype: str, gpu: GPUSpec, tf32_matmuls: bool) -> str:
    """The dtype whose peak a matmul-class kernel runs at: fp32 at TF32 where the GPU has it, for a convolution
    always (cuDNN's default), for GEMMs with ``tf32_matmuls``, never for an FFT (cuFFT computes in fp32)."""
    tf32 = (dtype == "fp32" and gpu.peak_tflops.tf32 is not None and (kind == "conv" or tf32_matmuls)
            and kind != "fft")
    return "tf32" if tf32 else dtype


def matmul_fraction(dtype: str, fractions: Achievable) -> float:
    """The fraction of the ``dtype`` peak a GEMM or convolution reaches: fp32's (CUDA cores) or TF32's where the
    profile has one, else large 16-bit GEMMs' (``matmul``).

    Example:
        >>> f = Achievable(matmul=0.8, attention=0.35, memory=0.88, matmul_tf32=0.4)
        >>> matmul_fraction("tf32", f), matmul_fraction("fp32", f), matmul_fraction("bf16", f)
        (0.4, 0.8, 0.8)
    """
    own = {"fp32": fractions.matmul_fp32, "tf32": fractions.matmul_tf32}.get(dtype)
    return fractions.matmul if own is None else own


def _fraction(kind: str, dtype: str, fractions: Achievable) -> float:
    """The fraction of the peak a matmul-class kernel reaches: fused attention's, else :func:`matmul_fraction`."""
    return fractions.attention if kind == "attention" else matmul_fraction(dtype, fractions)


_ITEM_BYTES = {"bf16": 2, "fp16": 2}
"""Element sizes of the dtypes whose unaligned GEMMs are priced (measured on 16-bit GEMMs only)."""


def alignment_factor(c: MatmulClass, fractions: Achievable) -> float:
    """The rate of a matmul class over an aligned one's of the same shape: ``unaligned_matmul_2b`` for a 16-bit
    GEMM aligned to one element (2 bytes), ``unaligned_matmul`` for 2 or 4 elements (4 or 8 bytes), else 1 (aligned
    to 16 bytes; another dtype or kind; or the profile does not know).

    Example:
        >>> f = Achievable(matmul=0.6, attention=0.3, memory=0.9, unaligned_matmul=0.33, unaligned_matmul_2b=0.18)
        >>> head = MatmulClass(kind="gemm", dtype="bf16", min_dim=1024, flops=1, bytes=1, kernels=1, alignment=1)
        >>> alignment_factor(head, f), alignment_factor(MatmulClass(**{**head.to_dict(), "alignment": 4}), f)
        (0.18, 0.33)
        >>> alignment_factor(MatmulClass(**{**head.to_dict(), "alignment": 8}), f)  # 16 bytes
        1.0
    """
    if not is_unaligned(c):
        return 1.0
    size = _ITEM_BYTES[c.dtype]
    known = fractions.unaligned_matmul_2b if c.alignment * size <= 2 else fractions.unaligned_matmul
    return 1.0 if known is None else known


def is_unaligned(c: MatmulClass) -> bool:
    """Whether ``c`` is a 16-bit GEMM whose dimensions are not 16-byte aligned: slower on the GPUs measured
    (:func:`alignment_factor`)."""
    size = _ITEM_BYTES.get(c.dtype)
    return c.kind in ("gemm", "grouped") and size is not None and c.alignment < ALIGNED and c.alignment * size < 16


UNMEASURED_UNALIGNED = "whose slowdown on this GPU is not measured"
"""The words of a step-time note when 16-bit GEMMs without 16-byte-aligned dimensions were priced at the aligned
rate for want of the GPU's own figure (what the plan's ``Assumed:`` lines look for)."""


def _peak_flops(gpu: GPUSpec, dtype: str) -> float | None:
    key = dtype if dtype in DTYPES else "fp32"
    peak = gpu.peak_tflops.for_dtype(key)
    return None if peak is None else peak * 1e12


def _achievable_bandwidth(gpu: GPUSpec) -> float | None:
    """Bytes/s memory-bound kernels reach on ``gpu`` (``None`` when its bandwidth is unknown)."""
    bandwidth = gpu.memory_bandwidth_bytes_per_s
    return None if bandwidth is None else bandwidth * (gpu.achievable or GENERIC).memory


def estimate(census: OpCensus, micro_batch: int, gpu: GPUSpec, *, floor_s: float = KERNEL_FLOOR_S,
             launch_s: float = LAUNCH_S, checkpointed_blocks: int = 0, checkpoint_block_s: float = CHECKPOINT_BLOCK_S,
             host_extra_s: float = 0.0, tf32_matmuls: bool = False, census_2: OpCensus | None = None
             ) -> StepTime | None:
    """Compute time of ``micro_batch`` samples' forward + backward on ``gpu`` under the module's model.

    Args:
        census: the op census of one sample (micro-batch 1).
        micro_batch: samples per step.
        census_2: the op census at micro-batch 2, when counted: the memory-bound kernels' traffic is then
            ``fixed + b · per_sample`` from the two (per sample: the difference; fixed: what micro-batch 1 holds
            beyond it, e.g. autocast's casts of every weight in forward and of its gradient back in backward),
            each class's share of it as at micro-batch 1. Without it, the traffic at micro-batch 1 times ``b``.
        gpu: the GPU model (peaks, memory bandwidth, achievable fractions).
        floor_s: shortest time of one kernel.
        launch_s: host time to launch one kernel.
        checkpointed_blocks: blocks wrapped in activation checkpointing, each adding ``checkpoint_block_s`` of
            host time (:data:`CHECKPOINT_BLOCK_S`, :data:`OP_CHECKPOINT_BLOCK_S` under the op-selective policy).
        host_extra_s: other host time on the launching thread per step (a strategy's Python hooks), added to
            the launches.
        tf32_matmuls: fp32 matmuls run on TF32 tensor cores (``torch.set_float32_matmul_precision("high")``);
            fp32 convolutions do regardless, where the GPU has them.

    Returns:
        The time by part, or ``None`` when the GPU's peak for a dtype the step computes in is unknown.

    Example:
        >>> from autoshard.hardware.specs import PeakTflops
        >>> from autoshard.profiler.op_census import MatmulClass
        >>> gpu = GPUSpec(name="x", display_name="X", memory_bytes=1, memory_bandwidth_bytes_per_s=1e12,
        ...               peak_tflops=PeakTflops(bf16=100.0), achievable=Achievable(matmul=0.5, attention=0.5,
        ...                                                                          memory=1.0))
        >>> gemm = MatmulClass(kind="gemm", dtype="bf16", min_dim=4096, flops=10**12, bytes=10**8, kernels=1)
        >>> round(estimate(OpCensus(matmuls=(gemm,)), 1, gpu).seconds, 3)  # 1 TFLOP at 50 TFLOP/s
        0.02
    """
    b = max(1, micro_batch)
    fractions = gpu.achievable or GENERIC
    hbm = _achievable_bandwidth(gpu)
    matmul_s = attention_s = memory_s = 0.0
    fp32_units: set[str] = set()  # "fp32" / "tf32": where the step's fp32 GEMMs and convolutions ran
    unaligned_flops = 0  # of GEMMs priced below the aligned rate
    unmeasured_flops = 0  # of unaligned GEMMs priced at the aligned rate: the GPU's slowdown is not known
    gemm_scale = _gemm_bytes_scale(census, census_2, b)
    for c in census.matmuls:
        priced = _priced_dtype(c.kind, c.dtype, gpu, tf32_matmuls)
        if c.kind != "attention" and priced in ("fp32", "tf32"):
            fp32_units.add(priced)
        peak = _peak_flops(gpu, priced)
        if peak is None:
            return None
        aligned = alignment_factor(c, fractions)
        unaligned_flops += c.flops if aligned < 1 else 0
        unmeasured_flops += c.flops if aligned == 1 and is_unaligned(c) else 0
        rate = peak * _fraction(c.kind, priced, fractions) * aligned
        moved = c.bytes * (b if c.kind == "attention" else gemm_scale)
        t = max(c.priced_flops * b / rate, 0.0 if hbm is None else moved / hbm, c.kernels * floor_s)
        if c.kind == "attention":
            attention_s += t
        else:
            matmul_s += t
    scale, traffic = _memory_scale(census, census_2, b)
    for m in census.memory:
        memory_s += max(0.0 if hbm is None else m.bytes * scale / hbm, m.kernels * floor_s)
    gpu_s = matmul_s + attention_s + memory_s
    checkpoint_s = checkpointed_blocks * checkpoint_block_s
    host_s = census.kernels * launch_s + checkpoint_s + host_extra_s
    seconds = max(gpu_s, host_s)
    flops = census.matmul_flops * b
    where = ("the profile's fractions" if gpu.achievable is not None
             else f"generic fractions: no measurements in the profile, kernels' rates x {WHOLE_STEP_FACTOR:g}, the "
                  "median whole-step factor fitted for other GPUs")
    if host_s > gpu_s:
        bound = "host-bound" if host_extra_s or checkpoint_s else "launch-bound"
    else:
        bound = f"{(matmul_s + attention_s) / max(gpu_s, 1e-30):.0%} matmul"
    units = {"fp32": "on the CUDA cores", "tf32": "on TF32 tensor cores"}
    fp32 = "".join(f", fp32 {units[u]} at {matmul_fraction(u, fractions):g} of the {u} peak"
                   for u in sorted(fp32_units))
    if unaligned_flops:
        fp32 += (f", {unaligned_flops / max(census.matmul_flops, 1):.0%} of the matmul FLOPs in GEMMs without "
                 f"16-byte-aligned dimensions (at {fractions.unaligned_matmul_2b or 1:g} of the aligned rate if "
                 f"2-byte aligned, {fractions.unaligned_matmul or 1:g} if 4- or 8-byte)")
    if unmeasured_flops:
        fp32 += (f", {unmeasured_flops / max(census.matmul_flops, 1):.0%} of the matmul FLOPs in 16-bit GEMMs without "
                 f"16-byte-aligned dimensions, {UNMEASURED_UNALIGNED}: priced at the aligned rate")
    checkpointing = (f", {checkpointed_blocks} checkpointed blocks at {checkpoint_block_s * 1e3:g} ms of host time "
                     "each" if checkpointed_blocks else "")
    note = (f"compute from the traced ops: matmuls at {fractions.matmul:g}{fp32} and attention at "
            f"{fractions.attention:g} of the dense peak, memory-bound ops at {fractions.memory:g} of the memory "
            f"bandwidth ({where}), {census.kernels:,} kernels ({floor_s * 1e6:g} µs floor, {launch_s * 1e6:g} µs "
            f"of host time each{checkpointing}); {bound}, {flops / seconds / 1e12 if seconds else 0:.0f} TFLOP/s")
    if traffic:
        note += traffic
    if hbm is None:
        note += "; memory bandwidth unknown: memory-bound ops priced at the kernel floor only"
    return StepTime(seconds=seconds, matmul_s=matmul_s, attention_s=attention_s, memory_s=memory_s, gpu_s=gpu_s,
                    launch_s=host_s, flops=flops, note=note)


def _gemm_bytes_scale(census: OpCensus, census_2: OpCensus | None, b: int) -> float:
    """The factor on micro-batch 1's GEMM and convolution bytes at micro-batch ``b``: their weights are read (and
    their weight gradients written) once per kernel whatever the batch, their activations grow with it, so the
    bytes are ``fixed + b · per_sample`` from the census at micro-batches 1 and 2 (``b`` without it). Priced as
    ``b`` times micro-batch 1's, a Llama-2-7B step of 8-token sequences at micro-batch 1,024 read every weight
    1,024 times: 15 x the time of the same 8,192 tokens as 2,048-token sequences.

    Example:
        >>> from autoshard.profiler.op_census import MatmulClass
        >>> one, two = (OpCensus(matmuls=(MatmulClass(kind="gemm", dtype="bf16", min_dim=8, flops=1, bytes=n,
        ...                                           kernels=1),)) for n in (110, 120))
        >>> _gemm_bytes_scale(one, two, 64) * 110  # 100 bytes of weights + 10 per sample
        740.0
    """
    def gemm_bytes(c: OpCensus) -> int:
        return sum(m.bytes for m in c.matmuls if m.kind != "attention")

    split = _split(gemm_bytes(census), None if census_2 is None else gemm_bytes(census_2), b)
    return float(b) if split is None else split[0]


def _split(at_1: int, at_2: int | None, b: int) -> tuple[float, int, int] | None:
    """Bytes counted at micro-batches 1 and 2 as ``fixed + b · per_sample``: ``(factor on at_1 at micro-batch b,
    fixed, per_sample)``, or ``None`` where they do not split so (no second count, nothing fixed, or a part below
    zero): the caller then scales by ``b``.

    Example:
        >>> _split(110, 120, 64), _split(110, None, 64), _split(110, 220, 64)
        ((6.7272727272727275, 100, 10), None, None)
    """
    if at_2 is None:
        return None
    per_sample, fixed = at_2 - at_1, 2 * at_1 - at_2
    if at_1 <= 0 or per_sample < 0 or fixed <= 0:
        return None
    return (fixed + b * per_sample) / at_1, fixed, per_sample


def _memory_scale(census: OpCensus, census_2: OpCensus | None, b: int) -> tuple[float, str]:
    """The factor on micro-batch 1's memory-bound traffic at micro-batch ``b``, and a note when it is not ``b``.

    Example:
        >>> from autoshard.profiler.op_census import MemoryClass
        >>> one = OpCensus(memory=(MemoryClass(size_bytes=1024, bytes=3 * 10**9, kernels=5),))
        >>> two = OpCensus(memory=(MemoryClass(size_bytes=2048, bytes=4 * 10**9, kernels=5),))
        >>> _memory_scale(one, two, 10)[0]  # 2 GB per micro-batch + 1 GB per sample: 12 GB, 4 x micro-batch 1's
        4.0
    """
    split = _split(census.memory_bytes, None if census_2 is None else census_2.memory_bytes, b)
    if split is None:
        return float(b), ""
    factor, fixed, per_sample = split
    note = (f"; memory-bound traffic {fixed / 1e9:.3g} GB per micro-batch (casts and other per-step kernels) + "
            f"{per_sample / 1e9:.3g} GB per sample, from the op census at micro-batches 1 and 2")
    return factor, note


def memory_bound_seconds(traffic_bytes: float, gpu: GPUSpec, *, kernels: int = 1,
                         floor_s: float = KERNEL_FLOOR_S) -> float:
    """GPU time of copies or other streaming kernels that move ``traffic_bytes`` (reads plus writes) on ``gpu``:
    at the achievable memory bandwidth, at least ``kernels`` kernel floors (only the floors when the bandwidth
    is unknown).

    Example:
        >>> from autoshard.hardware.specs import PeakTflops
        >>> gpu = GPUSpec(name="x", display_name="X", memory_bytes=1, memory_bandwidth_bytes_per_s=1e12,
        ...               peak_tflops=PeakTflops(bf16=100.0), achievable=Achievable(matmul=0.5, attention=0.5,
        ...                                                                          memory=0.5))
        >>> memory_bound_seconds(1e9, gpu)  # 1 GB at 0.5 TB/s
        0.002
    """
    hbm = _achievable_bandwidth(gpu)
    return max(0.0 if hbm is None else traffic_bytes / hbm, kernels * floor_s)


def optimizer_seconds(census: OpCensus, gpu: GPUSpec, *, shard: float = 1.0, kernels: int | None = None,
                      floor_s: float = KERNEL_FLOOR_S, launch_s: float = OPTIMIZER_LAUNCH_S) -> float:
    """Time of one optimizer step on ``gpu`` from the census of the traced step (no micro-batch: the step is the
    same at any batch): its kernels are memory-bound (AdamW reads parameters, gradients and both moments and
    writes three of them back: 84 bytes per fp32 parameter for torch's foreach and for-loop steps, 28 fused),
    priced at the achievable bandwidth like the step's other memory-bound kernels, with their launch floor.

    Args:
        census: the traced optimizer step over all parameters.
        gpu: the GPU model.
        shard: the fraction of the parameters this GPU steps (``1 / N`` under ZeRO and FSDP).
        kernels: kernels launched, when not the census's (DeepSpeed steps one flat partition, not each tensor).

    Example:
        >>> from autoshard.hardware.specs import PeakTflops
        >>> from autoshard.profiler.op_census import MemoryClass
        >>> gpu = GPUSpec(name="x", display_name="X", memory_bytes=1, memory_bandwidth_bytes_per_s=1e12,
        ...               peak_tflops=PeakTflops(bf16=100.0), achievable=Achievable(matmul=0.5, attention=0.5,
        ...                                                                          memory=1.0))
        >>> step = OpCensus(memory=(MemoryClass(size_bytes=2**30, bytes=84 * 10**9, kernels=20),))
        >>> round(optimizer_seconds(step, gpu), 3), round(optimizer_seconds(step, gpu, shard=1 / 8), 4)
        (0.084, 0.0105)
    """
    hbm = _achievable_bandwidth(gpu)
    count = census.kernels if kernels is None else kernels
    traffic = (census.memory_bytes + sum(c.bytes for c in census.matmuls)) * shard
    gpu_s = max(0.0 if hbm is None else traffic / hbm, count * floor_s)
    return max(gpu_s, count * launch_s)
