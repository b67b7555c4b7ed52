"""A correction that drops most of a step is told, whether or not an alarm was asked for.

A mask whose band is narrower than the run's sampler–trainer gap trains on the little it keeps, or
on nothing, and the reward stalls without an error: the geometric mask at its default band
[0.99, 1.01] beside FP8 rollouts dropped 91% of the answers of a run (docs/results.md §4f). Each
correction logs the share it dropped as ``mismatch/NAME_mask_frac``; a step where that share is above
:data:`STARVING` begins an excursion, and the loop prints one warning for it.
"""

from __future__ import annotations

import re

STARVING = 0.5
DROPPED = re.compile(r"mismatch/(?P<name>[a-z]+)_mask_frac")
# The flags that set each mask's band, by the NAME of its key, and where the two banded masks find one that fits.
LAB_BAND = "; the mismatch lab on this sampler–trainer pair prints a band that keeps 98% of its {}"
BAND_FLAGS = {
    "icepop": "--icepop-low/--icepop-high" + LAB_BAND.format("tokens"),
    "geo": "--geo-mask-low/--geo-mask-high" + LAB_BAND.format("answers"),
    "divergence": "--divergence-threshold",
    "mis": "--correction-cap",
}


class MaskWatch:
    """:meth:`check` returns a warning for each mask whose dropped share has just risen above :data:`STARVING`."""

    def __init__(self) -> None:
        self.starving: set[str] = set()

    def check(self, metrics: dict, step: int) -> list[str]:
        lines = []
        for key, value in metrics.items():
            match = DROPPED.fullmatch(key)
            if match is None:
                continue
            if value <= STARVING:
                self.starving.discard(key)
            elif key not in self.starving:
                self.starving.add(key)
                flags = BAND_FLAGS.get(match["name"], "its flags")
                lines.append(f"warning: the correction dropped {value:.0%} of step {step}'s batch ({key}): its band "
                             f"is narrower than this run's sampler–trainer gap, so the update learns from little or "
                             f"nothing; widen it ({flags}) or choose another correction (once per excursion)")
        return lines
