"""How long `autoshard profile` and `autoshard recommend` take, cold (a fresh process, nothing cached), per model;
and how long planning takes with the workload cache, next to the floor of importing torch.

Usage:
    python benchmarks/recommend_speed.py [--models gpt2 gpt2-xl llama-2-7b llama-2-13b llama-2-70b]
                                         [--hardware dgx-h100] [--nodes 4] [--seq-len 4096] [--repeat 3]
                                         [--sections models speed] [--cache-model llama-2-70b]
                                         [--cached-nodes 2] [--hf-size published] [--out docs/benchmarks]

Section ``models``: for each model, ``--repeat`` times each, one after the other:

* ``python -m autoshard profile MODEL --seq-len S --json``
* ``python -m autoshard recommend MODEL --hardware H --nodes N --seq-len S --json``

Each run is a fresh process with an empty workload cache (its own ``AUTOSHARD_CACHE_DIR``), so its time includes
Python start-up and imports: the wall time a user waits. S is ``--seq-len``, or the model's longest sequence where
that is shorter (gpt2 has 1024 learned positions, and the CLI refuses a longer sequence with exit status 2).
``recommend`` exiting 0 (a plan) or 3 (no feasible plan) is a measurement; any other exit status, or a run past
600 s, is a failure recorded in the model's row, and the benchmark goes on. Each run also records how many cores
other processes kept busy meanwhile (``/proc/stat`` less this process tree's ``getrusage``), so a disturbed run can
be told from a slow one.

Section ``speed`` (issue #17): min / median / max of ``--repeat`` fresh processes of each of

* ``python -c "import torch"``: the floor every planning command pays;
* ``recommend --cache-model --hardware H --nodes N --seq-len S`` with an empty cache directory (cold), and the
  same with ``--jobs 1`` (tracing in one process: what a one-core machine would wait);
* the same with the workload cached by that run, at ``--cached-nodes`` nodes (each run reads the entry its cold
  run wrote; a run that did not use the cache is a failure);
* ``recommend`` of Llama-3.1-8B's published ``config.json`` (built from ``LlamaConfig`` and written with
  ``save_pretrained``, as ``benchmarks/zoo.py`` does) on the same hardware, cold;
* ``python -m autoshard --help``.

Targets (issue #17, on the 2-core machine): llama-2-70b on 4 × dgx-h100 at sequence 4096 in <= 5 s cold and
<= 2.5 s cached; the Hugging Face 8B config in <= 10 s cold; ``--help`` in <= 0.3 s; each judged on the median.

Writes docs/benchmarks/recommend_speed.{md,json}. Target of the ``models`` section (issue "Decide"): llama-2-70b
recommend on 4 nodes × 8 × H100 80 GB at sequence 4096 in <= 10 s on the 2-core machine.
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
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
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
SECTIONS = ("models", "speed")
SPEED_TARGETS_S = {"cold": 5.0, "cached": 2.5, "hf_cold": 10.0, "help": 0.3}
"""Issue #17: the cache model (llama-2-70b) cold and cached, the Hugging Face 8B config cold, ``--help``."""
HF_MODEL = "llama-3.1-8b"
"""The zoo entry (``benchmarks/zoo_models.py``) whose config.json the speed section plans."""
CACHED_NODES = 2


