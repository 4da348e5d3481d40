"""Architecture sweep: does autoshard answer, in a user's terms, for the transformers classes beyond the zoo?

Usage:
    python benchmarks/arch_sweep.py [--only MODEL_TYPE ...] [--all] [--seq-len 128] [--hardware dgx-h100]
                                    [--timeout-s 300] [--out docs/benchmarks]

The zoo (``benchmarks/zoo.py``) holds 35 architectures to exact parameters and analytic FLOPs at their published
sizes. This sweep goes wide instead: for each ``model_type`` of transformers' auto mappings that the zoo does not
hold (a list of widely used ones by default, ``--all`` for every one), it builds the config class's defaults
(``CONFIG_MAPPING[model_type]()``, mostly the size of the first published checkpoint), names the first head class
the auto mappings give it (causal LM, then seq2seq, masked LM, image classification, CTC, image-text-to-text),
writes it with ``save_pretrained`` and runs autoshard as a user would, each in a fresh process with an empty cache:
``autoshard.profile(folder, batch_size=1, seq_len=S)`` and ``autoshard recommend folder --hardware H --json``
(``S`` for models that take token ids, none otherwise). The reference is transformers' own meta-device build:
its parameter count, or, where transformers cannot build its own default config, that fact.

A row is ``ok`` (both commands answered: a plan or "nothing fits"), ``refused`` (autoshard's one-line error in
the user's terms), or ``failed``: an internal error, a crash, a time-out, or a refusal that blames the model's own
code ("forward raised ...") for a class transformers ships, which is autoshard's to explain. Each row keeps the
message. Writes docs/benchmarks/arch_sweep.{md,json}; with ``--only``, the other rows of an existing report are
kept.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the modules beside this script, however it is loaded
from zoo import TARGET_WALL_S, add_run_arguments, environment, run_profile, run_recommend
from zoo_flops import meta_parameter_count

SCRIPT = Path(__file__).resolve()
STEM = "arch_sweep"
DEFAULT_SEQ_LEN = 128
"""Tokens per sequence for models that take token ids: short, so that the sweep measures reach, not scale."""

ZOO_MODEL_TYPES = frozenset({
    "llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3_text", "phi3", "falcon", "gpt_neox", "opt", "bloom",
    "gptj", "starcoder2", "olmo2", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "jamba",
    "t5", "bart", "whisper", "bert", "roberta", "deberta-v2", "modernbert", "vit", "swin", "clip", "siglip",
    "llava", "gemma3",
})
"""Model types ``benchmarks/zoo_models.py`` holds (at published size, with references)."""

WIDELY_USED = (
    "gpt2", "gpt_bigcode", "gpt_neo", "codegen", "cohere", "cohere2", "dbrx", "gemma", "glm", "glm4", "glm4_moe",
    "granite", "granitemoe", "internlm3", "llama4_text", "mamba", "mpt", "nemotron", "olmo", "olmoe", "phi",
    "phimoe", "stablelm", "persimmon", "exaone", "gpt_oss", "qwen3_next", "minimax", "smollm3", "ministral",
    "helium", "jetmoe", "recurrent_gemma", "zamba2", "falcon_h1", "lfm2", "seed_oss", "ernie4_5",
    "hunyuan_v1_dense", "mt5", "longt5", "pegasus", "marian", "mbart", "m2m_100", "led", "umt5",
    "switch_transformers", "t5gemma", "albert", "distilbert", "electra", "xlm-roberta", "deberta", "mpnet",
    "camembert", "esm", "longformer", "convnext", "resnet", "deit", "beit", "dinov2", "efficientnet", "swinv2",
    "regnet", "mobilenet_v2", "segformer", "wav2vec2", "hubert", "wavlm", "qwen2_vl", "qwen2_5_vl", "idefics3",
    "paligemma", "mllama", "llava_next", "smolvlm", "internvl", "mistral3", "aya_vision", "qwen3_vl",
    # families of 2025-2026 (transformers 5.x)
    "qwen3_5_text", "qwen3_5_moe_text", "gemma4_text", "gemma3n_text", "llama4", "ministral3", "mistral4",
    "deepseek_v32", "deepseek_v4", "kimi_linear", "olmo3", "exaone4", "minimax_m2", "ernie4_5_moe",
    "hunyuan_v1_moe", "glm4_moe_lite", "mamba2", "nemotron_h", "granitemoehybrid", "apertus", "arcee", "dots1",
    "vaultgemma", "siglip2", "convnextv2",
)
"""The default sweep: widely used architectures outside the zoo (decoders, MoE, state-space, encoder-decoders,
encoders, vision, speech, vision-language)."""

_MAPPINGS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
             "MODEL_FOR_MASKED_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
             "MODEL_FOR_CTC_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES")
"""transformers' auto mappings, in the order a head class is picked from them."""

