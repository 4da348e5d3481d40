"""``autoshard export PLAN``: write the configs for a saved ``plan.json`` (DeepSpeed, Accelerate, Lightning, HF
Trainer, torchrun / deepspeed / SLURM)."""

from __future__ import annotations

import argparse

from autoshard.cli import _checks

NAME = "export"
HELP = "Write DeepSpeed / Accelerate / Lightning / HF Trainer configs and launch commands for a plan.json."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``export`` flags."""
    parser.add_argument("plan", type=_checks.path, help="a plan.json (written by `autoshard recommend "
                        "--output-dir`), a directory holding one (tune's best/), or a tune summary.json")
    parser.add_argument("--output-dir", type=_checks.path, required=True, metavar="DIR",
                        help="where to write the files")
    parser.add_argument("--force", action="store_true",
                        help="replace files that differ; remove those another export left")


def run(args: argparse.Namespace) -> int:
    """Run ``autoshard export``."""
    from autoshard.export import export_plan, read

    written = export_plan(read(args.plan), args.output_dir, force=args.force)
    for path in written:
        print(path)
    return 0
