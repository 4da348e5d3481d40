"""``python -m autoshard.runtime.worker``: one rank of a run ``fit()`` started for a model source, when the
launching session cannot be started again itself (a notebook, a test). Reads ``job.json`` from the run
directory (``AUTOSHARD_RUN_DIR``) and calls ``fit()``, which trains as the rank the environment names."""

from __future__ import annotations

import json
import os
from pathlib import Path


def main() -> None:
    """Run the job in ``$AUTOSHARD_RUN_DIR/job.json``."""
    from autoshard.runtime.fit import fit
    from autoshard.runtime.options import Checkpointing
    from autoshard.runtime.supervisor import RUN_DIR_VAR
    from autoshard.runtime.workers import JOB_FILE

    spec = json.loads((Path(os.environ[RUN_DIR_VAR]) / JOB_FILE).read_text(encoding="utf-8"))
    model = spec.pop("model")
    spec["checkpointing"] = Checkpointing(**spec["checkpointing"])
    fit(model, None, plan=str(Path(os.environ[RUN_DIR_VAR]) / "plan.json"), **spec)


if __name__ == "__main__":
    main()