DESCRIPTION = (
    "Each row: the config class's defaults (`CONFIG_MAPPING[model_type]()`, mostly the size of the first "
    "published checkpoint) with the first head class transformers' auto mappings give the type (causal LM, then "
    "seq2seq, masked LM, image classification, CTC, image-text-to-text), written with `save_pretrained`; then, "
    "each in a fresh process with an empty cache, `autoshard.profile(folder, batch_size=1, seq_len=S)` and "
    "`autoshard recommend folder --hardware H --json` (S only for models that take token ids). *meta* is "
    "transformers' own meta-device build of the same config (✓: autoshard reports exactly its parameters), or "
    "its error where transformers cannot build its own default. Status: `ok` (both commands answered: a plan or "
    "\"nothing fits\"), `refused` (autoshard's one-line error in the user's terms), `failed` (an internal error, a "
    "crash, a time-out, or a refusal blaming the model's own code for a class transformers ships). Wall times "
    "are cold, on whatever else the 2 cores ran."
)

_BLAMES_THE_MODEL = ("forward raised", "backward raised", "model() raised", "batch() raised")
"""Refusals that say the model's own code failed: for a class transformers ships, autoshard's to explain."""


def head_classes() -> dict[str, str]:
    """``model_type`` -> the head class the sweep builds: the first auto mapping (in :data:`_MAPPINGS`' order)
    whose class for the type takes that type's config class (transformers 5.24 maps e.g. ``exaone`` to
    ``LlamaForCausalLM``, which takes a ``LlamaConfig``: a mismatch a user's config.json would not have)."""
    import transformers
    from transformers.models.auto import modeling_auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    heads: dict[str, str] = {}
    for mapping in _MAPPINGS:
        for model_type, cls in getattr(modeling_auto, mapping, {}).items():
            name = cls if isinstance(cls, str) else cls[0]
            if model_type in heads or model_type not in CONFIG_MAPPING:
                continue
            takes = getattr(getattr(transformers, name, None), "config_class", None)
            if takes is None or takes is CONFIG_MAPPING[model_type]:
                heads[model_type] = name
    return heads


def measure(model_type: str, architecture: str, seq_len: int, hardware: str, timeout_s: float) -> dict[str, Any]:
    """One row: the default config built by transformers on the meta device, then autoshard's profile and
    recommend in fresh processes."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from autoshard.models import load_source

    row: dict[str, Any] = {"model_type": model_type, "architecture": architecture,
                           "date": datetime.date.today().isoformat()}
    try:
        config = CONFIG_MAPPING[model_type]()
        config.architectures = [architecture]
    except Exception as exc:  # noqa: BLE001 — transformers' own default config, reported in the row
        return {**row, "status": "no config", "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}
    try:
        row["meta_parameters"] = meta_parameter_count(config, architecture)
    except Exception as exc:  # noqa: BLE001 — transformers cannot build its own default: autoshard must say so
        row["meta_parameters"] = None
        row["meta_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    with tempfile.TemporaryDirectory(prefix=f"sweep-{model_type}-") as tmp:
        folder = Path(tmp) / model_type
        config.save_pretrained(folder)
        try:
            takes_tokens = load_source(folder).accepts_seq_len
        except Exception:  # noqa: BLE001 — the commands below report why it does not load
            takes_tokens = False
        row["seq_len"] = seq_len if takes_tokens else None
        row["profile"] = run_profile(folder, row["seq_len"], timeout_s)
        row["recommend"] = run_recommend(folder, row["seq_len"], hardware, timeout_s)
    return _without_temp_paths({**row, **_verdict(row)})


def _without_temp_paths(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the temporary folder left out of its messages (``/tmp/sweep-gpt2-x1y2/gpt2/config.json``
    reads ``config.json``)."""
    def clean(text: Any) -> Any:
        return re.sub(r"\S*/sweep-[^/\s]+/[^/\s]+/", "", text) if isinstance(text, str) else text

    out = {key: clean(value) for key, value in row.items()}
    for part in ("profile", "recommend"):
        if isinstance(out.get(part), dict):
            out[part] = {key: clean(value) for key, value in out[part].items()}
    return out


