"""A family package spans two stages: its presets and memory / step-time models are planning, its ``backend.py``
and ``export.py`` are the hand-off. The registry names the latter by import path, so planning — tracing, ranking,
``recommend`` — never imports them, nor DeepSpeed, the runtime, the exporters or the tuner
(docs/architecture.md). (torch.distributed.fsdp is no sign: torch._dynamo imports it while the step is traced.)"""

from __future__ import annotations

import json
import subprocess
import sys

HAND_OFF = ("autoshard.runtime", "autoshard.export", "autoshard.tuner", "autoshard.cli", "deepspeed")


def _modules_after(code: str) -> list[str]:
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_planning_imports_no_backend_exporter_or_runtime() -> None:
    loaded = _modules_after("import autoshard\n"
                            "autoshard.recommend('tiny-gpt2', hardware='dgx-h100', seq_len=32)")
    hand_off = [m for m in loaded if m.startswith(HAND_OFF) or m.rsplit(".", 1)[-1] in ("backend", "export")
                and m.startswith("autoshard.strategies.")]
    assert hand_off == []
    assert {"autoshard.strategies.ddp", "autoshard.strategies.fsdp", "autoshard.strategies.deepspeed"} <= set(loaded)


def test_exporting_loads_the_family_exporters_but_no_backend() -> None:
    loaded = _modules_after("import autoshard, autoshard.export\n"
                            "plan = autoshard.recommend('tiny-gpt2', hardware='dgx-h100', seq_len=32,"
                            " strategies=['fsdp'])\n"
                            "autoshard.export.render(autoshard.export.from_plan(plan), validate=False)")
    assert "autoshard.strategies.fsdp.export" in loaded
    assert not [m for m in loaded if m.startswith("autoshard.") and m.endswith(".backend")
                or m.startswith(("autoshard.runtime", "deepspeed"))]
