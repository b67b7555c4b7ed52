"""The mismatch instruments of RL runs, per arm and per dtype: where the sampler-trainer gap sits.

    python experiments/h200/instruments.py benchmarks/results/h200_round5 benchmarks/results/h200_round5/reference

Reads every arm of the given folders as ``arms_report.py`` does (``NAME.metrics.jsonl`` or
``NAME/metrics.jsonl``, NAME = algo-dtype-seed) and prints, as
markdown, the per-step metrics of docs/metrics.md averaged over each arm's steps: token |Δ log p|
by the sampler's probability μ of the token and by its position in the response, the slope of the
sequence log-ratio's size against response length, the trainer's self-gap, and the clipping that
precision alone caused (``phantom/…``, the first mini-batch before any update). Then the same
averaged over the arms of each dtype, and bf16 over fp16.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arms_report import load_arms  # noqa: E402  (a sibling script, not a package)

MU = ("0-0.1", "0.1-0.5", "0.5-0.9", "0.9-1")
POSITIONS = ("0-16", "16-64", "64-256", "256-1024")
COLUMNS = (
    *(f"mismatch/mu/{b}/abs_logp_diff_mean" for b in MU),
    *(f"mismatch/mu/{b}/token_frac" for b in MU),
    *(f"mismatch/position/{b}/abs_logp_diff_mean" for b in POSITIONS),
    "mismatch/seq_abs_logratio_slope",
    "precision/self_gap_abs_mean",
    "phantom/clip_frac",
    "phantom/is_clip_frac",
)
HEADER = ("\\|Δ\\| at μ " + " / ".join(MU), "share of tokens at μ " + " / ".join(MU),
          "\\|Δ\\| at positions " + " / ".join(POSITIONS), "\\|ρ\\| slope per token", "self-gap", "phantom clip (GRPO) / IS cap (PG)")


def arm_means(rows: list[dict]) -> dict[str, float]:
    """Each column's mean over the steps that logged it (absent columns are left out)."""
    rows = [r for r in rows if "mismatch/k3" in r]
    return {c: mean(r[c] for r in rows if c in r) for c in COLUMNS if any(c in r for r in rows)}


def dtype_of(name: str) -> str:
    match = re.search(r"(fp16|bf16|fp32)", name)
    return match.group(1) if match else "?"


def fmt(values: dict[str, float], keys, spec: str) -> str:
    return " / ".join(format(values[k], spec) if k in values else "–" for k in keys)


def row(name: str, m: dict[str, float]) -> str:
    phantom = fmt(m, ("phantom/clip_frac", "phantom/is_clip_frac"), ".1e")
    return (f"| {name} | {fmt(m, COLUMNS[0:4], '.1e')} | {fmt(m, COLUMNS[4:8], '.2f')} | {fmt(m, COLUMNS[8:12], '.1e')} | "
            f"{fmt(m, COLUMNS[12:13], '.1e')} | {fmt(m, COLUMNS[13:14], '.1e')} | {phantom} |")


def dtype_rows(folders: list[Path]) -> list[str]:
    """The table of the arms' means pooled by dtype, and bf16 over fp16."""
    by_dtype: dict[str, list[dict]] = defaultdict(list)
    for name, rows in load_arms(folders).items():
        by_dtype[dtype_of(name)].append(arm_means(rows))
    lines = ["| dtype (arms) | " + " | ".join(HEADER) + " |", "|---" * (len(HEADER) + 1) + "|"]
    pooled = {}
    for dtype, ms in sorted(by_dtype.items()):
        pooled[dtype] = {c: mean(m[c] for m in ms if c in m) for c in COLUMNS if any(c in m for m in ms)}
        lines.append(row(f"{dtype} ({len(ms)})", pooled[dtype]))
    if "bf16" in pooled and "fp16" in pooled:
        ratio = {c: pooled["bf16"][c] / pooled["fp16"][c] for c in COLUMNS
                 if c in pooled["bf16"] and pooled["fp16"].get(c)}
        lines.append(f"| bf16 / fp16 | {fmt(ratio, COLUMNS[0:4], '.1f')} | | {fmt(ratio, COLUMNS[8:12], '.1f')} | "
                     f"{fmt(ratio, COLUMNS[12:13], '.1f')} | {fmt(ratio, COLUMNS[13:14], '.1f')} | |")
    return lines


def main(folders: list[Path]) -> None:
    print("| arm | " + " | ".join(HEADER) + " |")
    print("|---" * (len(HEADER) + 1) + "|")
    for name, rows in load_arms(folders).items():
        print(row(name, arm_means(rows)))
    print()
    print("\n".join(dtype_rows(folders)))

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python experiments/h200/instruments.py FOLDER [FOLDER …] (folders of RL arms' metrics)")
    main([Path(a) for a in sys.argv[1:]])
