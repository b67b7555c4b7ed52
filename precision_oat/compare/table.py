"""The comparison as text: a markdown table (one row per group of seeds) and CSV (one row per run)."""

from __future__ import annotations

import csv
import io
from typing import Optional

from precision_oat.compare.loading import Group
from precision_oat.compare.stats import WINDOW, group_stats, run_stats

# Table column → the figure it shows and its format.
FIGURES = [("reward_first", ".3f"), ("reward_last", ".3f"), ("reward_best", ".3f"), ("held_out_reward", ".3f"),
           ("abs_logp_diff", ".2e"), ("k3", ".2e"), ("seq_kl", ".2e"), ("skipped_steps", ".0f"), ("s_per_step", ".3g")]
CSV_COLUMNS = ["run", "group", "dtype", "algorithm", "correction", "seed", "steps", "reward_first", "reward_last",
               "reward_best", "reward_best_from", "held_out_step", "held_out_reward", "abs_logp_diff", "k3", "seq_kl",
               "skipped_steps", "s_per_step", "window"]


def cell(figure: Optional[tuple[float, float, float]], spec: str) -> str:
    """A group's figure: its mean over the seeds, and their range when they differ ("–" when no run has it)."""
    if figure is None:
        return "–"
    average, low, high = figure
    shown = format(average, spec)
    return shown if format(low, spec) == format(high, spec) else f"{shown} ({format(low, spec)}–{format(high, spec)})"


def header(width: int, window: int) -> list[str]:
    """The columns; ``width`` is the reward windows' length, ``window`` the one asked for (more when a run is shorter)."""
    short = "" if width == window else f" (the shortest run has {width} steps, fewer than {window})"
    return ["run", "dtype", "algorithm", "correction", "seeds", "steps", f"reward, first {width}-step mean{short}",
            f"reward, last {width}-step mean", f"reward, best {width}-step mean", "held-out reward, last evaluation",
            "token mean \\|Δlogp\\|", "k3", "seq KL", "skipped steps", "s/step"]


def markdown(groups: list[Group], width: int, window: int = WINDOW) -> list[str]:
    """The table's lines: one row per group; a figure over several seeds is their mean (min–max)."""
    head = header(width, window)
    lines = [f"| {' | '.join(head)} |", "|---" * len(head) + "|"]
    for group in groups:
        stats = group_stats(group, width)
        first = group.runs[0]
        steps = sorted({s["steps"] for s in stats["runs"]})
        row = [group.label, first.dtype, first.algo, first.correction,
               ", ".join(map(str, group.seeds)) or "–",
               str(steps[0]) if len(steps) == 1 else f"{steps[0]}–{steps[-1]}",
               *(cell(stats[name], spec) for name, spec in FIGURES)]
        lines.append(f"| {' | '.join(row)} |")
    return lines


def csv_text(groups: list[Group], width: int) -> str:
    """One row per run, with its group's label and the window its reward figures use."""
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for group in groups:
        for run in group.runs:
            writer.writerow({"run": run.name, "group": group.label, "dtype": run.dtype, "algorithm": run.algo,
                             "correction": run.correction, "seed": run.seed, "window": width,
                             **run_stats(run, width)})
    return out.getvalue()
