"""The comparison's figures: reward and mismatch against step, one curve per group, its seeds' range shaded
(a seed that ran longer than the others goes on alone as a thin line).

Colour by dtype (a darker or lighter shade for each further group of that dtype), line style by algorithm.
matplotlib is imported only here, when a figure is drawn.
"""

from __future__ import annotations

from pathlib import Path
from statistics import mean
from typing import Optional

from precision_oat.compare.loading import Group
from precision_oat.compare.stats import WINDOW
from precision_oat.errors import UserError

STYLES = {"pg": "-", "grpo": "--", "grpo-tis": ":", "gspo": "-.", "grpo-icepop": (0, (5, 1, 1, 1, 1, 1)),
          "grpo-geo-mask": (0, (2, 1))}
SHADES = {"fp16": ("#d95f02", "#fdae6b", "#a63603", "#e6ab02", "#7f2704"),
          "bf16": ("#1f5fa8", "#7fb2e5", "#08306b", "#17a2b8", "#5e60ce"),
          "fp32": ("#2ca02c", "#98df8a", "#00441b", "#66a61e", "#1b7837")}
OTHER_SHADES = ("#6a3d9a", "#cab2d6", "#3f007d", "#e7298a", "#984ea3")
MISMATCH = [("mismatch/abs_logp_diff_mean", "token mean |Δlogp|"), ("mismatch/seq_kl", "sequence KL[μ‖π]")]


def trailing_mean(values: list[float], window: int = WINDOW) -> list[float]:
    """Mean of the last ``window`` values at each step (fewer over the first steps)."""
    return [mean(values[max(0, i + 1 - window): i + 1]) for i in range(len(values))]


def _trailing_by_run(group: Group, key: str, smooth: int) -> list[dict[int, float]]:
    """For each seed, its trailing ``smooth``-step mean of ``key`` at each step it logged ``key``."""
    out = []
    for run in group.runs:
        rows = [r for r in run.train if key in r]
        out.append(dict(zip((r["step"] for r in rows), trailing_mean([r[key] for r in rows], smooth))))
    return out


def _common_steps(by_run: list[dict[int, float]]) -> set[int]:
    """The steps at which every seed logged the key."""
    return set.intersection(*(set(run) for run in by_run))


def curve(group: Group, key: str, smooth: int) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps, and at each the mean, min and max over the seeds of their trailing ``smooth``-step means of ``key``.

    Only the steps every seed logged ``key`` at: a mean over fewer seeds would jump where one of them ends.
    """
    by_run = _trailing_by_run(group, key, smooth)
    steps = sorted(_common_steps(by_run))
    values = [[run[s] for run in by_run] for s in steps]
    return steps, [mean(v) for v in values], [min(v) for v in values], [max(v) for v in values]


def tails(group: Group, key: str, smooth: int) -> list[tuple[list[int], list[float]]]:
    """The seeds that ran on past the group's curve, each from the curve's last step on (its trailing means):
    a longer seed's later steps, which the curve leaves out, drawn on their own."""
    by_run = _trailing_by_run(group, key, smooth)
    last = max(_common_steps(by_run), default=0)  # a lone seed's curve is all of it, so it has no tail
    out = []
    for run in by_run:
        steps = sorted(s for s in run if s >= last)
        if any(s > last for s in steps):
            out.append((steps, [run[s] for s in steps]))
    return out


def looks(groups: list[Group]) -> list[tuple[str, str, str]]:
    """(line style, colour, legend label) of each group."""
    seen: dict[str, int] = {}
    out = []
    for group in groups:
        first = group.runs[0]
        dtype = first.dtype.split("/")[-1]
        shades = SHADES.get(dtype, OTHER_SHADES)
        shade = shades[seen.get(dtype, 0) % len(shades)]
        seen[dtype] = seen.get(dtype, 0) + 1
        seeds = f", seeds {', '.join(map(str, group.seeds))}" if len(group.runs) > 1 else ""
        steps = sorted({r.train[-1]["step"] for r in group.runs})
        span = str(steps[0]) if len(steps) == 1 else f"{steps[0]}–{steps[-1]}"
        out.append((STYLES.get(first.algo, (0, (3, 2))), shade, f"{group.label} ({span} steps{seeds})"))
    return out


def draw(groups: list[Group], prefix: Path, title: str = "", smooth: int = WINDOW,
         threshold: Optional[float] = None) -> list[Path]:
    """Write PREFIX_reward.png and PREFIX_mismatch.png; ``threshold`` draws a reward line."""
    try:
        import matplotlib
    except ImportError:
        raise UserError("the figures need matplotlib: pip install matplotlib, or pass --no-plots") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    styles = looks(groups)
    longest = max(r.train[-1]["step"] for g in groups for r in g.runs)
    ylabel = f"(mean of the last {smooth} steps)" if smooth > 1 else ""

    def plot(ax, key: str) -> list[float]:
        """Draw each group's curve of ``key``; the values drawn."""
        drawn = []
        for group, (style, color, label) in zip(groups, styles):
            steps, average, low, high = curve(group, key, smooth)
            # A short curve gets its points marked: a one-step run is a point, not a line.
            ax.plot(steps, average, linestyle=style, color=color, lw=1.4, label=label,
                    marker="o" if len(steps) < 10 else None, markersize=3)
            if len(group.runs) > 1:
                ax.fill_between(steps, low, high, color=color, alpha=0.2, lw=0)
            for tail_steps, tail in tails(group, key, smooth):
                ax.plot(tail_steps, tail, linestyle=style, color=color, lw=0.8, alpha=0.8)
                drawn += tail
            drawn += low + high
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        return drawn

    prefix.parent.mkdir(parents=True, exist_ok=True)
    written = [Path(f"{prefix}_reward.png"), Path(f"{prefix}_mismatch.png")]
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    rewards = plot(ax, "reward/mean")
    if 0 <= min(rewards) and max(rewards) <= 1:
        ax.set_ylim(0, 1.02)  # a reward in [0, 1] (the tasks' own) on its whole scale
    if threshold is not None:
        ax.axhline(threshold, color="grey", lw=0.6)
    ax.set(xlabel="RL step", ylabel=f"training reward {ylabel}", xlim=(0, longest + 1), title=title)
    # Below the axes, where it hides no curve however many groups there are.
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(written[0], dpi=110, bbox_inches="tight")  # a long title or legend widens the image, not cut
    plt.close(fig)

    fig, axes = plt.subplots(1, len(MISMATCH), figsize=(12, 5.2))
    for ax, (key, label) in zip(axes, MISMATCH):
        plot(ax, key)
        ax.set(yscale="log", xlabel="RL step", ylabel=f"{label} {ylabel}", xlim=(0, longest + 1),
               title=f"{label} per rollout")
    columns = min(3, len(groups))
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="lower center", ncol=columns)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.035 * -(-len(groups) // columns), 1, 1))
    fig.savefig(written[1], dpi=110, bbox_inches="tight")
    plt.close(fig)
    return written