@dataclass(frozen=True, kw_only=True, slots=True)
class Runs:
    """The repeated cold runs of one CLI command."""

    command: str
    """The command as a user types it (``python -m autoshard ...``)."""
    seconds: list[float]
    """Wall time of each run that finished, failed ones included."""
    foreign_cores: list[float | None]
    """Cores other processes kept busy on average during each run (``None`` without ``/proc/stat``)."""
    cpu_seconds: list[float | None] = field(default_factory=list)
    """CPU time of each run's process and the processes it forked (``recommend`` traces in one process per
    core: its CPU time can exceed its wall time)."""
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

    @property
    def min_s(self) -> float | None:
        """Shortest wall time, ``None`` when the command failed or never ran."""
        return None if self.error is not None or not self.seconds else min(self.seconds)

    @property
    def max_s(self) -> float | None:
        """Longest wall time, ``None`` when the command failed or never ran."""
        return None if self.error is not None or not self.seconds else max(self.seconds)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (times rounded to 10 ms, without the captured output)."""
        data = asdict(self)
        del data["stdout"]
        data["seconds"] = [round(t, 2) for t in self.seconds]
        for name in ("min_s", "median_s", "max_s"):
            value = getattr(self, name)
            data[name] = None if value is None else round(value, 3)
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
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        help="models: profile and recommend per model; speed: the cache, start-up and the torch floor")
    parser.add_argument("--cache-model", default=TARGET_MODEL, help="speed section: the model planned cold and cached")
    parser.add_argument("--cached-nodes", type=positive, default=CACHED_NODES,
                        help="speed section: the node count of the cached runs (another than --nodes)")
    parser.add_argument("--hf-size", choices=("published", "tiny"), default="published",
                        help=f"speed section: the size of the {HF_MODEL} config.json planned cold")
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


def run_cold(cli_argv: list[str], repeat: int, ok_exit_codes: Sequence[int], *,
             cache_dirs: Sequence[Path] | None = None, command: list[str] | None = None) -> Runs:
    """Run ``python -m autoshard *cli_argv`` ``repeat`` times, each in a fresh process, stopping at a failure.

    Args:
        cli_argv: the arguments after ``python -m autoshard``.
        repeat: runs.
        ok_exit_codes: exit statuses that are measurements.
        cache_dirs: run ``i`` plans with ``AUTOSHARD_CACHE_DIR=cache_dirs[i]``; default: an empty one of its own.
        command: run this command line instead (``python -c "import torch"``); shown as ``python ...``.
    """
    cmd = command or [sys.executable, "-m", "autoshard", *cli_argv]
    seconds: list[float] = []
    loads: list[float | None] = []
    cpu: list[float | None] = []
    exit_code: int | None = None
    stdout, error = "", None
    for i in range(repeat):
        with tempfile.TemporaryDirectory(prefix="autoshard-cache-") as fresh:
            env = {**os.environ, "AUTOSHARD_CACHE_DIR": str(cache_dirs[i] if cache_dirs else fresh)}
            before = cpu_seconds()
            t0 = time.perf_counter()
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
                                      env=env)
            except subprocess.TimeoutExpired:
                exit_code, error = None, f"timed out after {RUN_TIMEOUT_S:.0f} s"
                break
            wall_s = time.perf_counter() - t0
        seconds.append(wall_s)
        after = cpu_seconds()
        loads.append(foreign_cores(before, after, wall_s))
        cpu.append(None if before is None or after is None else round(after[1] - before[1], 2))
        exit_code, stdout = done.returncode, done.stdout
        if exit_code not in ok_exit_codes:
            error = f"exit {exit_code}: {_error_line(done.stderr)}"
            break
    shown = ["python", *cmd[1:]] if command else ["python", "-m", "autoshard", *cli_argv]
    return Runs(command=shlex.join(shown), seconds=seconds, foreign_cores=loads, cpu_seconds=cpu,
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


def hf_config(work_dir: Path, size: str) -> Path:
    """Llama-3.1-8B's config.json at ``size`` (``benchmarks/zoo_models.py``), written with ``save_pretrained``."""
    from zoo_models import ZOO

    model = next(m for m in ZOO if m.name == HF_MODEL)
    folder = work_dir / f"{HF_MODEL}-{size}"
    model.config(size).save_pretrained(folder)
    return folder / "config.json"


