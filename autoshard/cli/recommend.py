"""``autoshard recommend MODEL``: which strategy to train with, every candidate's numbers, and why."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from autoshard.cli import _checks
from autoshard.cli._checks import positive_int
from autoshard.cli._format import OPTIMIZERS, PRECISIONS, count, gib, print_json

if TYPE_CHECKING:
    from autoshard.models.source import ModelSource
    from autoshard.planner.plan import Plan

NAME = "recommend"
HELP = "Recommend DDP, FSDP or a DeepSpeed ZeRO stage for a model on your (or a profiled) machine."


def _clip_norm(text: str) -> float | None:
    """``--grad-clip-norm``'s value: a positive number."""
    from autoshard.errors import UsageError
    from autoshard.profiler.options import parse_grad_clip_norm

    try:
        return parse_grad_clip_norm(float(text))
    except (ValueError, UsageError):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}") from None


def add_grad_clip_norm_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--grad-clip-norm NORM`` (a positive number, refused by argparse otherwise); ``what`` says what the
    command does with it."""
    parser.add_argument("--grad-clip-norm", type=_clip_norm, default=None, metavar="NORM",
                        help=f"clip the gradients' global 2-norm to NORM before each step: {what} "
                             "(default: no clipping)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``recommend`` flags."""
    from autoshard.cli._hardware_args import add_hardware_arguments

    add_request_arguments(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output (docs/recommend.md)")
    parser.add_argument("--plot", type=_checks.path, metavar="FILE",
                        help="write a plot of per-strategy memory, in the format of its suffix (.png, .svg, .pdf, ...)")
    parser.add_argument("--output-dir", type=_checks.path, metavar="DIR",
                        help="write plan.json and the configs for the recommendation (docs/export.md)")
    parser.add_argument("--force", action="store_true", help="with --output-dir: replace files that differ;"
                        " remove those another export left")
    add_hardware_arguments(parser)


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    """The model and what to plan for it (batch, sequence, precision, optimizer, strategies...): ``recommend``'s
    flags that ``compare`` shares."""
    from autoshard.cli.profile import add_checkpointing_argument, add_keep_grads_argument, add_optimizer_impl_argument

    parser.add_argument("model", help="a model.py, a Hugging Face config.json, or a catalog name (autoshard models)")
    parser.add_argument("--batch-size", type=positive_int, default=None,
                        help="micro-batch per device (default: largest that fits)")
    parser.add_argument("--global-batch-size", type=positive_int, default=None,
                        help="samples per optimizer step, all devices")
    parser.add_argument("--seq-len", type=positive_int, default=None, help="sequence length (default: the model's)")
    parser.add_argument("--precision", default=None,
                        help=f"one of {', '.join(PRECISIONS)} (default bf16-mixed, or 16-mixed on a GPU without bf16: "
                             "V100, T4; 32-true on CPU)")
    parser.add_argument("--optimizer", default="adamw", help=f"one of {', '.join(OPTIMIZERS)} (default adamw)")
    add_optimizer_impl_argument(parser)
    add_checkpointing_argument(parser, default=None)
    parser.add_argument("--float32-matmul-precision", choices=("highest", "high", "medium"), default=None,
                        help="the run's torch.set_float32_matmul_precision: high or medium price fp32 matmuls on "
                             "TF32 tensor cores (default: what the model file sets, else highest, torch's)")
    add_grad_clip_norm_argument(parser, "priced, and written into the plan and the exported configs")
    add_keep_grads_argument(parser)
    parser.add_argument("--reduce-dtype", choices=("fp32", "bf16"), default=None,
                        help="FSDP2's gradient reduce-scatter dtype (MixedPrecisionPolicy.reduce_dtype; default fp32)")
    parser.add_argument("--goal", choices=("pretrain", "finetune"), default="pretrain",
                        help="pretrain: throughput, least communication; finetune: memory headroom")
    parser.add_argument("--strategies", nargs="+", metavar="NAME", help="consider only these strategies")
    parser.add_argument("--safety-margin", type=float, default=0.10,
                        help="fraction of device memory kept free (default 0.10)")
    parser.add_argument("--jobs", type=positive_int, default=None, metavar="N",
                        help="trace in at most N processes at once (default: one per CPU core; 1: in this process)")
    parser.add_argument("--no-cache", action="store_true",
                        help="trace the model again: neither read nor write the workload cache (autoshard cache)")


def request_options(args: argparse.Namespace) -> dict[str, object]:
    """:func:`autoshard.recommend`'s keyword arguments from :func:`add_request_arguments`' flags."""
    return dict(batch_size=args.batch_size, global_batch_size=args.global_batch_size, seq_len=args.seq_len,
                precision=args.precision, optimizer=args.optimizer, goal=args.goal, strategies=args.strategies,
                safety_margin=args.safety_margin, optimizer_impl=args.optimizer_impl,
                activation_checkpointing=args.checkpointing, reduce_dtype=args.reduce_dtype,
                float32_matmul_precision=args.float32_matmul_precision, grad_clip_norm=args.grad_clip_norm,
                cache=not args.no_cache, jobs=args.jobs, set_grads_to_none=not args.keep_grads)


def run(args: argparse.Namespace) -> int:
    """Run ``autoshard recommend``."""
    from autoshard._progress import tracing_progress
    from autoshard.api import recommend
    from autoshard.cli._checks import check_output_dir, check_plot_path
    from autoshard.cli._hardware_args import hardware_from_args
    from autoshard.errors import UsageError

    if args.force and args.output_dir is None:
        raise UsageError("--force replaces files in --output-dir, and no --output-dir was given.",
                         hint="Add --output-dir DIR, or drop --force.")
    source = args.model
    if args.output_dir is not None:  # before the traces: they take 10-60 s
        check_output_dir(args.output_dir)
        if not args.force:
            source = _check_export_of_this_model(args.model, args.output_dir)
    if args.plot is not None:
        check_plot_path(args.plot)
    hardware = hardware_from_args(args)
    with tracing_progress(enabled=not args.json) as progress:
        plan = recommend(source, hardware=hardware, progress=progress,
                         **request_options(args))  # type: ignore[arg-type]
    if plan.cached_workload is not None and not args.json:  # --json says it in "cached_workload"
        print(f"autoshard: note: the traced step came from the workload cache ({plan.cached_workload}); "
              "--no-cache traces again.", file=sys.stderr)
    if args.plot is not None:
        from autoshard.cli._plot import plot_memory

        plot_memory(plan, args.plot)
    written = []
    if args.output_dir is not None:
        from autoshard.export import export_plan

        written = export_plan(plan, args.output_dir, force=args.force)
    if args.json:  # the files written go with the JSON (stdout holds it alone) and to stderr, as without --json
        data = plan.to_dict()
        if args.output_dir is not None:
            data["written"] = [str(p) for p in written]
            print(f"Wrote {len(written)} files to {args.output_dir}: {', '.join(p.name for p in written)}",
                  file=sys.stderr)
        print_json(data)
        return 0
    _print(plan)
    if args.plot is not None:
        print(f"Wrote {args.plot}")
    if written:
        print(f"Wrote {len(written)} files to {args.output_dir}: {', '.join(p.name for p in written)}")
    return 0


def _print(plan: Plan) -> None:
    from rich.markup import escape
    from rich.table import Table

    from autoshard._console import print_table, stdout_console
    from autoshard.hardware.units import format_throughput

    console = stdout_console()
    hw = plan.hardware
    device = hw.gpu.display_name if hw.gpu is not None else "CPU process"
    w = plan.workload
    matmuls = w.float32_matmul_precision
    tf32 = f" (float32 matmul precision {matmuls})" if matmuls != "highest" else ""
    counts = ([f"{count(w.trainable_parameter_count)} trainable"] if w.trainable_parameter_count < w.parameter_count
              else []) + ([] if w.active_parameter_count is None else [f"{count(w.active_parameter_count)} active "
                                                                      "per token, input embedding included"])
    trains = f" ({'; '.join(counts)})" if counts else ""
    console.print(f"[bold]{escape(w.model)}[/bold] — {count(w.parameter_count)} parameters{trains}, "
                  f"{w.precision.value}{tf32}, "
                  f"{w.optimizer}" + (f" ({w.optimizer_impl})" if w.optimizer_impl else "")
                  + (f", gradients clipped to norm {w.grad_clip_norm:g}" if w.grad_clip_norm is not None else "")
                  + ("" if w.set_grads_to_none else ", gradients kept between steps")
                  + (f", seq {w.seq_len}" if w.seq_len else "")
                  + f" on {hw.nodes} node{'s' if hw.nodes > 1 else ''} × {hw.processes_per_node} × {device} "
                  f"({plan.request.goal})")
    for note in hw.notes:
        console.print(f"[dim]{escape(note)}[/dim]")
    table = Table(title_justify="left", pad_edge=False)
    for col in ("strategy", "ckpt", "fits", "micro", "GPU/device", "CPU/node", "NVMe/node", "max micro",
                "step s", "samples/s", "tokens/s"):
        table.add_column(col, justify="left" if col in ("strategy", "fits") else "right", no_wrap=True)
    for e in plan.candidates:
        m, c = e.memory, e.cost
        table.add_row(
            ("[bold green]" + escape(e.strategy) + "[/]") if e is plan.recommended else escape(e.strategy),
            str(w.checkpoint_mode) if e.candidate.activation_checkpointing else "",
            "yes" if e.fits else "[red]no[/]",
            str(e.candidate.micro_batch_size) + (f"×{e.gradient_accumulation}" if e.gradient_accumulation > 1 else ""),
            gib(m.gpu.total) if m else "—",
            gib(m.cpu_bytes_per_node) if m and m.cpu_bytes_per_node else "",
            gib(m.nvme_bytes_per_node) if m and m.nvme_bytes_per_node else "",
            str(e.max_micro_batch_size),
            f"{c.step_time_s:.3f}" if c else "—",
            format_throughput(c.samples_per_s) if c else "—",
            f"{c.tokens_per_s:,.0f}" if c and c.tokens_per_s else "",
            style=None if e.fits else "dim",  # a row that does not fit: its speed is at a micro-batch that OOMs
        )
    print_table(console, table)
    console.print("[bold]Recommendation:[/bold] " + escape(plan.explanation[0]))
    for line in plan.explanation[1:]:
        console.print("  • " + escape(line))
    on_gpu = plan.device_memory(plan.recommended)
    if on_gpu is not None:
        # The reserve here is only its floor (segment rounding): what the caching allocator keeps beyond the
        # allocated peak (a probe's GPT-2 at batch 8: 1.54 GiB, 19 %) needs profile --reserved's replay.
        console.print(f"On each GPU, nvidia-smi shows at least {gib(on_gpu['nvidia_smi_total'])}: "
                      f"{gib(on_gpu['allocated'])} allocated + {gib(on_gpu['cuda_context'])} CUDA context (outside the "
                      f"allocator) + the allocator's reserve, at least {gib(on_gpu['reserve'])}; what it caches beyond "
                      "that is not predicted here (`autoshard profile MODEL --reserved` replays it for one device).")
    rejected = [e for e in plan.candidates if not e.fits]
    if rejected:
        console.print("[bold]Rejected:[/bold]")
        for e in rejected:
            mode = plan.workload.checkpoint_mode  # every candidate's (the table's ckpt column)
            tag = e.strategy + (f" + checkpointing ({mode})" if e.candidate.activation_checkpointing else "")
            console.print(escape(f"  • {tag}: {e.reasons[0] if e.reasons else 'does not fit'}"))


def _check_export_of_this_model(model: str, output_dir: Path) -> str | ModelSource:
    """Refuse, before the traces, an ``--output-dir`` whose ``plan.json`` is another model's: every file would
    clash once the plan is made (identical files, from re-running the same command, are accepted then).

    Returns:
        The model's source, loaded here when a ``plan.json`` had to be compared (so it is loaded once), or
        ``model`` as given.
    """
    import json

    from autoshard.errors import UsageError
    from autoshard.models import load_source
    from autoshard.planner.plan_file import KIND

    existing = output_dir / "plan.json"
    if not existing.is_file():
        return model
    try:
        data = json.loads(existing.read_text(encoding="utf-8"))
        name = data["model"]["name"] if isinstance(data, dict) and data.get("kind") == KIND else None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        name = None
    loaded = load_source(model)
    if name == loaded.name:
        return loaded
    what = f"the export of another model ({name})" if isinstance(name, str) else "a plan.json that is no autoshard plan"
    raise UsageError(f"--output-dir {output_dir} holds {what}, and this plan would replace its files.",
                     hint="Choose another --output-dir, or pass --force to replace them.")
