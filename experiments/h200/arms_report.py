"""Table and figures of RL arms: one arm per NAME.metrics.jsonl or NAME/metrics.jsonl, NAME = ALGO-DTYPE-REST
(pg-fp16-s0, grpo-tis-bf16-s1).

    python experiments/h200/arms_report.py FOLDER [FOLDER ...] [--figures PREFIX] [--threshold 0.9]

Prints a markdown row per arm of the folders (arms with fewer than 10 training steps are left out):

    steps         the last step the arm logged
    s/step        (last − first ``time/elapsed_s``) / (steps − 1), evaluations included; arms that
                  shared the GPU are slower than one alone
    reward        mean training reward over steps s … s+9 at s = 1, 21, 41, 61, 91, 141, 191, … ("–":
                  not all ten steps ran)
    first step    the first s whose 10-step mean is ≥ --threshold
    best          the highest 10-step mean and the s it starts at (how far an arm got that never reached it)
    mismatch      ``mismatch/abs_logp_diff_mean``, ``mismatch/k3``, ``mismatch/seq_kl``: means over all
                  steps, and the token |Δlogp| mean over the first and the last 20 steps
    held-out      ``eval/counting/avg@k`` at every evaluation step of any arm, and where an arm logged it,
                  the held-out reward ``eval/counting/reward`` in a column of its own
    skipped       ``train/skipped_steps`` at the end / the range of ``train/loss_scale`` (1 for bf16, fp32)

``arm_stats`` also gives ``weights``: the range of the per-step mean sequence weight π/μ
(``loss/is_weight_mean``, IS-PG), None where it was not logged.

With ``--figures PREFIX``: PREFIX_reward.png (training reward, mean of the last 10 steps) and
PREFIX_mismatch.png (token |Δlogp| and sequence KL per step, 10-step means, log scale); colour by
dtype, line style by algorithm.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from statistics import mean

WINDOW_STARTS = (1, 21, 41, 61, 91, 141, 191, 241, 291)
NAME = re.compile(r"(?P<algo>.+?)-(?P<dtype>fp16|bf16|fp32)-(?P<rest>.+)")
LABELS = {"pg": "IS-PG", "grpo": "GRPO", "grpo-tis": "GRPO-TIS"}
STYLES = {"pg": "-", "grpo": "--", "grpo-tis": ":"}
SHADES = {"fp16": ("#d95f02", "#fdae6b", "#a63603"), "bf16": ("#1f5fa8", "#7fb2e5", "#08306b"),
          "fp32": ("#2ca02c", "#98df8a", "#00441b")}


def load_arms(folders: list[Path]) -> dict[str, list[dict]]:
    """NAME → the arm's training rows (with a reward) and evaluation rows, in step order; sorted by NAME."""
    arms = {}
    for folder in folders:
        found = {p.name.removesuffix(".metrics.jsonl"): p for p in folder.glob("*.metrics.jsonl")}
        found.update({p.parent.name: p for p in folder.glob("*/metrics.jsonl")})  # run folders as a run writes them
        for name, path in found.items():
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if sum("reward/mean" in r for r in rows) >= 10:
                arms[name] = rows
    return dict(sorted(arms.items()))


def arm_stats(rows: list[dict], threshold: float = 0.9) -> dict:
    """The figures of one arm's row (see the module docstring)."""
    train = [r for r in rows if "reward/mean" in r]
    reward = {r["step"]: r["reward/mean"] for r in train}
    steps = max(reward)

    def window(start: int):
        got = [reward[s] for s in range(start, start + 10) if s in reward]
        return mean(got) if len(got) == 10 else None

    def avg(key: str, part=slice(None)):
        values = [r[key] for r in train[part] if key in r]
        return mean(values) if values else None

    scales = [r["train/loss_scale"] for r in train if "train/loss_scale" in r] or [1.0]
    weights = [r["loss/is_weight_mean"] for r in train if "loss/is_weight_mean" in r]
    means = {s: window(s) for s in range(1, steps - 8)}  # every s whose window fits in the run
    best = max(means, key=lambda s: means[s] or 0)
    return {
        "steps": steps,
        "s_per_step": (train[-1]["time/elapsed_s"] - train[0]["time/elapsed_s"]) / (len(train) - 1),
        "windows": {s: window(s) for s in WINDOW_STARTS},
        "first_step": next((s for s, m in means.items() if (m or 0) >= threshold), None),
        "best": (means[best], best),
        "abs_logp_diff": avg("mismatch/abs_logp_diff_mean"),
        "k3": avg("mismatch/k3"),
        "seq_kl": avg("mismatch/seq_kl"),
        "abs_logp_diff_first_20": avg("mismatch/abs_logp_diff_mean", slice(0, 20)),
        "abs_logp_diff_last_20": avg("mismatch/abs_logp_diff_mean", slice(-20, None)),
        "held_out": {r["step"]: v for r in rows for k, v in r.items() if k.startswith("eval/counting/avg@")},
        "held_out_reward": {r["step"]: r["eval/counting/reward"] for r in rows if "eval/counting/reward" in r},
        "skipped": max(r.get("train/skipped_steps", 0) for r in train),
        "loss_scale": (min(scales), max(scales)),
        "weights": (min(weights), max(weights)) if weights else None,
    }


