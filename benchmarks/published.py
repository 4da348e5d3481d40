"""autoshard's predictions held against published GPU measurements (issue #16).

``benchmarks/published_points.yaml`` lists training runs that others measured on GPUs and published (torchtitan,
llm-foundry, DeepSpeedExamples, the ZeRO-Offload paper), each with its source, its settings and the figure as
published. For each point this script asks the planner what it predicts for that configuration, through the
public planning path (``build_workload`` → ``planner.search.evaluate`` with a ``Candidate``, as ``recommend`` does
for every candidate), and writes per-point signed errors, the summary rows and, where a source published several
configurations of one model on one machine, whether autoshard's ranking would have picked the fastest
(``_published_ranking.py``) to ``docs/benchmarks/published.{md,json}``.

torchtitan's selective activation checkpointing is expressed with autoshard's own choices: ``selective-op`` as
``op`` and ``selective-layer`` as ``every-2`` (torchtitan's default ``selective_ac_option = "2"``, "checkpoint every
other layer", ``--activation_checkpoint.selective_ac_option`` in its ``config_manager.py``).

A point whose settings autoshard cannot express (``torch.compile``, tensor or pipeline parallelism, a memory
metric it does not predict) is listed as "not expressible" with what is missing, and counted, never compared.

Run from the repository root::

    python benchmarks/published.py                     # every point (a few minutes on 2 cores)
    python benchmarks/published.py --only ID [ID ...]  # a subset
    python benchmarks/published.py --measure-on-gpu    # the single-GPU points trained here (_published_gpu.py)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from autoshard.hardware.specs import HardwareSpec
    from autoshard.planner.plan import Evaluation
    from autoshard.profiler.options import ProfileOptions
    from autoshard.strategies.workload import Workload

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared module beside this script, however it is loaded
import _published_clocks
import _published_ranking
from _common import cpu_model
from _published_report import HALVES, THROUGHPUT_METRICS, by_source, markdown, summarise, summary_lines

SCRIPT = Path(__file__).resolve()
POINTS_FILE = SCRIPT.with_name("published_points.yaml")
PROFILES_GPUS = SCRIPT.parents[1] / "profiles" / "gpus"
PROFILES_NODES = SCRIPT.parents[1] / "profiles" / "nodes"

METRICS: dict[str, str] = {
    "peak_allocated_gib": "peak torch.cuda.max_memory_allocated() per GPU, GiB",
    "peak_active_gib": "peak active bytes per GPU (memory_stats active_bytes.all.peak), GiB",
    "peak_reserved_gib": "peak torch.cuda.max_memory_reserved() per GPU, GiB",
    "nvidia_smi_gib": "memory nvidia-smi shows per GPU (reserved + CUDA context), GiB",
    "tokens_per_s_per_gpu": "training tokens per second per GPU",
    "samples_per_s": "training samples per second, all GPUs",
    "engine_samples_per_s": "training samples per second, all GPUs, by the engine's own forward + backward + step "
                            "timers (no data loading, no training loop)",
    "mfu_percent": "model FLOPs utilisation, %, by the source's formula",
    "tflops_per_gpu": "TFLOP/s per GPU, by the source's count",
    "max_micro_batch": "largest micro-batch that runs (0: not even 1)",
}
NOT_PREDICTED = {
    "mfu_percent": "MFU by the source's own FLOP formula (compare its tokens/s instead)",
}
NOT_PREDICTED_ON_SEVERAL_GPUS = {
    "peak_reserved_gib": "reserved memory on several GPUs (autoshard replays the caching allocator only for one "
                         "device holding the model, on one stream: profile --reserved; not FSDP2's communication "
                         "streams, nor the expandable_segments torchtitan's launcher sets, run_train.sh @ 0168bd5)",
    "nvidia_smi_gib": "an nvidia-smi total on several GPUs (the caching allocator is replayed only for one device "
                      "holding the model: profile --reserved)",
}
"""Memory metrics autoshard predicts on one GPU only: the step's allocations replayed through the caching
allocator (:func:`autoshard.profiler.cuda_reserve.trace_reserved`), plus the CUDA context for nvidia-smi."""
CHECKPOINTING = ("none", "full", "selective-op", "selective-layer")
AUTOSHARD_CHECKPOINTING = {"none": "none", "full": "full", "selective-op": "op", "selective-layer": "every-2"}
"""The published checkpointing as autoshard's ``activation_checkpointing`` choice (see the module docstring)."""
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "bf16-true")
OPTIMIZER_IMPLS = ("foreach", "for-loop", "fused")
"""autoshard's optimizer implementations (``optimizer.impl``; absent: torch's default on CUDA, foreach)."""


