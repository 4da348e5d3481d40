"""``plan.json``: autoshard's own record of a plan, the one input every other exporter reads.

It keeps what a launcher or config file needs — the recommended strategy with the knob values in force,
precision, optimizer, batch sizes — plus fingerprints of the model and the hardware, so that a later
``fit()`` or a colleague can tell whether the file still describes the job at hand.

Example:
    >>> from autoshard.planner.plan_file import ExportedPlan, HardwareFingerprint, ModelFingerprint, dumps, loads
    >>> p = ExportedPlan(
    ...     strategy="ddp", family="ddp", micro_batch_size=4, gradient_accumulation=2,
    ...     activation_checkpointing=False, settings={"bucket_cap_mb": 25}, precision="bf16-mixed",
    ...     optimizer="adamw", seq_len=64,
    ...     model=ModelFingerprint(name="m", parameter_count=10, block_class=None, layout_hash="0" * 16),
    ...     hardware=HardwareFingerprint(gpu="h100", gpu_memory_bytes=80, gpus_per_node=8, nodes=2,
    ...                                  device_type="cuda", backend="nccl", nvme_path=None))
    >>> p.global_batch_size
    128
    >>> loads(dumps(p)) == p
    True
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from autoshard.errors import UsageError
from autoshard.hardware.specs import UNKNOWN_LINK_BYTES_PER_S, HardwareSpec
from autoshard.planner.plan import Plan
from autoshard.profiler.checkpointing import FULL, NONE, ActivationCheckpointing, parse_checkpointing
from autoshard.profiler.options import (
    Precision,
    parse_float32_matmul_precision,
    parse_grad_clip_norm,
    parse_optimizer,
)
from autoshard.strategies import get
from autoshard.strategies.base import Knob, Traits

SCHEMA_VERSION = 1
"""Bumped whenever a field changes meaning or disappears; readers refuse other versions."""
KIND = "autoshard.plan"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelFingerprint:
    """Enough about the model to notice that a plan was made for a different one."""

    name: str
    parameter_count: int
    block_class: str | None
    """The repeated block classes (the FSDP wrapping units), comma-separated in module order as accelerate's
    ``fsdp_transformer_layer_cls_to_wrap`` takes them: ``GPT2Block``, ``BartEncoderLayer,BartDecoderLayer``;
    ``None`` when nothing repeats. One string, so that plan.json files from before block sets still load and
    mean the same."""
    layout_hash: str
    """First 16 hex digits of a SHA-256 over the parameter tensor sizes and the block sizes (:func:`layout_hash`)."""

    @property
    def block_classes(self) -> tuple[str, ...]:
        """The block class names, in module order (empty when nothing repeats).

        Example:
            >>> ModelFingerprint(name="bart", parameter_count=1, layout_hash="0" * 16,
            ...                  block_class="BartEncoderLayer,BartDecoderLayer").block_classes
            ('BartEncoderLayer', 'BartDecoderLayer')
        """
        return tuple(c.strip() for c in (self.block_class or "").split(",") if c.strip())


@dataclass(frozen=True, kw_only=True, slots=True)
class HardwareFingerprint:
    """The hardware the plan was made for."""

    gpu: str | None
    """The GPU model name (``None``: planned for CPU processes)."""
    gpu_memory_bytes: int | None
    gpus_per_node: int
    """Processes per node: one per GPU (for CPU, the number of gloo processes)."""
    nodes: int
    device_type: str
    """``cuda`` or ``cpu``."""
    backend: str
    """The ``torch.distributed`` backend, ``nccl`` or ``gloo``."""
    nvme_path: str | None
    """A mounted NVMe directory for DeepSpeed's NVMe offload when one is known, else ``None``."""
    network: str | None = None
    """The network between the nodes the plan was priced with, in words (``8 × InfiniBand NDR (400 Gb/s)``):
    ``None`` on one node, or where the hardware does not describe it (plan files written before the field)."""
    network_bytes_per_s: float | None = None
    """One node's network bandwidth per direction that the plan priced: the hardware's, or
    :data:`~autoshard.hardware.specs.UNKNOWN_LINK_BYTES_PER_S` where it does not say; ``None`` on one node."""

    @property
    def world_size(self) -> int:
        """Total number of ranks."""
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True, kw_only=True, slots=True)
class ExportedPlan:
    """The recommended configuration, as written to ``plan.json`` (schema version :data:`SCHEMA_VERSION`)."""

    strategy: str
    """The strategy name (Lightning's), e.g. ``deepspeed_stage_3_offload``."""
    family: str
    """``ddp``, ``fsdp`` or ``deepspeed``."""
    micro_batch_size: int
    """Samples per device per forward/backward."""
    gradient_accumulation: int
    activation_checkpointing: bool
    """Whether the plan checkpoints each repeated block."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Every knob of the strategy with the value in force (the candidate's, else the hardware default)."""
    precision: str
    """Lightning's precision name: ``32-true``, ``16-mixed``, ``bf16-mixed`` or ``bf16-true``."""
    optimizer: str
    seq_len: int | None
    model: ModelFingerprint
    hardware: HardwareFingerprint
    checkpointing: str | None = None
    """What the checkpointed blocks recompute when :attr:`activation_checkpointing`: ``full``, ``op`` or
    ``every-N`` (:mod:`autoshard.profiler.checkpointing`); ``None`` is ``full`` (plan files written before)."""
    optimizer_impl: str | None = None
    """``foreach``, ``for-loop`` or ``fused`` when the plan was made for that optimizer implementation;
    ``None``: torch's default (plan files written before the setting)."""
    float32_matmul_precision: str = "highest"
    """The ``torch.set_float32_matmul_precision`` the plan was priced with (``fit()`` runs it; plan files written
    before the setting: ``highest``, torch's default)."""
    grad_clip_norm: float | None = None
    """The norm the gradients' global 2-norm is clipped to before each step (``None``: no clipping; plan files
    written before the setting). The launch scripts train with it; the exports write it."""
    traits: Traits | None = None
    """What the strategy does (sharding stage, offload, hybrid): what the backends and exporters ask. Always the
    registered strategy's: left out (plan.json files written before traits) it is filled in, and other traits are
    refused."""

    def __post_init__(self) -> None:
        if self.checkpointing is not None:
            parse_checkpointing(self.checkpointing)  # a UsageError naming the valid choices
        parse_float32_matmul_precision(self.float32_matmul_precision)
        if self.precision not in {p.value for p in Precision}:  # the exporters key their tables by Lightning's name
            raise UsageError(f"the plan's precision {self.precision!r} is not one of "
                             f"{', '.join(p.value for p in Precision)}.")
        clip = parse_grad_clip_norm(self.grad_clip_norm, "the plan's grad_clip_norm")
        object.__setattr__(self, "grad_clip_norm", clip)
        registered = get(self.strategy).traits
        if self.traits is None:
            object.__setattr__(self, "traits", registered)
        elif self.traits != registered:  # e.g. dataclasses.replace(plan, strategy=...) kept the old traits
            differ = ", ".join(f"{f.name} {getattr(self.traits, f.name)!r} (the strategy's "
                               f"{getattr(registered, f.name)!r})" for f in fields(registered)
                               if getattr(self.traits, f.name) != getattr(registered, f.name))
            raise UsageError(f"the plan's traits are not those of its strategy {self.strategy}: {differ}.",
                             hint='In a plan.json, delete its "traits" (they are filled in from the strategy); in '
                                  "Python, replace(plan, ..., traits=None); or export the plan again.")
        if registered.family != self.family:
            raise UsageError(f"the plan's family {self.family!r} is not its strategy's ({registered.family!r}).")
        parse_optimizer(self.optimizer)  # a UsageError naming the optimizers autoshard knows
        if self.hardware.device_type not in ("cuda", "cpu"):
            raise UsageError(f"the plan's hardware.device_type must be 'cuda' or 'cpu', but got "
                             f"{self.hardware.device_type!r}.")
        problem = settings_problem(self.strategy, self.settings)
        if problem is not None:
            raise UsageError(f"the plan's settings: {problem}.",
                             hint="Export the plan again, or give the setting a value of its kind.")

    @property
    def strategy_traits(self) -> Traits:
        """:attr:`traits`, never ``None`` once constructed."""
        if self.traits is None:  # __post_init__ fills it in: only a bypassed constructor gets here
            raise RuntimeError("ExportedPlan.traits was not filled in")
        return self.traits

    @property
    def checkpointing_choice(self) -> ActivationCheckpointing:
        """What the plan recomputes, typed: ``none`` unless :attr:`activation_checkpointing`."""
        if not self.activation_checkpointing:
            return NONE
        choice = parse_checkpointing(self.checkpointing or "full")
        return choice or FULL

    @property
    def checkpoints_every_block(self) -> bool:
        """Whether the plan recomputes every block whole: what accelerate's, Lightning's and the HF Trainer's
        single checkpointing switch does."""
        return self.checkpointing_choice == FULL

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step: micro-batch × gradient accumulation × data-parallel ranks."""
        return self.micro_batch_size * self.gradient_accumulation * self.hardware.world_size

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, with ``kind``, ``schema_version`` and the derived ``global_batch_size``."""
        d = asdict(self)
        d["traits"] = self.strategy_traits.to_dict()
        return {"kind": KIND, "schema_version": SCHEMA_VERSION, **d, "global_batch_size": self.global_batch_size}


