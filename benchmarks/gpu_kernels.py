"""The step-time model's kernel assumptions, measured on this GPU: GEMM, fused-attention and memory-bound rates.

Usage:
    python benchmarks/gpu_kernels.py [--dry-run] [--out docs/benchmarks] [--repeats N] [--gpu PROFILE]

autoshard prices a training step kernel class by kernel class (:mod:`autoshard.strategies.step_time`): GEMMs at
the GPU profile's ``achievable.matmul`` fraction of its dense peak (or its memory roofline), fused attention at
``achievable.attention``, memory-bound kernels at ``achievable.memory`` of the memory bandwidth. Those fractions
come from published measurements (``profiles/gpus/*.yaml``). This script times the kernels themselves on the GPU
it runs on and sets each beside what the model predicts for it (``step_time.estimate`` on a one-kernel census):

* **GEMMs** in bf16 and fp16: a large square one (the "maximum achievable matmul" shape), a Llama-3-8B layer's
  projections at 8,192 tokens, a small-M GEMM below the ridge point, and GPT-2's LM head with its vocabulary of
  50,257 (not a multiple of 8) beside the same GEMM padded to 50,304: the model prices both alike, NVIDIA's
  guidance says the first cannot use the tensor cores at their best ("Tensor Core Requirements", NVIDIA Matrix
  Multiplication Background User's Guide); this measures by how much (5.4 x on an H200, 2026-11-28); and an
  alignment sweep in bf16 (the vocabulary's width odd, even, a multiple of 4 and of 8; K and M unaligned), to
  find which alignment that needs before the step-time model prices it; and the layer GEMMs of small models
  (GPT-2's at 8,192 tokens of width 768 in bf16, BERT-large's at 2,048 tokens of width 1,024 in fp16), whose
  whole steps the model predicts 10-25 % fast: do they reach large GEMMs' fraction of the peak?
* **fused attention** (``F.scaled_dot_product_attention``, the flash kernel), forward + backward, causal and not,
  its FLOPs counted as autoshard's profiler counts them (:func:`autoshard.profiler.flops.attention_flops`: the
  full score matrix, whatever the mask);
* **memory-bound** kernels: a copy, an add and an fp32 softmax, bytes read + written; and the memory-bound
  kernels of a transformer step by kind (layer norm and its backward, softmax's backward, dropout, GELU, an
  embedding lookup and its backward), each priced from the census the profiler takes of that very op
  (:class:`autoshard.profiler.op_census.CensusCounter` run over it): the model prices them all at one fraction
  of the bandwidth (2026-11-28 on an H200: a copy 0.84, an fp32 softmax 0.51);
* a **tile sweep**: bf16 GEMMs of ``M x 4096 x 4096`` from 128 to 8,192 rows (and three in fp32), with their
  output tiles (128 x 128) and waves on this GPU's SMs. The model prices a GEMM by its FLOPs and bytes alone; a
  GEMM of fewer tiles than the GPU has SMs leaves SMs idle ("wave quantization", NVIDIA Matrix Multiplication
  Background User's Guide, sec. 3.2), which is what the small micro-batches of the published BERT-large runs
  would meet (2026-11-28: 256 rows reached 0.28 of the peak where 8,192 reached 0.70). The sweep is the data a
  term for it would be fitted on.

Each kernel is timed with CUDA events over ``--repeats`` runs after warm-up (the median). The table gives the
rate reached, that rate as a fraction of the profile's peak (the number to hold against ``achievable``), the
model's time and the signed error ``(predicted - measured) / measured``.

``--dry-run`` checks the plumbing on CPU with small sizes against the H100 SXM profile (the figures mean
nothing there). Writes ``gpu_kernels.{md,json}`` under ``--out`` (``--name`` changes the file name).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers beside this script
from _common import package_version, positive
from memory_accuracy import machine

import autoshard
from autoshard.hardware.specs import GPUSpec
from autoshard.profiler.flops import attention_backward_flops, attention_flops
from autoshard.profiler.op_census import CensusCounter, MatmulClass, MemoryClass, OpCensus, size_class
from autoshard.strategies import step_time

DRY_RUN_GPU = "h100-sxm-80gb"
"""The profile the dry run predicts with (its figures only check the plumbing)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Kernel:
    """One timed kernel and the census autoshard's step-time model prices it from."""

    name: str
    kind: str
    """``gemm``, ``attention`` or ``memory``."""
    dtype: str
    shape: str
    flops: int
    bytes: int
    smallest_dim: int
    """The dimension the census classes a matmul by: a GEMM's smallest, attention's head dimension (0: memory)."""
    run: Callable[[], Any]
    traced: OpCensus | None = None
    """The census the profiler takes of the kernel's op (:func:`traced_memory`); ``None``: built from
    :attr:`bytes`."""

    def census(self) -> OpCensus:
        """The one-kernel census the profiler would have taken of this kernel."""
        if self.traced is not None:
            return self.traced
        if self.kind == "memory":
            return OpCensus(memory=(MemoryClass(size_bytes=size_class(self.bytes), bytes=self.bytes, kernels=1),))
        kernels = 1 if self.kind == "gemm" else 2  # attention: one forward and one backward kernel
        return OpCensus(matmuls=(MatmulClass(kind=self.kind, dtype=self.dtype, min_dim=size_class(self.smallest_dim),
                                             flops=self.flops, bytes=self.bytes, kernels=kernels),))