# ------------------------------------------------------------------------------------------------ the data file


class PointsError(ValueError):
    """The points file is malformed (the message names the point and the field)."""


def load_points(path: Path = POINTS_FILE) -> dict[str, Any]:
    """The points file, validated.

    Raises:
        PointsError: unreadable, or a point lacks a field or has one out of range (every problem listed).
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PointsError(f"cannot read {path}: {' '.join(str(exc).split())}") from None
    problems = validate(data)
    if problems:
        raise PointsError(f"{path}: " + "; ".join(problems))
    return data


def validate(data: Any) -> list[str]:
    """Every problem with the points file's content (an empty list when it is valid)."""
    if not isinstance(data, dict) or not {"sources", "models", "points"} <= set(data):
        return ["the file must be a mapping with sources, models and points"]
    sources, models, points = data["sources"], data["models"], data["points"]
    if not (isinstance(sources, dict) and isinstance(models, dict) and isinstance(points, list)
            and all(isinstance(v, dict) for v in (*sources.values(), *models.values(), *points))):
        return ["sources and models must map names to mappings, and points must be a list of mappings"]
    problems: list[str] = []
    for key, source in sources.items():
        if not source.get("url") or not source.get("title"):
            problems.append(f"source {key}: needs a title and a url")
        if not (source.get("paper") or all(source.get(k) for k in ("repository", "path", "commit"))):
            problems.append(f"source {key}: needs repository, path and commit, or paper")
    gpus = {p.stem for p in PROFILES_GPUS.glob("*.yaml")}
    seen: set[str] = set()
    for i, point in enumerate(points):
        pid = point.get("id") or f"#{i}"
        problems += [f"{pid}: {p}" for p in _point_problems(point, sources, models, gpus)]
        if pid in seen:
            problems.append(f"{pid}: id used twice")
        seen.add(pid)
    return problems


def _point_problems(point: dict[str, Any], sources: dict[str, Any], models: dict[str, Any],
                    gpus: set[str]) -> list[str]:
    problems = []
    for key in ("id", "half", "source", "where", "quote", "hardware", "model", "seq_len", "micro_batch",
                "global_batch", "grad_accumulation", "precision", "optimizer", "strategy", "published", "loose"):
        if key not in point:
            problems.append(f"missing {key}")
        elif key in ("hardware", "model", "optimizer", "strategy", "published") and not isinstance(point[key], dict):
            problems.append(f"{key} must be a mapping")
    if problems:
        return problems
    hw, strategy, published = point["hardware"], point["strategy"], point["published"]
    checks = [
        (point["half"] in HALVES, f"half must be one of {HALVES}"),
        (point["source"] in sources, f"unknown source {point['source']!r}"),
        (hw.get("gpu") in gpus, f"GPU {hw.get('gpu')!r} is not a profile in profiles/gpus"),
        (_positive(hw.get("gpus_per_node")) and _positive(hw.get("nodes")), "gpus_per_node and nodes must be >= 1"),
        (hw.get("nodes") == 1 or bool(hw.get("network")), "several nodes need a network"),
        (("catalog" in point["model"]) != ("hf" in point["model"]), "model needs catalog or hf"),
        ("hf" not in point["model"] or point["model"]["hf"] in models, "unknown hf model"),
        (point["precision"] in PRECISIONS, f"precision must be one of {PRECISIONS}"),
        (point["optimizer"].get("impl") in (None, *OPTIMIZER_IMPLS), f"optimizer impl in {OPTIMIZER_IMPLS}"),
        (strategy.get("activation_checkpointing") in CHECKPOINTING, f"activation_checkpointing in {CHECKPOINTING}"),
        (published.get("metric") in METRICS, f"metric must be one of {tuple(METRICS)}"),
        (isinstance(published.get("value"), (int, float)) and bool(published.get("unit")), "published value/unit"),
        (all(_positive(point[k]) for k in ("micro_batch", "global_batch", "grad_accumulation")), "batch sizes >= 1"),
        (point["global_batch"] == point["micro_batch"] * point["grad_accumulation"] * hw.get("gpus_per_node", 0)
         * hw.get("nodes", 0), "global_batch must be micro_batch x grad_accumulation x GPUs"),
        (isinstance(point["loose"], list), "loose must be a list"),
        (point.get("float32_matmul_precision", "highest") in ("highest", "high", "medium"),
         "float32_matmul_precision in ('highest', 'high', 'medium')"),
        (_positive_number(point.get("grad_clip_norm", 1.0)), "grad_clip_norm must be a positive number"),
    ]
    problems += [message for ok, message in checks if not ok]
    if hw.get("node") is not None:
        problems += _node_problems(hw)
    settings = strategy.get("settings")
    if settings is not None:
        problems += _settings_problems(settings, strategy.get("autoshard"), hw.get("gpu"), gpus)
    alternative = strategy.get("alternative")
    if alternative is not None:
        problems += _alternative_problems(alternative, hw.get("gpu"), gpus)
    return problems