@functools.cache
def _knobs(strategy: str) -> dict[str, Knob]:
    """``strategy``'s knobs on a permissive stand-in for any hardware (CUDA and NCCL, 2 nodes of 8 GPUs): a plan
    file's settings are checked for their names and kinds, not for the machine."""
    from autoshard.hardware import load_hardware

    return {k.name: k for k in get(strategy).knobs(load_hardware("h100-sxm-80gb", gpus=8, nodes=2))}


def settings_problem(strategy: str, settings: dict[str, Any]) -> str | None:
    """Why ``settings`` are not ``strategy``'s (an unknown name, a value of the wrong kind), or ``None``.

    Example:
        >>> settings_problem("ddp", {"bucket_cap_mb": "lots"})
        "bucket_cap_mb must be a number, but got 'lots'"
        >>> settings_problem("fsdp", {"reduce_dtype": "bf16", "reshard_after_forward": False}) is None
        True
        >>> settings_problem("deepspeed_stage_2", {"reduce_bucket_size": -5})
        'reduce_bucket_size must not be negative, but got -5'
    """
    knobs = _knobs(strategy)
    for name, value in settings.items():
        knob = knobs.get(name)
        if knob is None:
            return f"{name} is not a setting of {strategy} (its settings: {', '.join(knobs)})"
        if knob.kind == "bool":
            ok, want = isinstance(value, bool), "True or False"
        elif knob.kind == "choice" and all(isinstance(c, str) for c in knob.choices):
            ok, want = value in knob.choices, f"one of {', '.join(map(repr, knob.choices))}"
        elif knob.kind == "choice":  # numbers (and booleans) whose set depends on the hardware
            ok = isinstance(value, int)  # a bool is one
            want = "True, False or a whole number" if any(isinstance(c, bool) for c in knob.choices) else \
                "a whole number"
        elif knob.kind == "int":
            ok, want = _whole(value), "a whole number"
        else:
            ok, want = not isinstance(value, bool) and isinstance(value, (int, float)), "a number"
        if not ok:
            return f"{name} must be {want}, but got {value!r}"
        if knob.kind in ("int", "float") and knob.low is not None and knob.low >= 0 and value < 0:
            return f"{name} must not be negative, but got {value!r}"  # DeepSpeed's own check is 4 lines of pydantic
    return None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def layout_hash(parameter_numels: tuple[int, ...], block_parameter_counts: tuple[int, ...]) -> str:
    """A short, stable digest of a model's parameter layout.

    Example:
        >>> layout_hash((4, 4), (8,)) == layout_hash((4, 4), (8,)) != layout_hash((4, 5), (9,))
        True
    """
    text = json.dumps({"numels": list(parameter_numels), "blocks": list(block_parameter_counts)})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def from_plan(plan: Plan) -> ExportedPlan:
    """The :class:`ExportedPlan` of ``plan.recommended``, with the strategy's settings in force.

    Raises:
        UsageError: the candidate carries a setting its strategy does not have.
    """
    rec = plan.recommended
    hw = plan.hardware
    w = plan.workload
    settings = get(rec.strategy).settings(hw, rec.candidate, w)  # what the model's step needs included
    nvme = next((d.path for d in hw.node.nvme if d.path.startswith("/")), None)  # profiles say "(local NVMe)"
    return ExportedPlan(
        strategy=rec.strategy, family=rec.family, traits=rec.traits, micro_batch_size=rec.candidate.micro_batch_size,
        gradient_accumulation=rec.gradient_accumulation,
        activation_checkpointing=rec.candidate.activation_checkpointing,
        settings=dict(settings), precision=w.precision.value, optimizer=w.optimizer, seq_len=w.seq_len,
        optimizer_impl=w.optimizer_impl, float32_matmul_precision=w.float32_matmul_precision,
        grad_clip_norm=w.grad_clip_norm,
        checkpointing=str(w.checkpoint_mode) if rec.candidate.activation_checkpointing else None,
        model=ModelFingerprint(name=w.model, parameter_count=w.parameter_count, block_class=w.block_class,
                               layout_hash=layout_hash(w.parameter_numels, w.block_parameter_counts)),
        hardware=HardwareFingerprint(
            gpu=None if hw.gpu is None else hw.gpu.name, gpu_memory_bytes=hw.device_memory_bytes if hw.gpu else None,
            gpus_per_node=hw.processes_per_node, nodes=hw.nodes, device_type=hw.device_type, backend=hw.backend,
            nvme_path=nvme, **_network(hw)),
    )


