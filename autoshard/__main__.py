"""``python -m autoshard`` runs the CLI."""

import sys

from autoshard.cli import main

sys.exit(main())