_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def gemm(name: str, m: int, n: int, k: int, dtype: str, device: torch.device) -> Kernel:
    """``(m × k) @ (k × n)``: ``2mnk`` FLOPs, operands read and the result written once."""
    a = torch.randn(m, k, device=device, dtype=_DTYPES[dtype])
    b = torch.randn(k, n, device=device, dtype=_DTYPES[dtype])
    size = a.element_size()
    return Kernel(name=name, kind="gemm", dtype=dtype, shape=f"{m}x{n}x{k}", flops=2 * m * n * k,
                  bytes=size * (m * k + k * n + m * n), smallest_dim=min(m, n, k), run=lambda: a @ b)


def attention(name: str, b: int, h: int, s: int, d: int, dtype: str, device: torch.device, *,
              causal: bool) -> Kernel:
    """SDPA forward + backward on ``(b, h, s, d)`` query, key and value."""
    q, k, v = (torch.randn(b, h, s, d, device=device, dtype=_DTYPES[dtype], requires_grad=True) for _ in range(3))
    grad = torch.randn(b, h, s, d, device=device, dtype=_DTYPES[dtype])
    shape = torch.Size((b, h, s, d))
    flops = attention_flops(shape, shape, shape) + attention_backward_flops(shape, shape, shape, shape)
    size = q.element_size() * q.numel()

    def run() -> None:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.autograd.grad(out, (q, k, v), grad)

    # Forward reads q, k, v and writes out; backward reads q, k, v, out, grad and writes three gradients.
    return Kernel(name=name, kind="attention", dtype=dtype, shape=f"{b}x{h}x{s}x{d}", flops=flops,
                  bytes=12 * size, smallest_dim=d, run=run)


