"""Tables of the RL arms in this folder and of the reference arms (NAME.metrics.jsonl in each).

    python3 summarize.py [REFERENCE_FOLDER]    # default: reference/ beside this script
"""

import json
import sys
from pathlib import Path
from statistics import mean

WINDOWS = (1, 21, 41, 61, 91, 141, 191)
EVALS = (50, 100, 150, 200)


def load(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fmt(x, spec):
    return "–" if x is None else format(x, spec)


def row(name, rows):
    train = [r for r in rows if "reward/mean" in r]
    reward = {r["step"]: r["reward/mean"] for r in train}
    steps = max(reward)

    def window(start):  # mean reward over steps start .. start+9, when all ten were logged
        got = [reward[s] for s in range(start, start + 10) if s in reward]
        return mean(got) if len(got) == 10 else None

    first = next((s for s in range(1, steps - 8) if (w := window(s)) is not None and w >= 0.9), None)
    elapsed = [r["time/elapsed_s"] for r in train]
    s_per_step = (elapsed[-1] - elapsed[0]) / (len(elapsed) - 1)

    def avg(key):
        vals = [r[key] for r in train if key in r]
        return mean(vals) if vals else None

    evals = {}
    for r in rows:
        acc = [v for k, v in r.items() if k.startswith("eval/counting/avg@")]
        if acc:
            evals[r["step"]] = acc[0]
    skipped = max((r.get("train/skipped_steps", 0) for r in train), default=0)
    scales = [r["train/loss_scale"] for r in train if "train/loss_scale" in r]
    scale = f"{min(scales):g}" if min(scales) == max(scales) else f"{min(scales):g}–{max(scales):g}"
    return (f"| {name} | {steps} | {s_per_step:.1f} | {' '.join(fmt(window(s), '.2f') for s in WINDOWS)} | "
            f"{fmt(first, 'd')} | {fmt(avg('mismatch/abs_logp_diff_mean'), '.1e')} | {fmt(avg('mismatch/k3'), '.1e')} | "
            f"{fmt(avg('mismatch/seq_kl'), '.1e')} | {' '.join(fmt(evals.get(s), '.2f') for s in EVALS)} | "
            f"{skipped:.0f} / {scale} |")


def table(folder):
    print("| arm | steps | s/step (shared) | reward, 10-step means at steps 1 / 21 / 41 / 61 / 91 / 141 / 191 | "
          "first step where the 10-step mean ≥ 0.9 | token mean \\|Δlogp\\| | k3 | seq KL | "
          "held-out eval avg@k at 50 / 100 / 150 / 200 | skipped fp16 steps / loss scale |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in sorted(folder.glob("*.metrics.jsonl")):
        rows = load(path)
        if any("reward/mean" in r and r.get("step", 0) >= 10 for r in rows):
            print(row(path.name.removesuffix(".metrics.jsonl"), rows))


here = Path(__file__).resolve().parent
table(here)
print()
table(Path(sys.argv[1]) if len(sys.argv) > 1 else here / "reference")