def _fmt(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def table(arms: dict[str, list[dict]], threshold: float = 0.9) -> list[str]:
    stats = {name: arm_stats(rows, threshold) for name, rows in arms.items()}
    longest = max(s["steps"] for s in stats.values())
    starts = [s for s in WINDOW_STARTS if s + 9 <= max(longest, 200)]
    evals = sorted({step for s in stats.values() for step in s["held_out"]})
    rewarded = any(s["held_out_reward"] for s in stats.values())
    eval_steps = " / ".join(map(str, evals))
    header = ["arm", "steps", "s/step", f"reward, 10-step means at steps {' / '.join(map(str, starts))}",
              f"first step where the 10-step mean ≥ {threshold:g}", "best 10-step mean (from step)",
              "token mean \\|Δlogp\\|", "k3", "seq KL", "token \\|Δlogp\\|, first / last 20 steps",
              f"held-out at steps {eval_steps}", *([f"held-out reward at steps {eval_steps}"] if rewarded else []),
              "skipped fp16 steps / loss scale"]
    lines = [f"| {' | '.join(header)} |", "|---" * len(header) + "|"]
    for name, s in stats.items():
        low, high = s["loss_scale"]
        reward = f"{' '.join(_fmt(s['held_out_reward'].get(e), '.2f') for e in evals)} | " if rewarded else ""
        lines.append(
            f"| {name} | {s['steps']} | {s['s_per_step']:.1f} | {' '.join(_fmt(s['windows'][w], '.2f') for w in starts)} | "
            f"{_fmt(s['first_step'], 'd')} | {_fmt(s['best'][0], '.2f')} ({s['best'][1]}) | "
            f"{_fmt(s['abs_logp_diff'], '.1e')} | {_fmt(s['k3'], '.1e')} | "
            f"{_fmt(s['seq_kl'], '.1e')} | {_fmt(s['abs_logp_diff_first_20'], '.1e')} / "
            f"{_fmt(s['abs_logp_diff_last_20'], '.1e')} | {' '.join(_fmt(s['held_out'].get(e), '.2f') for e in evals)} | "
            f"{reward}{s['skipped']:.0f} / {low:g}{'' if low == high else f'–{high:g}'} |")
    return lines


def trailing_mean(values: list[float], window: int = 10) -> list[float]:
    """Mean of the last ``window`` values at each step (fewer over the first steps)."""
    return [mean(values[max(0, i + 1 - window): i + 1]) for i in range(len(values))]


def figures(arms: dict[str, list[dict]], prefix: Path, title: str, threshold: float = 0.9) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = []
    for name, rows in arms.items():
        match = NAME.fullmatch(name)
        algo, dtype, rest = (match["algo"], match["dtype"], match["rest"]) if match else (name, "fp32", "")
        color = SHADES[dtype][{"s0": 0, "s1": 1}.get(rest, 2)]  # seed 0 dark, seed 1 light, others darker
        label = f"{LABELS.get(algo, algo)} {dtype} {rest} ({arm_stats(rows)['steps']} steps)"
        curves.append(([r for r in rows if "reward/mean" in r], STYLES.get(algo, "-."), color, label))
    longest = max(rows[-1]["step"] for rows, *_ in curves)

    def plot(ax, key: str) -> None:
        for rows, style, color, label in curves:
            ax.plot([r["step"] for r in rows], trailing_mean([r[key] for r in rows]), style, color=color, lw=1.4,
                    label=label)

    written = [Path(f"{prefix}_reward.png"), Path(f"{prefix}_mismatch.png")]
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    plot(ax, "reward/mean")
    ax.axhline(threshold, color="grey", lw=0.6)
    ax.set(xlabel="RL step", ylabel="training reward (mean of the last 10 steps)", ylim=(0, 1.02),
           xlim=(0, longest + 1), title=title)
    ax.legend(fontsize=7.5, loc="lower right", ncol=2)
    fig.tight_layout()
    fig.savefig(written[0], dpi=110)
    plt.close(fig)

    keys = [("mismatch/abs_logp_diff_mean", "token mean |Δlogp|"), ("mismatch/seq_kl", "sequence KL[μ‖π]")]
    fig, axes = plt.subplots(1, len(keys), figsize=(12, 5.2))
    for ax, (key, label) in zip(axes, keys):
        plot(ax, key)
        ax.set(yscale="log", xlabel="RL step", ylabel=f"{label} (mean of the last 10 steps)", xlim=(0, longest + 1),
               title=f"{label} per rollout")
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="lower center", ncol=5)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(written[1], dpi=110)
    plt.close(fig)
    return written


def command_line() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders holding NAME.metrics.jsonl or NAME/metrics.jsonl")
    parser.add_argument("--threshold", type=float, default=0.9, help="reward of the 'first step' column")
    parser.add_argument("--figures", type=Path, help="write PREFIX_reward.png and PREFIX_mismatch.png")
    parser.add_argument("--title", default="SmolLM2-135M-Instruct, counting, vLLM × DeepSpeed, H200")
    return parser


def main(argv=None) -> None:
    parser = command_line()
    args = parser.parse_args(argv)
    arms = load_arms(args.folders)
    if not arms:
        parser.error(f"no arm with 10 or more training steps in {' '.join(map(str, args.folders))}")
    print("\n".join(table(arms, args.threshold)))
    if args.figures:
        for path in figures(arms, args.figures, args.title, args.threshold):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
