"""IS-PG: policy gradient with one sequence-level importance weight against the sampler.

    ρ      = Σ_t m_t (sg(log π_θ) − log μ)
    w      = min(exp ρ, C)                   C = ``algo.is_cap``, None = ∞
    loss_t = −w · A · log π_θ

∂loss_t/∂log π_θ,t = −w·A, so the update is the unbiased off-policy REINFORCE gradient
E_μ[(π_θ/μ) A ∇log π_θ]. With no update between sampling and this loss, π_θ = π_old and w
measures the sampler→trainer mismatch alone. Qi et al. 2025 (arXiv 2510.26788), the
"importance-sampled policy gradient" baseline.
"""

import math

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, Stats, masked_sum, sequence_mean
from ..registry import register


@register("objective", "pg", reads=("is_cap",))
class ISPGMixin:
    """−min(exp ρ, C)·A·log π_θ with ρ the detached sequence log-ratio π_θ vs μ."""

    algo: AlgorithmSpec
    # Its weight is π_θ/μ: resolve() refuses a correction that weighs by π_old/μ on top of it.
    weighs_by_sampler = True

    def objective(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        mask = batch.mask
        delta = torch.where(mask > 0, batch.logprobs.detach() - batch.sampler_logprobs, 0.0)
        rho = masked_sum(delta, mask)
        cap = self.algo.is_cap
        log_cap = math.inf if cap is None else math.log(cap)
        weight = rho.clamp(max=log_cap).exp()
        advantages = batch.advantages
        per_token = -(weight * advantages)[:, None] * batch.logprobs
        stats = {
            "loss/is_weight_mean": sequence_mean(weight),
            "mismatch/is_clip_frac": sequence_mean(rho > log_cap),
        }
        return per_token, stats
