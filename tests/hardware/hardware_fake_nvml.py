"""A stand-in for the ``pynvml`` module that serves a JSON fixture (see fixtures/README.md).

Only the boundary is fake: the exception classes and constants are the real ones from nvidia-ml-py, and
every function returns what the real one returns (objects with the same attributes, ``int``, ``str`` or
``bytes``).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

FIXTURES = Path(__file__).parent / "fixtures"


def load_fixture(name: str) -> dict[str, Any]:
    """A fixture by file name (without ``.json``), with ``extends`` resolved."""
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    if "extends" in data:
        base = load_fixture(data.pop("extends").removesuffix(".json"))
        base.update(data)
        data = base
    return data


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


class FakeNvml:
    """Serves one fixture through the pynvml API. ``init_calls``/``shutdown_calls`` count (re)initialisations."""

    NVMLError = pynvml.NVMLError

    def __init__(self, fixture: str | dict[str, Any]) -> None:
        self.data = load_fixture(fixture) if isinstance(fixture, str) else fixture
        self.init_calls = 0
        self.shutdown_calls = 0
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        # Constants and exception classes (NVML_*, NVMLError_*) come from the real module.
        if name.startswith(("NVML_", "NVMLError")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -- helpers -------------------------------------------------------------------------------------------

    def _raise(self, code_name: str) -> None:
        raise pynvml.NVMLError(getattr(pynvml, code_name))

    def _device(self, function: str, handle: _Handle) -> dict[str, Any]:
        self.calls.append(function)
        if not self.init_calls or self.shutdown_calls >= self.init_calls:
            self._raise("NVML_ERROR_UNINITIALIZED")
        if function in self.data.get("not_supported", ()):
            self._raise("NVML_ERROR_NOT_SUPPORTED")
        for fail in self.data.get("fail", ()):
            if fail["function"] == function and fail["device"] == handle.index:
                self._raise(fail["error"])
        return self.data["devices"][handle.index]

    def _text(self, value: str) -> str | bytes:
        return value.encode() if self.data.get("strings_as_bytes") else value

    # -- the API -------------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if "init_error" in self.data:
            self._raise(self.data["init_error"])
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        return self._text(self.data["driver_version"])

    def nvmlDeviceGetCount(self) -> int:
        return len(self.data["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < len(self.data["devices"]):
            self._raise("NVML_ERROR_INVALID_ARGUMENT")
        if index in self.data.get("no_permission", ()):  # a GPU outside the job's device cgroup
            self._raise("NVML_ERROR_NO_PERMISSION")
        return _Handle(index)

    def nvmlDeviceGetName(self, handle: _Handle) -> str | bytes:
        return self._text(self._device("nvmlDeviceGetName", handle)["name"])

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str | bytes:
        return self._text(self._device("nvmlDeviceGetUUID", handle)["uuid"])

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> SimpleNamespace:
        return SimpleNamespace(**self._device("nvmlDeviceGetMemoryInfo", handle)["memory"])

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> SimpleNamespace:
        bus = self._device("nvmlDeviceGetPciInfo", handle)["busId"]
        domain, bus_no, rest = bus.split(":")
        return SimpleNamespace(
            busId=self._text(bus),
            busIdLegacy=self._text(f"{int(domain, 16):04X}:{bus_no}:{rest}"),
            domain=int(domain, 16),
            bus=int(bus_no, 16),
            device=int(rest.split(".")[0], 16),
            pciDeviceId=0x20B210DE,
            pciSubSystemId=0x147F10DE,
        )

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        major, minor = self._device("nvmlDeviceGetCudaComputeCapability", handle)["cuda_compute_capability"]
        return (major, minor)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: _Handle) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkGeneration", handle)["pcie"]["curr_gen"]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: _Handle) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkWidth", handle)["pcie"]["curr_width"]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: _Handle) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkGeneration", handle)["pcie"]["max_gen"]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: _Handle) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkWidth", handle)["pcie"]["max_width"]

    def _link(self, function: str, handle: _Handle, link: int) -> dict[str, Any]:
        links = self._device(function, handle)["nvlinks"]
        if not 0 <= link < len(links):
            self._raise("NVML_ERROR_NOT_SUPPORTED")
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle: _Handle, link: int) -> int:
        self._link("nvmlDeviceGetNvLinkState", handle, link)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: _Handle, link: int) -> SimpleNamespace:
        remote = self._link("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)["remote_busId"]
        return SimpleNamespace(busId=self._text(remote))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: _Handle, link: int) -> int:
        return self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)["remote_type"]

    def nvmlDeviceGetTopologyCommonAncestor(self, first: _Handle, second: _Handle) -> int:
        self._device("nvmlDeviceGetTopologyCommonAncestor", first)
        level = self.data["topology"][first.index][second.index]
        if level is None:
            self._raise("NVML_ERROR_NOT_SUPPORTED")
        return level
