"""Lines a training process prints that the platform reads back: the only coupling between them.

Standard library only: `rankrun` (the per-rank wrapper) imports it on every start, and
training code imports it without loading anything of the platform.
"""

from __future__ import annotations

import re

RESUMED = "dtrain: resumed from step {step} ({path})"  # printed by dtrain.training.Checkpointer.resume
RESUMED_RE = re.compile(r"^dtrain: resumed from step (\d+) ")


def resumed_step(line: str) -> int | None:
    """The step a 'resumed' line names, or None for any other line."""
    m = RESUMED_RE.match(line)
    return int(m.group(1)) if m else None