def _verdict(row: dict[str, Any]) -> dict[str, Any]:
    prof, rec = row["profile"], row["recommend"]
    statuses = [prof["status"], rec["status"]]
    errors = [f"{what}: {r['error']}" for what, r in (("profile", prof), ("recommend", rec)) if r.get("error")]
    if any(r.get("error", "").startswith(_BLAMES_THE_MODEL) for r in (prof, rec) if r["status"] == "refused"):
        statuses.append("failed")
    status = "failed" if "failed" in statuses else "refused" if "refused" in statuses else "ok"
    exact = prof.get("parameter_count") == row["meta_parameters"] if prof["status"] == "ok" else None
    return {"status": status, "error": "; ".join(errors) or None, "parameters_exact": exact,
            "autoshard_parameters": prof.get("parameter_count")}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over the rows."""
    ok = [r for r in rows if r["status"] == "ok"]
    return {
        "architectures": len(rows),
        "ok": len(ok),
        "refused": sum(r["status"] == "refused" for r in rows),
        "failed": sum(r["status"] == "failed" for r in rows),
        "no_default_build": sum(r.get("meta_parameters") is None for r in rows),
        "parameters_exact": sum(bool(r.get("parameters_exact")) for r in ok),
        "within_20_s": sum(r["profile"]["wall_s"] <= TARGET_WALL_S and r["recommend"]["wall_s"] <= TARGET_WALL_S
                           for r in ok),
    }


def _params(n: int | None) -> str:
    return "—" if n is None else f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def _cell(text: str | None, limit: int = 220) -> str:
    text = (text or "").replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown."""
    meta, s, setup = report["meta"], report["summary"], report["setup"]
    lines = [
        "# Architecture sweep", "",
        f"{meta['date']}, {meta['machine']}, {meta['cpu_count']} cores, Python {meta['python']}, torch "
        f"{meta['torch']}, transformers {meta['transformers']}, DeepSpeed {meta['deepspeed']}, autoshard "
        f"{meta['autoshard']}.", "",
        f"Benchmark: `{meta['command']}`" + (
            f"; {len(setup['kept_from_earlier_runs'])} rows kept from `{setup['kept_command']}`"
            if setup.get("kept_from_earlier_runs") else ""), "",
        DESCRIPTION, "",
        f"**Summary:** {s['architectures']} architectures: {s['ok']} ok, {s['refused']} refused, {s['failed']} "
        f"failed; {s['no_default_build']} whose default config transformers itself cannot build. Of the ok rows, "
        f"parameters exact {s['parameters_exact']}/{s['ok']}, both commands within 20 s cold "
        f"{s['within_20_s']}/{s['ok']}.", "",
        "| model_type | class | seq | status | params (autoshard) | params (meta) | profile (s) | recommend (s) "
        "| recommended | message |",
        "|---|---|---:|---|---:|---:|---:|---:|---|---|",
    ]
    for r in report["rows"]:
        prof, rec = r.get("profile", {}), r.get("recommend", {})
        meta_params = _params(r.get("meta_parameters")) if r.get("meta_parameters") is not None else (
            f"transformers fails: {_cell(r.get('meta_error'), 80)}" if r.get("meta_error") else "—")
        exact = " ✓" if r.get("parameters_exact") else ""
        lines.append(
            f"| {r['model_type']} | {r['architecture']} | {r.get('seq_len') or '—'} | {r['status']} | "
            f"{_params(r.get('autoshard_parameters'))} | {meta_params}{exact} | {prof.get('wall_s', '—')} | "
            f"{rec.get('wall_s', '—')} | {rec.get('recommended') or ''} | {_cell(r.get('error'))} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``argparse`` exits with status 2 on a bad argument."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--only", nargs="+", metavar="MODEL_TYPE", help="sweep only these model types")
    which.add_argument("--all", action="store_true", help="every model type of the auto mappings outside the zoo")
    parser.add_argument("--seq-len", type=int, default=DEFAULT_SEQ_LEN, help="tokens per sequence (text models)")
    add_run_arguments(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Sweep the architectures, write the report after each, print the table.

    Returns:
        0; a bad command line (or an unknown ``--only`` model type) exits with status 2.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    heads = head_classes()
    if args.only:
        unknown = sorted(set(args.only) - set(heads))
        if unknown:
            print(f"arch_sweep: error: --only {' '.join(unknown)}: no head class in transformers' auto mappings "
                  f"for that model_type", file=sys.stderr)
            return 2
        todo = list(args.only)
    else:
        todo = sorted(set(heads) - ZOO_MODEL_TYPES) if args.all else [t for t in WIDELY_USED if t in heads]
    kept: dict[str, dict[str, Any]] = {}
    previous = args.out / f"{STEM}.json"
    if args.only and previous.is_file():
        earlier = json.loads(previous.read_text(encoding="utf-8"))
        kept = {r["model_type"]: _without_temp_paths(r) for r in earlier["rows"]
                if heads.get(r["model_type"]) == r["architecture"]}  # a row of a class no longer picked goes
        kept_command = earlier["setup"].get("kept_command") or earlier["meta"]["command"]
    setup = {"seq_len": args.seq_len, "hardware": args.hardware, "timeout_s": args.timeout_s, "batch_size": 1,
             "kept_from_earlier_runs": sorted(set(kept) - set(todo))}
    if setup["kept_from_earlier_runs"]:
        setup["kept_command"] = kept_command
    report: dict[str, Any] = {}
    for model_type in todo:
        row = measure(model_type, heads[model_type], args.seq_len, args.hardware, args.timeout_s)
        kept[model_type] = row
        print(f"{model_type}: {row['status']}{'; ' + row['error'] if row.get('error') else ''}", flush=True)
        rows = sorted(kept.values(), key=lambda r: r["model_type"])
        report = {"meta": environment(argv, script=SCRIPT), "setup": setup,
                  "summary": summary(rows), "rows": rows}
        args.out.mkdir(parents=True, exist_ok=True)  # after every model: an interrupted run keeps what it measured
        (args.out / f"{STEM}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        (args.out / f"{STEM}.md").write_text(markdown(report), encoding="utf-8")
    if report:
        print("\n" + markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
