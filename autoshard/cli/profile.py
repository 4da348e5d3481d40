"""``autoshard profile MODEL``: memory and FLOPs of one training step, without allocating the model."""

from __future__ import annotations

import argparse
import itertools
import os
from typing import TYPE_CHECKING

from autoshard.cli._checks import positive_int
from autoshard.cli._format import OPTIMIZER_IMPLS, OPTIMIZERS, PRECISIONS, count, flops, gib, print_json

if TYPE_CHECKING:
    from autoshard.profiler import ModelProfile

NAME = "profile"
HELP = "Profile one training step of a model: peak memory, its breakdown, FLOPs (nothing is allocated)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``profile`` flags."""
    parser.add_argument("model", help="a model.py, a Hugging Face config.json, or a catalog name (autoshard models)")
    add_step_arguments(parser)
    parser.add_argument("--target", choices=("cuda", "cpu"), default="cuda", help="device the answer is for")
    parser.add_argument(
        "--extrapolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="trace shallow copies and extrapolate (default: automatic for deep catalog/HF models)",
    )
    parser.add_argument("--reserved", action="store_true",
                        help="also predict what the CUDA caching allocator reserves (max_memory_reserved, "
                             "fragmentation included): the model is traced whole once more and its allocations "
                             "replayed through the allocator's rules")
    add_keep_grads_argument(parser)
    parser.add_argument("--blocks", action="store_true", help="also list every repeated block")
    parser.add_argument("--json", action="store_true", help="machine-readable output (docs/profile.md)")


