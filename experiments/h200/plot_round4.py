"""Figures of docs/results.md §4 (long responses, vLLM x DeepSpeed): reward and mismatch per step, fp16 vs bf16.

    python experiments/h200/plot_round4.py benchmarks/results/h200_round4 docs/figures/h200_round4.png
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

folder, out = Path(sys.argv[1]), Path(sys.argv[2])
panels = [("reward/mean", "training reward"), ("mismatch/abs_logp_diff_mean", "token mean |Δlogp|"),
          ("mismatch/seq_logratio_std", "std of ρ (sequence log-ratio)"), ("response/length_mean", "response tokens")]
fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
for run in sorted(p for p in folder.iterdir() if (p / "metrics.jsonl").is_file()):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for ax, (key, title) in zip(axes, panels):
        ax.plot([r["step"] for r in rows], [r[key] for r in rows], label=run.name)
        ax.set_title(title)
        ax.set_xlabel("step")
        if "mismatch" in key:
            ax.set_yscale("log")
axes[0].legend(fontsize=7)
fig.tight_layout()
fig.savefig(out, dpi=110)
print(f"wrote {out}")