def _used_the_cache(runs: Runs) -> Runs:
    """``runs`` with an error when the (last) run's answer did not come from the workload cache."""
    if runs.error is None and runs.exit_code == 0 and (_json_or_none(runs.stdout) or {}).get("cached_workload") is None:
        return Runs(command=runs.command, seconds=runs.seconds, foreign_cores=runs.foreign_cores,
                    exit_code=runs.exit_code, stdout=runs.stdout, error="the workload cache was not used")
    return runs


def measure_speed(args: argparse.Namespace, work_dir: Path) -> list[dict[str, Any]]:
    """The speed section's rows: the torch floor, the cache model cold and cached, the HF config cold, ``--help``."""
    repeat, hw, nodes = args.repeat, args.hardware, args.nodes
    seq_len = seq_len_for(args.cache_model, args.seq_len)
    dirs = [work_dir / f"cache-{i}" for i in range(repeat)]
    floor = run_cold([], repeat, (0,), command=[sys.executable, "-c", "import torch"])
    cold = run_cold(recommend_argv(args.cache_model, seq_len, hw, nodes), repeat, RECOMMEND_OK_EXIT_CODES,
                    cache_dirs=dirs)
    one_process = run_cold([*recommend_argv(args.cache_model, seq_len, hw, nodes), "--jobs", "1"], repeat,
                           RECOMMEND_OK_EXIT_CODES)
    cached = _used_the_cache(run_cold(recommend_argv(args.cache_model, seq_len, hw, args.cached_nodes), repeat,
                                      RECOMMEND_OK_EXIT_CODES, cache_dirs=dirs))
    config = hf_config(work_dir, args.hf_size)
    hf = run_cold(recommend_argv(str(config), args.seq_len, hw, nodes), repeat, RECOMMEND_OK_EXIT_CODES)
    help_runs = run_cold(["--help"], repeat, (0,))
    default_setup = (args.cache_model, hw, nodes, args.seq_len) == (TARGET_MODEL, TARGET_HARDWARE, TARGET_NODES,
                                                                   TARGET_SEQ_LEN)
    rows = [
        ("torch import (floor)", floor, None, None),
        (f"{args.cache_model} recommend, cold", cold, "cold", default_setup),
        (f"{args.cache_model} recommend, cold, tracing in one process", one_process, None, None),
        (f"{args.cache_model} recommend, workload cached ({args.cached_nodes} nodes)", cached, "cached",
         default_setup),
        (f"{HF_MODEL} config.json ({args.hf_size}) recommend, cold", hf, "hf_cold",
         args.hf_size == "published" and (hw, nodes, args.seq_len) == (TARGET_HARDWARE, TARGET_NODES, TARGET_SEQ_LEN)),
        ("autoshard --help", help_runs, "help", True),
    ]
    return [speed_row(what, runs, target, applies=applies) for what, runs, target, applies in rows]


def speed_row(what: str, runs: Runs, target: str | None, *, applies: bool | None) -> dict[str, Any]:
    """One row of the speed table: the runs, and whether their median met ``target``'s limit (``met`` is ``None``
    without a target, when the setup is not the target's, or when the command failed)."""
    row: dict[str, Any] = {"what": what, **runs.to_dict(), "limit_s": None, "met": None}
    if target is not None:
        row["limit_s"] = SPEED_TARGETS_S[target]
        if not applies:
            row["note"] = "not judged: not the target's model, size or setup"
        elif runs.median_s is None:
            row["note"] = f"not judged: {runs.error}"
        else:
            row["met"] = runs.median_s <= SPEED_TARGETS_S[target]
    return row


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
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
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
    """The report as markdown: environment, then each section measured (its commands, its table, its targets)."""
    meta = report["meta"]
    versions = (f"{meta['date']}, {meta['machine']}, {meta['cpu_count']} cores, Python {meta['python']}, "
                f"torch {meta['torch']}, autoshard {meta['autoshard']}.")
    lines = ["# Planning speed", "", versions, "", f"Benchmark: `{meta['command']}`", ""]
    if report.get("speed"):
        lines += _speed_markdown(report)
    if report.get("rows"):
        lines += _models_markdown(report)
    return "\n".join(lines)


