"""An Accelerate config file (``accelerate launch --config_file accelerate_config.yaml train.py``).

Key names and values are those ``accelerate config`` writes and ``accelerate launch`` reads in accelerate 1.15.0
(``commands/config/config_args.py::ClusterConfig`` for the top level, ``commands/config/cluster.py`` for the
``fsdp_config`` / ``deepspeed_config`` keys, ``utils/constants.py::FSDP_AUTO_WRAP_POLICY``); accelerate itself is
not needed to write it.
"""

from __future__ import annotations

import importlib
from typing import Any

import yaml

from autoshard.errors import UsageError
from autoshard.planner.plan_file import ExportedPlan
from autoshard.strategies import exporter

DS_CONFIG_FILE = "ds_config.json"
_MIXED_PRECISION = {"32-true": "no", "16-mixed": "fp16", "bf16-mixed": "bf16", "bf16-true": "no"}
"""accelerate's ``mixed_precision`` choices are no / fp16 / bf16 / fp8; ``bf16-true`` is the user's model cast to
bf16 with autocast off, hence ``no``."""


def accelerate_config(exported: ExportedPlan, *, ds_config_file: str = DS_CONFIG_FILE) -> dict[str, Any]:
    """The config as a dict (:func:`dumps` writes it as YAML).

    Multi-node jobs also need ``--machine_rank`` and ``--main_process_ip`` on each node's command line; they are
    left out of the file, which is the same on every node.
    """
    hw = exported.hardware
    cpu = hw.device_type == "cpu"
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "num_machines": hw.nodes,
        "num_processes": hw.world_size,  # accelerate counts processes over all machines
        "machine_rank": 0,
        "mixed_precision": _MIXED_PRECISION[exported.precision],
        "use_cpu": cpu,
        "debug": False,
    }
    config.update(exporter(exported.family).accelerate(exported, ds_config_file=ds_config_file))
    return {k: v for k, v in config.items() if v is not None}  # None: the family removes a shared key


def kwargs_handlers(exported: ExportedPlan) -> list[Any]:
    """The ``Accelerator(kwargs_handlers=[...])`` carrying what the config file cannot (e.g. DDP's bucket size,
    static graph, comm hook in ``DistributedDataParallelKwargs``); empty when the file says everything.

    Raises:
        UsageError: accelerate is not installed.
    """
    try:  # import_module: accelerate ships no type information (no py.typed in 1.15.0)
        utils = importlib.import_module("accelerate.utils")
    except ImportError as e:
        raise UsageError("building accelerate's kwargs handlers needs accelerate, which is not installed.",
                         hint="pip install 'accelerate>=1.0'") from e
    handlers = exporter(exported.family).accelerate_handlers(exported)
    return [getattr(utils, name)(**kwargs) for name, kwargs in handlers.items()]


def dumps(exported: ExportedPlan, *, ds_config_file: str = DS_CONFIG_FILE) -> str:
    """The YAML text (``yaml.safe_dump``, keys in a stable order)."""
    return yaml.safe_dump(accelerate_config(exported, ds_config_file=ds_config_file), sort_keys=True)