def _network(hw: HardwareSpec) -> dict[str, Any]:
    """The network a multi-node plan was priced with (:class:`HardwareFingerprint`'s ``network`` fields)."""
    if hw.nodes == 1:
        return {}
    net = hw.node.network
    if net is None:
        return {"network_bytes_per_s": UNKNOWN_LINK_BYTES_PER_S}
    return {"network": f"{net.ports} × {net.link.display_name}", "network_bytes_per_s": net.bandwidth_bytes_per_s}


def dumps(exported: ExportedPlan) -> str:
    """``plan.json``'s text: indented JSON with a final newline."""
    return json.dumps(exported.to_dict(), indent=2) + "\n"


def loads(text: str, *, source: str = "plan.json") -> ExportedPlan:
    """Parse and validate ``plan.json`` text.

    Args:
        text: the file's content.
        source: what to call it in error messages (a path).

    Raises:
        UsageError: not JSON, not an autoshard plan, another schema version, or a field missing or mistyped.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if source.endswith((".py", ".yaml", ".yml")) or not text.lstrip().startswith(("{", "[")):
            # a model.py or config file where a plan was meant: the model comes before a plan
            raise UsageError(f"{source} is not a plan.json (not JSON at all): a plan is what autoshard recommend "
                             "or tune writes.", hint=_not_a_plan_hint(None)) from e
        raise UsageError(f"{source} is not valid JSON: {e}.") from e
    if isinstance(data, dict) and isinstance(data.get("best_plan"), dict) and "study_name" in data:
        data = data["best_plan"]  # a tune summary.json: its best configuration's plan
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise UsageError(f"{source} is not an autoshard plan (expected \"kind\": \"{KIND}\").",
                         hint=_not_a_plan_hint(data))
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UsageError(f"{source} has schema_version {version!r}; this autoshard reads version {SCHEMA_VERSION}.",
                         hint="Export the plan again with this version of autoshard.")
    try:
        model = ModelFingerprint(**_fields(data, "model", _MODEL_TYPES, source))
        hardware = HardwareFingerprint(**_fields(data, "hardware", _HARDWARE_TYPES, source,
                                                 optional=_OPTIONAL_HARDWARE_TYPES))
        top = _fields({"plan": data}, "plan", _PLAN_TYPES, source,
                      extra_ok=("kind", "schema_version", "model", "hardware", "global_batch_size", "traits"),
                      optional=_OPTIONAL_PLAN_TYPES)
        traits = _traits(data, source)
        try:
            exported = ExportedPlan(**top, model=model, hardware=hardware, traits=traits)
        except UsageError as e:  # its own checks (family, traits, settings), said of this file
            raise UsageError(f"{source}: {e.message}", hint=e.hint) from None
    except TypeError as e:  # a field missing from the dataclass constructor
        raise UsageError(f"{source} is malformed: {e}.") from e
    for name in ("micro_batch_size", "gradient_accumulation"):
        if getattr(exported, name) < 1:
            raise UsageError(f"{source}: {name} must be >= 1, but got {getattr(exported, name)}.")
    if exported.hardware.nodes < 1 or exported.hardware.gpus_per_node < 1:
        raise UsageError(f"{source}: nodes and gpus_per_node must be >= 1.")
    if data.get("global_batch_size", exported.global_batch_size) != exported.global_batch_size:
        raise UsageError(f"{source}: global_batch_size {data['global_batch_size']} is not micro_batch_size × "
                         f"gradient_accumulation × nodes × gpus_per_node = {exported.global_batch_size}.")
    return exported


def _not_a_plan_hint(data: Any) -> str:
    """How to get a plan from what was given instead."""
    if isinstance(data, dict) and "recommended" in data and "candidates" in data:
        return ("That is `autoshard recommend --json`'s answer; `autoshard recommend MODEL ... --output-dir DIR` "
                "writes DIR/plan.json (and the configs).")
    if isinstance(data, dict) and "study_name" in data:
        return "That is a tune summary whose study has no best configuration yet: nothing to export."
    return ("Write one with `autoshard recommend MODEL --output-dir DIR` (it plans and exports in one go: "
            "DIR/plan.json and the configs), `autoshard tune` (its best/plan.json), or "
            "autoshard.export.export_plan(plan, output_dir).")


def _traits(data: dict[str, Any], source: str) -> Traits | None:
    """The ``traits`` object, or ``None`` where the file predates them."""
    if "traits" not in data:
        return None
    if not isinstance(data["traits"], dict):
        raise UsageError(f"{source}: \"traits\" must be an object, but got {type(data['traits']).__name__}.")
    try:
        return Traits.from_dict(data["traits"])
    except ValueError as e:
        raise UsageError(f"{source}: {e}") from e


def write(exported: ExportedPlan, path: str | Path) -> Path:
    """Write ``plan.json`` to ``path`` and return the path."""
    path = Path(path)
    path.write_text(dumps(exported), encoding="utf-8")
    return path


def read(path: str | Path) -> ExportedPlan:
    """Read and validate ``plan.json`` (see :func:`loads`): a path to it, or to a directory holding one (an
    export's, or ``autoshard tune``'s ``best/``), or to a tune ``summary.json`` (its best plan).

    Raises:
        UsageError: the file is missing or malformed.
    """
    path = Path(path)
    if path.is_dir() and (path / "plan.json").is_file():
        path = path / "plan.json"
    elif path.is_dir():
        inside = [f"{path / n}" for n in ("best", "summary.json") if (path / n).exists()]
        raise UsageError(f"{path} is a directory without a plan.json.",
                         hint=(f"Give {' or '.join(inside)} (an autoshard tune output)" if inside else
                               "Give a plan.json, a directory holding one, or a tune summary.json") + ".")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}.") from e
    return loads(text, source=str(path))


_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))
_MODEL_TYPES = {"name": str, "parameter_count": int, "block_class": _OPT_STR, "layout_hash": str}
_HARDWARE_TYPES = {"gpu": _OPT_STR, "gpu_memory_bytes": _OPT_INT, "gpus_per_node": int, "nodes": int,
                   "device_type": str, "backend": str, "nvme_path": _OPT_STR}
_OPTIONAL_HARDWARE_TYPES = {"network": _OPT_STR, "network_bytes_per_s": (int, float, type(None))}
_PLAN_TYPES = {"strategy": str, "family": str, "micro_batch_size": int, "gradient_accumulation": int,
               "activation_checkpointing": bool, "settings": dict, "precision": str, "optimizer": str,
               "seq_len": _OPT_INT}
_OPTIONAL_PLAN_TYPES = {"optimizer_impl": _OPT_STR, "checkpointing": _OPT_STR, "float32_matmul_precision": str,
                        "grad_clip_norm": (int, float, type(None))}
"""Fields later versions added (and :data:`_OPTIONAL_HARDWARE_TYPES`): a file without them is read with the
dataclass's default."""


