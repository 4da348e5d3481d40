"""The model zoo: where autoshard stands on the Hugging Face architectures users bring.

Usage:
    python benchmarks/zoo.py [--only NAME ...] [--size published|tiny] [--hardware dgx-h100]
                             [--timeout-s 300] [--out docs/benchmarks]

For each architecture of ``benchmarks/zoo_models.py`` (or those ``--only`` names), at ``--size``:

1. the config is built from its transformers class and written with ``save_pretrained`` to a temporary folder;
2. references, without autoshard: transformers' own build on the meta device gives the exact parameter count
   (compared with the published one), and ``benchmarks/zoo_flops.py`` gives the FLOPs of one training step from
   an analytic formula (batch 1, the entry's sequence length);
3. autoshard runs as a user runs it, each in a fresh process with a wall-clock limit (``--timeout-s``):
   ``autoshard.profile(folder, batch_size=1, seq_len=S)`` and ``autoshard recommend folder --hardware H --json``.

Each row records the status (``ok``; ``refused`` with autoshard's one-line message; ``failed`` with the error,
an internal error or a time-out, and where it was raised), parameters autoshard reports vs the meta build vs the
published figure, FLOPs per step vs the formula (target: within 3 %), the cold wall time of each command (target:
<= 20 s on the 2-core machine) and the recommended strategy. One model failing never stops the run.

Writes docs/benchmarks/zoo.{md,json} (``--size tiny``: zoo_tiny.{md,json}). With ``--only``, the other rows of an
existing report of the same size are kept, so a few models at a time can be re-measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the modules beside this script, however it is loaded
from _common import cpu_model, cpu_seconds, foreign_cores
from zoo_flops import FlopEstimate, analytic_flops, meta_parameter_count
from zoo_models import SIZES, ZOO, ZooModel, get

SCRIPT = Path(__file__).resolve()
DEFAULT_HARDWARE = "dgx-h100"
DEFAULT_TIMEOUT_S = 300.0
"""One command running longer than this is recorded as failed (time-out)."""
TARGET_WALL_S = 20.0
"""Target: cold ``profile`` and ``recommend`` each within 20 s per model on the 2-core machine."""
TARGET_FLOPS_PCT = 3.0
"""Target: FLOPs per step within 3 % of the analytic formula."""
RECOMMEND_OK_EXIT_CODES = (0, 3)
"""``autoshard recommend``: 0 is a plan, 3 is "nothing fits" (docs/recommend.md)."""
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
"""Nothing may come from the Hugging Face Hub."""


# -- the profile worker (a fresh process) -------------------------------------------------------------------


def profile_worker(folder: str, seq_len: int | None) -> dict[str, Any]:
    """``autoshard.profile(folder, batch_size=1, seq_len=seq_len)`` as a status dict (run in a fresh process)."""
    import autoshard
    from autoshard.errors import AutoshardError

    try:
        prof = autoshard.profile(folder, batch_size=1, seq_len=seq_len)
    except AutoshardError as exc:
        return {"status": "refused", "error": " ".join(str(exc).split())}
    except Exception as exc:  # noqa: BLE001 — an internal error is what this benchmark reports, with its place
        return {"status": "failed", "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}",
                "where": _where(exc)}
    data = prof.to_dict()
    keep = ("seq_len", "parameter_count", "active_parameter_count", "flops_per_step", "forward_flops",
            "backward_flops", "peak_bytes", "peak_phase", "block_class", "extrapolated_from_layers", "trace_seconds")
    return {"status": "ok", **{k: data[k] for k in keep}}


def _where(exc: BaseException) -> list[str]:
    """The innermost three frames of ``exc``'s traceback, as ``package/file.py:line in function``."""
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    return [f"{_short(f.filename)}:{f.lineno} in {f.name}" for f in frames]


def _short(path: str) -> str:
    for marker in ("site-packages/", "/autoshard/", "/benchmarks/"):
        if marker in path:
            head = "" if marker == "site-packages/" else marker.strip("/") + "/"
            return head + path.rsplit(marker, 1)[1]
    return path


