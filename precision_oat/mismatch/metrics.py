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
"""

from __future__ import annotations

import numpy as np
import torch

_KEYS = (
    "k1", "k2", "k3", "abs_logp_diff_mean", "abs_logp_diff_max", "prob_diff_max", "prob_diff_min",
    "seq_logratio_mean", "seq_logratio_std", "seq_logratio_abs_max", "seq_logratio_slope", "seq_kl",
)


def _prepare(sampler_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor, mask: torch.Tensor):
    """float64 detached copies, the boolean mask, and the rows that hold a response token."""
    log_mu = sampler_logprobs.detach().to(torch.float64)
    log_pi = trainer_logprobs.detach().to(torch.float64)
    keep = mask.detach() > 0
    rows = keep.any(-1)
    return log_mu, log_pi, keep, rows


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
    centred = lengths - lengths.mean()
    spread = (centred**2).sum()
    slope = (centred * (rho - rho.mean())).sum() / spread if spread > 0 else torch.zeros((), dtype=torch.float64)

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