def _fields(data: dict[str, Any], key: str, types: dict[str, Any], source: str,
            extra_ok: tuple[str, ...] = (), optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """``data[key]``'s fields, each checked against ``types`` (``optional``: may be missing); unknown keys are
    refused."""
    optional = optional or {}
    obj = data.get(key)
    if key not in data:
        raise UsageError(f"{source} has no \"{key}\".", hint="Export the plan again (autoshard recommend MODEL "
                                                          "--output-dir DIR writes a whole one).")
    if not isinstance(obj, dict):
        raise UsageError(f"{source}: \"{key}\" must be an object, but got {type(obj).__name__}.")
    unknown = set(obj) - set(types) - set(optional) - set(extra_ok)
    if unknown:
        raise UsageError(f"{source}: unknown field(s) {', '.join(sorted(unknown))} in \"{key}\".")
    out = {}
    for name, kind in {**types, **optional}.items():
        if name not in obj and name in optional:
            continue
        if name not in obj:
            raise UsageError(f"{source}: \"{key}\" lacks the field \"{name}\".")
        value = obj[name]
        # bool is an int subclass: refuse it where a count is expected.
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool and bool not in
                                           (kind if isinstance(kind, tuple) else (kind,))):
            raise UsageError(f"{source}: \"{key}.{name}\" has the wrong type ({type(value).__name__}).")
        out[name] = value
    return out
