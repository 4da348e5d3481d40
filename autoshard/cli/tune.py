"""``autoshard tune MODEL``: short real training trials under Optuna, and the fastest configuration's files."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from autoshard.cli import _checks
from autoshard.cli._checks import nonnegative_int, positive_int, positive_seconds, seed
from autoshard.cli._format import OPTIMIZERS, PRECISIONS, print_json

NAME = "tune"
HELP = "Tune the strategy and its knobs with short real training trials on this machine (Optuna)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``tune`` flags."""
    from autoshard.cli._hardware_args import add_hardware_arguments
    from autoshard.cli.recommend import add_grad_clip_norm_argument

    parser.add_argument("model", help="a model.py, a Hugging Face config.json, or a catalog name (autoshard models)")
    parser.add_argument("--trials", type=positive_int, default=12, help="trials the study holds when done (default 12)")
    parser.add_argument("--timeout", type=positive_seconds, default=None, metavar="S",
                        help="stop starting trials after S s, or when less is left than a trial takes")
    parser.add_argument("--trial-timeout", type=positive_seconds, default=300.0, metavar="S",
                        help="stop a trial after S s, start-up included (default 300)")
    parser.add_argument("--storage", metavar="URL", default=None,
                        help="Optuna storage shared by several nodes, e.g. postgresql://user:pw@host/db, or a "
                             "journal file *.log (default: sqlite:///OUTPUT_DIR/study.db)")
    parser.add_argument("--study-name", default=None, help="default: model, machine and layout")
    parser.add_argument("--output-dir", type=_checks.path, default=Path("autoshard-tune"),
                        help="study file, trial logs, summary, plots and best/ (default ./autoshard-tune)")
    parser.add_argument("--json", action="store_true", help="every trial and the best configuration as JSON")
    parser.add_argument("--steps", type=positive_int, default=10, help="optimizer steps per trial (default 10)")
    parser.add_argument("--warmup-steps", type=nonnegative_int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--strategies", nargs="+", metavar="NAME", help="consider only these strategies")
    parser.add_argument("--top", type=positive_int, default=3,
                        help="compare the planner's N best strategies (default 3)")
    parser.add_argument("--batch-size", type=positive_int, default=None,
                        help="a fixed micro-batch per device (not tuned)")
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", metavar="N", help="micro-batches to try")
    parser.add_argument("--global-batch-size", type=positive_int, default=None,
                        help="samples per optimizer step, all devices")
    parser.add_argument("--seq-len", type=positive_int, default=None, help="sequence length (default: the model's)")
    parser.add_argument("--precision", default=None,
                        help=f"one of {', '.join(PRECISIONS)} (default bf16-mixed, or 16-mixed on a GPU "
                             "without bf16: V100, T4; 32-true on CPU)")
    parser.add_argument("--optimizer", default=None,
                        help=f"one of {', '.join(OPTIMIZERS)} (default adamw; a model file's optimizer() wins)")
    add_grad_clip_norm_argument(parser, "the trials clip as the run will, and best/plan.json and its configs "
                                        "say so")
    parser.add_argument("--cache-dir", type=_checks.path, default=None, help="result cache (default "
                        "$AUTOSHARD_CACHE_DIR/tune, else ~/.cache/autoshard/tune)")
    parser.add_argument("--no-cache", action="store_true",
                        help="measure and trace again: use neither the result cache nor the workload cache")
    parser.add_argument("--no-prune", action="store_true", help="run every trial to the end")
    parser.add_argument("--seed", type=seed, default=0, help="sampler and training seed (default 0)")
    parser.add_argument("--compress-gradients", action="store_true",
                        help="also tune DDP's gradient compression (fp16/bf16 hooks, PowerSGD), which changes what "
                             "training computes (default: gradients reduced as they are)")
    add_hardware_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``autoshard tune``."""
    from autoshard.cli._hardware_args import hardware_from_args
    from autoshard.errors import UsageError
    from autoshard.report import print_summary
    from autoshard.tuner.loop import Interrupted, Terminated
    from autoshard.tuning import tune

    if args.steps < args.warmup_steps + 2:  # before the hardware and the model are read
        raise UsageError(f"--steps ({args.steps}) must exceed --warmup-steps ({args.warmup_steps}) by at least 2: "
                         "the steps after the warm-up are timed, and throughput needs more than one.",
                         hint=f"E.g. --steps {args.warmup_steps + 5} --warmup-steps {args.warmup_steps}.")
    hardware = hardware_from_args(args)
    terminated: list[int] = []

    def on_sigterm(signum: int, frame: object) -> None:  # `kill`, a job scheduler's time limit: as Ctrl-C
        terminated.append(signum)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        result = tune(
            args.model, hardware=hardware, strategies=args.strategies, top_strategies=args.top,
            batch_size=args.batch_size, micro_batch_sizes=args.batch_sizes, global_batch_size=args.global_batch_size,
            seq_len=args.seq_len, precision=args.precision, optimizer=args.optimizer,
            grad_clip_norm=args.grad_clip_norm, trials=args.trials,
            timeout_s=args.timeout, trial_timeout_s=args.trial_timeout, steps=args.steps,
            warmup_steps=args.warmup_steps, storage=args.storage, study_name=args.study_name,
            output_dir=args.output_dir, cache_dir=args.cache_dir, use_cache=not args.no_cache,
            prune=not args.no_prune, seed=args.seed, compress_gradients=args.compress_gradients,
            progress=True,  # on stderr: --json's stdout holds the JSON alone, and a long study shows its trials
        )
    except KeyboardInterrupt as e:  # the running trial's workers are stopped; it is recorded as interrupted
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        code = 143 if terminated else 130  # what a shell reports for a process SIGTERM or SIGINT ended
        summary = Path(args.output_dir) / "summary.md"
        if args.json and isinstance(e, Interrupted):  # what finished, as the finished study's JSON would be
            print_json(e.result.to_dict())
        elif args.json:  # stopped before the study was made (planning, tracing): the error document
            from autoshard.cli import _print_error_json

            _print_error_json("Interrupted", f"{how} before any trial finished", None, code)
        if summary.is_file() and isinstance(e, Interrupted):
            print(f"autoshard: {how}; what finished is in {summary}, and the same command resumes the study in "
                  f"{args.output_dir} (a trial it was running runs again first).", file=sys.stderr)
        else:  # before the first trial, or stopped again while the summary was written
            print(f"autoshard: {how} before a summary was written; the same command resumes the study in "
                  f"{args.output_dir} (what it measured is kept in its study).", file=sys.stderr)
        return code
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        print_json(result.to_dict())
        return 0 if result.best is not None else 1
    print_summary(result)
    if result.best_plan is not None:
        print(f"Best configuration written to {Path(result.output_dir) / 'best'} "
              f"(train with it: autoshard.fit(model, plan=\"{Path(result.output_dir) / 'best' / 'plan.json'}\")).")
    else:
        print("No trial completed: nothing written. See the trials' logs under "
              f"{Path(result.output_dir) / 'trials'}.")
    return 0 if result.best is not None else 1
