"""Figures of docs/results.md from the H200 RL runs (benchmarks/results/h200_rl/*/metrics.jsonl).

    python experiments/h200/plot_curves.py [RUNS_DIR] [FIG_DIR] [NAME]

Writes ``h200_rl_reward.png`` (training reward, fp16 vs bf16, per algorithm and learning rate;
thin lines are seeds, thick the seed mean, all smoothed over 10 steps) and
``h200_rl_mismatch.png`` (per-step |Δ| token mean and sequence log-ratio std of each rollout);
NAME (default ``rl``) replaces ``rl`` in both file names and is shown in the title.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
COLORS = {"fp16": "C1", "bf16": "C0"}


def load_runs(folder: Path) -> dict[tuple, dict[int, list[dict]]]:
    """(algo, lr, dtype) -> seed -> metric rows."""
    runs: dict[tuple, dict[int, list[dict]]] = defaultdict(dict)
    for path in sorted(folder.glob("rl-*/metrics.jsonl")):
        algo, dtype, lr, seed = re.match(r"rl-(\w+)-(fp16|bf16)-lr([\de.-]+)-seed(\d+)", path.parent.name).groups()
        runs[(algo, lr, dtype)][int(seed)] = [json.loads(line) for line in path.read_text().splitlines()]
    return runs


def smooth(values: np.ndarray, window: int = 10) -> np.ndarray:
    kernel = np.ones(window) / window
    padded = np.concatenate([np.full(window - 1, values[0]), values])
    return np.convolve(padded, kernel, mode="valid")


def main(runs_dir: Path, fig_dir: Path, name: str = "rl") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = load_runs(runs_dir)
    if not runs:
        sys.exit(f"error: {runs_dir} holds no rl-ALGO-DTYPE-lrLR-seedN/metrics.jsonl; name a folder of the H200 RL runs")
    algos = sorted({k[0] for k in runs}, key=["pg", "grpo"].index)
    lrs = sorted({k[1] for k in runs}, key=float)
    fig, axes = plt.subplots(len(lrs), len(algos), figsize=(5.5 * len(algos), 3.6 * len(lrs)), squeeze=False)
    for r, lr in enumerate(lrs):
        for c, algo in enumerate(algos):
            ax = axes[r][c]
            for dtype in ("fp16", "bf16"):
                seeds = runs.get((algo, lr, dtype), {})
                curves = [smooth(np.array([row["reward/mean"] for row in rows])) for rows in seeds.values()]
                if not curves:
                    continue
                steps = np.arange(1, len(curves[0]) + 1)
                for curve in curves if len(curves) > 1 else []:
                    ax.plot(steps, curve, color=COLORS[dtype], lw=0.6, alpha=0.4)
                ax.plot(steps, np.mean(curves, axis=0), color=COLORS[dtype], lw=2,
                        label=f"{dtype} ({len(curves)} seed{'s' if len(curves) > 1 else ''})")
            ax.set(title=f"{algo}, lr {lr}", xlabel="RL step", ylabel="training reward (10-step mean)", ylim=(0, 1))
            ax.legend(loc="upper left")
    suffix = "" if name == "rl" else f", {name}"
    fig.suptitle(f"SmolLM2-135M-Instruct on arithmetic (a+b, a,b ≤ 9{suffix}), H200: fp16 vs bf16", fontsize=11)
    fig.tight_layout()
    fig.savefig(fig_dir / f"h200_{name}_reward.png", dpi=110)
    plt.close(fig)

    keys = [("mismatch/abs_logp_diff_mean", "token mean |Δ|"),
            ("mismatch/seq_logratio_std", "std of ρ over sequences")]
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 3.6), squeeze=False)
    for ax, (key, label) in zip(axes[0], keys):
        for algo, style in zip(algos, ("-", "--")):
            for dtype in ("fp16", "bf16"):
                rows = runs.get((algo, lrs[0], dtype), {}).get(0)
                if rows:
                    ax.plot([row["step"] for row in rows], smooth(np.array([row[key] for row in rows])),
                            style, color=COLORS[dtype], label=f"{algo} {dtype}")
        ax.set(yscale="log", xlabel="RL step", ylabel=label, title=f"{label} per rollout (lr {lrs[0]}, seed 0)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(fig_dir / f"h200_{name}_mismatch.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    args = sys.argv[1:]
    if {"-h", "--help"} & set(args):
        print(__doc__.strip())
        sys.exit(0)
    main(Path(args[0]) if args else ROOT / "benchmarks/results/h200_rl",
         Path(args[1]) if len(args) > 1 else ROOT / "docs/figures",
         args[2] if len(args) > 2 else "rl")
