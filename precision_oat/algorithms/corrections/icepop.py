"""IcePop: token-level importance sampling inside a two-sided band, every token outside it dropped.

    k_t = π_old,t / μ_t = exp(log π_old,t − log μ_t)
    w_t = k_t · 1{α ≤ k_t ≤ β}        α = ``algo.icepop_low`` (0.5), β = ``algo.icepop_high`` (5)

Where trainer and sampler disagree by more than the band allows, in either direction, the
token's gradient is discarded; inside it the token keeps its weight k_t (IcePop's M(k)).
``token-mis`` is the one-sided case (α = 0). Ling Team 2025, "Every Step Evolves: Scaling
Reinforcement Learning for Trillion-Scale Thinking Model" (Ring-1T, arXiv 2510.18855), §IcePop;
α = 0.5 and β = 5 are the values of IcePop's introduction (Ling Team's blog post "Small Leak Can
Sink a Great Ship—Boost RL Training on MoE with IcePop!", 2025).
"""

import math

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, Stats, masked_mean
from ..registry import register
from ._ratio import dropped_shares, token_log_ratio


@register("correction", "icepop", reads=("icepop_low", "icepop_high"))
class IcePopMixin:
    """π_old/μ per token, zero outside [α, β]."""

    algo: AlgorithmSpec
    # Its weight is π_old/μ: resolve() refuses it beside an objective that weighs by π_θ/μ already.
    weighs_by_sampler = True

    def correction(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        log_ratio = token_log_ratio(batch)
        kept = (log_ratio >= math.log(self.algo.icepop_low)) & (log_ratio <= math.log(self.algo.icepop_high))
        weight = torch.where(kept, log_ratio.exp(), 0.0)
        token_share, _ = dropped_shares(~kept, batch.mask)
        stats = {
            "mismatch/is_weight_mean": masked_mean(weight, batch.mask).item(),
            "mismatch/icepop_mask_frac": token_share,
        }
        return weight, stats