def _alternative_problems(alternative: Any, gpu: Any, gpus: set[str]) -> list[str]:
    """What is wrong with a point's ``strategy.alternative``: another autoshard strategy (with settings) that the
    run can also be modelled as, and why."""
    from autoshard.strategies import names

    if not isinstance(alternative, dict) or not alternative.get("why"):
        return ["strategy alternative must be a mapping with autoshard, why and optional settings"]
    if alternative.get("autoshard") not in names():
        return [f"strategy alternative: no autoshard strategy {alternative.get('autoshard')!r}"]
    return _settings_problems(alternative.get("settings", {}), alternative["autoshard"], gpu, gpus)


def _settings_problems(settings: Any, name: Any, gpu: Any, gpus: set[str]) -> list[str]:
    """What is wrong with a point's ``strategy.settings``: a mapping of the named strategy's knobs."""
    if not isinstance(settings, dict) or not name:
        return ["strategy settings must be a mapping, and need an autoshard strategy"]
    if gpu not in gpus:
        return []  # reported above
    from autoshard.hardware import load_hardware
    from autoshard.strategies import get

    knobs = {k.name for k in get(name).knobs(load_hardware(gpu, gpus=1))}
    unknown = sorted(set(settings) - knobs)
    return [f"strategy settings: {name} has no knob {', '.join(unknown)}"] if unknown else []


def _node_problems(hw: dict[str, Any]) -> list[str]:
    """What is wrong with a point's ``hardware.node``: a node profile with the point's GPU and at least its GPUs
    per node (a run on some of a node's GPUs has the whole host: ZeRO-Offload's one V100 of a DGX-2)."""
    name = hw["node"]
    if not isinstance(name, str) or not (PROFILES_NODES / f"{name}.yaml").is_file():
        return [f"node {name!r} is not a profile in profiles/nodes"]
    doc = yaml.safe_load((PROFILES_NODES / f"{name}.yaml").read_text(encoding="utf-8"))
    per_node = doc["gpus_per_node"]["value"] if isinstance(doc["gpus_per_node"], dict) else doc["gpus_per_node"]
    gpus = hw.get("gpus_per_node")
    if doc["gpu"] != hw.get("gpu") or not isinstance(gpus, int) or gpus > per_node:
        return [f"node {name} has {per_node} x {doc['gpu']}, "
                f"not the point's {hw.get('gpus_per_node')} x {hw.get('gpu')}"]
    return []


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


# ------------------------------------------------------------------------------------------------ predicting


def not_expressible(point: dict[str, Any]) -> list[str]:
    """What autoshard cannot express of ``point`` (empty: it can be compared)."""
    strategy = point["strategy"]
    missing = []
    if strategy.get("autoshard") is None:
        missing.append(f"the strategy ({strategy.get('as_published')})")
    missing += list(strategy.get("unmodelled") or [])
    metric = point["published"]["metric"]
    if metric in NOT_PREDICTED:
        missing.append(NOT_PREDICTED[metric])
    if metric in NOT_PREDICTED_ON_SEVERAL_GPUS and point["hardware"]["nodes"] * point["hardware"]["gpus_per_node"] > 1:
        missing.append(NOT_PREDICTED_ON_SEVERAL_GPUS[metric])
    return missing


