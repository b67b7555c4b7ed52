"""Oat's metrics into the run's ``metrics.jsonl`` (and wandb), same format as the local backend.

Oat's learner logs on rank 0 through ``self._wandb.log(dict)`` and closes with
``self._wandb.finish()``; :class:`OatRunLog` stands in that place. The learner's output goes
to ``oat.log`` with the rest of Oat's (see :mod:`~precision_oat.backends.oat.console`); its
console lines (step lines, the wandb line) go to ``LEARNER_CONSOLE``, which the launcher
copies to its console as they come.
"""

from __future__ import annotations

from pathlib import Path

from precision_oat.presets import to_values
from precision_oat.runs.log import RunLog

# The learner's console lines, in the output folder, for the launcher to print.
LEARNER_CONSOLE = "learner_console.txt"


class OatRunLog:
    def __init__(self, args):
        source = args.source
        self.total_steps = source.train.steps
        self.log_every = source.log.log_every
        out = Path(args.output_dir)
        # Line-buffered: each line reaches the file, and the launcher, when it is written.
        self.console = (out / LEARNER_CONSOLE).open("a", buffering=1, encoding="utf-8")
        self.run_log = RunLog(
            out, to_values(source), wandb_mode=source.log.wandb_mode, project=source.log.wandb_project,
            run_name=source.log.run_name or out.name, console=self.console,
        )
        self.steps_logged: set[int] = set()
        self.evals_logged: set[int] = set()

    def log(self, logs: dict) -> None:
        has_eval = any(k.startswith("eval/") for k in logs)
        round_ = logs.get("train/learning_round")
        # Oat logs once before any training and repeats the last step's numbers when it closes.
        if round_ is None and not has_eval:
            return
        step = int(round(round_)) if round_ is not None else 0
        if step in self.steps_logged and (not has_eval or step in self.evals_logged):
            return
        self.steps_logged.add(step)
        if has_eval:
            self.evals_logged.add(step)
        metrics = {"step": step, **{k: v for k, v in logs.items() if k != "train/learning_round"}}
        # A line per training step, as the local backend prints; Oat logs an evaluation as a row of its own.
        echo = "loss/policy" in metrics and (step % self.log_every == 0 or step == self.total_steps)
        self.run_log.log(metrics, total_steps=self.total_steps, echo=echo)

    def finish(self) -> None:
        self.run_log.close()
        self.console.close()
