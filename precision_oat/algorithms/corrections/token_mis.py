"""Token-level masked importance sampling (MIS).

    w_t = exp(log π_old,t − log μ_t) · 1{π_old,t/μ_t ≤ C}     C = ``algo.correction_cap``

Unlike TIS, a token whose ratio exceeds C is *dropped* (weight 0) rather than truncated.
Liu et al. 2025, "When Speed Kills Stability: Demystifying RL Collapse from the
Training-Inference Mismatch".
"""

import math

import torch

from ..policy_loss import AlgorithmSpec, PolicyBatch, Stats, masked_mean
from ..registry import register
from ._ratio import require_cap, token_log_ratio


@register("correction", "token-mis", reads=("correction_cap",))
class TokenMISMixin:
    """π_old/μ per token, zero where it exceeds C."""

    algo: AlgorithmSpec
    # It reads algo.correction_cap: resolve() asks for --correction-cap when the recipe sets none.
    needs_cap = True
    # Its weight is π_old/μ: resolve() refuses it beside an objective that weighs by π_θ/μ already.
    weighs_by_sampler = True

    def correction(self, batch: PolicyBatch) -> tuple[torch.Tensor, Stats]:
        log_cap = math.log(require_cap(self.algo, "token-mis"))
        log_ratio = token_log_ratio(batch)
        masked_out = log_ratio > log_cap
        weight = torch.where(masked_out, 0.0, log_ratio.exp())
        stats = {
            "mismatch/is_weight_mean": masked_mean(weight, batch.mask).item(),
            "mismatch/mis_mask_frac": masked_mean(masked_out.float(), batch.mask).item(),
        }
        return weight, stats
