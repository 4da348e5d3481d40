"""``autoshard compare MODEL --hardware A B ...``: the machines to rent, side by side: each one's plan, its
predicted throughput, and the hours (and, given prices, the cost) of a training budget."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from autoshard.cli._format import gib, print_json

if TYPE_CHECKING:
    from autoshard.errors import Rewrites
    from autoshard.planner.compare import MachineOption

NAME = "compare"
HELP = "Compare machines (hardware profiles or files) for training a model: plan, throughput, time and cost."


def _amount(text: str) -> float:
    """A whole, positive, finite number of tokens or samples, as ``2e10`` or ``20000000000``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number such as 2e10, not {text!r}") from None
    if not value > 0 or value == float("inf"):
        finite = " finite" if value == float("inf") else ""
        raise argparse.ArgumentTypeError(f"must be a{finite} positive number, not {text!r}")
    if value != int(value):
        raise argparse.ArgumentTypeError(f"must be a whole number of tokens or samples, not {text!r}")
    return value


def _price(text: str) -> tuple[str, float]:
    """``MACHINE=USD``: a machine's price per GPU-hour."""
    machine, sep, usd = text.rpartition("=")
    try:
        value = float(usd) if sep and machine else None
    except ValueError:
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(f"must be MACHINE=USD per GPU-hour (e.g. dgx-h100=2.99), not {text!r}")
    if not value > 0 or value == float("inf"):  # NaN too: the form was right, the number is not
        raise argparse.ArgumentTypeError(f"a price must be a finite positive number of USD per GPU-hour, not {usd} "
                                         f"({text!r})")
    return machine, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``compare`` flags: ``recommend``'s request, the machines, the budget and the prices."""
    from autoshard.cli.recommend import add_request_arguments

    add_request_arguments(parser)
    group = parser.add_argument_group("machines and budget")
    group.add_argument("--hardware", nargs="+", required=True, metavar="NAME|FILE[:G[xN]]",
                       help="the machines: shipped profiles (autoshard hardware --list) or YAML files, each sized as "
                            "NAME:G for G GPUs per node or NAME:GxN for N such nodes (e.g. dgx-h100 l40s:8 "
                            "h100-sxm-80gb:8x2)")
    budget = group.add_mutually_exclusive_group()
    budget.add_argument("--tokens", type=_amount, metavar="N", help="the training budget in tokens (e.g. 2e10): "
                        "hours and cost to train it")
    budget.add_argument("--samples", type=_amount, metavar="N", help="the training budget in samples")
    group.add_argument("--price", type=_price, action="append", default=[], metavar="MACHINE=USD",
                       help="a machine's price per GPU-hour, named as in --hardware (repeat for each)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def compare_terms(machine: str, gpus_per_node: int) -> Rewrites:
    """What ``machine`` is sized and described with, for the ``recommend`` flags the plans' notes name and compare
    does not take: it names machines (``NAME:G``, ``NAME:GxN``) and reads a host's RAM, cores and disks from a node
    hardware file's ``cpu_memory:``, ``cpu_cores:`` and ``nvme:`` (docs/hardware.md)."""
    from autoshard.hardware.selection import sized_machine

    name = sized_machine(machine)[0].replace("\\", "\\\\")  # a replacement's backslashes are re.sub's
    g = gpus_per_node
    return (
        (r"e\.g\. --gpus/--nodes for \d+: one node of (\d+) \(--gpus \d+\), or (\d+) nodes of (\d+)",
         rf"e.g. {name}:\1 (one node), or {name}:\3x\2 (\2 nodes of \3)"),
        (r"e\.g\. --gpus/--nodes for \d+: (\d+) nodes of (\d+)", rf"e.g. {name}:\2x\1 (\1 nodes of \2)"),
        (r"e\.g\. --gpus/--nodes for (\d+)", rf"e.g. {name}:\1"),
        (r"--gpus/--nodes for (\d+)", rf"{name} sized to \1 GPUs"),
        (r"\(--gpus (\d+)\)", rf"({name}:\1)"), (r"\(--nodes\)", f"(more nodes: {name}:{g}xN)"),
        (r"larger GPUs \(--hardware\)", "larger GPUs (another machine)"),
        (r"\(([^()]*), with --hardware\)", r"(\1, as another machine)"),
        (r"--nvme PATH", "nvme: in a node hardware file"),
        (r"\(--cpu-memory\)", "(cpu_memory: in a node hardware file)"),
        (r"--cpu-memory SIZE", "cpu_memory: in a node hardware file"),
        (r"--cpu-cores N", "cpu_cores: in a node hardware file"),
        (r"--cpu-cores, or a node file with cpu_cores,", "a node hardware file's cpu_cores:"),
        (r"--cpu-memory\b", "cpu_memory: in a node hardware file"), (r"--cpu-cores\b", "cpu_cores: in a node "
                                                                                     "hardware file"),
        (r"--gpu-memory\b", "a GPU's memory: in a hardware file"),
        (r"--gpus (\d+)", rf"{name}:\1"), (r"--nodes (\d+)", rf"{name}:{g}x\1"),
        (r"--gpus\b", f"{name}:G"), (r"--nodes\b", f"{name}:GxN"),
    )


def in_compare_terms(text: str, machine: str, gpus_per_node: int) -> str:
    """``text`` with the flags compare lacks said as compare takes them, for ``machine`` (:func:`compare_terms`).

    Example:
        >>> in_compare_terms("the host's RAM is unknown (--cpu-memory SIZE has the plan check it)", "t4", 1)
        "the host's RAM is unknown (cpu_memory: in a node hardware file has the plan check it)"
        >>> in_compare_terms("e.g. --gpus/--nodes for 8: one node of 8 (--gpus 8), or 8 nodes of 1", "t4", 1)
        'e.g. t4:8 (one node), or t4:1x8 (8 nodes of 1)'
        >>> in_compare_terms("(`autoshard hardware --benchmark-disk PATH` measures it)", "t4", 1)
        '(`autoshard hardware --benchmark-disk PATH` measures it)'
    """
    from autoshard.errors import reworded

    return reworded(text, compare_terms(machine, gpus_per_node), for_python=False)


def _terms(option: MachineOption, text: str) -> str:
    return in_compare_terms(text, option.machine, option.hardware.processes_per_node)


def run(args: argparse.Namespace) -> int:
    """Run ``autoshard compare``."""
    from autoshard._progress import tracing_progress
    from autoshard.cli.recommend import request_options
    from autoshard.errors import UsageError
    from autoshard.models import load_source
    from autoshard.planner.compare import compare

    names = [m.lower() for m, _ in args.price]
    twice = sorted({m for m, _ in args.price if names.count(m.lower()) > 1})
    if twice:
        raise UsageError(f"--price names {' and '.join(twice) if len(twice) > 1 else twice[0]} twice"
                         f"{' (case aside)' if len({m.lower() for m in twice}) < len(twice) else ''}.",
                         hint="Give each machine one price.")
    source = args.model
    if args.tokens is not None:  # before the traces: a model without a sequence has no tokens/s
        source = load_source(args.model)
        if not source.accepts_seq_len:
            raise UsageError(_NO_TOKENS.format(model=args.model), hint=_SAMPLES_INSTEAD)
    with tracing_progress(enabled=not args.json) as progress:
        options = compare(source, args.hardware, prices=dict(args.price), progress=progress,
                          **request_options(args))
    budget = {"tokens": args.tokens, "samples": args.samples}
    fitting = [o for o in options if o.plan is not None]
    if args.tokens is not None and fitting and all(o.tokens_per_s is None for o in fitting):
        raise UsageError(_NO_TOKENS.format(model=args.model), hint=_SAMPLES_INSTEAD)
    if args.json:
        machines = [o.to_dict(**budget) for o in options]
        for o, m in zip(options, machines, strict=True):
            m["notes"] = [_terms(o, n) for n in m["notes"]]
            m["refused"] = None if m["refused"] is None else _terms(o, m["refused"])
        print_json({"model": args.model, "budget": budget, "machines": machines})
        return _exit_code(options)
    _print(args.model, options, tokens=args.tokens, samples=args.samples)
    return _exit_code(options)


_NO_TOKENS = ("--tokens prices the budget in tokens, and {model}'s batches have no sequence: its throughput is in "
              "samples only.")
_SAMPLES_INSTEAD = "Give the budget with --samples N instead."


def _exit_code(options: tuple[MachineOption, ...]) -> int:
    """3 when nothing fits on any machine, as ``recommend`` exits when nothing fits; else 0."""
    return 3 if options and all(o.plan is None for o in options) else 0


def _figure(x: float) -> str:
    """Hours, dollars: three significant digits or more (``0.243``, ``1.72``, ``12.3``, ``1,234``), ``1.2e+12`` when
    huge.

    Example:
        >>> [_figure(x) for x in (0.2431, 1.7213, 12.34, 1234.5, 3.4e12)]
        ['0.243', '1.72', '12.3', '1,234', '3.4e+12']
    """
    if x >= 1e9:
        return f"{x:.3g}"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if x < 1 else f"{x:.{1 if x >= 10 else 2}f}"


def _print(model: str, options: tuple[MachineOption, ...], *, tokens: float | None, samples: float | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from autoshard._console import print_table, stdout_console
    from autoshard.hardware.units import format_throughput

    console = stdout_console()
    budget = tokens if tokens is not None else samples
    unit = "tokens" if tokens is not None else "samples"
    priced = any(o.gpu_hour_usd is not None for o in options)
    per = "tokens" if tokens is not None or (samples is None and any(o.tokens_per_s for o in options)) else "samples"
    machines = f"{len(options)} machine{'s' if len(options) != 1 else ''}"
    title = f"{escape(model)} on {machines}" + (f": {budget:.3g} {unit}" if budget else "")
    table = Table(title=title, title_justify="left")
    columns = ["machine", "GPUs", "plan", "global batch", "GPU/device", "samples/s", "tokens/s", "tokens/s/GPU"]
    columns += ["hours"] if budget else []
    columns += ["$/GPU-h", f"$/1M {per}"] if priced else []
    columns += ["cost $"] if budget and priced else []
    for column in columns:
        table.add_column(column, justify="left" if column in ("machine", "plan") else "right")
    for o in options:
        rec = None if o.plan is None else o.plan.recommended
        if rec is None:
            row = [escape(o.machine), str(o.gpus), "not planned" if o.refused and "--global-batch-size" in o.refused
                   else "nothing fits", "", "", "", "", ""]
        else:
            c = rec.candidate
            plan = (f"{c.strategy}, micro-batch {c.micro_batch_size}"
                    + (f" x {rec.gradient_accumulation} accumulated" if rec.gradient_accumulation > 1 else "")
                    + (f", ckpt ({o.checkpointing})" if o.checkpointing not in (None, "none") else ""))
            tps = o.tokens_per_s
            row = [escape(o.machine), str(o.gpus), plan, f"{o.global_batch_size:,}",
                   gib(rec.memory.gpu.total) if rec.memory else "—", format_throughput(o.samples_per_s or 0.0),
                   "—" if tps is None else format_throughput(tps),
                   "—" if tps is None else format_throughput(tps / o.gpus)]
        hours, cost = o.hours(tokens=tokens, samples=samples), o.cost_usd(tokens=tokens, samples=samples)
        per_million = o.usd_per_million(per)
        row += (["—" if hours is None else _figure(hours)] if budget else [])
        row += (["—" if o.gpu_hour_usd is None else f"{o.gpu_hour_usd:.4g}",
                 "—" if per_million is None else _figure(per_million)] if priced else [])
        row += (["—" if cost is None else _figure(cost)] if budget and priced else [])
        table.add_row(*row)
    print_table(console, table)
    for o in options:
        if o.refused is not None:
            console.print(f"{escape(o.machine)}: {escape(_terms(o, o.refused))}")
        for note in o.notes:  # what its figures rest on that the hardware did not say
            console.print(f"{escape(o.machine)}: {escape(_terms(o, note))}")
    _print_cheapest(console, options, per)
    fitting = [o for o in options if o.plan is not None]
    batches = {o.global_batch_size for o in fitting}
    if len(batches) > 1:
        console.print("The machines' plans train different global batches (the batch size changes what training "
                      "learns): --global-batch-size N plans each for the same one.")
    if fitting:
        from autoshard.planner.compare import canonical

        console.print(f"Fastest: {escape(fitting[0].machine)}. A machine's plan and reasons: autoshard recommend "
                      f"{escape(model)} --hardware {escape(canonical(fitting[0].machine))}, with the same flags.")
    console.print("Predicted by autoshard's step-time model (docs/strategies/step-time.md): a GPU without "
                  "measurements of its own is priced at generic efficiencies, which its machine's notes say.")


def _print_cheapest(console: Any, options: tuple[MachineOption, ...], per: str) -> None:
    """The cheapest of the machines priced that fit, per million tokens (or samples): what any budget costs
    least on; with one such machine, that the others need a price to be weighed."""
    from rich.markup import escape

    priced = [o for o in options if o.usd_per_million(per) is not None]
    if not priced:
        return
    cheapest = min(priced, key=lambda o: o.usd_per_million(per) or 0.0)
    if len(priced) > 1:
        console.print(f"Cheapest of those priced: {escape(cheapest.machine)} "
                      f"(${_figure(cheapest.usd_per_million(per) or 0.0)} per 1M {per}).")
    elif len([o for o in options if o.plan is not None]) > 1:
        console.print(f"Only {escape(cheapest.machine)} is priced of the machines that fit: --price MACHINE=USD for "
                      "the others weighs their cost.")