class Predictor:
    """Builds each point's workload and hardware (workloads cached: points often share a model and precision)."""

    def __init__(self, data: dict[str, Any], folder: Path) -> None:
        self.data = data
        self.folder = folder
        self._workloads: dict[str, Workload] = {}

    def workload(self, point: dict[str, Any]) -> Workload:
        """The traced step of the point's model at its sequence length, precision, optimizer and checkpointing."""
        from autoshard.models import load_source
        from autoshard.profiler.checkpointing import FULL, parse_checkpointing
        from autoshard.strategies import build_workload

        from autoshard.planner.machine import traced_choices
        from autoshard.strategies import get

        mode = parse_checkpointing(AUTOSHARD_CHECKPOINTING[point["strategy"]["activation_checkpointing"]])
        impl = point["optimizer"].get("impl")
        # FSDP2 under checkpointing reads what a recomputed block holds from the step traced without it, as
        # recommend traces it (planner.machine.traced_choices)
        choices = traced_choices(bool(mode), [get(point["strategy"]["autoshard"])])
        key = json.dumps([point["model"], point["seq_len"], point["precision"], point["optimizer"]["name"], impl,
                          str(mode), choices])
        if key not in self._workloads:
            self._workloads[key] = build_workload(
                load_source(self.model_source(point)), precision=point["precision"],
                optimizer=point["optimizer"]["name"], seq_len=point["seq_len"], checkpointing=choices,
                target="cuda", checkpoint_mode=mode if mode else FULL, optimizer_impl=impl)
        return self._workloads[key]

    def model_source(self, point: dict[str, Any]) -> str:
        """A catalog name, or a folder holding the ``config.json`` built from the model's config class."""
        if "catalog" in point["model"]:
            return str(point["model"]["catalog"])
        import transformers

        name = point["model"]["hf"]
        spec = self.data["models"][name]
        kwargs = {**spec["config"], "architectures": [spec["architecture"]]}
        if spec.get("positions_key"):
            kwargs[spec["positions_key"]] = point["seq_len"]
        folder = self.folder / f"{name}-{point['seq_len']}"
        if not (folder / "config.json").is_file():
            getattr(transformers, spec["config_class"])(**kwargs).save_pretrained(folder)
            if spec.get("attn_implementation"):  # save_pretrained leaves it out; autoshard reads it from the file
                config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
                config["attn_implementation"] = spec["attn_implementation"]
                (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        return str(folder)

    def hardware(self, point: dict[str, Any]) -> HardwareSpec:
        """One node of the GPU profile (or of the node profile the point names: its host's cores and memory), or a
        cluster file of such nodes with the point's network between them."""
        from autoshard.hardware import load_hardware

        hw = point["hardware"]
        if hw["nodes"] == 1:
            return load_hardware(hw.get("node") or hw["gpu"], gpus=hw["gpus_per_node"])
        path = self.folder / f"{point['id']}-cluster.yaml"
        node = hw.get("node") or {"name": f"{hw['gpus_per_node']} x {hw['gpu']}", "gpu": hw["gpu"],
                                  "gpus_per_node": hw["gpus_per_node"]}
        cluster = {"kind": "cluster", "name": point["id"], "nodes": hw["nodes"], "node": node,
                   **({"network": hw["network"]} if hw["network"] else {})}
        path.write_text(yaml.safe_dump(cluster), encoding="utf-8")
        return load_hardware(path)

    def predict(self, point: dict[str, Any]) -> dict[str, Any]:
        """autoshard's figures for ``point``: memory, throughput, whether it fits, the largest micro-batch."""
        from autoshard.planner.plan import PlanRequest
        from autoshard.planner.search import evaluate, largest_micro_batch
        from autoshard.strategies import get
        from autoshard.strategies.base import Candidate

        workload, hardware = self.workload(point), self.hardware(point)
        # Pricing only: the traces are the same.
        workload = dataclasses.replace(workload, grad_clip_norm=point.get("grad_clip_norm"),
                                       float32_matmul_precision=point.get("float32_matmul_precision", "highest"),
                                       set_grads_to_none=point["optimizer"].get("set_grads_to_none", True))
        strategy = get(point["strategy"]["autoshard"])
        ckpt = point["strategy"]["activation_checkpointing"] != "none"
        knobs = {k.name for k in strategy.knobs(hardware)}
        settings = {**point["strategy"].get("settings", {}),
                    **{k: point["strategy"][k] for k in ("reduce_dtype",) if k in knobs and point["strategy"].get(k)}}
        # No safety margin: the published run had the whole GPU.
        request = PlanRequest(micro_batch_size=point["micro_batch"], global_batch_size=point["global_batch"],
                              goal="pretrain", safety_margin=0.0, strategies=None)

        def at(micro: int) -> Evaluation:
            candidate = Candidate(strategy=strategy.name, micro_batch_size=micro, activation_checkpointing=ckpt,
                                  settings=settings)
            return evaluate(strategy, workload, hardware, request, candidate)

        e = at(point["micro_batch"])
        memory, cost = e.memory, e.cost
        if memory is None or cost is None:  # evaluate() always estimates both; only an unsupported strategy has none
            raise ValueError(f"{point['id']}: autoshard gave no estimate for {strategy.name}")
        world = hardware.world_size
        flops = workload.trace("amp", ckpt).flops_per_sample()
        out = {
            "parameters": workload.parameter_count,
            "world_size": world,
            "fits": e.fits,
            "gradient_accumulation": e.gradient_accumulation,
            "peak_allocated_gib": memory.gpu.total / 2**30,
            "peak_active_gib": memory.gpu.total / 2**30,
            "samples_per_s": cost.samples_per_s,
            "engine_samples_per_s": cost.samples_per_s,  # the step model prices forward + backward + step only
            "tokens_per_s_per_gpu": None if cost.tokens_per_s is None else cost.tokens_per_s / world,
            "tflops_per_gpu": flops * cost.samples_per_s / world / 1e12,
            "step_time_s": cost.step_time_s,
        }
        if point["published"]["metric"] == "max_micro_batch":
            out["max_micro_batch"] = largest_micro_batch(lambda mb: at(mb).fits)
        if point["published"]["metric"] in NOT_PREDICTED_ON_SEVERAL_GPUS:
            out.update(self.reserved(point, hardware))
        return out

    def reserved(self, point: dict[str, Any], hardware: HardwareSpec) -> dict[str, Any]:
        """One GPU's reserved peak (the traced step replayed through the caching allocator, the GPU's cuBLAS
        workspace size, its memory less the context as the limit) and the nvidia-smi total (that plus the CUDA
        context measured nearest to the GPU and module loading: :mod:`autoshard.profiler.cuda_context`)."""
        from autoshard.models import load_source
        from autoshard.profiler.cuda_context import context_overhead
        from autoshard.profiler.cuda_reserve import trace_reserved

        gpu = hardware.node.gpu
        if gpu.compute_capability is None:
            raise ValueError(f"{point['id']}: the GPU profile {gpu.name} has no compute capability")
        lazy = point["hardware"].get("cuda_module_loading", "lazy") == "lazy"
        context = context_overhead(gpu.compute_capability, lazy_loading=lazy)
        replay = trace_reserved(load_source(self.model_source(point)), profile_options(point, "cuda"),
                                compute_capability=gpu.compute_capability,
                                capacity_bytes=gpu.memory_bytes - context.bytes)
        return {"peak_reserved_gib": replay.peak_reserved_bytes / 2**30,
                "nvidia_smi_gib": (replay.peak_reserved_bytes + context.bytes) / 2**30,
                "replayed_peak_allocated_gib": replay.peak_allocated_bytes / 2**30,
                "replay_out_of_memory": replay.out_of_memory,
                "cuda_context_gib": context.bytes / 2**30, "cuda_context_source": context.source}


def profile_options(point: dict[str, Any], target: str) -> ProfileOptions:
    """The point's one-device training step as the profiler takes it (micro-batch, sequence, precision, optimizer
    and its implementation, checkpointing, accumulation, whether gradients are kept between steps)."""
    from autoshard.profiler.checkpointing import parse_checkpointing
    from autoshard.profiler.options import ProfileOptions

    mode = parse_checkpointing(AUTOSHARD_CHECKPOINTING[point["strategy"]["activation_checkpointing"]])
    return ProfileOptions(batch_size=point["micro_batch"], seq_len=point["seq_len"], precision=point["precision"],
                          optimizer=point["optimizer"]["name"], optimizer_impl=point["optimizer"].get("impl"),
                          checkpointing=mode, grad_accumulation=point["grad_accumulation"],
                          set_grads_to_none=point["optimizer"].get("set_grads_to_none", True), target=target)


def signed_error(metric: str, predicted: float, published: float) -> float:
    """Predicted minus published: in micro-batches for ``max_micro_batch``, else in % of the published figure.

    Example:
        >>> signed_error("tokens_per_s_per_gpu", 90.0, 100.0)
        -10.0
        >>> signed_error("max_micro_batch", 3, 4)
        -1.0
    """
    if metric == "max_micro_batch":
        return float(predicted - published)
    return (predicted - published) / published * 100


def run_point(point: dict[str, Any], predictor: Predictor) -> dict[str, Any]:
    """One row: the point, what autoshard predicts, the error, or why there is none."""
    metric, value = point["published"]["metric"], point["published"]["value"]
    row = {"id": point["id"], "half": point["half"], "source": point["source"], "metric": metric,
           "published": value, "unit": point["published"]["unit"], "predicted": None, "error": None,
           "status": "compared", "reason": None, "prediction": None, "wall_s": None}
    missing = not_expressible(point)
    if missing:
        return {**row, "status": "not expressible", "reason": "; ".join(missing)}
    from autoshard.errors import AutoshardError

    start = time.perf_counter()
    try:
        prediction = predictor.predict(point)
    except AutoshardError as exc:  # autoshard refused the point: reported in its row, the others still run
        return {**row, "status": "failed", "reason": f"{type(exc).__name__}: {exc}".splitlines()[0],
                "wall_s": round(time.perf_counter() - start, 2)}
    predicted = prediction[metric]
    row = {**row, "predicted": predicted, "error": signed_error(metric, predicted, value), "prediction": prediction}
    alternative = point["strategy"].get("alternative")
    if alternative is not None:  # reported beside the row, never in the summary
        other = predictor.predict({**point, "strategy": {**point["strategy"], "autoshard": alternative["autoshard"],
                                                         "settings": alternative.get("settings", {})}})[metric]
        row["alternative"] = {"strategy": alternative["autoshard"], "predicted": other,
                              "error": signed_error(metric, other, value), "why": alternative["why"]}
    return {**row, "wall_s": round(time.perf_counter() - start, 2)}


# ------------------------------------------------------------------------------------------------ the report


def environment(argv: Sequence[str]) -> dict[str, Any]:
    """Date, machine, versions and the benchmark's command line."""
    import deepspeed
    import torch
    import transformers

    import autoshard

    try:
        script = str(SCRIPT.relative_to(Path.cwd().resolve()))
    except ValueError:
        script = str(SCRIPT)
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "deepspeed": deepspeed.__version__, "autoshard": autoshard.__version__,
            "command": shlex.join(["python", script, *argv])}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these points")
    parser.add_argument("--points", type=Path, default=POINTS_FILE, help="the points file")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"), help="where to write the report")
    parser.add_argument("--measure-on-gpu", action="store_true",
                        help="train the points that fit one GPU on this one (benchmarks/_published_gpu.py) and "
                             "write gpu_published.{md,json} instead")
    parser.add_argument("--dry-run", action="store_true",
                        help="with --measure-on-gpu: shrunk models on the CPU, to check the plumbing")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 on success, 2 on bad input (one line on stderr)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    try:
        data = load_points(args.points)
    except PointsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    points = data["points"]
    if args.only:
        unknown = sorted(set(args.only) - {p["id"] for p in points})
        if unknown:
            print(f"error: no point {', '.join(unknown)} in {args.points}.", file=sys.stderr)
            return 2
        by_id = {p["id"]: p for p in points}
        points = [by_id[i] for i in dict.fromkeys(args.only)]  # in the order given
    if args.dry_run and not args.measure_on_gpu:
        print("error: --dry-run goes with --measure-on-gpu.", file=sys.stderr)
        return 2
    if args.measure_on_gpu:
        import _published_gpu

        return _published_gpu.main(data, points, out=args.out, dry_run=args.dry_run,
                                   command=" ".join(["python", "benchmarks/published.py", *argv]))
    meta = environment(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="published-") as tmp:
        predictor = Predictor(data, Path(tmp))
        for point in points:
            row = run_point(point, predictor)
            rows.append(row)
            shown = row["error"] if row["error"] is None else f"{row['error']:+.1f}"
            print(f"{row['id']}: {row['status']} {shown if row['status'] == 'compared' else row['reason']}",
                  flush=True)
    report = {"meta": meta, "sources": data["sources"], "summary": summarise(rows), "by_source": by_source(rows),
              "rankings": _published_ranking.rankings(points, rows, THROUGHPUT_METRICS),
              "clocks": _published_clocks.pairs(points, rows), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "published.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    text = markdown(report)
    (args.out / "published.md").write_text(text, encoding="utf-8")
    print("\n".join(summary_lines(report["summary"])))
    ranked = _published_ranking.summary(report["rankings"])
    print(f"ranking: autoshard's pick within {_published_ranking.WITHIN_PCT:g} % of the published fastest in "
          f"{ranked['within']} of {ranked['groups']} groups")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