def _speed_markdown(report: dict[str, Any]) -> list[str]:
    setup = report["setup"]
    method = (f"Each time is a fresh process, {setup['repeat']} run(s) per command, min / median / max. Cold runs "
              "plan with an empty workload cache directory; each cached run reads the entry its cold run wrote "
              "(same model, options and versions; another node count). The targets (issue #17) are judged on "
              "the median. `recommend` traces in one process per usable core (here "
              f"{report['meta'].get('usable_cores', '?')}), at most one per tracing session; `--jobs 1` traces in "
              "one. \"CPU (s)\" is the median CPU time of the run's processes together. \"others' load\" is the "
              "most cores other processes kept busy during one run.")
    lines = ["## Workload cache and start-up", "", method, "",
             "| what | command | runs (s) | min (s) | median (s) | max (s) | target | CPU (s) | others' load (cores) |",
             "|---|---|---|---:|---:|---:|---|---:|---:|"]
    for row in report["speed"]:
        loads = [x for x in row["foreign_cores"] if x is not None]
        cpu = [x for x in row.get("cpu_seconds", []) if x is not None]
        cells = [row["what"], f"`{row['command']}`", _runs(row), _seconds(row["min_s"]), _seconds(row["median_s"]),
                 _seconds(row["max_s"]), _verdict(row), _seconds(statistics.median(cpu)) if cpu else "—",
                 f"{max(loads):.2f}" if loads else "—"]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return [*lines, ""]


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _verdict(row: dict[str, Any]) -> str:
    if row["limit_s"] is None:
        return "—" if row["error"] is None else f"failed: {row['error']}"
    if row["met"] is None:
        return f"<= {row['limit_s']:g} s: {row['note']}"
    return f"<= {row['limit_s']:g} s: {'met' if row['met'] else 'NOT met'}"


def _models_markdown(report: dict[str, Any]) -> list[str]:
    setup = report["setup"]
    method = (f"Each time is a fresh process (Python start-up and imports included), {setup['repeat']} run(s) per "
              "command: `python -m autoshard profile MODEL --seq-len S --json`, then `python -m autoshard recommend "
              f"MODEL --hardware {setup['hardware']} --nodes {setup['nodes']} --seq-len S --json`. S is "
              f"{setup['seq_len']}, or the model's longest sequence where that is shorter. \"others' load\" is the "
              "most cores other processes kept busy during one run.")
    header = ("| model | parameters | seq | profile runs (s) | profile median (s) | recommend runs (s) | "
              "recommend median (s) | recommended | others' load (cores) |")
    lines = ["## Per model, cold", "", method, "", header, "|---|---:|---:|---|---:|---|---:|---|---:|"]
    lines += [_table_row(row) for row in report["rows"]]
    return [*lines, "", _target_line(report["target"]), ""]


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
    speed: list[dict[str, Any]] = []
    if "speed" in args.sections:
        with tempfile.TemporaryDirectory(prefix="recommend-speed-") as work:
            speed = measure_speed(args, Path(work))
        for row in speed:
            print(f"{row['what']}: {_runs(row)} s, {_verdict(row)}", flush=True)
    rows = []
    for model in (args.models if "models" in args.sections else []):
        rows.append(measure(model, args))
        row = rows[-1]
        print(f"{model}: profile {_runs(row['profile'])} s, recommend {_runs(row['recommend'])} s, "
              f"{row['outcome']}", flush=True)
    report = {
        "meta": environment(argv),
        "setup": {"hardware": args.hardware, "nodes": args.nodes, "seq_len": args.seq_len, "repeat": args.repeat,
                  "sections": args.sections, "cache_model": args.cache_model, "cached_nodes": args.cached_nodes,
                  "hf_size": args.hf_size},
        "speed": speed,
        "target": target_verdict(rows, args),
        "rows": rows,
    }
    write_report(args.out, report)
    print("\n" + markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
