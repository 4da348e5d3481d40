#!/usr/bin/env bash
# The GPU campaign: every GPU measurement autoshard needs, in one command, on a lent H100 / H200 (issue #16).
#
#   bash benchmarks/gpu_campaign.sh [--short] [--dry-run] [--out DIR] [--steps LIST] [--models LIST] [--site DIR]
#                                   [--plan]
#
# Run from the repository root on the GPU machine, with the wheels benchmarks/gpu_wheels.sh built in .whl/
# (carried along: no network there). Steps, each under its own `timeout` and with its own log, in this order:
#
#   setup           install the carried wheels the machine lacks (pip --no-index --no-deps --target SITE);
#                   record GPU, driver, CUDA, NCCL, torch, DeepSpeed, Optuna, transformers versions (always runs)
#   pytest          python -m pytest -m gpu tests: NCCL at one rank, a GPT step's max_memory_allocated against
#                   `autoshard profile --target cuda`, DDP + bf16_compress_hook, a 1-rank FSDP2 step
#   kernels         python benchmarks/gpu_kernels.py: GEMM (GPT-2's unaligned LM head among them, an alignment
#                   sweep, and a tile sweep over M for wave quantization), fused-attention and memory-bound rates
#                   (a transformer step's memory-bound kernels by kind among them) on this GPU beside the
#                   step-time model's time for each
#   breakdown       python benchmarks/step_breakdown.py: one step of GPT-2 (bf16, fp16), BERT-large (fp16) and a
#                   1.1B Llama under torch.profiler, its kernel time by part (matmul, attention, memory-bound,
#                   optimizer) and the GPU's idle time beside the step-time model's parts (--short: the first three)
#   probe           python benchmarks/sdpa_probe.py --snapshot: the attention kernel CUDA picks for Llama-2 and
#                   Mistral blocks (fp32, bf16) and the allocations live at each step's peak (2026-11-28: Mistral fp32
#                   batch 4 still 4.7 % under); the dry run checks its arguments only
#   memory-single   python benchmarks/memory_accuracy.py --grid full, its one-device cases, one model at a time
#   memory-sharded  the same grid's FSDP2 cases (rank 0 of 8 on a fake process group), one model at a time
#   published       python benchmarks/published.py --measure-on-gpu: the published points that fit one GPU
#                   (torchtune's Llama 3.2 3B full fine-tune; transformers' single-GPU guide's BERT-large runs, 7
#                   configurations, 2 with --short) trained here, measured vs published vs predicted
#   zero-hooks      python benchmarks/zero_hooks.py --accelerator cuda: the ZeRO engines' host time per parameter
#                   / module and in engine.step() on this GPU host (the CPU figures are what deepspeed/cost.py prices)
#   fsdp-hooks      python benchmarks/fsdp_hooks.py --accelerator cuda: FSDP2's host time per unit and per
#                   parameter tensor (hooks) and in AdamW over DTensors on this GPU host (the CPU figures are what
#                   fsdp/cost.py prices); the dry run: the CPU mode on two kinds of two tiny stacks
#   ops             build DeepSpeed's CPU Adam once (the offload strategies need it), so that no strategy run
#                   is stopped half-way through a compile (a stopped compile leaves a lock that blocks the next)
#   strategies      python benchmarks/gpu_strategies.py: every strategy that fits, measured vs predicted
#                   (--models LIST: only these of gpt2, llama-1.1b, gpt2-xl)
#   host            python benchmarks/host_overhead.py --device cuda: the host's time per kernel and per
#                   checkpointed block with real CUDA launches, against the CPU figures the step-time model uses
#
# A failed or timed-out step is recorded and the campaign goes on; a memory step in which any case failed is
# "failed" (its table is still written). The limits add up to 37 minutes (setup counted four times); one device
# call runs 10 minutes at most, so the whole campaign is four calls:
#
#   --steps pytest,kernels,memory-single          40 + 120 + 30 + 400 s
#   --steps memory-sharded,published,zero-hooks   40 + 150 + 250 + 150 s
#   --steps ops,strategies                        40 + 150 + 380 s
#   --steps breakdown,probe,host,fsdp-hooks       40 + 60 + 90 + 60 + 240 s
#
# --short is the campaign for ONE call (a session is lent 15 minutes of device time, starting the machine
# included), in its own order: first what the two sessions of 2026-11-28 could not explain — the host's side of
# a step on the GPU's own host (GPT-2 on one H200, bf16-mixed, batch 8: ZeRO-2 measured 0.062 s a step where the
# model, host-bound at the build machine's host figures, says 0.042; FSDP2 shard-grad-op 0.096 vs 0.056) — then
# what they did not reach:
#
#   setup            40 s
#   breakdown        40 s  step_breakdown.py --steps 3, gpt2-bf16, gpt2-fp16, bert-large-fp16: where a step's GPU
#                          time goes, by part (GPT-2's whole step measured 0.0487 s, predicted 0.0397)
#   host             60 s  host_overhead.py --device cuda, GPT-2 medium and Llama 3.2 1B, 6 steps, 2 repeats
#   zero-hooks      110 s  zero_hooks.py --accelerator cuda --passes hooks step, 16 and 64 layers, 1 repeat:
#                          forward + backward (8 processes) and engine.step() of the narrow stack (10)
#   fsdp-hooks       60 s  fsdp_hooks.py --accelerator cuda, torch-bf16, fsdp-raf-bf16, fsdp-keep-bf16, 1 repeat (12)
#   strategies      100 s  gpt2 (90 s reached DDP, shard-grad-op, ZeRO-2 only: now ZeRO-1 / ZeRO-3 / full-shard)
#   memory-single    80 s  llama-3-8b (5 cases left), mistral-7b, t5-small, bert-base-uncased, resnet50
#   memory-sharded   60 s  llama-2-7b (refused by the benchmark then, fixed), gpt2
#   published        40 s  the single-GPU guide's BERT-large vanilla: the planner's kept gradients (049f669) on a GPU
#                  ----
#                   590 s
#
# A limit stops a memory step's model in progress, the ones before are kept. pytest (9/9 twice), kernels (the
# alignment sweep) and probe (Mistral fp32; stopped before Llama-2 and bf16) ran then and are left to --steps
# (--short --steps LIST runs them under --short's own limits). --steps / --models narrow it.
#
# Results go under DIR (default: $OUT when set — the device machine's return folder — else ./gpu-campaign-out):
#   DIR/summary.md            one line per step (status, seconds, limit, log), then the versions
#   DIR/gpu_campaign.tar.gz   the tree below, refreshed after every step
#   campaign/                 versions.{txt,json}, steps.md, logs/NN-step.log, runs/ (each run's own files),
#                             docs/benchmarks/gpu_*.{md,json} (copy these into docs/benchmarks/)
# The tree is DIR/campaign, except when DIR is $OUT: then it is kept in a temporary folder and only summary.md,
# versions.txt and the archive are written to DIR (the device returns at most 8 files).
#
# --dry-run checks all of this on a CPU machine in a few minutes: tiny models, gloo, a few seconds a step; the
# ops step then only asks DeepSpeed whether CPU Adam could be built. --plan prints the steps the same arguments
# would run, in order, with their limits and the total, and exits (nothing run, nothing written).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ARGS="$*"
DRY=0
SHORT=0
PLAN=0
STEPS_GIVEN=0
OUT_DIR=""
# Every step, in the order the full campaign runs them; --short runs SHORT_STEPS, in that order, first.
ORDER="pytest kernels breakdown probe memory-single memory-sharded published zero-hooks fsdp-hooks ops strategies host"
SHORT_STEPS="breakdown host zero-hooks fsdp-hooks strategies memory-single memory-sharded published"
STEPS="${ORDER// /,}"
MODELS=""
SITE="${TMPDIR:-/tmp}/autoshard-gpu-site"
usage() { sed -n '2,/^set /{s/^# \{0,1\}//p}' "$0"; }
fail() { echo "gpu_campaign.sh: $1" >&2; exit 2; }
while (($#)); do
    case "$1" in
        --dry-run) DRY=1; shift ;;
        --short) SHORT=1; shift ;;
        --plan) PLAN=1; shift ;;
        --out) [[ $# -ge 2 ]] || fail "--out needs a directory."; OUT_DIR="$2"; shift 2 ;;
        --steps) [[ $# -ge 2 ]] || fail "--steps needs a comma-separated list."; STEPS="$2"; STEPS_GIVEN=1; shift 2 ;;
        --models) [[ $# -ge 2 ]] || fail "--models needs a comma-separated list."; MODELS="$2"; shift 2 ;;
        --site) [[ $# -ge 2 ]] || fail "--site needs a directory."; SITE="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) fail "unknown argument '$1' (see --help)." ;;
    esac
done
((SHORT && ! STEPS_GIVEN)) && STEPS="${SHORT_STEPS// /,}"
IFS=',' read -r -a WANTED <<< "$STEPS"
for s in "${WANTED[@]}"; do
    [[ " $ORDER " == *" $s "* ]] || fail "--steps: unknown step '$s'; known: ${ORDER// /, } (setup always runs)."
done
wanted() { [[ ",$STEPS," == *",$1,"* ]]; }

# Per-step limits in seconds (GPU; the dry run uses its own, smaller ones).
declare -A LIMIT=([setup]=40 [pytest]=120 [kernels]=30 [breakdown]=60 [probe]=90 [memory-single]=400 [memory-sharded]=150
                  [published]=250 [zero-hooks]=150 [fsdp-hooks]=240 [ops]=150 [strategies]=380 [host]=60)
# The dry run's are generous: on a 2-core machine that other jobs share, a step takes 3-5 times its quiet time
# (zero-hooks, 22 processes of which 14 start DeepSpeed: 130 s quiet; 8 of them took 5 minutes beside a test suite's
# DeepSpeed runs).
# --short: one 10-minute device call (590 s in all; setup takes about 10 s of its 40, which leaves the packing and
# the transfers their time). Its steps' settings are cut to fit: host, zero-hooks and fsdp-hooks write their
# tables at the end, so one stopped by its limit leaves only its log (a line per case).
((SHORT)) && LIMIT=([setup]=40 [breakdown]=40 [host]=60 [zero-hooks]=110 [fsdp-hooks]=60 [strategies]=100
                    [memory-single]=80
                    [memory-sharded]=60 [published]=40 [probe]=60 [pytest]=90 [kernels]=30 [ops]=150)
if ((DRY)); then LIMIT=([setup]=120 [pytest]=120 [kernels]=60 [breakdown]=120 [probe]=60 [memory-single]=240 [memory-sharded]=240
                        [published]=60 [zero-hooks]=420 [fsdp-hooks]=180 [ops]=60 [strategies]=300 [host]=120); fi
if ((SHORT)); then  # the 590 s first, then the steps --short --steps may add, in the full campaign's order
    rest=""
    for step in $ORDER; do [[ " $SHORT_STEPS " == *" $step "* ]] || rest+=" $step"; done
    ORDER="$SHORT_STEPS$rest"
fi
if ((PLAN)); then  # the steps this command would run, with their limits; nothing run, nothing written
    total=${LIMIT[setup]}
    echo "setup ${LIMIT[setup]}"
    for step in $ORDER; do
        if wanted "$step"; then echo "$step ${LIMIT[$step]}"; total=$((total + LIMIT[$step])); fi
    done
    echo "total $total"
    exit 0
fi

PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || PY=python
PACK=0
if [[ -z "$OUT_DIR" ]]; then
    if [[ -n "${OUT:-}" ]]; then OUT_DIR="$OUT"; PACK=1; else OUT_DIR="$ROOT/gpu-campaign-out"; fi
fi
mkdir -p "$OUT_DIR" || fail "cannot create $OUT_DIR."
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
if ((PACK)); then TREE="$(mktemp -d)/campaign"; else TREE="$OUT_DIR/campaign"; fi
rm -rf "$TREE"
mkdir -p "$TREE/logs" "$TREE/docs/benchmarks" "$TREE/runs"
DOCS="$TREE/docs/benchmarks"
SUMMARY="$OUT_DIR/summary.md"
STEPS_TABLE="$TREE/steps.md"
export PYTHONUNBUFFERED=1
# DeepSpeed's ops compile just in time into TORCH_EXTENSIONS_DIR; a compile stopped half-way leaves a lock that
# blocks every later load, and two environments sharing ~/.cache/torch_extensions rebuild each other's op (its
# build file names the environment's paths): our own folder, the dry run's one per Python environment.
if ((DRY)); then
    export CUDA_VISIBLE_DEVICES=""
    export TORCH_EXTENSIONS_DIR="$SITE/torch_extensions-dry-$("$PY" -c 'import hashlib, sys
print(hashlib.sha1(sys.prefix.encode()).hexdigest()[:10])')"
else
    export TORCH_EXTENSIONS_DIR="$SITE/torch_extensions"
fi

STARTED=$(date +%s)
N=0
{
    echo "# GPU campaign $(date -u +%Y-%m-%dT%H:%M:%SZ)$( ((DRY)) && echo ' — DRY RUN (CPU, tiny sizes)')"
    echo
    echo "Command: \`bash benchmarks/gpu_campaign.sh $ARGS\`"
    echo
    echo "| step | status | seconds | limit (s) | log |"
    echo "|---|---|---:|---:|---|"
} > "$STEPS_TABLE"

pack() {
    if ((PACK)); then
        tar -czf "$OUT_DIR/gpu_campaign.tar.gz" -C "$(dirname "$TREE")" campaign
        [[ -f "$TREE/versions.txt" ]] && cp "$TREE/versions.txt" "$OUT_DIR/versions.txt"
    else
        tar -czf "$OUT_DIR/gpu_campaign.tar.gz" --exclude=./gpu_campaign.tar.gz -C "$OUT_DIR" campaign
    fi
    {
        cat "$STEPS_TABLE"
        if [[ -f "$TREE/versions.txt" ]]; then echo; echo '```'; cat "$TREE/versions.txt"; echo '```'; fi
    } > "$SUMMARY"
}

# ---------------------------------------------------------------------------------------------------- steps
# Each step is a function run as `timeout LIMIT bash -c NAME` (exported), so `timeout` can stop all of it.
export ROOT TREE DOCS SITE PY DRY SHORT MODELS

step_setup() {
    set -e
    if compgen -G ".whl/*.whl" > /dev/null; then
        # Install a carried wheel only where the machine lacks its distribution or has an older one.
        mapfile -t carry < <("$PY" - .whl/*.whl <<'EOF'
import importlib.metadata as md, sys
from packaging.version import Version
for path in sys.argv[1:]:
    name, version = path.rsplit("/", 1)[-1].split("-")[:2]
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if name == "autoshard" or have is None or Version(have) < Version(version):
        print(path)
    else:
        print(f"have {name} {have}, carried {version}: kept", file=sys.stderr)
EOF
        )
        if [[ -f "$SITE/.installed" ]] && cmp -s <(ls -l .whl) "$SITE/.installed"; then
            echo "already installed into $SITE"
        else
            "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
                "${carry[@]}"
            ls -l .whl > "$SITE/.installed"
            echo "installed into $SITE: ${carry[*]}"
        fi
    elif ((DRY)); then
        echo "no .whl/ (benchmarks/gpu_wheels.sh builds it): this environment as it is"
    else
        echo "no .whl/: run benchmarks/gpu_wheels.sh where there is network, and carry .whl" >&2
        exit 1
    fi
    "$PY" - "$TREE" <<'EOF'
import importlib.metadata as md, json, os, platform, subprocess, sys
from pathlib import Path

out = Path(sys.argv[1])
info = {"python": platform.python_version(), "cpus": os.cpu_count()}
for dist in ("torch", "deepspeed", "optuna", "transformers", "accelerate", "lightning", "autoshard"):
    try:
        info[dist] = md.version(dist)
    except md.PackageNotFoundError:
        info[dist] = "not installed"
import torch

info["torch.version.cuda"] = torch.version.cuda
info["cuda available"] = torch.cuda.is_available()
if torch.cuda.is_available():
    info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    info["gpu memory bytes"] = torch.cuda.get_device_properties(0).total_memory
    info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    info["cudnn"] = torch.backends.cudnn.version()
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30)
    info["nvidia-smi"] = smi.stdout.strip() or smi.stderr.strip()
except (OSError, subprocess.TimeoutExpired) as e:
    info["nvidia-smi"] = f"unavailable: {e}"
import autoshard
import deepspeed

info["autoshard from"] = str(Path(autoshard.__file__).parent)
info["deepspeed from"] = str(Path(deepspeed.__file__).parent)
info["deepspeed accelerator"] = deepspeed.get_accelerator()._name
build = Path(".whl/BUILD_INFO")
info["wheels"] = build.read_text().splitlines()[:2] if build.is_file() else "none"
(out / "versions.json").write_text(json.dumps(info, indent=2) + "\n")
(out / "versions.txt").write_text("".join(f"{k}: {v}\n" for k, v in info.items()))
print((out / "versions.txt").read_text(), end="")
EOF
}

step_pytest() {
    # Every gpu-marked test is in tests/gpu (collecting the whole suite alone takes a minute on 2 busy cores);
    # without CUDA they skip with their reason (-rs shows it). The quick ones first, the memory runs last, so that
    # a limit stops the longest.
    "$PY" -m pytest -m gpu -q -rs -p no:cacheprovider --junitxml="$DOCS/gpu_pytest.xml" \
        tests/gpu/test_nccl.py tests/gpu/test_strategies.py tests/gpu/test_memory.py
}

step_breakdown() {
    if ((DRY)); then
        "$PY" benchmarks/step_breakdown.py --dry-run --steps 2 --out "$DOCS"
    elif ((SHORT)); then
        "$PY" benchmarks/step_breakdown.py --steps 3 --cases gpt2-bf16,gpt2-fp16,bert-large-fp16 --out "$DOCS"
    else
        "$PY" benchmarks/step_breakdown.py --out "$DOCS"
    fi
}

step_kernels() {
    if ((DRY)); then
        "$PY" benchmarks/gpu_kernels.py --dry-run --out "$DOCS"
    else
        "$PY" benchmarks/gpu_kernels.py --out "$DOCS"
    fi
}

memory_by_model() {  # NAME ARGS... -- MODEL...: memory_accuracy.py once per model (a limit then stops one model,
    # not the grid), the reports so far merged after each into docs/benchmarks/gpu_NAME.{md,json}.
    local name="$1"; shift
    local args=() models=() rc=0 i=0 m
    while [[ $1 != -- ]]; do args+=("$1"); shift; done
    shift
    models=("$@")
    for m in "${models[@]}"; do
        i=$((i + 1))
        local dir
        dir="$TREE/runs/$name/$(printf '%02d' $i)-$m"
        if ((DRY)); then  # two of the model's one-device cases, not eight: a few seconds
            "$PY" - "$m" "$dir" <<'EOF' || rc=$?
import sys
sys.path.insert(0, "benchmarks")
import memory_accuracy as m

model, out = sys.argv[1:]
cases = [m.Case(model, 2, 32, "32-true", False), m.Case(model, 2, 32, "bf16-mixed", True)]
raise SystemExit(m.main(["--device", "cpu", "--out", out], cases=cases))
EOF
        else
            "$PY" benchmarks/memory_accuracy.py "${args[@]}" --models "$m" --out "$dir" || rc=$?
        fi
        "$PY" - "$TREE/runs/$name" "$DOCS/gpu_$name" \
            "python benchmarks/memory_accuracy.py ${args[*]} --models M, for each M of: ${models[*]}" <<'EOF' || rc=1
import json, shutil, sys, tempfile
from pathlib import Path

sys.path.insert(0, "benchmarks")
import memory_accuracy as m

runs, target, command = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
reports = [json.loads(p.read_text()) for p in sorted(runs.glob("*/memory_accuracy.json"))]
if reports:
    rows = [row for report in reports for row in report["rows"]]
    meta = dict(reports[0]["meta"], command=command, seconds=round(sum(r["meta"]["seconds"] for r in reports), 1))
    with tempfile.TemporaryDirectory() as tmp:
        m.write_report(Path(tmp), meta, m.summarize(rows), rows)
        for ext in ("md", "json"):
            shutil.copy(Path(tmp) / f"memory_accuracy.{ext}", target.with_name(f"{target.name}.{ext}"))
failed = [r for r in reports[-1]["rows"] if r.get("error")] if reports else []  # this model's run
for r in failed:
    print(f"case failed: {r.get('model')} {r.get('precision')} b={r.get('batch_size')}: {r['error']}",
          file=sys.stderr)
raise SystemExit(1 if failed else 0)
EOF
    done
    return $rc
}

step_probe() {
    if ((DRY)); then  # it needs CUDA: the arguments only
        "$PY" benchmarks/sdpa_probe.py --help > /dev/null
    else
        "$PY" benchmarks/sdpa_probe.py --snapshot --out "$DOCS"
    fi
}

step_memory_single() {
    if ((DRY)); then
        memory_by_model memory_accuracy_single --device cpu --grid single --strategies single -- tiny-gpt2 tiny-llama
    elif ((SHORT)); then
        memory_by_model memory_accuracy_single --device cuda --grid full --strategies single -- llama-3-8b mistral-7b \
            t5-small bert-base-uncased resnet50
    else
        memory_by_model memory_accuracy_single --device cuda --grid full --strategies single -- gpt2 gpt2-medium \
            bert-base-uncased t5-small vit-b-16 resnet50 llama-2-7b mistral-7b llama-3-8b
    fi
}

step_memory_sharded() {
    if ((DRY)); then  # the full grid's sharded cases in miniature: FSDP2 as rank 0 of 8, fake process group
        local dir="$TREE/runs/memory_accuracy_sharded/01-tiny-gpt2" rc=0 ext
        "$PY" - "$dir" <<'EOF' || rc=$?
import sys
sys.path.insert(0, "benchmarks")
import memory_accuracy as m

cases = [m.Case("tiny-gpt2", 4, 64, "32-true", False, strategy=s, world_size=8, process_group="fake")
         for s in ("fsdp", "fsdp_shard_grad_op")]
raise SystemExit(m.main(["--device", "cpu", "--out", sys.argv[1]], cases=cases))
EOF
        for ext in md json; do cp "$dir/memory_accuracy.$ext" "$DOCS/gpu_memory_accuracy_sharded.$ext" || rc=1; done
        return $rc
    fi
    if ((SHORT)); then
        memory_by_model memory_accuracy_sharded --device cuda --grid full --strategies fsdp fsdp_shard_grad_op \
            -- llama-2-7b gpt2
    else
        memory_by_model memory_accuracy_sharded --device cuda --grid full --strategies fsdp fsdp_shard_grad_op \
            -- gpt2 llama-2-7b
    fi
}

step_published() {
    # --short: two of the guide's BERT-large configurations, then torchtune's point, in the order given (the full
    # set traces 8 models whole). 2026-11-28: 100 s ran out on torchtune's 3B, listed first then; BERT-large's
    # vanilla run took 21 s, its GA-4 run 38 s. The report is written after every point, so the 40 s of --short
    # keep vanilla's: the planner's prediction with gradients zeroed between steps (049f669) against the GPU.
    # Defined here: an array does not cross the `bash -c` each step runs in.
    local short=(hf1gpu-v100-bert-large-vanilla-memory hf1gpu-v100-bert-large-vanilla-tps
                 hf1gpu-v100-bert-large-ga4-ckpt-fp16-memory hf1gpu-v100-bert-large-ga4-ckpt-fp16-tps
                 torchtune-a100-llama32-3b-packed-memory torchtune-a100-llama32-3b-packed-tps)
    if ((DRY && SHORT)); then  # --short's points, shrunk: their ids checked before a GPU is spent on them
        "$PY" benchmarks/published.py --measure-on-gpu --dry-run --out "$DOCS" --only "${short[@]}"
    elif ((DRY)); then
        "$PY" benchmarks/published.py --measure-on-gpu --dry-run --out "$DOCS"
    elif ((SHORT)); then
        "$PY" benchmarks/published.py --measure-on-gpu --out "$DOCS" --only "${short[@]}"
    else
        "$PY" benchmarks/published.py --measure-on-gpu --out "$DOCS"
    fi
}

clear_locks() {  # the locks of op builds a limit stopped (nothing compiles now: `timeout` ends a step's group)
    rm -f "$TORCH_EXTENSIONS_DIR"/*/lock
}

step_zero_hooks() {
    clear_locks  # the engines' first start builds DeepSpeed's shm_comm op on the CPU accelerator (the dry run)
    if ((DRY)); then  # the CPU engines on two short stacks: the plumbing, not a figure
        "$PY" benchmarks/zero_hooks.py --layers 2 4 --steps 2 --warmup 1 --repeats 1 --name gpu_zero_hooks \
            --passes hooks step modules --out "$DOCS"
    elif ((SHORT)); then  # a process each, fourteen of them starting DeepSpeed: 8 + 10 in 110 s (not the
        # parameterless modules' pass)
        "$PY" benchmarks/zero_hooks.py --accelerator cuda --layers 16 64 --steps 10 --warmup 3 --repeats 1 \
            --passes hooks step --out "$DOCS"
    else  # 12 + 15 + 6 processes (not the recompute pass's 30: its CPU figures are what is priced)
        "$PY" benchmarks/zero_hooks.py --accelerator cuda --layers 16 64 128 --steps 10 --repeats 1 \
            --passes hooks step modules --out "$DOCS"
    fi
}

step_fsdp_hooks() {
    if ((DRY)); then  # the CPU mode on two kinds of two tiny stacks (8 processes): the plumbing, not a figure
        "$PY" benchmarks/fsdp_hooks.py --kinds torch-bf16 fsdp-keep-bf16 --units 1 2 --steps 2 --warmup 1 \
            --repeats 1 --name gpu_fsdp_hooks --out "$DOCS"
    elif ((SHORT)); then  # autoshard's bf16 policy, resharding and not, beside plain bf16 torch: 12 processes
        "$PY" benchmarks/fsdp_hooks.py --accelerator cuda --kinds torch-bf16 fsdp-raf-bf16 fsdp-keep-bf16 \
            --steps 10 --warmup 3 --repeats 1 --out "$DOCS"
    else  # every kind: 48 processes
        "$PY" benchmarks/fsdp_hooks.py --accelerator cuda --steps 20 --warmup 5 --repeats 2 --out "$DOCS"
    fi
}

step_ops() {
    # DeepSpeed's CPU Adam (optimizer offload) compiles just in time on first use: once here, under this limit.
    # The dry run only asks whether it could: a compile on a 2-core machine takes minutes.
    if ((DRY)); then
        "$PY" -c "from deepspeed.ops.op_builder import CPUAdamBuilder as B; assert B().is_compatible(verbose=True)
print('cpu_adam can be built here (not built: dry run)')"
    else
        "$PY" -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('cpu_adam ok')"
    fi
}

step_strategies() {
    local args=(--out "$DOCS" --runs "$TREE/runs/strategies")
    clear_locks  # a run that needs an op whose build a limit stopped then builds it itself, within its own limit
    ((DRY)) && args+=(--dry-run)
    if [[ -n "$MODELS" ]]; then args+=(--models ${MODELS//,/ }); elif ((SHORT && ! DRY)); then args+=(--models gpt2); fi
    # Start no run later than 30 s before the step's limit, so the table is complete when the step ends.
    "$PY" benchmarks/gpu_strategies.py "${args[@]}" --budget-s "$((STEP_LIMIT - 30))"
}
step_host() {
    if ((DRY)); then  # one narrow copy on the CPU, one step a case: the plumbing, not a figure
        "$PY" benchmarks/host_overhead.py --only gpt2-medium --steps 1 --repeats 1 --out "$DOCS"
    elif ((SHORT)); then  # two architectures (the census traces each first): 60 s
        "$PY" benchmarks/host_overhead.py --device cuda --only gpt2-medium llama-3.2-1b --steps 6 --repeats 2 \
            --out "$DOCS"
    else
        "$PY" benchmarks/host_overhead.py --device cuda --steps 10 --repeats 3 --out "$DOCS"
    fi
}
export -f step_setup step_pytest step_kernels step_breakdown step_probe memory_by_model step_memory_single step_memory_sharded \
    step_published clear_locks step_zero_hooks step_fsdp_hooks step_ops step_strategies step_host

# run_step NAME: run step_NAME under `timeout`, log to logs/NN-NAME.log, record its status; never stops the campaign.
run_step() {
    local name="$1"
    N=$((N + 1))
    local log limit t0 rc status took
    log="logs/$(printf '%02d' "$N")-$name.log"
    limit="${LIMIT[$name]}"
    t0=$(date +%s)
    echo "== [$name] limit ${limit}s" | tee "$TREE/$log"
    STEP_LIMIT="$limit" timeout --kill-after=10 "$limit" bash -c "step_${name//-/_}" >> "$TREE/$log" 2>&1
    rc=$?
    case $rc in
        0) status="ok" ;;
        124|137) status="TIMED OUT" ;;
        *) status="failed (exit $rc)" ;;
    esac
    took=$(( $(date +%s) - t0 ))
    echo "== [$name] $status after ${took}s" >> "$TREE/$log"
    tail -n 4 "$TREE/$log" | sed 's/^/   /'
    echo "| $name | $status | $took | $limit | $log |" >> "$STEPS_TABLE"
    pack
}

skip_step() {  # NAME REASON
    N=$((N + 1))
    echo "== [$1] skipped: $2"
    echo "| $1 | skipped: $2 | — | ${LIMIT[$1]} | — |" >> "$STEPS_TABLE"
}

if compgen -G ".whl/*.whl" > /dev/null || ((! DRY)); then
    export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"  # this checkout first: the wheel may be older
else
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
run_step setup
for step in $ORDER; do
    wanted "$step" || continue
    if [[ $step == published && ! -f benchmarks/published.py ]]; then
        skip_step published "benchmarks/published.py is not in this checkout"
        continue
    fi
    run_step "$step"
done
took=$(( $(date +%s) - STARTED ))
echo "| total | | $took | | |" >> "$STEPS_TABLE"
pack
echo "gpu_campaign.sh: done in ${took}s; $SUMMARY, $OUT_DIR/gpu_campaign.tar.gz"