# -- running commands ---------------------------------------------------------------------------------------


def _run(cmd: list[str], timeout_s: float, cache_dir: Path) -> dict[str, Any]:
    """Run ``cmd`` (a fresh process) with autoshard's cache in ``cache_dir``; its wall time, exit status, output,
    others' load, or the time-out."""
    before = cpu_seconds()
    started = time.perf_counter()
    env = {**os.environ, **_OFFLINE, "AUTOSHARD_CACHE_DIR": str(cache_dir)}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    except subprocess.TimeoutExpired:
        return {"wall_s": round(time.perf_counter() - started, 2), "exit_code": None, "stdout": "", "stderr": "",
                "timed_out": True, "foreign_cores": None}
    wall_s = time.perf_counter() - started
    return {"wall_s": round(wall_s, 2), "exit_code": done.returncode, "stdout": done.stdout,
            "stderr": done.stderr, "timed_out": False,
            "foreign_cores": foreign_cores(before, cpu_seconds(), wall_s)}


def run_profile(folder: Path, seq_len: int | None, timeout_s: float) -> dict[str, Any]:
    """The profile worker in a fresh process, cold (an empty cache beside ``folder``): its status dict with
    ``wall_s``."""
    cmd = [sys.executable, str(SCRIPT), "--profile-worker", str(folder),
           "--seq-len", "none" if seq_len is None else str(seq_len)]
    run = _run(cmd, timeout_s, _empty_cache(folder, "profile"))
    meta = {"wall_s": run["wall_s"], "foreign_cores": run["foreign_cores"]}
    if run["timed_out"]:
        return {"status": "failed", "error": f"timed out after {timeout_s:g} s", **meta}
    result = _last_json(run["stdout"])
    if result is None:
        return {"status": "failed", "error": f"worker exit {run['exit_code']}: {_last_line(run['stderr'])}", **meta}
    return {**result, **meta}


def _empty_cache(folder: Path, name: str) -> Path:
    """A new, empty cache directory beside ``folder`` (removed with it)."""
    path = folder.parent / f"cache-{name}"
    path.mkdir()
    return path


def run_recommend(folder: Path, seq_len: int | None, hardware: str, timeout_s: float) -> dict[str, Any]:
    """``python -m autoshard recommend folder --hardware H [--seq-len S] --json`` in a fresh process, cold: with
    an empty cache beside ``folder`` (a workload the user's cache already holds would be read, not traced)."""
    argv = ["recommend", str(folder), "--hardware", hardware, *([] if seq_len is None else ["--seq-len", str(seq_len)]),
            "--json"]
    run = _run([sys.executable, "-m", "autoshard", *argv], timeout_s, _empty_cache(folder, "recommend"))
    meta = {"wall_s": run["wall_s"], "foreign_cores": run["foreign_cores"], "exit_code": run["exit_code"]}
    if run["timed_out"]:
        return {"status": "failed", "error": f"timed out after {timeout_s:g} s", **meta}
    code = run["exit_code"]
    if code == 3:
        return {"status": "ok", "recommended": "no feasible plan", **meta}
    if code == 0:
        data = _last_json(run["stdout"]) or {}
        rec = data.get("recommended")
        if not isinstance(rec, dict):
            return {"status": "failed", "error": "no recommendation in the JSON output", **meta}
        mode = (data.get("model") or {}).get("checkpointing") or "full"
        checkpointing = f", checkpointing ({mode})" if rec.get("activation_checkpointing") else ""
        return {"status": "ok", "recommended": f"{rec['strategy']}, micro-batch {rec['micro_batch_size']}"
                f"{checkpointing}", "parameter_count": (data.get("model") or {}).get("parameter_count"), **meta}
    message = _cli_error(run["stderr"])
    status = "failed" if message.startswith("internal error") or code not in (2,) else "refused"
    return {"status": status, "error": message, **meta}


