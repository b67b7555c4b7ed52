"""A static loss scale whose gradients overflow is told, since it never shrinks to end the overflows.

Under ``--loss-scaling static`` a step whose scaled gradients reach inf/NaN is skipped, as under
dynamic scaling, but the scale stays: a scale too large for the run's gradients skips every step
that reaches it, and the run ends with few or none applied. A skipped step after an applied one (or
the run's first step, skipped) begins an excursion, and the loop prints one warning for it.
"""

from __future__ import annotations


class OverflowWatch:
    """:meth:`check` returns a warning when a step skipped at a static loss scale follows one that was not."""

    def __init__(self, static: bool):
        self.static = static
        self.inside = False

    def check(self, metrics: dict, step: int) -> list[str]:
        skipped = self.static and metrics.get("train/skipped_this_step", 0.0) > 0
        began, self.inside = skipped and not self.inside, skipped
        if not began:
            return []
        return [f"warning: step {step}'s gradients overflowed (inf/NaN) at the static loss scale "
                f"{metrics.get('train/loss_scale', 1.0):g}, so its optimiser step was skipped; a static scale never "
                "shrinks: lower --initial-loss-scale, or use --loss-scaling dynamic (once per excursion)"]
