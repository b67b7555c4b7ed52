"""``--mismatch-alarm KEY>VALUE``: a logged key watched against a threshold at every step.

An excursion is the run of consecutive steps whose value is past the threshold. Each step logs
``alarm/KEY`` (1 inside an excursion, 0 outside); ``--mismatch-alarm-action warn`` prints one
line when an excursion begins (not at every step it lasts), ``stop`` ends the run at that step
after its checkpoint, with exit status :data:`ALARM_EXIT_STATUS`.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from precision_oat.args import ALARM_SYNTAX
from precision_oat.errors import UserError
from precision_oat.precision.mismatch_metrics import mismatch_metrics

# A stop the user asked for, told apart from success (0), a failure (1) and a signal (128 + its number).
ALARM_EXIT_STATUS = 3

# The keys every step of the local backend logs, whatever the algorithm (docs/metrics.md explains each).
ALARM_KEYS = (
    *mismatch_metrics(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1)),  # its keys (no tokens: all 0)
    "mismatch/seq_abs_logratio_slope",
    "ratio/total_abs_mean", "ratio/policy_change_abs_mean", "ratio/precision_gap_abs_mean",
    "precision/self_gap_abs_mean", "precision/self_gap_abs_max",
    "reward/mean", "reward/std", "response/length_mean", "response/truncated_frac",
    "loss/policy", "train/grad_norm", "train/loss_scale", "train/skipped_this_step", "train/advantage_abs_mean",
)


@dataclass(frozen=True)
class Alarm:
    key: str
    # True for KEY>VALUE, False for KEY<VALUE.
    above: bool
    threshold: float

    def __str__(self) -> str:
        return f"{self.key}{'>' if self.above else '<'}{self.threshold:g}"

    def crossed(self, value: float) -> bool:
        """Past the threshold; a NaN (a step that blew up) is past every threshold."""
        return math.isnan(value) or (value > self.threshold if self.above else value < self.threshold)


def parse_alarms(specs: Sequence[str]) -> list[Alarm]:
    """The alarms of ``--mismatch-alarm``; a key no step logs is refused, naming the closest ones."""
    alarms = []
    for spec in specs:
        match = ALARM_SYNTAX.fullmatch(spec)
        if match is None:  # Args refuses it first; a hand-built LogArgs may not have
            raise UserError(f"--mismatch-alarm {spec!r}: must be KEY>VALUE or KEY<VALUE, e.g. mismatch/k3>1e-3")
        key = match["key"]
        if key not in ALARM_KEYS:
            close = difflib.get_close_matches(key, ALARM_KEYS, n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}?" if close else "docs/runs.md#mismatch-alarms lists the keys"
            raise UserError(f"--mismatch-alarm {spec!r}: no step logs {key}; {hint}")
        alarms.append(Alarm(key, match["op"] == ">", float(match["value"])))
    return alarms


class AlarmWatch:
    """Which alarms are in an excursion; :meth:`check` marks a step's metrics and returns the alarms it set off.

    ``inside``: the excursions a checkpoint saved (:attr:`inside`), so a resumed run does not announce again one
    that began before it; an alarm it does not name starts outside.
    """

    def __init__(self, alarms: Sequence[Alarm], inside: Optional[dict[str, bool]] = None):
        self.alarms = list(alarms)
        inside = inside or {}
        self.inside = {str(a): inside.get(str(a), False) for a in self.alarms}

    def check(self, metrics: dict) -> list[Alarm]:
        started = []
        for alarm in self.alarms:
            value = metrics.get(alarm.key)
            crossed = value is not None and alarm.crossed(float(value))
            # Two alarms on one key (a band) share its alarm/ key: 1 while either is past its threshold.
            name = f"alarm/{alarm.key}"
            metrics[name] = max(metrics.get(name, 0.0), float(crossed))
            if crossed and not self.inside[str(alarm)]:
                started.append(alarm)
            self.inside[str(alarm)] = crossed
        return started


def alarm_line(alarm: Alarm, metrics: dict, step: int) -> str:
    """One line: the alarm, the value that crossed it and the step."""
    return f"mismatch alarm {alarm}: {float(metrics[alarm.key]):.4g} at step {step}"