def _last_json(stdout: str) -> dict[str, Any] | None:
    """The JSON object printed by the command (the whole output, else its last ``{...}`` line)."""
    for text in (stdout, *reversed([line for line in stdout.splitlines() if line.startswith("{")])):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            return data
    return None


def _cli_error(stderr: str) -> str:
    """The CLI's ``autoshard: error: ...`` (or ``internal error``) message with its hint, on one line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("autoshard: "):
            return " ".join([line.removeprefix("autoshard: ").removeprefix("error: "), *lines[i + 1:i + 2]])
    return _last_line(stderr)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


# -- one row ------------------------------------------------------------------------------------------------


def measure(entry: ZooModel, size: str, hardware: str, timeout_s: float) -> dict[str, Any]:
    """One row: the references, then autoshard's profile and recommend in fresh processes."""
    seq_len = entry.sequence(size)  # type: ignore[arg-type]
    config = entry.config(size)  # type: ignore[arg-type]
    row: dict[str, Any] = {
        "model": entry.name, "checkpoint": entry.checkpoint, "kind": entry.kind,
        "architecture": entry.architecture, "seq_len": seq_len, "inputs": entry.inputs,
        "date": datetime.date.today().isoformat(),
        "published_parameters": entry.published_parameters if size == "published" else None,
        "published_active_parameters": entry.published_active_parameters if size == "published" else None,
        "parameters_source": entry.parameters_source, "notes": list(entry.notes),
    }
    row.update(references(entry, size))
    with tempfile.TemporaryDirectory(prefix=f"zoo-{entry.name}-") as tmp:
        folder = Path(tmp) / entry.name
        config.save_pretrained(folder)
        row["profile"] = run_profile(folder, seq_len, timeout_s)
        row["recommend"] = run_recommend(folder, seq_len, hardware, timeout_s)
    row.update(_verdict(row))
    return row


def references(entry: ZooModel, size: str) -> dict[str, Any]:
    """The row's references, computed without autoshard: the meta build's parameters and the formula's FLOPs."""
    config = entry.config(size)  # type: ignore[arg-type]
    estimate: FlopEstimate = analytic_flops(config, batch_size=1, seq_len=entry.sequence(size))  # type: ignore[arg-type]
    return {"meta_parameters": meta_parameter_count(config, entry.architecture), "formula": estimate.to_dict(),
            "fused_attention": fused_attention(entry.architecture)}


def fused_attention(architecture: str) -> bool:
    """Whether a GPU runs this class's attention as a fused SDPA kernel (flash / memory-efficient), whose
    backward recomputes ``QKᵀ``: transformers' ``_supports_sdpa`` class flag, the rule autoshard and
    ``from_pretrained`` both use to pick ``attn_implementation="sdpa"`` (transformers 5.x)."""
    import transformers

    return getattr(getattr(transformers, architecture), "_supports_sdpa", False) is True


def refreshed(row: dict[str, Any], size: str) -> dict[str, Any]:
    """A row kept from an earlier report, with its references and verdict recomputed by today's code."""
    row = {**row, **references(get(row["model"]), size)}
    return {**row, **_verdict(row)}


def _verdict(row: dict[str, Any]) -> dict[str, Any]:
    """The row's status and comparisons."""
    prof, rec = row["profile"], row["recommend"]
    statuses = (prof["status"], rec["status"])
    status = "failed" if "failed" in statuses else "refused" if "refused" in statuses else "ok"
    errors = [f"{what}: {r['error']}" for what, r in (("profile", prof), ("recommend", rec)) if r.get("error")]
    out: dict[str, Any] = {"status": status, "error": "; ".join(errors) or None,
                           "autoshard_parameters": prof.get("parameter_count"), "parameters_exact": None,
                           "flops_diff_pct": None, "within_targets": None}
    if prof["status"] == "ok":
        out["parameters_exact"] = prof["parameter_count"] == row["meta_parameters"]
        # The reference is the work of the kernels a GPU runs: the MFU-convention formula, plus the QKᵀ that
        # fused SDPA backward recomputes where the class runs SDPA; the MFU-convention difference is shown too.
        mfu = row["formula"]["step_flops"]
        kernel = mfu + (row["formula"]["sdpa_recompute_flops"] if row["fused_attention"] else 0)
        out["kernel_formula_flops"] = kernel
        out["flops_diff_pct"] = round(100 * (prof["flops_per_step"] - kernel) / kernel, 3)
        out["flops_diff_mfu_pct"] = round(100 * (prof["flops_per_step"] - mfu) / mfu, 3)
        if prof.get("seq_len") != row["seq_len"]:
            out["notes_seq_len"] = f"autoshard traced sequence {prof.get('seq_len')}, not {row['seq_len']}"
    if status == "ok":
        out["within_targets"] = bool(out["parameters_exact"] and abs(out["flops_diff_pct"]) <= TARGET_FLOPS_PCT
                                     and prof["wall_s"] <= TARGET_WALL_S and rec["wall_s"] <= TARGET_WALL_S)
    return out


