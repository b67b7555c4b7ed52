"""Token-level IS policy gradient: one truncated importance weight per token.

    Δ_t    = sg(log π_θ,t) − log μ_t
    w_t    = min(exp Δ_t, C)                 C = ``algo.is_cap``, None = ∞
    loss_t = −w_t · A · log π_θ,t

Lower variance than the sequence weight of ``pg`` but biased: it ignores how earlier tokens
changed the state distribution. Qi et al. 2025 (arXiv 2510.26788) compare both.
"""

import math

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, Stats, masked_mean
from ..registry import register


@register("objective", "token-is", reads=("is_cap",))
class TokenISPGMixin:
    """−min(exp Δ_t, C)·A·log π_θ,t with Δ_t detached."""

    algo: AlgorithmSpec
    # Its weight is π_θ/μ: resolve() refuses a correction that weighs by π_old/μ on top of it.
    weighs_by_sampler = True

    def objective(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        mask = batch.mask
        delta = torch.where(mask > 0, batch.logprobs.detach() - batch.sampler_logprobs, 0.0)
        cap = self.algo.is_cap
        log_cap = math.inf if cap is None else math.log(cap)
        weight = delta.clamp(max=log_cap).exp()
        advantages = batch.advantages[:, None]
        per_token = -weight * advantages * batch.logprobs
        stats = {
            "loss/is_weight_mean": masked_mean(weight, mask).item(),
            "mismatch/is_clip_frac": masked_mean((delta > log_cap).float(), mask).item(),
        }
        return per_token, stats
