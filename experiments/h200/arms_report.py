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

The windows, means and step times are those of ``python -m precision_oat.compare`` (``precision_oat/compare/``);
this table adds the fixed window starts, the first step at the threshold and the H200 columns.

With ``--figures PREFIX``: the comparison's figures, PREFIX_reward.png (training reward, mean of the last
10 steps) and PREFIX_mismatch.png (token |Δlogp| and sequence KL per step, 10-step means, log scale); the
seeds of an arm (NAME's trailing ``s<N>``) make one curve, their range shaded; colour by dtype, line style
by algorithm.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from precision_oat.compare.figures import draw
from precision_oat.compare.loading import RunRecord, config_from_name, group_runs, metrics_files
from precision_oat.compare.stats import best_window, mean_of, seconds_per_step, window_means
from precision_oat.runs.log import read_metrics

WINDOW_STARTS = (1, 21, 41, 61, 91, 141, 191, 241, 291)


def load_arms(folders: list[Path]) -> dict[str, list[dict]]:
    """NAME → the arm's training rows (with a reward) and evaluation rows, in step order; sorted by NAME."""
    arms, where = {}, {}
    for folder in folders:
        for name, path in metrics_files(folder).items():
            if name in where:
                raise SystemExit(f"arms_report: {where[name]} and {folder} both hold an arm named {name}; "
                                 "rename one of them (NAME = ALGO-DTYPE-REST, e.g. a suffix to REST)")
            where[name] = folder
            rows = read_metrics(path)
            if sum("reward/mean" in r for r in rows) >= 10:
                arms[name] = rows
    return dict(sorted(arms.items()))


def arm_stats(rows: list[dict], threshold: float = 0.9) -> dict:
    """The figures of one arm's row (see the module docstring)."""
    train = [r for r in rows if "reward/mean" in r]
    scales = [r["train/loss_scale"] for r in train if "train/loss_scale" in r] or [1.0]
    weights = [r["loss/is_weight_mean"] for r in train if "loss/is_weight_mean" in r]
    means = window_means(train)  # every s whose window fits in the run
    fixed = {**means, **{s: None for s in WINDOW_STARTS if s not in means}}
    return {
        "steps": train[-1]["step"],
        "s_per_step": seconds_per_step(train),
        "windows": {s: fixed[s] for s in WINDOW_STARTS},
        "first_step": next((s for s, m in means.items() if (m or 0) >= threshold), None),
        "best": best_window(means),
        "abs_logp_diff": mean_of(train, "mismatch/abs_logp_diff_mean"),
        "k3": mean_of(train, "mismatch/k3"),
        "seq_kl": mean_of(train, "mismatch/seq_kl"),
        "abs_logp_diff_first_20": mean_of(train, "mismatch/abs_logp_diff_mean", slice(0, 20)),
        "abs_logp_diff_last_20": mean_of(train, "mismatch/abs_logp_diff_mean", slice(-20, None)),
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
            f"| {name} | {s['steps']} | {_fmt(s['s_per_step'], '.1f')} | {' '.join(_fmt(s['windows'][w], '.2f') for w in starts)} | "
            f"{_fmt(s['first_step'], 'd')} | {_fmt(s['best'][0], '.2f')} ({s['best'][1]}) | "
            f"{_fmt(s['abs_logp_diff'], '.1e')} | {_fmt(s['k3'], '.1e')} | "
            f"{_fmt(s['seq_kl'], '.1e')} | {_fmt(s['abs_logp_diff_first_20'], '.1e')} / "
            f"{_fmt(s['abs_logp_diff_last_20'], '.1e')} | {' '.join(_fmt(s['held_out'].get(e), '.2f') for e in evals)} | "
            f"{reward}{s['skipped']:.0f} / {low:g}{'' if low == high else f'–{high:g}'} |")
    return lines


def arm_groups(arms: dict[str, list[dict]]) -> list:
    """The arms as the library's groups of seeds, named as their NAMEs say (no ``s<N>``: seed 0, as arms.sh
    names them)."""
    return group_runs([RunRecord(name, Path(name), rows, {"seed": 0, **config_from_name(name)})
                       for name, rows in arms.items()])


def figures(arms: dict[str, list[dict]], prefix: Path, title: str, threshold: float = 0.9) -> list[Path]:
    """The library's comparison figures of the arms, their seeds grouped."""
    return draw(arm_groups(arms), prefix, title, threshold=threshold)


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
