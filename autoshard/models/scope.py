"""What a profile or plan leaves out or assumes about a model source: the "Scope:" and "Assumed:" lines read from
the source's metadata (MoE experts computed densely by transformers' code, multi-token-prediction layers it does not
build, reference scans, eager attention, sizes from transformers' defaults)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autoshard.models.source import ModelSource

REFERENCE_SCAN = ("Its Mamba-2 mixers were traced through transformers' PyTorch scan, not the mamba-ssm kernels a "
                  "GPU run uses: activation memory and step time are upper bounds, and may be several times a run "
                  "with those kernels (docs/models.md, State-space models).")
"""The explanation's last line for a model with Mamba-2-style mixers (:func:`autoshard.models.hf_classes.
chunked_scan`)."""


REFERENCE_LINEAR_ATTENTION = (
    "Its linear-attention layers (gated DeltaNet) were traced through transformers' PyTorch chunked path, not the "
    "flash-linear-attention kernels a GPU run uses when installed: their activation memory and step time are upper "
    "bounds for such a run.")
"""The explanation's line for a model with linear-attention layers (:func:`autoshard.models.hf_classes.
linear_attention`)."""


def scope_lines(loaded: ModelSource, world_size: int = 1, seq_len: int | None = None) -> list[str]:
    """What a profile or plan of ``loaded`` leaves out or assumes about the model source itself ("Scope:" and
    "Assumed:" lines, which ``profile`` prints and a plan's explanation ends with): MoE experts on several GPUs
    (``world_size``), sizes taken from transformers' defaults, a reference scan, a sequence past the context its
    rotary positions were made for."""
    lines = []
    trained = loaded.metadata.get("trained_positions")
    reach, scaling = loaded.metadata.get("rope_reach"), loaded.metadata.get("rope_scaling")
    if isinstance(reach, int) and seq_len is not None and seq_len > reach:
        lines.append(
            f"Scope: sequence {seq_len:,} is past the {reach:,} positions {loaded.name}'s RoPE scaling ({scaling}) "
            "reaches: rotary positions run at any length, so memory and time are counted as asked, but the model was "
            "not made for that length (a larger factor in rope_parameters, or a longer-context checkpoint).")
    elif isinstance(trained, int) and not isinstance(reach, int) and seq_len is not None and seq_len > trained:
        lines.append(
            f"Scope: sequence {seq_len:,} is past the {trained:,} positions {loaded.name} was made for "
            "(max_position_embeddings): rotary positions run at any length, so memory and time are counted as "
            "asked, but training that far usually needs RoPE scaling (rope_parameters in the config; rope_scaling "
            "before transformers 5) or a long-context checkpoint.")
    from autoshard.models.hf_spec import MAX_DEFAULT_SEQ_LEN  # imports torch: not at this module's import

    declared = max((v for v in (trained, loaded.max_seq_len) if isinstance(v, int)), default=None)
    if (seq_len is not None and seq_len == loaded.default_seq_len and declared is not None
            and declared > seq_len == MAX_DEFAULT_SEQ_LEN):
        lines.append(f"Assumed: sequence {seq_len:,}, autoshard's default for {loaded.name} (its {declared:,} "
                     f"positions capped at {MAX_DEFAULT_SEQ_LEN:,}): --seq-len sets the length to train at.")
    window = loaded.metadata.get("sliding_window")
    if (isinstance(window, int) and seq_len is not None and seq_len > window
            and loaded.metadata.get("attn_implementation") == "sdpa"):
        named = "flash_attention" in str(loaded.metadata.get("attn_implementation_chosen_by"))
        flash = ("the flash_attention_2 the config names (built here as SDPA)" if named
                 else "flash-attention-2 (attn_implementation flash_attention_2)")
        lines.append(f"Scope: its sliding-window attention (window {window:,}) was traced as transformers' SDPA "
                     f"path runs it, the window given as a mask: all {seq_len:,} x {seq_len:,} scores are computed, "
                     f"and each layer keeps the mask for backward. {flash[0].upper()}{flash[1:]} computes only the "
                     "window, "
                     f"about {window / seq_len:.0%} of that attention work, with no mask: its memory and time are "
                     "lower than these.")
    experts = loaded.metadata.get("experts")
    if experts and world_size > 1:
        lines.append(
            f"Scope: its {experts} experts per MoE layer are planned as any other parameters (FSDP and ZeRO-3 "
            "gather a layer's experts whole on every GPU); expert parallelism, which keeps each expert on its own "
            "GPUs (Megatron-LM, DeepSpeed-MoE, torchtitan), is not planned; with many or large experts it is usually "
            "the faster way.")
    if experts and loaded.metadata.get("dense_experts"):
        k = loaded.metadata.get("experts_per_token")
        lines.append(
            f"Scope: transformers' code for this model sends every token through all {experts} experts and zeroes "
            f"the outputs the router did not choose{f' (top-{k})' if k else ''}: the FLOPs, step time and MFU here "
            f"are of that dense computation, about {experts // (k or 1)}x the routed experts' work of an "
            "implementation with grouped GEMMs (torchtitan, Megatron-LM), which autoshard does not trace.")
    unbuilt = loaded.metadata.get("mtp_layers_not_built")
    if unbuilt:
        lines.append(
            f"Scope: the config declares {unbuilt} multi-token-prediction layer(s) (num_nextn_predict_layers), which "
            f"transformers' {loaded.metadata.get('architecture')} does not build: they are not counted, traced or "
            "planned here (DeepSeek-V3's one MTP module is about 14B parameters beside its 671B); a run that trains "
            "them needs their memory and time on top.")
    if loaded.metadata.get("attn_implementation") == "eager" and "no SDPA path" in str(
            loaded.metadata.get("attn_implementation_chosen_by")):
        lines.append(f"Scope: {loaded.metadata.get('architecture')} has no SDPA path in transformers, so its attention "
                     "was traced eager: the scores of every head are materialised and kept for backward, slower and "
                     "larger than a fused kernel (attn_implementation in the config names another, e.g. a "
                     "flash-attention kernel the class supports).")
    chosen_by = str(loaded.metadata.get("architecture_chosen_by", ""))
    if chosen_by.startswith("AutoModel"):  # the config names no class: say which head was planned
        built, kind = loaded.metadata.get("architecture"), loaded.metadata.get("model_type")
        lines.append(f"Assumed: {loaded.origin} names no architectures: planned as {built}, the first class "
                     f"transformers' {chosen_by} has for model_type {kind!r} (docs/models.md); set "
                     "\"architectures\" in the file to plan another head.")
    defaulted = loaded.metadata.get("defaulted_sizes")
    if defaulted:
        sizes = ", ".join(f"{k} {v:,}" for k, v in defaulted.items())
        lines.append(f"Assumed: {loaded.origin} does not set {', '.join(defaulted)}: transformers' defaults for its "
                     f"model_type were used ({sizes}); set them in the file if the model differs.")
    if loaded.metadata.get("reference_scan"):
        lines.append(REFERENCE_SCAN)
    if loaded.metadata.get("reference_linear_attention"):
        lines.append(REFERENCE_LINEAR_ATTENTION)
    return lines
