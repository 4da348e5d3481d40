"""How long `autoshard profile` and `autoshard recommend` take, cold (a fresh process, nothing cached), per model.

Usage:
    python benchmarks/recommend_speed.py [--models gpt2 gpt2-xl llama-2-7b llama-2-13b llama-2-70b]
                                         [--hardware dgx-h100] [--nodes 4] [--seq-len 4096] [--repeat 3]
                                         [--out docs/benchmarks]

For each model, ``--repeat`` times each, one after the other:

* ``python -m autoshard profile MODEL --seq-len S --json``
* ``python -m autoshard recommend MODEL --hardware H --nodes N --seq-len S --json``

Each run is a fresh process, so its time includes Python start-up and imports: the wall time a user waits. S is
``--seq-len``, or the model's longest sequence where that is shorter (gpt2 has 1024 learned positions, and the CLI
refuses a longer sequence with exit status 2). ``recommend`` exiting 0 (a plan) or 3 (no feasible plan) is a
measurement; any other exit status, or a run past 600 s, is a failure recorded in the model's row, and the
benchmark goes on. Each run also records how many cores other processes kept busy meanwhile (``/proc/stat`` less
this process tree's ``getrusage``), so a disturbed run can be told from a slow one.

Writes docs/benchmarks/recommend_speed.{md,json}. Target (issue "Decide"): llama-2-70b recommend on 4 nodes ×
8 × H100 80 GB at sequence 4096 in <= 10 s on the 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

import autoshard
from autoshard.errors import AutoshardError
from autoshard.models import load_source

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared module beside this script, however it is loaded
from _common import cpu_model, cpu_seconds, foreign_cores, positive

SCRIPT = Path(__file__).resolve()
DEFAULT_MODELS = ("gpt2", "gpt2-xl", "llama-2-7b", "llama-2-13b", "llama-2-70b")
"""Catalog models from 124M to 69B parameters, smallest first."""
RECOMMEND_OK_EXIT_CODES = (0, 3)
"""``autoshard recommend``: 0 is a plan, 3 is "nothing fits" (docs/recommend.md)."""
PROFILE_OK_EXIT_CODES = (0,)
RUN_TIMEOUT_S = 600.0
"""One CLI run taking longer than this is recorded as a failure."""
TARGET_MODEL, TARGET_HARDWARE, TARGET_NODES, TARGET_SEQ_LEN = "llama-2-70b", "dgx-h100", 4, 4096
TARGET_S = 10.0
"""Issue "Decide": llama-2-70b on 4 nodes × 8 × H100 80 GB at sequence 4096 in <= 10 s on the 2-core machine."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Runs:
    """The repeated cold runs of one CLI command."""

    command: str
    """The command as a user types it (``python -m autoshard ...``)."""
    seconds: list[float]
    """Wall time of each run that finished, failed ones included."""
    foreign_cores: list[float | None]
    """Cores other processes kept busy on average during each run (``None`` without ``/proc/stat``)."""
    exit_code: int | None
    """The last run's exit status; ``None`` when it timed out."""
    stdout: str
    """The last run's standard output (the ``--json`` answer)."""
    error: str | None
    """Why the command failed (the CLI's error line, or the timeout); ``None`` when every run succeeded."""

    @property
    def median_s(self) -> float | None:
        """Median wall time, ``None`` when the command failed or never ran."""
        return None if self.error is not None or not self.seconds else statistics.median(self.seconds)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (times rounded to 10 ms, without the captured output)."""
        data = asdict(self)
        del data["stdout"]
        data["seconds"] = [round(t, 2) for t in self.seconds]
        data["median_s"] = None if self.median_s is None else round(self.median_s, 2)
        return data


# -- command line --------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``argparse`` exits with status 2 on a bad argument."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), metavar="NAME",
                        help="catalog names or model files, timed in this order")
    parser.add_argument("--hardware", default=TARGET_HARDWARE, help="hardware profile for recommend")
    parser.add_argument("--nodes", type=positive, default=TARGET_NODES)
    parser.add_argument("--seq-len", type=positive, default=TARGET_SEQ_LEN,
                        help="capped at each model's longest sequence")
    parser.add_argument("--repeat", type=positive, default=3, help="cold runs of each command")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"), help="directory for the report")
    return parser.parse_args(argv)


def seq_len_for(model: str, requested: int) -> int | None:
    """The sequence length to ask for: ``requested``, capped at the model's longest; ``None`` for models
    without sequences. A model that does not load gets ``requested``, and the CLI reports why in its row."""
    try:
        source = load_source(model)
    except AutoshardError:
        return requested
    if not source.accepts_seq_len:
        return None
    return requested if source.max_seq_len is None else min(requested, source.max_seq_len)


def profile_argv(model: str, seq_len: int | None) -> list[str]:
    """``autoshard profile`` arguments (after ``python -m autoshard``)."""
    return ["profile", model, *_seq_flag(seq_len), "--json"]


def recommend_argv(model: str, seq_len: int | None, hardware: str, nodes: int) -> list[str]:
    """``autoshard recommend`` arguments (after ``python -m autoshard``)."""
    return ["recommend", model, "--hardware", hardware, "--nodes", str(nodes), *_seq_flag(seq_len), "--json"]


def _seq_flag(seq_len: int | None) -> list[str]:
    return [] if seq_len is None else ["--seq-len", str(seq_len)]


# -- measuring -----------------------------------------------------------------------------------------------


def run_cold(cli_argv: list[str], repeat: int, ok_exit_codes: Sequence[int]) -> Runs:
    """Run ``python -m autoshard *cli_argv`` ``repeat`` times, each in a fresh process, stopping at a failure."""
    cmd = [sys.executable, "-m", "autoshard", *cli_argv]
    seconds: list[float] = []
    loads: list[float | None] = []
    exit_code: int | None = None
    stdout, error = "", None
    for _ in range(repeat):
        before = cpu_seconds()
        t0 = time.perf_counter()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            exit_code, error = None, f"timed out after {RUN_TIMEOUT_S:.0f} s"
            break
        wall_s = time.perf_counter() - t0
        seconds.append(wall_s)
        loads.append(foreign_cores(before, cpu_seconds(), wall_s))
        exit_code, stdout = done.returncode, done.stdout
        if exit_code not in ok_exit_codes:
            error = f"exit {exit_code}: {_error_line(done.stderr)}"
            break
    return Runs(command=shlex.join(["python", "-m", "autoshard", *cli_argv]), seconds=seconds, foreign_cores=loads,
                exit_code=exit_code, stdout=stdout, error=error)


def _error_line(stderr: str) -> str:
    """The CLI's ``autoshard: error: ...`` line, else the last line written (a traceback's exception)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("autoshard: error:"):
            return line.removeprefix("autoshard: error:").strip()
    return lines[-1] if lines else "no output"


