#!/usr/bin/env bash
# Build .whl/: the wheels a lent GPU machine lacks, for benchmarks/gpu_campaign.sh to install there.
#
# Run it HERE, on a machine with registry access and this project's environment (torch and DeepSpeed installed),
# from the repository root:
#
#     bash benchmarks/gpu_wheels.sh [--dest DIR]      # default DIR: .whl (git-ignored)
#
# The GPU machine (docs: /work/shared/GPU.md) has Python 3.12, torch 2.11 (CUDA 13), transformers, accelerate,
# lightning, psutil, nvidia-ml-py, pyyaml, rich, matplotlib, numpy, tqdm, packaging, ninja, einops, msgpack,
# py-cpuinfo and MarkupSafe, and no network. What it lacks, carried here:
#
#   * DeepSpeed: an sdist only on the registry; built as a pure-Python wheel against this machine's torch (its ops
#     compile just in time on the GPU machine, where ninja and nvcc are installed) — GPU.md.
#   * DeepSpeed's needs absent there: hjson, pydantic, pydantic-core, annotated-types, typing-inspection
#     (deepspeed 0.19.8 Requires-Dist; pydantic 2.x Requires-Dist).
#   * Optuna and its needs: optuna, alembic, sqlalchemy, colorlog, mako (optuna / alembic Requires-Dist).
#   * autoshard itself (`pip wheel --no-deps .`).
#
# Versions are those of this environment (so the GPU machine runs what the CPU tables were measured with);
# binary wheels are fetched for CPython 3.12 on manylinux x86-64. The campaign installs a carried wheel only when
# the machine does not already have that distribution (it checks with importlib.metadata first).
# Writes DIR/BUILD_INFO: the commit, the date and each wheel's file name.
set -euo pipefail

DEST=.whl
while (($#)); do
    case "$1" in
        --dest) DEST="${2:?--dest needs a directory}"; shift 2 ;;
        -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_wheels.sh: unknown argument '$1' (known: --dest DIR)." >&2; exit 2 ;;
    esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python}"
if ! "$PY" -c "import torch, deepspeed" 2>/dev/null; then
    echo "gpu_wheels.sh: '$PY' cannot import torch and deepspeed; activate the project's environment first" \
         "(pip install -e '.[dev]')." >&2
    exit 2
fi

version() {  # the installed version of a distribution here
    "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"
}

mkdir -p "$DEST"
rm -f "$DEST"/*.whl

# Pure Python, built here: DeepSpeed (no ops pre-built: DS_BUILD_OPS=0 is its default) and autoshard.
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DEST" "deepspeed==$(version deepspeed)"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DEST" .

# Binary or universal wheels for the GPU machine's interpreter. pip matches a manylinux tag exactly, hence the list.
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
           manylinux1_x86_64)
platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
for dist in hjson pydantic pydantic-core annotated-types typing-inspection optuna alembic sqlalchemy colorlog mako; do
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platform_args[@]}" -d "$DEST" "$dist==$(version "$dist")"
done

{
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $("$PY" --version 2>&1)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
    echo "torch here: $(version torch)"
    (cd "$DEST" && ls -1 ./*.whl | sed 's|^\./|wheel: |')
} > "$DEST/BUILD_INFO"
echo "gpu_wheels.sh: $(ls "$DEST"/*.whl | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST (see $DEST/BUILD_INFO)."
