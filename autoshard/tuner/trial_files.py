"""The files a trial's run directory holds, named once for the tuner and its workers.

Kept apart from :mod:`autoshard.tuner.worker` so that the tuner does not import the module it runs as
``python -m autoshard.tuner.worker`` (runpy warns when ``-m`` finds its module already imported).
"""

from __future__ import annotations

PROGRESS_FILE = "progress.jsonl"
"""One line per optimizer step (step number and seconds), written by rank 0 as it goes."""
MEASUREMENT_FILE = "measurement.json"
"""Every step's metrics and the measured peak memory per rank, written by rank 0 at the end."""
TRIAL_FILE = "trial.json"
"""The model source, the plan's optimizer, steps, seed and the user's step functions, written by the tuner."""