def add_step_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags describing the training step (shared with later subcommands)."""
    parser.add_argument("--batch-size", type=positive_int, default=1, help="micro-batch size (default 1)")
    parser.add_argument("--seq-len", type=positive_int, default=None, help="sequence length (default: the model's)")
    parser.add_argument(
        "--precision",
        default="bf16-mixed",
        help=f"one of {', '.join(PRECISIONS)} (default bf16-mixed)",
    )
    parser.add_argument("--optimizer", default="adamw", help=f"one of {', '.join(OPTIMIZERS)} (default adamw)")
    add_optimizer_impl_argument(parser)
    add_checkpointing_argument(parser, default="none")
    parser.add_argument("--grad-accumulation", type=positive_int, default=1, help="micro-batches per optimizer step")


def add_keep_grads_argument(parser: argparse.ArgumentParser) -> None:
    """``--keep-grads``: the run zeroes its gradients in place between steps rather than freeing them."""
    parser.add_argument("--keep-grads", action="store_true",
                        help="gradients stay allocated (zeroed) between steps, as zero_grad(set_to_none=False) "
                             "and Module.zero_grad() before torch 2.0 leave them (default: freed, torch >= 2.0)")


def add_checkpointing_argument(parser: argparse.ArgumentParser, *, default: str | None) -> None:
    """``--checkpointing [none|full|op|every-N]``; the bare flag is ``full``, as before the choice existed."""
    parser.add_argument("--checkpointing", nargs="?", const="full", default=default, metavar="MODE",
                        help="what to recompute in backward: none, full (every block; the bare flag), op "
                             "(torchtitan's op-selective policy) or every-N (every N-th block)")


def add_optimizer_impl_argument(parser: argparse.ArgumentParser) -> None:
    """``--optimizer-impl``, shared with ``recommend``."""
    parser.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS, default=None,
                        help="how the optimizer steps: foreach (torch's default on CUDA: list-sized temporaries), "
                             "for-loop (one parameter at a time) or fused (no temporaries)")


def run(args: argparse.Namespace) -> int:
    """Run ``autoshard profile``."""
    from autoshard.api import profile
    from autoshard.errors import UsageError

    if args.reserved and args.target != "cuda":
        raise UsageError("--reserved predicts the CUDA caching allocator's reserve: it needs --target cuda.")
    result = profile(
        args.model,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        precision=args.precision,
        optimizer=args.optimizer,
        activation_checkpointing=args.checkpointing,
        grad_accumulation=args.grad_accumulation,
        target=args.target,
        extrapolate=args.extrapolate,
        optimizer_impl=args.optimizer_impl,
        reserved=args.reserved,
        set_grads_to_none=not args.keep_grads,
    )
    if args.json:
        print_json(result.to_dict())
        return 0
    _print(result, show_blocks=args.blocks)
    return 0


def _active(p: ModelProfile) -> str:
    """``"; 12.93B active per token (input embedding included): 2 of 8 experts"`` for a mixture-of-experts model,
    else nothing. Model cards differ on the embedding (Mixtral's 12.9B counts it, DeepSeek's and GPT-OSS's figures
    leave it out): the line says which this is."""
    active, routing = p.active_parameter_count, p.expert_routing
    if active is None or routing is None:
        return ""
    return (f"; {count(active)} active per token (input embedding included): {routing.per_token} of "
            f"{routing.experts} experts")


def _print(p: ModelProfile, *, show_blocks: bool) -> None:
    from rich.markup import escape
    from rich.table import Table

    from autoshard._console import print_table, stdout_console
    from autoshard.profiler.flops import uncounted_line
    from autoshard.profiler.trace import checkpointing_of

    console = stdout_console(wide_when_piped=False)
    o = p.options
    seq = f", seq {p.seq_len}" if p.seq_len is not None else ""
    console.print(
        f"[bold]{p.model}[/bold] ({p.source_kind}) — {count(p.parameter_count)} parameters "
        f"({count(p.trainable_parameter_count)} trainable{_active(p)}), micro-batch {o.batch_size}{seq}, "
        f"{o.precision.value}, {o.optimizer}" + ("" if o.optimizer_impl is None else f" ({o.optimizer_impl})")
        + (f", {checkpointing_of(o).label}" if o.activation_checkpointing else "")
        + (f", {o.grad_accumulation} accumulation steps" if o.grad_accumulation > 1 else "")
    )
    target = "one CUDA GPU" if o.target == "cuda" else "CPU"
    table = Table(title=f"Peak memory on {target} holding the whole model", title_justify="left")
    table.add_column("at the peak")
    table.add_column("bytes", justify="right")
    table.add_column("share", justify="right")
    breakdown = p.peak_breakdown.to_dict()
    total = breakdown.pop("total") or 1
    for name, value in breakdown.items():
        table.add_row(name.replace("_", " "), gib(value), f"{100 * value / total:.1f} %")
    for ov in p.overheads:
        if ov.in_allocator:
            table.add_row(ov.name, gib(ov.bytes), "")
    table.add_row("[bold]peak allocated[/bold]", f"[bold]{gib(p.peak_bytes)}[/bold]", "")
    if p.overheads:  # a CUDA answer: what nvidia-smi would show besides the allocated peak
        table.add_row("+ allocator reserve (replayed: segments, splits, fragmentation)" if p.reserved is not None
                      else "+ allocator reserve (segment rounding, at least; --reserved replays it)",
                      gib(p.reserve_bytes), "")
        for ov in p.overheads:
            if not ov.in_allocator:
                table.add_row(f"+ {ov.name} (outside allocator)", gib(ov.bytes), "")
        total_label = "nvidia-smi total (estimate)" if p.reserved is not None else "nvidia-smi total (at least)"
        table.add_row(f"[bold]{total_label}[/bold]", f"[bold]{gib(p.device_total_bytes)}[/bold]", "")
    print_table(console, table)
    if p.reserved is not None:
        r = p.reserved
        expandable = ("" if r.peak_reserved_expandable_bytes is None else "; with PYTORCH_CUDA_ALLOC_CONF="
                      f"expandable_segments:True {gib(r.peak_reserved_expandable_bytes)}")
        console.print(f"Reserved (max_memory_reserved, replayed): {gib(r.peak_reserved_bytes)}{expandable}")
        if r.min_capacity_bytes is not None:
            console.print(f"Runs in {gib(r.min_capacity_bytes)} of device memory for the allocator at the least "
                          "(it releases wholly free segments when full; the CUDA context comes on top)")
    where = f"{p.peak_phase}" + (f" in {p.peak_module}" if p.peak_module else "")
    console.print(f"Peak during: {where}")
    # parameters are counted as stored; gradients and optimizer state as allocated (each tensor rounded up to the
    # allocator's block), as the table's parameters are: on a tiny model the two differ visibly
    allocated = p.peak_breakdown.parameters
    rounded = f" ({gib(allocated)} allocated)" if gib(allocated) != gib(p.parameter_bytes) else ""
    console.print(
        f"Model states: parameters {gib(p.parameter_bytes)}{rounded}, gradients {gib(p.gradient_bytes)}, "
        f"optimizer {gib(p.optimizer_state_bytes)}"
    )
    if p.unused_parameter_count:
        console.print(escape(unused_line(p.unused_parameter_count, p.unused_modules)))
    per_token = f", {flops(p.flops_per_step / p.tokens_per_step)}/token" if p.tokens_per_step else ""
    # The kernels' work (hardware FLOPs): a checkpointed step's backward runs its forward again, which model-FLOPs
    # MFU (6N per token) leaves out; said, since the figure is otherwise read as the model's.
    recomputed = ", recomputation included" if p.options.activation_checkpointing else ""
    console.print(
        f"FLOPs per step: {flops(p.flops_per_step)}{recomputed} (forward {flops(p.forward_flops)}, "
        f"backward {flops(p.backward_flops)} per micro-batch{per_token})"
    )
    for line in p.scope:  # what the trace leaves out or assumes about the model source
        console.print(escape(line))
    uncounted = uncounted_line(p.uncounted_ops)
    if uncounted:
        console.print(escape(uncounted))
    if p.block_classes:
        console.print(f"{repeated_blocks_line(p.block_classes, tuple(b.name for b in p.blocks))}")
    if p.depth is not None:  # blocks of several kinds, or every block traced (with the reason)
        console.print(f"[dim]{escape(p.depth.note)}[/dim]")
    elif p.extrapolated_from_layers:
        depths = " and ".join(map(str, p.extrapolated_from_layers))
        console.print(f"[dim]Traced at {depths} blocks and extrapolated (exact for identical blocks).[/dim]")
    console.print(f"[dim]Traced in {p.trace_seconds:.1f} s with torch {p.torch_version}.[/dim]")
    if show_blocks and p.blocks:
        bt = Table(title="Repeated blocks", title_justify="left")
        for col in ("block", "parameters", "saved activations", "forward", "backward"):
            bt.add_column(col, justify="left" if col == "block" else "right")
        for b in p.blocks:
            bt.add_row(b.name, count(b.parameters), gib(b.activation_bytes), flops(b.forward_flops),
                       flops(b.backward_flops))
        console.print(bt)


def repeated_blocks_line(classes: tuple[str, ...], names: tuple[str, ...]) -> str:
    """One line naming the block classes, their count and, with several stacks, each stack's count.

    A stack is labelled by its container's path, less what all stacks' paths share and less indices (a
    ResNet's ``stages.0`` ... ``stages.3`` are one stack).

    Example:
        >>> repeated_blocks_line(("T5Block",), ("encoder.block.0", "encoder.block.1", "decoder.block.0"))
        'Repeated blocks: T5Block × 3 (encoder 2, decoder 1)'
        >>> repeated_blocks_line(("GPT2Block",), ("h.0", "h.1"))
        'Repeated blocks: GPT2Block × 2'
    """
    line = f"Repeated blocks: {', '.join(classes)} × {len(names)}"
    paths = [tuple(part for part in n.split(".")[:-1] if not part.isdigit()) for n in names]
    stacks = [(path, len(list(group))) for path, group in itertools.groupby(paths)]
    if len(stacks) < 2:
        return line
    shared = [path for path, _ in stacks]
    head = len(os.path.commonprefix(shared))  # noqa: RUF071 — tuples of names, compared name by name
    tail = len(os.path.commonprefix([path[head:][::-1] for path in shared]))  # noqa: RUF071
    labels = [".".join(path[head : len(path) - tail]) or ".".join(path) or "(top level)" for path, _ in stacks]
    return line + " (" + ", ".join(f"{label} {n}" for label, (_, n) in zip(labels, stacks, strict=True)) + ")"


def unused_line(parameters: int, modules: tuple[str, ...]) -> str:
    """One line saying which trainable parameters the step leaves without a gradient, and what DDP does.

    Example:
        >>> unused_line(33_600, ("encoder.layers.2", "post_layernorm"))
        'Unused in the step: 33.60K parameters (encoder.layers.2, post_layernorm): DDP runs with find_unused_parameters'
    """
    shown = ", ".join(modules[:3]) + (", ..." if len(modules) > 3 else "")
    where = f" ({shown})" if modules else ""
    return f"Unused in the step: {count(parameters)} parameters{where}: DDP runs with find_unused_parameters"
