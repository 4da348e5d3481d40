"""Which fused-attention kernel CUDA's SDPA picks in a training step of the catalog's decoders, and that step's peak.

    python benchmarks/sdpa_probe.py [--out DIR]

For each case (model with 4 blocks, batch, precision) it records every ``scaled_dot_product_attention`` call's
arguments (dtype, mask shape or None, is_causal, enable_gqa, query / key heads) with the backend
``torch._fused_sdp_choice`` names for them, and ``max_memory_allocated`` over the measured step
(``memory_accuracy.measure_peak``), beside ``autoshard.profile(..., target="cuda")``'s prediction. GPU only.

With ``--snapshot``, each case's step also runs under ``torch.cuda.memory._record_memory_history`` and the live
allocations at the step's peak are written (largest first, each with its innermost Python frames) to
``sdpa_probe.json``: what the GPU holds where the prediction falls short.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import memory_accuracy as m

import autoshard
from autoshard.profiler import ProfileOptions

CASES = [("mistral-7b", 1, "32-true"), ("mistral-7b", 4, "32-true"), ("llama-2-7b", 4, "32-true"),
         ("mistral-7b", 4, "bf16-mixed")]


def live_at_peak(snapshot: dict, top: int = 40) -> list[dict]:
    """The allocations live when the recorded trace's allocated bytes peaked, largest first."""
    live: dict[int, dict] = {}
    best: list[dict] = []
    total = peak = 0
    for event in snapshot.get("device_traces", [[]])[0]:
        action, addr, size = event.get("action"), event.get("addr"), event.get("size", 0)
        if action == "alloc":
            frames = [f"{f.get('filename', '?').rsplit('/', 2)[-1]}:{f.get('line')} {f.get('name')}"
                      for f in event.get("frames", []) if f.get("filename", "").endswith(".py")][:4]
            live[addr] = {"bytes": size, "frames": frames}
            total += size
            if total > peak:
                peak, best = total, list(live.values())
        elif action == "free_completed" and addr in live:
            total -= live.pop(addr)["bytes"]
    return sorted(best, key=lambda a: -a["bytes"])[:top]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--snapshot", action="store_true", help="record the allocations live at each peak")
    args = parser.parse_args()
    original = F.scaled_dot_product_attention
    calls: list[dict] = []

    def recording(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **kw):
        try:
            choice = torch._fused_sdp_choice(q, k, v, attn_mask, dropout_p, is_causal, scale=scale,
                                              enable_gqa=enable_gqa)
        except Exception as error:  # noqa: BLE001 - recorded
            choice = repr(error)
        calls.append({"dtype": str(q.dtype), "q": list(q.shape), "k": list(k.shape),
                      "mask": None if attn_mask is None else [list(attn_mask.shape), str(attn_mask.dtype)],
                      "is_causal": is_causal, "enable_gqa": enable_gqa, "choice": str(choice),
                      "grad": q.requires_grad})
        return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                        enable_gqa=enable_gqa, **kw)

    rows = []
    for model, batch, precision in CASES:
        calls.clear()
        case = m.Case(model, batch, 2048, precision, False, 4)
        source = m.load_case(case)
        options = ProfileOptions(batch_size=batch, seq_len=2048, precision=precision, target="cuda")
        row = {"model": model, "batch": batch, "precision": precision}
        try:
            row["predicted"] = autoshard.profile(source, batch_size=batch, seq_len=2048, precision=precision,
                                                 target="cuda").peak_bytes
            if args.snapshot:
                torch.cuda.memory._record_memory_history(max_entries=200_000)
            F.scaled_dot_product_attention = recording  # the measured step's calls only, not the trace's
            try:
                row["measured"] = m.measure_peak(source, options, torch.device("cuda"))["allocated"]
            finally:
                F.scaled_dot_product_attention = original
            if args.snapshot:
                row["live_at_peak"] = live_at_peak(torch.cuda.memory._snapshot())
                torch.cuda.memory._record_memory_history(enabled=None)
        except Exception as error:  # noqa: BLE001 - recorded
            row["error"] = repr(error)
        row["sdpa_calls"] = len(calls)
        row["sdpa_distinct"] = [json.loads(s) for s in sorted({json.dumps(c, sort_keys=True) for c in calls})]
        rows.append(row)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
        # After every case: a time limit that stops the probe keeps the cases before (2026-11-28: lost both).
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sdpa_probe.json").write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
