"""Where a run's numbers go: the console, ``metrics.jsonl`` and wandb (offline by default)."""

from __future__ import annotations

import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Optional, TextIO

WANDB_RUN_FOLDER = re.compile(r"^(?:offline-)?run-(\d{8}_\d{6})-(.+)$")

CONSOLE_KEYS = [
    ("reward/mean", "reward", "{:.3f}"),
    ("mismatch/abs_logp_diff_mean", "|Δlogp|", "{:.2e}"),
    ("mismatch/k3", "k3", "{:.1e}"),
    ("loss/policy", "loss", "{:+.3f}"),
    ("train/grad_norm", "|g|", "{:.2f}"),
    ("train/loss_scale", "scale", "{:.0f}"),
    ("response/length_mean", "len", "{:.1f}"),
]


class RunLog:
    def __init__(self, output_dir: Path, config: dict, *, wandb_mode: str, project: str, run_name: str,
                 resume_step: Optional[int] = None, console: Optional[TextIO] = None):
        """``resume_step``: continue a run whose checkpoint holds this many steps (rows past it are dropped).
        ``console``: where the step lines and the closing wandb line go (stdout when None)."""
        resume = resume_step is not None
        self.console = console
        self.path = output_dir / "metrics.jsonl"
        self.history: list[dict] = kept_rows(self.path, resume_step) if resume else []
        # Rows written after the checkpoint belong to steps that will run again: cut them, atomically.
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(_record_line(row) for row in self.history))
        tmp.replace(self.path)
        self.file = self.path.open("a")
        # Elapsed time continues from the checkpoint's step (on the clock the step loop times its parts with).
        self.start = time.perf_counter() - (float(self.history[-1]["time/elapsed_s"]) if self.history else 0.0)
        # The estimate of the time left runs on this process's own steps (a resume's earlier part ran elsewhere).
        self.began, self.first_step = time.perf_counter(), resume_step or 0
        self.wandb = None
        if wandb_mode != "disabled":
            try:
                import wandb
            except ImportError:
                self.note("wandb is not installed; metrics go to metrics.jsonl only (pip install wandb)")
            else:
                previous = previous_wandb_id(output_dir) if resume else None
                self.wandb = wandb.init(
                    project=project, name=run_name, dir=str(output_dir), mode=wandb_mode, config=config,
                    resume_from=rewind_point(previous, resume_step) if previous else None,
                    # No banner and no closing history dump: close() says in one line where the run went.
                    settings=wandb.Settings(silent=True),
                )

    def note(self, message: str) -> None:
        print(message, file=self.console or sys.stderr, flush=True)

    def log(self, metrics: dict, histograms: Optional[dict] = None, *, total_steps: int, echo: bool = True,
            at: Optional[float] = None) -> None:
        """Write one record; ``at``: the ``time.perf_counter()`` moment it stands for (now when None)."""
        elapsed = (time.perf_counter() if at is None else at) - self.start
        metrics = {"step": metrics["step"], "time/elapsed_s": round(elapsed, 3), **metrics}
        self.history.append(metrics)
        self.file.write(_record_line(metrics))
        self.file.flush()
        if self.wandb is not None:
            import wandb

            extra = {k: wandb.Histogram(v) for k, v in (histograms or {}).items() if len(v)}
            self.wandb.log({**metrics, **extra}, step=metrics["step"])
        if echo:
            done = metrics["step"] - self.first_step
            per_step = ((time.perf_counter() if at is None else at) - self.began) / done if done > 0 else None
            self.say(step_line(metrics, total_steps, per_step))

    def say(self, line: str) -> None:
        print(line, file=self.console or sys.stdout, flush=True)

    def close(self) -> None:
        self.file.close()
        if self.wandb is not None:
            run = self.wandb
            run.finish()
            if run.settings.mode == "offline":
                self.say(f"wandb: offline run in {run.settings.sync_dir} (upload: wandb sync {run.settings.sync_dir})")
            else:
                self.say(f"wandb: {run.url}")


def step_line(metrics: dict, total_steps: int, seconds_per_step: Optional[float] = None) -> str:
    """The console's line for one step record (both backends); before the last step, the time left at
    ``seconds_per_step``."""
    parts = [f"step {metrics['step']:>4}/{total_steps}"]
    parts += [f"{label} {fmt.format(metrics[k])}" for k, label, fmt in CONSOLE_KEYS if k in metrics]
    if seconds_per_step is not None and metrics["step"] < total_steps:
        parts.append(f"eta {duration(seconds_per_step * (total_steps - metrics['step']))}")
    return "  ".join(parts)


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``: a time left, to the unit that matters."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def kept_rows(path: Path, last_step: int) -> list[dict]:
    """The rows of ``path`` up to ``last_step`` (a torn last line from a crash is dropped)."""
    if not path.is_file():
        return []
    return [row for row in read_metrics(path) if row.get("step", 0) <= last_step]


def read_metrics(path: Path) -> list[dict]:
    """The rows of a metrics file as :meth:`RunLog.log` had them: a torn line (a run still writing, or killed) is
    left out, and the non-finite floats written as "nan", "inf", "-inf" are floats again."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line, object_hook=_from_json))
        except json.JSONDecodeError:
            continue
    return rows


def rewind_point(run_id: str, resume_step: int) -> str:
    """wandb's ``resume_from`` for the same run, rewound to the checkpoint as metrics.jsonl is.

    A rewind keeps the history up to ``_step`` and logs on from the step after it, so the
    rows of the steps the resumed run repeats replace the ones logged after the checkpoint
    (a plain resume keeps those and drops the repeats, as their steps are not past the last).
    """
    return f"{run_id}?_step={resume_step}"


def previous_wandb_id(output_dir: Path) -> Optional[str]:
    """The id of the wandb run an earlier part of this run wrote under ``output_dir/wandb``, if any.

    wandb names its folders ``[offline-]run-<date>_<time>-<id>``, plus ``-<n>`` for a part that starts
    in the same second as an earlier one, so the id is read from the run's log inside,
    ``run-<id>.wandb``; resuming that id continues the same wandb run.
    """
    parts = []
    for folder in (output_dir / "wandb").glob("*run-*"):
        named = WANDB_RUN_FOLDER.match(folder.name)
        for log in folder.glob("run-*.wandb") if named else ():
            run_id = log.name[len("run-"):-len(".wandb")]
            same = re.fullmatch(re.escape(run_id) + r"(?:-(\d+))?", named.group(2))
            if same:
                parts.append((named.group(1), int(same.group(1) or 0), run_id))
    return max(parts)[2] if parts else None


def _record_line(row: dict) -> str:
    """One line of metrics.jsonl: standard JSON, the non-finite floats as the strings "nan", "inf", "-inf"."""
    return json.dumps({k: _jsonable(v) for k, v in row.items()}) + "\n"


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


_NON_FINITE = {str(v): v for v in (math.nan, math.inf, -math.inf)}


def _from_json(row: dict) -> dict:
    """A row read back: the strings :func:`_jsonable` made of non-finite floats are floats again."""
    return {k: _NON_FINITE.get(v, v) if isinstance(v, str) else v for k, v in row.items()}