def memory(name: str, numel: int, device: torch.device, op: str) -> Kernel:
    """A streaming kernel over ``numel`` elements: ``copy`` (bf16), ``add`` (bf16) or ``softmax`` (fp32 rows of
    4,096)."""
    if op == "softmax":
        x = torch.randn(numel // 4096, 4096, device=device)
        return Kernel(name=name, kind="memory", dtype="fp32", shape=f"{numel // 4096}x4096", flops=0,
                      bytes=2 * x.numel() * 4, smallest_dim=0, run=lambda: torch.softmax(x, dim=-1))
    x = torch.randn(numel, device=device, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    if op == "copy":
        return Kernel(name=name, kind="memory", dtype="bf16", shape=str(numel), flops=0, bytes=4 * numel,
                      smallest_dim=0, run=lambda: y.copy_(x))
    return Kernel(name=name, kind="memory", dtype="bf16", shape=str(numel), flops=0, bytes=6 * numel,
                  smallest_dim=0, run=lambda: torch.add(x, y))


def traced_memory(name: str, dtype: str, shape: str, run: Callable[[], Any]) -> Kernel:
    """A memory-bound kernel priced from the census the profiler takes of ``run`` (its bytes as the census counts
    them: every tensor argument read, every output written), taken by running it once under
    :class:`CensusCounter`."""
    with CensusCounter(display=False) as counter:
        run()
    census = counter.census()
    return Kernel(name=name, kind="memory", dtype=dtype, shape=shape, flops=0, bytes=census.memory_bytes,
                  smallest_dim=0, run=run, traced=census)


def step_memory_kernels(device: torch.device, *, dry: bool) -> list[Kernel]:
    """The memory-bound kernels of a transformer step by kind, bf16 (softmax's backward in fp32, as autocast
    runs softmax), at Llama-3-8B's width and 8,192 tokens (small sizes on a dry run)."""
    rows, width, vocab = (256, 64, 1008) if dry else (8192, 4096, 50304)
    bf16 = _DTYPES["bf16"]
    x = torch.randn(rows, width, device=device, dtype=bf16, requires_grad=True)
    norm = torch.nn.LayerNorm(width, device=device, dtype=bf16)
    grad = torch.randn(rows, width, device=device, dtype=bf16)
    normed = norm(x)
    probs = torch.softmax(torch.randn(rows, width, device=device), dim=-1)
    grad32 = torch.randn(rows, width, device=device)
    table = torch.randn(vocab, width, device=device, dtype=bf16, requires_grad=True)
    ids = torch.randint(0, vocab, (rows,), device=device)
    looked = torch.nn.functional.embedding(ids, table)
    shape = f"{rows}x{width}"
    aten = torch.ops.aten
    return [
        traced_memory("layer norm", "bf16", shape, lambda: norm(x)),
        traced_memory("layer norm backward", "bf16", shape,
                      lambda: torch.autograd.grad(normed, (x, norm.weight, norm.bias), grad, retain_graph=True)),
        traced_memory("softmax backward", "fp32", shape,
                      lambda: aten._softmax_backward_data(grad32, probs, -1, torch.float32)),
        traced_memory("dropout", "bf16", shape, lambda: torch.nn.functional.dropout(x.detach(), 0.1)),
        traced_memory("GELU", "bf16", shape, lambda: torch.nn.functional.gelu(x.detach())),
        traced_memory("embedding", "bf16", f"{rows} of {vocab}x{width}",
                      lambda: torch.nn.functional.embedding(ids, table.detach())),
        traced_memory("embedding backward", "bf16", f"{rows} of {vocab}x{width}",
                      lambda: torch.autograd.grad(looked, table, grad, retain_graph=True)),
    ]


TILE = 128
"""Rows and columns of the output tile the sweep counts a GEMM's tiles in: 128 x 128, one of cuBLAS's typical
tiles (NVIDIA Matrix Multiplication Background User's Guide, sec. 2.3)."""


def tile_sweep(device: torch.device, *, dry: bool) -> list[Kernel]:
    """``M x H x H`` GEMMs over ``M`` (tokens) at Llama-3-8B's width ``H``: bf16 from 128 to 8,192 rows, and fp32
    at three of them."""
    width = 64 if dry else 4096
    rows = (16, 32, 64, 128) if dry else (128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192)
    out = [gemm(f"tile sweep: M {m}", m, width, width, "bf16", device) for m in rows]
    fp32 = (rows[1], rows[len(rows) // 2], rows[-1])
    out += [gemm(f"tile sweep: M {m}", m, width, width, "fp32", device) for m in fp32]
    return out


def kernels(device: torch.device, *, dry: bool) -> list[Kernel]:
    """The kernels timed, smaller on a dry run."""
    t = 256 if dry else 8192  # tokens in a step's GEMMs
    big = 256 if dry else 8192
    hidden, ffn = (64, 224) if dry else (4096, 14336)
    vocab, padded, width = (1001, 1008, 64) if dry else (50257, 50304, 768)
    out: list[Kernel] = []
    for dtype in ("bf16", "fp16"):
        out += [
            gemm(f"square {big}", big, big, big, dtype, device),
            gemm("Llama-3-8B q/o projection", t, hidden, hidden, dtype, device),
            gemm("Llama-3-8B MLP up", t, ffn, hidden, dtype, device),
            gemm("Llama-3-8B MLP down", t, hidden, ffn, dtype, device),
            gemm("small M (256 tokens)", 16 if dry else 256, hidden, hidden, dtype, device),
            gemm(f"GPT-2 LM head, vocabulary {vocab}", t, vocab, width, dtype, device),
            gemm(f"GPT-2 LM head, vocabulary padded to {padded}", t, padded, width, dtype, device),
        ]
    # Which alignment the 5x of the unaligned LM head (H200, 2026-11-28) needs: N odd, even, a multiple of 4 and of
    # 8 elements, then K unaligned (the input's gradient) and M unaligned (cuBLAS's leading dimensions are K and N).
    sweep = [gemm(f"alignment sweep: N {n}", t, n, width, "bf16", device)
             for n in (vocab, vocab + 1, vocab + 3, vocab + 7, padded)]
    sweep += [gemm(f"alignment sweep: K {vocab}", t, width, vocab, "bf16", device),
              gemm(f"alignment sweep: M {t - 1}", t - 1, padded, width, "bf16", device)]
    out += sweep
    # The GEMMs of small models, whose whole steps the model predicts 10-25 % fast (GPT-2 on an H200, the published
    # GPT-2 and BERT-large runs under autocast): does a hidden size of 768 or 1024 reach large GEMMs' fraction?
    gpt2, bert = (256, 64) if dry else (8192, 768), (128, 64) if dry else (2048, 1024)
    out += [gemm(f"GPT-2 {name}", gpt2[0], n * gpt2[1], k * gpt2[1], "bf16", device)
            for name, n, k in (("attention in-projection", 3, 1), ("attention out-projection", 1, 1),
                               ("MLP up", 4, 1), ("MLP down", 1, 4))]
    out += [gemm(f"BERT-large {name}", bert[0], n * bert[1], k * bert[1], "fp16", device)
            for name, n, k in (("projection", 1, 1), ("MLP up", 4, 1), ("MLP down", 1, 4))]
    b, h, s, d = (1, 2, 128, 32) if dry else (4, 32, 4096, 128)
    out += [attention("SDPA causal", b, h, s, d, "bf16", device, causal=True),
            attention("SDPA full", b, h, s, d, "bf16", device, causal=False)]
    n = 2**16 if dry else 2**28
    out += [memory("copy", n, device, "copy"), memory("add", n, device, "add"),
            memory("softmax fp32", n, device, "softmax")]
    out += step_memory_kernels(device, dry=dry)
    out += tile_sweep(device, dry=dry)
    return out


def time_kernel(kernel: Kernel, device: torch.device, *, repeats: int, warmup: int) -> float:
    """Median seconds of one run of ``kernel`` (CUDA events on a GPU, the wall clock on CPU)."""
    for _ in range(warmup):
        kernel.run()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            kernel.run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            kernel.run()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def row(kernel: Kernel, seconds: float, gpu: GPUSpec | None) -> dict[str, Any]:
    """One kernel's measured rate, its fraction of the profile's peak, the model's time and the error."""
    out: dict[str, Any] = {"name": kernel.name, "kind": kernel.kind, "dtype": kernel.dtype, "shape": kernel.shape,
                           "flops": kernel.flops, "bytes": kernel.bytes, "measured_s": seconds,
                           "tflops": kernel.flops / seconds / 1e12 if kernel.flops else None,
                           "gb_per_s": kernel.bytes / seconds / 1e9, "fraction_of_peak": None,
                           "profile_fraction": None, "predicted_s": None, "error_percent": None}
    if gpu is None:
        return out
    fractions = gpu.achievable or step_time.GENERIC
    if kernel.kind == "memory":
        if gpu.memory_bandwidth_bytes_per_s:
            out["fraction_of_peak"] = kernel.bytes / seconds / gpu.memory_bandwidth_bytes_per_s
        out["profile_fraction"] = fractions.memory
    else:
        peak = gpu.peak_tflops.for_dtype(kernel.dtype)
        if peak:
            out["fraction_of_peak"] = kernel.flops / seconds / (peak * 1e12)
        out["profile_fraction"] = fractions.attention if kernel.kind == "attention" else fractions.matmul
    estimate = step_time.estimate(kernel.census(), 1, gpu, launch_s=0.0)
    if estimate is not None:
        out["predicted_s"] = estimate.seconds
        out["error_percent"] = (estimate.seconds - seconds) / seconds * 100
    return out


def tile_table(rows: list[dict[str, Any]], sms: int | None) -> list[dict[str, Any]]:
    """The tile sweep's GEMMs by dtype and ``M``: their 128 x 128 output tiles, the waves those make on ``sms``
    SMs (``None`` where not known), the measured fraction of the peak and its ratio to the largest ``M``'s of the
    same dtype (the GEMM that fills the GPU).

    Example:
        >>> rows = [{"name": "tile sweep: M 256", "dtype": "bf16", "shape": "256x4096x4096", "fraction_of_peak": 0.28,
        ...          "error_percent": -53.0},
        ...         {"name": "tile sweep: M 8192", "dtype": "bf16", "shape": "8192x4096x4096", "fraction_of_peak": 0.7,
        ...          "error_percent": 18.0}]
        >>> [(r["m"], r["tiles"], r["waves"], round(r["of_largest"], 2)) for r in tile_table(rows, 132)]
        [(256, 64, 0.48, 0.4), (8192, 2048, 15.52, 1.0)]
    """
    sweep = [r for r in rows if r["name"].startswith("tile sweep")]
    out = []
    for r in sweep:
        m, n, _ = (int(x) for x in r["shape"].split("x"))
        same = [x for x in sweep if x["dtype"] == r["dtype"]]
        largest = max(same, key=lambda x: int(x["shape"].split("x")[0]))["fraction_of_peak"]
        tiles = -(-m // TILE) * -(-n // TILE)
        fraction = r["fraction_of_peak"]
        out.append({"dtype": r["dtype"], "m": m, "tiles": tiles,
                    "waves": None if not sms else round(tiles / sms, 2), "fraction_of_peak": fraction,
                    "of_largest": None if fraction is None or not largest else fraction / largest,
                    "error_percent": r["error_percent"]})
    return out


def summarize(rows: list[dict[str, Any]], sms: int | None = None) -> dict[str, Any]:
    """Median |error| per kind, the LM head's unaligned / padded time ratio per dtype, and the tile sweep
    (:func:`tile_table`) on ``sms`` SMs."""
    out: dict[str, Any] = {"sms": sms, "tile_sweep": tile_table(rows, sms)}
    for kind in ("gemm", "attention", "memory"):
        errors = [abs(r["error_percent"]) for r in rows if r["kind"] == kind and r["error_percent"] is not None]
        out[kind] = {"n": len(errors), "median_abs_error_percent": statistics.median(errors) if errors else None}
    for dtype in ("bf16", "fp16"):
        heads = [r for r in rows if r["dtype"] == dtype and r["name"].startswith("GPT-2 LM head")]
        if len(heads) == 2:
            unaligned, padded = heads
            out[f"lm_head_unaligned_over_padded_{dtype}"] = {
                "unaligned": unaligned["shape"], "padded": padded["shape"],
                "measured": unaligned["measured_s"] / padded["measured_s"],
                "predicted": (None if unaligned["predicted_s"] is None or padded["predicted_s"] is None
                              else unaligned["predicted_s"] / padded["predicted_s"])}
    sweep = [r for r in rows if r["name"].startswith("alignment sweep")]
    widths = [r for r in sweep if r["name"].startswith("alignment sweep: N")]
    if widths:  # over the padded vocabulary's GEMM, the widest
        padded = max(widths, key=lambda r: int(r["name"].rsplit(" ", 1)[1]))
        out["alignment_sweep_over_padded"] = {f'{r["name"].removeprefix("alignment sweep: ")} ({r["shape"]})':
                                              r["measured_s"] / padded["measured_s"] for r in sweep}
    return out


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def write_report(out: Path, report: dict[str, Any], name: str) -> None:
    """``NAME.json`` and ``NAME.md`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    meta, summary = report["meta"], report["summary"]
    where = ", ".join(f"{k} {v}" for k, v in meta["machine"].items())
    lines = [
        "# The step-time model's kernels, measured" + (" — DRY RUN (CPU, small sizes: no figure here means "
                                                      "anything)" if meta["dry_run"] else ""),
        "",
        f"{meta['date']}, {where}, profile `{meta['gpu_profile']}`, Python {meta['python']}, "
        f"torch {meta['torch']}, autoshard {meta['autoshard']}.",
        "",
        f"Command: `{meta['command']}` ({meta['seconds']} s)",
        "",
        "Measured: the median of the kernel's own time (CUDA events) over the repeats after warm-up. Predicted: "
        "`autoshard.strategies.step_time.estimate` on a census of that one kernel, with no launch time. "
        "Fraction: the measured rate over the profile's dense peak (GEMMs, attention) or memory bandwidth, to "
        "hold against the profile's `achievable` fraction. Error = (predicted − measured) / measured.",
        "",
        "| kernel | dtype | shape | measured (ms) | TFLOP/s | GB/s | fraction of peak | profile's fraction | "
        "predicted (ms) | error |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['name']} | {r['dtype']} | {r['shape']} | {r['measured_s'] * 1e3:.3f} | {_fmt(r['tflops'], '.1f')}"
            f" | {r['gb_per_s']:.0f} | {_fmt(r['fraction_of_peak'], '.3f')} | {_fmt(r['profile_fraction'], '.3f')}"
            f" | {_fmt(None if r['predicted_s'] is None else r['predicted_s'] * 1e3, '.3f')}"
            f" | {_fmt(r['error_percent'], '+.1f')}{'' if r['error_percent'] is None else ' %'} |")
    lines += ["", "| kind | kernels | median \\|error\\| |", "|---|---:|---:|"]
    for kind in ("gemm", "attention", "memory"):
        s = summary[kind]
        median = s["median_abs_error_percent"]
        lines.append(f"| {kind} | {s['n']} | {_fmt(median, '.1f')}{'' if median is None else ' %'} |")
    for dtype in ("bf16", "fp16"):
        ratio = summary.get(f"lm_head_unaligned_over_padded_{dtype}")
        if ratio is not None:
            lines.append(f"\nGPT-2's LM head in {dtype}, `{ratio['unaligned']}` over the same GEMM padded to "
                         f"`{ratio['padded']}`: {ratio['measured']:.2f} × the time (autoshard's model: "
                         f"{_fmt(ratio['predicted'], '.2f')} ×).")
    sweep = summary.get("alignment_sweep_over_padded")
    if sweep:
        lines.append("\nAlignment sweep (bf16), each GEMM's time over the padded vocabulary's: "
                     + "; ".join(f"{k} {v:.2f} ×" for k, v in sweep.items()) + ".")
    tiles = summary.get("tile_sweep")
    if tiles:
        width = next(r["shape"] for r in report["rows"] if r["name"].startswith("tile sweep")).split("x", 1)[1]
        lines += ["", f"Tile sweep (`M x {width}`): output tiles of {TILE} x {TILE}, waves on "
                  f"{summary.get('sms') or 'an unknown number of'} SMs, the fraction of the peak reached and its ratio "
                  "to the largest M's (the GEMM that fills the GPU); the model's error as in the table above.", "",
                  "| dtype | M | tiles | waves | fraction of peak | of the largest M's | model's error |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for t in tiles:
            error = t["error_percent"]
            lines.append(f"| {t['dtype']} | {t['m']:,} | {t['tiles']:,} | {_fmt(t['waves'], '.2f')} | "
                         f"{_fmt(t['fraction_of_peak'], '.3f')} | {_fmt(t['of_largest'], '.2f')} | "
                         f"{_fmt(error, '+.1f')}{'' if error is None else ' %'} |")
    (out / f"{name}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Time every kernel, write the report; the exit status is 0 unless it crashed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="small sizes on the CPU, to check the plumbing")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--name", default="gpu_kernels", help="the report's file name, without extension")
    parser.add_argument("--repeats", type=positive, default=None, help="timed runs per kernel (default 20; dry 3)")
    parser.add_argument("--gpu", default=None,
                        help="the GPU profile to predict with (default: this GPU's, found by its name)")
    args = parser.parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no CUDA GPU here (torch.cuda.is_available() is False); --dry-run checks the plumbing on CPU.")
    from autoshard.hardware.profiles import gpu_profile_for, load_profile

    device = torch.device("cpu" if args.dry_run else "cuda")
    profile_name = args.gpu or (DRY_RUN_GPU if args.dry_run else None)
    if profile_name:
        spec = load_profile(profile_name).spec
        if not isinstance(spec, GPUSpec):
            parser.error(f"--gpu {profile_name}: not a GPU profile (see `autoshard hardware --list`).")
        gpu: GPUSpec | None = spec
    else:
        gpu = gpu_profile_for(torch.cuda.get_device_name(device))
    repeats = args.repeats or (3 if args.dry_run else 20)
    started = time.monotonic()
    rows = []
    for kernel in kernels(device, dry=args.dry_run):
        seconds = time_kernel(kernel, device, repeats=repeats, warmup=1 if args.dry_run else 5)
        rows.append(row(kernel, seconds, gpu))
        print(f"{kernel.name} {kernel.dtype}: {seconds * 1e3:.3f} ms", flush=True)
    shown = list(sys.argv[1:] if argv is None else argv)
    report = {
        "meta": {"date": datetime.date.today().isoformat(), "machine": machine(device),
                 "gpu_profile": gpu.name if gpu is not None else "none (this GPU has no profile)",
                 "python": platform.python_version(), "torch": torch.__version__,
                 "deepspeed": package_version("deepspeed") or "not installed",
                 "autoshard": autoshard.__version__, "dry_run": args.dry_run, "repeats": repeats,
                 "command": " ".join(["python", "benchmarks/gpu_kernels.py", *shown]),
                 "seconds": round(time.monotonic() - started, 1)},
        "summary": summarize(rows, torch.cuda.get_device_properties(device).multi_processor_count
                             if device.type == "cuda" else None),
        "rows": rows,
    }
    write_report(args.out, report, args.name)
    print(json.dumps(report["summary"]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
