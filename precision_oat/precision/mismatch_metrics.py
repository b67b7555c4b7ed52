"""Scalar metrics and raw arrays of the sampler→trainer mismatch.

Per response token Δ_t = log π_t − log μ_t (π the trainer, μ the sampler); per sequence
ρ = Σ_t Δ_t. Token means run over every response token of the batch; sequence statistics
over the sequences with at least one response token. KL estimators follow Schulman 2020,
"Approximating KL divergence" (k1, k2, k3 of KL[μ‖π] under samples from μ).

    mismatch/k1                    mean(log μ − log π)
    mismatch/k2                    ½ mean(Δ²)
    mismatch/k3                    mean(exp Δ − 1 − Δ)
    mismatch/abs_logp_diff_mean    mean |Δ|         (…_max: max |Δ|)
    mismatch/prob_diff_max         max (μ − π)      (…_min: min (μ − π))
    mismatch/seq_logratio_mean     mean ρ           (…_std: population std, …_abs_max: max |ρ|)
    mismatch/seq_logratio_slope    least-squares slope of ρ against response length
    mismatch/seq_kl                mean over sequences of Σ_t (exp Δ − 1 − Δ) ≥ 0
    mismatch/ratio_out_of_band     share of tokens whose π/μ = exp Δ lies outside :data:`RATIO_BAND`

:func:`mismatch_breakdown` says where the mismatch lives. Buckets are half-open [lo, hi),
the last one open to the right; a bucket without tokens gets no key.

    mismatch/mu/<lo>-<hi>/abs_logp_diff_mean        mean |Δ| over tokens with lo ≤ μ < hi
    mismatch/mu/<lo>-<hi>/token_frac                their share of the response tokens
    mismatch/position/<lo>-<hi>/abs_logp_diff_mean  mean |Δ| over tokens at those positions
    mismatch/seq_logratio_slope                     as above
    mismatch/seq_abs_logratio_slope                 least-squares slope of |ρ| against length
"""

from __future__ import annotations

import math

import numpy as np
import torch

PROB_BUCKETS = (0.0, 0.1, 0.5, 0.9, 1.0)
"""Edges of the sampler-probability buckets: [0, 0.1), [0.1, 0.5), [0.5, 0.9), [0.9, 1]."""
POSITION_BUCKETS = (0, 16, 64, 256, 1024, math.inf)
"""Edges of the buckets of a token's index within its response: [0, 16), …, [1024, ∞)."""

RATIO_BAND = (0.9, 1.1)
"""The band of π/μ whose outside share ``mismatch/ratio_out_of_band`` reports (the measure peers publish)."""

_KEYS = (
    "k1", "k2", "k3", "abs_logp_diff_mean", "abs_logp_diff_max", "prob_diff_max", "prob_diff_min",
    "seq_logratio_mean", "seq_logratio_std", "seq_logratio_abs_max", "seq_logratio_slope", "seq_kl",
    "ratio_out_of_band",
)


def _prepare(sampler_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor, mask: torch.Tensor):
    """float64 detached copies, the boolean mask, and the rows that hold a response token."""
    log_mu = sampler_logprobs.detach().to(torch.float64)
    log_pi = trainer_logprobs.detach().to(torch.float64)
    keep = mask.detach() > 0
    rows = keep.any(-1)
    return log_mu, log_pi, keep, rows