def _json_or_none(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def outcome(recommend: Runs) -> str:
    """What ``recommend`` answered: strategy and micro-batch, "no feasible plan", or the failure."""
    if recommend.error is not None:
        return f"failed: {recommend.error}"
    if recommend.exit_code == 3:
        return "no feasible plan"
    rec = (_json_or_none(recommend.stdout) or {}).get("recommended")
    if not isinstance(rec, dict):
        return "failed: no recommendation in the JSON output"
    checkpointing = ", activation checkpointing" if rec.get("activation_checkpointing") else ""
    return f"{rec['strategy']}, micro-batch {rec['micro_batch_size']}{checkpointing}"


def parameter_count(profile: Runs, recommend: Runs) -> int | None:
    """The model's parameter count from recommend's JSON, else profile's (recommend prints none on exit 3)."""
    rec_model = (_json_or_none(recommend.stdout) or {}).get("model")
    if isinstance(rec_model, dict) and isinstance(rec_model.get("parameter_count"), int):
        return rec_model["parameter_count"]
    count = (_json_or_none(profile.stdout) or {}).get("parameter_count")
    return count if isinstance(count, int) else None


def measure(model: str, args: argparse.Namespace) -> dict[str, Any]:
    """One table row: cold ``profile`` then cold ``recommend`` runs for ``model``."""
    seq_len = seq_len_for(model, args.seq_len)
    profile = run_cold(profile_argv(model, seq_len), args.repeat, PROFILE_OK_EXIT_CODES)
    recommend = run_cold(recommend_argv(model, seq_len, args.hardware, args.nodes), args.repeat,
                         RECOMMEND_OK_EXIT_CODES)
    return {"model": model, "parameters": parameter_count(profile, recommend), "seq_len": seq_len,
            "profile": profile.to_dict(), "recommend": recommend.to_dict(), "outcome": outcome(recommend)}


# -- report --------------------------------------------------------------------------------------------------


def target_verdict(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Whether llama-2-70b's recommend median met the target; ``met`` is ``None`` when not measured here."""
    verdict: dict[str, Any] = {"model": TARGET_MODEL, "hardware": TARGET_HARDWARE, "nodes": TARGET_NODES,
                               "seq_len": TARGET_SEQ_LEN, "limit_s": TARGET_S, "median_s": None, "met": None}
    row = next((r for r in rows if r["model"] == TARGET_MODEL), None)
    same_setup = (args.hardware, args.nodes, args.seq_len) == (TARGET_HARDWARE, TARGET_NODES, TARGET_SEQ_LEN)
    if row is None:
        verdict["note"] = f"not measured: {TARGET_MODEL} is not in --models"
    elif not same_setup:
        verdict["note"] = "not measured: --hardware, --nodes or --seq-len differ from the target's"
    elif row["recommend"]["median_s"] is None:
        verdict["note"] = f"not measured: {row['outcome']}"
    else:
        verdict["median_s"] = row["recommend"]["median_s"]
        verdict["met"] = verdict["median_s"] <= TARGET_S
    return verdict


def environment(argv: Sequence[str]) -> dict[str, Any]:
    """Date, machine, versions and the benchmark's command line."""
    return {
        "date": datetime.date.today().isoformat(),
        "machine": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "autoshard": autoshard.__version__,
        "command": shlex.join(["python", _script_path(), *argv]),
    }


def _script_path() -> str:
    """This script's path as typed from the current directory (``benchmarks/recommend_speed.py`` at the root)."""
    try:
        return str(SCRIPT.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(SCRIPT)


def markdown(report: dict[str, Any]) -> str:
    """The report as markdown: environment, commands, one row per model, the target."""
    meta, setup = report["meta"], report["setup"]
    versions = (f"{meta['date']}, {meta['machine']}, {meta['cpu_count']} cores, Python {meta['python']}, "
                f"torch {meta['torch']}, autoshard {meta['autoshard']}.")
    method = (f"Each time is a fresh process (Python start-up and imports included), {setup['repeat']} run(s) per "
              "command: `python -m autoshard profile MODEL --seq-len S --json`, then `python -m autoshard recommend "
              f"MODEL --hardware {setup['hardware']} --nodes {setup['nodes']} --seq-len S --json`. S is "
              f"{setup['seq_len']}, or the model's longest sequence where that is shorter. \"others' load\" is the "
              "most cores other processes kept busy during one run.")
    header = ("| model | parameters | seq | profile runs (s) | profile median (s) | recommend runs (s) | "
              "recommend median (s) | recommended | others' load (cores) |")
    lines = ["# Planning speed", "", versions, "", f"Benchmark: `{meta['command']}`", "", method, "",
             header, "|---|---:|---:|---|---:|---|---:|---|---:|"]
    lines += [_table_row(row) for row in report["rows"]]
    lines += ["", _target_line(report["target"]), ""]
    return "\n".join(lines)


def _table_row(row: dict[str, Any]) -> str:
    profile, recommend = row["profile"], row["recommend"]
    loads = [x for x in profile["foreign_cores"] + recommend["foreign_cores"] if x is not None]
    cells = [
        row["model"],
        "—" if row["parameters"] is None else _count(row["parameters"]),
        "—" if row["seq_len"] is None else str(row["seq_len"]),
        _runs(profile),
        _median(profile),
        _runs(recommend),
        _median(recommend),
        row["outcome"] if profile["error"] is None else f"{row['outcome']}; profile failed: {profile['error']}",
        f"{max(loads):.2f}" if loads else "—",
    ]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _runs(runs: dict[str, Any]) -> str:
    return ", ".join(f"{t:.2f}" for t in runs["seconds"]) or "—"


def _median(runs: dict[str, Any]) -> str:
    return "—" if runs["median_s"] is None else f"{runs['median_s']:.2f}"


def _count(n: int) -> str:
    """Parameters for display: ``124.44M``, ``68.98B``."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.2f}{suffix}"
    return str(n)


def _target_line(target: dict[str, Any]) -> str:
    head = (f"Target (issue \"Decide\"): {target['model']} recommend on {target['hardware']} × {target['nodes']} "
            f"nodes at sequence {target['seq_len']} in <= {target['limit_s']:g} s on the 2-core machine")
    if target["met"] is None:
        return f"{head}: {target['note']}."
    return f"{head}: {'met' if target['met'] else 'NOT met'} ({target['median_s']:.2f} s median here)."


def write_report(out_dir: Path, report: dict[str, Any]) -> None:
    """Write ``recommend_speed.json`` and ``recommend_speed.md`` into ``out_dir`` (creating it)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "recommend_speed.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out_dir / "recommend_speed.md").write_text(markdown(report), encoding="utf-8")


# -- main ----------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Time every model, write the report, print the table. Failed runs are recorded in their row, not raised.

    Args:
        argv: the command-line arguments after the script's name; ``None`` reads ``sys.argv``.

    Returns:
        0 (the exit status); a bad command line exits with status 2 instead.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    rows = []
    for model in args.models:
        rows.append(measure(model, args))
        row = rows[-1]
        print(f"{model}: profile {_runs(row['profile'])} s, recommend {_runs(row['recommend'])} s, "
              f"{row['outcome']}", flush=True)
    report = {
        "meta": environment(argv),
        "setup": {"hardware": args.hardware, "nodes": args.nodes, "seq_len": args.seq_len, "repeat": args.repeat},
        "target": target_verdict(rows, args),
        "rows": rows,
    }
    write_report(args.out, report)
    print("\n" + markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
