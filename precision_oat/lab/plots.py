"""Figures of the mismatch lab, in the form of the paper's Fig. 5 (matplotlib, Agg backend).

``token_probs.png``: per dtype, each response token's sampler probability μ against the
trainer's π (on the diagonal when they agree). ``seq_logratio.png``: per dtype, each
sequence's log-ratio ρ = log(π/μ) = Σ_t Δ_t against its response length, with the
least-squares line and the sequence-level KL[μ‖π] estimate. ``atlas.png`` (two arms or more): what
each precision choice does to the mismatch and what it costs in sampler throughput.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _figure(panels: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 4.0), squeeze=False)
    return plt, fig, axes[0]


def plot_token_probs(histograms: dict[str, dict[str, np.ndarray]], path: Path, max_points: int = 50_000) -> None:
    """One panel per dtype: μ (x) versus π (y) of every response token."""
    plt, fig, axes = _figure(len(histograms))
    rng = np.random.default_rng(0)
    for ax, (dtype, h) in zip(axes, histograms.items()):
        mu, pi = h["mismatch/sampler_prob"], h["mismatch/trainer_prob"]
        if len(mu) > max_points:
            keep = rng.choice(len(mu), max_points, replace=False)
            mu, pi = mu[keep], pi[keep]
        ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, zorder=0)
        ax.scatter(mu, pi, s=2, alpha=0.4, color="C0" if dtype == "bf16" else "C1" if dtype == "fp16" else "C2")
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="sampler probability μ", ylabel="trainer probability π",
               title=f"{dtype}: token probabilities")
        ax.set_aspect("equal")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_seq_logratio(histograms: dict[str, dict[str, np.ndarray]], metrics: dict[str, dict], path: Path) -> None:
    """One panel per dtype: ρ against response length, fitted slope and KL[μ‖π] printed on it."""
    plt, fig, axes = _figure(len(histograms))
    for ax, (dtype, h) in zip(axes, histograms.items()):
        rho, length = h["mismatch/seq_logratio"], h["mismatch/seq_length"]
        m = metrics[dtype]
        ax.scatter(length, rho, s=6, alpha=0.5, color="C0" if dtype == "bf16" else "C1" if dtype == "fp16" else "C2")
        ax.axhline(0.0, color="0.6", lw=0.8, zorder=0)
        if len(length):
            slope = m["mismatch/seq_logratio_slope"]
            xs = np.array([length.min(), length.max()])
            ax.plot(xs, rho.mean() + slope * (xs - length.mean()), color="k", lw=1.2)
        ax.text(0.03, 0.97, f"slope {m['mismatch/seq_logratio_slope']:.2e} / token\n"
                f"KL[μ‖π] {m['mismatch/seq_kl']:.2e}\nstd ρ {m['mismatch/seq_logratio_std']:.2e}",
                transform=ax.transAxes, va="top", fontsize=9, family="monospace",
                bbox=dict(facecolor="white", alpha=0.8, edgecolor="0.8"))
        ax.set(xlabel="response length (tokens)", ylabel="log(π/μ) of the sequence",
               title=f"{dtype}: sequence log-ratio")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_atlas(arms: dict[str, dict], path: Path) -> None:
    """Two panels over the arms (label → the lab's metrics): the token mean |Δlogp| (log scale) with the share of
    tokens whose π/μ lies outside [0.9, 1.1] on each bar, and the sampler's tokens/s against that mismatch."""
    plt, fig, (bars, cost) = _figure(2)
    labels = list(arms)
    diff = [arms[a]["mismatch/abs_logp_diff_mean"] for a in labels]
    speed = [arms[a]["sample_tokens_per_s"] / 1000 for a in labels]
    colors = [f"C{i}" for i in range(len(labels))]
    bars.bar(range(len(labels)), diff, color=colors)
    for i, a in enumerate(labels):
        bars.text(i, diff[i] * 1.15, f"{arms[a]['mismatch/ratio_out_of_band']:.0%}", ha="center", fontsize=8)
    bars.set_yscale("log")
    bars.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=8)
    bars.set(ylabel="token mean |Δlogp|", title="mismatch (share outside [0.9, 1.1] above)")
    cost.scatter(diff, speed, color=colors)
    for i, a in enumerate(labels):
        cost.annotate(a, (diff[i], speed[i]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    cost.set_xscale("log")
    cost.set(xlabel="token mean |Δlogp|", ylabel="sampler k tokens/s", title="throughput against mismatch")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def load_histograms(path) -> dict[str, dict]:
    """The lab's ``histograms.npz`` back as {dtype: {key: array}}."""
    import numpy as np

    out: dict[str, dict] = {}
    with np.load(path) as data:
        for name in data.files:
            dtype, key = name.split("|", 1)
            out.setdefault(dtype, {})[key] = data[name]
    return out
