"""The figures of one run computed from its metrics rows, and of a group of seeds (their mean and range)."""

from __future__ import annotations

from statistics import mean
from typing import Optional

from precision_oat.compare.loading import Group, RunRecord

# Means over all training steps, by the name the table gives them.
MISMATCH_KEYS = {"abs_logp_diff": "mismatch/abs_logp_diff_mean", "k3": "mismatch/k3", "seq_kl": "mismatch/seq_kl"}
WINDOW = 10


def window_means(train: list[dict], width: int = WINDOW) -> dict[int, Optional[float]]:
    """Start step s → mean reward over steps s … s+width−1, for every s whose window fits in the run
    (None where a step of it is missing)."""
    reward = {r["step"]: r["reward/mean"] for r in train}
    last = max(reward)

    def window(start: int) -> Optional[float]:
        got = [reward[s] for s in range(start, start + width) if s in reward]
        return mean(got) if len(got) == width else None

    return {s: window(s) for s in range(1, last - width + 2)}


def best_window(means: dict[int, Optional[float]]) -> tuple[Optional[float], int]:
    """The highest window mean and the step it starts at (the earliest such)."""
    best = max(means, key=lambda s: means[s] or 0)
    return means[best], best


def mean_of(train: list[dict], key: str, part: slice = slice(None)) -> Optional[float]:
    values = [r[key] for r in train[part] if key in r]
    return mean(values) if values else None


def seconds_per_step(train: list[dict]) -> Optional[float]:
    """(last − first ``time/elapsed_s``) / (steps − 1): the first step's set-up is left out (one step: its time);
    None for rows without the time (a metrics file not written by a run of this library)."""
    if not all("time/elapsed_s" in r for r in (train[0], train[-1])):
        return None
    if len(train) == 1:
        return train[0]["time/elapsed_s"]
    return (train[-1]["time/elapsed_s"] - train[0]["time/elapsed_s"]) / (len(train) - 1)


def held_out_reward(rows: list[dict]) -> Optional[tuple[int, float]]:
    """(step, held-out reward) of the run's last evaluation, None when it never evaluated a reward.

    The reward is ``eval/average/reward`` (the mean over benchmarks), else the one benchmark's ``eval/<name>/reward``.
    """
    for row in reversed(rows):
        keys = sorted((k != "eval/average/reward", k) for k in row if k.startswith("eval/") and k.endswith("/reward"))
        if keys:
            return row["step"], row[keys[0][1]]
    return None


def window_width(runs: list[RunRecord], width: int = WINDOW) -> int:
    """``width``, or the training steps of the shortest run when that is fewer."""
    return min([width, *(len(r.train) for r in runs)])


def run_stats(run: RunRecord, width: int) -> dict:
    """One run's row: reward over its first, last and best ``width`` steps, the mismatch means, and the rest."""
    train = run.train
    best, best_start = best_window(window_means(train, width))
    held_out = held_out_reward(run.rows)
    return {
        "steps": train[-1]["step"],
        "reward_first": mean(r["reward/mean"] for r in train[:width]),
        "reward_last": mean(r["reward/mean"] for r in train[-width:]),
        "reward_best": best,
        "reward_best_from": best_start,
        "held_out_step": held_out[0] if held_out else None,
        "held_out_reward": held_out[1] if held_out else None,
        **{name: mean_of(train, key) for name, key in MISMATCH_KEYS.items()},
        "skipped_steps": max(r.get("train/skipped_steps", 0.0) for r in train),
        "s_per_step": seconds_per_step(train),
    }


def spread(values: list[Optional[float]]) -> Optional[tuple[float, float, float]]:
    """(mean, min, max) of the values that are there; None when none is."""
    got = [v for v in values if v is not None]
    return (mean(got), min(got), max(got)) if got else None


def group_stats(group: Group, width: int) -> dict:
    """Each figure of :func:`run_stats` over the group's seeds as (mean, min, max), and the seeds' own rows."""
    rows = [run_stats(run, width) for run in group.runs]
    return {"runs": rows, **{k: spread([r[k] for r in rows]) for k in rows[0] if k not in ("reward_best_from",)}}
