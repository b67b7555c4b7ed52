"""Figures of docs/results.md, "The paper's pair: IS-PG and GRPO-TIS beside GRPO (long answers)".

    python experiments/h200/plot_round5.py [RESULTS_DIR] [FIG_DIR]

Reads the ten arms NAME.metrics.jsonl of RESULTS_DIR (default benchmarks/results/h200_round5: IS-PG and
GRPO-TIS) and of RESULTS_DIR/reference (the GRPO arms), NAME = ALGO-DTYPE-sSEED, and writes to FIG_DIR
(default docs/figures):

- ``h200_round5_reward.png``: training reward (``reward/mean``), mean of the last 10 steps, per arm;
- ``h200_round5_mismatch.png``: token mean |Δlogp| (``mismatch/abs_logp_diff_mean``) and sequence
  KL[μ‖π] (``mismatch/seq_kl``) per step, 10-step means, log scale, per arm.

Colour by dtype (seed 1 lighter), line style by algorithm.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
COLORS = {("fp16", 0): "#d95f02", ("fp16", 1): "#fdae6b", ("bf16", 0): "#1f5fa8", ("bf16", 1): "#7fb2e5",
          ("fp32", 0): "#2ca02c"}
STYLES = {"pg": "-", "grpo": "--", "grpo-tis": ":"}
LABELS = {"pg": "IS-PG", "grpo": "GRPO", "grpo-tis": "GRPO-TIS"}


def load_arms(folder: Path) -> list[tuple[str, str, int, list[dict]]]:
    """(algo, dtype, seed, metric rows with a reward) per arm, in legend order."""
    arms = []
    for path in [*folder.glob("*.metrics.jsonl"), *(folder / "reference").glob("*.metrics.jsonl")]:
        algo, dtype, seed = re.fullmatch(r"(.+)-(fp16|bf16|fp32)-s(\d+)\.metrics\.jsonl", path.name).groups()
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        arms.append((algo, dtype, int(seed), [r for r in rows if "reward/mean" in r]))
    return sorted(arms, key=lambda a: (list(STYLES).index(a[0]), ["fp16", "bf16", "fp32"].index(a[1]), a[2]))


def trailing_mean(values: list[float], window: int = 10) -> np.ndarray:
    """Mean of the last `window` values at each step (fewer over the first steps)."""
    sums = np.cumsum(np.concatenate([[0.0], values]))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def plot(ax, arms, key: str) -> None:
    for algo, dtype, seed, rows in arms:
        ax.plot([r["step"] for r in rows], trailing_mean([r[key] for r in rows]), STYLES[algo],
                color=COLORS[(dtype, seed)], lw=1.4, label=f"{LABELS[algo]} {dtype} s{seed} ({len(rows)} steps)")


def main(results_dir: Path, fig_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = load_arms(results_dir)
    title = "SmolLM2-135M-Instruct, counting, ≤ 768 tokens, vLLM × DeepSpeed, H200"

    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    plot(ax, arms, "reward/mean")
    ax.axhline(0.9, color="grey", lw=0.6)
    ax.set(xlabel="RL step", ylabel="training reward (mean of the last 10 steps)", ylim=(0, 1.02), xlim=(0, 201),
           title=title)
    ax.legend(fontsize=7.5, loc="lower right", ncol=2)
    fig.tight_layout()
    fig.savefig(fig_dir / "h200_round5_reward.png", dpi=110)
    plt.close(fig)

    keys = [("mismatch/abs_logp_diff_mean", "token mean |Δlogp|"), ("mismatch/seq_kl", "sequence KL[μ‖π]")]
    fig, axes = plt.subplots(1, len(keys), figsize=(12, 5.2))
    for ax, (key, label) in zip(axes, keys):
        plot(ax, arms, key)
        ax.set(yscale="log", xlabel="RL step", ylabel=f"{label} (mean of the last 10 steps)", xlim=(0, 201),
               title=f"{label} per rollout")
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="lower center", ncol=5)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(fig_dir / "h200_round5_mismatch.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(Path(args[0]) if args else ROOT / "benchmarks/results/h200_round5",
         Path(args[1]) if len(args) > 1 else ROOT / "docs/figures")
