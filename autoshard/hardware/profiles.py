"""Hardware profiles: ``profiles/**/*.yaml`` (shipped) and users' own files, through one loader.

There are four kinds of profile, told apart by their ``kind:`` key (``docs/hardware.md`` has the schema):

* ``gpu`` — a GPU model and its datasheet numbers (``profiles/gpus/``);
* ``interconnect`` — NVLink, PCIe, InfiniBand, Ethernet (``profiles/interconnects/``);
* ``node`` — a machine: N GPUs of one model, its links, CPU, RAM, NVMe and network (``profiles/nodes/``);
* ``cluster`` — M nodes of one kind (users' files; a node profile is a one-node cluster).

A profile refers to others by name (``gpu: a100-sxm-80gb``) or defines them inline (a mapping). A shipped
profile's name is its file name without ``.yaml``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from autoshard._suggest import close_names
from autoshard.errors import HardwareError
from autoshard.hardware.schema import (
    Doc,
    compute_capability,
    positive_float,
    positive_int,
    read_yaml,
)
from autoshard.hardware.specs import (
    DTYPES,
    LINK_KINDS,
    MAX_GPUS_PER_NODE,
    Achievable,
    CPUSpec,
    GPUSpec,
    LinkSpec,
    NetworkSpec,
    NodeSpec,
    NVMeDevice,
    PeakTflops,
)
from autoshard.hardware.units import (
    RATE_EXAMPLES,
    SIZE_EXAMPLES,
    written_rate,
    written_size,
)

KINDS: tuple[str, ...] = ("gpu", "interconnect", "node", "cluster")

_SIZE = f"a positive size ({SIZE_EXAMPLES})"
_RATE = f"a positive rate ({RATE_EXAMPLES})"
_COMMON = ("kind", "name", "display_name", "description", "sources")


def profiles_dir() -> Path:
    """The directory of the shipped profiles: :func:`profiles_dir_of` the installed package."""
    return profiles_dir_of(Path(__file__).resolve().parents[1])


def profiles_dir_of(package: Path) -> Path:
    """The shipped profiles of the ``autoshard`` package at ``package``: the copy a wheel ships as the
    ``autoshard/profiles`` package data (see ``pyproject.toml``), else ``profiles/`` at the root of the source
    checkout the package is in (an editable install: ``pyproject.toml`` beside it). A ``profiles`` folder beside
    an installed package is someone else's (``site-packages/profiles``, a Django app beside a vendored copy): it
    hid every shipped profile when it was looked at first (a packaging probe).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as root:
        ...     package = Path(root) / "autoshard"
        ...     (package / "profiles").mkdir(parents=True)
        ...     (Path(root) / "profiles").mkdir()  # another project's folder beside the installed package
        ...     profiles_dir_of(package) == package / "profiles"
        True
    """
    packaged = package / "profiles"
    checkout = package.parent / "profiles"
    if not packaged.is_dir() and checkout.is_dir() and (package.parent / "pyproject.toml").is_file():
        return checkout
    return packaged


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfileEntry:
    """One shipped profile, as listed by ``autoshard hardware --list``."""

    name: str
    kind: str
    display_name: str
    path: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"name": self.name, "kind": self.kind, "display_name": self.display_name, "path": self.path}


@dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    """A loaded profile of any kind."""

    kind: str
    """One of :data:`KINDS`."""
    name: str
    path: str
    spec: GPUSpec | LinkSpec | NodeSpec
    """A :class:`GPUSpec`, a :class:`LinkSpec`, or a :class:`NodeSpec` (for ``node`` and ``cluster``)."""
    nodes: int | None = None
    """Number of nodes (``cluster`` profiles only)."""


# ---------------------------------------------------------------------------------------------- the index


@functools.lru_cache(maxsize=8)
def _index(directory: str) -> dict[str, Path]:
    index: dict[str, Path] = {}
    root = Path(directory)
    if not root.is_dir():
        raise HardwareError(
            f"the hardware profiles directory {root} is missing.",
            hint="autoshard looks for profiles/ next to its package; reinstall autoshard from its source tree.",
        )
    for path in sorted(root.rglob("*.yaml")):
        name = path.stem.lower()
        if name in index:
            raise HardwareError(f"{path}: profile name {name!r} is also used by {index[name]}.")
        index[name] = path
    return index


def _normalise(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _looks_like_path(name_or_path: str) -> bool:
    return (
        "/" in name_or_path
        or "\\" in name_or_path
        or name_or_path.endswith((".yaml", ".yml"))
        or Path(name_or_path).is_file()
    )


def list_profiles(directory: Path | None = None) -> tuple[ProfileEntry, ...]:
    """Every shipped profile (loaded and validated), sorted by kind then name.

    Raises:
        HardwareError: a shipped profile is invalid.
    """
    root = directory or profiles_dir()
    entries = []
    for name, path in _index(str(root)).items():
        profile = load_profile(name, directory=root)
        entries.append(
            ProfileEntry(name=name, kind=profile.kind, display_name=_display_name(profile), path=str(path))
        )
    return tuple(sorted(entries, key=lambda e: (KINDS.index(e.kind), e.name)))


def _display_name(profile: Profile) -> str:
    spec = profile.spec
    if isinstance(spec, NodeSpec):
        return spec.name if profile.nodes is None else f"{profile.nodes} × {spec.name}"
    return spec.display_name


def load_profile(name_or_path: str | os.PathLike[str], *, directory: Path | None = None) -> Profile:
    """Load a profile by shipped name or from a YAML file.

    Args:
        name_or_path: a shipped profile name (``"dgx-a100"``, case-insensitive) or a path to a YAML file.
        directory: where the shipped profiles are (default :func:`profiles_dir`).

    Returns:
        The validated :class:`Profile`.

    Raises:
        HardwareError: unknown name (the message lists close names), unreadable or invalid file.
    """
    root = directory or profiles_dir()
    text = os.fspath(name_or_path)
    if not isinstance(name_or_path, str) or _looks_like_path(text):
        return _load_file(Path(text).expanduser(), root=root, strict=False)
    index = _index(str(root))
    key = _normalise(text)
    if key not in index:
        raise _unknown(text, sorted(index), what="hardware profile")
    return _load_file(index[key], root=root, strict=True)


def _unknown(name: str, names: list[str], *, what: str) -> HardwareError:
    close = close_names(_normalise(name), names, n=4)
    hint = "`autoshard hardware --list` lists them all; or pass a YAML file."
    message = f"unknown {what} {name!r}"
    message += f"; did you mean {', '.join(close)}?" if close else "."
    return HardwareError(message, hint=hint)


@functools.lru_cache(maxsize=256)
def _load_cached(path: str, root: str, strict: bool, mtime_ns: int) -> Profile:
    data = read_yaml(Path(path))
    doc = Doc.top(data, file=path, strict=strict)
    kind = doc.choice("kind", KINDS)
    loader = _LOADERS[kind]
    profile = loader(doc, Path(root))
    if strict and profile.name.lower() != Path(path).stem.lower():
        raise doc.error("name", f"the file name without .yaml ({Path(path).stem!r})", profile.name)
    return profile


def _load_file(path: Path, *, root: Path, strict: bool) -> Profile:
    try:
        mtime_ns = path.stat().st_mtime_ns
    except FileNotFoundError:
        raise HardwareError(f"{path}: no such hardware file.") from None
    except OSError as exc:
        raise HardwareError(f"{path}: cannot read the hardware file: {exc}.") from None
    return _load_cached(str(path), str(root), strict, mtime_ns)


def _reference(doc: Doc, key: str, kind: str, root: Path) -> Profile:
    """A ``kind`` profile named by ``doc[key]`` (a shipped name) or defined inline (a mapping)."""
    expected = f"the name of {_a(kind)} profile or an inline mapping"
    if not doc.present(key):
        raise doc.error(key, expected)
    value = doc.raw(key)
    if isinstance(value, dict):
        inline = doc.mapping(key)
        if inline.has("kind") and inline.raw("kind") != kind:
            raise inline.error("kind", repr(kind), inline.raw("kind"))
        return _LOADERS[kind](inline, root)
    if not isinstance(value, str) or not value.strip():
        raise doc.error(key, expected, value)
    index = _index(str(root))
    name = _normalise(value)
    if name not in index:
        names = [n for n in index if _load_file(index[n], root=root, strict=True).kind == kind]
        close = close_names(name, names, n=3)
        suffix = f" (close: {', '.join(close)})" if close else ""
        raise doc.error(key, f"the name of a shipped {kind} profile{suffix}", value,
                        hint="`autoshard hardware --list` lists them.")
    profile = _load_file(index[name], root=root, strict=True)
    if profile.kind != kind:
        raise doc.error(
            key, f"the name of {_a(kind)} profile", found_text=f"{value!r}, {_a(profile.kind)} profile"
        )
    return profile


def _a(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


def _gpu(doc: Doc, key: str, root: Path) -> GPUSpec:
    return cast(GPUSpec, _reference(doc, key, "gpu", root).spec)


def _node(doc: Doc, key: str, root: Path) -> NodeSpec:
    return cast(NodeSpec, _reference(doc, key, "node", root).spec)


def _link(doc: Doc, key: str, root: Path) -> LinkSpec | None:
    if not doc.has(key):
        return None
    return cast(LinkSpec, _reference(doc, key, "interconnect", root).spec)


# ---------------------------------------------------------------------------------------------- per kind


def _load_interconnect(doc: Doc, root: Path) -> Profile:
    doc.check_keys(["name", "display_name", "type", "bandwidth"], [*_COMMON, "lanes", "latency_us"])
    latency_us = doc.optional_quantity("latency_us", positive_float, "a positive number of microseconds")
    spec = LinkSpec(
        name=doc.string("name"),
        display_name=doc.string("display_name"),
        kind=doc.choice("type", LINK_KINDS),
        bandwidth_bytes_per_s=doc.quantity("bandwidth", written_rate, _RATE),
        lanes=doc.optional_quantity("lanes", positive_int, "a positive whole number"),
        latency_s=None if latency_us is None else latency_us * 1e-6,
    )
    if spec.kind in ("infiniband", "ethernet") and spec.bandwidth_bytes_per_s > _MAX_PORT_BYTES_PER_S:
        raise doc.error("bandwidth", f"at most {_MAX_PORT_BYTES_PER_S * 8 / 1e9:g} Gb/s for one {spec.kind} port "
                        "(the fastest sold carry 800 Gb/s)", found_text=f"{spec.bandwidth_bytes_per_s / 1e9:g} GB/s",
                        hint="A port's speed is usually written in Gb/s (bits): 400 Gb/s is 50 GB/s.")
    return Profile(kind="interconnect", name=spec.name, path=doc.file, spec=spec)


_MAX_PORT_BYTES_PER_S = 200e9
"""1.6 Tb/s: twice the fastest network port sold (800 Gb/s XDR InfiniBand, 800 GbE); a faster port in a file is a
GB/s written for Gb/s."""


def _load_gpu(doc: Doc, root: Path) -> Profile:
    doc.check_keys(
        ["name", "display_name", "memory", "peak_tflops"],
        [*_COMMON, "nvml_names", "compute_capability", "memory_bandwidth", "form_factor", "host_link", "nvlink",
         "achievable", "power_limit"],
    )
    peak_doc = doc.mapping("peak_tflops")
    peak_doc.check_keys([], DTYPES)
    if not peak_doc.data:
        raise doc.error("peak_tflops", f"at least one of {', '.join(DTYPES)}", peak_doc.data)
    peak = PeakTflops(**{
        dtype: peak_doc.optional_quantity(dtype, positive_float, "a positive number of TFLOP/s")
        for dtype in DTYPES
    })
    nvlink = _link(doc, "nvlink", root)
    if nvlink is not None and nvlink.kind != "nvlink":
        raise doc.error("nvlink", "an nvlink interconnect", found_text=f"{nvlink.name!r}, {_a(nvlink.kind)} link")
    spec = GPUSpec(
        name=doc.string("name"),
        display_name=doc.string("display_name"),
        memory_bytes=doc.quantity("memory", written_size, _SIZE),
        compute_capability=doc.optional_quantity(
            "compute_capability", compute_capability, "a compute capability like '8.0'"
        ),
        memory_bandwidth_bytes_per_s=doc.optional_quantity("memory_bandwidth", written_rate, _RATE),
        peak_tflops=peak,
        form_factor=doc.optional_choice("form_factor", ("sxm", "pcie")),
        host_link=_link(doc, "host_link", root),
        nvlink=nvlink,
        nvml_names=doc.string_list("nvml_names"),
        achievable=_achievable(doc),
        power_limit_w=doc.optional_quantity("power_limit", positive_float, "a positive number of watts"),
        profile_path=doc.file,
    )
    return Profile(kind="gpu", name=spec.name, path=doc.file, spec=spec)


def _fraction(value: Any) -> float:
    number = positive_float(value)
    if number > 1:
        raise ValueError(f"a fraction is at most 1, got {number}")
    return number


def _achievable(doc: Doc) -> Achievable | None:
    """The optional ``achievable:`` mapping: ``matmul``, ``attention``, ``memory``, and optionally ``matmul_fp32``,
    ``matmul_tf32``, ``unaligned_matmul`` and ``unaligned_matmul_2b``, each a fraction in (0, 1]."""
    if doc.data.get("achievable") is None:
        return None
    sub = doc.mapping("achievable")
    keys = ("matmul", "attention", "memory")
    optional = ("matmul_fp32", "matmul_tf32", "unaligned_matmul", "unaligned_matmul_2b")
    sub.check_keys(keys, optional=optional)
    values = {k: sub.quantity(k, _fraction, "a fraction in (0, 1]") for k in keys}
    values.update({k: sub.quantity(k, _fraction, "a fraction in (0, 1]") for k in optional if sub.present(k)})
    return Achievable(**values)


def default_intra_node_link(gpu: GPUSpec) -> LinkSpec | None:
    """The link between GPUs of a node built from a GPU profile: NVLink on SXM boards, else the PCIe link."""
    if gpu.form_factor == "sxm" and gpu.nvlink is not None:
        return gpu.nvlink
    return gpu.host_link


def node_from_gpu(gpu: GPUSpec, gpus: int, *, name: str | None = None, link: LinkSpec | None = None) -> NodeSpec:
    """A node of ``gpus`` GPUs of one model; CPU and RAM unknown.

    Args:
        gpu: the GPU model.
        gpus: GPUs per node.
        name: display name (default ``"8 × NVIDIA A100-SXM4-80GB"``).
        link: the link between its GPUs (default :func:`default_intra_node_link`).
    """
    link = (link or default_intra_node_link(gpu)) if gpus > 1 else None
    return NodeSpec(
        name=name or f"{gpus} × {gpu.display_name}",
        gpu=gpu,
        gpus=gpus,
        intra_node_link=link,
        intra_node_bandwidth_bytes_per_s=None if link is None else link.bandwidth_bytes_per_s,
    )


def _network(doc: Doc, key: str, root: Path) -> NetworkSpec | None:
    if not doc.has(key):
        return None
    net = doc.mapping(key)
    net.check_keys(["link", "ports"])
    link = cast(LinkSpec, _reference(net, "link", "interconnect", root).spec)
    if link.kind not in ("infiniband", "ethernet"):
        raise net.error(
            "link", "an infiniband or ethernet interconnect", found_text=f"{link.name!r}, {_a(link.kind)} link"
        )
    return NetworkSpec(link=link, ports=net.quantity("ports", positive_int, "a positive number of ports"))


def _load_nvme(item: Doc) -> NVMeDevice:
    item.check_keys(["size"], ["path", "read_bandwidth", "write_bandwidth"])
    size = item.quantity("size", written_size, _SIZE)
    return NVMeDevice(
        path=item.optional_string("path") or "(local NVMe)",
        total_bytes=size,
        free_bytes=size,
        read_bytes_per_s=item.optional_quantity("read_bandwidth", written_rate, _RATE),
        write_bytes_per_s=item.optional_quantity("write_bandwidth", written_rate, _RATE),
        origin="profile",
    )


def _load_node(doc: Doc, root: Path) -> Profile:
    doc.check_keys(
        ["name", "gpu", "gpus_per_node"],
        [*_COMMON, "intra_node_link", "cpu_cores", "cpu_memory", "cpu_memory_bandwidth", "nvme", "network"],
    )
    gpus = doc.quantity("gpus_per_node", positive_int, "a positive number of GPUs")
    if gpus > MAX_GPUS_PER_NODE:
        raise doc.error("gpus_per_node", f"at most {MAX_GPUS_PER_NODE} GPUs (no node holds more; a cluster is "
                        "nodes x GPUs per node)", found_text=str(gpus))
    link = _link(doc, "intra_node_link", root)
    if link is not None and link.kind not in ("nvlink", "pcie"):  # a network between nodes, not a node's GPUs
        raise doc.error("intra_node_link", "an nvlink or pcie interconnect (the network between nodes is "
                        "network:)", found_text=f"{link.name!r}, {_a(link.kind)} link")
    node = node_from_gpu(
        _gpu(doc, "gpu", root),
        gpus,
        name=doc.optional_string("display_name") or doc.string("name"),
        link=link,
    )
    cpu_memory = doc.optional_quantity("cpu_memory", written_size, _SIZE)
    spec = replace(
        node,
        cpu=CPUSpec(
            physical_cores=doc.optional_quantity("cpu_cores", positive_int, "a positive number of cores"),
            memory_total_bytes=cpu_memory,
            memory_available_bytes=cpu_memory,
            memory_bandwidth_bytes_per_s=doc.optional_quantity("cpu_memory_bandwidth", written_rate, _RATE),
        ),
        nvme=tuple(_load_nvme(item) for item in doc.items("nvme")),
        network=_network(doc, "network", root),
    )
    return Profile(kind="node", name=doc.string("name"), path=doc.file, spec=spec)


def _load_cluster(doc: Doc, root: Path) -> Profile:
    doc.check_keys(["name", "node", "nodes"], [*_COMMON, "network"])
    node = _node(doc, "node", root)
    network = _network(doc, "network", root)
    return Profile(
        kind="cluster",
        name=doc.string("name"),
        path=doc.file,
        spec=node if network is None else replace(node, network=network),
        nodes=doc.quantity("nodes", positive_int, "a positive number of nodes"),
    )


_LOADERS: dict[str, Callable[[Doc, Path], Profile]] = {
    "gpu": _load_gpu,
    "interconnect": _load_interconnect,
    "node": _load_node,
    "cluster": _load_cluster,
}


# ---------------------------------------------------------------------------------------------- lookups


def _canonical_gpu_name(name: str) -> str:
    text = name.strip().lower()
    for prefix in ("nvidia ", "tesla ", "geforce ", "quadro "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return "".join(ch for ch in text if ch.isalnum())


def gpu_profile_for(nvml_name: str, *, directory: Path | None = None) -> GPUSpec | None:
    """The shipped GPU profile whose ``nvml_names`` include ``nvml_name``, or ``None``.

    Matching ignores case, spaces, hyphens and an ``NVIDIA``/``Tesla``/``GeForce`` prefix, so
    ``"NVIDIA A100-SXM4-80GB"`` and an older driver's ``"A100-SXM4-80GB"`` both match.
    """
    wanted = _canonical_gpu_name(nvml_name)
    for entry in list_profiles(directory):
        if entry.kind != "gpu":
            continue
        spec = cast(GPUSpec, load_profile(entry.name, directory=directory).spec)
        if any(_canonical_gpu_name(n) == wanted for n in (*spec.nvml_names, spec.display_name)):
            return spec
    return None


def interconnect_profile(name: str, *, directory: Path | None = None) -> LinkSpec | None:
    """The shipped interconnect profile ``name`` (e.g. ``"pcie-gen4"``), or ``None`` if there is none."""
    root = directory or profiles_dir()
    if _normalise(name) not in _index(str(root)):
        return None
    profile = load_profile(name, directory=root)
    return profile.spec if isinstance(profile.spec, LinkSpec) else None