def _least_squares_slope(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Slope b of the least-squares line y ≈ a + b·x; 0 when x has fewer than two distinct values."""
    centred = x - x.mean()
    spread = (centred**2).sum()
    slope = (centred * (y - y.mean())).sum() / torch.where(spread > 0, spread, 1.0)
    return torch.where(spread > 0, slope, 0.0)


def _nonempty_buckets(edges: tuple[float, ...], sums_then_counts: list[float]):
    """(label "<lo>-<hi>", (|Δ| sum, token count)) for every bucket that holds a token."""
    n = len(edges) - 1
    for lo, hi, abs_sum, count in zip(edges, edges[1:], sums_then_counts[:n], sums_then_counts[n:]):
        if count > 0:
            yield f"{lo:g}-{hi:g}", (abs_sum, count)


def mismatch_metrics(
    sampler_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """The scalars in the module docstring, as python floats (all 0 when the mask is empty)."""
    log_mu, log_pi, keep, rows = _prepare(sampler_logprobs, trainer_logprobs, mask)
    if not keep.any():
        return {f"mismatch/{key}": 0.0 for key in _KEYS}
    delta = torch.where(keep, log_pi - log_mu, 0.0)
    k3_token = delta.exp() - 1.0 - delta  # 0 off the mask because Δ = 0 there
    d = delta[keep]
    prob_diff = log_mu[keep].exp() - log_pi[keep].exp()

    rho = delta.sum(-1)[rows]
    lengths = keep.sum(-1)[rows].to(torch.float64)
    slope = _least_squares_slope(lengths, rho)

    out = {
        "k1": (-d).mean(),
        "k2": 0.5 * (d**2).mean(),
        "k3": k3_token[keep].mean(),
        "abs_logp_diff_mean": d.abs().mean(),
        "abs_logp_diff_max": d.abs().max(),
        "prob_diff_max": prob_diff.max(),
        "prob_diff_min": prob_diff.min(),
        "seq_logratio_mean": rho.mean(),
        "seq_logratio_std": rho.std(correction=0),
        "seq_logratio_abs_max": rho.abs().max(),
        "seq_logratio_slope": slope,
        "seq_kl": k3_token.sum(-1)[rows].mean(),
        "ratio_out_of_band": ((d.exp() < RATIO_BAND[0]) | (d.exp() > RATIO_BAND[1])).to(torch.float64).mean(),
    }
    return {f"mismatch/{key}": float(value) for key, value in out.items()}


def mismatch_histograms(
    sampler_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor, mask: torch.Tensor
) -> dict[str, np.ndarray]:
    """Raw 1-D float64 arrays for histograms and scatter plots.

    Per response token: ``mismatch/token_logp_diff`` (Δ), ``mismatch/sampler_prob`` (μ),
    ``mismatch/trainer_prob`` (π). Per sequence: ``mismatch/seq_logratio`` (ρ) and
    ``mismatch/seq_length`` (response tokens).
    """
    log_mu, log_pi, keep, rows = _prepare(sampler_logprobs, trainer_logprobs, mask)
    delta = torch.where(keep, log_pi - log_mu, 0.0)
    arrays = {
        "token_logp_diff": delta[keep],
        "seq_logratio": delta.sum(-1)[rows],
        "seq_length": keep.sum(-1)[rows].to(torch.float64),
        "sampler_prob": log_mu[keep].exp(),
        "trainer_prob": log_pi[keep].exp(),
    }
    return {f"mismatch/{key}": value.cpu().numpy() for key, value in arrays.items()}


def mismatch_breakdown(
    sampler_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """Mean |Δ| by sampler probability μ and by position in the response, and ρ's growth with length.

    A token's position is its index among the response tokens of its row, so responses may
    start at any column. Empty buckets are left out; the slopes are 0 with fewer than two
    distinct response lengths. Vectorised on the tensors' device, in float64.
    """
    log_mu, log_pi, keep, rows = _prepare(sampler_logprobs, trainer_logprobs, mask)
    # padding may hold −inf or nan; zero it before it can reach a sum
    delta = torch.where(keep, log_pi - log_mu, 0.0)
    mu = torch.where(keep, log_mu, 0.0).exp()
    position = keep.cumsum(-1) - 1
    weight = keep.to(torch.float64).flatten()
    abs_delta = delta.abs().flatten() * weight

    def sums_and_counts(values: torch.Tensor, edges: tuple[float, ...]) -> torch.Tensor:
        inner = torch.tensor(edges[1:-1], dtype=values.dtype, device=values.device)
        bucket = torch.bucketize(values, inner, right=True).flatten()  # lo ≤ value < hi
        sums = abs_delta.new_zeros(len(edges) - 1).index_add_(0, bucket, abs_delta)
        counts = abs_delta.new_zeros(len(edges) - 1).index_add_(0, bucket, weight)
        return torch.cat([sums, counts])

    rho = delta.sum(-1)[rows]
    lengths = keep.sum(-1)[rows].to(torch.float64)
    slopes = torch.stack([_least_squares_slope(lengths, rho), _least_squares_slope(lengths, rho.abs())])
    values = torch.cat([slopes, sums_and_counts(mu, PROB_BUCKETS), sums_and_counts(position, POSITION_BUCKETS)])
    values = values.tolist()  # the one device-to-host transfer
    n_mu = len(PROB_BUCKETS) - 1
    by_mu, by_position = values[2 : 2 + 2 * n_mu], values[2 + 2 * n_mu :]

    out = {"mismatch/seq_logratio_slope": values[0], "mismatch/seq_abs_logratio_slope": values[1]}
    total = sum(by_mu[n_mu:])
    for label, (abs_sum, count) in _nonempty_buckets(PROB_BUCKETS, by_mu):
        out[f"mismatch/mu/{label}/abs_logp_diff_mean"] = abs_sum / count
        out[f"mismatch/mu/{label}/token_frac"] = count / total
    for label, (abs_sum, count) in _nonempty_buckets(POSITION_BUCKETS, by_position):
        out[f"mismatch/position/{label}/abs_logp_diff_mean"] = abs_sum / count
    return out


def ratio(num: float, den: float) -> float:
    """num / den, with inf for a nonzero num over 0 and nan (undefined) for 0 / 0."""
    return num / den if den != 0 else math.inf if num != 0 else math.nan


def times(ratio: float, digits: int = 1) -> str:
    """A ratio as the console shows it: ``8.2x``, or ``inf`` / ``nan`` as they are."""
    return f"{ratio:.{digits}f}x" if math.isfinite(ratio) else str(ratio)