# -- report -------------------------------------------------------------------------------------------------


def environment(argv: Sequence[str], script: Path = SCRIPT) -> dict[str, Any]:
    """Date, machine, versions and the benchmark's command line (``script`` run with ``argv``)."""
    import torch
    import transformers

    import autoshard

    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__, "autoshard": autoshard.__version__}
    try:
        import deepspeed

        versions["deepspeed"] = deepspeed.__version__
    except ImportError:
        versions["deepspeed"] = None
    return {"date": datetime.date.today().isoformat(), "machine": cpu_model(), "cpu_count": os.cpu_count(),
            **versions, "command": shlex.join(["python", _script_path(script), *argv])}


def _script_path(script: Path) -> str:
    try:
        return str(script.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(script)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over the rows."""
    ok = [r for r in rows if r["status"] == "ok"]
    profiled = [r for r in rows if r["profile"]["status"] == "ok"]
    return {
        "models": len(rows),
        "ok": len(ok),
        "refused": sum(r["status"] == "refused" for r in rows),
        "failed": sum(r["status"] == "failed" for r in rows),
        "profiled": len(profiled),
        "parameters_exact": sum(bool(r["parameters_exact"]) for r in profiled),
        "flops_within_target": sum(abs(r["flops_diff_pct"]) <= TARGET_FLOPS_PCT for r in profiled),
        "profile_within_target_s": sum(r["profile"]["wall_s"] <= TARGET_WALL_S for r in profiled),
        "recommend_ok_within_target_s": sum(r["recommend"]["wall_s"] <= TARGET_WALL_S for r in ok),
        "within_all_targets": sum(bool(r["within_targets"]) for r in rows),
    }


def _count(n: int | None) -> str:
    if n is None:
        return "—"
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{suffix}"
    return str(n)


def _flops(n: float | None) -> str:
    if n is None:
        return "—"
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.3g}"


def _table_row(row: dict[str, Any]) -> str:
    prof, rec = row["profile"], row["recommend"]
    published = row["published_parameters"]
    delta = "" if published is None else f" ({100 * (row['meta_parameters'] - published) / published:+.1f} %)"
    exact = {True: "✓", False: "✗", None: "—"}[row["parameters_exact"]]
    diff = "—" if row["flops_diff_pct"] is None else (
        f"{row['flops_diff_pct']:+.1f} % ({row['flops_diff_mfu_pct']:+.1f} % MFU)")
    error = row["error"] or ""
    if row.get("notes_seq_len"):
        error = f"{error}; {row['notes_seq_len']}".lstrip("; ")
    cells = [
        row["model"], row["kind"], row["architecture"], "—" if row["seq_len"] is None else str(row["seq_len"]),
        row["status"],
        _count(row["autoshard_parameters"]), f"{_count(row['meta_parameters'])} {exact}",
        f"{_count(published)}{delta}" if published is not None else "—",
        _active(prof.get("active_parameter_count"), row["published_active_parameters"]),
        _flops(prof.get("flops_per_step")), _flops(row.get("kernel_formula_flops") or row["formula"]["step_flops"]),
        diff,
        f"{prof['wall_s']:.1f}", f"{rec['wall_s']:.1f}", _load(prof, rec), rec.get("recommended") or "—",
        _clip(error, 260),
    ]
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _active(autoshard_count: int | None, published: int | None) -> str:
    """autoshard's parameters active per token beside the authors' (an MoE model), with the difference."""
    if autoshard_count is None and published is None:
        return "—"
    delta = ("" if autoshard_count is None or published is None
             else f" ({100 * (autoshard_count - published) / published:+.1f} %)")
    return f"{_count(autoshard_count)} / {_count(published)}{delta}"


def _load(*runs: dict[str, Any]) -> str:
    """The most cores other processes kept busy during the row's commands."""
    loads = [r["foreign_cores"] for r in runs if r.get("foreign_cores") is not None]
    return f"{max(loads):.1f}" if loads else "—"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def markdown(report: dict[str, Any]) -> str:
    """The report as markdown: environment, method, summary, one row per architecture, the errors in full."""
    meta, setup, s = report["meta"], report["setup"], report["summary"]
    versions = (f"{meta['date']}, {meta['machine']}, {meta['cpu_count']} cores, Python {meta['python']}, "
                f"torch {meta['torch']}, transformers {meta['transformers']}, DeepSpeed {meta['deepspeed']}, "
                f"autoshard {meta['autoshard']}.")
    method = (
        f"Size: **{setup['size']}**. Each config is built from its transformers class (published hyperparameters, "
        "`benchmarks/zoo_models.py`) and written with `save_pretrained`; nothing comes from the Hub. Then, each in "
        "a fresh process (Python start-up and imports included): `autoshard.profile(folder, batch_size=1, "
        f"seq_len=S)` and `python -m autoshard recommend folder --hardware {setup['hardware']} [--seq-len S] "
        f"--json`, each limited to {setup['timeout_s']:g} s. References, without autoshard: *meta* is "
        "transformers' own build on the meta device (unique parameters; ✓ when autoshard reports exactly that); "
        "*published* is the authors' figure (the difference to the meta build in brackets: tied embeddings, "
        "modules transformers does not build, rounding); *active per token* (MoE) is autoshard's count of the "
        "parameters one token's step uses (all but the unchosen routed experts' share, "
        "`autoshard/profiler/experts.py`) beside the authors' published figure; *formula* is the analytic FLOPs "
        "of one training step "
        "at batch 1 (`benchmarks/zoo_flops.py`: 6·N·T over weight matrices with top-k + shared experts for MoE, "
        "plus 3 × 4·S²·d per attention layer, causal and sliding-window attention counted full — the MFU "
        "convention of PaLM appendix B — plus, for classes that run fused SDPA on a GPU (`_supports_sdpa`), the "
        "2·S²·d_qk per layer and sequence that the fused kernels' backward spends recomputing QKᵀ: the work the "
        "kernels do, which autoshard counts; in brackets, the difference to the MFU convention alone). "
        "Targets: FLOPs "
        f"within {TARGET_FLOPS_PCT:g} %, each command within {TARGET_WALL_S:g} s cold on this machine, parameters "
        "exact. Wall times depend on what else runs on the 2 shared cores: *others' load* is the most cores other "
        "processes kept busy during the row's commands. A row's status is `ok` (both commands answered; \"no feasible plan\" is an answer), `refused` "
        "(autoshard's one-line error) or `failed` (an internal error, a crash or a time-out).")
    summary_line = (
        f"**Summary:** {s['models']} architectures: {s['ok']} ok, {s['refused']} refused, {s['failed']} failed. "
        f"Profiled {s['profiled']}: parameters exact {s['parameters_exact']}/{s['profiled']}, FLOPs within "
        f"{TARGET_FLOPS_PCT:g} % {s['flops_within_target']}/{s['profiled']}, profile ≤ {TARGET_WALL_S:g} s "
        f"{s['profile_within_target_s']}/{s['profiled']}; recommend ≤ {TARGET_WALL_S:g} s "
        f"{s['recommend_ok_within_target_s']}/{s['ok']}. Within every target: {s['within_all_targets']}.")
    header = ("| model | kind | class | seq | status | params (autoshard) | params (meta) | published | "
              "active per token (autoshard / published) | "
              "FLOPs/step (autoshard) | FLOPs/step (formula) | Δ FLOPs | profile (s) | recommend (s) | "
              "others' load (cores) | recommended | error |")
    earlier = setup.get("kept_from_earlier_runs")
    if earlier:
        method += (f" This command measured the models it names; the {len(earlier)} other rows were kept from "
                   "earlier runs (each row's date is in the JSON), their references recomputed.")
    lines = ["# Model zoo", "", versions, "", f"Benchmark: `{meta['command']}`", "", method, "", summary_line, "",
             header, "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    lines += [_table_row(r) for r in report["rows"]]
    lines += ["", "## Errors in full", ""]
    for r in report["rows"]:
        for what in ("profile", "recommend"):
            part = r[what]
            if part.get("error"):
                where = f" (at {' → '.join(part['where'])})" if part.get("where") else ""
                lines.append(f"* **{r['model']}**, {what}: {part['error']}{where}")
    lines += ["", "## Notes", ""]
    lines += [f"* **{r['model']}**: {note}" for r in report["rows"] for note in r["notes"]]
    lines.append("")
    return "\n".join(lines)


def write_report(out_dir: Path, stem: str, report: dict[str, Any]) -> None:
    """Write ``<stem>.json`` and ``<stem>.md`` into ``out_dir`` (creating it)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out_dir / f"{stem}.md").write_text(markdown(report), encoding="utf-8")


# -- main ---------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``argparse`` exits with status 2 on a bad argument."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=[m.name for m in ZOO],
                        help="measure only these architectures (other rows of an existing report are kept)")
    parser.add_argument("--size", choices=SIZES, default="published")
    add_run_arguments(parser)
    return parser.parse_args(argv)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """``--hardware``, ``--timeout-s`` and ``--out``, as this benchmark and the architecture sweep take them."""
    parser.add_argument("--hardware", default=DEFAULT_HARDWARE, help="hardware profile for recommend")
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="limit per command")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"), help="directory for the report")


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every architecture (or ``--only``), write the report, print the table.

    Returns:
        0; a bad command line exits with status 2.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--profile-worker"]:
        seq = None if argv[3] == "none" else int(argv[3])
        print(json.dumps(profile_worker(argv[1], seq)), flush=True)
        return 0
    args = parse_args(argv)
    entries = [get(n) for n in args.only] if args.only else list(ZOO)
    stem = "zoo" if args.size == "published" else "zoo_tiny"
    kept: dict[str, dict[str, Any]] = {}
    previous = args.out / f"{stem}.json"
    if args.only and previous.is_file():
        earlier = json.loads(previous.read_text(encoding="utf-8"))["rows"]
        kept = {r["model"]: refreshed(r, args.size) for r in earlier if r["model"] in {m.name for m in ZOO}}
    setup = {"size": args.size, "hardware": args.hardware, "timeout_s": args.timeout_s, "batch_size": 1,
             "kept_from_earlier_runs": sorted(set(kept) - {e.name for e in entries})}
    report: dict[str, Any] = {}
    for entry in entries:
        row = measure(entry, args.size, args.hardware, args.timeout_s)
        kept[entry.name] = row
        print(f"{entry.name}: {row['status']}, profile {row['profile']['wall_s']} s, recommend "
              f"{row['recommend']['wall_s']} s, Δ FLOPs {row['flops_diff_pct']} %, exact params "
              f"{row['parameters_exact']}{'; ' + row['error'] if row['error'] else ''}", flush=True)
        rows = [kept[m.name] for m in ZOO if m.name in kept]
        report = {"meta": environment(argv), "setup": setup, "summary": summary(rows), "rows": rows}
        write_report(args.out, stem, report)  # after every model: an interrupted run keeps what it measured
    print("\n" + markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
